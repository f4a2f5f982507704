"""Typed results of the ref operations (rename, delete, switch, update-ref, restore).

Each is a frozen dataclass with ``to_json()`` (the ``--json`` document, docs/json.md) that also
reads as that document (``result["tip"]``, ``result.get("warnings")``, ``result == {...}``): these
results were plain dicts before, and code written against them keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .document import Document as _Document
from .document import with_warnings as _with_warnings


@dataclass(frozen=True, eq=False)
class RenameResult(_Document):
    """``rename_thread``: the old and new names and the tip; ``warnings`` after the rename."""

    old: str
    new: str
    tip: str
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """``threads rename --json``."""
        return _with_warnings({"status": "renamed", "old": self.old, "new": self.new, "tip": self.tip}, self.warnings)


@dataclass(frozen=True, eq=False)
class DeleteResult(_Document):
    """``delete_thread``: the thread and its last tip (None for an unreadable ref file, with
    ``broken`` saying why), and where HEAD is now."""

    thread: str
    tip: str | None
    broken: str | None
    head: str | None
    head_moved: bool
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """``threads delete --json``."""
        return _with_warnings({"status": "deleted", "thread": self.thread, "tip": self.tip, "broken": self.broken,
                               "head": self.head, "head_moved": self.head_moved}, self.warnings)


@dataclass(frozen=True, eq=False)
class SwitchResult(_Document):
    """``switch``: the thread HEAD names now, and its tip."""

    thread: str
    tip: str | None

    def to_json(self) -> dict:
        """``switch --json``."""
        return {"status": "switched", "thread": self.thread, "tip": self.tip}


@dataclass(frozen=True, eq=False)
class UpdateRefResult(_Document):
    """``update_ref``: the thread, its tip before and after (None: absent)."""

    thread: str
    old: str | None
    new: str | None

    def to_json(self) -> dict:
        """``update-ref --json``."""
        return {"status": "updated", "thread": self.thread, "old": self.old, "new": self.new}


@dataclass(frozen=True, eq=False)
class RestoreResult(_Document):
    """``restore_thread``: the thread brought back, its tip, and the archived reflog it came from."""

    thread: str
    tip: str
    source: str

    def to_json(self) -> dict:
        """``threads restore --json``."""
        return {"status": "restored", "thread": self.thread, "tip": self.tip, "from": self.source}


__all__ = ["DeleteResult", "RenameResult", "RestoreResult", "SwitchResult", "UpdateRefResult"]
