"""Objects read from a remote's packs by byte range, without downloading the packs: what an
index-only store reads (``convgit index sync --from REMOTE``, docs/remotes.md "An index
without the objects").

A remote pack's index (``.idx``, small) is cached under ``.convgit/remotes/NAME/packs/``
(sync.py's cache, shared with fetch); it gives each object's chunk offset, its offset in
the chunk and its size. Reading an object reads its chunk, header and stored bytes, in one
ranged GET (its end is the next chunk's offset in the index; the last chunk of a pack takes
two: its 5-byte header, then its bytes; seek and read on a directory remote), decompresses it
(pack.py's own code) and re-hashes the object against its id. Decompressed chunks are kept
(ChunkCache, 64 MiB for all of a remote's packs), so a thread's messages, written side by
side, cost one chunk read, and a sync's read-ahead and index catch-up read it once.

``RangedObjects`` is a read-only object store: the local store first (objects written
here stay here), then the remote's packs. Nothing read by range is stored locally.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterator

from .. import codec
from ..errors import AmbiguousRevision, InvalidInput, ObjectCorrupt, ObjectMissing, RemoteCorrupt
from ..ids import is_oid
from ..pack import _ENTRY, PACK_MAGIC, Pack
from .refsdoc import pack_key


class RangeCounter:
    """Bytes and requests read by range (what ``index sync --json`` reports)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.requests = 0


class ChunkCache:
    """Decompressed chunks of every remote pack, least recently used dropped past
    ``max_bytes``: a sync's read-ahead and the index catch-up after it read each chunk once."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[tuple[str, int], bytes] = OrderedDict()

    def get(self, key: tuple[str, int]) -> bytes | None:
        """The chunk at ``key`` (pack name, offset), or None."""
        chunk = self._items.get(key)
        if chunk is not None:
            self._items.move_to_end(key)
        return chunk

    def put(self, key: tuple[str, int], chunk: bytes) -> None:
        """Keep ``chunk``, dropping the oldest past the budget."""
        if key in self._items:
            return
        self._items[key] = chunk
        self.bytes += len(chunk)
        while self.bytes > self.max_bytes and len(self._items) > 1:
            self.bytes -= len(self._items.popitem(last=False)[1])


class RangedPack(Pack):
    """A remote pack read through its cached index, each chunk by byte range."""

    def __init__(self, idx_path: Path, store_of: Callable[[], object], counter: RangeCounter,
                 chunks: ChunkCache | None = None) -> None:
        super().__init__(idx_path)
        self._store_of = store_of
        self.counter = counter
        self._shared = chunks if chunks is not None else ChunkCache()

    def _chunk_end(self, off: int) -> int | None:
        """Where the chunk at ``off`` ends: the next chunk's offset (None for the last one)."""
        starts = getattr(self, "_starts", None)
        if starts is None:
            starts = self._starts = sorted({self._where(i)[0] for i in range(self.count)})
        i = bisect_right(starts, off)
        return starts[i] if i < len(starts) else None

    def _chunk(self, oid: str, off: int, need: int, depth: int = 0) -> bytes:
        key = (self.name, off)
        chunk = self._shared.get(key)
        if chunk is None:
            chunk = super()._chunk(oid, off, need, depth)
            self._shared.put(key, chunk)
        return chunk

    def _entry(self, oid: str, off: int) -> tuple[int, bytes]:
        if off < len(PACK_MAGIC):
            raise ObjectCorrupt(f"object {oid}: bad entry offset in {self.name}", oid=oid)
        store = self._store_of()
        key = pack_key(self.name, "pack")
        end = self._chunk_end(off)
        if end is not None:  # the next chunk's offset (from the index): header and body in one read
            data = store.get_range(key, off, end - off)
            self.counter.bytes += len(data)
            self.counter.requests += 1
            if len(data) >= _ENTRY.size:
                enc, n = struct.unpack_from(">BI", data)
                if n == len(data) - _ENTRY.size:
                    return enc, data[_ENTRY.size:]
            raise ObjectCorrupt(f"object {oid}: its chunk in remote pack {self.name} is not where the index says",
                                oid=oid)
        head = store.get_range(key, off, _ENTRY.size)
        self.counter.bytes += len(head)
        self.counter.requests += 1
        if len(head) != _ENTRY.size:
            raise ObjectCorrupt(f"object {oid}: entry beyond the end of remote pack {self.name}", oid=oid)
        enc, n = struct.unpack(">BI", head)
        stored = store.get_range(key, off + _ENTRY.size, n) if n else b""
        self.counter.bytes += len(stored)
        self.counter.requests += 1
        if len(stored) != n:
            raise ObjectCorrupt(f"object {oid}: truncated in remote pack {self.name}", oid=oid)
        return enc, stored


