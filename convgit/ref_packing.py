"""Packing refs and reflogs (docs/format.md §4.1, §4.2, §6.4): every loose ref into
``packed-refs`` and every loose reflog into ``packed-logs``, under the exclusive store lock,
crash-safe at every step. A mixin of ``RefStore`` (convgit.refs), which holds the paths, the
locks, the journal and the reading of refs and reflogs."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from . import fsio
from .config import crash_point
from .errors import InvalidRefName, ObjectCorrupt
from .ids import check_thread_name
from .refformat import PACKED_REFS, log_is_clean

if TYPE_CHECKING:
    from .packedlogs import PackedLog


class RefPacking:
    """``pack_refs`` and what it needs; ``RefStore`` supplies the rest."""

    def has_loose_refs(self) -> bool:
        """Whether any thread has a loose ref file or loose reflog (what ``pack_refs`` packs)."""
        return (next(iter(self._loose_names()), None) is not None
                or next((n for n, _ in self.iter_log_files() if n is not None), None) is not None)

    def count_loose_refs(self, limit: int) -> int:
        """How many loose ref files there are, counting no further than ``limit`` + 1."""
        n = 0
        for _dirpath, _dirs, files in os.walk(self.threads_dir):
            n += sum(1 for f in files if not (f.endswith(".lock") or f.startswith(fsio.TMP_PREFIX)))
            if n > limit:
                break
        return n

    def pack_refs(self, *, rewrites: dict[str, bytes] | None = None, journal: bool = False) -> int:
        """Move every loose ref into ``packed-refs`` and every loose reflog into
        ``packed-logs`` (under the exclusive store lock: gc, or a writer past
        AUTO_PACK_LOOSE; docs/format.md §6.4). Returns how many loose refs were packed.

        ``rewrites``: name -> the whole new reflog of that thread (gc's reflog expiry), packed
        in place of what it had. ``journal``: name every thread packed in the refs journal
        first (values do not change, so the index catches them up in O(threads packed); gc
        replaces the journal instead).

        Under ``packed-refs.lock``: the loose reflogs are read with their inodes, merged
        after the packed ones, and ``packed-logs`` is written (temp file, fsync, rename, the
        directory fsynced), each entry saying which loose file it absorbed; then the loose
        refs and the packed ones are merged (a loose ref wins) and ``packed-refs`` written
        the same way: the commit point. Then each loose file is unlinked, only if it still
        holds what was packed. A crash anywhere leaves each
        thread at its value and its reflog whole: before a rename nothing changed; after it
        the packed line and any loose ref left hold the same tip, and a loose reflog left
        is skipped by the reader as far as its packed entry absorbed it (a loose reflog is
        unlinked only while it still holds exactly what was absorbed). A ref that cannot
        be read stops it (ObjectCorrupt) before anything is written; a loose reflog with a
        line that does not parse stays loose (fsck names it)."""
        rewrites = dict(rewrites or {})
        with self._packed_locked():
            packed = self.packed()
            if not packed.header_ok:
                raise ObjectCorrupt(f"{PACKED_REFS} has an unknown header: not rewritten (run convgit fsck)")
            loose: dict[str, str] = {}
            for name in sorted(self._loose_names()):
                try:
                    check_thread_name(name)
                except InvalidRefName:
                    raise ObjectCorrupt(f"ref file with an invalid thread name: {name!r}", ref=name) from None
                tip = self._read_path(self.threads_dir / name, name)
                if tip is not None:
                    loose[name] = tip
            logs: dict[str, tuple[bytes, int]] = {}  # the loose reflogs absorbed: name -> (bytes, inode)
            for name, _path in self.iter_log_files():
                if name is None:
                    continue
                try:
                    check_thread_name(name)
                except InvalidRefName:
                    continue  # not a thread's reflog (fsck names it): left where it is
                data, ino = self._loose_log(name)
                if ino is None:
                    continue
                if log_is_clean(data) or name in rewrites:
                    logs[name] = (data, ino)  # (else left loose: a line that does not parse)
            if not loose and not logs and not rewrites:
                return 0
            if journal:
                self.journal(sorted(set(loose) | set(logs) | set(rewrites)))
            from .packedlogs import PackedLog, absorbed_skip, digest, rewrite_packed_logs  # (where reflogs are packed)

            old_logs = self.packed_logs()
            changes: dict[str, PackedLog | None] = {}
            for name, (data, ino) in logs.items():
                e = old_logs.get(name) if old_logs is not None else None
                base = e.data if e is not None else b""
                changes[name] = PackedLog(name, base + data[absorbed_skip(e, ino, data):], ino, len(data),
                                          digest(data))
            for name, data in rewrites.items():
                e = changes.get(name) or (old_logs.get(name) if old_logs is not None else None)
                changes[name] = PackedLog(name, data) if e is None else PackedLog(name, data, e.ino, e.absorbed, e.digest)
            # Only the chunks these land in are rewritten; an entry elsewhere keeps its marker
            # (harmless once its loose file is gone: a marker names an inode and a digest).
            fsio.replace_file(self.packed_logs_path, rewrite_packed_logs(old_logs, changes), fsync=self.fsync,
                              point="pack_logs_after_tmp_fsync")
            crash_point("pack_logs_after_rename")
            if loose:
                fsio.replace_file(self.packed_path, packed.with_changes(dict(loose)), fsync=self.fsync,
                                  point="pack_refs_after_tmp_fsync")
        crash_point("pack_refs_after_rename")
        # 5. The loose files packed go, each only if it still holds what was packed. No
        # writer runs (the exclusive store lock), so no ref lock is taken: the checks are for
        # what is not convgit; the unlinks overlap (each can wait ~1 ms on a discarding disk).
        doomed: list[Path] = []
        for name, tip in loose.items():
            path = self.threads_dir / name
            try:
                same = self._read_path(path, name) == tip
            except ObjectCorrupt:
                same = False  # changed behind our back: a loose ref wins, so it stays
            if same:
                doomed.append(path)
        if doomed:
            fsio.unlink(doomed[0])
            crash_point("pack_refs_mid_prune")
            fsio.unlink_many(doomed[1:])
        doomed = []
        for name, (data, ino) in logs.items():
            now, now_ino = self._loose_log(name)
            if now_ino == ino and now == data:
                doomed.append(self.log_path(name))
        if doomed:
            fsio.unlink(doomed[0])
            crash_point("pack_logs_mid_prune")
            fsio.unlink_many(doomed[1:])
        for parent in sorted({n.rsplit("/", 1)[0] for n in set(loose) | set(logs) if "/" in n}, reverse=True):
            self._prune_empty_dirs(self.threads_dir / parent)
        return len(loose)

    def _unpack(self, names) -> None:
        """Take ``names`` out of ``packed-refs`` (a delete or a rename; the caller holds their
        ref locks), rewriting it by rename under ``packed-refs.lock``. Nothing is written
        when none of them is packed (lines are added only by a packing, under the exclusive
        store lock, by a batch move holding the lock of each thread it adds, and by a bulk
        creation for threads that do not exist: none races that check for these names, which
        exist and are locked)."""
        names = set(names)
        if not self.packed().mentions(names):
            return
        with self._packed_locked():
            packed = self.packed()
            if not packed.header_ok:
                raise ObjectCorrupt(f"{PACKED_REFS} has an unknown header: not rewritten (run convgit fsck)")
            fsio.replace_file(self.packed_path, packed.with_changes(dict.fromkeys(names)), fsync=self.fsync)

    def _packed_locked(self):
        """``packed-refs.lock``, exclusively. Re-entrant within one thread: a creation holds
        it across its check and its commit point (``_creating``), and what it calls on the
        way (archiving a stale packed reflog, a rename's unpacking) takes it again."""
        if getattr(self, "_packed_owner", None) == threading.get_ident():
            return contextlib.nullcontext()
        return self._packed_lock_held()

    @contextlib.contextmanager
    def _packed_lock_held(self):
        with fsio.flock(self.root / (PACKED_REFS + ".lock"), shared=False, timeout=self.lock_timeout, remove=True):
            self._packed_owner = threading.get_ident()
            try:
                yield
            finally:
                self._packed_owner = None

    def _creating(self):
        """Held by every creation of a thread, from its last check that the thread is absent
        to its commit point (docs/format.md §6.3 "Bulk creation"): ``packed-refs.lock``, in a
        store whose threads may be created straight in ``packed-refs`` (a Repository's; not
        remote-tracking refs), else nothing. The lock order is unchanged: a ref's lock, then
        this one."""
        if getattr(self, "declare_packed", None) is None:
            return contextlib.nullcontext()
        return self._packed_locked()

    # -- reflog -----------------------------------------------------------------------------
