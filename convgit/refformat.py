"""The text formats of refs, parsed and written without I/O of their own (but for reading a
reflog file): reflog lines (docs/format.md §4), the rename message the index reads back, and
``packed-refs`` (§4.1). ``convgit.refs`` uses them and re-exports them.
"""

from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidRefName, ObjectCorrupt
from .ids import ZERO_OID, check_thread_name, is_oid

THREADS = "refs/threads"
RENAME_PREFIX = "rename: "
PACKED_REFS = "packed-refs"  # .convgit/packed-refs: "<tip> <name>\n" lines sorted by name
PACKED_HEADER = "# convgit packed-refs v1\n"


@dataclass(frozen=True)
class ReflogEntry:
    """One reflog line: the old and new tip, the time (UTC ms), the turn it recorded, a message."""

    old: str | None
    new: str | None
    time_ms: int
    turn: str | None
    message: str


def format_reflog_line(old: str | None, new: str | None, time_ms: int, turn: str | None, msg: str) -> str:
    """One reflog line (docs/format.md §4): ``old new time turn<TAB>message``."""
    msg = " ".join(msg.split())  # one line, always
    return f"{old or ZERO_OID} {new or ZERO_OID} {time_ms} {turn or '-'}\t{msg}\n"


def rename_message(old_name: str, new_name: str) -> str:
    """The reflog message of a rename. It is read back (``parse_rename``) by the index, so
    that a thread forked from ``old_name`` shows where it came from by its new name, after a
    rebuild too. Thread names hold no spaces, so the form is unambiguous."""
    return f"{RENAME_PREFIX}{old_name} -> {new_name}"


def parse_rename(message: str) -> tuple[str, str] | None:
    """(old name, new name) of a reflog message written by ``rename_message``, else None."""
    if not message.startswith(RENAME_PREFIX):
        return None
    old, sep, new = message[len(RENAME_PREFIX):].partition(" -> ")
    if not sep or not old or not new or " " in old or " " in new:
        return None
    return old, new


def broken_ref_fix(name: object) -> str:
    """How to get rid of an unreadable ref file, for an error message."""
    if not isinstance(name, str):
        return "run convgit fsck"
    try:
        check_thread_name(name)
    except InvalidRefName:
        return f"move {THREADS}/{name} out of the store by hand"
    return (f"convgit threads delete {name} removes it, keeping its reflog; "
            "convgit fsck --repair removes every unreadable ref")


def parse_reflog_line(line: str) -> ReflogEntry | None:
    """A reflog line as a ReflogEntry, or None when the line is not well formed."""
    head, _, msg = line.rstrip("\n").partition("\t")
    f = head.split(" ")
    if len(f) != 4 or not is_oid(f[0]) or not is_oid(f[1]) or not f[2].isdigit():
        return None
    turn = f[3] if is_oid(f[3]) else None
    return ReflogEntry(
        None if f[0] == ZERO_OID else f[0],
        None if f[1] == ZERO_OID else f[1],
        int(f[2]),
        turn,
        msg,
    )


def applied_entries(entries: list[ReflogEntry], tip: str | None) -> list[ReflogEntry]:
    """The entries of a reflog whose moves happened, oldest first. A writer appends its
    reflog lines before it renames the ref (docs/format.md §6.2), so one killed between the
    two leaves lines for moves that never happened. The moves that happened form a chain
    that ends at the ref's tip (None for a deleted thread's archive, whose last line is the
    delete): walking back from the newest line, a line is applied when it ends where the
    later applied line starts (the newest: at ``tip``); the others are left out.

    One line goes on from its ``new`` instead of its ``old``: the creation of a thread by a
    rename (``rename: A -> B`` with no old tip: ``a/b`` -> ``a`` is a delete and a create,
    docs/format.md §6.4), whose reflog is the renamed thread's history, which ended at that
    tip, followed by the creation line."""
    return _chain(entries, tip)


def _chain(entries: list[ReflogEntry], at: str | None) -> list[ReflogEntry]:
    """``applied_entries``' walk, from ``at``; a delete of an unreadable ref (its old tip was
    not known: ``UNREADABLE_SUFFIX``) goes on from the newest line before it."""
    out: list[ReflogEntry] = []
    unknown = object()
    for e in reversed(entries):
        if e.new == at or at is unknown:
            out.append(e)
            if e.old is None and e.new is not None and parse_rename(e.message) is not None:
                at = e.new
            elif e.old is None and e.new is None and e.message.endswith(UNREADABLE_SUFFIX):
                at = unknown
            else:
                at = e.old
    return out[::-1]


STALE_MESSAGE = "stale: moves a crash cut short, never made"  # ends a stale reflog archived (§4)
UNREADABLE_SUFFIX = "(unreadable ref)"  # a delete of a ref that could not be read: its tip was unknown


