"""Claude.ai data export (``conversations.json``): linear chats, and the newer
``parent_message_uuid`` trees (every edit and retry kept).

An assistant message keeps its blocks in order in one message, tool_use and tool_result
included (that is how claude.ai stores them). Attachments' extracted text is stored as a
blob (an attachment part); uploaded files are referenced by their uuid. Block timestamps and
flags are provenance (the node's turn), never part of a message.
"""

from __future__ import annotations

from typing import Any

from ..errors import SchemaValidationFailed
from ..objects import AttachmentPart, OpaquePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .chat import parse_time
from .model import Conversation, Draft, Node
from .parts import PendingAttachment, normalize_role
from .shapes import claude_looks_like as looks_like  # noqa: F401 (re-exported)

SOURCE = "claude"
ROOT_SENTINELS = {"00000000-0000-4000-8000-000000000000", "00000000-0000-0000-0000-000000000000"}
_BLOCK_PROVENANCE = ("start_timestamp", "stop_timestamp", "flags")


def parse(doc: Any, label: str = "") -> Conversation:
    """One Claude.ai conversation: linear, or a tree when messages name their parent."""
    if not isinstance(doc, dict) or not isinstance(doc.get("chat_messages"), list):
        raise SchemaValidationFailed("a Claude conversation needs a \"chat_messages\" list")
    msgs = doc["chat_messages"]
    tree = any(isinstance(m, dict) and "parent_message_uuid" in m for m in msgs)
    nodes = []
    prev = None
    for i, m in enumerate(msgs):
        where = f"chat_messages[{i}]"
        if not isinstance(m, dict):
            raise SchemaValidationFailed(f"{where}: must be an object")
        key = m.get("uuid") if isinstance(m.get("uuid"), str) else f"#{i}"
        if tree:
            p = m.get("parent_message_uuid")
            parent = None if p in ROOT_SENTINELS or not isinstance(p, str) else p
        else:
            parent = prev
        draft, blocks = _draft(m, where)
        t = _time(m.get("created_at"), where)
        prov = {k: v for k, v in m.items() if k not in ("uuid", "text", "content", "sender", "created_at",
                                                        "attachments", "files", "parent_message_uuid")}
        if blocks:
            prov["blocks"] = blocks
        if m.get("content") and m.get("text"):
            prov["text"] = m["text"]
        nodes.append(Node(key=key, parent=parent, draft=draft, time_ms=t, meta=prov or None, alias=key[0] != "#"))
        prev = key
    meta = {k: v for k, v in doc.items() if k not in ("chat_messages", "uuid", "name")}
    title = doc.get("name") if isinstance(doc.get("name"), str) else None
    up = doc.get("uuid") if isinstance(doc.get("uuid"), str) else None
    return Conversation(source=SOURCE, nodes=nodes, upstream_id=up, tree=tree, title=title, meta=meta or None,
                        label=label)


def _time(v: Any, where: str) -> int | None:
    try:
        return parse_time(v, f"{where}.created_at")
    except SchemaValidationFailed:
        return None


def _draft(m: dict, where: str) -> tuple[Draft, list]:
    role = normalize_role(m.get("sender"), where)
    parts: list = []
    blocks_prov: list = []
    content = m.get("content")
    if isinstance(content, list) and content:
        for j, b in enumerate(content):
            if not isinstance(b, dict):
                raise SchemaValidationFailed(f"{where}.content[{j}]: must be an object")
            blocks_prov.append({k: b[k] for k in _BLOCK_PROVENANCE if k in b} or None)
            parts.append(_block({k: v for k, v in b.items() if k not in _BLOCK_PROVENANCE}))
        if not any(blocks_prov):
            blocks_prov = []
    elif isinstance(m.get("text"), str):
        parts.append(TextPart(text=m["text"]))
    else:
        raise SchemaValidationFailed(f"{where}: no content and no text")
    for a in m.get("attachments") or ():
        if isinstance(a, dict):
            ext = a.get("extracted_content")
            rest = {k: v for k, v in a.items() if k not in ("extracted_content", "file_name")}
            name = a.get("file_name") if isinstance(a.get("file_name"), str) else None
            if isinstance(ext, str):
                parts.append(PendingAttachment(data=ext.encode("utf-8", "surrogatepass"), size=len(ext.encode("utf-8", "surrogatepass")),
                                               mime_type="text/plain", name=name, meta={"extracted_content": True, **rest}))
            else:
                parts.append(AttachmentPart(name=name, url=f"claude-attachment:{name}", meta=rest or None))
        else:
            parts.append(_loose(a, "attachments", "claude-attachment"))
    for f in m.get("files") or ():
        if isinstance(f, dict):
            fid = f.get("file_uuid") or f.get("uuid")
            rest = {k: v for k, v in f.items() if k not in ("file_name",)}
            parts.append(AttachmentPart(name=f.get("file_name") if isinstance(f.get("file_name"), str) else None,
                                        url=f"claude-file:{fid}", meta=rest or None))
        else:
            parts.append(_loose(f, "files", "claude-file"))
    return Draft(role=role, parts=tuple(parts)), blocks_prov


def _loose(entry: Any, key: str, scheme: str) -> Any:
    """An ``attachments``/``files`` entry that is not an object: a plain string (older and
    third-party exports list just the file name) is an attachment of that name; anything
    else is kept as an opaque part."""
    if isinstance(entry, str):
        return AttachmentPart(name=entry, url=f"{scheme}:{entry}", meta={"source_type": f"{key}_string"})
    return OpaquePart(data={key: entry}, source=SOURCE)


def _block(b: dict) -> Any:
    t = b.get("type")
    if t == "text" and isinstance(b.get("text"), str):
        rest = {k: v for k, v in b.items() if k not in ("type", "text") and v not in (None, [], {})}
        return TextPart(text=b["text"], meta=rest or None)
    if t == "thinking" and isinstance(b.get("thinking"), str):
        rest = {k: v for k, v in b.items() if k not in ("type", "thinking")}
        return ReasoningPart(text=b["thinking"], meta={"source_type": "thinking", **rest})
    if t == "tool_use" and isinstance(b.get("name"), str):
        rest = {k: v for k, v in b.items() if k not in ("type", "name", "id", "input") and v is not None}
        return ToolCallPart(name=b["name"], id=b.get("id") if isinstance(b.get("id"), str) else None,
                            arguments=b.get("input"), meta=rest or None)
    if t == "tool_result":
        cid = b.get("tool_use_id")
        extra = {k: v for k, v in b.items() if k not in ("type", "tool_use_id", "name", "is_error")}
        return ToolResultPart(tool_call_id=cid if isinstance(cid, str) else None,
                              name=b.get("name") if isinstance(b.get("name"), str) else None,
                              output=extra.get("content") if set(extra) <= {"content"} else extra,
                              is_error=b.get("is_error") is True)
    if t == "voice_note" and isinstance(b.get("transcript"), str):
        rest = {k: v for k, v in b.items() if k not in ("type", "transcript")}
        return TextPart(text=b["transcript"], meta={"source_type": "voice_note", **rest})
    return OpaquePart(data=b, source=SOURCE)
