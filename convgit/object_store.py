"""Objects on disk: loose files ``objects/ab/cdef…`` named by the BLAKE3 of their bytes.

Every read re-hashes the bytes, so a flipped bit is an ObjectCorrupt error, never wrong data.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Iterator

from . import codec, fsio
from .errors import AmbiguousRevision, ObjectCorrupt, ObjectMissing, StorageFailed
from .ids import is_oid
from .objects import Object

# Below this many objects a batch is made durable file by file; above it, one syncfs(2).
_SYNCFS_THRESHOLD = 16


class ObjectStore:
    """Loose objects behind one interface (packs join it in a later format addition)."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self._root = str(path)
        self.fsync = fsync

    def _file(self, oid: str) -> str:
        return f"{self._root}/{oid[:2]}/{oid[2:]}"

    # -- reading ----------------------------------------------------------------------------

    def contains(self, oid: str) -> bool:
        return os.path.exists(self._file(oid))

    def read_bytes(self, oid: str) -> bytes:
        """The verified stored bytes of ``oid``."""
        if not is_oid(oid):
            raise ObjectMissing(f"not an object id: {oid!r}", oid=oid)
        try:
            with open(self._file(oid), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise ObjectMissing(f"object {oid} is missing", oid=oid) from None
        except OSError as e:
            raise StorageFailed(f"cannot read object {oid}: {e.strerror}", oid=oid) from e
        if codec.hash_bytes(data) != oid:
            raise ObjectCorrupt(f"object {oid} is corrupt: its bytes hash to another id", oid=oid)
        return data

    def read(self, oid: str) -> Object:
        return codec.decode(self.read_bytes(oid), oid)

    def iter_oids(self) -> Iterator[str]:
        try:
            fan = sorted(os.listdir(self.path))
        except FileNotFoundError:
            return
        for d in fan:
            if len(d) != 2:
                continue
            try:
                names = sorted(os.listdir(self.path / d))
            except (NotADirectoryError, FileNotFoundError):
                continue
            for n in names:
                oid = d + n
                if is_oid(oid):
                    yield oid

    def find_prefix(self, prefix: str) -> list[str]:
        """Every stored id starting with ``prefix`` (at least 2 hex chars)."""
        d = self.path / prefix[:2]
        try:
            names = os.listdir(d)
        except (FileNotFoundError, NotADirectoryError):
            return []
        rest = prefix[2:]
        return sorted(prefix[:2] + n for n in names if n.startswith(rest) and is_oid(prefix[:2] + n))

    def resolve_prefix(self, prefix: str) -> str | None:
        found = self.find_prefix(prefix)
        if len(found) > 1:
            raise AmbiguousRevision(
                f"short id {prefix} is ambiguous: {', '.join(f[:12] for f in found[:5])}",
                candidates=found[:20],
            )
        return found[0] if found else None

    # -- writing ----------------------------------------------------------------------------

    def write_raw(self, oid: str, data: bytes) -> bool:
        """Store already-encoded bytes (verified against ``oid``). True if newly written."""
        return self.write_many([(oid, data)]) == 1

    def write(self, obj: Object) -> tuple[str, bool]:
        oid, data = codec.encode_and_hash(obj)
        return oid, self.write_raw(oid, data)

    def write_many(self, items: Iterable[tuple[str, bytes]], *, missing: frozenset[str] | set[str] = frozenset()) -> int:
        """Write objects and make them durable before returning. Returns how many were new.

        Small batches fsync each file and its directory; large ones write without fsync and
        then flush the whole file system once (one syncfs instead of thousands of fsyncs).
        ``missing``: ids the caller has just seen absent (their existence probe is skipped).
        """
        items = list(items)
        for oid, data in items:
            if codec.hash_bytes(data) != oid:
                raise ObjectCorrupt(f"refusing to store bytes under the wrong id {oid}", oid=oid)
        per_file = self.fsync and len(items) <= _SYNCFS_THRESHOLD
        dirs: set[str] = set()
        new = 0
        for oid, data in items:
            f = self._file(oid)
            if fsio.write_object_file(f, data, fsync=per_file, probe=oid not in missing):
                new += 1
                dirs.add(os.path.dirname(f))
        if self.fsync and new:
            if per_file:
                for d in sorted(dirs):
                    fsio.fsync_dir(d)
                fsio.fsync_dir(self.path)  # new fan-out directory entries
            else:
                fsio.sync_filesystem(self.path)
        return new
