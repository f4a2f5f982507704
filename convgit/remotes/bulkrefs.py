"""Many new refs at once, written straight into a RefStore's packed files (``packed-logs``,
then ``packed-refs``), for a fetch or a clone that creates thousands of them
(docs/format.md §13.6). The caller holds the store lock exclusively: no other writer runs,
as for a packing (§6.4).

Only creations qualify: a move whose ref does not exist (neither loose nor packed), whose
name has no reflog yet (no stale one to archive), is not the tip of a missing object, and
meets no other name across the file/directory rule (``a`` and ``a/b``). Every other move is
left to ``RefStore.update_many``, which moves it as usual. (Kept apart from the batched
moves of refs.py, which other work changes: one function, its own module.)
"""

from __future__ import annotations

import os
import time
from typing import Callable

from .. import fsio
from ..errors import ObjectCorrupt
from ..ids import is_oid
from ..packedlogs import PackedLog, absorbed_skip, rewrite_packed_logs
from ..refformat import ReflogEntry, format_reflog_line, parse_log
from ..refs import ANY, RefMove, RefStore

BULK_MIN = 256  # fewer new refs than this: the usual batched moves (two syncfs per 256 refs)


def _ancestors(name: str):
    i = name.find("/")
    while i != -1:
        yield name[:i]
        i = name.find("/", i + 1)


def bulk_candidates(refs: RefStore, moves: list[RefMove], existing: dict[str, str],
                    exists: Callable[[str], bool] | None) -> list[int]:
    """The indexes of ``moves`` that ``create_packed`` may write: creations (expected
    absent, or anything) of names that exist nowhere (``existing``: every ref as
    ``read_all`` gives it), with no reflog, no steps, a stored tip, and no file/directory
    conflict with any other name, existing or moved."""
    names = set(existing) | {m.name for m in moves}
    dirs = {a for n in names if "/" in n for a in _ancestors(n)}  # every name that is some ref's directory
    logs = refs.packed_logs()
    loose_logs = _files(refs.logs_dir)  # every path below (files and directories), read once
    loose_refs = _files(refs.threads_dir)
    seen: set[str] = set()
    out = []
    for i, m in enumerate(moves):
        n = m.name
        if (n in existing or n in seen or m.steps or not (m.expected is ANY or m.expected is None)
                or not is_oid(m.new) or (exists is not None and not exists(m.new))):
            continue
        if n in dirs or any(a in names for a in _ancestors(n)):
            continue  # a and a/b: the usual path refuses one of them
        if n in loose_refs:
            continue  # (a directory of that name, a file read_all could not read: the usual path says why)
        if n in loose_logs or (logs is not None and logs.get(n) is not None):
            continue  # a stale reflog: the usual path archives it first
        seen.add(n)
        out.append(i)
    return out


def _files(base) -> set[str]:
    """Every file, directory and symlink below ``base``, as ``/``-separated relative paths."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(base):
        rel = os.path.relpath(dirpath, base).replace(os.sep, "/")
        pre = "" if rel == "." else rel + "/"
        out.update(pre + f for f in filenames)
        out.update(pre + d for d in dirnames)
    return out


def create_packed(refs: RefStore, moves: list[RefMove], *, time_ms: int | None = None) -> None:
    """Create every ref of ``moves`` (each a candidate of ``bulk_candidates``) in one step:
    the journal names them; under ``packed-refs.lock`` their reflogs (the creation line, then
    one line per extra turn) go into a new ``packed-logs`` (temp file, fsync, rename, the
    directory fsynced), then their tips into a new ``packed-refs`` the same way: that rename
    is the commit point, for all of them at once. A crash before it leaves reflogs of refs
    that do not exist: stale ones, which the next creation of such a ref archives (§4); no
    ref moved. Readers see all of them or none (one rename)."""
    if not moves:
        return
    t = time_ms if time_ms is not None else int(time.time() * 1000)
    refs.journal([m.name for m in moves])
    with refs._packed_locked():
        packed = refs.packed()
        if not packed.header_ok:
            raise ObjectCorrupt(f"{refs.packed_path.name} has an unknown header: not rewritten (run convgit fsck)")
        changes: dict[str, PackedLog | None] = {}
        for m in moves:
            tm = m.time_ms if m.time_ms is not None else t
            text = format_reflog_line(None, m.new, tm, m.turn, m.message)
            text += "".join(format_reflog_line(m.new, m.new, tm, turn, msg) for turn, msg in m.extra)
            changes[m.name] = PackedLog(m.name, text.encode())
        fsio.makedirs(refs.packed_logs_path.parent, fsync=refs.fsync)
        fsio.replace_file(refs.packed_logs_path, rewrite_packed_logs(refs.packed_logs(), changes), fsync=refs.fsync,
                          point="bulk_logs_after_tmp_fsync")
        fsio.makedirs(refs.packed_path.parent, fsync=refs.fsync)
        fsio.replace_file(refs.packed_path, packed.with_changes({m.name: m.new for m in moves}), fsync=refs.fsync,
                          point="bulk_refs_after_tmp_fsync")


def create_many(refs: RefStore, moves: list[RefMove], *, exists: Callable[[str], bool] | None = None,
                declare: Callable[[], None] | None = None) -> set[int]:
    """For a caller holding the store lock exclusively (the repository transaction): when at
    least BULK_MIN of ``moves`` are plain creations, write those packed at once
    (``create_packed``; ``declare`` first: the format version that reads packed files).
    Returns the indexes of the moves made (created: their old tip is None); the caller moves
    the others as usual (``RefStore.update_many``)."""
    if len(moves) < BULK_MIN:
        return set()
    picked = bulk_candidates(refs, moves, refs.read_all(broken={}), exists)
    if len(picked) < BULK_MIN:
        return set()
    if declare is not None:
        declare()
    create_packed(refs, [moves[i] for i in picked])
    return set(picked)


def read_logs(refs: RefStore, names) -> dict[str, list[ReflogEntry]]:
    """The reflogs of ``names`` (each as ``read_log`` gives it), read together: the loose
    reflog directory walked once (a file opened only where one exists), ``packed-logs``
    read chunk by chunk once for many names, instead of two looks and an open per name. The
    same one-instant rule as ``log_bytes`` (docs/format.md §4.2): the loose files are read
    between two looks at the same ``packed-logs``, again if a packing replaced it meanwhile."""
    names = list(names)
    wanted = set(names)
    while True:
        pl = refs.packed_logs()
        loose = {n: refs._loose_log(n) for n in _files(refs.logs_dir) & wanted}
        if refs.packed_logs() is pl:
            break
    if pl is None:
        packed = {}
    elif len(names) > 1000:
        packed = {e.name: e for e in pl if e.name in wanted}
    else:
        packed = {n: e for n in names if (e := pl.get(n)) is not None}
    out = {}
    for n in names:
        data, ino = loose.get(n, (b"", None))
        e = packed.get(n)
        out[n] = parse_log(data if e is None else e.data + data[absorbed_skip(e, ino, data):])
    return out

