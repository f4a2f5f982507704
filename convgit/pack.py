"""Packfiles: many objects in one compressed file, with an index for O(log n) lookup by id.

``objects/pack/pack-<checksum>.pack`` (version 3; docs/format.md §9 is normative)::

    b"CGPACK\\x00\\x03"   magic + format version
    chunks:             u8 encoding (0 raw, 1 zstd, 2 spliced, 3 spliced + zstd) · u32 stored
                        length · stored bytes
    u32 count           objects in the pack (at the end: a writer need not know it in advance)
    32 bytes            BLAKE3 of everything above (the pack's checksum and name)

A chunk holds the bytes of one or more objects laid end to end, compressed together (up to
CHUNK_TARGET bytes of small objects, so a conversation's messages, written next to each
other, share one compression window; an object of CHUNK_TARGET bytes or more is a chunk of
its own). A *spliced* chunk leaves out the long strings (FRAGMENT_MIN bytes or more: a
pasted document, a system prompt, a file a coding agent read again) that an earlier chunk
of the pack already holds: it names each by its fragment id (the id the text would have as
a blob) and the idx says where the fragment's bytes are. So a text repeated across
conversations is stored once per pack, by reference, and every object still reads back as
its exact canonical bytes, re-hashed against its id.

``objects/pack/pack-<checksum>.idx``::

    b"CGIDX\\x00\\x00\\x03"  magic + version
    u32 count
    256 × u32           fan-out: how many ids start with a byte <= i
    count × 32 bytes    ids, raw, sorted
    count × u64         offset of the chunk holding each id, in the pack
    count × u32         offset of the object in its chunk's uncompressed bytes
    count × u32         each object's size in bytes (uncompressed)
    u32 fragments       (version 3) the fragments spliced chunks refer to
    fragments × 32      their ids, raw, sorted
    fragments × 16      each: u64 chunk offset · u32 offset in the chunk · u32 length
    32 bytes            the pack's checksum
    32 bytes            BLAKE3 of everything above in the idx

Version 2 (still read, no longer written) has no spliced chunks and no fragment table;
version 1 has one object per chunk and no in-chunk offsets. All integers big-endian. Both
files are written to temp names, fsynced and renamed (the pack first: an idx only ever names
a complete pack). Every object read from a pack is re-hashed.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import time
import zlib
from bisect import bisect_left
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterable, Iterator

from blake3 import blake3

from . import fsio
from .errors import ObjectCorrupt

PACK_MAGIC_V1, PACK_MAGIC_V2, PACK_MAGIC = b"CGPACK\x00\x01", b"CGPACK\x00\x02", b"CGPACK\x00\x03"
IDX_MAGIC_V1, IDX_MAGIC_V2, IDX_MAGIC = b"CGIDX\x00\x00\x01", b"CGIDX\x00\x00\x02", b"CGIDX\x00\x00\x03"
_PACK_MAGICS = {1: PACK_MAGIC_V1, 2: PACK_MAGIC_V2, 3: PACK_MAGIC}
_VERSIONS = {IDX_MAGIC_V1: 1, IDX_MAGIC_V2: 2, IDX_MAGIC: 3}
RAW, ZSTD, SPLICED = 0, 1, 2  # encoding bits: 1 = zstd-compressed, 2 = spliced (3 = both)
_ENTRY = struct.Struct(">BI")
_SPLICE = struct.Struct(">II32s")  # a spliced chunk's reference: at · length · fragment id
_FLOC = struct.Struct(">QII")  # a fragment's place: chunk offset · offset in the chunk · length
FRAGMENT_MIN = 1024  # a string this long or longer, already in an earlier chunk, is spliced
PIECE_MIN, _PIECE_MAX = 1024, 16384  # or each piece of it (cut at lines: _pieces) that is
_SPLICE_DEPTH = 8  # the writer's bound on chains of spliced chunks (a reader refuses > 32)
_READ_DEPTH = 32
_STRINGS = re.compile(rb"[\xda\xdb]")  # msgpack str16 / str32 headers: where long strings start
_BLOB_HEAD, _BLOB_TAIL = b"\x82\xa4data", b"\xa4type\xa4blob"  # a blob's canonical bytes around its data
_HDR = 12  # magic + count
_ZLEVEL = 3
CHUNK_TARGET = 64 * 1024  # small objects are compressed together up to this many bytes
_CACHED_CHUNKS = 8  # decompressed chunks kept per pack (a thread's messages share a chunk)
_FRAGMENT_CACHE = 8 << 20  # bytes of fragments kept per pack (spliced chunks refer to them)


def _zstd():
    import zstandard

    return zstandard


def fragment_id(data, start: int = 0, length: int | None = None) -> bytes:
    """The raw id of ``data[start:start+length]`` as a fragment: the id a blob of those bytes
    has (so ``convgit hash-object FILE`` names a spliced text as it names a stored one)."""
    view = memoryview(data)[start : len(data) if length is None else start + length]
    n = len(view)
    head = b"\xc4" + bytes([n]) if n < 256 else (b"\xc5" + n.to_bytes(2, "big") if n < 65536 else b"\xc6" + n.to_bytes(4, "big"))
    h = blake3(_BLOB_HEAD + head)
    h.update(view)
    h.update(_BLOB_TAIL)
    return h.digest()


def _long_strings(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, length) of the byte runs of ``data`` that a msgpack str16/str32 header says
    are a string of FRAGMENT_MIN bytes or more, in order. A header byte found inside some
    other value gives a run that is not a string: harmless (splicing is byte for byte, and a
    run repeats elsewhere only if those bytes do), so no parse is needed."""
    end = len(data)
    for m in _STRINGS.finditer(data):
        i = m.start()
        if data[i] == 0xDA:
            if i + 3 > end:
                continue
            n, start = (data[i + 1] << 8) | data[i + 2], i + 3
        else:
            if i + 5 > end:
                continue
            n, start = int.from_bytes(data[i + 1 : i + 5], "big"), i + 5
        if n >= FRAGMENT_MIN and start + n <= end:
            yield start, n


