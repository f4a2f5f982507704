"""A directory remote (a path or ``file://``: tests, a NAS mount, a USB disk) keeping remote
format 2's contract with the file system's own atomic operations:

- create-only: the bytes go to a temp file, are fsynced, then hard-linked to their name
  (``link`` fails if the name exists: two writers of one key, exactly one creates it; a
  reader never sees a half-written file);
- compare-and-swap: under a kernel lock on ``<key>.lock`` the current bytes are read, their
  tag (BLAKE3 of the bytes) compared with the caller's, and the new bytes renamed in
  (temp file, fsync, rename, fsync of the directory).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from blake3 import blake3

from .. import fsio
from ..errors import InvalidInput, RemoteCorrupt, RemoteFailed
from .base import CasLost

_TMP = ".tmp-"


def tag_of(data: bytes) -> str:
    """A directory remote's ETag: the hash of the bytes."""
    return blake3(data).hexdigest()[:32]


class DirectoryRemote:
    """A remote (format 2, docs/format.md §13) in a directory."""

    def __init__(self, root: Path, *, url: str) -> None:
        self.root = root
        self.url = url

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") or p.startswith(_TMP) for p in parts):
            raise InvalidInput(f"bad remote key {key!r}")
        return self.root.joinpath(*parts)

    def _ensure_root(self) -> None:
        if not self.root.is_dir():
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise RemoteFailed(f"remote {self.url}: cannot create {self.root}: {e.strerror}") from e

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The bytes under ``key`` and their tag, or None."""
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise RemoteFailed(f"remote {self.url}: cannot read {key}: {e.strerror}") from e
        return data, tag_of(data)

    def get_unless(self, key: str, tag: str) -> tuple[bytes | None, str] | None:
        """``get``, or ``(None, tag)`` when the bytes still have tag ``tag`` (read and hashed:
        a file has no cheaper version to compare)."""
        got = self.get(key)
        return (None, tag) if got is not None and got[1] == tag else got

    def size(self, key: str) -> int | None:
        """The size of ``key``, or None."""
        try:
            return self._path(key).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``key`` from ``start`` (seek and read), fewer at its end."""
        try:
            with open(self._path(key), "rb") as f:
                f.seek(start)
                return f.read(max(0, length))
        except (FileNotFoundError, NotADirectoryError):
            raise RemoteCorrupt(f"remote {self.url}: {key} is missing", key=key) from None
        except OSError as e:
            raise RemoteFailed(f"remote {self.url}: cannot read {key}: {e.strerror}") from e

    def _tmp(self, final: Path, data: bytes) -> Path:
        self._ensure_root()
        fsio.makedirs(final.parent)
        tmp = final.with_name(f"{_TMP}{final.name}.{os.getpid()}.{time.monotonic_ns()}")
        with fsio.NewFile(tmp) as f:
            f.write(data)
            f.sync()
        return tmp

    def put_new(self, key: str, data: bytes) -> bool:
        """Create ``key`` unless it exists (link: atomic create-only)."""
        final = self._path(key)
        if final.exists():
            return False
        tmp = self._tmp(final, data)
        created = fsio.link_new(tmp, final)
        if created:
            fsio.fsync_dir(final.parent)
        return created

    def put_if_match(self, key: str, data: bytes, tag: str | None) -> str:
        """Replace ``key`` if its tag is ``tag`` (None: if absent), under its lock."""
        final = self._path(key)
        self._ensure_root()
        fsio.makedirs(final.parent)
        with fsio.flock(final.with_name(final.name + ".lock"), shared=False, timeout=30.0):
            cur = self.get(key)
            if (cur is None and tag is not None) or (cur is not None and cur[1] != tag):
                raise CasLost(key)
            tmp = self._tmp(final, data)
            fsio.rename(tmp, final)
            fsio.fsync_dir(final.parent)
        return tag_of(data)

    def delete(self, key: str) -> None:
        """Remove ``key``."""
        fsio.unlink(self._path(key))

    def list(self, prefix: str) -> dict[str, float]:
        """Every key under ``prefix`` (a directory part) and its mtime, sorted by key."""
        base = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        out = {}
        for dirpath, _dirs, files in os.walk(base):
            for fn in files:
                if fn.startswith(_TMP) or fn.endswith(".lock"):
                    continue
                p = os.path.join(dirpath, fn)
                try:
                    mtime = os.stat(p).st_mtime
                except FileNotFoundError:
                    continue
                out[os.path.relpath(p, self.root).replace(os.sep, "/")] = mtime
        return dict(sorted(out.items()))
