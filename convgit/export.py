"""``export``: a thread back out, to replay it to an API or to read it.

- ``native``: convgit's own commit shape with every message's ``id`` and ``parent`` (import
  re-derives and checks them, so importing it into an empty store reproduces the same ids);
  attachment bytes travel inline as ``data_base64``. A thread's document also carries what
  is not in its messages: its name, where it was forked from, and every turn recorded on it
  (its reflog lines and the turns they name, with an import turn's per-message turns), so
  the same threads and provenance come back (``ingest/native.py`` reads it). Several
  threads (``--all``) are one document: ``{"convgit": {...}, "threads": [...]}``.
- ``openai``: a Chat Completions request (``{"messages": [...]}``).
- ``anthropic``: a Messages request (``{"system", "messages"}``; tool results as user
  ``tool_result`` blocks).
- ``markdown``: for reading.
- ``jsonl``: one native thread document per line (``--all``: one per thread).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec

from . import graph, revparse
from .errors import InvalidInput
from .refformat import applied_entries
from .objects import AttachmentPart, Blob, OpaquePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart, Turn

FORMATS = ("native", "openai", "anthropic", "markdown", "jsonl")
EXPORT_VERSION = 1  # the "convgit": {"version": ...} marker of a native export document


def _text(repo, p) -> str:
    if getattr(p, "blob", None) and isinstance(p, (TextPart, ReasoningPart)):
        obj = repo.objects.read(p.blob)
        return obj.data.decode("utf-8", "surrogatepass") if isinstance(obj, Blob) else ""
    return p.text


def _native_part(repo, p) -> dict:
    d = msgspec.to_builtins(p)
    if isinstance(p, (TextPart, ReasoningPart)) and p.blob:
        d["text"] = _text(repo, p)
        d.pop("blob", None)
    if isinstance(p, AttachmentPart) and p.blob:
        obj = repo.objects.read(p.blob)
        if isinstance(obj, Blob):
            d.pop("blob", None)
            d.pop("size", None)
            d["data_base64"] = base64.b64encode(obj.data).decode()
    return d


def thread_messages(repo, rev: str) -> tuple[str, str | None, list]:
    """``(tip, thread or None, [(id, message), ...] root first)`` for revision ``rev``."""
    tip, thread = revparse.resolve_with_thread(repo, rev)
    pairs = list(graph.iter_ancestry(repo.objects, tip))
    pairs.reverse()
    return tip, thread, pairs


def native_doc(repo, rev: str, forks: dict[str, dict | None] | None = None) -> dict:
    """One thread (or a message's history) as a native export document (docs/json.md §9).
    ``forks``: thread → fork origin, from ``fork_origins`` (read once for many threads)."""
    tip, thread, pairs = thread_messages(repo, rev)
    msgs = []
    for oid, m in pairs:
        d: dict[str, Any] = {"role": m.role, "parts": [_native_part(repo, p) for p in m.parts]}
        if m.meta:
            d["meta"] = m.meta
        d["id"] = oid
        if m.parent:
            d["parent"] = m.parent
        msgs.append(d)
    doc: dict[str, Any] = {"convgit": {"version": EXPORT_VERSION}, "thread": thread, "tip": tip}
    if thread is not None:
        doc["forked_from"] = (forks if forks is not None else fork_origins(repo)).get(thread)
        doc["reflog"], doc["turns"] = thread_turns(repo, thread)
    doc["messages"] = msgs
    return doc


def native_bundle(repo, revs: list[str], progress=None) -> dict:
    """Several threads as one native document (``export --all -f native``)."""
    forks = fork_origins(repo)
    docs = []
    for i, r in enumerate(revs):
        docs.append(native_doc(repo, r, forks))
        if progress is not None:
            progress(i + 1, len(revs))
    return {"convgit": {"version": EXPORT_VERSION}, "threads": docs}


def thread_turns(repo, thread: str) -> tuple[list[dict], list[dict]]:
    """A thread's recorded history: its reflog lines that name a turn (oldest first) and every
    turn object they name, each import turn followed by the per-message turns its
    ``meta.turns`` lists. A turn is exported as all its fields (``msgspec.to_builtins``) plus
    its ``id``; import re-encodes it and checks the id, so it comes back as the same object."""
    reflog: list[dict] = []
    turns: dict[str, dict] = {}
    for e in applied_entries(repo.refs.read_log(thread), repo.refs.read(thread)):  # (moves that happened)
        t = graph.find_turn(repo.objects, e.turn) if e.turn else None
        if t is None:  # no turn, or one gc has taken: nothing to carry
            continue
        reflog.append({"old": e.old, "new": e.new, "time_ms": e.time_ms, "turn": e.turn, "message": e.message})
        _add_turn(turns, e.turn, t)
        subs = (t.meta or {}).get("turns") if t.kind == "import" else None
        for sid in subs if isinstance(subs, list) else ():
            sub = graph.find_turn(repo.objects, sid) if isinstance(sid, str) else None
            if sub is not None:
                _add_turn(turns, sid, sub)
    return reflog, list(turns.values())


def _add_turn(turns: dict[str, dict], tid: str, t: Turn) -> None:
    if tid not in turns:
        turns[tid] = {"id": tid, **msgspec.to_builtins(t)}



def fork_origins(repo) -> dict[str, dict | None]:
    """thread → ``{"thread", "message"}`` it was forked from (None: not a fork)."""
    out: dict[str, dict | None] = {}
    for r in repo.index.thread_rows():
        f_thread, f_msg = r["forked_from_thread"], r["forked_from_message"]
        out[r["name"]] = None if f_thread is None and f_msg is None else {"thread": f_thread, "message": f_msg}
    return out


def openai_doc(repo, rev: str) -> dict:
    """The thread at ``rev`` as an OpenAI Chat Completions request (``{"messages": [...]}``),
    ready to replay."""
    _, _, pairs = thread_messages(repo, rev)
    out = []
    for _, m in pairs:
        texts = [_text(repo, p) for p in m.parts if isinstance(p, TextPart)]
        calls = [p for p in m.parts if isinstance(p, ToolCallPart)]
        results = [p for p in m.parts if isinstance(p, ToolResultPart)]
        reasoning = [_text(repo, p) for p in m.parts if isinstance(p, ReasoningPart) and _text(repo, p)]
        if m.role == "tool" or (results and not texts and not calls):
            for r in results or [ToolResultPart(output="\n".join(texts))]:
                if (m.meta or {}).get("source_role") == "function":  # legacy: as it was sent
                    out.append({"role": "function", "name": r.name, "content": _as_str(r.output)})
                else:
                    out.append({"role": "tool", "tool_call_id": r.tool_call_id, "content": _as_str(r.output)})
            continue
        msg: dict[str, Any] = {"role": m.role}
        images = [p for p in m.parts if isinstance(p, AttachmentPart) and (p.url or p.blob)]
        if images and m.role == "user":
            content: Any = [{"type": "text", "text": t} for t in texts]
            for p in images:
                content.append({"type": "image_url", "image_url": {"url": _data_url(repo, p)}})
        else:
            content = "\n".join(texts) if texts or not calls else None
        msg["content"] = content
        if reasoning:
            msg["reasoning_content"] = "\n".join(reasoning)
        legacy = [c for c in calls if (c.meta or {}).get("source_type") == "function_call"]
        if legacy and len(calls) == 1:  # a legacy function_call, as it was sent
            msg["function_call"] = {"name": calls[0].name, "arguments": _args(calls[0].arguments)}
        elif calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _args(c.arguments)}}
                                 for c in calls]
        out.append(msg)
    return {"messages": out}


def anthropic_doc(repo, rev: str) -> dict:
    """The thread at ``rev`` as an Anthropic Messages request: system prompts joined into
    ``system``, tool calls and results as content blocks."""
    _, _, pairs = thread_messages(repo, rev)
    system: list[str] = []
    msgs: list[dict] = []
    for _, m in pairs:
        if m.role in ("system", "developer"):
            system.extend(_text(repo, p) for p in m.parts if isinstance(p, TextPart))
            continue
        blocks = []
        for p in m.parts:
            if isinstance(p, TextPart):
                blocks.append({"type": "text", "text": _text(repo, p)})
            elif isinstance(p, ReasoningPart):
                sig = (p.meta or {}).get("signature")
                if sig:
                    blocks.append({"type": "thinking", "thinking": _text(repo, p), "signature": sig})
            elif isinstance(p, ToolCallPart):
                args = p.arguments
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        args = {"input": args}
                blocks.append({"type": "tool_use", "id": p.id or f"toolu_{len(msgs)}", "name": p.name, "input": args})
            elif isinstance(p, ToolResultPart):
                blocks.append({"type": "tool_result", "tool_use_id": p.tool_call_id or "", "content": _as_str(p.output),
                               **({"is_error": True} if p.is_error else {})})
        role = "user" if m.role in ("user", "tool") else "assistant"
        if not blocks:
            continue
        if msgs and msgs[-1]["role"] == role:  # the API merges consecutive same-role turns
            msgs[-1]["content"].extend(blocks)
        else:
            msgs.append({"role": role, "content": blocks})
    doc: dict[str, Any] = {"messages": msgs}
    if system:
        doc["system"] = "\n\n".join(system)
    return doc


def markdown(repo, rev: str) -> str:
    """The thread at ``rev`` as Markdown to read: one section per message."""
    tip, thread, pairs = thread_messages(repo, rev)
    lines = [f"# {thread or tip[:12]}", ""]
    for oid, m in pairs:
        lines.append(f"## {m.role} · {oid[:12]}")
        lines.append("")
        for p in m.parts:
            if isinstance(p, TextPart):
                lines.append(_text(repo, p))
            elif isinstance(p, ReasoningPart):
                lines.extend(["<details><summary>reasoning</summary>", "", _text(repo, p), "", "</details>"])
            elif isinstance(p, ToolCallPart):
                args = p.arguments if isinstance(p.arguments, str) else json.dumps(p.arguments, ensure_ascii=False)
                lines.extend([f"**tool call** `{p.name}`", "", "```", args or "", "```"])
            elif isinstance(p, ToolResultPart):
                lines.extend([f"**tool result**{' (error)' if p.is_error else ''}", "", "```", _as_str(p.output), "```"])
            elif isinstance(p, AttachmentPart):
                lines.append(f"[attachment: {p.name or p.url or p.blob or ''}]")
            elif isinstance(p, OpaquePart):
                lines.append(f"[{p.source or 'opaque'} part]")
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def export(repo, revs: list[str], fmt: str, progress=None) -> str:
    """The text to write for ``revs``: several revisions with jsonl (one line each) or native
    (one document holding them all). ``progress(done, total)``: threads written."""
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown export format {fmt!r} (one of {', '.join(FORMATS)})")
    if fmt == "jsonl":
        forks = fork_origins(repo)
        lines = []
        for i, r in enumerate(revs):
            lines.append(json.dumps(native_doc(repo, r, forks), ensure_ascii=False) + "\n")
            if progress is not None:
                progress(i + 1, len(revs))
        return "".join(lines)
    if fmt == "native" and len(revs) != 1:
        return json.dumps(native_bundle(repo, revs, progress), ensure_ascii=False, indent=2) + "\n"
    if len(revs) != 1:
        raise InvalidInput(f"--format {fmt} exports one thread; use --format native or jsonl for several")
    if fmt == "markdown":
        return markdown(repo, revs[0])
    doc = {"native": native_doc, "openai": openai_doc, "anthropic": anthropic_doc}[fmt](repo, revs[0])
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def _args(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def _as_str(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def _data_url(repo, p: AttachmentPart) -> str:
    if p.blob:
        obj = repo.objects.read(p.blob)
        if isinstance(obj, Blob):
            return f"data:{p.mime_type or 'application/octet-stream'};base64,{base64.b64encode(obj.data).decode()}"
    return p.url or ""
