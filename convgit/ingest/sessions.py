"""Whole-file JSON Lines formats, where one file is one conversation (not one per line):
SillyTavern chats, Claude Code sessions and OpenAI Codex CLI rollouts.

- SillyTavern (``chats/<character>/*.jsonl``): a header line (``user_name``,
  ``character_name``, ``create_date``, ``chat_metadata``), then one line per message
  (``name``, ``is_user``, ``is_system``, ``send_date``, ``mes``, ``extra``). A message's
  ``swipes[]`` are alternative replies: each becomes a sibling branch; the chosen one
  (``swipe_id``, the one ``mes`` holds) stays on the main thread.
- Claude Code (``~/.claude/projects/<project>/<session>.jsonl``): lines linked by
  ``uuid``/``parentUuid`` (a tree: a resumed or edited session branches), ``message`` in the
  Anthropic shape (text, ``thinking``, ``tool_use``, ``tool_result``), ``isSidechain`` for
  sub-agent runs, ``summary`` lines giving the title. Lines without a message (snapshots,
  system notes) are skipped and their children attached to the nearest message above.
- Codex CLI (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``): ``session_meta`` then
  ``response_item`` lines in the OpenAI Responses shape (``message``, ``reasoning``,
  ``function_call``, ``function_call_output``); ``turn_context`` gives the model. The older
  layout (a first line with ``id`` and ``instructions``, then bare items) is read too.

Each session keeps its own id as the upstream id, so re-importing a session that grew adds
only its new messages.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from typing import Any

from ..errors import SchemaValidationFailed
from ..objects import ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .chat import parse_time
from .model import Conversation, Draft, Node

FILE_FORMATS = ("sillytavern", "claude-code", "codex")


def detect_first_line(doc: Any) -> str | None:
    """Which whole-file format a JSONL file whose first line decodes to ``doc`` is, or None."""
    if not isinstance(doc, dict):
        return None
    if "character_name" in doc and ("user_name" in doc or "chat_metadata" in doc) and "mes" not in doc:
        return "sillytavern"
    if doc.get("type") == "session_meta" and isinstance(doc.get("payload"), dict):
        return "codex"
    if "instructions" in doc and "id" in doc and "timestamp" in doc and "type" not in doc:
        return "codex"
    if "sessionId" in doc or doc.get("type") == "summary" and "leafUuid" in doc:
        return "claude-code"
    if "parentUuid" in doc and "uuid" in doc:
        return "claude-code"
    return None


def parse_file(fmt: str, lines: list[Any], label: str) -> Conversation:
    """The decoded lines of one file of format ``fmt`` as one conversation."""
    if fmt == "sillytavern":
        return _sillytavern(lines, label)
    if fmt == "claude-code":
        return _claude_code(lines, label)
    if fmt == "codex":
        return _codex(lines, label)
    raise SchemaValidationFailed(f"unknown session format {fmt!r}")  # pragma: no cover


def _time(v: Any) -> int | None:
    try:
        return parse_time(v, "time")
    except SchemaValidationFailed:
        pass
    if isinstance(v, str):  # SillyTavern's "May 12, 2024 5:32pm" and "2024-5-12 @17h 32m 10s 345ms"
        for fmt in ("%B %d, %Y %I:%M%p", "%B %d, %Y %I:%M %p", "%Y-%m-%d @%Hh %Mm %Ss %fms", "%Y-%m-%d@%Hh%Mm%Ss"):
            try:
                d = _dt.datetime.strptime(v.strip(), fmt).replace(tzinfo=_dt.timezone.utc)
                return int(d.timestamp() * 1000)
            except ValueError:
                continue
    return None


def _text(v: Any, where: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise SchemaValidationFailed(f"{where}: text must be a string")
    return v


# -- SillyTavern ------------------------------------------------------------------------------


def _sillytavern(lines: list[Any], label: str) -> Conversation:
    head, msgs = lines[0], lines[1:]
    if not isinstance(head, dict):
        raise SchemaValidationFailed("a SillyTavern chat starts with its header line")
    char = head.get("character_name") if isinstance(head.get("character_name"), str) else "character"
    created = head.get("create_date")
    upstream = f"{char}-{created}" if created else f"{char}-" + hashlib.sha256(
        json.dumps(lines[:3], sort_keys=True, default=str).encode()).hexdigest()[:16]
    nodes: list[Node] = []
    parent = None
    for i, m in enumerate(msgs, 1):
        where = f"line {i + 1}"
        if not isinstance(m, dict):
            raise SchemaValidationFailed(f"{where}: a message must be an object")
        role = "user" if m.get("is_user") else "system" if m.get("is_system") else "assistant"
        extra = m.get("extra") if isinstance(m.get("extra"), dict) else {}
        model = extra.get("model") if isinstance(extra.get("model"), str) else None
        meta = {k: v for k, v in m.items() if k not in ("mes", "is_user", "is_system", "send_date", "swipes",
                                                        "swipe_id", "swipe_info", "extra")}
        if extra:
            meta["extra"] = extra
        key = f"m{i}"
        text = _text(m.get("mes"), where)
        nodes.append(Node(key=key, parent=parent, draft=Draft(role=role, parts=(TextPart(text=text),)),
                          time_ms=_time(m.get("send_date")), model=model, meta=meta or None, alias=False))
        swipes = m.get("swipes")
        if isinstance(swipes, list) and len(swipes) > 1:
            chosen = m.get("swipe_id") if isinstance(m.get("swipe_id"), int) else None
            info = m.get("swipe_info") if isinstance(m.get("swipe_info"), list) else []
            for j, alt in enumerate(swipes):
                if j == chosen or (chosen is None and alt == text) or not isinstance(alt, str):
                    continue
                si = info[j] if j < len(info) and isinstance(info[j], dict) else {}
                sx = si.get("extra") if isinstance(si.get("extra"), dict) else {}
                nodes.append(Node(key=f"{key}.swipe{j}", parent=parent,
                                  draft=Draft(role=role, parts=(TextPart(text=alt),)),
                                  time_ms=_time(si.get("send_date")),
                                  model=sx.get("model") if isinstance(sx.get("model"), str) else model,
                                  meta={"name": m.get("name"), "swipe_id": j}, alias=False))
        parent = key
    if not nodes:
        raise SchemaValidationFailed("a SillyTavern chat with no messages")
    meta = {k: v for k, v in head.items() if k != "chat_metadata"}
    if isinstance(head.get("chat_metadata"), dict):
        meta["chat_metadata"] = head["chat_metadata"]
    return Conversation(source="sillytavern", nodes=nodes, upstream_id=upstream, current=parent, tree=True,
                        title=f"{char} ({created})" if created else char, meta=meta or None, label=label)


# -- Claude Code --------------------------------------------------------------------------------


def _claude_blocks(content: Any, where: str) -> tuple[list, bool]:
    """(parts, whether every block is a tool result) of an Anthropic content value."""
    if isinstance(content, str):
        return [TextPart(text=content)], False
    if not isinstance(content, list):
        raise SchemaValidationFailed(f"{where}: message.content must be a string or a list")
    parts: list = []
    results = 0
    for b in content:
        if not isinstance(b, dict):
            continue
        t = b.get("type")
        if t == "text":
            parts.append(TextPart(text=_text(b.get("text"), where)))
        elif t == "thinking":
            sig = b.get("signature")
            parts.append(ReasoningPart(text=_text(b.get("thinking"), where), meta={"signature": sig} if sig else None))
        elif t == "redacted_thinking":
            parts.append(ReasoningPart(text="", meta={"redacted": b.get("data")}))
        elif t == "tool_use":
            parts.append(ToolCallPart(name=str(b.get("name") or ""), id=b.get("id"), arguments=b.get("input")))
        elif t == "tool_result":
            out = b.get("content")
            if isinstance(out, list):
                texts = [x.get("text") for x in out if isinstance(x, dict) and isinstance(x.get("text"), str)]
                out = "\n".join(texts) if texts and len(texts) == len(out) else out
            parts.append(ToolResultPart(tool_call_id=b.get("tool_use_id"), output=out, is_error=bool(b.get("is_error"))))
            results += 1
        else:
            from ..objects import OpaquePart

            parts.append(OpaquePart(data=b, source="claude-code"))
    return parts, bool(parts) and results == len(parts)


def _claude_code(lines: list[Any], label: str) -> Conversation:
    session = None
    summaries: dict[str, str] = {}
    skipped: dict[str, str | None] = {}  # uuid of a line without a message -> its parent
    raw: list[tuple[dict, int]] = []
    for i, ln in enumerate(lines, 1):
        if not isinstance(ln, dict):
            raise SchemaValidationFailed(f"line {i}: must be an object")
        if ln.get("type") == "summary":
            if isinstance(ln.get("summary"), str):
                summaries[str(ln.get("leafUuid"))] = ln["summary"]
            continue
        session = session or ln.get("sessionId")
        uid = ln.get("uuid")
        if not isinstance(uid, str):
            continue
        msg = ln.get("message")
        if not isinstance(msg, dict) or ln.get("type") not in ("user", "assistant"):
            skipped[uid] = ln.get("parentUuid") if isinstance(ln.get("parentUuid"), str) else None
            continue
        raw.append((ln, i))

    def resolve(p: str | None) -> str | None:
        seen = set()
        while p is not None and p in skipped and p not in seen:
            seen.add(p)
            p = skipped[p]
        return p

    nodes: list[Node] = []
    current = None
    keys = {ln["uuid"] for ln, _ in raw}
    for ln, i in raw:
        where = f"line {i}"
        msg = ln["message"]
        parts, only_results = _claude_blocks(msg.get("content"), where)
        role = "tool" if only_results else ("assistant" if ln["type"] == "assistant" else "user")
        parent = resolve(ln.get("parentUuid") if isinstance(ln.get("parentUuid"), str) else None)
        if parent is not None and parent not in keys:
            parent = None  # its parent is in another file (a continued session): a root here
        meta = {k: v for k, v in ln.items() if k in ("isSidechain", "cwd", "gitBranch", "version", "requestId",
                                                     "userType", "isMeta")}
        if isinstance(msg.get("id"), str):
            meta["message_id"] = msg["id"]
        if msg.get("stop_reason"):
            meta["stop_reason"] = msg["stop_reason"]
        usage = msg.get("usage") if isinstance(msg.get("usage"), dict) else None
        nodes.append(Node(key=ln["uuid"], parent=parent, draft=Draft(role=role, parts=tuple(parts)),
                          time_ms=_time(ln.get("timestamp")),
                          model=msg.get("model") if isinstance(msg.get("model"), str) else None,
                          usage=usage, meta=meta or None))
        if not ln.get("isSidechain"):
            current = ln["uuid"]
    if not nodes:
        raise SchemaValidationFailed("a Claude Code session with no messages")
    title = summaries.get(current or "") or next(iter(summaries.values()), None)
    return Conversation(source="claude-code", nodes=nodes, upstream_id=session if isinstance(session, str) else None,
                        current=current, tree=True, title=title, label=label)


# -- Codex CLI ----------------------------------------------------------------------------------


def _codex_item(item: dict, where: str) -> Draft | None:
    t = item.get("type")
    if t == "message":
        role = item.get("role") if item.get("role") in ("user", "assistant", "system", "developer") else "user"
        parts = []
        content = item.get("content")
        if isinstance(content, str):
            parts.append(TextPart(text=content))
        elif isinstance(content, list):
            for c in content:
                if isinstance(c, dict) and isinstance(c.get("text"), str):
                    parts.append(TextPart(text=c["text"]))
        return Draft(role=role, parts=tuple(parts) or (TextPart(text=""),))
    if t == "reasoning":
        summary = item.get("summary") if isinstance(item.get("summary"), list) else []
        text = "\n".join(s.get("text") for s in summary if isinstance(s, dict) and isinstance(s.get("text"), str))
        enc = item.get("encrypted_content")
        return Draft(role="assistant", parts=(ReasoningPart(text=text, meta={"encrypted_content": enc} if enc else None),))
    if t in ("function_call", "custom_tool_call", "local_shell_call"):
        args = item.get("arguments", item.get("input", item.get("action")))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        return Draft(role="assistant", parts=(ToolCallPart(name=str(item.get("name") or t), id=item.get("call_id"),
                                                           arguments=args),))
    if t in ("function_call_output", "custom_tool_call_output"):
        out = item.get("output")
        if isinstance(out, dict) and isinstance(out.get("content"), str):
            out = out["content"]
        return Draft(role="tool", parts=(ToolResultPart(tool_call_id=item.get("call_id"), output=out),))
    return None  # web search calls, ghost snapshots...: not messages


def _codex(lines: list[Any], label: str) -> Conversation:
    session = None
    model = None
    nodes: list[Node] = []
    parent = None
    meta: dict = {}
    for i, ln in enumerate(lines, 1):
        if not isinstance(ln, dict):
            raise SchemaValidationFailed(f"line {i}: must be an object")
        kind, payload = ln.get("type"), ln.get("payload")
        if kind == "session_meta" and isinstance(payload, dict):
            session = payload.get("id")
            meta = {k: v for k, v in payload.items() if k in ("cwd", "originator", "cli_version", "git")}
            continue
        if i == 1 and "instructions" in ln and "id" in ln:  # the older layout's header
            session = ln.get("id")
            continue
        if kind == "turn_context" and isinstance(payload, dict):
            model = payload.get("model") if isinstance(payload.get("model"), str) else model
            continue
        item = payload if kind == "response_item" and isinstance(payload, dict) else (ln if kind != "event_msg" else None)
        if not isinstance(item, dict) or ln.get("record_type") == "state":
            continue
        draft = _codex_item(item, f"line {i}")
        if draft is None:
            continue
        key = f"l{i}"
        nodes.append(Node(key=key, parent=parent, draft=draft, time_ms=_time(ln.get("timestamp")),
                          model=model if draft.role == "assistant" else None, alias=False))
        parent = key
    if not nodes:
        raise SchemaValidationFailed("a Codex session with no messages")
    title = next((p.text.strip().splitlines()[0][:80] for n in nodes if n.draft.role == "user"
                  for p in n.draft.parts if isinstance(p, TextPart) and p.text.strip()
                  and not p.text.lstrip().startswith("<")), None)
    return Conversation(source="codex", nodes=nodes, upstream_id=session if isinstance(session, str) else None,
                        current=parent, tree=True, title=title, meta=meta or None, label=label)
