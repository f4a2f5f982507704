"""``fsck``: prove the store's integrity, or list exactly what is wrong.

Checks every loose and packed object (hash = name, decodes, canonical encoding), that every
parent / blob / turn reference resolves to an object of the right type, that refs and HEAD
are valid and point at messages, that reflogs parse and name existing turns, that pack
indexes match their packs, and that the index agrees with a fresh rebuild. Problems are
errors (corruption) or warnings/info (leftover temp files, unreachable objects).
``repair`` removes unreadable ref files (their reflogs archived, as for a deleted thread),
rebuilds the index and removes stale temp files; it never deletes an object.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from . import codec, fsio
from .errors import ConvgitError, InvalidRefName, ObjectCorrupt, ObjectMissing
from .graph import keep_recording_turns, typed_references
from .ids import check_thread_name
from .objects import Blob, Turn
from .packedlogs import PACKED_LOGS, verify
from .refformat import applied_entries
from .refs import THREADS, broken_ref_fix, parse_log
from .remotes.tracking import TrackingRefs, remote_names


@dataclass
class Problem:
    """One finding of fsck: severity (error, warning, info), kind, message and the object."""

    severity: str  # error | warning | info
    kind: str  # object_corrupt, object_missing, not_canonical, bad_ref, bad_reflog, provenance_missing, pack, index, temp, unreachable, vectors
    message: str
    oid: str | None = None

    def to_json(self) -> dict:
        """The problem as one entry of ``fsck --json``'s ``problems``."""
        return {"severity": self.severity, "kind": self.kind, "message": self.message, "oid": self.oid}


@dataclass
class FsckReport:
    """What fsck counted (objects, packs, threads, reachable) and every problem it found."""

    objects: int = 0
    loose: int = 0
    packed: int = 0
    packs: int = 0
    threads: int = 0
    reachable: int = 0
    problems: list[Problem] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # An index-only store ([store] objects_from): the remote its objects are on, how many tips
    # and turns were found in that remote's packs (by their cached indexes), how many packs its
    # refs document names (None: not reached), and what could not be checked here.
    objects_from: str | None = None
    on_remote: int = 0
    remote_packs: int | None = None
    not_checked: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        """The problems of severity ``error`` (warnings do not fail fsck)."""
        return [p for p in self.problems if p.severity == "error"]

    @property
    def ok(self) -> bool:
        """True when there is no error."""
        return not self.errors

    def to_json(self) -> dict:
        """The ``fsck --json`` document: ``ok`` or ``corrupt``, the counts and the problems."""
        return {
            "status": "ok" if self.ok else "corrupt",
            "objects": self.objects, "loose": self.loose, "packed": self.packed, "packs": self.packs,
            "threads": self.threads, "reachable": self.reachable,
            "errors": len(self.errors),
            "problems": [p.to_json() for p in self.problems],
            "repaired": self.repaired,
            "seconds": self.seconds,
        } | ({"index_only": {"remote": self.objects_from, "on_remote": self.on_remote,
                             "remote_packs": self.remote_packs, "not_checked": self.not_checked}}
             if self.objects_from else {})


def fsck(repo, *, repair: bool = False, check_index: bool = True, progress=None) -> FsckReport:
    """Check every object (re-hashed and decoded), ref, reflog, pack and, with
    ``check_index``, the index. With ``repair``, fix what can be fixed without losing data.
    ``progress(done, total)`` is called as objects are checked (the bulk of the work)."""
    t0 = time.perf_counter()
    rep = FsckReport()
    add = rep.problems.append
    objects = repo.objects
    # No gc while fsck reads (gc is what removes objects and packs: a pack it replaced or a
    # loose object it packed would read as missing). Shared: fscks run side by side; a gc
    # started meanwhile is skipped at once, as when another gc runs, and writers never wait.
    with fsio.flock(repo.path / "gc.lock", shared=True, timeout=repo.config.lock_timeout):
        # The refs, HEAD and reflogs first, then the objects: a writer stores a move's objects
        # before it moves the ref, so every tip and turn read here is among the objects listed
        # after it. (Read the other way round, a commit made during a long scan named objects
        # the scan had not listed, and fsck reported them corrupt or missing.)
        snap = _read_refs(repo, rep, add)
        objects.packs(reload=True)
        # An index-only store holds no objects: its tips and turns are looked up in the
        # remote's packs (by their cached indexes, no network), and what needs the objects is
        # not checked.
        rep.objects_from = getattr(repo.config, "objects_from", None)
        ranged = objects.ranged_packs(reload=True) if rep.objects_from else []

        def on_remote(oid: str) -> list[str]:
            return [p.name for p in ranged if p.contains(oid)] if rep.objects_from else []

        types, refs_of, turns = _check_objects(objects, rep, add, progress)
        roots, archived_turns = _check_refs(snap, types, objects, add, rep, on_remote)
        _finish(repo, rep, add, types, refs_of, turns, roots, archived_turns, snap.broken, repair, check_index,
                on_remote)
    rep.seconds = round(time.perf_counter() - t0, 3)
    return rep


