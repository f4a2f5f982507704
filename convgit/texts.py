"""The text of messages and parts as the library returns it: text parts joined, long texts
read from their blobs (re-exported by api)."""

from __future__ import annotations

import msgspec

from .objects import Blob, Message, ReasoningPart, TextPart
from .repository import Repository


def message_text(repo: Repository, msg: Message) -> str:
    """The visible text of a message (text parts; long ones read from their blobs)."""
    out = []
    for p in msg.parts:
        if isinstance(p, TextPart):
            out.append(resolve_text(repo, p))
    return "\n".join(out)


def resolve_text(repo: Repository, p: TextPart | ReasoningPart) -> str:
    """A text or reasoning part's text, read from its blob when it is stored as one."""
    if p.blob:
        obj = repo.objects.read(p.blob)
        if isinstance(obj, Blob):
            return obj.data.decode("utf-8", "replace")
        return ""
    return p.text


def part_json(repo: Repository, p) -> dict:
    """One part as JSON builtins, with the text of a long (blob-stored) text part filled in."""
    d = msgspec.to_builtins(p)
    if isinstance(p, (TextPart, ReasoningPart)) and p.blob:
        d["text"] = resolve_text(repo, p)
    return d
