"""``LogEntry``: one message of a log walk as the library returns it (``convgit.log``,
``iter_log``; re-exported by convgit.api). Apart from api.py so that a command that walks no
log (status, search, commit) creates no dataclass for it (start-up: docs/performance.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .texts import part_json
from .timefmt import iso

if TYPE_CHECKING:
    from .objects import Message
    from .repository import Repository


@dataclass
class LogEntry:
    """One message of a log walk: its id, parent, role, visible text, depth from the tip, and
    the turn that gives it its time and model on this thread (``provenance`` says which rule)."""

    id: str
    parent: str | None
    role: str
    message: Message
    text: str
    depth: int
    turn: dict | None

    def to_json(self, repo: Repository) -> dict:
        """The ``log --json`` shape of this entry (docs/json.md); ``repo`` resolves blob text."""
        t = self.turn or {}
        return {
            "id": self.id,
            "parent": self.parent,
            "role": self.role,
            "text": self.text,
            "parts": [part_json(repo, p) for p in self.message.parts],
            "meta": self.message.meta,
            "depth": self.depth,
            "turn": t.get("turn"),
            "started_at": iso(t.get("started_at")),
            "model": t.get("resolved_model") or t.get("model"),
            "provenance": t.get("provenance"),
            "key": self.key,
        }

    @property
    def key(self) -> str:
        """The time-sortable key (index/filters.py): turn start, turn id, depth, of the message's
        earliest turn anywhere (so a message has one key whichever thread shows it)."""
        from .index.filters import sort_key

        t = self.turn or {}
        if "key_turn" in t:  # shown from the thread's own turn; the key is the store-wide one
            return sort_key(t["key_started_at"], t["key_turn"], self.id, self.depth)
        return sort_key(t.get("started_at"), t.get("turn"), self.id, self.depth)