def _pieces(data: bytes, start: int, n: int) -> Iterator[tuple[int, int]]:
    """(start, length) of the pieces a long string is cut into, in order, covering it: a cut
    follows a newline once a piece holds PIECE_MIN bytes, where the 16 bytes after the newline
    pass a CRC test (1 in 4) or the piece has reached _PIECE_MAX. The cuts depend on the text
    around them, not on where the string starts, so a document pasted into two messages
    after different words is cut the same way from its first cut on (content-defined
    chunking, on lines: a text without newlines is one piece)."""
    end = start + n
    s = start
    nl = data.find(b"\n", start + PIECE_MIN - 1, end)
    while nl != -1:
        cut = nl + 1
        if cut - s >= PIECE_MIN and (cut - s >= _PIECE_MAX or not zlib.crc32(data[cut : cut + 16]) & 3):
            if end - cut < PIECE_MIN:
                break
            yield s, cut - s
            s = cut
            nl = data.find(b"\n", s + PIECE_MIN - 1, end)
        else:
            nl = data.find(b"\n", cut, end)
    yield s, end - s


_SCAN = 16  # ids: a run this short is scanned by bytes.find (Pack._find), not bisected


def _search(key_at: Callable[[int], bytes], lo: int, hi: int, raw: bytes) -> int:
    """The index in [lo, hi) whose sorted key ``key_at(i)`` is ``raw``, or -1."""
    while lo < hi:
        mid = (lo + hi) // 2
        v = key_at(mid)
        if v < raw:
            lo = mid + 1
        elif v > raw:
            hi = mid
        else:
            return mid
    return -1


