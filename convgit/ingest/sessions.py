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
import json
from typing import Any

from ..errors import SchemaValidationFailed
from ..objects import ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .chat import parse_time
from .model import Conversation, Draft, Node
from .shapes import SESSION_FORMATS

FILE_FORMATS = SESSION_FORMATS


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
    import hashlib  # (here: ~3 ms of every `commit`'s start-up otherwise; only SillyTavern needs it)

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
        elif m.get("extra") not in (None, {}):
            meta["extra"] = m["extra"]
        if m.get("send_date") is not None and _time(m.get("send_date")) is None:
            meta["send_date"] = m["send_date"]
        for k in ("swipe_id", "swipe_info"):  # which swipe is the one shown, and each one's times
            if m.get(k) is not None:
                meta[k] = m[k]
        if isinstance(m.get("swipes"), list) and any(not isinstance(x, str) for x in m["swipes"]):
            meta["swipes"] = m["swipes"]
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
    from ..objects import OpaquePart

    parts: list = []
    results = 0
    for b in content:
        if not isinstance(b, dict):
            parts.append(OpaquePart(data=b, source="claude-code"))
            continue
        t = b.get("type")
        # A block's keys beyond the ones mapped (citations, cache_control...) go to the part's
        # meta; the usual blocks have none, so their messages keep the ids they had.
        if t == "text" and isinstance(b.get("text"), str | None):
            parts.append(TextPart(text=_text(b.get("text"), where), meta=_rest(b, ("type", "text"))))
        elif t == "thinking" and isinstance(b.get("thinking"), str | None):
            sig = b.get("signature")
            meta = {**({"signature": sig} if sig else {}), **(_rest(b, ("type", "thinking", "signature")) or {})}
            if "signature" in b and not sig:
                meta["signature"] = sig
            parts.append(ReasoningPart(text=_text(b.get("thinking"), where), meta=meta or None))
        elif t == "redacted_thinking":
            parts.append(ReasoningPart(text="", meta={"redacted": b.get("data"), **(_rest(b, ("type", "data")) or {})}))
        elif t == "tool_use" and isinstance(b.get("name"), str) and b["name"]:
            parts.append(ToolCallPart(name=b["name"], id=b.get("id") if isinstance(b.get("id"), str) else None,
                                      arguments=b.get("input"),
                                      meta=_rest(b, ("type", "name", "input", *(("id",) if isinstance(b.get("id"), str | None) else ())))))
        elif t == "tool_result":
            out = b.get("content")
            meta = _rest(b, ("type", "tool_use_id", "content", "is_error")) or {}
            if isinstance(out, list):
                texts = [x.get("text") for x in out if isinstance(x, dict) and isinstance(x.get("text"), str)]
                if texts and len(texts) == len(out):
                    # one plain text block is its text; several (where one ends), or blocks
                    # with other keys, are kept as given beside the joined text
                    if len(out) > 1 or set(out[0]) - {"type", "text"} or out[0].get("type") != "text":
                        meta["content"] = out
                    out = "\n".join(texts)
            if not isinstance(b.get("is_error"), bool | None):
                meta["is_error"] = b["is_error"]
            cid = b.get("tool_use_id")
            if cid is not None and not isinstance(cid, str):
                meta["tool_use_id"], cid = cid, None
            parts.append(ToolResultPart(tool_call_id=cid, output=out, is_error=bool(b.get("is_error")), meta=meta or None))
            results += 1
        else:
            parts.append(OpaquePart(data=b, source="claude-code"))
    return parts, bool(parts) and results == len(parts)


def _rest(d: dict, known: tuple[str, ...]) -> dict | None:
    """``d``'s keys not in ``known`` (None when there are none)."""
    rest = {k: v for k, v in d.items() if k not in known}
    return rest or None


