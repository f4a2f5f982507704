"""An imported conversation (nodes linked by source keys) → hashed messages and heads. Pure.

The tree is built from child → parent links only (never from ``children`` arrays or file
order), so the same tree gives the same messages whatever order its nodes come in. Identical
siblings (same parent, same content) hash to one message; every source key still maps to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import codec
from ..config import Config
from ..errors import HashMismatch, PayloadTooLarge, SchemaValidationFailed
from ..objects import Message, TextPart
from .build import Chain, _store_large
from .model import Conversation, Node


@dataclass
class Built:
    """A conversation hashed: every node's message id, the objects to store, and its heads."""

    conv: Conversation
    oid: dict[str, str] = field(default_factory=dict)  # node key -> message id
    parent: dict[str, str | None] = field(default_factory=dict)  # message id -> parent id
    data: dict[str, bytes] = field(default_factory=dict)  # message id -> stored bytes
    messages: dict[str, Message] = field(default_factory=dict)
    blobs: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)  # message id -> its blobs
    order: list[Node] = field(default_factory=list)  # parent first
    main: str | None = None  # message id of the main head
    heads: list[str] = field(default_factory=list)  # the other leaves' ids, in a stable order
    head_key: dict[str, str] = field(default_factory=dict)  # head id -> a source key of it
    time: dict[str, int] = field(default_factory=dict)  # node key -> effective time (ms)

    def path(self, tip: str | None) -> list[str]:
        """Message ids from the root to ``tip``."""
        out = []
        while tip is not None:
            out.append(tip)
            tip = self.parent[tip]
        out.reverse()
        return out

    def chain(self, tip: str | None) -> Chain:
        """The messages from the root to ``tip`` as a Chain (for commit's decision)."""
        c = Chain()
        for oid in self.path(tip):
            c.ids.append(oid)
            c.data.append(self.data[oid])
            c.messages.append(self.messages[oid])
            c.blobs.append(self.blobs[oid])
        return c


def build_tree(conv: Conversation, config: Config | None = None) -> Built:
    """Hash every node (parents first). Raises the input errors before anything is written."""
    config = config or Config()
    nodes = conv.nodes
    if not nodes:
        raise SchemaValidationFailed("the conversation has no messages")
    if len(nodes) > config.max_messages:
        raise PayloadTooLarge(
            f"{len(nodes)} messages in one conversation; the limit is {config.max_messages} (limits.max_messages)"
        )
    by_key: dict[str, Node] = {}
    for n in nodes:
        if n.key in by_key:
            raise SchemaValidationFailed(f"message id {n.key!r} appears twice in one conversation")
        by_key[n.key] = n
    children: dict[str | None, list[Node]] = {}
    for n in nodes:
        p = n.parent if n.parent in by_key else None
        children.setdefault(p, []).append(n)
    b = Built(conv)
    # Parent-first walk from the roots; a node never reached sits on a cycle.
    stack = list(reversed(_sorted(children.get(None, []))))
    while stack:
        n = stack.pop()
        b.order.append(n)
        stack.extend(reversed(_sorted(children.get(n.key, []))))
    if len(b.order) != len(nodes):
        raise SchemaValidationFailed("the conversation's parent links form a cycle")
    for i, n in enumerate(b.order):
        parent_key = n.parent if n.parent in by_key else None
        parent = b.oid[parent_key] if parent_key is not None else None
        t = n.time_ms if n.time_ms is not None else (b.time.get(parent_key) if parent_key is not None else None)
        if t is not None:
            b.time[n.key] = t
        oid = _hash(b, n, parent, config)
        b.oid[n.key] = oid
    _heads(b, children, by_key)
    return b


def _sorted(nodes: list[Node]) -> list[Node]:
    """Siblings in a stable order independent of the file: by time, then key."""
    if len(nodes) < 2:
        return nodes
    return sorted(nodes, key=lambda n: (n.time_ms if n.time_ms is not None else -1, n.key))


def _hash(b: Built, n: Node, parent: str | None, config: Config) -> str:
    d = n.draft
    blobs: list[tuple[str, bytes]] = []
    src = d.parts
    if len(src) > 1:  # an empty text beside other parts carries nothing (as in commit's input)
        src = tuple(p for p in src if not (isinstance(p, TextPart) and not p.text and p.blob is None and p.meta is None)) or src
    try:
        parts = tuple(_store_large(p, blobs) for p in src)
        msg = Message(parent=parent, role=d.role, parts=parts, meta=d.meta)
        oid, data = codec.encode_and_hash(msg)
    except codec.EncodeError as e:
        raise SchemaValidationFailed(f"message {n.key}: {e}") from e
    if len(data) > config.max_message_bytes:
        raise PayloadTooLarge(
            f"message {n.key} is {len(data)} bytes encoded; the limit is {config.max_message_bytes} (limits.max_message_bytes)"
        )
    if d.claimed_parent is not None and d.claimed_parent != parent:
        raise HashMismatch(f"message {n.key} claims parent {d.claimed_parent} but its parent is {parent}",
                           claimed=d.claimed_parent, computed=parent)
    if d.claimed_id is not None and d.claimed_id != oid:
        raise HashMismatch(f"message {n.key} claims id {d.claimed_id} but hashes to {oid}",
                           claimed=d.claimed_id, computed=oid)
    if oid not in b.data:
        b.parent[oid] = parent
        b.data[oid] = data
        b.messages[oid] = msg
        b.blobs[oid] = blobs
    return oid


def _heads(b: Built, children: dict, by_key: dict[str, Node]) -> None:
    leaves = [n for n in b.order if n.key not in children]
    if not b.conv.tree:
        # One linear history: the last node in reading order is the tip.
        b.main = b.oid[b.order[-1].key] if b.order else None
        if len(leaves) > 1:
            raise SchemaValidationFailed("a linear conversation has more than one last message")
        b.head_key[b.main] = b.order[-1].key
        return
    cur = b.conv.current
    if cur is not None and cur in by_key:
        b.main = b.oid[cur]
        b.head_key[b.main] = cur
    else:
        # No (usable) current leaf: the newest leaf, ties broken by key (file order never counts).
        best = max(leaves, key=lambda n: (b.time.get(n.key, -1), n.key))
        b.main = b.oid[best.key]
        b.head_key[b.main] = best.key
    seen = {b.main}
    for n in sorted(leaves, key=lambda n: (b.time.get(n.key, -1), n.key)):
        oid = b.oid[n.key]
        if oid not in seen:
            seen.add(oid)
            b.heads.append(oid)
            b.head_key[oid] = n.key
