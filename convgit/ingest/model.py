"""What every input format is turned into before anything is hashed or written."""

from __future__ import annotations

from typing import Any

import msgspec

from ..objects import Part


class Draft(msgspec.Struct, frozen=True):
    """One normalised message, not yet hashed. ``claimed_id``/``claimed_parent`` are ids the
    payload carried itself; they must match what convgit computes."""

    role: str
    parts: tuple[Part, ...]
    meta: dict[str, Any] | None = None
    claimed_id: str | None = None
    claimed_parent: str | None = None


class TurnInfo(msgspec.Struct, frozen=True):
    """Turn metadata a payload may carry (a recorded model call, or import provenance)."""

    model: str | None = None
    resolved_model: str | None = None
    options: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    started_at: int | None = None
    duration_ms: int | None = None
    error: str | None = None
    source: str | None = None
    upstream_thread_id: str | None = None
    meta: dict[str, Any] | None = None

    def is_call(self) -> bool:
        """True if this records a real model call (which is recorded even when nothing is new)."""
        return any(
            v is not None
            for v in (self.model, self.resolved_model, self.usage, self.started_at, self.duration_ms, self.error)
        )


class Payload(msgspec.Struct, frozen=True):
    """One conversation: input messages, the model's response (may be empty), turn metadata."""

    messages: tuple[Draft, ...]
    response: tuple[Draft, ...] = ()
    turn: TurnInfo = TurnInfo()
    has_response: bool = False

    @property
    def all_messages(self) -> tuple[Draft, ...]:
        """The request's messages followed by the response's."""
        return self.messages + self.response


class Node(msgspec.Struct, frozen=True):
    """One message of an imported conversation, linked to its parent by the source's own key.

    ``time_ms``/``model``/``usage``/``duration_ms``/``meta`` are provenance: they go into the
    node's turn, never into the message, so identical content still collapses to one message.
    A node's turn covers ``span`` messages (this one and ``span - 1`` ancestors), as a
    recorded model call covers its request and its response.
    """

    key: str
    parent: str | None
    draft: Draft
    time_ms: int | None = None
    model: str | None = None
    resolved_model: str | None = None
    usage: dict[str, Any] | None = None
    duration_ms: int | None = None
    options: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    alias: bool = True  # ``key`` is a real source id (kept as an alias of the message)
    span: int = 1


class NativeLine(msgspec.Struct, frozen=True):
    """One reflog line of an exported thread that named a turn."""

    old: str | None
    new: str | None
    turn: str
    time_ms: int
    message: str = ""


class NativeThread(msgspec.Struct, frozen=True):
    """What a convgit export carries beyond its messages: the thread's name, fork origin and
    recorded turns (``turns``: id → the exact bytes, verified), replayed by ``import``."""

    name: str | None
    tip: str
    forked_from: str | None = None
    forked_at: str | None = None
    turns: list[tuple[str, bytes]] = []
    reflog: list[NativeLine] = []


class Conversation(msgspec.Struct):
    """One conversation read from an export: nodes in any order, linked by key.

    ``tree``: the export's tree is the truth (every leaf becomes a thread, the main thread
    follows ``current``). Otherwise the conversation is one linear history, and a thread
    known by ``source`` + ``upstream_id`` whose earlier messages differ is a conflict.
    """

    source: str
    nodes: list[Node]
    upstream_id: str | None = None
    current: str | None = None
    tree: bool = False
    title: str | None = None
    meta: dict[str, Any] | None = None
    turn: TurnInfo = TurnInfo()
    label: str = ""
    warnings: list[str] = []
    size: int = 0  # bytes of input this conversation came from (progress)
    native: NativeThread | None = None  # a convgit export: its thread, forks and turns come back
