"""``packed-logs``: many threads' reflogs in one compressed file (docs/format.md §4.2).

A loose reflog costs a file system block (4 KiB) for a few hundred bytes of text; packed,
the reflogs of thousands of threads share one file, compressed in chunks, with a small
directory so that one thread's log is found by reading the directory and one chunk (never
the whole file). Parsed and written here without I/O of their own (the reader is given a
function that reads bytes at an offset); ``convgit.refs`` reads and writes the file.

A thread's reflog is its packed text followed by its loose file (``logs/refs/threads/<name>``),
except the loose file's first ``absorbed`` bytes when the packed entry says it absorbed that
very file (same inode, same bytes by digest): what a packing cut short between its rename and
its unlinks leaves, read once, never twice.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from blake3 import blake3

from .errors import InvalidRefName, ObjectCorrupt
from .ids import check_thread_name

PACKED_LOGS = "packed-logs"
MAGIC = b"CGLOGS\x00\x01"
TRAILER = struct.Struct(">QII32s")  # directory offset, directory length, threads, BLAKE3 of all before
CHUNK_THREADS = 256  # threads per chunk (at most)
CHUNK_BYTES = 64 * 1024  # uncompressed bytes per chunk (at most, but for one long log)
CACHE_BYTES = 16 * 1024 * 1024  # decompressed chunks a reader keeps parsed (at most, but for one long log)
LEVEL = 3  # zstd level: on reflog text it packs as small as 9 (and 19 saves ~5%), ~7x faster


@dataclass(frozen=True)
class PackedLog:
    """One thread's packed reflog: its lines (bytes, as in a loose reflog file), and the loose
    file it absorbed last (``ino`` 0: none), of which ``absorbed`` bytes with ``digest``."""

    name: str
    data: bytes
    ino: int = 0
    absorbed: int = 0
    digest: str = "-"


def digest(data: bytes) -> str:
    """The digest an absorbed marker records: 32 hex of BLAKE3."""
    return blake3(data).hexdigest()[:32]


def absorbed_skip(log: PackedLog | None, ino: int | None, loose: bytes) -> int:
    """How many leading bytes of the loose reflog ``loose`` (inode ``ino``) its packed entry
    already holds: ``log.absorbed`` when that entry absorbed this very file, else 0."""
    if log is None or not log.ino or ino != log.ino or len(loose) < log.absorbed:
        return 0
    return log.absorbed if digest(loose[:log.absorbed]) == log.digest else 0


def format_packed_logs(logs: Iterable[PackedLog]) -> bytes:
    """The bytes of a ``packed-logs`` file holding ``logs`` (sorted by name here)."""
    return rewrite_packed_logs(None, {e.name: e for e in logs})


def rewrite_packed_logs(old: "PackedLogsReader | None", changes: dict[str, "PackedLog | None"]) -> bytes:
    """The bytes of ``old`` (a reader, or None for an empty file) with ``changes`` made
    (name -> its new entry, or None to take it out). A chunk of ``old`` that no change
    falls in is copied as it is, compressed (a packing of a few hundred loose reflogs into
    100,000 packed ones recompresses only the chunks they land in)."""
    import zstandard  # (only when packing or reading packed reflogs: start-up stays light)

    cctx = zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)
    out = bytearray(MAGIC)
    directory: list[str] = []
    chunk: list[bytes] = []
    names: list[str] = []
    size = count = 0

    def flush() -> None:
        nonlocal size
        if not names:
            return
        frame = cctx.compress(b"".join(chunk))
        directory.append(f"{len(out)} {len(frame)} {len(names)} {names[0]} {names[-1]}\n")
        out.extend(frame)
        chunk.clear()
        names.clear()
        size = 0

    def add(log: PackedLog) -> None:
        nonlocal size, count
        if not log.data:
            return
        head = f"= {log.name} {log.ino} {log.absorbed} {log.digest} {len(log.data)}\n".encode()
        if names and (len(names) >= CHUNK_THREADS or size + len(head) + len(log.data) > CHUNK_BYTES):
            flush()
        chunk.extend((head, log.data))
        names.append(log.name)
        size += len(head) + len(log.data)
        count += 1

    todo = sorted(changes, key=str.encode)  # the changed names, in file order
    k = 0
    chunks = old.chunks if old is not None else []
    for i, (off, length, n_entries, first, last) in enumerate(chunks):
        nxt = chunks[i + 1][3].encode() if i + 1 < len(chunks) else None
        mine = []  # the changes that land in this chunk (or before the next one)
        while k < len(todo) and (nxt is None or todo[k].encode() < nxt):
            mine.append(todo[k])
            k += 1
        if not mine:
            frame = old._read_at(off, length)  # untouched: copied as it is
            directory.append(f"{len(out)} {len(frame)} {n_entries} {first} {last}\n")
            out.extend(frame)
            count += n_entries
            continue
        entries = dict(old._chunk(i, check_names=True))
        for n in mine:
            if changes[n] is None:
                entries.pop(n, None)
            else:
                entries[n] = changes[n]  # type: ignore[assignment]
        for n in sorted(entries, key=str.encode):
            add(entries[n])
        flush()  # the next chunk may be copied as it is
    for n in todo[k:]:
        if changes[n] is not None:
            add(changes[n])
    flush()
    dir_frame = cctx.compress("".join(directory).encode())
    dir_offset = len(out)
    out.extend(dir_frame)
    trailer = TRAILER.pack(dir_offset, len(dir_frame), count, b"\0" * 32)
    sum_ = blake3(bytes(out) + trailer[:16]).digest()
    out.extend(trailer[:16] + sum_)
    return bytes(out)


def _corrupt(why: str) -> ObjectCorrupt:
    return ObjectCorrupt(f"{PACKED_LOGS} is corrupt: {why} (run convgit fsck)")


def parse_chunk(text: bytes, *, check_names: bool = True) -> list[PackedLog]:
    """The entries of one decompressed chunk, in order. ``check_names``: each thread name is
    checked as a ref name (§5; a reader looking one thread up by its own, valid, name leaves
    that to whoever lists them: ``_check_names``)."""
    out = []
    pos = 0
    while pos < len(text):
        end = text.find(b"\n", pos)
        if end < 0 or text[pos:pos + 2] != b"= ":
            raise _corrupt("a chunk entry has no header")
        f = text[pos + 2:end].decode("utf-8", "replace").split(" ")
        if len(f) != 5 or not all(x.isdigit() for x in (f[1], f[2], f[4])):
            raise _corrupt("a chunk entry header does not parse")
        if check_names:
            _check_names((f[0],))
        n = int(f[4])
        data = text[end + 1:end + 1 + n]
        if len(data) != n:
            raise _corrupt("a chunk entry is cut short")
        out.append(PackedLog(f[0], data, int(f[1]), int(f[2]), f[3]))
        pos = end + 1 + n
    return out


def walk_heads(text: bytes) -> dict[bytes, list[bytes]] | None:
    """The entry headers of one decompressed chunk, name (its bytes) -> the header split on
    spaces (bytes: ``=``, name, ino, absorbed, digest, length), or None when a header is not
    plainly sound (no header, one that does not split in five, a length or number that is
    not ASCII digits, an entry cut short): then ``parse_chunk`` is the one to read it (it
    raises, or answers as it always did). The headers are walked, each entry skipped by the
    length its header gives, none of them copied out or parsed: what sizing one thread's
    packed reflog needs (``PackedLogsReader.head``), at a fraction of ``parse_chunk``'s
    cost. Of two entries for one name (a damaged chunk) the last is kept, as there; a name
    that is not ASCII is keyed as ``parse_chunk`` reads it (UTF-8, errors replaced)."""
    find = text.find
    size = len(text)
    pos = 0
    heads: dict[bytes, list[bytes]] = {}
    ascii_names = text.isascii()  # (one check for the chunk, not one per name)
    while pos < size:
        end = find(b"\n", pos)
        f = text[pos:end].split(b" ")  # "=", then the five fields
        if end < 0 or len(f) != 6 or f[0] != b"=" or not (f[2].isdigit() and f[3].isdigit() and f[5].isdigit()):
            return None
        pos = end + 1 + int(f[5])
        if pos > size:
            return None
        heads[f[1] if ascii_names or f[1].isascii() else f[1].decode("utf-8", "replace").encode()] = f
    return heads


def _check_names(names: Iterable[str]) -> None:
    for name in names:
        try:
            check_thread_name(name)
        except InvalidRefName:
            raise _corrupt("a chunk entry names an invalid thread") from None


_UNKNOWN = object()


class PackedLogsReader:
    """One ``packed-logs`` file: its directory read on creation, a chunk read (and kept, the
    last few) when a thread in it is asked for. ``read_at(offset, length)`` reads the file."""

    def __init__(self, read_at: Callable[[int, int], bytes], size: int, close: Callable[[], None] | None = None) -> None:
        import zstandard

        self._close = close  # called when the reader goes (its open file, kept while it is used)

        self._zstd = zstandard
        self._read_at = read_at
        self._cache: dict[int, dict[str, PackedLog]] = {}
        self._cache_sizes: dict[int, int] = {}  # chunk -> its decompressed bytes
        self._cached_bytes = 0
        if size < len(MAGIC) + TRAILER.size or read_at(0, len(MAGIC)) != MAGIC:
            raise _corrupt("no packed-logs header")
        tr = read_at(size - TRAILER.size, TRAILER.size)
        off, length, self.count, _ = TRAILER.unpack(tr)
        if off + length > size - TRAILER.size or off < len(MAGIC):
            raise _corrupt("its trailer points outside the file")
        try:
            text = zstandard.ZstdDecompressor().decompress(read_at(off, length)).decode("utf-8")
        except (zstandard.ZstdError, UnicodeDecodeError) as e:
            raise _corrupt(f"its directory does not decompress ({e})") from None
        self.chunks: list[tuple[int, int, int, str, str]] = []  # (offset, length, threads, first, last)
        for line in text.splitlines():
            f = line.split(" ")
            if len(f) != 5 or not all(x.isdigit() for x in f[:3]):
                raise _corrupt("a directory line does not parse")
            self.chunks.append((int(f[0]), int(f[1]), int(f[2]), f[3], f[4]))
        self._firsts = [c[3].encode() for c in self.chunks]
        # name -> (text length, its entry without the text) of every entry of a chunk read so
        # far, kept when the chunk's text is dropped: sizing a thread's log needs no chunk again.
        self._heads: dict[str, tuple[int, PackedLog] | None] = {}
        # Chunks whose headers were walked (head), and the headers walked not yet asked for.
        self._walked: set[int] = set()
        self._raw_heads: dict[bytes, list[bytes]] = {}

    def __del__(self) -> None:
        close, self._close = getattr(self, "_close", None), None
        if close is not None:
            close()

    def _chunk(self, i: int, *, check_names: bool = False) -> dict[str, PackedLog]:
        """Chunk ``i``, name -> entry (kept by size). Its names are checked only with
        ``check_names`` (listing, fsck): one thread looked up by name (a commit's reflog tail,
        at 100,000 threads a chunk of ~230) does not pay a name check for each of the others."""
        got = self._cache.get(i)
        if got is not None:
            if check_names:
                _check_names(got)
            return got
        text = self._text(i)
        got = {e.name: e for e in parse_chunk(text, check_names=check_names)}
        for e in got.values():
            self._heads[e.name] = (len(e.data), PackedLog(e.name, b"", e.ino, e.absorbed, e.digest))
        self._walked.add(i)  # (its heads are all known: head need not walk it)
        # Kept by size, not count: a bulk creation looks up names in every chunk, then
        # rewrites every chunk it touched (random conversation ids touch them all), and
        # with a few chunks kept it parsed each twice.
        while self._cache and self._cached_bytes + len(text) > CACHE_BYTES:
            k = next(iter(self._cache))
            del self._cache[k]
            self._cached_bytes -= self._cache_sizes.pop(k)
        self._cache[i] = got
        self._cache_sizes[i] = len(text)
        self._cached_bytes += len(text)
        return got

    def _text(self, i: int) -> bytes:
        """Chunk ``i`` decompressed (neither parsed nor kept)."""
        off, length = self.chunks[i][:2]
        try:
            return self._zstd.ZstdDecompressor().decompress(self._read_at(off, length))
        except self._zstd.ZstdError as e:
            raise _corrupt(f"chunk {i} does not decompress ({e})") from None

    def _chunk_of(self, name: str) -> int:
        """The chunk whose names span ``name`` (by the directory), or -1."""
        key = name.encode()
        i = bisect.bisect_right(self._firsts, key) - 1
        if i < 0 or key > self.chunks[i][4].encode():
            return -1
        return i

    def get(self, name: str) -> PackedLog | None:
        """The packed reflog of thread ``name``, or None."""
        i = self._chunk_of(name)
        return self._chunk(i).get(name) if i >= 0 else None

    def head(self, name: str) -> tuple[int, PackedLog] | None:
        """(length of the packed text, the entry with its text left out) of thread ``name``,
        or None. Its chunk's headers are walked once per reader (``walk_heads``: no entry is
        split off, the chunk is not kept) and remembered; a chunk whose headers are not
        plainly sound is parsed whole instead (``parse_chunk``: the same answers)."""
        got = self._heads.get(name, _UNKNOWN)
        if got is _UNKNOWN:
            i = self._chunk_of(name)
            if i >= 0 and i not in self._walked:
                walked = walk_heads(self._text(i))
                if walked is None:
                    self._chunk(i)  # (raises, or puts each of its heads in _heads)
                else:
                    self._raw_heads.update(walked)
                    self._walked.add(i)
            got = self._heads.get(name, _UNKNOWN)
            if got is _UNKNOWN:
                f = self._raw_heads.pop(name.encode(), None) if i >= 0 else None
                got = None if f is None else (int(f[5]), PackedLog(name, b"", int(f[2]), int(f[3]),
                                                                  f[4].decode("utf-8", "replace")))
                self._heads[name] = got
        return got  # type: ignore[return-value]

    def __iter__(self) -> Iterator[PackedLog]:
        for i in range(len(self.chunks)):
            yield from self._chunk(i, check_names=True).values()

    def names(self) -> list[str]:
        """Every thread with a packed reflog (reads every chunk)."""
        return [e.name for e in self]


def verify(data: bytes) -> list[str]:
    """What is wrong with the bytes of a ``packed-logs`` file (fsck): its checksum, every
    chunk (decompressed, parsed, in name order, each thread once), the count. Empty: sound."""
    try:
        r = PackedLogsReader(lambda o, n: data[o:o + n], len(data))
    except ObjectCorrupt as e:
        return [e.message]
    problems = []
    if blake3(data[:-32]).digest() != data[-32:]:
        problems.append(f"{PACKED_LOGS}: its checksum does not match its content")
    seen: list[str] = []
    try:
        for i, (_, _, n, first, last) in enumerate(r.chunks):
            names = list(r._chunk(i, check_names=True))
            if not names or names[0] != first or names[-1] != last or len(names) != n:
                problems.append(f"{PACKED_LOGS}: chunk {i} does not hold the names its directory says")
            seen += names
    except ObjectCorrupt as e:
        return problems + [e.message]
    if [n.encode() for n in seen] != sorted({n.encode() for n in seen}):
        problems.append(f"{PACKED_LOGS}: threads out of order or listed twice")
    if len(seen) != r.count:
        problems.append(f"{PACKED_LOGS}: {len(seen)} threads, its trailer says {r.count}")
    return problems
