"""What the index knows of the refs journal (docs/format.md §8 "Catch-up"): where it stopped
reading ``logs/journal``, with the journal's inode, the boot id and the ref directories'
mtimes, and the O(1) checks that say whether anything moved since (a mixin of IndexWriter,
which does the catching up itself)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from ..errors import InvalidInput, ObjectCorrupt
from ..refs import JOURNAL_ARCHIVE
from .healing import healing


class JournalState:
    """The index's reading position in the refs journal; IndexWriter provides ``repo``,
    ``db``, ``refresh`` and ``_catch_up_journal``."""

    def _ref_dirs_signature(self, dirs) -> tuple:
        out = []
        for d in dirs:
            try:
                out.append((d, os.stat(d).st_mtime_ns))
            except FileNotFoundError:
                out.append((d, None))
        return tuple(out)

    @healing
    def refresh_if_changed(self) -> None:
        """Bring the index up to the refs, reading only what changed (O(changes), not
        O(threads)): docs/format.md §8 "Catch-up".

        Every convgit ref move first appends the thread's name to ``logs/journal`` (RefStore.
        journal); the index records how much of the journal it has read (with the journal's
        inode, the boot id and the ref directories' mtimes). If nothing was appended and no
        directory changed, nothing is read; if lines were appended, just those threads are
        caught up. Everything is read again when the journal was replaced (gc), the machine
        rebooted since (a power loss may have dropped unsynced journal lines), or a ref
        directory changed with no journal line to explain it (a ref copied in by another
        tool). A ref copied in while a convgit write in the same directory runs, or a ref file
        overwritten in place, is noticed by ``convgit reindex`` and ``fsck``.
        """
        state = self._load_state()
        if state is None:
            self.refresh()
            return
        ino, size = _journal_stat(self.repo.refs.journal_path)
        if state.get("boot") != _boot_id() or ino != state.get("ino") or size < state.get("size", 0):
            self.refresh()
            return
        dirs = self._ref_dirs_signature([d for d, _ in state.get("dirs", [])])
        if size == state["size"]:
            if [list(x) for x in dirs] != state.get("dirs"):
                self.refresh()
            return
        self._catch_up_journal(state, dirs)

    def refs_unchanged(self) -> bool:
        """Has nothing changed since the index last looked (no journal line, no directory
        change; O(1))?"""
        state = self._load_state()
        if state is None:
            return False
        ino, size = _journal_stat(self.repo.refs.journal_path)
        if state.get("boot") != _boot_id() or ino != state.get("ino") or size != state.get("size"):
            return False
        return [list(x) for x in self._ref_dirs_signature([d for d, _ in state.get("dirs", [])])] == state.get("dirs")

    def pending_names(self) -> set[str] | None:
        """The threads the journal says moved since the index last looked (what
        ``refresh_if_changed`` would catch up), or None when only reading every ref can tell."""
        state = self._load_state()
        if state is None:
            return None
        ino, size = _journal_stat(self.repo.refs.journal_path)
        if state.get("boot") != _boot_id() or ino != state.get("ino") or size <= state.get("size", 0):
            return None if not self.refs_unchanged() else set()
        return self._journal_since(state["size"])[0]

    def _load_state(self) -> dict | None:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='refs_state'").fetchone()
            state = json.loads(row[0]) if row else None
        except (sqlite3.DatabaseError, ValueError, TypeError):
            return None
        return state if isinstance(state, dict) and isinstance(state.get("dirs"), list) else None

    def _new_state(self, start: int, dirs, ino=None) -> dict:
        if ino is None:
            ino = _journal_stat(self.repo.refs.journal_path)[0]
        return {"ino": ino, "size": start, "boot": _boot_id(), "dirs": [list(x) for x in dirs]}

    def _journal_since(self, offset: int) -> tuple[set[str], list[str], int]:
        """The thread names appended to the journal from byte ``offset`` (whole lines only),
        the reflogs archived meanwhile (``archive`` lines: paths under ``logs/deleted``), and
        where they end."""
        try:
            with open(self.repo.refs.journal_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return set(), [], offset
        end = data.rfind(b"\n") + 1
        names, archives = set(), []
        for ln in data[:end].decode("utf-8", "replace").split("\n"):
            if ln.startswith(JOURNAL_ARCHIVE):
                archives.append(ln[len(JOURNAL_ARCHIVE):])
            elif ln:
                names.add(ln)
        return names, archives, offset + end

    def _read_refs(self, names) -> dict[str, str]:
        out = {}
        for n in names:
            try:
                tip = self.repo.refs.read(n)
            except (ObjectCorrupt, InvalidInput):
                continue  # a broken or badly named ref is left out (fsck names it)
            if tip is not None:
                out[n] = tip
        return out

    def _fresh_state(self) -> dict:
        """The catch-up state of the refs as they are now: the journal's end, the ref
        directories' and packed-refs' mtimes (what an index that has read every ref after
        this holds)."""
        base = self.repo.refs.threads_dir
        dirs = [dp for dp, _, _ in os.walk(base)] or [str(base)]
        dirs.append(str(self.repo.refs.packed_path))  # packed refs (a file: its mtime is watched too)
        ino, start = _journal_stat(self.repo.refs.journal_path)
        return self._new_state(start, self._ref_dirs_signature(dirs), ino)


def _journal_stat(path: Path) -> tuple[int | None, int]:
    """(inode, size) of the refs journal; (None, 0) when there is none yet."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, 0
    return st.st_ino, st.st_size


_BOOT_ID: list = []


def _boot_id() -> str | None:
    """This boot's id (Linux), or None where the system has none to give."""
    if not _BOOT_ID:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _BOOT_ID.append(f.read().strip())
        except OSError:
            _BOOT_ID.append(None)
    return _BOOT_ID[0]