def _claude_code(lines: list[Any], label: str) -> Conversation:
    session = None
    summaries: dict[str, str] = {}
    skipped: dict[str, str | None] = {}  # uuid of a line without a message -> its parent
    raw: list[tuple[dict, int]] = []
    other: list[dict] = []  # lines that are not messages (summaries, snapshots, system notes), kept whole
    for i, ln in enumerate(lines, 1):
        if not isinstance(ln, dict):
            raise SchemaValidationFailed(f"line {i}: must be an object")
        if ln.get("type") == "summary":
            if isinstance(ln.get("summary"), str):
                summaries[str(ln.get("leafUuid"))] = ln["summary"]
            other.append(ln)
            continue
        session = session or ln.get("sessionId")
        uid = ln.get("uuid")
        if not isinstance(uid, str):
            other.append(ln)
            continue
        msg = ln.get("message")
        if not isinstance(msg, dict) or ln.get("type") not in ("user", "assistant"):
            skipped[uid] = ln.get("parentUuid") if isinstance(ln.get("parentUuid"), str) else None
            other.append(ln)
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
        # Every key of the line is provenance (the turn's meta), but those mapped: the tree
        # links, the time, the message, the session (the thread's identity; kept when another).
        meta = {k: v for k, v in ln.items() if k not in ("uuid", "parentUuid", "message", "timestamp", "sessionId", "type")}
        if ln.get("sessionId") != session:
            meta["sessionId"] = ln.get("sessionId")
        if ln.get("parentUuid") is not None and parent != ln.get("parentUuid"):
            meta["parentUuid"] = ln["parentUuid"]  # (re-parented past a skipped line, or a root here)
        if _time(ln.get("timestamp")) is None and ln.get("timestamp") is not None:
            meta["timestamp"] = ln["timestamp"]
        if isinstance(msg.get("id"), str):
            meta["message_id"] = msg["id"]
        if msg.get("stop_reason"):
            meta["stop_reason"] = msg["stop_reason"]
        mrest = {k: v for k, v in msg.items() if k not in ("id", "stop_reason", "content", "model", "usage", "role", "type")
                 and v is not None}
        if msg.get("type") not in (None, "message") or msg.get("role") not in (None, "user", "assistant"):
            mrest.update({k: msg[k] for k in ("type", "role")})
        if not isinstance(msg.get("model"), str | None) or not isinstance(msg.get("usage"), dict | None):
            mrest.update({k: msg[k] for k in ("model", "usage")})
        if mrest:
            meta["message"] = mrest
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
                        current=current, tree=True, title=title, label=label,
                        meta={"other_lines": other} if other else None)


# -- Codex CLI ----------------------------------------------------------------------------------


_CODEX_ROLES = ("user", "assistant", "system", "developer")