@dataclass
class _RefSnapshot:
    """The refs, HEAD's problems and every reflog, read before the objects are listed."""

    tips: list[tuple[str, str]] = field(default_factory=list)  # (thread, tip) of readable refs
    broken: dict[str, Problem] = field(default_factory=dict)  # unreadable ref files that repair can remove
    logs: list[tuple[str | None, str, bytes]] = field(default_factory=list)  # _all_logs
    tracking: list[tuple[str, str]] = field(default_factory=list)  # ("REMOTE/THREAD", tip) of remote-tracking refs


def _read_refs(repo, rep: FsckReport, add) -> _RefSnapshot:
    """Read every ref, HEAD and reflog (problems of their own form reported at once)."""
    snap = _RefSnapshot()
    for name in repo.refs.iter_names():
        rep.threads += 1
        try:
            check_thread_name(name)
        except InvalidRefName as e:
            add(Problem("error", "bad_ref", f"ref file with an invalid name: {e.message}"))
            continue
        try:
            tip = repo.refs.read(name)
        except ObjectCorrupt as e:
            snap.broken[name] = Problem("error", "bad_ref", f"{e.message} ({broken_ref_fix(name)})")
            add(snap.broken[name])
            continue
        if tip is not None:
            snap.tips.append((name, tip))
    packed = repo.refs.packed()  # its threads were read above; here, the lines no reader can use
    if not packed.header_ok:
        add(Problem("error", "bad_ref", f"{repo.refs.packed_path.name}: the first line does not name this format "
                    "(its threads cannot be read)"))
    for name, _line in packed.bad:
        if name is None or packed.refs.get(name) is not None:  # a bad tip is reported above
            add(Problem("error", "bad_ref", f"{repo.refs.packed_path.name}: an unreadable line (gc refuses until it is removed by hand)"
                        + (f" for thread {name!r} (a duplicate)" if name else "")))
    try:
        head = repo.refs.read_head()
        check_thread_name(head)
    except ConvgitError as e:
        add(Problem("error", "bad_ref", f"HEAD: {e.message}"))
    snap.logs = list(_all_logs(repo, add, _check_packed_logs(repo, add)))
    # Remote-tracking refs root what a fetch brought and no thread names yet, as for gc
    # (gc._roots): what only they reach is reachable, and one gc would refuse on is an error.
    for remote in remote_names(repo.path):
        try:
            tracked = TrackingRefs(repo.path, remote).read_all()
        except ObjectCorrupt as e:
            add(Problem("error", "bad_ref", f"remote-tracking ref of {remote}: {e.message} (gc refuses until it is "
                        f"fixed; convgit remote remove {remote} drops them)"))
            continue
        snap.tracking += [(f"{remote}/{n}", t) for n, t in sorted(tracked.items())]
    return snap


