"""Drafts → hashed message objects (a Merkle chain) and the blobs they reference. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .. import codec
from ..config import Config
from ..errors import HashMismatch, PayloadTooLarge, SchemaValidationFailed
from ..objects import TEXT_BLOB_THRESHOLD, AttachmentPart, Blob, Message, Part, ReasoningPart, TextPart
from .model import Draft
from .parts import PendingAttachment


@dataclass
class Chain:
    """A conversation's messages, hashed in order. ``ids[i]``'s parent is ``ids[i-1]``."""

    ids: list[str] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    blobs: list[list[tuple[str, bytes]]] = field(default_factory=list)  # per message
    # Leading messages the caller knows are stored (a committer that stored them itself): a
    # hint the thread decision checks with one probe of the last of them, then skips their
    # hole check (decide.View.stored_run). 0: nothing known, every id is probed.
    known_stored: int = 0

    @property
    def tip(self) -> str | None:
        """The id of the last message, or None for an empty chain."""
        return self.ids[-1] if self.ids else None

    def objects_from(self, k: int) -> list[tuple[str, bytes]]:
        """Every object (blobs first, then the message) of messages k and after."""
        out: list[tuple[str, bytes]] = []
        for i in range(k, len(self.ids)):
            out.extend(self.blobs[i])
            out.append((self.ids[i], self.data[i]))
        return out


def build_chain(drafts: Sequence[Draft], parent: str | None = None, config: Config | None = None) -> Chain:
    """Hash ``drafts`` as a chain of messages below ``parent``, texts over the blob threshold
    moved into blobs; limits of ``config`` enforced before anything is hashed."""
    config = config or Config()
    chain = Chain()
    for i, d in enumerate(drafts):
        blobs: list[tuple[str, bytes]] = []
        parts = tuple(_store_large(p, blobs) for p in d.parts)
        msg = Message(parent=parent, role=d.role, parts=parts, meta=d.meta)
        try:
            oid, data = codec.encode_and_hash(msg)
        except codec.EncodeError as e:
            raise SchemaValidationFailed(f"message {i}: {e}") from e
        if len(data) > config.max_message_bytes:
            raise PayloadTooLarge(
                f"message {i} is {len(data)} bytes encoded; the limit is {config.max_message_bytes} (limits.max_message_bytes)"
            )
        if d.claimed_parent is not None and d.claimed_parent != parent:
            raise HashMismatch(
                f"message {i} claims parent {d.claimed_parent} but its parent is {parent}",
                claimed=d.claimed_parent, computed=parent,
            )
        if d.claimed_id is not None and d.claimed_id != oid:
            raise HashMismatch(
                f"message {i} claims id {d.claimed_id} but hashes to {oid}", claimed=d.claimed_id, computed=oid
            )
        chain.ids.append(oid)
        chain.data.append(data)
        chain.messages.append(msg)
        chain.blobs.append(blobs)
        parent = oid
    return chain


def _blob(data: bytes, blobs: list[tuple[str, bytes]]) -> str:
    oid, enc = codec.encode_and_hash(Blob(data=data))
    blobs.append((oid, enc))
    return oid


def _store_large(p: Part, blobs: list[tuple[str, bytes]]) -> Part:
    if isinstance(p, PendingAttachment):
        oid = _blob(p.data, blobs)
        return AttachmentPart(mime_type=p.mime_type, name=p.name, blob=oid, url=p.url, size=p.size, meta=p.meta)
    if isinstance(p, (TextPart, ReasoningPart)) and p.blob is None:
        raw = p.text.encode("utf-8", "surrogatepass")
        if len(raw) > TEXT_BLOB_THRESHOLD:
            try:
                p.text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise SchemaValidationFailed("text is not valid Unicode (lone surrogate)") from e
            oid = _blob(raw, blobs)
            if isinstance(p, TextPart):
                return TextPart(text="", blob=oid, meta=p.meta)
            return ReasoningPart(text="", blob=oid, meta=p.meta)
    return p
