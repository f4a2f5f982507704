"""Sizing one thread's packed reflog (``PackedLogsReader.head``: what the index's tail offset
needs on every commit) walks its chunk's entry headers instead of parsing the chunk. The
walk must give exactly the answers the parse gives (``parse_chunk``, the path it replaces):
for many random reflogs, at chunk edges, for oversized entries, for absent names, and for
damaged chunks (the same answer, or the same error)."""

from __future__ import annotations

import random

import pytest
import zstandard
from blake3 import blake3

from convgit.errors import ObjectCorrupt
from convgit.packedlogs import (CHUNK_BYTES, MAGIC, TRAILER, PackedLog, PackedLogsReader, format_packed_logs,
                                parse_chunk, walk_heads)
from convgit.refformat import format_reflog_line

ALPHABET = "abcz019-_./äé€"


def reader(data: bytes) -> PackedLogsReader:
    return PackedLogsReader(lambda o, n: data[o:o + n], len(data))


def parsed_head(r: PackedLogsReader, name: str):
    """The answer of the path ``head`` replaces: the chunk parsed whole (``get``)."""
    e = r.get(name)
    return None if e is None else (len(e.data), PackedLog(e.name, b"", e.ino, e.absorbed, e.digest))


def random_name(rng: random.Random) -> str:
    while True:
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12)))
        parts = s.split("/")
        if all(p and not p.startswith(".") and not p.startswith("-") for p in parts) and ".." not in s \
                and not s.endswith(".") and not s.startswith("-"):
            return s


