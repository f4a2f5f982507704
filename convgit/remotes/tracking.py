"""Remote-tracking refs: ``refs/remotes/<remote>/<thread>``, what a remote's threads pointed
at when this store last fetched from or pushed to it (reflogs under ``logs/remotes/``).

Each remote's tracking refs are a RefStore of their own (compare-and-swap under lock, a
reflog per ref, the same crash safety as threads), rooted so that none of its files meet
the threads': its own refs directory, reflogs, journal and packed file. They are moved by
the repository transaction only (``tx.move_tracking``), are roots for gc, and name
revisions as ``NAME/THREAD`` or ``remotes/NAME/THREAD``; they are not threads (the index
and ``threads`` list threads; ``threads --remotes`` lists these).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ConvgitError
from ..refs import RefStore

REMOTES = "refs/remotes"
_REMOTE_RE = re.compile(r"[A-Za-z0-9_-]{1,63}\Z")  # a remote's name (remotes.check_remote_name)


class TrackingRefs(RefStore):
    """The tracking refs of one remote."""

    def __init__(self, root: Path, remote: str, *, fsync: bool = True, lock_timeout: float = 30.0) -> None:
        super().__init__(root, fsync=fsync, lock_timeout=lock_timeout)
        self.remote = remote
        self.threads_dir = root / REMOTES / remote
        self.logs_dir = root / "logs" / REMOTES / remote
        self.deleted_logs_dir = root / "logs" / "remotes-deleted" / remote
        self.journal_path = root / "logs" / "remotes" / f"{remote}.journal"
        self.packed_path = root / REMOTES / f"{remote}.packed"
        # Its own packed reflogs too: with the threads' ``packed-logs`` here, a new tracking
        # ref took a thread of the same name's packed reflog for a stale one of its own, and
        # archived it away (the thread lost its reflog on the first push after a gc).
        self.packed_logs_path = root / "logs" / "remotes" / f"{remote}.packed-logs"


def remote_names(root: Path) -> list[str]:
    """The remotes that have tracking refs here: a directory of loose ones, or a packed file
    (``NAME.packed``: written at once by a clone or a first fetch, remotes/bulkrefs.py)."""
    d = root / REMOTES
    try:
        entries = list(d.iterdir())
    except FileNotFoundError:
        return []
    names = {p.name for p in entries if p.is_dir()}
    names |= {p.name[:-len(".packed")] for p in entries
              if p.name.endswith(".packed") and _REMOTE_RE.match(p.name[:-len(".packed")]) and p.is_file()}
    return sorted(names)


def read_tracking(root: Path, rev: str) -> tuple[str, str] | None:
    """``(tip, "remote/thread")`` for ``remotes/NAME/THREAD`` or ``NAME/THREAD`` when that
    tracking ref exists, else None."""
    name = rev[len("remotes/"):] if rev.startswith("remotes/") else rev
    remote, sep, thread = name.partition("/")
    if not sep or not remote or remote not in remote_names(root):
        return None
    try:
        tip = TrackingRefs(root, remote).read(thread)
    except ConvgitError:
        return None
    return (tip, name) if tip else None
