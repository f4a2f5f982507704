"""Packfiles: many objects in one compressed file, with an index for O(log n) lookup by id.

``objects/pack/pack-<checksum>.pack`` (version 2; docs/format.md §9 is normative)::

    b"CGPACK\\x00\\x02"   magic + format version
    chunks:             u8 encoding (0 raw, 1 zstd) · u32 stored length · stored bytes
    u32 count           objects in the pack (at the end: a writer need not know it in advance)
    32 bytes            BLAKE3 of everything above (the pack's checksum and name)

A chunk holds the bytes of one or more objects laid end to end, compressed together (up to
CHUNK_TARGET bytes of small objects, so a conversation's messages, written next to each
other, share one compression window; an object of CHUNK_TARGET bytes or more is a chunk of
its own).

``objects/pack/pack-<checksum>.idx``::

    b"CGIDX\\x00\\x00\\x02"  magic + version
    u32 count
    256 × u32           fan-out: how many ids start with a byte <= i
    count × 32 bytes    ids, raw, sorted
    count × u64         offset of the chunk holding each id, in the pack
    count × u32         offset of the object in its chunk's uncompressed bytes
    count × u32         each object's size in bytes (uncompressed)
    32 bytes            the pack's checksum
    32 bytes            BLAKE3 of everything above in the idx

Version 1 (still read, no longer written) has one object per chunk and no in-chunk offsets.
All integers big-endian. Both files are written to temp names, fsynced and renamed (the pack
first: an idx only ever names a complete pack). Every object read from a pack is re-hashed.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from bisect import bisect_left
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterable, Iterator

from blake3 import blake3

from . import fsio
from .errors import ObjectCorrupt

PACK_MAGIC_V1, PACK_MAGIC = b"CGPACK\x00\x01", b"CGPACK\x00\x02"
IDX_MAGIC_V1, IDX_MAGIC = b"CGIDX\x00\x00\x01", b"CGIDX\x00\x00\x02"
RAW, ZSTD = 0, 1
_ENTRY = struct.Struct(">BI")
_HDR = 12  # magic + count
_ZLEVEL = 3
CHUNK_TARGET = 64 * 1024  # small objects are compressed together up to this many bytes
_CACHED_CHUNKS = 8  # decompressed chunks kept per pack (a thread's messages share a chunk)


def _zstd():
    import zstandard

    return zstandard


class Pack:
    """One pack and its index, memory-mapped for reading."""

    def __init__(self, idx_path: Path) -> None:
        self.idx_path = idx_path
        self.pack_path = idx_path.with_suffix(".pack")
        self.name = idx_path.stem
        with open(idx_path, "rb") as f:
            self._idx = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else b""
        idx = self._idx
        if len(idx) < _HDR + 1024 + 64 or idx[:8] not in (IDX_MAGIC, IDX_MAGIC_V1):
            raise ObjectCorrupt(f"{idx_path.name}: not a pack index")
        self.version = 2 if idx[:8] == IDX_MAGIC else 1
        (self.count,) = struct.unpack_from(">I", idx, 8)
        n = self.count
        self._fan = struct.unpack_from(">256I", idx, _HDR)
        self._ids_at = _HDR + 1024
        self._off_at = self._ids_at + 32 * n
        self._in_at = self._off_at + 8 * n  # version 2: offsets inside the chunks
        self._size_at = self._in_at + (4 * n if self.version == 2 else 0)
        end = self._size_at + 4 * n
        if len(idx) != end + 64 or self._fan[255] != n:
            raise ObjectCorrupt(f"{idx_path.name}: pack index has the wrong size")
        self.checksum = bytes(idx[end : end + 32])
        self._pack_f = None
        self._pack = None
        self._idx_ok: bool | None = None
        self._chunks: OrderedDict[int, bytes] = OrderedDict()

    def idx_ok(self) -> bool:
        """Does the index match its checksum? (Computed once; used when a lookup misses.)"""
        if self._idx_ok is None:
            self._idx_ok = blake3(self._idx[:-32]).digest() == self._idx[-32:]
        return self._idx_ok

    # -- lookup -----------------------------------------------------------------------------

    def _id(self, i: int) -> bytes:
        a = self._ids_at + 32 * i
        return self._idx[a : a + 32]

    def _find(self, raw: bytes) -> int:
        b = raw[0]
        lo = self._fan[b - 1] if b else 0
        hi = self._fan[b]
        while lo < hi:
            mid = (lo + hi) // 2
            v = self._id(mid)
            if v < raw:
                lo = mid + 1
            elif v > raw:
                hi = mid
            else:
                return mid
        return -1

    def contains(self, oid: str) -> bool:
        """True when the pack holds ``oid``."""
        return self._find(bytes.fromhex(oid)) >= 0

    def ids(self) -> Iterator[str]:
        """Every id in the pack, in id order."""
        for i in range(self.count):
            yield self._id(i).hex()

    def find_prefix(self, prefix: str) -> list[str]:
        """Ids starting with a hex prefix (even or odd length)."""
        lo_hex = prefix + "0" * (64 - len(prefix))
        lo_raw = bytes.fromhex(lo_hex)
        b = lo_raw[0]
        lo = self._fan[b - 1] if b else 0
        hi = self._fan[b]
        keys = _IdView(self, lo, hi)
        i = lo + bisect_left(keys, lo_raw)
        out = []
        while i < hi:
            h = self._id(i).hex()
            if not h.startswith(prefix):
                break
            out.append(h)
            i += 1
        return out

    def size(self, oid: str) -> int | None:
        """An object's size (uncompressed) from the index, or None if not in this pack."""
        i = self._find(bytes.fromhex(oid))
        if i < 0:
            return None
        return struct.unpack_from(">I", self._idx, self._size_at + 4 * i)[0]

    def _where(self, i: int) -> tuple[int, int, int]:
        """(chunk offset in the pack, offset in the chunk, size) of the i-th id."""
        (off,) = struct.unpack_from(">Q", self._idx, self._off_at + 8 * i)
        (size,) = struct.unpack_from(">I", self._idx, self._size_at + 4 * i)
        inner = struct.unpack_from(">I", self._idx, self._in_at + 4 * i)[0] if self.version == 2 else 0
        return off, inner, size

    def read(self, oid: str) -> bytes | None:
        """The bytes of ``oid``, verified against the id, or None if the pack does not hold it."""
        i = self._find(bytes.fromhex(oid))
        if i < 0:
            return None
        off, inner, size = self._where(i)
        chunk = self._chunk(oid, off, inner + size)
        data = chunk[inner : inner + size]
        if len(data) != size or blake3(data).hexdigest() != oid:
            raise ObjectCorrupt(f"object {oid} is corrupt in {self.pack_path.name}: its bytes hash to another id", oid=oid)
        return data

    def _chunk(self, oid: str, off: int, need: int) -> bytes:
        """The uncompressed bytes of the chunk at ``off`` (which must hold at least ``need``)."""
        chunk = self._chunks.get(off)
        if chunk is not None:
            self._chunks.move_to_end(off)
            return chunk
        enc, stored = self._entry(oid, off)
        if enc == RAW:
            chunk = bytes(stored)
        elif enc == ZSTD:
            # A chunk of several objects is under 2 x CHUNK_TARGET; a bigger one holds the one
            # object asked for. A frame claiming more (damage, or a hostile pack) is refused
            # before anything is allocated.
            limit = max(2 * CHUNK_TARGET, need)
            zstd = _zstd()
            try:
                claimed = zstd.frame_content_size(stored)
                if claimed > limit:
                    raise ValueError(f"the frame claims {claimed} bytes, more than its chunk can hold")
                chunk = zstd.ZstdDecompressor().decompress(stored, max_output_size=limit)
            except Exception as e:
                raise ObjectCorrupt(f"object {oid}: does not decompress in {self.pack_path.name}: {e}", oid=oid) from e
        else:
            raise ObjectCorrupt(f"object {oid}: unknown encoding {enc} in {self.pack_path.name}", oid=oid)
        self._chunks[off] = chunk
        if len(self._chunks) > _CACHED_CHUNKS:
            self._chunks.popitem(last=False)
        return chunk

    def _entry(self, oid: str, off: int) -> tuple[int, bytes]:
        """(encoding, stored bytes) of the chunk at ``off`` (from the mapped pack file; a
        remote read by range overrides this, convgit/remotes/ranged.py)."""
        pack = self._open_pack()
        if off < len(PACK_MAGIC) or off + _ENTRY.size > len(pack):
            raise ObjectCorrupt(f"object {oid}: entry beyond the end of {self.pack_path.name}", oid=oid)
        enc, n = _ENTRY.unpack_from(pack, off)
        start = off + _ENTRY.size
        if start + n > len(pack):
            raise ObjectCorrupt(f"object {oid}: truncated in {self.pack_path.name}", oid=oid)
        return enc, pack[start : start + n]

    def ids_in_pack_order(self) -> list[str]:
        """Every id, in the order the objects lie in the pack (reading them in this order
        decompresses each chunk once)."""
        return [self._id(i).hex() for i in sorted(range(self.count), key=self._where)]

    def _open_pack(self):
        if self._pack is None:
            try:
                self._pack_f = open(self.pack_path, "rb")
            except FileNotFoundError:
                raise ObjectCorrupt(f"{self.pack_path.name} is missing (its index is present)") from None
            size = os.fstat(self._pack_f.fileno()).st_size
            self._pack = mmap.mmap(self._pack_f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        return self._pack

    def close(self) -> None:
        """Unmap the pack and its index."""
        for m in (self._pack, self._idx):
            if isinstance(m, mmap.mmap):
                try:
                    m.close()
                except BufferError:  # pragma: no cover - a view still alive
                    pass
        if self._pack_f is not None:
            self._pack_f.close()
        self._pack = self._pack_f = None
        self._chunks.clear()

    # -- verification (fsck) ----------------------------------------------------------------

    def verify(self, *, objects: bool = True) -> list[str]:
        """Problems with this pack: checksums, entry bounds, and (``objects``) every object's hash."""
        problems = []
        idx = self._idx
        if blake3(idx[:-32]).digest() != idx[-32:]:
            problems.append(f"{self.idx_path.name}: index checksum mismatch")
        try:
            pack = self._open_pack()
        except ObjectCorrupt as e:
            return problems + [e.message]
        magic = PACK_MAGIC if self.version == 2 else PACK_MAGIC_V1
        if len(pack) < _HDR + 32 or pack[:8] != magic:
            return problems + [f"{self.pack_path.name}: not a pack (or not the version its index says)"]
        count_at = len(pack) - 36 if self.version == 2 else 8  # version 2: the count is in the trailer
        if blake3(pack[:-32]).digest() != pack[-32:]:
            problems.append(f"{self.pack_path.name}: pack checksum mismatch")
        if pack[-32:] != self.checksum:
            problems.append(f"{self.idx_path.name}: names another pack")
        (count,) = struct.unpack_from(">I", pack, count_at)
        if count != self.count:
            problems.append(f"{self.pack_path.name}: {count} objects but the index lists {self.count}")
        prev = b""
        for i in range(self.count):
            raw = self._id(i)
            if raw <= prev:
                problems.append(f"{self.idx_path.name}: ids not sorted at {i}")
            prev = raw
        if objects:
            for oid in self.ids_in_pack_order():
                try:
                    self.read(oid)
                except ObjectCorrupt as e:
                    problems.append(e.message)
        return problems


class _IdView:
    """A sequence view of a pack's sorted ids for bisect."""

    def __init__(self, pack: Pack, lo: int, hi: int) -> None:
        self.pack, self.lo, self.hi = pack, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo

    def __getitem__(self, i: int) -> bytes:
        return self.pack._id(self.lo + i)


def write_pack(pack_dir: Path, oids: Iterable[str], get: Callable[[str], bytes], *, fsync: bool = True,
               compress: bool = True) -> Path | None:
    """Write one pack (+ idx) holding the objects ``oids`` (duplicates stored once), whose
    bytes ``get(oid)`` returns; they are fetched one at a time and stored in this order, so a
    pack of any size streams and objects given side by side (a conversation's messages)
    share a compressed chunk. Returns the idx path, or None when there is nothing to write.
    Durable on return when ``fsync``: pack and idx are fsynced before their renames, the
    directory after.
    """
    order = list(dict.fromkeys(oids))
    if not order:
        return None
    w = PackWriter(pack_dir, fsync=fsync, compress=compress)
    try:
        for oid in order:
            w.add(oid, get(oid))
        return w.finish()
    except BaseException:
        w.abort()
        raise


class PackWriter:
    """A pack written object by object (gc packs what it marks as it reads it), finished into
    place by ``finish()`` or removed by ``abort()``. The object count goes in the trailer, so
    nothing needs to be known in advance."""

    def __init__(self, pack_dir: Path, *, fsync: bool = True, compress: bool = True) -> None:
        fsio.makedirs(pack_dir, fsync=fsync)
        self.pack_dir, self.fsync = pack_dir, fsync
        self._cctx = _zstd().ZstdCompressor(level=_ZLEVEL) if compress else None
        self._where: dict[bytes, tuple[int, int, int]] = {}  # raw id -> (chunk offset, offset inside, size)
        self._buf: list[bytes] = []
        self._fill = 0
        self._off = 0
        self.tmp = pack_dir / f"{fsio.TMP_PREFIX}pack_{os.getpid()}_{time.monotonic_ns()}"
        self._f = fsio.NewFile(self.tmp)
        self._h = blake3()
        self._write(PACK_MAGIC)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, oid: str) -> bool:
        return bytes.fromhex(oid) in self._where

    def add(self, oid: str, data: bytes, *, verified: bool = False) -> None:
        """Append one object (again: ignored). ``verified``: the caller has just re-hashed it."""
        raw = bytes.fromhex(oid)
        if raw in self._where:
            return
        if not verified and blake3(data).hexdigest() != oid:
            raise ObjectCorrupt(f"refusing to pack bytes under the wrong id {oid}", oid=oid)
        if self._buf and (self._fill + len(data) > CHUNK_TARGET or len(data) >= CHUNK_TARGET):
            self._flush()
        self._where[raw] = (self._off, self._fill, len(data))
        self._buf.append(data)
        self._fill += len(data)
        if self._fill >= CHUNK_TARGET:
            self._flush()

    def _write(self, b: bytes) -> None:
        self._f.write(b)
        self._h.update(b)
        self._off += len(b)

    def _flush(self) -> None:
        raw = b"".join(self._buf)
        enc, stored = RAW, raw
        if self._cctx is not None and len(raw) > 64:
            z = self._cctx.compress(raw)
            if len(z) < len(raw):
                enc, stored = ZSTD, z
        self._write(_ENTRY.pack(enc, len(stored)) + stored)
        self._buf.clear()
        self._fill = 0

    def finish(self) -> Path | None:
        """Make the pack and then its idx durable and visible; None (and no file) when empty."""
        if self._buf:
            self._flush()
        n = len(self._where)
        if n == 0:
            self.abort()
            return None
        self._write(struct.pack(">I", n))
        checksum = self._h.digest()
        self._f.write(checksum)
        if self.fsync:
            self._f.sync()
        self._f.close()
        name = f"pack-{checksum.hex()}"
        fsio.rename(self.tmp, self.pack_dir / f"{name}.pack")
        where = self._where
        ids = sorted(where)
        fan = [0] * 256
        for raw in ids:
            fan[raw[0]] += 1
        acc = 0
        for i in range(256):
            acc += fan[i]
            fan[i] = acc
        rows = [where[r] for r in ids]
        parts = [IDX_MAGIC, struct.pack(">I", n), struct.pack(">256I", *fan), b"".join(ids)]
        parts.append(struct.pack(f">{n}Q", *(r[0] for r in rows)))
        parts.append(struct.pack(f">{n}I", *(r[1] for r in rows)))
        parts.append(struct.pack(f">{n}I", *(r[2] for r in rows)))
        parts.append(checksum)
        idx = b"".join(parts)
        idx += blake3(idx).digest()
        final_idx = self.pack_dir / f"{name}.idx"
        fsio.replace_file(final_idx, idx, fsync=self.fsync)  # fsyncs the directory (both renames)
        return final_idx

    def abort(self) -> None:
        """Give up the pack being written (its temporary file is removed)."""
        self._f.abort()


