"""Every file-system mutation convgit makes goes through this module.

One place means the crash simulator and the fsync-failure tests can wrap it, and one place
holds the durability primitives (the sequences are in docs/format.md §6): files written to a
temp file and made durable (an fsync, or one ``sync_filesystem`` for several) before they are
renamed into place, the rename then made durable by an fsync of its directory (or another
``sync_filesystem``).
An fsync error is fatal for the operation: it is raised as StorageFailed and never retried.

Every mutation below is an ``os.*`` call made through this module's ``os`` name (never
``open()``, ``pathlib`` or ``shutil``), so a test can substitute one object for ``fsio.os``
and see, record or fail each of them (tests/reliability/crashsim.py). Only the derived
SQLite index is written by SQLite itself.

A directory created with ``fsync`` asked for has its parent fsynced, and a file created by
``append_line`` has its directory fsynced: a new directory entry is durable only once its
directory is.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import stat
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from .config import crash_point
from .errors import Locked, StorageFailed, UnsafeSymlink

TMP_PREFIX = "tmp_"

# Files convgit writes are opened without following a symlink in their last component: a
# symlink planted where the store keeps a reflog, a lock or a temp file would otherwise
# redirect the write (or the creation) outside the store. The open then fails with ELOOP.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


SMALL_MAP = 1 << 20  # a mapped file up to this size is read whole at its first lookup (will_need)


def map_read(f) -> "mmap.mmap | bytes":  # noqa: F821 (imported when called)
    """The open file ``f`` mapped read-only (``b""`` when empty), advised as read at random:
    what a lookup in a pack index, a pack or ``packed-refs`` reads is a page here and there.
    Without the advice, each page fault on a file that is not in the page cache reads the
    whole read-ahead window around it (8 MiB on this project's machines): one probe of a
    large store's pack index read megabytes, and ``status``, which reads only each index's
    header, read every index whole (docs/performance.md, "Cold pages"). A reader about to
    read a range says so with ``will_need`` (a small file: all of it, at its first lookup).
    The file must only ever be replaced by rename, never rewritten in place (convgit's packs
    and ``packed-refs``)."""
    import mmap

    if not os.fstat(f.fileno()).st_size:
        return b""
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        m.madvise(mmap.MADV_RANDOM)
    except (AttributeError, OSError, ValueError):  # (not on this system: the kernel's default)
        pass
    return m


def will_need(m, start: int, length: int) -> None:
    """Tell the kernel that ``length`` bytes of the mapping ``m`` from ``start`` are about to
    be read: one read-ahead of that range, not a fault per page (``map_read``)."""
    import mmap

    if not isinstance(m, mmap.mmap) or length <= 0:
        return
    at = start - start % mmap.PAGESIZE
    try:
        m.madvise(mmap.MADV_WILLNEED, at, min(length + start - at, len(m) - at))
    except (AttributeError, OSError, ValueError):
        pass


def _storage_error(op: str, path: os.PathLike | str, e: OSError) -> StorageFailed:
    if e.errno == errno.ELOOP:
        return UnsafeSymlink(f"{op} {path}: refused, it is a symlink (convgit writes nothing through one)",
                             path=str(path))
    return StorageFailed(f"{op} {path}: {e.strerror or e}", path=str(path), errno=e.errno)


def sqlite_readonly_uri(path: os.PathLike | str) -> str:
    """A ``file:`` URI opening ``path`` read-only (``sqlite3.connect(uri, uri=True)``).

    Built from the absolute path with every special character percent-encoded, so a name
    holding ``#``, ``?``, ``%`` or a space opens that very file: pasted raw into a URI,
    ``we#ird.db`` would open (and, without ``mode=ro``, create) a file named ``we``.
    """
    return Path(os.path.abspath(path)).as_uri() + "?mode=ro"


def find_symlinks(root: Path, names: Iterable[str]) -> list[str]:
    """Those of ``names`` (paths relative to ``root``) that are symlinks. One lstat each."""
    out = []
    for n in names:
        try:
            if stat.S_ISLNK(os.lstat(root / n).st_mode):
                out.append(n)
        except (FileNotFoundError, NotADirectoryError):
            pass
    return out


def check_real_dirs(base: Path, path: Path) -> None:
    """Raise UnsafeSymlink if a directory between ``base`` (itself not checked) and ``path``
    (included) is a symlink: writes below it would land outside the store."""
    b, s = os.fspath(base), os.fspath(path)  # (strings: pathlib's relative_to was most of the cost)
    if s == b:
        return
    if not s.startswith(b.rstrip("/") + "/"):
        return
    p = b.rstrip("/")
    for part in s[len(p) + 1:].split("/"):
        if not part:
            continue
        p = f"{p}/{part}"
        try:
            if stat.S_ISLNK(os.lstat(p).st_mode):
                raise UnsafeSymlink(f"{p} is a symlink: refused (convgit writes nothing through one)", path=str(p))
        except (FileNotFoundError, NotADirectoryError):
            return


def fsync_fd(fd: int, path: os.PathLike | str = "?") -> None:
    """fsync ``fd``; a failure raises StorageFailed naming ``path``."""
    try:
        os.fsync(fd)
    except OSError as e:
        raise _storage_error("fsync", path, e) from e


def fsync_file(path: os.PathLike | str) -> None:
    """fsync the file ``path`` (its data; not its name: that is its directory's)."""
    _fsync_path(path, NOFOLLOW, "open")


def fsync_dir(path: os.PathLike | str) -> None:
    """fsync the directory ``path``, so the entries renamed or created in it are durable."""
    _fsync_path(path, os.O_DIRECTORY, "open directory")


def _fsync_path(path: os.PathLike | str, flags: int, what: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | flags)
    except OSError as e:
        raise _storage_error(what, path, e) from e
    try:
        fsync_fd(fd, path)
    finally:
        os.close(fd)


_libc = None

# Syncs owed (docs/format.md §6.1 step 6): directory entries this process made (objects renamed
# into their fan-out directories) that a later ``sync_filesystem`` of the same file system is
# to make durable before anything that names them counts. Keyed by the file system's st_dev;
# the value is when the debt was taken (a counter), so that a syncfs that began earlier does
# not pay it (another thread's).
_owed: dict[int, int] = {}
_owed_lock = threading.Lock()
_sync_clock = itertools.count(1)


def owe_sync(path: os.PathLike | str) -> None:
    """Record that entries just made under ``path`` are not yet durable: the next
    ``sync_filesystem`` of its file system (which the ref move of the same transaction makes
    anyway, docs/format.md §6.2 step 4) or ``settle`` makes them so. Call it after the last
    of those entries is made."""
    dev = os.stat(path).st_dev
    with _owed_lock:
        _owed[dev] = next(_sync_clock)


def owes_sync(path: os.PathLike | str) -> bool:
    """Whether entries made under ``path``'s file system by this process still wait for a sync."""
    if not _owed:
        return False
    return os.stat(path).st_dev in _owed


def settle(path: os.PathLike | str) -> bool:
    """Pay a sync owed on ``path``'s file system (one ``sync_filesystem``), if one is.
    Returns whether it synced. Called before a write that names the objects and is durable
    by itself (an fsync of one file: a reflog line recording a turn without moving the ref),
    and when a transaction ends."""
    if not owes_sync(path):
        return False
    sync_filesystem(path)
    return True


def sync_mark() -> int:
    """A point in this process's sequence of syncs, for ``synced_since``."""
    return next(_sync_clock)


def synced_since(path: os.PathLike | str, mark: int) -> bool:
    """Whether a ``sync_filesystem`` of ``path``'s file system that began after ``mark`` has
    completed: what was written there before ``mark`` is durable."""
    return _synced.get(os.stat(path).st_dev, 0) > mark


_synced: dict[int, int] = {}  # st_dev -> when the last completed sync_filesystem there began


def sync_filesystem(path: os.PathLike | str) -> None:
    """Flush every dirty file and directory entry of the file system holding ``path``; this
    pays the syncs owed there (``owe_sync``) before it began.

    Used by bulk writers instead of one fsync per file: one syncfs(2) makes thousands of
    objects durable at once. Linux reports writeback errors from syncfs since 5.8.
    """
    started = next(_sync_clock)
    _syncfs(path)
    dev = os.stat(path).st_dev
    with _owed_lock:
        if _owed.get(dev, started) < started:
            del _owed[dev]
        if _synced.get(dev, 0) < started:
            _synced[dev] = started


def _syncfs(path: os.PathLike | str) -> None:
    """syncfs(2) of the file system holding ``path`` (the primitive; tests replace it)."""
    global _libc
    if sys.platform.startswith("linux"):
        import ctypes  # (here: ~2 ms of every start-up otherwise; a syncfs costs far more)

        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _libc.syncfs(fd) != 0:
                err = ctypes.get_errno()
                raise StorageFailed(f"syncfs {path}: {os.strerror(err)}", errno=err)
        finally:
            os.close(fd)
    else:  # pragma: no cover - other platforms
        os.sync()


def makedirs(path: os.PathLike | str, *, fsync: bool = False, mode: int = 0o777) -> None:
    """Create ``path`` and missing parents. With ``fsync``, each new directory's parent is
    fsynced after it is made, so the new entries survive a power loss. ``mode``: of each new
    directory (0o700 for a private one), before the umask."""
    path = Path(path)
    missing = []
    p = path
    while not os.path.isdir(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            if not os.path.isdir(d):
                raise _storage_error("mkdir", d, FileExistsError(17, "exists and is not a directory")) from None
        except OSError as e:
            raise _storage_error("mkdir", d, e) from e
        if fsync:
            fsync_dir(d.parent)


def _write_all(fd: int, data, path: os.PathLike | str) -> None:
    view = memoryview(data)
    try:
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError as e:
        raise _storage_error("write", path, e) from e


def write_object_file(final: str, data: bytes, *, fsync: bool, probe: bool = True) -> bool:
    """Write ``data`` to the path ``final`` once. Returns True if this call created the file.

    An existing file counts as success and gets its mtime refreshed, so a concurrent gc's
    grace period keeps it (git's freshen rule). The temp file is made in the final directory
    and renamed into place (a same-content file renamed over another is harmless: objects
    are named by their bytes). The caller fsyncs the directory. ``probe=False`` skips the
    existence check for objects the caller just found missing.

    An existing file of the wrong size (the empty file a power loss can leave) is not trusted:
    it is rewritten.
    """
    if probe:
        try:
            size = os.stat(final).st_size
        except FileNotFoundError:
            size = None
        if size == len(data) and freshen(final):
            return False
    d = os.path.dirname(final)
    tmp = f"{d}/{TMP_PREFIX}{os.getpid()}_{time.monotonic_ns()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    except FileNotFoundError:
        # The fan-out directory is missing (new, or removed by gc): create it and retry.
        makedirs(Path(d))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except OSError as e:
            raise _storage_error("create", tmp, e) from e
    except OSError as e:
        raise _storage_error("create", tmp, e) from e
    try:
        _write_all(fd, data, tmp)
        crash_point("object_after_write")
        if fsync:
            fsync_fd(fd, tmp)
    except BaseException:
        os.close(fd)
        _unlink_quiet(tmp)
        raise
    os.close(fd)
    crash_point("object_after_fsync")
    try:
        os.rename(tmp, final)
    except OSError as e:
        _unlink_quiet(tmp)
        raise _storage_error("rename", final, e) from e
    crash_point("object_after_rename")
    return True


def freshen(path: str | Path) -> bool:
    """Refresh an existing file's mtime. False if it does not exist or cannot be touched.
    A symlink's own time is refreshed, never its target's."""
    try:
        os.utime(path, follow_symlinks=False)
        return True
    except OSError:
        return False


def replace_file(path: Path, data: bytes, *, fsync: bool, tmp: Path | None = None,
                 point: str | None = None, mode: int = 0o666) -> None:
    """Atomically replace ``path`` with ``data`` (temp + fsync + rename + fsync dir).

    ``point``: a crash point between the temp file's fsync and the rename (tests). ``mode``:
    of the new file (0o600 for a secret: the temp file has it from its creation on).
    """
    path = Path(path)
    tmp = tmp or path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, mode)
        try:
            _write_all(fd, data, tmp)
            if fsync:
                fsync_fd(fd, tmp)
        finally:
            os.close(fd)
        if point:
            crash_point(point)
        os.rename(tmp, path)
    except OSError as e:
        _unlink_quiet(tmp)
        raise _storage_error("replace", path, e) from e
    except BaseException:
        _unlink_quiet(tmp)
        raise
    if fsync:
        fsync_dir(path.parent)


def append_line(path: Path, line: str, *, fsync: bool) -> None:
    """Append one line. A file this call creates has its directory fsynced too."""
    path = Path(path)
    makedirs(path.parent, fsync=fsync)
    created = True
    try:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | NOFOLLOW, 0o644)
        except FileExistsError:
            created = False
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | NOFOLLOW)
    except OSError as e:
        raise _storage_error("append", path, e) from e
    try:
        _write_all(fd, line.encode("utf-8"), path)
        if fsync:
            fsync_fd(fd, path)
    finally:
        os.close(fd)
    if fsync and created:
        fsync_dir(path.parent)


