"""Open WebUI (``history.messages`` linked by ``parentId``) and LibreChat (nested ``children``)
exports: both are trees, every regeneration and edit kept.

Open WebUI: ``childrenIds`` are never trusted (they are stale in some versions); the main
thread follows ``history.currentId`` (``current_message_id`` in newer exports). Reasoning and
tool calls come from the structured ``output[]`` items when present, otherwise from the
``<details type="reasoning|tool_calls">`` markup and ``<think>`` blocks in ``content`` (the
original content string is then kept in the message's turn).

LibreChat: ``messages`` or ``messagesTree``, nested through ``children`` or flat through
``parentMessageId``; there is no current leaf, so the newest leaf is the main thread.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import SchemaValidationFailed
from ..objects import AttachmentPart, OpaquePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .chat import parse_time
from .model import Conversation, Draft, Node
from .parts import normalize_role
from .shapes import librechat_looks_like, owui_looks_like

ZERO_UUID = "00000000-0000-0000-0000-000000000000"


# -- Open WebUI -----------------------------------------------------------------------------


def parse_owui(doc: Any, label: str = "") -> Conversation:
    """One Open WebUI chat as a conversation tree."""
    if not owui_looks_like(doc):
        raise SchemaValidationFailed("an Open WebUI chat needs history.messages")
    chat = doc.get("chat") if isinstance(doc.get("chat"), dict) else doc
    hist = chat["history"]
    nodes = []
    for mid, m in hist["messages"].items():
        where = f"message {mid}"
        if not isinstance(m, dict):
            raise SchemaValidationFailed(f"{where}: must be an object")
        key = m.get("id") if isinstance(m.get("id"), str) and m.get("id") else mid
        p = m.get("parentId")
        draft, original = _owui_draft(m, where)
        prov = {k: v for k, v in m.items() if k not in ("id", "parentId", "childrenIds", "role", "content",
                                                        "timestamp", "model", "usage", "output", "files")}
        if original is not None:
            prov["content"] = original
        usage = m.get("usage") if isinstance(m.get("usage"), dict) else None
        model = m.get("model") if isinstance(m.get("model"), str) else None
        time_ms = _time(m.get("timestamp"))
        # what could not be mapped is kept as it is (a time in another shape, a model object)
        for k, mapped in (("timestamp", time_ms), ("model", model), ("usage", usage)):
            if mapped is None and m.get(k) is not None:
                prov[k] = m[k]
        if key != mid:
            prov["history_key"] = mid  # (the message's key in history.messages, when not its id)
        elif m.get("id") not in (None, key):
            prov["id"] = m["id"]
        nodes.append(Node(key=key, parent=p if isinstance(p, str) else None, draft=draft,
                          time_ms=time_ms, model=model, usage=usage, meta=prov or None))
    current = doc.get("current_message_id") or chat.get("current_message_id") or hist.get("currentId")
    up = doc.get("id") if isinstance(doc.get("id"), str) and doc.get("id") else chat.get("id")
    title = doc.get("title") if isinstance(doc.get("title"), str) else chat.get("title")
    meta = {k: v for k, v in chat.items() if k not in ("history", "messages", "id", "title")}
    if doc is not chat:
        meta.update({k: v for k, v in doc.items() if k not in ("chat", "id", "title")})
    return Conversation(source="open-webui", nodes=nodes, upstream_id=up if isinstance(up, str) and up else None,
                        current=current if isinstance(current, str) else None, tree=True,
                        title=title if isinstance(title, str) else None, meta=meta or None, label=label)


def _time(v: Any) -> int | None:
    try:
        return parse_time(v, "timestamp")
    except SchemaValidationFailed:
        return None


_DETAILS = re.compile(r'<details type="(reasoning|tool_calls)"([^>]*)>(.*?)</details>\s*', re.S)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_SUMMARY = re.compile(r"^\s*<summary>(.*?)</summary>", re.S)
_THINK = re.compile(r"<think>(.*?)</think>\s*", re.S)


def _owui_draft(m: dict, where: str) -> tuple[Draft, str | None]:
    role = normalize_role(m.get("role"), where)
    content = m.get("content")
    if content is not None and not isinstance(content, str):
        raise SchemaValidationFailed(f"{where}: content must be a string")
    content = content or ""
    parts: list = []
    original = None
    output = m.get("output")
    if isinstance(output, list) and output and role == "assistant":
        parts = [_output_item(it) for it in output]
        original = content
    elif role == "assistant" and ("<details" in content or "<think>" in content):
        parts, rest = _parse_markup(content)
        if rest:
            parts.append(TextPart(text=rest))
        original = content
    else:
        parts.append(TextPart(text=content))
    for f in m.get("files") or ():
        if isinstance(f, dict):
            url = f.get("url") if isinstance(f.get("url"), str) else f"open-webui-file:{f.get('id')}"
            name = f.get("name") if isinstance(f.get("name"), str) else None
            # the keys mapped are left out of meta only when they were used
            rest = {k: v for k, v in f.items() if not (k == "url" and v == url) and not (k == "name" and v == name)}
            parts.append(AttachmentPart(url=url, name=name, meta=rest or None))
        else:
            parts.append(OpaquePart(data=f, source="open-webui-file"))
    return Draft(role=role, parts=tuple(parts)), original


def _parse_markup(content: str) -> tuple[list, str]:
    parts: list = []
    for m in _THINK.finditer(content):
        parts.append(ReasoningPart(text=m.group(1), meta={"source_type": "think"}))
    content = _THINK.sub("", content)
    for m in _DETAILS.finditer(content):
        import html  # (here: html.entities is ~1.5 ms of `commit`'s start-up, which never reads Open WebUI)

        kind, attrs, body = m.group(1), dict(_ATTR.findall(m.group(2))), m.group(3)
        attrs = {k: html.unescape(v) for k, v in attrs.items()}
        summary = _SUMMARY.match(body)
        text = html.unescape(body[summary.end():] if summary else body).strip()
        text = "\n".join(ln[2:] if ln.startswith("> ") else ln.lstrip(">") for ln in text.splitlines())
        if kind == "reasoning":
            meta = {"source_type": "details", **attrs}
            if summary:
                meta["summary"] = summary.group(1)
            parts.append(ReasoningPart(text=text, meta=meta))
        else:
            name = attrs.pop("name", None) or "tool"
            cid = attrs.pop("id", None)
            result = attrs.pop("result", None)
            parts.append(ToolCallPart(name=name, id=cid, arguments=attrs.pop("arguments", None), meta=attrs or None))
            parts.append(ToolResultPart(tool_call_id=cid, name=name, output=result if result is not None else text))
    return parts, _DETAILS.sub("", content).strip()


def _output_item(it: Any) -> Any:
    if not isinstance(it, dict):
        return OpaquePart(data=it, source="open-webui")
    t = it.get("type")
    content = it.get("content")
    texts = [c.get("text") for c in content or () if isinstance(c, dict) and isinstance(c.get("text"), str)] \
        if isinstance(content, list) else []
    # The content list is its text, unless it says more: several items (where one ends), an
    # item with other keys (annotations, logprobs) or that is not text. Then it is kept too.
    plain = content in (None, []) or isinstance(content, list) and len(content) <= 1 and len(texts) == len(content) \
        and all(not {k: v for k, v in c.items() if k not in ("type", "text") and v not in (None, [], {})} for c in content)
    if t == "reasoning":
        rest = {k: v for k, v in it.items() if k != "content" or not plain}
        return ReasoningPart(text="\n".join(texts), meta={"source_type": "output", **rest})
    if t == "message" and len(texts) == len(content or ()) == 1:
        rest = {k: v for k, v in it.items() if k not in ("content", "type", "role")}
        if it.get("role") not in (None, "assistant"):
            rest["role"] = it["role"]
        if not plain:
            rest["content"] = content
        return TextPart(text=texts[0], meta={"source_type": "output", **rest})
    if t == "function_call" and isinstance(it.get("name"), str):
        rest = {k: v for k, v in it.items() if k not in ("type", "name", "call_id", "arguments")}
        return ToolCallPart(name=it["name"], id=it.get("call_id"), arguments=it.get("arguments"), meta=rest or None)
    if t == "function_call_output":
        return ToolResultPart(tool_call_id=it.get("call_id") if isinstance(it.get("call_id"), str) else None,
                              output={k: v for k, v in it.items() if k not in ("type", "call_id")})
    return OpaquePart(data=it, source="open-webui")


# -- LibreChat ------------------------------------------------------------------------------


def parse_librechat(doc: Any, label: str = "") -> Conversation:
    """One LibreChat export (flat or nested ``children``) as a conversation tree."""
    if not librechat_looks_like(doc):
        raise SchemaValidationFailed("a LibreChat export needs conversationId and messages")
    roots = doc.get("messagesTree") if isinstance(doc.get("messagesTree"), list) else doc["messages"]
    nodes: list[Node] = []
    stack = [(m, None) for m in reversed(roots)]
    while stack:
        m, parent_from_tree = stack.pop()
        if not isinstance(m, dict) or not isinstance(m.get("messageId"), str):
            raise SchemaValidationFailed("a LibreChat message needs a messageId")
        where = f"message {m['messageId']}"
        p = m.get("parentMessageId", parent_from_tree)
        parent = None if p in (None, ZERO_UUID) or not isinstance(p, str) else p
        draft = _lc_draft(m, where)
        prov = {k: v for k, v in m.items() if k not in ("messageId", "parentMessageId", "children", "text", "content",
                                                        "isCreatedByUser", "createdAt", "model", "files")}
        time_ms, model = _time(m.get("createdAt")), m.get("model") if isinstance(m.get("model"), str) else None
        for k, mapped in (("createdAt", time_ms), ("model", model)):
            if mapped is None and m.get(k) is not None:
                prov[k] = m[k]
        if isinstance(m.get("content"), list) and m["content"] and m.get("text") not in (None, ""):
            prov["text"] = m["text"]  # (the parts come from content; the text beside it is kept)
        if m.get("isCreatedByUser") is not None and m.get("role") is not None:
            prov["isCreatedByUser"] = m["isCreatedByUser"]
        nodes.append(Node(key=m["messageId"], parent=parent, draft=draft, time_ms=time_ms, model=model,
                          meta=prov or None))
        for c in reversed(m.get("children") or ()):
            stack.append((c, m["messageId"]))
    meta = {k: v for k, v in doc.items() if k not in ("messages", "messagesTree", "conversationId", "title")}
    title = doc.get("title") if isinstance(doc.get("title"), str) else None
    return Conversation(source="librechat", nodes=nodes, upstream_id=doc["conversationId"] if isinstance(doc["conversationId"], str) else None,
                        tree=True, title=title, meta=meta or None, label=label)


def _lc_draft(m: dict, where: str) -> Draft:
    role = "user" if m.get("isCreatedByUser") is True else "assistant"
    if m.get("role") is not None:
        role = normalize_role(m["role"], where)
    parts: list = []
    content = m.get("content")
    if isinstance(content, list) and content:
        for c in content:
            parts.append(_lc_part(c))
    else:
        text = m.get("text")
        if not isinstance(text, str):
            raise SchemaValidationFailed(f"{where}: text must be a string")
        parts.append(TextPart(text=text))
    for f in m.get("files") or ():
        if isinstance(f, dict):
            url = f.get("filepath") or f.get("url") or f"librechat-file:{f.get('file_id')}"
            name = f.get("filename") if isinstance(f.get("filename"), str) else None
            rest = {k: v for k, v in f.items() if not (k == "filename" and v == name)}
            parts.append(AttachmentPart(url=str(url), name=name, meta=rest or None))
        else:
            parts.append(OpaquePart(data=f, source="librechat-file"))
    return Draft(role=role, parts=tuple(parts))


def _lc_part(c: Any) -> Any:
    if not isinstance(c, dict):
        return OpaquePart(data=c, source="librechat")
    t = c.get("type")
    # a part's keys beyond the mapped ones (LibreChat's tool_call_ids...) go to its meta; the
    # usual parts have none, so their messages keep their ids
    if t == "text" and isinstance(c.get("text"), str):
        return TextPart(text=c["text"], meta=_lc_rest(c, ("type", "text")))
    if t == "think" and isinstance(c.get("think"), str):
        return ReasoningPart(text=c["think"], meta={"source_type": "think", **(_lc_rest(c, ("type", "think")) or {})})
    tc = c.get("tool_call")
    if t == "tool_call" and isinstance(tc, dict) and isinstance(tc.get("name"), str):
        rest = {k: v for k, v in tc.items() if k not in ("name", "id", "args")}
        outer = _lc_rest(c, ("type", "tool_call"))
        if outer:
            rest["part"] = outer
        call = ToolCallPart(name=tc["name"], id=tc.get("id"), arguments=tc.get("args"), meta=rest or None)
        return call
    return OpaquePart(data=c, source="librechat")


def _lc_rest(c: dict, known: tuple[str, ...]) -> dict | None:
    rest = {k: v for k, v in c.items() if k not in known and v not in (None, [], {})}
    return rest or None


# -- Open WebUI's database (webui.db) ---------------------------------------------------------


def is_webui_db(path) -> bool:
    """True when the SQLite file at ``path`` is Open WebUI's database (a ``chat`` table with a
    ``chat`` JSON column)."""
    import sqlite3

    from ..fsio import sqlite_readonly_uri

    try:
        db = sqlite3.connect(sqlite_readonly_uri(path), uri=True)
        try:
            cols = {r[1] for r in db.execute("PRAGMA table_info(chat)")}
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return False
    return {"id", "chat"} <= cols


def iter_webui_db(path, label: str):
    """Each chat of Open WebUI's ``webui.db`` as a conversation tree (as its JSON export
    gives it), or ``(label, error)`` for one that cannot be read. Archived chats too."""
    import json
    import sqlite3

    from ..errors import InvalidInput
    from ..fsio import sqlite_readonly_uri

    try:
        db = sqlite3.connect(sqlite_readonly_uri(path), uri=True)
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM chat ORDER BY created_at, id").fetchall()
    except sqlite3.DatabaseError as e:
        raise InvalidInput(f"{label}: unreadable Open WebUI database: {e}") from e
    db.close()
    for r in rows:
        lab = f"{label}:chat {r['id']}"
        try:
            chat = json.loads(r["chat"]) if isinstance(r["chat"], (str, bytes)) else r["chat"]
            doc = {"id": r["id"], "title": r["title"] if "title" in r.keys() else None, "chat": chat}
            for k in ("created_at", "updated_at", "archived", "pinned", "folder_id"):
                if k in r.keys() and r[k] is not None:
                    doc[k] = r[k]
            yield parse_owui(doc, lab)
        except (ValueError, SchemaValidationFailed) as e:
            yield (lab, e if isinstance(e, SchemaValidationFailed) else SchemaValidationFailed(f"chat JSON: {e}"))
