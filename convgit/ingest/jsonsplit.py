"""Stream a top-level JSON array: yield each element's bytes without decoding the whole file.

A ChatGPT ``conversations.json`` is one array of hundreds of MB, often on one line. msgspec
decodes whole documents only, so this splitter finds where each top-level element ends and
hands its bytes to the strict decoder: memory stays bounded by the largest element, and an
element that is malformed inside (a NaN, a lone surrogate, bad UTF-8 in a string) is reported
on its own while the others import.

Two ways to find an element's end. Fast: msgspec validates the element into a ``Raw`` value
(no objects built) and reports where the trailing data starts. Fallback, for an element
msgspec rejects or that is too big to buffer again and again: a structural scanner. It only
tracks brackets: strings (with their escapes) are skipped whole by one regular expression,
so brackets inside strings never count.
"""

from __future__ import annotations

import re
from typing import BinaryIO, Iterator

import msgspec

from ..errors import InvalidInput

_RAW = msgspec.json.Decoder(msgspec.Raw)
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_FAST_LIMIT = 8 << 20  # past this many buffered bytes of one element, scan it instead

# Everything up to and including the next bracket outside a string. Possessive quantifiers:
# no backtracking, so a string cut at the end of the buffer simply fails to match.
_TO_BRACKET = re.compile(rb'(?:[^"\[\]{}]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")*+([\[\]{}])', re.S)
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.S)
_SCALAR = re.compile(rb"[^,\]\s]++")
_WS = re.compile(rb"[ \t\r\n]*+")

CHUNK = 1 << 20


class _Buf:
    def __init__(self, f: BinaryIO, chunk: int) -> None:
        self.f = f
        self.chunk = chunk
        self.data = b""
        self.pos = 0
        self.base = 0  # file offset of data[0]
        self.keep = 0  # data before this is done with (the current element starts here)
        self.eof = False

    def more(self) -> bool:
        if self.eof:
            return False
        block = self.f.read(self.chunk)
        if not block:
            self.eof = True
            return False
        cut = self.keep
        if cut > (1 << 20) and cut > len(self.data) // 2:
            self.base += cut
            self.data = self.data[cut:]
            self.pos -= cut
            self.keep = 0
        self.data += block
        return True

    def skip_ws(self) -> bool:
        """Skip whitespace; False at the end of input."""
        while True:
            self.pos = _WS.match(self.data, self.pos).end()
            if self.pos < len(self.data):
                return True
            if not self.more():
                return False

    def peek(self) -> bytes:
        return self.data[self.pos : self.pos + 1]


def iter_array(f: BinaryIO, *, chunk: int = CHUNK) -> Iterator[tuple[int, bytes]]:
    """(file offset, bytes) of each element of the JSON array ``f`` holds.

    Raises InvalidInput if the input is not an array or its structure is broken (an element
    that never ends, garbage between elements or after the array).
    """
    b = _Buf(f, chunk)
    if not b.skip_ws() or b.peek() != b"[":
        raise InvalidInput("not a JSON array")
    b.pos += 1
    if not b.skip_ws():
        raise InvalidInput("truncated JSON array")
    if b.peek() == b"]":
        b.pos += 1
        _expect_end(b)
        return
    index = 0
    while True:
        b.keep = b.pos
        _element_end(b, index)
        yield b.base + b.keep, b.data[b.keep : b.pos]
        index += 1
        if not b.skip_ws():
            raise InvalidInput(f"truncated JSON array after element {index}")
        c = b.peek()
        b.pos += 1
        if c == b"]":
            _expect_end(b)
            return
        if c != b",":
            raise InvalidInput(f"unexpected {c!r} after element {index} of the JSON array (at byte {b.base + b.pos - 1})")
        if not b.skip_ws():
            raise InvalidInput(f"truncated JSON array after element {index}")


def _element_end(b: _Buf, index: int) -> None:
    while True:
        try:
            _RAW.decode(memoryview(b.data)[b.pos:])
        except msgspec.DecodeError as e:
            m = _TRAILING.search(str(e))
            if m is not None:
                b.pos += int(m.group(1)) - 1  # msgspec counts the first trailing byte from 1
                return
            if "truncated" not in str(e) or len(b.data) - b.pos > _FAST_LIMIT:
                break  # malformed inside (or huge): let the scanner find its end
        else:
            if b.eof:
                b.pos = len(b.data)
                return
        if not b.more():
            break
    _scan_end(b, index)


def _scan_end(b: _Buf, index: int) -> None:
    c = b.peek()
    if c in (b"{", b"["):
        depth = 0
        while True:
            m = _TO_BRACKET.match(b.data, b.pos)
            if m is None:
                if not b.more():
                    raise InvalidInput(f"truncated JSON: element {index} of the array never ends")
                continue
            depth += 1 if m.group(1) in b"[{" else -1
            b.pos = m.end()
            if depth == 0:
                return
    pattern = _STRING if c == b'"' else _SCALAR
    while True:
        m = pattern.match(b.data, b.pos)
        if m is not None and (m.end() < len(b.data) or b.eof):
            b.pos = m.end()
            return
        if not b.more():
            if m is not None:
                b.pos = m.end()
                return
            raise InvalidInput(f"truncated JSON: element {index} of the array never ends")


def _expect_end(b: _Buf) -> None:
    if b.skip_ws():
        raise InvalidInput(f"trailing data after the JSON array (at byte {b.base + b.pos})")