def applied_archived(entries: list[ReflogEntry]) -> list[ReflogEntry]:
    """The entries of an archived reflog (``logs/deleted``) that count, oldest first
    (docs/format.md §4 "Moves that happened"). An archive ends where its thread ended: its
    last line whose new tip is none (a delete, or the ``STALE_MESSAGE`` line archiving a
    stale reflog appends). Up to that line, the moves that happened are the chain ending at
    none, as ``applied_entries`` walks it; a delete of an unreadable ref (``old`` none: the
    tip was unknown) goes on from the newest line before it. The lines after it are
    provenance that merge and bundles carried from another store's deleted thread (§11),
    kept as they are; so is an archive without such a line (carried lines only, or a stale
    reflog archived before the marker existed)."""
    end = max((i for i, e in enumerate(entries) if e.new is None), default=-1)
    return _chain(entries[:end + 1], None) + list(entries[end + 1:])


PACKED_SCAN_BYTES = 16 * 1024  # a larger packed-refs (above ~180 refs) is searched (bisect), not parsed, for one name
_LINES_AFTER = 64  # ... and after this many searches in one version of it, its lines are split once


class _Packed:
    """The content of ``packed-refs``: name -> tip (None: the line's tip is not an id), the
    lines no reader can use (kept as they are when the file is rewritten: fsck names them,
    gc refuses while there are any), and whether the header names this format.

    ``refs`` and ``bad`` parse the whole file (on first use); ``get``, ``__contains__`` and
    ``has_under`` of a file over PACKED_SCAN_BYTES find the name by binary search in the
    sorted lines instead (docs/format.md §4.1), so a store of 100,000 packed threads does not
    parse 9 MB to read one ref."""

    def __init__(self, refs: dict | None, bad: list | None, header_ok: bool, data: bytes = b"") -> None:
        self._refs = refs
        self._bad = bad
        self.header_ok = header_ok
        self._data = data
        self._names: list[str] | None = None
        self._searches = 0  # binary searches made in ``_data``: past _LINES_AFTER, its lines are split once
        self._lines: tuple[list[bytes], list[int], list[bytes]] | None = None  # (names, starts, lines)

    @property
    def refs(self) -> dict[str, str | None]:
        if self._refs is None:
            self._parse()
        return self._refs  # type: ignore[return-value]

    @property
    def bad(self) -> list[tuple[str | None, str]]:  # (the name, when the line has a valid one; the line)
        if self._bad is None:
            self._parse()
        return self._bad  # type: ignore[return-value]

    def _parse(self) -> None:
        p = parse_packed_refs(bytes(self._data))  # (a mapped file: its bytes, once)
        self._refs, self._bad = p._refs, p._bad

    def _searching(self) -> bool:
        return self._refs is None and self.header_ok and len(self._data) > PACKED_SCAN_BYTES

    def _lower_bound(self, key: bytes) -> tuple[int, bytes | None]:
        """(start, line) of the first line whose name is >= ``key`` (None: past the end)."""
        data = self._data
        if self._lines is None:
            self._searches += 1
            if self._searches > _LINES_AFTER:
                self._lines = self._split_lines()
        if self._lines:  # a bulk writer's thousands of lookups: one split, then bisect (in C)
            names, starts, lines = self._lines
            i = bisect.bisect_left(names, key)
            return (starts[i], lines[i]) if i < len(names) else (len(data), None)
        lo, hi = len(PACKED_HEADER), len(data)
        while lo < hi:
            mid = (lo + hi) // 2
            s = max(lo, data.rfind(b"\n", lo, mid) + 1)
            e = data.find(b"\n", s)
            e = len(data) if e < 0 else e
            if data[s:e].partition(b" ")[2] < key:
                lo = e + 1
            else:
                hi = s
        if lo >= len(data):
            return lo, None
        e = data.find(b"\n", lo)
        return lo, data[lo:len(data) if e < 0 else e]

    def _split_lines(self):
        """(names, starts, lines) of the lines after the header, when their names are in
        order (the file as convgit writes it); else ``()``: the byte search goes on, so an
        unordered (damaged) file answers exactly as before."""
        data = self._data
        h = len(PACKED_HEADER)
        lines = data[h:].split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        names = [ln.partition(b" ")[2] for ln in lines]
        if not all(map(operator.le, names, names[1:])):
            return ()
        starts, pos = [], h
        for ln in lines:
            starts.append(pos)
            pos += len(ln) + 1
        return names, starts, lines

    def _find(self, name: str) -> tuple[bool, str | None]:
        _, line = self._lower_bound(name.encode())
        if line is None:
            return False, None
        tip, _, n = line.decode("utf-8", "replace").partition(" ")
        return (n == name), (tip if is_oid(tip) else None)

    def __contains__(self, name: str) -> bool:
        if self._searching():
            return self._find(name)[0]
        return name in self.refs

    def with_changes(self, changes: dict[str, str | None]) -> bytes:
        """The bytes of this file with ``changes`` made (name -> its new tip, or None to take
        it out). Unreadable lines are kept (but those naming a changed thread). A large file
        is merged line by line as bytes, never parsed: O(changes × log n) searches and one
        copy."""
        if not self._searching():
            refs = {n: t for n, t in self.refs.items() if t is not None}
            for n, t in changes.items():
                if t is None:
                    refs.pop(n, None)
                else:
                    refs[n] = t
            return format_packed_refs(refs, [ln for n, ln in self.bad if n is None or n not in changes])
        data = self._data
        out = [data[:len(PACKED_HEADER)]]
        cur = len(PACKED_HEADER)
        for name in sorted(changes, key=str.encode):
            start, line = self._lower_bound(name.encode())
            start = max(start, cur)
            out.append(data[cur:start])
            cur = start
            if line is not None and line.partition(b" ")[2] == name.encode():
                cur = start + len(line) + 1
            tip = changes[name]
            if tip is not None:
                out.append(f"{tip} {name}\n".encode())
        out.append(data[cur:])
        return b"".join(out)

    def mentions(self, names: set[str]) -> bool:
        """Does a line (a ref, or an unreadable line with a valid name) name one of ``names``?"""
        if self._searching():
            return any(n in self for n in names)
        return any(n in self.refs for n in names) or any(n in names for n, _ in self.bad)

    def __bool__(self) -> bool:
        """Whether it holds any ref."""
        if self._searching():
            return True
        return bool(self.refs)

    def get(self, name: str) -> str | None:
        if self._searching():
            found, tip = self._find(name)
        else:
            found, tip = name in self.refs, self.refs.get(name)
        if not found:
            return None
        if tip is None:
            raise ObjectCorrupt(f"thread {name!r} is corrupt: its line in {PACKED_REFS} is not a valid object id",
                                ref=name)
        return tip

    def has_under(self, name: str) -> bool:
        """Is some packed thread named ``name/…``?"""
        if self._searching():
            _, line = self._lower_bound((name + "/").encode())
            return line is not None and line.partition(b" ")[2].startswith((name + "/").encode())
        names = self._sorted()
        i = bisect.bisect_left(names, name + "/")
        return i < len(names) and names[i].startswith(name + "/")

    def _sorted(self) -> list[str]:
        if self._names is None:
            self._names = sorted(self.refs)
        return self._names


