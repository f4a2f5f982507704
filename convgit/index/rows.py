"""What a stored object becomes in the index: a part's searchable text and its ``parts``
row, and the reader that gives the writer objects (from a transaction's memory, else the store)."""

from __future__ import annotations

import json

from ..errors import ConvgitError, ObjectCorrupt, ObjectMissing

# The object types (convgit.objects, and msgspec with it), bound by _bind() when the first
# object is looked at: a command that reads the index but no object (status, threads) loads
# neither (start-up: docs/performance.md). Whoever holds an object has loaded them already.
AttachmentPart = Blob = Message = OpaquePart = ReasoningPart = TextPart = ToolCallPart = ToolResultPart = Turn = None
_PART_TYPES: dict = {}


def _bind() -> None:
    global AttachmentPart, Blob, Message, OpaquePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart, Turn
    from ..objects import (
        AttachmentPart,
        Blob,
        Message,
        OpaquePart,
        ReasoningPart,
        TextPart,
        ToolCallPart,
        ToolResultPart,
        Turn,
    )

    _PART_TYPES.update({TextPart: "text", ReasoningPart: "reasoning", ToolCallPart: "tool_call",
                        ToolResultPart: "tool_result", AttachmentPart: "attachment", OpaquePart: "opaque"})


def dump_json(v) -> str | None:
    """A value as the index keeps JSON (sorted keys; bytes as base64), or None."""
    if v is None:
        return None
    return _ENCODER.encode(v)  # (json.dumps with these options made an encoder per call)


def _json_default(v):
    if isinstance(v, (bytes, bytearray)):
        import base64

        return base64.b64encode(v).decode()
    raise TypeError(type(v))


_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=_json_default)


def part_text(p, blob_text=None) -> str | None:
    """The searchable text of a part (long text resolved from its blob by the caller)."""
    if TextPart is None:
        _bind()
    if isinstance(p, (TextPart, ReasoningPart)):
        return blob_text if p.blob else p.text
    if isinstance(p, ToolCallPart):
        a = p.arguments
        return a if isinstance(a, str) else dump_json(a)
    if isinstance(p, ToolResultPart):
        o = p.output
        if isinstance(o, str):
            return o
        if isinstance(o, list):
            texts = [x.get("text") for x in o if isinstance(x, dict) and isinstance(x.get("text"), str)]
            if texts:
                return "\n".join(texts)
        return dump_json(o)
    return None


class Reader:
    """Objects for indexing: from the commit's in-memory cache, else from the store."""

    def __init__(self, objects, cache: dict) -> None:
        if Message is None:
            _bind()
        self.objects = objects
        self.cache = cache

    def get(self, oid: str):
        """Object ``oid``: from the cache, else read from the store."""
        obj = self.cache.get(oid)
        if obj is None:
            obj = self.objects.read(oid)
        return obj

    def message(self, oid: str) -> Message:
        """Message ``oid`` (ObjectCorrupt when it is another type)."""
        obj = self.get(oid)
        if not isinstance(obj, Message):
            raise ObjectCorrupt(f"{oid} is not a message", oid=oid)
        return obj

    def message_or_none(self, oid: str) -> Message | None:
        """Message ``oid``, or None when it cannot be read or is not a message."""
        try:
            obj = self.get(oid)
        except ConvgitError:
            return None
        return obj if isinstance(obj, Message) else None

    def turn(self, oid: str) -> Turn | None:
        """Turn ``oid``, or None when it is missing, damaged or not a turn."""
        try:
            obj = self.get(oid)
        except (ObjectMissing, ObjectCorrupt):
            return None
        return obj if isinstance(obj, Turn) else None

    def blob_text(self, oid: str) -> str | None:
        """The text of blob ``oid`` (UTF-8, errors replaced), or None."""
        try:
            obj = self.get(oid)
        except (ObjectMissing, ObjectCorrupt):
            return None
        if isinstance(obj, Blob):
            return obj.data.decode("utf-8", "replace")
        return None


def part_row(rid: int, pos: int, p, reader: Reader) -> tuple:
    """The ``parts`` row of part ``p`` at ``pos`` of message row ``rid`` (text resolved from its blob)."""
    if TextPart is None:
        _bind()
    blob_text = reader.blob_text(p.blob) if isinstance(p, (TextPart, ReasoningPart)) and p.blob else None
    text = part_text(p, blob_text)
    name = tool_call_id = blob = mime = data = None
    if isinstance(p, ToolCallPart):
        name, tool_call_id = p.name, p.id
    elif isinstance(p, ToolResultPart):
        name, tool_call_id = p.name, p.tool_call_id
    elif isinstance(p, AttachmentPart):
        name, blob, mime = p.name, p.blob, p.mime_type
        data = dump_json({"url": p.url, "size": p.size}) if (p.url or p.size is not None) else None
    elif isinstance(p, OpaquePart):
        data = dump_json(p.data)
    elif isinstance(p, (TextPart, ReasoningPart)):
        blob = p.blob
    type_ = _PART_TYPES[type(p)]
    return (rid, pos, type_, text, name, tool_call_id, blob, mime, data)
