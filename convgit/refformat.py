"""The text formats of refs, parsed and written without I/O of their own (but for reading a
reflog file): reflog lines (docs/format.md §4), the rename message the index reads back, and
``packed-refs`` (§4.1). ``convgit.refs`` uses them and re-exports them.
"""

from __future__ import annotations

import bisect
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


@dataclass(frozen=True)
class _Packed:
    """The content of ``packed-refs``: name -> tip (None: the line's tip is not an id), the
    lines no reader can use (kept as they are when the file is rewritten: fsck names them,
    gc refuses while there are any), and whether the header names this format."""

    refs: dict[str, str | None]
    bad: list[tuple[str | None, str]]  # (the name, when the line has a valid one; the line)
    header_ok: bool

    def get(self, name: str) -> str | None:
        if name not in self.refs:
            return None
        tip = self.refs[name]
        if tip is None:
            raise ObjectCorrupt(f"thread {name!r} is corrupt: its line in {PACKED_REFS} is not a valid object id",
                                ref=name)
        return tip

    def has_under(self, name: str) -> bool:
        """Is some packed thread named ``name/…``?"""
        names = self._sorted()
        i = bisect.bisect_left(names, name + "/")
        return i < len(names) and names[i].startswith(name + "/")

    def _sorted(self) -> list[str]:
        cached = self.__dict__.get("_names")
        if cached is None:
            cached = sorted(self.refs)
            object.__setattr__(self, "_names", cached)
        return cached


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
    return _Packed(refs, bad, header_ok)


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
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        e = parse_reflog_line(line)
        if e is not None:
            out.append(e)
    return out
