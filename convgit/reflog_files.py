"""A thread's reflog as files (docs/format.md §4, §4.2, §6.4): its packed part in
``packed-logs`` followed by its loose file, read as one snapshot; archived under
``logs/deleted`` when the thread goes. A mixin of ``RefStore`` (convgit.refs), which holds
the paths, the locks and the moves."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from . import fsio
from .errors import StorageFailed, UnsafeSymlink
from .refformat import STALE_MESSAGE, ReflogEntry, applied_archived, parse_log, read_log_file

if TYPE_CHECKING:
    from .packedlogs import PackedLog, PackedLogsReader


class ReflogFiles:
    """Reading, sizing and archiving reflogs; ``RefStore`` supplies ``root``, ``log_path``,
    ``logs_dir``, ``deleted_logs_dir``, ``fsync`` and its locks."""

    def _archive_stale_log(self, name: str) -> None:
        """Before a thread is created: a live reflog of a thread that does not exist is what a
        move cut short by a crash left (its line appended, its ref never renamed in). It is
        archived as a deleted thread's would be (nothing is lost), so the new thread does not
        inherit turns of a move that never happened. Its last line is then the
        ``STALE_MESSAGE`` line (none -> none): an archive ends where its thread ended, so
        the index and ``reflog`` read its moves as the chain ending at none
        (refformat.applied_archived), and a move that never happened is not one of them."""
        log = self.log_path(name)
        if log.is_symlink():  # never moved into logs/deleted, where readers would follow it
            raise UnsafeSymlink(f"{log} is a symlink: refusing to write through it or keep it "
                                "(remove it; convgit writes a fresh reflog)", path=str(log))
        if log.exists() or self._packed_log(name) is not None:
            fsio.makedirs(log.parent)
            self._append_log(name, None, None, None, STALE_MESSAGE)
            self._archive_log(name)

    def _archive_log(self, name: str) -> None:
        """A deleted thread's reflog is kept (it names the turns that recorded its history).
        A loose reflog is renamed into ``logs/deleted``; one with a packed part is written
        there whole (durably), then taken out of ``packed-logs``, then its loose file goes:
        a crash between two steps leaves the history twice (archived, and a stale live
        reflog the thread's next creation archives again), never nowhere."""
        src = self.log_path(name)
        packed = self._packed_log(name)
        if packed is None and not src.exists():
            return
        t = int(time.time() * 1000)
        while os.path.lexists(self.deleted_logs_dir / f"{name}.{t}"):
            t += 1  # archived twice in one millisecond (under the thread's lock): never over the first
        dst = self.deleted_logs_dir / f"{name}.{t}"
        fsio.check_real_dirs(self.deleted_logs_dir, dst.parent)
        fsio.makedirs(dst.parent, fsync=self.fsync)
        self.journal_archive(dst)  # before the archive exists: the index reads its turns (§4 Journal)
        if packed is None:
            fsio.rename(src, dst)
            return
        fsio.replace_file(dst, self.log_bytes(name), fsync=self.fsync)
        self._drop_packed_logs({name})
        fsio.unlink(src)

    def read_log(self, name: str) -> list[ReflogEntry]:
        """The reflog of thread ``name``, oldest first (its packed part, then its loose file)."""
        return parse_log(self.log_bytes(name))

    def _loose_log(self, name: str) -> tuple[bytes, int | None]:
        """(bytes, inode) of the loose reflog of ``name``; (b"", None) when there is none."""
        try:
            with open(self.log_path(name), "rb") as f:
                return f.read(), os.fstat(f.fileno()).st_ino
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return b"", None

    def log_bytes(self, name: str) -> bytes:
        """The reflog of thread ``name`` as bytes: its packed text, then its loose file (less
        what the packed entry says it absorbed of that very file), as it was at one instant
        (docs/format.md §4.2). ``packed-logs`` is opened first, the loose file read, then
        ``packed-logs`` looked at again: the same file (it is only ever replaced by rename,
        and the open one keeps its inode) means it was the current one when the loose file
        was read, and the marker then says exactly what of that loose file it holds.
        Replaced in between (a packing, or a drop): read again. (Reading the loose file
        first and ``packed-logs`` after it is not enough: a reader paused between the two
        reads, across a packing, a move and another packing, would take the lines of a loose
        file two packings old that the second marker does not name: read twice.)"""
        loose, ino, pl = self._log_snapshot(name)
        packed = pl.get(name) if pl is not None else None
        if packed is None:
            return loose
        from .packedlogs import absorbed_skip  # (loaded already: a packed log was read)

        return packed.data + loose[absorbed_skip(packed, ino, loose):]

    def _log_snapshot(self, name: str) -> tuple[bytes, int | None, PackedLogsReader | None]:
        """(loose bytes, loose inode, the ``packed-logs`` reader) that were current together."""
        pl = self.packed_logs()
        while True:
            loose, ino = self._loose_log(name)
            now = self.packed_logs()
            if now is pl:
                return loose, ino, pl
            pl = now  # replaced while the loose file was read: again, with the new one

    def log_size(self, name: str) -> int:
        """The byte length of ``log_bytes(name)`` (what the index remembers it has read),
        reading none of its lines (``log_tail`` from past the end)."""
        return self.log_tail(name, 1 << 62)[1]

    def log_tail(self, name: str, offset: int) -> tuple[bytes, int]:
        """(``log_bytes(name)[offset:]``, ``len(log_bytes(name))``), reading of the loose file
        only that tail: what the index reads after a move (it remembers how far it read), so
        indexing a move of a thread with a long reflog costs its new lines, not the whole
        reflog (O(new turns), not O(calls the thread ever had)). The same one-instant rule
        as ``log_bytes``: ``packed-logs`` looked at before and after the loose file is read,
        again if it was replaced in between. The packed part is the packed entry's text (its
        chunk decompressed, as ``log_bytes`` does) when the tail starts in it; else only its
        length is needed, which the reader keeps once it has read the chunk."""
        pl = self.packed_logs()
        while True:
            head = pl.head(name) if pl is not None else None
            plen, packed = head if head is not None else (0, None)
            tail, loose_len = self._loose_tail(name, packed, max(0, offset - plen))
            now = self.packed_logs()
            if now is pl:
                if offset < plen:  # (a catch-up from before the packing: its text is needed)
                    tail = pl.get(name).data[offset:] + tail
                return tail, plen + loose_len
            pl = now  # replaced while the loose file was read: again, with the new one

    def _loose_tail(self, name: str, packed: PackedLog | None, offset: int) -> tuple[bytes, int]:
        """(the loose reflog of ``name`` from byte ``offset`` of what it adds to ``packed``,
        the length of what it adds): its bytes past the first ``absorbed`` when ``packed``
        absorbed this very file (their digest decides, as in ``log_bytes``); only those read."""
        try:
            with open(self.log_path(name), "rb") as f:
                st = os.fstat(f.fileno())
                skip = 0
                if packed is not None and packed.ino and st.st_ino == packed.ino:
                    from .packedlogs import absorbed_skip

                    skip = absorbed_skip(packed, st.st_ino, f.read(packed.absorbed))
                if skip + offset >= st.st_size:  # nothing past it (a size asked: log_size)
                    return b"", max(0, st.st_size - skip)
                f.seek(skip + offset)
                tail = f.read()  # to the end as it is now (an append may be under way)
                return tail, offset + len(tail)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return b"", 0

    def has_log(self, name: str) -> bool:
        """Whether thread ``name`` has a live reflog (loose or packed)."""
        return self.log_path(name).exists() or self._packed_log(name) is not None

    def live_log_names(self) -> list[str]:
        """Every thread name with a live reflog, loose or packed, sorted."""
        names = {n for n, _ in self.iter_log_files() if n is not None}
        pl = self.packed_logs()
        if pl is not None:
            names.update(pl.names())
        return sorted(names)

    def packed_logs(self) -> PackedLogsReader | None:
        """The reader of ``packed-logs`` (None when there is no such file: an older store, or
        one never packed). Opened again whenever the file changed (it is only ever replaced
        by rename); the open file is kept, so a reader never mixes two versions of it."""
        try:
            st = os.lstat(self.packed_logs_path)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeSymlink(f"{self.packed_logs_path} is a symlink: refused", path=str(self.packed_logs_path))
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._logs_cache is not None and self._logs_cache[0] == key:
            return self._logs_cache[1]
        try:
            fd = os.open(self.packed_logs_path, os.O_RDONLY | fsio.NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageFailed(f"cannot read {self.packed_logs_path}: {e.strerror}") from e
        from .packedlogs import PackedLogsReader  # (a store with packed reflogs: read here, where they are)

        f = os.fdopen(fd, "rb")  # closed with the reader (another thread may still be using it)
        try:
            size = os.fstat(fd).st_size
            reader = PackedLogsReader(lambda off, n: os.pread(fd, n, off), size, close=f.close)
        except BaseException:
            f.close()
            raise
        self._logs_cache = (key, reader, f)
        return reader

    def close_packed_logs(self) -> None:
        """Forget the open ``packed-logs`` (Repository.close); its file closes with the last
        reader using it."""
        self._logs_cache = None

    def _packed_log(self, name: str) -> PackedLog | None:
        pl = self.packed_logs()
        return pl.get(name) if pl is not None else None

    def _drop_packed_logs(self, names: set[str]) -> None:
        """Take ``names`` out of ``packed-logs`` (their reflogs were archived or moved; the
        caller holds their ref locks), rewriting it by rename under ``packed-refs.lock``."""
        if not any(self._packed_log(n) is not None for n in names):
            return
        with self._packed_locked():
            pl = self.packed_logs()
            if pl is None:
                return
            from .packedlogs import rewrite_packed_logs

            fsio.replace_file(self.packed_logs_path, rewrite_packed_logs(pl, dict.fromkeys(names)), fsync=self.fsync)

    def archived_entries(self) -> list[tuple[str, list["ReflogEntry"]]]:
        """(path under logs/deleted, its entries that name a turn) for each deleted thread's
        archived reflog: what merge and bundles carry of deleted threads' provenance (of
        moves that happened: refformat.applied_archived)."""
        out = []
        for name, path in self.iter_log_files():
            if name is None:
                entries = [e for e in applied_archived(read_log_file(path)) if e.turn]
                if entries:
                    out.append((str(path.relative_to(self.deleted_logs_dir)).replace(os.sep, "/"), entries))
        return out

    def iter_log_files(self) -> Iterator[tuple[str | None, Path]]:
        """(thread name or None for a deleted thread's archived log, path)."""
        for base, live in ((self.logs_dir, True), (self.deleted_logs_dir, False)):
            for dirpath, _, filenames in os.walk(base):
                for fn in sorted(filenames):
                    p = Path(dirpath) / fn
                    if fn.endswith(".lock") or fn.startswith(fsio.TMP_PREFIX):
                        continue
                    name = str(p.relative_to(base)).replace(os.sep, "/") if live else None
                    yield name, p

    # -- locking ----------------------------------------------------------------------------