def truncate(path: Path, size: int) -> None:
    """Cut a file back to ``size`` bytes (undo an append)."""
    try:
        fd = os.open(path, os.O_WRONLY | NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError as e:
        raise _storage_error("truncate", path, e) from e
    try:
        os.ftruncate(fd, size)
    except OSError as e:
        raise _storage_error("truncate", path, e) from e
    finally:
        os.close(fd)


def rename(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` (atomic on one file system); StorageFailed on failure."""
    try:
        os.rename(src, dst)
    except OSError as e:
        raise _storage_error("rename", dst, e) from e


def stat_fingerprint(*paths: Path) -> list[int]:
    """(size, mtime_ns, inode) of each path, zeros for a missing one: what changes when an
    append-only journal grows or a file is replaced (the refs journal and packed-refs)."""
    out: list[int] = []
    for f in paths:
        try:
            st = os.stat(f)
            out += [st.st_size, st.st_mtime_ns, st.st_ino]
        except FileNotFoundError:
            out += [0, 0, 0]
    return out


def unlink(path: Path) -> None:
    """Remove ``path``; a missing file is not an error."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise _storage_error("unlink", path, e) from e


def unlink_many(paths: list, *, threads: int = 16, parallel_above: int = 64) -> None:
    """Remove many files (a missing one is not an error). On a disk mounted with online
    discard an unlink waits ~0.1-2 ms: a few threads overlap those waits. The first error
    (StorageFailed) is raised once every unlink has been tried or the pool stops."""
    if len(paths) <= parallel_above:
        for p in paths:
            unlink(p)
        return
    from concurrent.futures import ThreadPoolExecutor

    step = max(1, len(paths) // (threads * 8))
    with ThreadPoolExecutor(threads) as ex:
        for f in [ex.submit(lambda b: [unlink(p) for p in b], paths[i:i + step]) for i in range(0, len(paths), step)]:
            f.result()


def unlink_quiet(path: os.PathLike | str) -> None:
    """Remove ``path`` if possible, saying nothing (cleaning up after a failure)."""
    _unlink_quiet(path)


def _unlink_quiet(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def rmdir(path: os.PathLike | str) -> bool:
    """Remove an empty directory. False (and nothing done) if it is missing or not empty."""
    try:
        os.rmdir(path)
        return True
    except OSError:
        return False


def rmtree(path: os.PathLike | str) -> None:
    """Remove a directory and everything in it, quietly (leftovers of failed operations).
    A symlink is never followed, not even at the top: nothing outside is removed."""
    path = os.fspath(path)
    if os.path.islink(path):
        return
    try:
        names = os.listdir(path)
    except OSError:
        return
    for n in names:
        p = os.path.join(path, n)
        if os.path.isdir(p) and not os.path.islink(p):
            rmtree(p)
        else:
            _unlink_quiet(p)
    rmdir(path)


def write_new_file(path: Path, data: bytes, *, mode: int = 0o666) -> None:
    """Create a small file that must not exist yet (store skeleton files, temp files made
    durable by a later ``sync_filesystem``). Not fsynced. A failed write (a full disk)
    removes the file: it was this call's."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, mode)
    except OSError as e:
        raise _storage_error("create", path, e) from e
    try:
        _write_all(fd, data, path)
    except BaseException:
        os.close(fd)
        _unlink_quiet(path)
        raise
    os.close(fd)


class NewFile:
    """A new file written in pieces (packs): buffered, then ``sync()`` and ``close()``.

    Used as a context manager, an exception closes and removes the file.
    """

    _BUF = 1 << 20

    def __init__(self, path: os.PathLike | str, mode: int = 0o666) -> None:
        self.path = path
        try:
            self.fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except OSError as e:
            raise _storage_error("create", path, e) from e
        self._buf = bytearray()

    def write(self, data) -> None:
        """Append ``data`` (buffered; flushed in large writes)."""
        self._buf += data
        if len(self._buf) >= self._BUF:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            _write_all(self.fd, self._buf, self.path)
            self._buf = bytearray()

    def sync(self) -> None:
        """Flush the buffer and fsync the file."""
        self._flush()
        fsync_fd(self.fd, self.path)

    def close(self) -> None:
        """Flush and close (idempotent)."""
        if self.fd is not None:
            try:
                self._flush()
            finally:
                os.close(self.fd)
                self.fd = None

    def abort(self) -> None:
        """Close without flushing what is buffered, and remove the file."""
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
        _unlink_quiet(self.path)

    def __enter__(self) -> "NewFile":
        return self

    def __exit__(self, typ, exc, tb) -> None:
        if typ is not None:
            self.abort()
        else:
            self.close()


@contextmanager
def flock(path: Path, *, shared: bool, timeout: float, remove: bool = False) -> Iterator[None]:
    """Hold a kernel lock on ``path`` (created if missing).

    Kernel locks vanish with their process, so ``kill -9`` never leaves a stale lock.
    ``remove`` (exclusive locks only): the holder unlinks the lock file before releasing it,
    so no lock file outlives an operation; every locker re-checks after acquiring that the
    path still names the inode it locked, so an unlinked lock is never trusted.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
    except OSError as e:
        raise _storage_error("open lock", path, e) from e
    try:
        while True:
            _acquire(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, timeout, path)
            # A lock file may be unlinked by its holder (a deleted thread's lock): a lock
            # taken on an unlinked inode protects nothing, so take it again on the new file.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
            except OSError as e:
                fd = -1
                raise _storage_error("open lock", path, e) from e
        yield
    finally:
        if fd >= 0:
            if remove and not shared:
                _unlink_quiet(path)
            os.close(fd)  # closing releases the lock


def try_flock(path: Path, *, shared: bool) -> int | None:
    """Take a lock without waiting. Returns the fd holding it, or None if it is busy."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
    except OSError as e:
        raise _storage_error("open lock", path, e) from e
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


def lock_busy(path: Path) -> bool:
    """Does another holder hold the lock ``path`` exclusively (a shared lock cannot be had
    at once)? One non-blocking try, released at once."""
    fd = try_flock(path, shared=True)
    if fd is None:
        return True
    os.close(fd)
    return False


def _acquire(fd: int, kind: int, timeout: float, path: Path) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Locked(f"{path} is locked by another process (waited {timeout:g}s)")
            # Short, jittered polls: a waiter must notice a brief gap between other holders.
            import random  # (here: only a waiter needs it; ~1 ms of every start-up otherwise)

            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.01)


def link_new(tmp: os.PathLike | str, final: os.PathLike | str) -> bool:
    """Give the complete file ``tmp`` the name ``final`` only if no file has that name yet
    (a hard link: atomic create-only, the directory remote's ``If-None-Match: *``), then
    drop the temp name. True if ``final`` was created, False if it existed already."""
    try:
        os.link(tmp, final)
        created = True
    except FileExistsError:
        created = False
    except OSError as e:
        _unlink_quiet(tmp)
        raise _storage_error("link", final, e) from e
    _unlink_quiet(tmp)
    return created