class PackFilter:
    """A Bloom filter over the ids of a set of packs: a cheap "in none of them" for the many
    misses of a bulk writer (import, commit_many), which otherwise scans every pack's index
    per probe, so that each batch's new pack made every later probe slower. About 2 bytes
    per packed id; a "maybe" is answered by the packs themselves, so a false positive costs
    one scan and is never a wrong answer."""

    _BITS_PER_ID = 16  # three probes: about 0.5 % false positives

    def __init__(self, packs: Iterable[Pack]) -> None:
        self.packs: set[str] = set()
        self._n = 0
        packs = list(packs)
        total = sum(p.count for p in packs)
        self._mask = (1 << max(16, (total * 2 * self._BITS_PER_ID).bit_length())) - 1
        self._bits = bytearray((self._mask + 1) >> 3)
        for p in packs:
            self.add(p)

    def full(self, more: int) -> bool:
        """Would ``more`` ids exceed what this filter was sized for?"""
        return (self._n + more) * self._BITS_PER_ID > self._mask + 1

    def add(self, pack: Pack) -> None:
        """Take in every id of ``pack``."""
        import array

        words = array.array("Q")
        words.frombytes(pack._idx[pack._ids_at : pack._ids_at + 32 * pack.count])
        bits, mask = self._bits, self._mask
        for j in range(3):  # the ids are hashes: three of their 64-bit words are the probes
            for h in words[j::4]:
                h &= mask
                bits[h >> 3] |= 1 << (h & 7)
        self.packs.add(pack.name)
        self._n += pack.count

    def may_contain(self, oid: str) -> bool:
        """False when no pack of the filter holds ``oid``."""
        raw = bytes.fromhex(oid[:48])
        bits, mask = self._bits, self._mask
        for j in (0, 8, 16):
            h = int.from_bytes(raw[j : j + 8], "little") & mask
            if not bits[h >> 3] & (1 << (h & 7)):
                return False
        return True