def parse_packed_refs(data: bytes) -> _Packed:
    """``packed-refs`` (docs/format.md §4.1): a header line, then ``<tip> <name>`` lines."""
    if not data:
        return _Packed({}, [], True)
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    header_ok = bool(lines) and lines[0] + "\n" == PACKED_HEADER
    refs: dict[str, str | None] = {}
    bad: list[tuple[str | None, str]] = []
    for line in lines[1:] if header_ok else lines:
        tip, sep, name = line.partition(" ")
        try:
            check_thread_name(name)
        except InvalidRefName:
            bad.append((None, line))
            continue
        if not header_ok or not sep or name in refs:
            bad.append((name if header_ok else None, line))
            continue
        refs[name] = tip if is_oid(tip) else None
        if refs[name] is None:
            bad.append((name, line))
    return _Packed(refs, bad, header_ok, data)


def open_packed_refs(data) -> _Packed:
    """``packed-refs`` as readers use it: parsed at once when small, else searched by name
    and parsed only when every ref is asked for. ``data``: its bytes, or (a large file) a
    read-only map of it (``fsio.map_read``)."""
    if len(data) <= PACKED_SCAN_BYTES:
        return parse_packed_refs(bytes(data))
    header = PACKED_HEADER.encode()
    return _Packed(None, None, data[:len(header)] == header, data)


def format_packed_refs(refs: dict[str, str], keep: list[str] = ()) -> bytes:
    """The bytes of a ``packed-refs`` file holding ``refs`` (and the unreadable lines
    ``keep``, at the end, so that a rewrite never loses what fsck should show)."""
    body = "".join(f"{tip} {name}\n" for name, tip in sorted(refs.items()))
    return (PACKED_HEADER + body + "".join(f"{ln}\n" for ln in keep)).encode()


def read_log_file(path: Path, offset: int = 0) -> list[ReflogEntry]:
    """The well-formed entries of the reflog at ``path`` from byte ``offset`` on."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return []
    return parse_log(data)


def parse_log(data: bytes) -> list[ReflogEntry]:
    """The well-formed entries of a reflog's bytes (a loose file's, or a packed one's)."""
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        e = parse_reflog_line(line)
        if e is not None:
            out.append(e)
    return out


def log_is_clean(data: bytes) -> bool:
    """Every line of these reflog bytes parses and ends with a newline (what may be packed)."""
    if data and not data.endswith(b"\n"):
        return False
    lines = data.decode("utf-8", "replace").splitlines()
    return all(parse_reflog_line(ln) is not None for ln in lines)