def _check_objects(objects, rep: FsckReport, add, progress):
    """Every loose and packed object: hash, decode, canonical form. Returns (types, the
    references of each object, the turns), for the checks that follow."""
    types: dict[str, str] = {}
    refs_of: dict[str, list[tuple[str, str]]] = {}
    turns: dict[str, Turn] = {}
    loose = list(objects.iter_loose())
    rep.loose = len(loose)
    total = len(loose) + sum(len(p.ids_in_pack_order()) for p in objects.packs()) if progress is not None else 0
    done = 0
    for oid in loose:
        _check_object(objects, oid, types, refs_of, turns, add, lambda o=oid: _read_loose_raw(objects, o))
        done += 1
        if progress is not None and done % 256 == 0:
            progress(done, total)
    for name, why in sorted(objects.bad_packs.items()):
        add(Problem("error", "pack", f"{why} (the objects it lists cannot be read)"))
    for p in objects.packs():
        rep.packs += 1
        for msg in p.verify(objects=False):  # each object is checked below
            add(Problem("error", "pack", msg))
        for oid in p.ids_in_pack_order():  # each chunk decompressed once
            rep.packed += 1
            done += 1
            if progress is not None and done % 256 == 0:
                progress(done, total)
            if oid in types:
                continue
            _check_object(objects, oid, types, refs_of, turns, add, lambda o=oid, p=p: p.read(o))
    if progress is not None:
        progress(done, total)
    rep.objects = len(types) + sum(1 for pr in rep.problems if pr.kind in ("object_corrupt",) and pr.oid and pr.oid not in types)
    # References between objects (present, readable, of the right type) are checked after
    # reachability (_finish): a broken link from an unreachable object is a dangling leftover
    # of an interrupted write or prune, a warning as in git; from a reachable one, corruption.
    return types, refs_of, turns


def _check_refs(snap: _RefSnapshot, types: dict, objects, add, rep: FsckReport, on_remote):
    """The refs and reflogs read first, against the objects: returns (the roots of
    reachability, the turns of archived reflogs that are not stored). ``on_remote``: the
    remote packs holding an id (an index-only store's objects)."""
    roots: list[str] = []
    for name, tip in snap.tips:
        if tip not in types and on_remote(tip):
            rep.on_remote += 1  # (its type and history are in the objects: not checked here)
        elif tip not in types:
            add(Problem("error", "bad_ref", f"thread {name!r} points at {tip}, which is {'corrupt' if objects.contains(tip) else 'missing'}", tip))
        elif types[tip] != "message":
            add(Problem("error", "bad_ref", f"thread {name!r} points at a {types[tip]}, not a message", tip))
        else:
            roots.append(tip)
    for name, tip in snap.tracking:
        if tip not in types and on_remote(tip):
            rep.on_remote += 1
        elif tip not in types:
            add(Problem("error", "bad_ref", f"remote-tracking ref {name!r} points at {tip}, which is "
                        f"{'corrupt' if objects.contains(tip) else 'missing'} (gc refuses until it is fixed)", tip))
        elif types[tip] != "message":
            add(Problem("error", "bad_ref", f"remote-tracking ref {name!r} points at a {types[tip]}, not a message", tip))
        else:
            roots.append(tip)
    archived_turns: list[tuple[str, str | None, str]] = []  # (turn, new tip, where) in deleted threads' reflogs
    tips = dict(snap.tips)
    for name, where, raw in snap.logs:
        lines = [ln for ln in raw.decode("utf-8", "replace").splitlines() if ln.strip()]
        entries = parse_log(raw)
        if len(entries) != len(lines):
            add(Problem("error", "bad_reflog", f"{where}: {len(lines) - len(entries)} unreadable line(s)"))
        # A live reflog's lines of moves that never happened (a writer killed between its line
        # and its ref rename: docs/format.md §6.2) root nothing, as for gc; their objects may
        # even be gone (a power loss), which is no damage: nothing ever pointed a ref at them.
        applied = None if name is None or name in snap.broken else {id(e) for e in applied_entries(entries, tips.get(name))}
        for e in entries:
            if applied is not None and id(e) not in applied:
                if e.turn is not None and e.turn not in types and not on_remote(e.turn):
                    add(Problem("info", "bad_reflog", f"{where} names turn {e.turn} of a move a crash cut short "
                                "(it never happened), which is not stored: harmless", e.turn))
                continue
            if e.turn is not None:
                if e.turn not in types and on_remote(e.turn):
                    rep.on_remote += 1
                elif e.turn not in types:
                    if name is None:  # decided after reachability: an error if it recorded a reachable message
                        archived_turns.append((e.turn, e.new, where))
                    else:
                        add(Problem("error", "bad_reflog", f"{where} names turn {e.turn}, which is not stored", e.turn))
                elif types[e.turn] != "turn":
                    add(Problem("error", "bad_reflog", f"{where} names {e.turn} as a turn; it is a {types[e.turn]}", e.turn))
                elif name is not None:
                    roots.append(e.turn)
    return roots, archived_turns


