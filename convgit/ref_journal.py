"""The refs journal (docs/format.md §4 Journal): ``logs/journal``, one line per thread about
to change (and one per reflog about to be archived), appended before the change, never
fsynced: the hint that lets the index read only what moved (§8). A mixin of ``RefStore``
(convgit.refs), which holds ``journal_path``, ``deleted_logs_dir`` and the per-thread
counters."""

from __future__ import annotations

import threading
from pathlib import Path

from . import fsio

JOURNAL = "journal"  # logs/journal: the names of threads about to change, one per line
JOURNAL_ARCHIVE = "archive "  # a journal line naming a reflog about to be archived (journal_archive)


class RefJournal:
    """Appending to the refs journal; ``RefStore`` supplies ``journal_path``,
    ``deleted_logs_dir``, ``_journal_bytes`` and ``_archived``."""

    def journal(self, names) -> None:
        """Note in ``logs/journal`` that these threads are about to change (docs/format.md
        §4): appended before the reflog line and the ref move, so that the index, which
        remembers how much of the journal it has read, finds what moved in O(changes) instead
        of reading every ref. Not fsynced: within one boot every process sees the line (the
        page cache), and after a reboot (a power loss could have dropped it) the index reads
        every ref once (Index.refresh_if_changed)."""
        names = list(names)
        if names:
            self._append_journal("".join(f"{n}\n" for n in names))

    def journal_archive(self, path: Path) -> None:
        """Note in ``logs/journal`` that a reflog is about to be archived as ``path`` (under
        ``logs/deleted``): a line ``archive <path under logs/deleted>`` (names hold no spaces,
        so it is never a thread's), appended before the archive is written, so that the index
        reads the turns it names as a rebuild does (docs/format.md §4 Journal). The path is
        also kept for this thread's transaction (``take_archived``), which hands it to the
        index itself: another process's catch-up may read the line before the file exists."""
        rel = path.relative_to(self.deleted_logs_dir).as_posix()
        self._append_journal(f"{JOURNAL_ARCHIVE}{rel}\n")
        self._archived.setdefault(threading.get_ident(), []).append(rel)

    def take_archived(self) -> list[str]:
        """The reflogs this thread archived (paths under ``logs/deleted``) since it last asked."""
        return self._archived.pop(threading.get_ident(), [])

    def _append_journal(self, text: str) -> None:
        fsio.append_line(self.journal_path, text, fsync=False)
        me = threading.get_ident()  # (per thread: another thread's lines are another writer's)
        self._journal_bytes[me] = self._journal_bytes.get(me, 0) + len(text.encode("utf-8"))

    @property
    def journal_bytes(self) -> int:
        """Bytes this thread appended to the journal through this RefStore (a transaction's own
        lines are the difference between two looks)."""
        return self._journal_bytes.get(threading.get_ident(), 0)

    def rotate_journal(self) -> None:
        """Start an empty journal (gc, under the exclusive store lock: no writer runs). Its
        new inode tells every index to read every ref once."""
        if self.journal_path.exists():
            fsio.replace_file(self.journal_path, b"", fsync=False)
