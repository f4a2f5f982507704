"""Creating many threads at once straight in ``packed-refs`` and ``packed-logs`` (docs/format.md
§6.3 "Bulk creation"): an import or a bulk commit of hundreds of new threads writes two files
and renames them in, instead of a lock file, a reflog file and a ref file per thread (each a
file creation: ~1 ms on a contended disk with online discard) that a packing then reads back
and unlinks. A mixin of ``RefStore`` (convgit.refs), which holds the paths, the locks, the
journal and the reading of refs and reflogs.

Safety rests on one rule that every writer keeps: a thread is created only under the
*creation lock* (``packed-refs.lock``, ``RefStore._creating``), held from the last check that
the thread is absent to the commit point. A bulk creation holds it (and no ref lock: the
lock order, a ref's lock then ``packed-refs.lock``, is kept), checks each name is absent
(no loose ref, no packed line, no reflog of its own, no file/directory conflict), and
creates only those; so two creations of one name never both succeed, and a concurrent
writer moving an existing thread is not touched (a bulk creation never names an existing
thread).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import fsio
from .config import crash_point
from .errors import ConvgitError, InvalidRefName, ObjectMissing, StorageFailed
from .ids import check_thread_name, is_oid
from .refformat import PACKED_REFS, format_reflog_line, open_packed_refs

BULK_CREATE_MIN = 4  # creations in one update_many from which they go straight into the packed files
# ... while the two packed files together are no larger than this many bytes per creation (both
# are rewritten whole: that must cost less than the files it saves; a creation costs ~3 file
# creations and, at the next packing, their reading and unlinking).
BULK_BYTES_PER_CREATE = 64 * 1024
PACKED_LOGS_FILE = "packed-logs"

if TYPE_CHECKING:
    from .packedlogs import PackedLog


class RefCreation:
    """``_create_packed`` and what it needs; ``RefStore`` supplies the rest."""

    def _create_packed(self, moves, idx: list[int], results: list, exists, written: dict | None) -> list[int]:
        """Create the threads of ``moves[i]`` for ``i`` in ``idx`` (each ``expected`` None, each
        name once) straight in ``packed-refs`` and ``packed-logs``. Sets ``results[i]`` (None:
        created; or the error) for those it handles, and returns the others, for the per-ref
        path (``update_many``'s batches): a name that exists, has a reflog of its own (a stale
        one is archived there), conflicts with another name, or a store whose packed files
        are too large for the batch or unreadable here. ``written``: filled with name ->
        (tip, its whole reflog) of each thread created, for the index (no read back)."""
        if getattr(self, "declare_packed", None) is None or getattr(self, "declare_packed_logs", None) is None:
            return list(idx)
        todo: list[int] = []
        for i in idx:
            m = moves[i]
            if not is_oid(m.new):
                results[i] = ObjectMissing(f"not an object id: {m.new!r}")
            elif exists is not None and not exists(m.new):
                results[i] = ObjectMissing(f"cannot point thread {m.name!r} at missing object {m.new}", oid=m.new)
            else:
                try:
                    check_thread_name(m.name)
                except InvalidRefName:
                    return list(idx)  # (the per-ref path raises it, as for any move)
                todo.append(i)
        if len(todo) < BULK_CREATE_MIN or self._packed_bytes() > len(todo) * BULK_BYTES_PER_CREATE:
            return todo
        with self._creating():
            try:
                with open(os.open(self.packed_path, os.O_RDONLY | fsio.NOFOLLOW), "rb") as f:
                    data: bytes | None = f.read()
            except FileNotFoundError:
                data = None
            except OSError:  # a symlink (refused where packed-refs is read) or unreadable
                return todo
            packed = open_packed_refs(data or b"")
            try:
                logs = self.packed_logs()
            except ConvgitError:  # damaged, a symlink: the per-ref path reports it
                return todo
            if not packed.header_ok:
                return todo
            names = {moves[i].name for i in todo}
            prefixes = {n[:k] for n in names for k in range(len(n)) if n[k] == "/"}
            create, rest = [], []
            dirs: dict[str, bool] = {}  # parent directory -> may hold a new thread's name
            for i in sorted(todo, key=lambda i: moves[i].name):
                name = moves[i].name
                if self._absent(name, packed, logs, names, prefixes, dirs):
                    create.append(i)
                else:
                    rest.append(i)
            if not create:
                return rest
            self._bulk_write(moves, create, data, packed, logs, results, written)
        return rest

    def _packed_bytes(self) -> int:
        n = 0
        for p in (self.packed_path, self.packed_logs_path):
            try:
                n += os.stat(p).st_size
            except OSError:
                pass
        return n

    def _absent(self, name: str, packed, logs, names: set[str], prefixes: set[str], dirs: dict) -> bool:
        """Whether thread ``name`` can be created here: no loose ref file or directory, no
        packed line, no live reflog (loose or packed: a stale one is archived by the per-ref
        path), and no file/directory conflict with a thread or another name of the batch.
        Under the creation lock, nothing else can create it until the commit point."""
        if packed.mentions({name}) or packed.has_under(name):
            return False
        if logs is not None and logs.get(name) is not None:
            return False
        for base in (self.threads_dir, self.logs_dir):
            try:
                os.lstat(f"{base}/{name}")  # (a string: pathlib's join cost more than the lstat)
                return False  # a file, a directory or a symlink there: not the fast path
            except FileNotFoundError:
                pass
            except OSError:  # (a component is a file: a conflict the per-ref path names)
                return False
        parts = name.split("/")
        for k in range(1, len(parts)):
            parent = "/".join(parts[:k])
            if parent in names or parent in packed:
                return False
            ok = dirs.get(parent)
            if ok is None:
                try:
                    ok = stat.S_ISDIR(os.lstat(f"{self.threads_dir}/{parent}").st_mode)  # (not a thread, nor a symlink)
                except FileNotFoundError:
                    ok = True
                except OSError:
                    ok = False
                dirs[parent] = ok
            if not ok:
                return False
        return name not in prefixes  # (another name of the batch is under it)

    def _bulk_write(self, moves, create: list[int], data: bytes | None, packed, logs, results: list,
                    written: dict | None) -> None:
        """Under the creation lock: the journal lines, then the two files written beside the
        old ones, one syncfs, ``packed-logs`` renamed in (and its directory fsynced), then
        ``packed-refs``: that rename, made durable, is the commit point of every creation."""
        if data is None:
            self.declare_packed()  # the format version that reads packed-refs, before it exists
        self.declare_packed_logs()  # ... and packed-logs (version 3)
        self.journal([moves[i].name for i in create])  # under the creation lock (§4 Journal)
        from .packedlogs import PackedLog, rewrite_packed_logs  # (imported where reflogs are packed)

        now = int(time.time() * 1000)
        entries: dict[str, PackedLog | None] = {}
        tips: dict[str, str | None] = {}
        for i in create:
            m = moves[i]
            t = m.time_ms if m.time_ms is not None else now
            lines, prev = [], None
            for tip, turn, msg in (*m.steps, (m.new, m.turn, m.message)):
                if prev != tip or turn is not None:
                    lines.append(format_reflog_line(prev, tip, t, turn, msg))
                prev = tip
            lines += [format_reflog_line(m.new, m.new, t, turn, msg) for turn, msg in m.extra]
            entries[m.name] = PackedLog(m.name, "".join(lines).encode("utf-8"))
            tips[m.name] = m.new
        root = self.root
        stamp = f"{os.getpid()}.{time.monotonic_ns()}"
        tmp_logs = root / f"{fsio.TMP_PREFIX}{PACKED_LOGS_FILE}.{stamp}"
        tmp_refs = root / f"{fsio.TMP_PREFIX}{PACKED_REFS}.{stamp}"
        renamed: list[str] = []
        try:
            fsio.write_new_file(tmp_logs, rewrite_packed_logs(logs, entries))
            fsio.write_new_file(tmp_refs, packed.with_changes(tips))
            if self.fsync:
                fsio.sync_filesystem(root)  # both new files durable before either is renamed in
            crash_point("bulk_after_tmp_fsync")
            fsio.rename(tmp_logs, self.packed_logs_path)
            renamed.append("logs")
            if self.fsync:
                fsio.fsync_dir(root)  # the reflogs never lag their refs, whatever the file system
            crash_point("bulk_after_logs_rename")
            fsio.rename(tmp_refs, self.packed_path)
            renamed.append("refs")
            if self.fsync:
                fsio.fsync_dir(root)  # the commit point of every creation of the batch
            crash_point("bulk_after_rename")
        except StorageFailed:
            self._undo_bulk(renamed, tmp_logs, tmp_refs, data, set(entries))
            raise
        for i in create:
            results[i] = None
            if written is not None:
                written[moves[i].name] = (moves[i].new, entries[moves[i].name].data)

    def _undo_bulk(self, renamed: list[str], tmp_logs: Path, tmp_refs: Path, data: bytes | None, names: set[str]) -> None:
        """Best effort after a failed bulk creation (still under the creation lock): the old
        ``packed-refs`` back first (the threads are gone again), then their packed reflogs out."""
        try:
            fsio.unlink_quiet(tmp_logs)
            fsio.unlink_quiet(tmp_refs)
            if "refs" in renamed:
                if data is None:
                    fsio.unlink(self.packed_path)
                else:
                    fsio.replace_file(self.packed_path, data, fsync=False)
            if "logs" in renamed:
                logs = self.packed_logs()
                if logs is not None:
                    from .packedlogs import rewrite_packed_logs

                    fsio.replace_file(self.packed_logs_path, rewrite_packed_logs(logs, dict.fromkeys(names)), fsync=False)
            self.journal(sorted(names))  # changed back
        except Exception:  # the original error is the one to report
            pass