def _finish(repo, rep: FsckReport, add, types, refs_of, turns, roots, archived_turns, broken, repair: bool,
            check_index: bool, on_remote) -> None:
    """Reachability, the references between objects, leftovers, the index, vectors, and
    the repairs."""
    objects = repo.objects
    index_only = rep.objects_from
    # 4. Reachability (unreachable objects are information, as in git).
    reach: set[str] = set()

    def mark(todo: list[str]) -> None:
        while todo:  # over what step 1 read: no object is read twice, a bad one stops nothing
            o = todo.pop()
            if o in reach:
                continue
            reach.add(o)
            todo.extend(r for r, _ in refs_of.get(o, ()) if r in types and r not in reach)

    mark([r for r in roots if r in types])
    # The provenance rule (as gc keeps them): a turn that records a reachable message is
    # reachable, whatever named it.
    parents = {o: (refs_of[o][0][0] if o in refs_of and refs_of[o][0][1] == "message" else None)
               for o, t in types.items() if t == "message" and o not in reach}
    keep_recording_turns({t: obj for t, obj in turns.items() if t not in reach}, reach, parents.get, mark)
    for tid, _new, where in archived_turns:
        # A deleted thread's turn that gc pruned when it recorded nothing reachable (a later
        # commit may have stored the same messages again, with a turn of its own): history
        # of a thread that is gone, not damage.
        add(Problem("info", "bad_reflog", f"{where} names turn {tid}, which is not stored", tid))
    rep.reachable = len(reach)
    for oid, refs in refs_of.items():
        kind = types[oid]
        sev = "error" if oid in reach or index_only else "warning"
        for r, expect in refs:
            if r not in types and on_remote(r):
                continue
            if r not in types:
                gone = not objects.contains(r)
                if sev == "error" and expect == "turn":
                    add(Problem(sev, "provenance_missing", f"import turn {oid} lists per-message turn {r}, which is "
                                f"{'missing' if gone else 'corrupt'}: the time and model it gave its messages are lost", r))
                elif sev == "error":
                    add(Problem(sev, "object_missing" if gone else "object_corrupt",
                                f"{kind} {oid} references {r}, which is {'missing' if gone else 'corrupt'}", r))
                else:
                    add(Problem(sev, "dangling", f"unreachable {kind} {oid} references {r}, which is "
                                f"{'missing' if gone else 'corrupt'} (left by an interrupted write; gc prunes it)", r))
            elif types[r] != expect:
                add(Problem("error", "bad_reference", f"{kind} {oid} references {r}, a {types[r]} where a {expect} belongs", oid))
    unreachable = [o for o in types if o not in reach] if not index_only else []
    if unreachable:
        add(Problem("info", "unreachable", f"{len(unreachable)} unreachable object(s) (gc prunes them after the grace period)"))

    # 5. Leftovers.
    temps = [os.path.join(dp, f) for dp, _, fs in os.walk(repo.path) for f in fs if f.startswith(fsio.TMP_PREFIX)]
    if temps:
        add(Problem("warning", "temp", f"{len(temps)} temporary file(s) left by interrupted writes"))
    from .gc import leftover_quarantines, orphan_packs

    for q in leftover_quarantines(objects):
        add(Problem("warning", "temp", f"{q.relative_to(repo.path)}: quarantine left by an interrupted merge (gc removes it)"))
    for op in orphan_packs(objects):
        add(Problem("warning", "temp", f"{op.relative_to(repo.path)}: pack without an index, left by an interrupted write (gc removes it)"))

    # 6. The index agrees with the objects.
    if index_only:
        _check_index_only(repo, rep, add, on_remote, check_index)
    elif check_index and not rep.errors:  # with damaged objects a rebuild differs by design
        _check_index(repo, add)

    # 7. Vectors (derived, .convgit/vectors/) of messages that are no longer stored.
    if (repo.path / "vectors").is_dir():
        from .semantic import orphan_vectors

        for key, n in orphan_vectors(repo, objects.contains).items():
            add(Problem("warning", "vectors", f"vectors/{key}: vectors of {n} message(s) that are not stored "
                                              "any more (gc drops them)"))

    if repair:
        for name, problem in broken.items():
            rep.repaired.append(_remove_broken_ref(repo, name))
            rep.problems.remove(problem)
        repo.index.rebuild()
        rep.repaired.append("index rebuilt")
        n = 0
        cutoff = time.time() - 3600  # a temp file younger than an hour may belong to a live writer
        for t in temps:
            try:
                if os.stat(t).st_mtime < cutoff:
                    fsio.unlink(t)
                    n += 1
            except FileNotFoundError:
                pass
        if n:
            rep.repaired.append(f"{n} stale temporary file(s) removed")
        rep.problems = [p for p in rep.problems if p.kind != "index"]