class RangedObjects:
    """A read-only object store: local objects first, then a remote's packs by range.

    ``packs_dir``: the cached pack indexes of the remote (every ``*.idx`` there is used, in
    ``order`` first when given: the packs the refs document names, oldest first).
    ``store_of``: opens the remote backend, called on the first ranged read only (opening
    an index-only store and reading the index needs no network)."""

    def __init__(self, local, packs_dir: Path, store_of: Callable[[], object], *,
                 order: list[str] | None = None) -> None:
        self.__dict__["local"] = local  # (before anything: __getattr__ reads it)
        self.local = local
        self.packs_dir = packs_dir
        self._store_of_raw = store_of
        self._store = None
        self.counter = RangeCounter()
        self.chunks = ChunkCache()
        self._order = order
        self._ranged: list[RangedPack] | None = None

    def __getattr__(self, name: str):  # everything else (writes, loose iteration, packs) is local
        return getattr(self.local, name)

    def _backend(self):
        if self._store is None:
            self._store = self._store_of_raw()
        return self._store

    def ranged_packs(self, *, reload: bool = False) -> list[RangedPack]:
        """The remote's packs (their cached indexes), in lookup order (``reload``: list the
        cache again, when a sync has added indexes since)."""
        if reload and self._ranged is not None:
            have = {p.name for p in self._ranged}
            if {p.stem for p in self.packs_dir.glob("pack-*.idx")} != have:
                for p in self._ranged:
                    p.close()
                self._ranged = None
        if self._ranged is None:
            names = sorted(p.stem for p in self.packs_dir.glob("pack-*.idx")) if self.packs_dir.is_dir() else []
            if self._order is not None:
                names = [n for n in self._order if n in set(names)] + [n for n in names if n not in set(self._order)]
            out = []
            for n in names:
                try:
                    out.append(RangedPack(self.packs_dir / f"{n}.idx", self._backend, self.counter, self.chunks))
                except ObjectCorrupt:
                    continue  # a damaged cached index: the next sync downloads it again
            self._ranged = out
        return self._ranged

    def _refuse(self, *_a, **_k):
        raise InvalidInput("this is an index-only store ([store] objects_from): it takes no new objects "
                           "(commit, import, fork and merge into a full store, push, then index sync here)")

    write = write_raw = write_many = write_packed = _refuse

    def contains(self, oid: str) -> bool:
        """Stored here, or in one of the remote's packs."""
        return self.local.contains(oid) or any(p.contains(oid) for p in self.ranged_packs()) or any(
            p.contains(oid) for p in self.ranged_packs(reload=True))

    def prober(self):
        """``contains`` for many ids (ObjectStore.prober's contract): this store's own."""
        return self.contains

    def stored_size(self, oid: str) -> int | None:
        """The size of ``oid`` (here, else from a remote pack's index), or None."""
        n = self.local.stored_size(oid)
        if n is None and is_oid(oid):
            for p in self.ranged_packs():
                n = p.size(oid)
                if n is not None:
                    break
        return n

    def read_bytes(self, oid: str) -> bytes:
        """The bytes of ``oid`` (verified against its id): here, else read by range."""
        if self.local.contains(oid):
            return self.local.read_bytes(oid)
        missing = None
        packs = self.ranged_packs()
        if not any(p.contains(oid) for p in packs):
            packs = self.ranged_packs(reload=True)
        for p in packs:
            if not p.contains(oid):
                continue
            try:
                data = p.read(oid)
            except RemoteCorrupt as e:  # a pack gc --remote deleted: another may hold it
                missing = e
                continue
            if data is not None:
                return data
        if missing is not None:
            raise missing
        raise ObjectMissing(f"object {oid} is not stored here nor in the remote's packs", oid=oid)

    def read(self, oid: str):
        """The decoded object ``oid``."""
        return codec.decode(self.read_bytes(oid), oid)

    def find_prefix(self, prefix: str) -> list[str]:
        """Every id starting with ``prefix``, here or in the remote's packs."""
        found = set(self.local.find_prefix(prefix))
        for p in self.ranged_packs():
            found.update(p.find_prefix(prefix))
        return sorted(found)

    def resolve_prefix(self, prefix: str) -> str | None:
        """The one id starting with ``prefix``, None if none (AmbiguousRevision if several)."""
        found = self.find_prefix(prefix)
        if len(found) > 1:
            raise AmbiguousRevision(f"short id {prefix} is ambiguous: {', '.join(f[:12] for f in found[:5])}",
                                    candidates=found[:20])
        return found[0] if found else None

    def iter_oids(self) -> Iterator[str]:
        """Every id here, then those of the remote's packs (each once)."""
        seen = set()
        for oid in self.local.iter_oids():
            seen.add(oid)
            yield oid
        for p in self.ranged_packs():
            for oid in p.ids():
                if oid not in seen:
                    seen.add(oid)
                    yield oid

    def close(self) -> None:
        """Close the remote packs' indexes and the local store."""
        for p in self._ranged or []:
            p.close()
        self._ranged = None
        self.local.close()
