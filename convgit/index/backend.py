"""What the rest of convgit calls on the index: ``IndexBackend``, the interface a second
backend (a PostgreSQL index) implements. ``convgit.index.Index`` is the SQLite one.

Inputs and outputs are plain values (names, ids, dicts, lists): no SQL, no connection, no
cursor crosses this line. Every lookup heals (healing.py): a damaged index is rebuilt and
the lookup runs again; a full disk is StorageFailed. docs/index.md lists the methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Protocol


class IndexBackend(Protocol):
    """The derived index as convgit uses it: catch-up, rebuild and the lookups."""

    path: Path
    rebuilt: bool  # rebuilt since it was opened (status reports it)

    # -- catching up and rebuilding (writer.py)
    def refresh_if_changed(self) -> None:
        """Catch up with the refs, reading only what the refs journal says moved."""

    def refresh(self) -> None:
        """Catch up with every ref on disk."""

    def rebuild(self, progress=None) -> dict:
        """Build afresh from objects, refs and reflogs; ``{"messages", "threads", "seconds"}``.
        ``progress(done, total)``, optional: called as the work advances (for a bar)."""

    def record_moves(self, names: Iterable[str], cache: dict | None = None, *, fast_forward: bool = False,
                     written: dict | None = None, journal_end: int | None = None, archived: Iterable[str] = ()) -> None:
        """After a repository transaction: index the threads it moved (and what the refs
        journal says others moved), using the objects it wrote (``cache``: oid → object) and
        the threads it created (``written``: name → (tip, whole reflog), trusted while the
        journal ends at ``journal_end``: no other writer moved anything since), and the turns
        of the reflogs it archived (``archived``: paths under ``logs/deleted``)."""

    def refs_unchanged(self) -> bool:
        """Nothing moved since the index last looked (O(1))."""

    def pending_names(self) -> set[str] | None:
        """The threads that moved since, or None when only reading every ref can tell."""

    def close(self) -> None:
        """Release the connection."""

    # -- lookups of commit, import and revparse (lookups.py)
    def threads_at(self, tip: str) -> list[str]:
        """Threads whose tip is ``tip``."""

    def threads_containing(self, oid: str, limit: int = 1) -> list[str]:
        """Threads whose history holds ``oid``."""

    def thread_for_upstream(self, source: str, upstream: str) -> str | None:
        """The thread an import of this upstream conversation moved last."""

    def upstream_threads(self, source: str, upstream: str) -> list[tuple[str, str | None]]:
        """(thread, branch) of every thread an import of this upstream conversation moved."""

    def known_aliases(self, source: str, pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which (source id, message id) pairs are recorded."""

    def find_alias(self, source: str, source_id: str) -> list[str]:
        """Message ids a source id names (exact, else a unique prefix)."""

    # -- lookups of the porcelain
    def thread_rows(self) -> list[dict]:
        """Every thread: tip, count, times, fork source, title id."""

    def message_text(self, oid: str) -> str:
        """The text parts of a message, joined."""

    def turn_info(self, oids: Iterable[str]) -> dict[str, dict]:
        """message id → its turn's time and model."""

    def thread_turns(self, thread: str) -> list[dict]:
        """The turns of a thread's own history (provenance)."""

    def depth(self, oid: str) -> int | None:
        """A message's depth (root 0), None when not indexed."""

    def dump(self) -> dict:
        """Every derived row, canonically (fsck compares it with a rebuild's)."""

    # -- status and fsck
    def thread_tips(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """name → recorded tip, for all threads or ``names``."""

    def counts(self) -> dict:
        """messages, message_refs, text_bytes, threads, turns, built_at."""

    def quick_check(self) -> str | None:
        """The backend's own consistency check ("ok" when sound)."""

    def check(self) -> list[str]:
        """What is wrong (fsck): the backend's own check, then a comparison with a rebuild."""

    # -- log and search
    def key_of(self, oid: str) -> str | None:
        """The time-sortable key of a message (filters.py)."""

    def iter_messages(self, rev: str | None = None, *, all_threads: bool = False,
                      filters=None) -> Iterator[tuple[str, object, int, dict | None]]:
        """(id, message, depth, turn info) in log order, filtered."""

    def search(self, text: str, **options) -> list:
        """Full-text matches (``count``, ``latest``, ``columns``, ``filters``), best first."""

    def turn_rows(self, filters=None, count: int = 0, *, schema: bool = False) -> list[dict]:
        """Recorded calls (and imported per-message turns), newest first, filtered."""

    def calls_cover(self, filters) -> set[str]:
        """The ids of the messages the recorded calls passing ``filters``' turn conditions covered."""