class Pack:
    """One pack and its index, memory-mapped for reading."""

    def __init__(self, idx_path: Path) -> None:
        self.idx_path = idx_path
        self.pack_path = idx_path.with_suffix(".pack")
        self.name = idx_path.stem
        with open(idx_path, "rb") as f:
            self._idx = fsio.map_read(f)
        idx = self._idx
        version = _VERSIONS.get(bytes(idx[:8])) if len(idx) >= _HDR + 1024 + 64 else None
        if version is None:
            raise ObjectCorrupt(f"{idx_path.name}: not a pack index")
        self.version = version
        (self.count,) = struct.unpack_from(">I", idx, 8)
        n = self.count
        self._fan = struct.unpack_from(">256I", idx, _HDR)
        self._ids_at = _HDR + 1024
        self._off_at = self._ids_at + 32 * n
        self._in_at = self._off_at + 8 * n  # version 2 and 3: offsets inside the chunks
        self._size_at = self._in_at + (4 * n if self.version >= 2 else 0)
        end = self._size_at + 4 * n
        self.fragments = 0  # version 3: the fragment table
        if self.version >= 3:
            if len(idx) < end + 4 + 64:
                raise ObjectCorrupt(f"{idx_path.name}: pack index has the wrong size")
            (self.fragments,) = struct.unpack_from(">I", idx, end)
            self._fids_at = end + 4
            self._floc_at = self._fids_at + 32 * self.fragments
            end = self._floc_at + _FLOC.size * self.fragments
        if len(idx) != end + 64 or self._fan[255] != n:
            raise ObjectCorrupt(f"{idx_path.name}: pack index has the wrong size")
        self.checksum = bytes(idx[end : end + 32])
        self._pack_f = None
        self._pack = None
        self._idx_ok: bool | None = None
        self._looked_up = False
        self._chunks: OrderedDict[int, bytes] = OrderedDict()
        self._fragment_bytes: OrderedDict[int, bytes] = OrderedDict()  # fragment index -> its bytes
        self._fragment_at: dict[bytes, int] = {}  # fragment id -> its index (looked up once)
        self._fragment_cached = 0

    def idx_ok(self) -> bool:
        """Does the index match its checksum? (Computed once; used when a lookup misses.)"""
        if self._idx_ok is None:
            fsio.will_need(self._idx, 0, len(self._idx))
            self._idx_ok = blake3(self._idx[:-32]).digest() == self._idx[-32:]
        return self._idx_ok

    # -- lookup -----------------------------------------------------------------------------

    def _id(self, i: int) -> bytes:
        a = self._ids_at + 32 * i
        return self._idx[a : a + 32]

    def _find(self, raw: bytes) -> int:
        """The index of the id ``raw`` (32 bytes), or -1: bisected within its fan-out range
        down to a run of at most ``_SCAN`` ids, which one ``bytes.find`` scans (in C: a miss,
        the common answer when a store has many packs, costs a few Python steps, not eight)."""
        b = raw[0]
        lo, hi = self._fan[b - 1] if b else 0, self._fan[b]
        if len(raw) != 32:
            return -1
        idx, at = self._idx, self._ids_at
        if not self._looked_up:  # a small index: read whole at once (fsio.map_read)
            self._looked_up = True
            if len(idx) <= fsio.SMALL_MAP:
                fsio.will_need(idx, 0, len(idx))
        while hi - lo > _SCAN:
            mid = (lo + hi) // 2
            a = at + 32 * mid
            v = idx[a : a + 32]
            if v < raw:
                lo = mid + 1
            elif v > raw:
                hi = mid
            else:
                return mid
        if lo >= hi:
            return -1
        run = idx[at + 32 * lo : at + 32 * hi]
        k = run.find(raw)
        while k > 0 and k % 32:  # (bytes of two neighbouring ids: not an id)
            k = run.find(raw, k + 1)
        return lo + k // 32 if k >= 0 else -1

    def contains(self, oid: str) -> bool:
        """True when the pack holds ``oid``."""
        return self._find(bytes.fromhex(oid)) >= 0

    def contains_raw(self, raw: bytes) -> bool:
        """``contains`` of an id already turned into its 32 bytes (one conversion for a
        lookup that probes many packs)."""
        return self._find(raw) >= 0

    def raw_ids(self) -> bytes:
        """Every id, raw (32 bytes each, in id order): the index's id table, read ahead whole."""
        fsio.will_need(self._idx, self._ids_at, 32 * self.count)
        return self._idx[self._ids_at : self._ids_at + 32 * self.count]

    def ids(self) -> Iterator[str]:
        """Every id in the pack, in id order."""
        fsio.will_need(self._idx, self._ids_at, 32 * self.count)
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
        inner = struct.unpack_from(">I", self._idx, self._in_at + 4 * i)[0] if self.version >= 2 else 0
        return off, inner, size

    # -- fragments (version 3) --------------------------------------------------------------

    def _fid(self, i: int) -> bytes:
        a = self._fids_at + 32 * i
        return self._idx[a : a + 32]

    def _fragment_index(self, raw: bytes) -> int:
        i = self._fragment_at.get(raw)
        if i is None:
            i = self._fragment_at[raw] = self._search_fragment(raw)
        return i

    def _search_fragment(self, raw: bytes) -> int:
        return _search(self._fid, 0, self.fragments, raw)

    def _fragment_place(self, i: int) -> tuple[int, int, int]:
        return _FLOC.unpack_from(self._idx, self._floc_at + _FLOC.size * i)

    def fragment_ids(self) -> Iterator[str]:
        """The ids of the texts this pack stores once for its spliced chunks, in id order."""
        for i in range(self.fragments):
            yield self._fid(i).hex()

    def fragment_location(self, fid: str) -> tuple[int, int, int] | None:
        """(chunk offset, offset in the chunk, length) of fragment ``fid``, or None."""
        i = self._fragment_index(bytes.fromhex(fid)) if self.fragments else -1
        return self._fragment_place(i) if i >= 0 else None

    def fragment(self, fid: str) -> bytes | None:
        """The bytes of fragment ``fid`` (verified: they hash to it as a blob would), or None
        when this pack has no such fragment."""
        place = self.fragment_location(fid)
        if place is None:
            return None
        off, inner, n = place
        data = self._chunk(fid, off, inner + n)[inner : inner + n]
        if len(data) != n or fragment_id(data).hex() != fid:
            raise ObjectCorrupt(f"fragment {fid} is corrupt in {self.pack_path.name}", oid=fid)
        return data

    def read(self, oid: str, *, verify: bool = True) -> bytes | None:
        """The bytes of ``oid``, verified against the id, or None if the pack does not hold it.
        ``verify=False``: not re-hashed here, for a caller that hashes them itself (merge
        re-hashes every object it takes, once)."""
        i = self._find(bytes.fromhex(oid))
        if i < 0:
            return None
        off, inner, size = self._where(i)
        chunk = self._chunk(oid, off, inner + size)
        data = chunk[inner : inner + size]
        if len(data) != size or (verify and blake3(data).hexdigest() != oid):
            raise ObjectCorrupt(f"object {oid} is corrupt in {self.pack_path.name}: its bytes hash to another id", oid=oid)
        return data

    def _chunk(self, oid: str, off: int, need: int, depth: int = 0) -> bytes:
        """The uncompressed bytes of the chunk at ``off`` (which must hold at least ``need``),
        with the fragments of a spliced chunk put back (``depth``: how many spliced chunks
        asked for this one)."""
        chunk = self._chunks.get(off)
        if chunk is not None:
            self._chunks.move_to_end(off)
            return chunk
        enc, stored = self._entry(oid, off)
        # A chunk of several objects is under 2 x CHUNK_TARGET; a bigger one holds the one
        # object asked for. A frame claiming more (damage, or a hostile pack) is refused
        # before anything is allocated. A spliced chunk's table adds < 1/16 to its bytes.
        limit = max(2 * CHUNK_TARGET, need)
        if enc > (SPLICED | ZSTD) or (enc & SPLICED and self.version < 3):
            raise ObjectCorrupt(f"object {oid}: unknown encoding {enc} in {self.pack_path.name}", oid=oid)
        if enc & ZSTD:
            cap = limit + limit // 16 if enc & SPLICED else limit
            zstd = _zstd()
            try:
                claimed = zstd.frame_content_size(stored)
                if claimed > cap:
                    raise ValueError(f"the frame claims {claimed} bytes, more than its chunk can hold")
                chunk = zstd.ZstdDecompressor().decompress(stored, max_output_size=cap)
            except Exception as e:
                raise ObjectCorrupt(f"object {oid}: does not decompress in {self.pack_path.name}: {e}", oid=oid) from e
        else:
            chunk = bytes(stored)
        if enc & SPLICED:
            chunk = self._unsplice(oid, off, chunk, limit, depth)
        self._chunks[off] = chunk
        if len(self._chunks) > _CACHED_CHUNKS:
            self._chunks.popitem(last=False)
        return chunk

    def _keep_fragment(self, i: int, piece: bytes) -> None:
        """Keep a fragment's bytes (least recently used dropped past _FRAGMENT_CACHE bytes): a
        popular text is referred to from chunk after chunk, and without this each reference
        would decompress (and reassemble) the chunk that holds it again."""
        self._fragment_bytes[i] = piece
        self._fragment_cached += len(piece)
        while self._fragment_cached > _FRAGMENT_CACHE and len(self._fragment_bytes) > 1:
            self._fragment_cached -= len(self._fragment_bytes.popitem(last=False)[1])

    def _unsplice(self, oid: str, off: int, payload: bytes, limit: int, depth: int) -> bytes:
        """A spliced chunk's bytes: ``u32 n · n × (u32 at · u32 length · fragment id)`` then
        the literal bytes, each fragment put back at ``at`` (in ascending order). A fragment
        lies in an earlier chunk (a smaller offset: no cycle), at most 32 links deep."""
        def bad(why: str) -> ObjectCorrupt:
            return ObjectCorrupt(f"object {oid}: spliced chunk at {off} in {self.pack_path.name}: {why}", oid=oid)

        if depth >= _READ_DEPTH:
            raise bad("its fragments chain too deep")
        if len(payload) < 4:
            raise bad("truncated")
        (n,) = struct.unpack_from(">I", payload)
        lit_at = 4 + _SPLICE.size * n
        if lit_at > len(payload):
            raise bad("truncated")
        lit = memoryview(payload)[lit_at:]
        out = bytearray()
        pos = 0
        for k in range(n):
            at, length, fid = _SPLICE.unpack_from(payload, 4 + _SPLICE.size * k)
            gap = at - len(out)
            if gap < 0 or pos + gap > len(lit) or at + length > limit:
                raise bad("a reference out of place")
            out += lit[pos : pos + gap]
            pos += gap
            i = self._fragment_index(fid)
            if i < 0:
                raise bad(f"fragment {fid.hex()} is not in the index")
            f_off, f_inner, f_len = self._fragment_place(i)
            if f_off >= off or f_len != length:
                raise bad(f"fragment {fid.hex()} is not in an earlier chunk")
            piece = self._fragment_bytes.get(i)
            if piece is None:
                piece = self._chunk(oid, f_off, f_inner + f_len, depth + 1)[f_inner : f_inner + f_len]
                if len(piece) != f_len:
                    raise bad(f"fragment {fid.hex()} runs past its chunk")
                self._keep_fragment(i, piece)
            else:
                self._fragment_bytes.move_to_end(i)
            out += piece
        out += lit[pos:]
        if len(out) > limit:
            raise bad("more bytes than its chunk can hold")
        return bytes(out)

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
        if n > mmap.PAGESIZE:
            fsio.will_need(pack, start, n)
        return enc, pack[start : start + n]

    def ids_in_pack_order(self) -> list[str]:
        """Every id, in the order the objects lie in the pack (reading them in this order
        decompresses each chunk once). The caller reads them all: the index and the pack are
        read ahead whole."""
        fsio.will_need(self._idx, 0, len(self._idx))
        try:
            fsio.will_need(self._open_pack(), 0, len(self._pack))
        except ObjectCorrupt:  # (a missing pack: said by the reads that need it)
            pass
        return [self._id(i).hex() for i in sorted(range(self.count), key=self._where)]

    def _open_pack(self):
        if self._pack is None:
            try:
                self._pack_f = open(self.pack_path, "rb")
            except FileNotFoundError:
                raise ObjectCorrupt(f"{self.pack_path.name} is missing (its index is present)") from None
            self._pack = fsio.map_read(self._pack_f)
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
        self._fragment_bytes.clear()
        self._fragment_cached = 0

    # -- verification (fsck) ----------------------------------------------------------------

    def verify(self, *, objects: bool = True) -> list[str]:
        """Problems with this pack: checksums, entry bounds, and (``objects``) every object's hash."""
        problems = []
        idx = self._idx
        fsio.will_need(idx, 0, len(idx))
        if blake3(idx[:-32]).digest() != idx[-32:]:
            problems.append(f"{self.idx_path.name}: index checksum mismatch")
        try:
            pack = self._open_pack()
        except ObjectCorrupt as e:
            return problems + [e.message]
        fsio.will_need(pack, 0, len(pack))
        if len(pack) < _HDR + 32 or pack[:8] != _PACK_MAGICS[self.version]:
            return problems + [f"{self.pack_path.name}: not a pack (or not the version its index says)"]
        count_at = len(pack) - 36 if self.version >= 2 else 8  # version 2 and 3: the count is in the trailer
        if blake3(pack[:-32]).digest() != pack[-32:]:
            problems.append(f"{self.pack_path.name}: pack checksum mismatch")
        if pack[-32:] != self.checksum:
            problems.append(f"{self.idx_path.name}: names another pack")
        (count,) = struct.unpack_from(">I", pack, count_at)
        if count != self.count:
            problems.append(f"{self.pack_path.name}: {count} objects but the index lists {self.count}")
        for what, key_at, n in (("ids", self._id, self.count), ("fragment ids", self._fid, self.fragments)):
            prev = b""
            for i in range(n):
                raw = key_at(i)
                if raw <= prev:
                    problems.append(f"{self.idx_path.name}: {what} not sorted at {i}")
                prev = raw
        for i in range(self.fragments):
            raw = self._fid(i)
            f_off, _inner, f_len = self._fragment_place(i)
            if f_len < PIECE_MIN or f_off + _ENTRY.size > len(pack) - 36:
                problems.append(f"{self.idx_path.name}: fragment {raw.hex()} is out of place")
        if objects:
            for oid in self.ids_in_pack_order():
                try:
                    self.read(oid)
                except ObjectCorrupt as e:
                    problems.append(e.message)
            for fid in self.fragment_ids():  # each fragment's bytes hash to its id
                try:
                    self.fragment(fid)
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
        # Splicing: where each long string or piece was first seen (chunk offset, offset in
        # the chunk, length), the ones spliced chunks refer to (the idx's fragment table),
        # each spliced chunk's depth, and the open chunk's references (at, length, id).
        self._first: dict[bytes, tuple[int, int, int]] = {}  # keyed by BLAKE3 of the bytes
        self._fid_of: dict[bytes, bytes] = {}  # that key -> fragment id, once spliced
        self._fragments: dict[bytes, tuple[int, int, int]] = {}
        self._depth: dict[int, int] = {}
        self._splices: list[tuple[int, int, bytes]] = []
        self._open_depth = 0
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
        if len(data) > FRAGMENT_MIN:
            self._splice_strings(data)
        self._buf.append(data)
        self._fill += len(data)
        if self._fill >= CHUNK_TARGET:
            self._flush()

    def _write(self, b: bytes) -> None:
        self._f.write(b)
        self._h.update(b)
        self._off += len(b)

    def _splice_strings(self, data: bytes) -> None:
        """Note the long strings of an object about to join the open chunk: one an earlier
        chunk already holds becomes a reference to it (within the open chunk, zstd finds the
        repeat on its own), and so does each piece of it that one holds (_pieces: a document
        pasted amid other words); a new one is remembered where it is."""
        base, end = self._fill, 0
        for start, n in _long_strings(data):
            if start < end:
                continue  # a header byte inside a string just spliced
            if self._splice(data, start, n, base):
                end = start + n
                continue
            if n < 2 * PIECE_MIN:
                continue  # one piece: the string itself
            for ps, pn in _pieces(data, start, n):
                if ps >= end and pn != n and self._splice(data, ps, pn, base):
                    end = ps + pn

    def _splice(self, data: bytes, start: int, n: int, base: int) -> bool:
        """Make ``data[start:start+n]`` a reference when an earlier chunk holds those bytes
        (and the chain stays short); else remember where it was first seen. True if spliced.
        (Seen texts are keyed by the BLAKE3 of their bytes; the fragment id, which hashes
        the blob form, is computed only for a text that is spliced.)"""
        piece = data[start : start + n]
        key = blake3(piece).digest()
        first = self._first.get(key)
        if first is None:
            self._first[key] = (self._off, base + start, n)
            return False
        depth = self._depth.get(first[0], 0)
        if first[0] >= self._off or depth >= _SPLICE_DEPTH:
            return False  # in this chunk (zstd sees it), or a chain too long
        fid = self._fid_of.get(key)
        if fid is None:
            fid = self._fid_of[key] = fragment_id(piece)
            self._fragments[fid] = first
        self._splices.append((base + start, n, fid))
        self._open_depth = max(self._open_depth, depth + 1)
        return True

    def _flush(self) -> None:
        raw = b"".join(self._buf)
        kind, payload = RAW, raw
        if self._splices:
            kind = SPLICED
            pieces = [struct.pack(">I", len(self._splices))]
            pieces += [_SPLICE.pack(at, n, fid) for at, n, fid in self._splices]
            pos = 0
            for at, n, _fid in self._splices:
                pieces.append(raw[pos:at])
                pos = at + n
            pieces.append(raw[pos:])
            payload = b"".join(pieces)
            self._depth[self._off] = self._open_depth
        enc, stored = kind, payload
        if self._cctx is not None and len(payload) > 64:
            z = self._cctx.compress(payload)
            if len(z) < len(payload):
                enc, stored = kind | ZSTD, z
        self._write(_ENTRY.pack(enc, len(stored)) + stored)
        self._buf.clear()
        self._fill = 0
        self._splices = []
        self._open_depth = 0

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
        fids = sorted(self._fragments)
        parts.append(struct.pack(">I", len(fids)))
        parts.append(b"".join(fids))
        parts.append(b"".join(_FLOC.pack(*self._fragments[f]) for f in fids))
        parts.append(checksum)
        idx = b"".join(parts)
        idx += blake3(idx).digest()
        final_idx = self.pack_dir / f"{name}.idx"
        fsio.replace_file(final_idx, idx, fsync=self.fsync)  # fsyncs the directory (both renames)
        return final_idx

    def abort(self) -> None:
        """Give up the pack being written (its temporary file is removed)."""
        self._f.abort()