def _remove_broken_ref(repo, name: str) -> str:
    """Delete an unreadable ref file (no object is touched; its reflog is archived, as for
    any deleted thread), saying how to get the thread back if its reflog knows a tip."""
    last = next((e.new for e in reversed(repo.refs.read_log(name)) if e.new), None)
    with repo.transaction(index="none") as tx:  # (fsck rebuilds or checks the index itself)
        tx.move(name, None, message="fsck --repair: unreadable ref removed", check_exists=False)
    back = (f"; its last recorded tip was {last}: convgit update-ref {name} {last} brings it back"
            " (until gc prunes what nothing else reaches)") if last else ""
    return f"removed unreadable ref {name!r} (its reflog is kept in logs/deleted){back}"


def _read_loose_raw(objects, oid: str) -> bytes:
    with open(objects._file(oid), "rb") as f:
        return f.read()


def _check_object(objects, oid, types, refs_of, turns, add, read) -> None:
    try:
        data = read()
    except ObjectCorrupt as e:
        add(Problem("error", "object_corrupt", e.message, oid))
        return
    except OSError as e:
        add(Problem("error", "object_corrupt", f"object {oid} cannot be read: {e.strerror}", oid))
        return
    if codec.hash_bytes(data) != oid:
        add(Problem("error", "object_corrupt", f"object {oid} is corrupt: its bytes hash to another id", oid))
        return
    try:
        obj = codec.decode(data, oid)
    except ObjectCorrupt as e:
        add(Problem("error", "object_corrupt", e.message, oid))
        return
    if not codec.is_canonical(data, obj):
        add(Problem("error", "not_canonical", f"object {oid} is not in canonical encoding", oid))
    types[oid] = codec.type_name(obj)
    r = typed_references(obj)
    if r:
        refs_of[oid] = r
    if isinstance(obj, Turn):
        turns[oid] = obj


def _check_index_only(repo, rep: FsckReport, add, on_remote, check_index: bool) -> None:
    """An index-only store: the remote's side (index_sync.check_index_only) and what of the
    index can be checked without reading every object: the backend's own check, and that it
    holds each thread's tip. Everything else is listed in ``rep.not_checked``."""
    from .index_sync import check_index_only

    name = rep.objects_from
    problems, rep.remote_packs, skipped = check_index_only(repo, on_remote)
    for sev, kind, msg, oid in problems:
        add(Problem(sev, kind, msg, oid))
    rep.not_checked += [
        f"the objects (hash, encoding, type): they are on remote {name}, not here; each is re-hashed when it is "
        f"read (index sync reads every new one ahead), and `convgit fsck --remote {name}` checks its packs",
        "parents, blobs and turns between objects, and reachability: they are inside the objects",
    ] + skipped
    if not check_index:
        return
    try:
        verdict = repo.index.quick_check()
        if verdict and verdict != "ok":
            add(Problem("error", "index", f"the index's own check says {verdict}"))
        recorded = repo.index.thread_tips()
    except ConvgitError as e:
        add(Problem("error", "index", f"the index cannot be read: {e.message}"))
        return
    except Exception as e:  # a damaged database file (the backends' own errors)
        add(Problem("error", "index", f"the index cannot be read: {e}"))
        return
    threads = repo.refs.read_all(broken={})
    behind = sorted(n for n, tip in threads.items() if recorded.get(n) != tip)
    if behind:
        add(Problem("warning", "index", f"the index is behind {len(behind)} thread(s) (the next command catches up): "
                                        + ", ".join(behind[:5])))
    extra = sorted(set(recorded) - set(threads))
    if extra:
        add(Problem("warning", "index", f"the index lists {len(extra)} thread(s) that do not exist (the next command "
                                        "catches up): " + ", ".join(extra[:5])))
    rep.not_checked.append("the index against a rebuild: a rebuild reads every object from the remote by range "
                           "(`convgit reindex` rebuilds it)")