def random_log(rng: random.Random) -> bytes:
    # mostly a few lines; sometimes more than a chunk holds (an oversized entry: a chunk of its own)
    lines = rng.choice([1, 1, 2, 3, 8, 40, CHUNK_BYTES // 150])
    return "".join(format_reflog_line(None if k == 0 else f"{rng.getrandbits(256):064x}",
                                      f"{rng.getrandbits(256):064x}", rng.getrandbits(44),
                                      rng.choice([None, f"{rng.getrandbits(256):064x}"]),
                                      rng.choice(["commit: 1 new message(s)", "fork: from a at 1234567", "x = a 1 2 - 9"]))
                   for k in range(lines)).encode()


@pytest.mark.parametrize("seed", range(6))
def test_the_header_walk_sizes_every_packed_reflog_as_the_parse_does(seed):
    rng = random.Random(seed)
    names = sorted({random_name(rng) for _ in range(rng.choice([5, 300, 900]))}, key=str.encode)
    logs = []
    big = rng.randrange(len(names))
    for k, n in enumerate(names):
        marker = rng.choice([(0, 0, "-"), (rng.getrandbits(40) + 1, rng.randint(0, 900), f"{rng.getrandbits(128):032x}")])
        text = random_log(rng)
        while k == big and len(text) <= CHUNK_BYTES:  # at least one entry longer than a chunk
            text += random_log(rng)
        logs.append(PackedLog(n, text, *marker))
    data = format_packed_logs(logs)
    walked = reader(data)
    assert len(walked.chunks) > (1 if len(names) > 5 else 0)  # (chunk edges: the names at them are asked for below)
    absent = {n + s for n in names for s in ("-", "0", "a")} - set(names)
    asked = list(names) + sorted(absent) + ["", "\x00", "~"]
    rng.shuffle(asked)
    want = {e.name: (len(e.data), PackedLog(e.name, b"", e.ino, e.absorbed, e.digest)) for e in logs}
    for name in asked:
        assert walked.head(name) == want.get(name), name
        assert walked.head(name) == want.get(name)  # (remembered)
    parsed = reader(data)
    for name in asked:
        assert parsed_head(parsed, name) == want.get(name)
    assert walked._cache == {}  # no chunk was parsed (nor kept) to size a log


def test_a_head_asked_after_its_chunk_was_parsed_and_before_are_the_same():
    rng = random.Random(7)
    logs = [PackedLog(f"t{i:04d}", random_log(rng), i, i, f"{i:032x}") for i in range(700)]
    data = format_packed_logs(logs)
    a, b = reader(data), reader(data)
    for e in logs[::3]:
        a.get(e.name)  # chunks parsed first
    for e in logs:
        assert a.head(e.name) == b.head(e.name) == (len(e.data), PackedLog(e.name, b"", e.ino, e.absorbed, e.digest))
    for e in logs[1::5]:
        assert b.get(e.name) == e  # and parsed after the walk: the same entries
        assert b.head(e.name + "x") is None


def one_chunk_file(text: bytes, first: str, last: str, count: int = 1) -> bytes:
    """A ``packed-logs`` file of one chunk holding ``text`` as it is (a damaged one, here)."""
    c = zstandard.ZstdCompressor(write_checksum=True)
    out = bytearray(MAGIC)
    frame = c.compress(text)
    directory = f"{len(out)} {len(frame)} {count} {first} {last}\n".encode()
    out += frame
    dir_frame = c.compress(directory)
    off = len(out)
    out += dir_frame
    tr = TRAILER.pack(off, len(dir_frame), count, b"\0" * 32)[:16]
    return bytes(out + tr + blake3(bytes(out) + tr).digest())


LINE = format_reflog_line(None, "a" * 64, 1, None, "commit").encode()


def entry(name: bytes, data: bytes = LINE, ino: bytes = b"0", absorbed: bytes = b"0", n: bytes | None = None) -> bytes:
    return b"= %s %s %s - %s\n" % (name, ino, absorbed, str(len(data)).encode() if n is None else n) + data


DAMAGED = {
    "sound": entry(b"a") + entry(b"b") + entry(b"c"),
    "a name twice (the last wins)": entry(b"a") + entry(b"b", LINE * 2, b"5") + entry(b"b", LINE, b"9"),
    "cut short": entry(b"a") + entry(b"b") + entry(b"c")[:-3],
    "a length that is not a number": entry(b"a") + entry(b"b", n=b"x7") + entry(b"c"),
    "a length longer than the chunk": entry(b"a") + entry(b"b", n=b"99999") + entry(b"c"),
    "no header": entry(b"a") + b"junk\n" + entry(b"c"),
    "no newline at all": entry(b"a") + b"= c 0 0 - 5",
    "a sixth field": entry(b"a") + b"= b 0 0 - x 3\nabc" + entry(b"c"),
    "an empty field": entry(b"a") + b"= b  0 - 3\nabc" + entry(b"c"),
    "no space after the =": entry(b"a") + b"=b 0 0 - 3\nabc" + entry(b"c"),
    "a space before the =": entry(b"a") + b" = b 0 0 - 3\nabc" + entry(b"c"),
    "a non-ASCII digit number is read by the parse": entry(b"a") + entry(b"b", ino="٣".encode()) + entry(b"c"),
    "a superscript digit": entry(b"a") + entry(b"b", absorbed="²".encode()) + entry(b"c"),
    "a name not UTF-8": entry(b"a") + entry(b"b\xff") + entry(b"c"),
    "a non-ASCII name": entry(b"a") + entry("b€".encode()) + entry(b"c"),
    "an entry not ending in a newline": entry(b"a", b"xyz") + entry(b"b") + entry(b"c"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_chunk_gives_the_walk_the_answer_or_the_error_the_parse_gives(case):
    text = DAMAGED[case]
    data = one_chunk_file(text, "a", "c")
    for name in ("a", "b", "c", "b\ufffd", "b€", "bb"):
        try:
            want = parsed_head(reader(data), name)
        except Exception as e:  # noqa: BLE001  (the parse's error, whatever it is)
            with pytest.raises(type(e)):
                reader(data).head(name)
        else:
            assert reader(data).head(name) == want, (case, name)


def test_the_walk_hands_a_chunk_it_cannot_walk_to_the_parse():
    assert list(walk_heads(DAMAGED["sound"])) == [b"a", b"b", b"c"]
    assert walk_heads(DAMAGED["a name twice (the last wins)"])[b"b"][2] == b"9"
    assert list(walk_heads(DAMAGED["a name not UTF-8"])) == [b"a", "b\ufffd".encode(), b"c"]  # (as the parse names it)
    for case in ("cut short", "a length that is not a number", "a length longer than the chunk", "no header",
                 "no newline at all", "a sixth field", "an empty field", "no space after the =",
                 "a space before the =", "a non-ASCII digit number is read by the parse", "a superscript digit"):
        assert walk_heads(DAMAGED[case]) is None, case
    with pytest.raises(ObjectCorrupt):
        reader(one_chunk_file(DAMAGED["cut short"], "a", "c")).head("a")