def _codex_item(item: dict, where: str) -> tuple[Draft, dict] | None:
    """An item as a message and the item's other keys (its ``id``, ``status``...: the turn's
    provenance), or None for an item that is not a message (kept with the other lines).
    Only what the message mapping leaves out is added, so the usual items keep their ids."""
    from ..objects import OpaquePart
    from .parts import part_from_dict

    t = item.get("type")
    if t == "message":
        role = item.get("role") if item.get("role") in _CODEX_ROLES else "user"
        rest = {k: v for k, v in item.items() if k not in ("type", "role", "content")}
        if role != item.get("role"):
            rest["role"] = item.get("role")
        parts = []
        content = item.get("content")
        if isinstance(content, str):
            parts.append(TextPart(text=content))
        elif isinstance(content, list):
            for c in content:
                if isinstance(c, dict) and isinstance(c.get("text"), str):
                    extra = {k: v for k, v in c.items() if k not in ("type", "text") and v not in (None, [], {})}
                    parts.append(TextPart(text=c["text"], meta=extra or None))
                elif isinstance(c, dict):  # an image, a file: mapped as in the chat shape
                    try:
                        parts.append(part_from_dict(c, where))
                    except SchemaValidationFailed:
                        parts.append(OpaquePart(data=c, source="codex"))
                else:
                    parts.append(OpaquePart(data=c, source="codex"))
        elif content is not None:
            rest["content"] = content
        return Draft(role=role, parts=tuple(parts) or (TextPart(text=""),)), rest
    if t == "reasoning":
        summary = item.get("summary") if isinstance(item.get("summary"), list) else []
        text = "\n".join(s.get("text") for s in summary if isinstance(s, dict) and isinstance(s.get("text"), str))
        enc = item.get("encrypted_content")
        meta = {"encrypted_content": enc} if enc else {}
        if item.get("content") not in (None, [], ""):  # the raw reasoning text, when the model gives it
            meta["content"] = item["content"]
        plain = all(isinstance(x, dict) and set(x) <= {"type", "text"} and x.get("type") == "summary_text"
                    and isinstance(x.get("text"), str) for x in summary) and (len(summary) <= 1 or not any(
                        "\n" in x["text"] for x in summary))
        if not plain or not isinstance(item.get("summary"), list | None):
            meta["summary"] = item.get("summary")
        rest = {k: v for k, v in item.items() if k not in ("type", "summary", "encrypted_content", "content")}
        return Draft(role="assistant", parts=(ReasoningPart(text=text, meta=meta or None),)), rest
    if t in ("function_call", "custom_tool_call", "local_shell_call"):
        key = next((k for k in ("arguments", "input", "action") if k in item), "arguments")
        raw = args = item.get(key)
        meta = {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
            else:  # decoded: the string itself is kept when it is not the compact encoding
                if json.dumps(args, ensure_ascii=False, separators=(",", ":")) != raw:
                    meta["arguments"] = raw
        rest = {k: v for k, v in item.items() if k not in ("type", "name", "call_id", key)}
        if t != "function_call":
            rest["type"] = t
        name = item.get("name") if isinstance(item.get("name"), str) and item["name"] else None
        if name is None and item.get("name") is not None:
            rest["name"] = item["name"]
        return Draft(role="assistant", parts=(ToolCallPart(name=name or t, id=item.get("call_id"), arguments=args,
                                                           meta=meta or None),)), rest
    if t in ("function_call_output", "custom_tool_call_output"):
        out = item.get("output")
        meta = {}
        if isinstance(out, dict) and isinstance(out.get("content"), str):
            meta = {"output": {k: v for k, v in out.items() if k != "content"}} if len(out) > 1 else {}
            out = out["content"]
        rest = {k: v for k, v in item.items() if k not in ("type", "call_id", "output")}
        if t != "function_call_output":
            rest["type"] = t
        return Draft(role="tool", parts=(ToolResultPart(tool_call_id=item.get("call_id"), output=out,
                                                        meta=meta or None),)), rest
    return None  # web search calls, ghost snapshots...: not messages (kept with the other lines)


# event_msg payloads that repeat a response_item (the item is the message): not kept twice
_CODEX_ECHOES = ("user_message", "agent_message", "agent_reasoning", "agent_reasoning_raw_content")


def _codex(lines: list[Any], label: str) -> Conversation:
    session = None
    model = None
    nodes: list[Node] = []
    parent = None
    meta: dict = {}
    other: list = []  # lines that are not messages (turn contexts, events, other items), kept whole
    for i, ln in enumerate(lines, 1):
        if not isinstance(ln, dict):
            raise SchemaValidationFailed(f"line {i}: must be an object")
        kind, payload = ln.get("type"), ln.get("payload")
        if kind == "session_meta" and isinstance(payload, dict):
            session = payload.get("id")
            meta = {k: v for k, v in payload.items() if k in ("cwd", "originator", "cli_version", "git")}
            rest = {k: v for k, v in ln.items() if k != "payload"}
            rest["payload"] = {k: v for k, v in payload.items() if k not in meta and k != "id"}
            other.append(rest)
            continue
        if i == 1 and "instructions" in ln and "id" in ln:  # the older layout's header
            session = ln.get("id")
            other.append({k: v for k, v in ln.items() if k != "id"})
            continue
        if kind == "turn_context" and isinstance(payload, dict):
            model = payload.get("model") if isinstance(payload.get("model"), str) else model
            other.append(ln)
            continue
        item = payload if kind == "response_item" and isinstance(payload, dict) else (ln if kind != "event_msg" else None)
        mapped = _codex_item(item, f"line {i}") if isinstance(item, dict) and ln.get("record_type") != "state" else None
        if mapped is None:
            if not (kind == "event_msg" and isinstance(payload, dict) and payload.get("type") in _CODEX_ECHOES):
                other.append(ln)
            continue
        draft, rest = mapped
        if item is payload:  # the line's own keys besides its item
            rest = {**rest, **{f"line_{k}": v for k, v in ln.items() if k not in ("type", "payload", "timestamp")}}
        if _time(ln.get("timestamp")) is None and ln.get("timestamp") is not None:
            rest["timestamp"] = ln["timestamp"]
        key = f"l{i}"
        nodes.append(Node(key=key, parent=parent, draft=draft, time_ms=_time(ln.get("timestamp")),
                          model=model if draft.role == "assistant" else None, meta=rest or None, alias=False))
        parent = key
    if not nodes:
        raise SchemaValidationFailed("a Codex session with no messages")
    title = next((p.text.strip().splitlines()[0][:80] for n in nodes if n.draft.role == "user"
                  for p in n.draft.parts if isinstance(p, TextPart) and p.text.strip()
                  and not p.text.lstrip().startswith("<")), None)
    if other:
        meta["other_lines"] = other
    return Conversation(source="codex", nodes=nodes, upstream_id=session if isinstance(session, str) else None,
                        current=parent, tree=True, title=title, meta=meta or None, label=label)