INDEX_CHECK_TRIES = 3


def _check_index(repo, add) -> None:
    """The live index must hold what a rebuild from the objects holds (Index.check). A
    difference counts only when no ref moved during the comparison (the refs journal is
    where every move is written): a commit made between the rebuild and the reading of the
    live index is not damage, so the comparison is made again, and after
    ``INDEX_CHECK_TRIES`` busy attempts fsck says it could not compare (a warning)."""
    for _ in range(INDEX_CHECK_TRIES):
        before = _refs_moment(repo)
        found = repo.index.check()
        if not found:
            return
        if _refs_moment(repo) == before:
            for msg in found:
                add(Problem("error", "index", msg))
            return
    add(Problem("warning", "index", f"refs moved during each of {INDEX_CHECK_TRIES} comparisons of the index with "
                "a rebuild (a writer is busy): the index was not compared; run fsck again when the store is quiet"))


def _refs_moment(repo) -> tuple:
    """What changes whenever a ref moves: the refs journal (every move is appended to it),
    packed-refs (gc, auto-packing and batch moves rewrite it), by inode, size and mtime, and
    the tips themselves (a move whose journal line was written just before the comparison
    began renames its ref during it)."""
    return (tuple(sorted(repo.refs.read_all(broken={}).items())),
            *fsio.stat_fingerprint(repo.refs.journal_path, repo.refs.packed_path))


__all__ = ["FsckReport", "Problem", "fsck", "Blob", "ObjectMissing", "THREADS"]


def _check_packed_logs(repo, add) -> bool:
    """``packed-logs`` (docs/format.md §4.2): its checksum, every chunk, the order. False when
    it cannot be read (its reflogs are then reported unreadable as a whole)."""
    path = repo.path / PACKED_LOGS
    if path.is_symlink():
        add(Problem("error", "bad_reflog", f"{PACKED_LOGS} is a symlink (refused; remove it by hand)"))
        return False
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return True
    except OSError as e:
        add(Problem("error", "bad_reflog", f"cannot read {PACKED_LOGS}: {e.strerror}"))
        return False
    problems = verify(data)
    for p in problems:
        add(Problem("error", "bad_reflog", p + " (gc refuses until it is restored from a backup)"))
    return not problems


def _all_logs(repo, add, packed_ok: bool):
    """(thread name or None for an archived reflog, where to say it is, its bytes): every live
    reflog (packed part and loose file) and every archived one."""
    refs = repo.refs
    for name, path in refs.iter_log_files():
        if name is not None and packed_ok:
            continue  # read below, with its packed part
        try:
            raw = path.read_bytes()
        except OSError as e:
            add(Problem("error", "bad_reflog", f"cannot read {path}: {e.strerror}"))
            continue
        yield name, str(path.relative_to(repo.path)), raw
    if not packed_ok:
        return
    for name in refs.live_log_names():
        try:
            raw = refs.log_bytes(name)
        except (OSError, ConvgitError) as e:
            add(Problem("error", "bad_reflog", f"cannot read the reflog of {name!r}: {getattr(e, 'message', e)}"))
            continue
        loose = refs.log_path(name).exists()
        packed = refs._packed_log(name) is not None
        where = f"logs/{THREADS}/{name}" + (" (packed in packed-logs)" if packed and not loose else
                                            " (and its part in packed-logs)" if packed else "")
        yield name, where, raw
