"""Stream a top-level JSON array: yield each element's bytes without decoding the whole file.

A ChatGPT ``conversations.json`` is one array of hundreds of MB, often on one line. msgspec
decodes whole documents only, so this splitter finds where each top-level element ends and
hands its bytes to the strict decoder: memory stays bounded by the largest element (about
twice its size: the buffer and the copy handed out), and an element that is malformed inside
(a NaN, a lone surrogate, bad UTF-8 in a string) is reported on its own while the others
import. An element longer than ``max_element`` is not buffered at all: it is scanned to its
end and reported as ``Skipped`` (so a limit is enforced in bounded memory).

Two ways to find an element's end. Fast: msgspec validates the element into a ``Raw`` value
(no objects built) and reports where the trailing data starts; it is retried only each time
the buffered part of the element has doubled, up to ``_FAST_LIMIT``. Past that (or for an
element msgspec rejects): a structural scanner that only tracks brackets, skipping strings
(with their escapes) by regular expression so brackets inside strings never count. The
scanner is resumable: when the buffer ends inside a string or between tokens it keeps its
position, depth and whether it is in a string, and carries on from there once more input
has arrived. Work is linear in the input even for one element of hundreds of MB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import BinaryIO, Iterator

import msgspec

from ..errors import InvalidInput

_RAW = msgspec.json.Decoder(msgspec.Raw)
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_FAST_LIMIT = 8 << 20  # past this many buffered bytes of one element, scan it instead

# Outside strings: everything up to the next bracket or the start of a string that does not
# end inside the buffer. Possessive quantifiers: no backtracking, and the match always
# succeeds, so the scanner never re-reads what it has passed.
_OUTSIDE = re.compile(rb'(?:[^"\[\]{}]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")*+', re.S)
# Inside a string (after its opening quote): up to the closing quote, or up to the end of the
# buffer (stopping before a backslash whose escaped byte has not arrived yet).
_IN_STRING = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.S)
_SCALAR = re.compile(rb"[^,\]\s]*+")
_WS = re.compile(rb"[ \t\r\n]*+")

CHUNK = 1 << 20
_COMPACT = 1 << 20  # drop consumed input once this much (and half the buffer) is done with


@dataclass(frozen=True)
class Skipped:
    """An element longer than ``max_element``: scanned to its end, never buffered."""

    size: int


class _Buf:
    def __init__(self, f: BinaryIO, chunk: int) -> None:
        self.f = f
        self.chunk = chunk
        self.data = bytearray()
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
        if cut > _COMPACT and cut > len(self.data) // 2:
            del self.data[:cut]
            self.base += cut
            self.pos -= cut
            self.keep = 0
        self.data += block  # in place: amortised linear, unlike bytes concatenation
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
        return bytes(self.data[self.pos : self.pos + 1])


def iter_array(f: BinaryIO, *, chunk: int | None = None,
               max_element: int | None = None) -> Iterator[tuple[int, bytes | Skipped]]:
    """(file offset, bytes) of each element of the JSON array ``f`` holds; an element longer
    than ``max_element`` bytes comes as (offset, ``Skipped(size)``) instead.

    Raises InvalidInput if the input is not an array or its structure is broken (an element
    that never ends, garbage between elements or after the array).
    """
    b = _Buf(f, chunk or CHUNK)
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
        start = b.base + b.pos
        if _element_end(b, index, max_element):
            element = bytes(memoryview(b.data)[b.keep : b.pos])
            if len(element) > _COMPACT:  # free the buffer's copy now, not at the next read
                b.data = bytearray(memoryview(b.data)[b.pos :])
                b.base += b.pos
                b.pos = b.keep = 0
            yield start, element
            del element
        else:
            b.keep = b.pos
            yield start, Skipped(b.base + b.pos - start)
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


def _element_end(b: _Buf, index: int, max_element: int | None) -> bool:
    """Move ``b.pos`` to the end of the element starting there; False if it was longer than
    ``max_element`` (and so was not kept in the buffer)."""
    fast_limit = _FAST_LIMIT if max_element is None else min(_FAST_LIMIT, max_element)
    tried = 0  # buffered bytes of the element at the last fast attempt
    while len(b.data) - b.pos <= fast_limit:
        if len(b.data) - b.pos >= 2 * tried or b.eof:
            tried = len(b.data) - b.pos
            try:
                _RAW.decode(memoryview(b.data)[b.pos:])  # the view dies here: the buffer can grow again
            except msgspec.DecodeError as e:
                m = _TRAILING.search(str(e))
                if m is not None:
                    b.pos += int(m.group(1)) - 1  # msgspec counts the first trailing byte from 1
                    while b.data[b.pos - 1] in b" \t\r\n":  # msgspec skipped the whitespace after it
                        b.pos -= 1
                    return _fits(b, max_element)
                if "truncated" not in str(e):
                    break  # malformed inside: let the scanner find its end
            else:
                if b.eof:
                    b.pos = len(b.data)
                    return _fits(b, max_element)
        if b.eof:
            break
        b.more()  # at the end of input this sets eof: the next round decides
    return _scan_end(b, index, max_element)


def _fits(b: _Buf, max_element: int | None) -> bool:
    return max_element is None or b.pos - b.keep <= max_element


def _scan_end(b: _Buf, index: int, max_element: int | None) -> bool:
    start = b.base + b.keep
    kept = True

    def need_more() -> bool:
        nonlocal kept
        if kept and max_element is not None and b.base + len(b.data) - start > max_element:
            kept = False
        if not kept:
            b.keep = b.pos  # too long to hand out: let the buffer drop what was scanned
        return b.more()

    c = b.peek()
    if c in (b"{", b"["):
        depth, in_string = 0, False
        while True:
            if in_string:
                b.pos = _IN_STRING.match(b.data, b.pos).end()
                if b.pos == len(b.data) or b.data[b.pos] == 0x5C:  # more of the string (or its escape) to come
                    if not need_more():
                        raise InvalidInput(f"truncated JSON: element {index} of the array never ends")
                    continue
                b.pos += 1  # the closing quote
                in_string = False
            b.pos = _OUTSIDE.match(b.data, b.pos).end()
            if b.pos == len(b.data):
                if not need_more():
                    raise InvalidInput(f"truncated JSON: element {index} of the array never ends")
                continue
            ch = b.data[b.pos]
            b.pos += 1
            if ch == 0x22:  # a string that runs past the end of the buffer
                in_string = True
                continue
            depth += 1 if ch in b"[{" else -1
            if depth == 0:
                return kept and _fits(b, max_element)
    if c == b'"':
        b.pos += 1
        while True:
            b.pos = _IN_STRING.match(b.data, b.pos).end()
            if b.pos < len(b.data) and b.data[b.pos] == 0x22:
                b.pos += 1
                return kept and _fits(b, max_element)
            if not need_more():
                raise InvalidInput(f"truncated JSON: element {index} of the array never ends")
    while True:  # a number, true, false, null (or garbage the decoder will name)
        b.pos = _SCALAR.match(b.data, b.pos).end()
        if b.pos < len(b.data) or not need_more():
            return kept and _fits(b, max_element)


def _expect_end(b: _Buf) -> None:
    if b.skip_ws():
        raise InvalidInput(f"trailing data after the JSON array (at byte {b.base + b.pos})")
