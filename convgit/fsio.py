"""Every file-system mutation convgit makes goes through this module.

One place means the crash simulator and the fsync-failure tests can wrap it, and one place
holds the durability rules: objects are written to a temp file in their final directory,
fsynced, made read-only and linked into place (an existing file is success); refs are
replaced by rename of a fsynced lock file followed by an fsync of their directory.
An fsync error is fatal for the operation: it is raised as StorageFailed and never retried.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import Locked, StorageFailed

TMP_PREFIX = "tmp_"


def _storage_error(op: str, path: os.PathLike | str, e: OSError) -> StorageFailed:
    return StorageFailed(f"{op} {path}: {e.strerror or e}", path=str(path), errno=e.errno)


def fsync_fd(fd: int, path: os.PathLike | str = "?") -> None:
    try:
        os.fsync(fd)
    except OSError as e:
        raise _storage_error("fsync", path, e) from e


def fsync_dir(path: os.PathLike | str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise _storage_error("open directory", path, e) from e
    try:
        fsync_fd(fd, path)
    finally:
        os.close(fd)


_libc = None


def sync_filesystem(path: os.PathLike | str) -> None:
    """Flush every dirty file and directory entry of the file system holding ``path``.

    Used by bulk writers instead of one fsync per file: one syncfs(2) makes thousands of
    objects durable at once. Linux reports writeback errors from syncfs since 5.8.
    """
    global _libc
    if sys.platform.startswith("linux"):
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


def makedirs(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _storage_error("mkdir", path, e) from e


def write_object_file(final: str, data: bytes, *, fsync: bool, probe: bool = True) -> bool:
    """Write ``data`` to the path ``final`` once. Returns True if this call created the file.

    An existing file counts as success and gets its mtime refreshed, so a concurrent gc's
    grace period keeps it (git's freshen rule). The temp file is made in the final directory
    and renamed into place (a same-content file renamed over another is harmless: objects
    are named by their bytes). The caller fsyncs the directory. ``probe=False`` skips the
    existence check for objects the caller just found missing.
    """
    if probe and freshen(final):
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
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except OSError as e:
            raise _storage_error("write", tmp, e) from e
        if fsync:
            fsync_fd(fd, tmp)
    except BaseException:
        os.close(fd)
        _unlink_quiet(tmp)
        raise
    os.close(fd)
    try:
        os.rename(tmp, final)
    except OSError as e:
        _unlink_quiet(tmp)
        raise _storage_error("rename", final, e) from e
    return True


def freshen(path: str | Path) -> bool:
    """Refresh an existing file's mtime. False if it does not exist or cannot be touched."""
    try:
        os.utime(path)
        return True
    except OSError:
        return False


def replace_file(path: Path, data: bytes, *, fsync: bool, tmp: Path | None = None) -> None:
    """Atomically replace ``path`` with ``data`` (temp + fsync + rename + fsync dir)."""
    tmp = tmp or path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                fsync_fd(f.fileno(), tmp)
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
    try:
        makedirs(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
            if fsync:
                fsync_fd(fd, path)
        finally:
            os.close(fd)
    except OSError as e:
        raise _storage_error("append", path, e) from e


def rename(src: Path, dst: Path) -> None:
    try:
        os.rename(src, dst)
    except OSError as e:
        raise _storage_error("rename", dst, e) from e


def unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise _storage_error("unlink", path, e) from e


def _unlink_quiet(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_new_file(path: Path, data: bytes) -> None:
    """Create a small file that must not exist yet (store skeleton files)."""
    try:
        with open(path, "xb") as f:
            f.write(data)
    except OSError as e:
        raise _storage_error("create", path, e) from e


@contextmanager
def flock(path: Path, *, shared: bool, timeout: float, remove: bool = False) -> Iterator[None]:
    """Hold a kernel lock on ``path`` (created if missing).

    Kernel locks vanish with their process, so ``kill -9`` never leaves a stale lock.
    ``remove`` (exclusive locks only): the holder unlinks the lock file before releasing it,
    so no lock file outlives an operation; every locker re-checks after acquiring that the
    path still names the inode it locked, so an unlinked lock is never trusted.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        yield
    finally:
        if remove and not shared:
            _unlink_quiet(path)
        os.close(fd)  # closing releases the lock


def try_flock(path: Path, *, shared: bool) -> int | None:
    """Take a lock without waiting. Returns the fd holding it, or None if it is busy."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


def _acquire(fd: int, kind: int, timeout: float, path: Path) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Locked(f"{path} is locked by another process (waited {timeout:g}s)")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
