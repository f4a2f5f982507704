"""Threads as ref files, HEAD, compare-and-swap under lock, and the reflog.

``refs/threads/<name>`` holds ``<tip>\\n``. An update takes a kernel lock on the persistent file
``refs/threads/<name>.lock``, re-reads the tip under the lock, notes the thread in the refs
journal, appends the reflog line (which names the turn object recorded with the move, if
any) and writes the new value to a temp file; one ``syncfs`` makes both durable *before* the
rename (as git does, so a turn is never lost); the rename over the ref and an fsync of its
directory are the commit point (docs/format.md §6.2). The line formats are in refformat.

``packed-refs`` (written by gc, ``RefStore.pack_refs``) holds many refs in one file, as in
git: a thread's value is its loose ref file if there is one, else its packed line. A move
writes a loose ref, except in a batch (``update_many``) moving enough existing threads:
their lines are set in one new ``packed-refs`` and their loose files, if any, unlinked after
it (docs/format.md §6.3); a delete takes the thread out of ``packed-refs`` first (under
``packed-refs.lock``), then unlinks the loose file (docs/format.md §4.1, §6.4). Names are
added to ``packed-refs`` only by packing and by such a batch, for threads that exist and
whose locks it holds, and by a bulk creation (convgit.ref_create), for threads that do not
exist, under the creation lock that every creation holds (docs/format.md §6.3).

``packed-logs`` (convgit.packedlogs, docs/format.md §4.2) holds the reflogs packed with them:
a thread's reflog is its packed text followed by its loose reflog file (appends always go to
the loose file). Packing (``pack_refs``) runs only under the exclusive store lock: gc, and a
writer whose moves left more than ``AUTO_PACK_LOOSE`` loose refs (convgit/transaction.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from . import fsio
from .config import crash_point
from .errors import (InvalidRefName, NotFound, ObjectCorrupt, ObjectMissing, RefExists, RefStale, StorageFailed,
                     UnsafeSymlink)
from .ids import ANY, check_thread_name, is_oid, short  # noqa: F401 (ANY re-exported)
from .ref_create import BULK_CREATE_MIN, PACKED_LOGS_FILE, RefCreation
from .ref_head import RefHead, StagedHead  # noqa: F401 (StagedHead re-exported)
from .ref_journal import JOURNAL, JOURNAL_ARCHIVE, RefJournal  # noqa: F401 (re-exported)
from .ref_packing import RefPacking
from .reflog_files import ReflogFiles
from .ref_renames import RENAME_INTENT, RefRenames  # noqa: F401 (RENAME_INTENT re-exported)
from .refformat import (  # noqa: F401 (re-exported: the formats live in refformat)
    PACKED_HEADER, PACKED_REFS, RENAME_PREFIX, THREADS, ReflogEntry, _Packed, broken_ref_fix, format_packed_refs,
    format_reflog_line, log_is_clean, open_packed_refs, parse_log, parse_packed_refs, parse_reflog_line, parse_rename, read_log_file, rename_message,
)

if TYPE_CHECKING:
    from .packedlogs import PackedLogsReader
    from .ref_move import RefMove

BATCH_REFS = 256  # threads locked and moved together by update_many
NOT_APPLIED = object()  # update_many: a move not made
AUTO_PACK_LOOSE = 1024  # more loose refs than this after a write: the writer packs them (§6.4)
JOURNAL_ROTATE = 8 * 1024 * 1024  # a refs journal longer than this: the next writer that can packs every ref and replaces it (§4)
# update_many moves existing threads through packed-refs (docs/format.md §6.3 "Batch moves
# in packed-refs") from this many such moves in a batch, while packed-refs is no larger than
# this many bytes per such move: rewriting the file must cost less than the renames it
# replaces (benchmarks/bench_ref_moves.py: a 1 MB packed-refs ~4-8 ms, a rename 0.2-1.2 ms).
PACKED_MOVES_MIN = 4
PACKED_BYTES_PER_MOVE = 64 * 1024
RENAME_DIRS_MAX = 4  # a batch's renames in at most this many directories: fsynced each, else a syncfs




def __getattr__(name: str):
    # RefMove (a write's compare-and-swap) is in convgit/ref_move.py, imported when a write
    # first asks for it: reading refs (status, log, threads) makes no dataclass for it.
    if name == "RefMove":
        from .ref_move import RefMove

        return RefMove
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RefStore(ReflogFiles, RefPacking, RefRenames, RefCreation, RefJournal, RefHead):
    """The refs of one store: a file per thread under ``refs/threads/``, HEAD, and a reflog
    per thread. Every move is a compare-and-swap under the thread's lock (docs/format.md §6.2)."""

    def __init__(self, root: Path, *, fsync: bool = True, lock_timeout: float = 30.0) -> None:
        self.root = root  # the .convgit directory
        self.fsync = fsync
        self.lock_timeout = lock_timeout
        self.threads_dir = root / THREADS
        self.logs_dir = root / "logs" / THREADS
        self.deleted_logs_dir = root / "logs" / "deleted"
        self.journal_path = root / "logs" / JOURNAL
        self.packed_path = root / PACKED_REFS
        self.packed_logs_path = root / PACKED_LOGS_FILE
        self._packed_cache: tuple[tuple, "_Packed"] | None = None
        self._logs_cache: tuple[tuple, PackedLogsReader, object] | None = None
        # Declares the store's format version that reads packed-refs (Repository sets it):
        # lets a batch move (update_many) make the first packed-refs. None: only gc's does.
        self.declare_packed: Callable[[], None] | None = None
        # ... and the version that reads packed-logs: lets update_many create threads straight
        # in the packed files (convgit.ref_create). None: it never does (remote-tracking refs).
        self.declare_packed_logs: Callable[[], None] | None = None
        self._journal_bytes: dict[int, int] = {}  # thread -> bytes it appended to the journal (journal_bytes)
        self._archived: dict[int, list[str]] = {}  # thread -> reflogs it archived (take_archived)

    # -- paths ------------------------------------------------------------------------------

    def ref_path(self, name: str) -> Path:
        """The ref file of thread ``name``."""
        return self._path(self.threads_dir, name)

    def log_path(self, name: str) -> Path:
        """The reflog file of thread ``name``."""
        return self._path(self.logs_dir, name)

    @staticmethod
    def _path(base: Path, name: str) -> Path:
        p = base / check_thread_name(name)
        if "/" in name:  # a symlinked directory on the way would take the write outside the store
            fsio.check_real_dirs(base, p.parent)
        return p

    # -- reading ----------------------------------------------------------------------------

    def read(self, name: str) -> str | None:
        """The tip of thread ``name``, or None if the thread does not exist. A loose ref file
        wins over the thread's line in ``packed-refs``."""
        return self._read_ref(self.ref_path(name), name)

    def _read_ref(self, path: Path, name: str) -> str | None:
        """Loose first, then packed. The packed file is looked at *after* the loose one is
        found missing: gc renames ``packed-refs`` in before it unlinks a loose ref it packed,
        so a reader never misses a ref gc is packing."""
        tip = self._read_path(path, name)
        if tip is not None:
            return tip
        return self.packed().get(name)

    def packed(self) -> "_Packed":
        """The refs in ``packed-refs`` (empty when there is no such file; an older store has
        none). Read again whenever the file changed (it is only ever replaced by rename)."""
        try:
            st = os.lstat(self.packed_path)
        except FileNotFoundError:
            return _Packed({}, [], True)
        if stat.S_ISLNK(st.st_mode):  # never made by convgit: its names could come from any file
            raise UnsafeSymlink(f"{self.packed_path} is a symlink: refused", path=str(self.packed_path))
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._packed_cache is not None and self._packed_cache[0] == key:
            return self._packed_cache[1]
        try:
            with open(os.open(self.packed_path, os.O_RDONLY | fsio.NOFOLLOW), "rb") as f:
                # A large file is mapped, not read: one ref looked up is a binary search that
                # reads ~17 pages of it, not 9 MB at 100,000 threads (it is only ever replaced
                # by rename, so the mapping stays what it was while this process holds it).
                data = f.read() if os.fstat(f.fileno()).st_size <= fsio.SMALL_MAP else fsio.map_read(f)
        except FileNotFoundError:
            return _Packed({}, [], True)
        except OSError as e:
            raise StorageFailed(f"cannot read {self.packed_path}: {e.strerror}") from e
        packed = open_packed_refs(data)
        self._packed_cache = (key, packed)
        return packed

    def _read_path(self, path: Path, name: str) -> str | None:
        try:
            with open(path, "rb") as f:
                raw = f.read(200)
                size = os.fstat(f.fileno()).st_size
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            if os.path.islink(path):  # never made by convgit; not "absent" (gc must not ignore it)
                raise ObjectCorrupt(f"thread {name!r} is corrupt: its ref file is a dangling symlink", ref=name) from None
            return None
        value = raw.decode("ascii", "replace").strip()
        if not is_oid(value):
            # Never the bytes themselves: a symlinked ref file could show any local file.
            raise ObjectCorrupt(f"thread {name!r} is corrupt: its ref file is not a valid object id ({size} bytes)", ref=name)
        return value

    def iter_names(self) -> Iterator[str]:
        """Every thread name (loose and packed), sorted. Lock and temp files are skipped."""
        loose = self._loose_names()
        return iter(sorted(set(loose) | set(self.packed().refs)))

    def _loose_names(self) -> list[str]:
        out: list[str] = []
        base = self.threads_dir
        for dirpath, dirnames, filenames in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            for fn in filenames:
                if fn.endswith(".lock") or fn.startswith(fsio.TMP_PREFIX):
                    continue
                name = fn if rel == "." else f"{rel}/{fn}"
                out.append(name.replace(os.sep, "/"))
        return out

    def read_all(self, broken: dict[str, str] | None = None) -> dict[str, str]:
        """name -> tip for every thread. A corrupt ref raises ObjectCorrupt, unless ``broken``
        is given: then it is left out and recorded there (name -> what is wrong with it), so
        that a listing can show it (gc passes nothing: it fails closed). Loose refs are read
        first, ``packed-refs`` after them (see ``_read_ref``); a loose ref wins."""
        out = {}
        for name in sorted(self._loose_names()):
            try:
                try:
                    check_thread_name(name)
                except InvalidRefName:
                    raise ObjectCorrupt(f"ref file with an invalid thread name: {name!r}", ref=name) from None
                tip = self._read_path(self.threads_dir / name, name)
            except ObjectCorrupt as e:
                if broken is None:
                    raise
                broken[name] = e.message
                continue
            if tip is not None:
                out[name] = tip
        packed = self.packed()
        for name, tip in packed.refs.items():
            if name in out or (broken is not None and name in broken):
                continue
            if tip is None:
                e = ObjectCorrupt(f"thread {name!r} is corrupt: its line in {PACKED_REFS} is not a valid "
                                  "object id", ref=name)
                if broken is None:
                    raise e
                broken[name] = e.message
                continue
            out[name] = tip
        return dict(sorted(out.items()))

    # -- updating ---------------------------------------------------------------------------

    def update(
        self,
        name: str,
        new: str | None,
        *,
        expected: object = ANY,
        message: str = "",
        turn: str | None = None,
        exists: Callable[[str], bool] | None = None,
        time_ms: int | None = None,
    ) -> str | None:
        """Compare-and-swap thread ``name`` from ``expected`` to ``new`` (None deletes).

        ``expected``: ANY (no check), None (must not exist) or an id (must be the tip).
        ``exists``: when given, ``new`` must name a stored object (a ref never dangles).
        Returns the old tip. Raises RefExists / RefStale / NotFound / ObjectMissing.
        An unreadable ref file raises ObjectCorrupt, except for an unconditional delete
        (``new`` None, ``expected`` ANY), which removes it (returning None): a broken ref can
        always be deleted, its reflog archived.
        """
        path = self.ref_path(name)
        if new is not None:
            if not is_oid(new):
                raise ObjectMissing(f"not an object id: {new!r}")
            if exists is not None and not exists(new):
                raise ObjectMissing(f"cannot point thread {name!r} at missing object {new}", oid=new)
        self._check_df_conflict(path, name)
        # A new directory is made durable by the move's syncfs, before the ref lands in it.
        fsio.makedirs(path.parent, fsync=self.fsync and new is None)
        with self._locked(path):
            try:
                old = self._read_ref(path, name)
            except ObjectCorrupt:
                if new is not None or expected is not ANY:
                    raise  # nothing to compare against: only an unconditional delete goes ahead
                # An unreadable ref file (garbage, a dangling symlink) can still be deleted:
                # the file goes (never its target), the reflog is archived as for any delete.
                self._delete_locked(path, name, None, (message or "delete") + " (unreadable ref)", time_ms)
                old = None
            else:
                creating = old is None and new is not None
                with self._creating() if creating else contextlib.nullcontext():
                    if creating:  # made straight in packed-refs meanwhile (a bulk creation)?
                        old = self.packed().get(name)
                    self._check_expected(name, old, expected)
                    if new is None and old is None:
                        raise NotFound(f"thread {name!r} does not exist", thread=name)
                    old = self._move_locked(path, name, old, new, turn, message, time_ms)
                if new is not None:
                    return old
        # After the lock file is gone: directories left empty go, so ``a/b`` leaves room for ``a``.
        self._prune_empty_dirs(path.parent)
        return old

    def _move_locked(self, path: Path, name: str, old: str | None, new: str | None, turn, message, time_ms,
                     archive_stale: bool = True) -> str | None:
        """The move itself, under the ref's lock, once ``old`` is checked."""
        if old == new:
            if turn is not None:
                self._append_log(name, old, new, turn, message, time_ms)
            return old
        crash_point("ref_after_lock")
        if new is not None:
            if old is None and archive_stale:
                self._archive_stale_log(name)
            log_size = self._log_size(name)
            tmp = path.with_name(f"{fsio.TMP_PREFIX}{path.name}.{os.getpid()}.{time.monotonic_ns()}")
            try:
                if self.fsync:
                    # docs/format.md §6.2: reflog line and temp ref written, one syncfs (them, and
                    # any new directory or reflog file), the rename, one fsync of its directory.
                    t = time_ms if time_ms is not None else int(time.time() * 1000)
                    fsio.makedirs(self.log_path(name).parent)
                    self.journal([name])  # before the reflog line and the move (§4 Journal)
                    fsio.append_line(self.log_path(name), format_reflog_line(old, new, t, turn, message), fsync=False)
                    fsio.write_new_file(tmp, f"{new}\n".encode())
                    fsio.sync_filesystem(self.root)  # the reflog line and the temp ref
                    crash_point("ref_after_tmp_fsync")
                    fsio.rename(tmp, path)
                    fsio.fsync_dir(path.parent)  # the commit point
                else:
                    self._append_log(name, old, new, turn, message, time_ms)
                    fsio.replace_file(path, f"{new}\n".encode(), fsync=False, tmp=tmp, point="ref_after_tmp_fsync")
            except StorageFailed:
                fsio.unlink_quiet(tmp)
                # An fsync failed (maybe after the rename): the move did not happen. Put the
                # old value and the reflog back, still under the lock, and report it.
                self._undo(path, name, old, new, log_size)
                raise
            crash_point("ref_after_rename")
            return old
        self._delete_locked(path, name, old, message or "delete", time_ms)
        return old

    def _delete_locked(self, path: Path, name: str, old: str | None, message: str, time_ms) -> None:
        self._append_log(name, old, None, None, message, time_ms)
        self._unpack([name])  # packed line first: unlinking the loose file first could show it again
        fsio.unlink(path)
        if self.fsync:
            fsio.fsync_dir(path.parent)
        self._archive_log(name)

    def update_many(self, moves: list["RefMove"], *, exists: Callable[[str], bool] | None = None,
                    results: list | None = None, written: dict | None = None) -> list:
        """Several compare-and-swaps made durable together (bulk ingest, merge): one result per
        move, the old tip or the error it met (RefStale, RefExists, NotFound, ObjectMissing),
        in the order given. A storage error is raised, with the batch it hit undone (its
        moves' results set back to NOT_APPLIED; earlier batches stay done). ``results``: a
        list as long as ``moves``, filled in as they are made (the caller sees how far it got).

        Each batch of up to BATCH_REFS threads is locked (in name order), checked, and given
        its reflog lines and temp ref files; one syncfs makes those durable; the temp files
        are renamed over the refs; an fsync of each directory they are in (one more syncfs
        when they are in more than RENAME_DIRS_MAX) makes the renames durable. So every ref
        file is whole at any instant (its content was durable before its rename) and a power
        loss keeps, per thread, the old tip or the new one; a reflog line may name a move a
        power loss undid, as with a single update. Two syncs per batch instead of four fsyncs
        per ref. Deleting is not batched (``new`` must be an id).

        Moves of existing threads go through ``packed-refs`` when a batch has enough of them
        (PACKED_MOVES_MIN, PACKED_BYTES_PER_MOVE): under ``packed-refs.lock`` (taken after the
        ref locks, as a delete does) a new packed-refs with their new tips is written beside
        the temp refs, made durable by the same syncfs, and renamed in with them: one rename
        for all. A thread that also has a loose ref file (which wins) has it unlinked after
        that rename is durable (a directory fsync): its move is the unlink. Then they are
        packed, and their next batch moves are packed ones (docs/format.md §6.3). A new
        thread in a batch gets a loose ref (the file system keeps ``a`` and ``a/b`` apart).

        Creations (``expected`` None) of at least BULK_CREATE_MIN threads go first, straight
        into ``packed-refs`` and ``packed-logs`` under the creation lock (convgit.ref_create,
        docs/format.md §6.3 "Bulk creation"); ``written`` is then filled with name -> (tip,
        its whole reflog) of each, for the index."""
        if results is None:
            results = [NOT_APPLIED] * len(moves)
        idx = list(range(len(moves)))
        if self.declare_packed_logs is not None:
            count: dict[str, int] = {}
            for m in moves:
                count[m.name] = count.get(m.name, 0) + 1
            new = [i for i in idx if moves[i].expected is None and count[moves[i].name] == 1]
            if len(new) >= BULK_CREATE_MIN:
                rest = set(self._create_packed(moves, new, results, exists, written))
                taken = set(new) - rest
                idx = [i for i in idx if i not in taken]
        self._update_all(moves, results, exists, idx)
        return results

    def _update_all(self, moves, results: list, exists, idx: list[int]) -> None:
        if not idx:
            return
        if not self.fsync or len(idx) < 4:
            for i in idx:
                m = moves[i]
                try:
                    expected, olds = m.expected, []
                    for tip, turn, msg in (*m.steps, (m.new, m.turn, m.message)):  # each step its own move
                        olds.append(self.update(m.name, tip, expected=expected, message=msg, turn=turn,
                                                exists=exists, time_ms=m.time_ms))
                        expected = tip
                    results[i] = olds[0]
                except (RefStale, RefExists, NotFound, ObjectMissing) as e:
                    results[i] = e
                    continue
                for turn, msg in m.extra:
                    self.update(m.name, m.new, expected=m.new, message=msg, turn=turn, time_ms=m.time_ms)
            return
        order = sorted(idx, key=lambda i: moves[i].name)  # stable: a thread's moves keep their order
        batch: list[int] = []
        names: set[str] = set()
        for i in order:
            if len(batch) >= BATCH_REFS or moves[i].name in names:  # a thread once per batch
                self._update_batch(moves, batch, results, exists)
                batch, names = [], set()
            batch.append(i)
            names.add(moves[i].name)
        if batch:
            self._update_batch(moves, batch, results, exists)

    def _update_batch(self, moves, batch: list[int], results: list, exists) -> None:
        staged: list[tuple[int, Path, Path, str | None, int | None]] = []  # (i, ref, tmp, old, log size)
        logged: list[tuple[str, int | None]] = []  # reflogs appended to, with their old size
        in_packed: list[int] = []  # moves of existing threads: through packed-refs if enough
        loose_of: dict[int, Path] = {}  # ... of those, the ones with a loose ref file (it goes)
        repacked: list = []  # the packed-refs rewrite: [tmp, old bytes (None: none), renamed?, unlinked, to unlink]
        with contextlib.ExitStack() as locks:
            try:
                ready: list[tuple[int, Path, str | None, str | None]] = []  # (i, ref, loose tip, old tip)
                for i in batch:
                    m = moves[i]
                    try:
                        if not is_oid(m.new):
                            raise ObjectMissing(f"not an object id: {m.new!r}")
                        if exists is not None and not exists(m.new):
                            raise ObjectMissing(f"cannot point thread {m.name!r} at missing object {m.new}", oid=m.new)
                        path = self.ref_path(m.name)
                        self._check_df_conflict(path, m.name)
                        fsio.makedirs(path.parent, fsync=True)
                        locks.enter_context(self._locked(path))
                        loose = self._read_path(path, m.name)
                        old = loose if loose is not None else self.packed().get(m.name)  # (= _read_ref)
                        if old is not None:
                            self._check_expected(m.name, old, m.expected)
                    except (RefStale, RefExists, NotFound, ObjectMissing) as e:
                        results[i] = e
                        continue
                    ready.append((i, path, loose, old))
                if any(old is None for *_, old in ready):
                    # Creations: checked again under the creation lock (after the ref locks),
                    # held to the commit point: a bulk creation may have made one meanwhile.
                    locks.enter_context(self._creating())
                checked = []
                for i, path, loose, old in ready:
                    try:
                        if old is None:
                            old = self.packed().get(moves[i].name)
                            self._check_expected(moves[i].name, old, moves[i].expected)
                    except (RefStale, RefExists, NotFound) as e:
                        results[i] = e
                        continue
                    checked.append((i, path, loose, old))
                # One journal append for the batch, under its locks (docs/format.md §4 Journal),
                # before any of its reflog lines and moves.
                self.journal([moves[i].name for i, *_ in checked])
                for i, path, loose, old in checked:
                    m = moves[i]
                    results[i] = old
                    lines = []
                    prev = old
                    for tip, turn, msg in (*m.steps, (m.new, m.turn, m.message)):
                        if prev != tip or turn is not None:
                            lines.append((prev, tip, turn, msg))
                        prev = tip
                    if not lines and not m.extra:
                        continue
                    if old is None:
                        self._archive_stale_log(m.name)
                    logged.append((m.name, self._log_size(m.name)))
                    t = m.time_ms if m.time_ms is not None else int(time.time() * 1000)
                    fsio.makedirs(self.log_path(m.name).parent, fsync=True)
                    text = [format_reflog_line(a, b, t, turn, msg) for a, b, turn, msg in lines]
                    text += [format_reflog_line(m.new, m.new, t, turn, msg) for turn, msg in m.extra]
                    fsio.append_line(self.log_path(m.name), "".join(text), fsync=False)
                    if old != m.new:
                        if old is not None:
                            in_packed.append(i)  # staged below: in packed-refs, or as a loose ref
                            if loose is not None:
                                loose_of[i] = path
                            continue
                        self._stage_loose(moves, i, path, old, staged)
                if in_packed:
                    self._stage_packed(moves, in_packed, loose_of, results, staged, repacked, locks)
                fsio.sync_filesystem(self.root)  # reflog lines, temp refs (and packed-refs) durable
                crash_point("ref_after_tmp_fsync")
                for i, path, tmp, old, _ in staged:
                    fsio.rename(tmp, path)
                if repacked:
                    fsio.rename(repacked[0], self.packed_path)  # every packed move at once
                    repacked[2] = True
                    if repacked[4]:
                        # A loose ref wins: its thread's move is the unlink of its file, which must
                        # not outlive the new packed-refs in a power loss (the thread would fall
                        # back to an older packed line, or vanish): the rename is made durable first.
                        fsio.fsync_dir(self.root)
                        crash_point("ref_mid_unpack_loose")
                    for path, old in repacked[4]:
                        fsio.unlink(path)
                        repacked[3].append((path, old))
                self._renames_durable(staged, repacked)
                crash_point("ref_after_rename")
            except StorageFailed:
                self._undo_batch(moves, staged, logged, repacked)
                for i in batch:
                    results[i] = NOT_APPLIED
                raise

    def _renames_durable(self, staged, repacked) -> None:
        """The commit point of a batch: its renames (and unlinks) made durable. Everything
        else they depend on (reflog lines, temp refs, packed-refs, new directories) was made
        durable by the batch's syncfs before them, so what is left is directory entries: an
        fsync of each directory they changed, as a single move does (docs/format.md §6.2),
        when they are few (RENAME_DIRS_MAX: a batch of flat thread names changes one or
        two); else one more syncfs. A syncfs also flushes every other writer's dirty data on
        the file system, which a directory fsync does not wait for: on a loaded disk it is
        the costlier of the two (docs/performance.md "Fifth version")."""
        dirs = {str(path.parent) for _, path, *_ in staged}
        if repacked:
            dirs.add(str(self.root))  # packed-refs
            dirs.update(str(path.parent) for path, _ in repacked[4])  # unlinked loose refs
        if len(dirs) > RENAME_DIRS_MAX:
            fsio.sync_filesystem(self.root)
            return
        for d in sorted(dirs):
            fsio.fsync_dir(d)

    def _stage_loose(self, moves, i: int, path: Path, old: str | None, staged: list) -> None:
        """The temp ref file of move ``i``, renamed over its ref after the batch's syncfs."""
        tmp = path.with_name(f"{fsio.TMP_PREFIX}{path.name}.{os.getpid()}.{time.monotonic_ns()}")
        fsio.write_new_file(tmp, f"{moves[i].new}\n".encode())
        staged.append((i, path, tmp, old, None))

    def _stage_packed(self, moves, idx: list[int], loose_of: dict, results: list, staged: list, repacked: list,
                      locks) -> None:
        """Moves of existing threads (their ref locks held): a new packed-refs with their
        tips, written to a temp file that the batch's syncfs makes durable and that is renamed
        in with the temp refs; a thread that also has a loose ref file (``loose_of``) has it
        unlinked after that rename (the loose file wins until then), so that its next moves
        are packed ones (PACKED_MOVES_MIN, PACKED_BYTES_PER_MOVE: else each gets a temp ref as
        any move does)."""
        def all_loose() -> None:
            for i in idx:
                self._stage_loose(moves, i, self.ref_path(moves[i].name), results[i], staged)

        try:
            size = os.stat(self.packed_path).st_size
        except FileNotFoundError:  # none yet: made here if the store may have one
            size = 0 if self.declare_packed is not None else None
        except OSError:
            size = None
        if size is None or len(idx) < PACKED_MOVES_MIN or size > len(idx) * PACKED_BYTES_PER_MOVE:
            return all_loose()
        locks.enter_context(self._packed_locked())  # after the ref locks, as a delete takes it
        try:
            with open(os.open(self.packed_path, os.O_RDONLY | fsio.NOFOLLOW), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if self.declare_packed is None:
                return all_loose()
            self.declare_packed()  # the format version that reads packed-refs, before it exists
            data = None
        except OSError:  # (a symlink: never read nor replaced here; packed() refuses it)
            return all_loose()
        packed = open_packed_refs(data or b"")
        changes = {}
        unlink = []
        for i in idx:
            m = moves[i]
            # Under the thread's lock nothing else moves it, and only gc (exclusive store lock)
            # packs: a packed thread's line is still the tip read (a loose one's line, if any,
            # is overruled by its file until the file goes). A thread that is not so (a
            # hand-made file, a header this version does not know) is moved as a loose ref.
            if packed.header_ok and (i in loose_of or packed.get(m.name) == results[i]):
                changes[m.name] = m.new
                if i in loose_of:
                    unlink.append((loose_of[i], results[i]))
            else:
                self._stage_loose(moves, i, self.ref_path(m.name), results[i], staged)
        if not changes:
            return
        tmp = self.packed_path.with_name(f"{fsio.TMP_PREFIX}{PACKED_REFS}.{os.getpid()}.{time.monotonic_ns()}")
        fsio.write_new_file(tmp, packed.with_changes(changes))
        repacked[:] = [tmp, data, False, [], unlink]

    def _undo_batch(self, moves, staged, logged, repacked=()) -> None:
        """Best effort after a failed batch: refs back at their old tips, reflog lines gone."""
        if repacked:
            tmp, data, renamed, unlinked, _ = repacked
            try:
                fsio.unlink_quiet(tmp)
                for path, old in unlinked:  # the loose refs back first (they win), then the file
                    fsio.replace_file(path, f"{old}\n".encode(), fsync=False)
                if renamed and data is None:  # still under packed-refs.lock: as it was (none)
                    fsio.unlink(self.packed_path)
                elif renamed:  # ... the file as it was
                    fsio.replace_file(self.packed_path, data, fsync=False)
            except Exception:  # the original error is the one to report
                pass
        for i, path, tmp, old, _ in staged:
            try:
                fsio.unlink(tmp)
                if self._read_path(path, moves[i].name) == moves[i].new:
                    if old is None:
                        fsio.unlink(path)
                    else:
                        fsio.replace_file(path, f"{old}\n".encode(), fsync=False)
            except Exception:  # the original error is the one to report
                pass
        for name, size in logged:
            try:
                if size is None:
                    fsio.unlink(self.log_path(name))
                else:
                    fsio.truncate(self.log_path(name), size)
            except Exception:
                pass
        try:
            self.journal([moves[i].name for i, *_ in staged] + [name for name, _ in logged])  # changed back
        except Exception:
            pass

    @staticmethod
    def _check_expected(name: str, old: str | None, expected: object) -> None:
        if expected is not ANY and old != expected:
            if expected is None:
                raise RefExists(f"thread {name!r} already exists (at {short(old)})", thread=name, tip=old)
            if old is None:
                raise NotFound(f"thread {name!r} does not exist", thread=name)
            raise RefStale(
                f"thread {name!r} is at {short(old)} but expected {short(expected)}",  # type: ignore[arg-type]
                thread=name, tip=old, expected=expected,
            )

    def _log_size(self, name: str) -> int | None:
        try:
            return os.stat(self.log_path(name)).st_size
        except FileNotFoundError:
            return None

    def _undo(self, path: Path, name: str, old: str | None, new: str, log_size: int | None) -> None:
        """Best effort after a failed update: the ref back at ``old``, the reflog line gone."""
        try:
            if self._read_path(path, name) == new:
                if old is None:
                    fsio.unlink(path)
                else:
                    fsio.replace_file(path, f"{old}\n".encode(), fsync=False)
            lp = self.log_path(name)
            if log_size is None:
                fsio.unlink(lp)
            else:
                fsio.truncate(lp, log_size)
            self.journal([name])  # changed back
        except Exception:  # the original error is the one to report
            pass

    def check_free(self, name: str) -> None:
        """Raise RefExists if a thread ``name`` cannot be created because a thread ``name/…``
        exists or one of its parent directories is a thread (checked before any write)."""
        self._check_df_conflict(self.ref_path(name), name)

    def _prune_empty_dirs(self, d: Path) -> None:
        for base in (self.threads_dir, self.logs_dir):
            p = base / d.relative_to(self.threads_dir) if base is self.logs_dir else d
            while p != base and base in p.parents:
                if not fsio.rmdir(p):
                    break
                p = p.parent

    def _check_df_conflict(self, path: Path, name: str) -> None:
        """``a`` and ``a/b`` cannot both be threads (one would be a file and a directory)."""
        try:
            os.lstat(path)
            present = True
        except FileNotFoundError:  # nothing there (the usual case): neither a directory nor a link
            present = False
        except OSError:
            present = True
        if present and path.is_dir() and path.is_symlink():  # never cleaned up (rmtree) nor written through
            raise UnsafeSymlink(f"{path} is a symlink to a directory: refused", path=str(path))
        if present and path.is_dir():
            if not any(
                not (f.endswith(".lock") or f.startswith((fsio.TMP_PREFIX, ".")))
                for _, _, files in os.walk(path) for f in files
            ):
                fsio.rmtree(path)  # only leftovers of deleted threads
                return
            raise RefExists(f"thread {name!r} conflicts with threads named {name}/…", thread=name)
        base = os.fspath(self.threads_dir)
        if os.fspath(path) == f"{base}/{name}":  # (as every caller names it: strings, not pathlib)
            parts = name.split("/")
            for k in range(len(parts) - 1, 0, -1):
                rel = "/".join(parts[:k])
                if os.path.isfile(f"{base}/{rel}"):
                    raise RefExists(f"thread {name!r} conflicts with thread {rel!r}", thread=name)
        else:
            p = path.parent
            while p != self.threads_dir and self.threads_dir in p.parents:
                if p.is_file():
                    rel = p.relative_to(self.threads_dir).as_posix()
                    raise RefExists(f"thread {name!r} conflicts with thread {rel!r}", thread=name)
                p = p.parent
        packed = self.packed()
        if packed:  # the same rule for packed threads
            if packed.has_under(name):
                raise RefExists(f"thread {name!r} conflicts with threads named {name}/…", thread=name)
            parts = name.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent in packed:
                    raise RefExists(f"thread {name!r} conflicts with thread {parent!r}", thread=name)

    # -- packed refs ------------------------------------------------------------------------

    def _append_log(self, name, old, new, turn, message, time_ms=None) -> None:
        t = time_ms if time_ms is not None else int(time.time() * 1000)
        if self.fsync:
            # This line is durable by itself (no ref moves after it): the objects it names
            # must be first, so a sync their writer owes is paid before it (docs/format.md §6.2).
            fsio.settle(self.root)
        self.journal([name])
        fsio.append_line(self.log_path(name), format_reflog_line(old, new, t, turn, message), fsync=self.fsync)

    def restore(self, name: str, tip: str, archive: Path, *, message: str, time_ms: int | None = None,
                exists: Callable[[str], bool] | None = None) -> None:
        """Bring back deleted thread ``name`` at ``tip`` with the history of its archived reflog
        ``archive`` (``threads restore``): under the ref's lock, the archived lines become its
        reflog (a stale live one archived first), then the ref is created as any move is (the
        restore line appended, one syncfs, the rename); the archive goes once it stands."""
        path = self.ref_path(name)
        if exists is not None and not exists(tip):
            raise ObjectMissing(f"cannot point thread {name!r} at missing object {tip}", oid=tip)
        self._check_df_conflict(path, name)
        fsio.makedirs(path.parent)
        with self._locked(path), self._creating():
            if self._read_ref(path, name) is not None:
                raise RefExists(f"thread {name!r} already exists", thread=name)
            self._archive_stale_log(name)
            log = self.log_path(name)
            fsio.makedirs(log.parent)
            fsio.replace_file(log, archive.read_bytes(), fsync=False)  # made durable by the move's syncfs
            try:
                self._move_locked(path, name, None, tip, None, message, time_ms, archive_stale=False)
            except BaseException:
                fsio.unlink_quiet(log)
                raise
        fsio.unlink_quiet(archive)

    def _locked(self, ref_path: Path):
        return fsio.flock(ref_path.with_name(ref_path.name + ".lock"), shared=False, timeout=self.lock_timeout, remove=True)
