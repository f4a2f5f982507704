"""``gc``: pack loose objects, prune what nothing reaches, expire old reflog entries.

Safety rules (git, restic and borg's):
- gc holds the store lock exclusively, so no writer runs while it marks and sweeps; a second
  gc does not wait, it skips.
- It fails closed: an unreadable, badly named or dangling ref, or a reflog naming a missing
  object, stops it before anything is deleted.
- Unreachable objects are deleted only when older than the grace period (objects written by
  a process that died before moving its ref stay for two weeks), and so is everything they
  reach. Writers refresh an existing object's mtime, which restarts its grace.
- The new pack is durable before any loose object or old pack it replaces is deleted, so a
  crash or a kill at any point leaves every object readable.
- Every loose ref is moved into ``packed-refs`` (RefStore.pack_refs, docs/format.md §6.4);
  it refuses while ``packed-refs`` has a line no reader can use.
- Reflog entries that name a turn are history (a call's model, time, tokens): never expired.
  Only moves that happened root anything (the chain of lines ending at the tip,
  refformat.applied_entries): a line a crash cut short roots nothing, and its objects may be
  missing without gc refusing. Expiry never cuts that chain (``_expire``).
- Provenance is data: a turn is kept as long as it records a reachable message (its output,
  or a message it gives time/model/source for), whatever happened to the ref or reflog that
  named it (a deleted thread's turns live on for the forks that still hold its messages), and
  an import turn keeps the per-message turns it lists (``keep_provenance``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from dataclasses import asdict, dataclass, field

from . import fsio
from .config import Config, crash_point, inherited_gc_lock, parse_age
from .errors import ConvgitError, GcRefused, InvalidInput, ObjectCorrupt, ObjectMissing
from .graph import keep_recording_turns, mark_reachable
from .ids import check_thread_name, is_oid
from .objects import Message, Turn
from .pack import PackWriter
from .refs import broken_ref_fix, format_reflog_line, parse_log, parse_rename
from .refformat import ReflogEntry, applied_entries
from .remotes.tracking import TrackingRefs, remote_names

# The defaults of [gc] auto_threshold and auto_pack_limit: gc --auto does nothing below this
# many loose objects (estimated: convgit/gc_auto.py) while there are no more packs than this.
AUTO_LOOSE_THRESHOLD = Config.gc_auto_threshold
AUTO_PACK_LIMIT = Config.gc_auto_pack_limit
GC_LOG = "gc.log"


@dataclass
class GcStats:
    """What gc did (or, with ``dry_run``, would do): objects and packs before and after,
    pruned objects, expired reflog entries, seconds per phase."""

    status: str = "done"  # done | skipped | nothing-to-do | dry-run
    reason: str | None = None
    mode: str = "full"  # full: marked, packed, pruned | merge: gc --auto on a large store, packs merged beside writers
    objects_before: int = 0
    objects_after: int = 0
    loose_before: int = 0
    loose_after: int = 0
    packs_before: int = 0
    packs_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    reachable: int = 0
    kept_young: int = 0
    pruned: int = 0
    packed: int = 0
    reflog_expired: int = 0
    temp_removed: int = 0
    refs_packed: int = 0  # loose refs moved into packed-refs
    vectors_dropped: int = 0  # vectors (.convgit/vectors/) of pruned messages, dropped
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step (scan, mark, pack, sweep, index)
    pruned_ids: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def lap(self, phase: str, t0: list[float]) -> None:
        """Add the time since ``t0[0]`` to ``phase`` and restart the clock."""
        now = time.perf_counter()
        self.phases[phase] = round(self.phases.get(phase, 0.0) + now - t0[0], 3)
        t0[0] = now

    def to_json(self) -> dict:
        """The ``gc --json`` document (at most 1,000 pruned ids listed)."""
        d = asdict(self)
        d["pruned_ids"] = d["pruned_ids"][:1000]
        if not d["warnings"]:
            del d["warnings"]
        return d


def parse_prune(value: str | int | None, default_seconds: int | None) -> float | None:
    """Grace in seconds: ``now`` (0), ``never`` (None), ``2w``/``3d``/``12h``/``90m``/``30s``,
    git's ``2.weeks.ago``, or plain seconds."""
    if value is None:
        return None if default_seconds is None else float(default_seconds)
    if isinstance(value, int):
        return float(value)
    return parse_age(value, "--prune")


def _disk_usage(path, *, skip_fanout: bool = False) -> int:
    """Apparent bytes under ``path`` (``skip_fanout``: not counting loose objects' directories)."""
    total = 0
    for dp, dirs, files in os.walk(path):
        if skip_fanout and dp == str(path):
            dirs[:] = [d for d in dirs if len(d) != 2]
        for f in files:
            try:
                total += os.lstat(os.path.join(dp, f)).st_size
            except FileNotFoundError:
                pass
    return total


def count_loose(objects) -> int:
    """How many loose objects ``objects`` holds."""
    return sum(1 for _ in objects.iter_loose())


def gc(repo, *, prune: str | int | None = None, dry_run: bool = False, auto: bool = False,
       now: float | None = None, progress=None) -> GcStats:
    """Run gc on ``repo`` (see the module docstring). Returns what it did. ``progress(done,
    total)``: objects marked (and packed) so far, out of every object the store holds."""
    t0 = time.perf_counter()
    now = time.time() if now is None else now
    grace = parse_prune(prune, repo.config.grace_seconds)
    stats = GcStats()
    merge_only = False
    if auto:
        from .gc_auto import gc_due

        due = gc_due(repo)  # the estimate a write's check uses: a gc it started always acts
        if not due:
            stats.status = "nothing-to-do"
            stats.loose_before = stats.loose_after = due.loose_estimate
            return stats
        # A store too large to mark while every writer waits: merge beside them instead.
        merge_only = not dry_run and \
            sum(p.count for p in repo.objects.packs()) + due.loose_estimate > repo.config.gc_auto_mark_limit
    gc_fd = inherited = _inherited_lock(repo) if auto else None
    if gc_fd is None:
        gc_fd = fsio.try_flock(repo.path / "gc.lock", shared=False)
    if gc_fd is None and not auto:
        gc_fd = _after_compaction(repo)
    if gc_fd is None:
        stats.status, stats.reason = "skipped", "another gc or an fsck is running"
        return stats
    try:
        if merge_only:
            _merge_beside_writers(repo, stats)
        else:
            _mark_and_sweep(repo, stats, grace, now, dry_run, progress)
    finally:
        if inherited is None:  # an inherited lock is held until the process exits (gc.log written)
            os.close(gc_fd)
    stats.seconds = round(time.perf_counter() - t0, 3)
    if not dry_run and stats.status == "done":
        fsio.append_line(
            repo.path / GC_LOG,
            json.dumps({k: v for k, v in stats.to_json().items() if k != "pruned_ids"} | {"finished_at": int(now * 1000)}) + "\n",
            fsync=repo.config.fsync,
        )
        # A gc that went well (by hand, from cron or in the background) ends the pause a
        # failed background gc's log put on automatic gcs (gc_auto.AUTO_LOG).
        from .gc_auto import AUTO_LOG

        log = repo.path / AUTO_LOG
        if log.is_file() and log.stat().st_size:
            fsio.truncate(log, 0)
    return stats


def _mark_and_sweep(repo, stats: GcStats, grace: float | None, now: float, dry_run: bool, progress) -> None:
    """The full gc: one transaction, the store lock held exclusively (an interrupted merge
    rolled forward first). The index is rebuilt from what is left after the lock is released:
    writers need not wait for it (it is a cache; a commit racing the rebuild is caught up on
    the next refresh, which compares every ref with the tip the index recorded)."""
    with repo.transaction(exclusive=True, index="none", index_after_unlock=True, recover=not dry_run) as tx:
        _run(repo, stats, grace, now, dry_run, progress)
        if not dry_run:
            clock = [time.perf_counter()]
            repo.objects.packs(reload=True)
            # Rebuilt when objects were pruned (their rows go); otherwise caught up in place
            # (never swapped: other processes' open index connections stay valid). The
            # journal was rotated, so only reading every ref can tell the index nothing
            # moved: gc pays that once here, and the next command (status) reads none.
            tx.index_mode = "rebuild" if stats.pruned else "refresh"
    if not dry_run:
        stats.warnings.extend(tx.warnings)
        _finish_stats(repo, stats, clock)


COMPACT_LOCK = "compact.lock"  # held by a serve committer's pack merge (serve/compact.py) with gc.lock


def _merge_beside_writers(repo, stats: GcStats) -> None:
    """gc --auto on a store of more than ``gc.auto_mark_limit`` objects: its packs merged
    geometrically and its loose objects packed (convgit/pack_merge.py), nothing marked and
    nothing pruned, under ``gc.lock`` (held by the caller) and ``compact.lock`` (a gc asked
    for by hand waits for it), with the store lock *shared*: writers go on meanwhile. Marking
    a million objects takes minutes, and under the exclusive lock every writer would wait
    that long (and fail ``locked`` after ``core.lock_timeout``). Pruning and reflog expiry
    are left to ``convgit gc``."""
    from .pack_merge import merge_packs

    clock = [time.perf_counter()]
    mark = fsio.try_flock(repo.path / COMPACT_LOCK, shared=False)
    try:
        stats.mode = "merge"
        with repo.write_lock():
            packs = repo.objects.packs(reload=True)
            stats.packs_before, stats.loose_before = len(packs), count_loose(repo.objects)
            stats.objects_before = sum(p.count for p in packs) + stats.loose_before
            done = merge_packs(repo.objects, min_loose=1, max_objects=None)
            packs = repo.objects.packs(reload=True)
            stats.packs_after, stats.loose_after = len(packs), count_loose(repo.objects)
            stats.objects_after = sum(p.count for p in packs) + stats.loose_after
        stats.packed = done.loose_packed if done is not None else 0
        stats.lap("merge", clock)
    finally:
        if mark is not None:
            os.close(mark)


def _after_compaction(repo) -> int | None:
    """``gc.lock`` for a gc asked for by hand that found it busy: while the holder is a serve
    committer's pack merge (short: it holds ``compact.lock`` too), wait for it, up to
    ``core.lock_timeout``; a gc or an fsck holding it is not waited for (None: skipped)."""
    deadline = time.monotonic() + repo.config.lock_timeout
    while True:
        if not fsio.lock_busy(repo.path / COMPACT_LOCK):  # no merge runs: whoever holds gc.lock, this gc skips
            return fsio.try_flock(repo.path / "gc.lock", shared=False)  # (unless it just ended)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)
        fd = fsio.try_flock(repo.path / "gc.lock", shared=False)
        if fd is not None:
            return fd


def _inherited_lock(repo) -> int | None:
    """The descriptor holding ``gc.lock`` that a background gc was started with (gc_auto.py),
    if it really is that lock file (else None: the lock is taken as usual)."""
    fd = inherited_gc_lock()
    if fd is None:
        return None
    try:
        held, here = os.fstat(fd), os.stat(repo.path / "gc.lock")
    except OSError:
        return None
    if (held.st_dev, held.st_ino) != (here.st_dev, here.st_ino):
        return None
    return fd


def _roots(repo, now: float, expire_s: float):
    """Ref tips and every live reflog entry's ids, with the reflog rewrites expiry implies.
    Raises GcRefused on anything unreadable or dangling (before anything is deleted)."""
    refs = repo.refs
    roots: list[str] = []
    try:
        tips = refs.read_all()
    except ObjectCorrupt as e:
        raise GcRefused(f"gc refused: {e.message} ({broken_ref_fix(e.details.get('ref'))})") from e
    for name in refs.iter_names():
        try:
            check_thread_name(name)
        except InvalidInput as e:
            raise GcRefused(f"gc refused: a ref file has an invalid name: {name!r}") from e
    packed = refs.packed()
    if packed.bad or not packed.header_ok:
        # A line no reader can use may be a thread whose messages a prune would delete.
        raise GcRefused(f"gc refused: {refs.packed_path.name} has {len(packed.bad)} unreadable line(s); run convgit fsck")
    for name, tip in tips.items():
        if not repo.objects.contains(tip):
            raise GcRefused(f"gc refused: thread {name!r} points at missing object {tip}", thread=name)
        roots.append(tip)
    # Remote-tracking refs (refs/remotes/NAME/THREAD) root what a fetch brought and no
    # thread names yet (pulled later): the same fail-closed rules as threads.
    for remote in remote_names(repo.path):
        try:
            tracked = TrackingRefs(repo.path, remote).read_all()
        except ObjectCorrupt as e:
            raise GcRefused(f"gc refused: remote-tracking ref of {remote}: {e.message}") from e
        for name, tip in tracked.items():
            if not repo.objects.contains(tip):
                raise GcRefused(f"gc refused: remote-tracking ref {remote}/{name} points at missing object {tip}")
            roots.append(tip)
    rewrites = {}
    # A deleted thread's archived reflog roots nothing: deleting a thread and pruning frees
    # what no other thread reaches. Its turns that still record a reachable message are kept
    # by keep_provenance, not by this reflog. Live reflogs: loose and packed (docs/format.md §4.2).
    for name in refs.live_log_names():
        path = refs.log_path(name) if refs.packed_logs() is None else f"logs/refs/threads/{name}"
        try:
            raw = refs.log_bytes(name)
        except OSError as e:
            raise GcRefused(f"gc refused: cannot read reflog {path}: {e.strerror}") from e
        except ObjectCorrupt as e:
            raise GcRefused(f"gc refused: {e.message}") from e
        lines = raw.decode("utf-8", "replace").splitlines()
        entries = parse_log(raw)
        if len(entries) != sum(1 for ln in lines if ln.strip()):
            raise GcRefused(f"gc refused: reflog {path} has unreadable lines")
        keep = _expire(entries, tips.get(name), now, expire_s)
        applied = applied_entries(keep, tips.get(name))
        for e in applied:
            for oid in (e.new, e.old, e.turn):
                if oid is not None:
                    roots.append(oid)
            if e.turn is not None and not repo.objects.contains(e.turn):
                raise GcRefused(f"gc refused: reflog {Path(path).name} names missing turn {e.turn}")
        if len(keep) != len(entries):
            rewrites[name] = (len(entries), keep)
    return roots, rewrites


def _expire(entries: list[ReflogEntry], tip: str | None, now: float, expire_s: float) -> list[ReflogEntry]:
    """The entries of a live reflog that expiry keeps (docs/format.md §10 step 1).

    A line naming a turn, a rename and a line younger than ``expire_s`` are kept. The moves
    that happened are the chain of lines ending at ``tip`` (refformat.applied_entries), and
    the index, ``reflog`` and the serve drain read them so: dropping an old move in the
    middle of that chain would cut it, and every kept move before the cut would read as
    one that never happened. So a run of expired moves of the chain that a kept move comes
    before is replaced by one line from where the run starts to where it ends (rooting
    nothing its neighbours do not: its ``old`` is the previous kept move's ``new``, its
    ``new`` the next one's ``old`` or the tip), placed where the run ended; a line of a move
    that never happened written in the middle of such a run goes with it (the chain read
    back from the bridge must not meet it). A run with no kept move before it goes (nothing
    before it depends on it). Lines of moves that never happened are otherwise kept or
    expired by the same age rule; they root nothing (``_roots``)."""
    on = {id(e) for e in applied_entries(entries, tip)}
    keep: list[ReflogEntry] = []
    run: list[ReflogEntry] = []  # expired moves of the chain since the last kept one
    start = end = 0  # where in ``keep`` the run started, and where it stood after its last line
    moved_before = False  # a kept move of the chain comes before the run

    def close_run() -> None:
        nonlocal run
        after = keep[end:]
        del keep[start:]
        if moved_before:
            keep.append(run[0] if len(run) == 1 else
                        ReflogEntry(run[0].old, run[-1].new, run[-1].time_ms, None, f"expired: {len(run)} moves"))
        keep.extend(after)
        run = []

    for e in entries:
        # A rename is history too: it is how a fork names its source after a rebuild. A line
        # with neither tip (a delete of an unreadable ref, in a restored thread's reflog) is
        # where the walk goes on from an unknown tip: a bridge over it would cut the chain.
        live = (e.turn is not None or parse_rename(e.message) is not None or (e.old is None and e.new is None)
                or (now * 1000 - e.time_ms) < expire_s * 1000)
        if id(e) not in on:
            if live:
                keep.append(e)
            continue
        if not live:
            if not run:
                start = len(keep)
            run.append(e)
            end = len(keep)
            continue
        if run:
            close_run()
        keep.append(e)
        moved_before = True
    if run:
        close_run()
    return keep


def keep_provenance(objects, all_ids: set[str], reachable: set[str], *, on_missing=None, visit=None) -> set[str]:
    """``reachable`` grown by the provenance rule (docs/format.md §10): every stored turn that
    nothing marked but that records a reachable message (graph.records_reachable) is kept,
    with everything it reaches, until nothing more changes. Reads each unmarked object once.
    Returns ``reachable`` (extended in place)."""
    turns: dict[str, Turn] = {}
    parents: dict[str, str | None] = {}
    for oid in all_ids - reachable:
        try:
            obj = objects.read(oid)
        except (ObjectMissing, ObjectCorrupt):
            continue  # not marked: nothing reachable depends on it
        if isinstance(obj, Turn):
            turns[oid] = obj
        elif isinstance(obj, Message):
            parents[oid] = obj.parent
    keep_recording_turns(turns, reachable, parents.get,
                         lambda keep: mark_reachable(objects, keep, on_missing=on_missing, visit=visit, seen=reachable))
    return reachable


def _run(repo, stats: GcStats, grace: float | None, now: float, dry_run: bool, progress=None) -> None:
    clock = [time.perf_counter()]
    objects = repo.objects
    if not dry_run:
        if repo.config.fsync:
            # What writers did before this gc is durable before gc acts on it: a delete's
            # reflog archiving, say, which a power loss could otherwise undo after gc pruned
            # what that reflog names (the reflog would then name missing turns).
            fsio.sync_filesystem(repo.path)  # writers' earlier work, before gc acts on it
        for d in os.listdir(repo.path):  # a gc cut short left its trash: objects it was deleting
            if d.startswith(TRASH_PREFIX):
                fsio.rmtree(repo.path / d)
    objects.packs(reload=True)
    loose = list(objects.iter_loose())
    loose_set = set(loose)
    packs = objects.packs()
    packed_ids: dict[str, object] = {}
    for p in packs:
        for oid in p.ids():
            packed_ids.setdefault(oid, p)
    stats.loose_before, stats.packs_before = len(loose), len(packs)
    all_ids = loose_set | packed_ids.keys()
    stats.objects_before = len(all_ids)

    # A damaged pack index (or a pack without its file): what it holds is unknown, so nothing
    # may be pruned. (Damaged pack data stops the mark below, which reads what it keeps.)
    damaged = sorted(objects.bad_packs) + [p.idx_path.name for p in packs if not p.idx_ok()]
    damaged += [p.pack_path.name + " is missing" for p in packs if not p.pack_path.exists()]
    if damaged:
        raise GcRefused(f"gc refused: damaged pack(s): {'; '.join(damaged)}; run convgit fsck")
    expire_s = repo.config.reflog_expire_days * 86400
    roots, rewrites = _roots(repo, now, expire_s)
    expired: dict[str, bytes] = {}
    stats.lap("scan", clock)
    stats.reflog_expired = sum(n - len(keep) for n, keep in rewrites.values())

    def missing(oid, by):
        # A reachable object is missing: the store is already damaged. Fail closed.
        raise GcRefused(f"gc refused: object {oid} (referenced by {by or 'a ref or reflog'}) is missing; run convgit fsck")

    # Mark, and pack as it goes: each reachable object is read once, and written to the new
    # pack in mark order (a thread's messages side by side, sharing a compressed chunk). Every
    # packed object is rewritten too when the packs are many or of version 1.
    repack_all = len(packs) > repo.config.gc_auto_pack_limit or any(p.version < 2 for p in packs)
    writer = None if dry_run else _Packer(objects, fsync=repo.config.fsync)
    later: list[str] = []  # reachable packed objects, in mark order (for a repack decided after the mark)
    loose_bytes = 0
    marked = [0]

    def visit(oid: str, data: bytes) -> None:
        nonlocal loose_bytes
        if progress is not None:
            marked[0] += 1
            if marked[0] % 256 == 0:
                progress(marked[0], len(all_ids))
        is_loose = oid in loose_set
        if is_loose:
            loose_bytes += len(data)
        elif not repack_all:
            later.append(oid)
            return
        if writer is not None:
            writer.add(oid, data, loose=is_loose)

    try:
        try:
            reachable = mark_reachable(objects, roots, on_missing=missing, visit=visit)
            reachable = keep_provenance(objects, all_ids, reachable, on_missing=missing, visit=visit)
        except ObjectCorrupt as e:
            raise GcRefused(f"gc refused: {e.message}; run convgit fsck") from e
        stats.lap("mark", clock)
        if progress is not None:
            progress(len(all_ids), len(all_ids))  # the rest is unreachable: nothing to read
        crash_point("gc_after_mark")
        stats.reachable = len(reachable)

        def age(oid: str) -> float:
            try:
                if oid in packed_ids and not objects.is_loose(oid):
                    return now - os.stat(packed_ids[oid].pack_path).st_mtime  # type: ignore[attr-defined]
                return now - os.stat(objects._file(oid)).st_mtime
            except FileNotFoundError:
                return float("inf")

        unreachable = all_ids - reachable
        if grace is None:
            young = set(unreachable)
        else:
            young = {oid for oid in unreachable if age(oid) < grace}
        if young:  # git's rule: what a young object reaches is kept with it
            young |= mark_reachable(objects, young, on_missing=lambda o, b: None)
        doomed = unreachable - young
        stats.kept_young = len(young - reachable)
        stats.pruned = len(doomed)
        stats.pruned_ids = sorted(doomed)
        for oid in loose_set - reachable:
            try:
                loose_bytes += os.lstat(objects._file(oid)).st_size
            except FileNotFoundError:
                pass
        stats.bytes_before = loose_bytes + _disk_usage(repo.path / "objects", skip_fanout=True)

        # Everything reachable ends up in packs; young unreachable objects stay as they are.
        # Pruning a packed object means rewriting its pack: then every packed object is.
        repack_all = repack_all or any(oid in packed_ids for oid in doomed)
        if dry_run:
            stats.status = "dry-run"
            stats.packed = sum(1 for oid in reachable if oid in loose_set)
            stats.objects_after = stats.objects_before - stats.pruned
            stats.bytes_after = stats.bytes_before
            return
        assert writer is not None
        if repack_all:
            for oid in later + sorted(o for o in young - reachable if o in packed_ids):
                writer.add(oid, objects.read_bytes(oid), loose=False)
            old_packs = packs
        else:
            old_packs = []

        # 1. Reflog expiry (the entries dropped hold nothing gc still needs): the reflogs
        #    rewritten are packed so, with the others, in step 4.
        expired = {name: "".join(format_reflog_line(e.old, e.new, e.time_ms, e.turn, e.message) for e in keep).encode()
                   for name, (_, keep) in rewrites.items()}

        # 2. The new pack, durable before anything it replaces is deleted.
        writer.finish()
        stats.packed = writer.packed
        packer, writer = writer, None
    finally:
        if writer is not None:
            writer.abort()
    stats.lap("pack", clock)
    crash_point("gc_after_pack")
    objects.packs(reload=True)

    # 3. Delete loose copies now packed (those of finished intermediate packs are already
    #    being deleted), unreachable old objects, then replaced packs.
    #    Loose copies now packed go in any order (the pack holds them). Unreachable loose
    #    objects first move, referrers before what they refer to, into one trash directory,
    #    whose entries a power loss keeps only as a prefix: a message never loses its parent
    #    or blobs while it stays (stored messages stay closed under "parent of").
    _trash(repo, [oid for oid in loose if oid in doomed and oid not in packer.swept])
    sweep = [oid for oid in loose if oid in reachable and oid not in packer.swept]
    if sweep:
        fsio.unlink(objects._file(sweep[0]))
        crash_point("gc_mid_sweep")
        _unlink_all([objects._file(oid) for oid in sweep[1:]])
    packer.wait()
    for p in old_packs:
        if p.pack_path.name.startswith("pack-") and p.idx_path.exists():
            p.close()
            fsio.unlink(p.idx_path)  # the idx first: readers stop looking in it
            fsio.unlink(p.pack_path)
    _remove_empty_fanout(objects)
    stats.temp_removed = _remove_stale_temp(repo, grace if grace is not None else float("inf"), now)
    # 4. Refs: every loose ref into packed-refs, every live reflog into packed-logs (with the
    #    expiry's rewrites; values unchanged: no journal line needed, the journal is rotated
    #    just below, so every index reads every ref once). Format 3 is declared first.
    try:
        stats.refs_packed = repo.pack_refs(rewrites=expired)
    except ObjectCorrupt as e:  # checked by _roots already; changed since only behind our back
        raise GcRefused(f"gc refused: {e.message} ({broken_ref_fix(e.details.get('ref'))})") from e
    repo.refs.rotate_journal()  # no writer runs: a fresh journal (every index reads every ref once)
    if repo.config.fsync:  # every deletion durable in one flush (not one fsync per fan-out directory)
        fsio.sync_filesystem(repo.path)
    stats.lap("sweep", clock)
    crash_point("gc_before_index")


# Deleting loose files one at a time is bound by the file system's per-unlink latency (on a
# disk mounted with online discard, ~40-130 us each): a few threads overlap those waits, and
# a large gc starts deleting while it still marks (see _Packer).
_UNLINK_THREADS = 16
_UNLINK_PARALLEL_ABOVE = 1000
PACK_SPLIT = 131072  # objects per pack when a gc packs more than this


def _unlink_batches(paths: list[str]) -> list[list[str]]:
    step = max(1, len(paths) // (_UNLINK_THREADS * 8))
    return [paths[i:i + step] for i in range(0, len(paths), step)]


def _unlink_each(paths: list[str]) -> None:
    for p in paths:
        fsio.unlink(p)


def _unlink_all(paths: list[str]) -> None:
    if len(paths) <= _UNLINK_PARALLEL_ABOVE:
        _unlink_each(paths)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(_UNLINK_THREADS) as ex:
        for f in [ex.submit(_unlink_each, b) for b in _unlink_batches(paths)]:
            f.result()  # the first error (StorageFailed) is raised here


class _Packer:
    """What gc marks, packed as it is read. Every PACK_SPLIT objects the pack is finished
    (durable: pack, idx and directory fsynced) and the loose copies it holds are handed to
    background threads to delete while the mark goes on, so the slowest step of a large gc
    (deleting a million small files) overlaps the reading. Only loose copies of objects in a
    durable pack are deleted early; nothing unreachable is deleted before the mark is done."""

    def __init__(self, objects, *, fsync: bool) -> None:
        self.objects, self.fsync = objects, fsync
        self.writer: PackWriter | None = PackWriter(objects.pack_dir, fsync=fsync)
        self.pending: list[str] = []  # loose ids in the open pack
        self.swept: set[str] = set()  # loose ids handed to the deleters
        self.packed = 0
        self._pool = None
        self._futures: list = []

    def add(self, oid: str, data: bytes, *, loose: bool) -> None:
        assert self.writer is not None
        self.writer.add(oid, data, verified=True)  # mark_reachable has just re-hashed it
        if loose:
            self.pending.append(oid)
        if len(self.writer) >= PACK_SPLIT:
            self.finish()
            self._sweep_pending()
            self.writer = PackWriter(self.objects.pack_dir, fsync=self.fsync)

    def finish(self) -> None:
        assert self.writer is not None
        self.packed += len(self.writer)
        self.writer.finish()
        self.writer = None

    def _sweep_pending(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        if self._pool is None:
            self._pool = ThreadPoolExecutor(_UNLINK_THREADS)
        paths = [self.objects._file(oid) for oid in self.pending]
        self.swept.update(self.pending)
        self.pending = []
        self._futures += [self._pool.submit(_unlink_each, b) for b in _unlink_batches(paths)]

    def wait(self) -> None:
        """Every early deletion done (its first error raised)."""
        try:
            for f in self._futures:
                f.result()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
            self.writer = None
        self.wait()


def _finish_stats(repo, stats: GcStats, clock: list[float]) -> None:
    # 4. After the index (the transaction's end): what the store holds now.
    objects = repo.objects
    if stats.pruned and (repo.path / "vectors").is_dir():
        # Vectors are derived from messages: those of pruned messages go too (semantic.py).
        from .semantic import drop_orphan_vectors

        try:
            stats.vectors_dropped = drop_orphan_vectors(repo, objects.contains)
        except (ConvgitError, OSError) as e:
            stats.warnings.append(f"vectors not compacted ({e}); the next gc tries again")
    stats.loose_after = sum(1 for _ in objects.iter_loose())
    stats.packs_after = len(objects.packs())
    stats.objects_after = stats.objects_before - stats.pruned  # each kept object is still stored
    stats.bytes_after = _disk_usage(repo.path / "objects")
    stats.lap("index", clock)


def _remove_empty_fanout(objects) -> None:
    for d in os.listdir(objects.path):
        if len(d) == 2:
            fsio.rmdir(objects.path / d)  # only succeeds when empty; writers recreate it


TRASH_PREFIX = f"{fsio.TMP_PREFIX}trash-"


def _trash(repo, oids: list[str]) -> None:
    """Delete unreachable loose objects so that a power loss at any point keeps a set closed
    under references: each is renamed into one trash directory (``tmp_trash-*``), turns
    first, then messages deepest first, then blobs and the rest; the directory then goes."""
    if not oids:
        return
    objects = repo.objects
    rank: dict[str, tuple] = {}
    parent: dict[str, str | None] = {}
    for oid in oids:
        try:
            obj = objects.read(oid)
        except (ObjectCorrupt, ObjectMissing):
            rank[oid] = (0, 0)  # unreadable: refers to nothing we can tell; first
            continue
        if isinstance(obj, Turn):
            rank[oid] = (1, 0)
        elif isinstance(obj, Message):
            parent[oid] = obj.parent
        else:
            rank[oid] = (3, 0)
    depth: dict[str, int] = {}
    for oid in parent:  # depth among the doomed messages (a chain's deepest message first)
        chain = []
        o: str | None = oid
        while o in parent and o not in depth:
            chain.append(o)
            o = parent[o]
        d = depth.get(o, -1) if o in parent else -1
        for c in reversed(chain):
            d += 1
            depth[c] = d
    for oid, d in depth.items():
        rank[oid] = (2, -d)
    trash = repo.path / f"{TRASH_PREFIX}{os.getpid()}-{time.monotonic_ns()}"
    fsio.makedirs(trash)
    for i, oid in enumerate(sorted(oids, key=lambda o: (rank[o], o))):
        fsio.rename(objects._file(oid), trash / f"{i:09d}-{oid}")
    crash_point("gc_mid_sweep")
    if repo.config.fsync:
        fsio.sync_filesystem(repo.path)  # the renames out, before the files go
    fsio.rmtree(trash)


def _remove_stale_temp(repo, grace: float, now: float) -> int:
    """Leftovers of interrupted writes older than the grace period: temp files (``tmp_*``)
    anywhere in the store, merge quarantine directories (``objects/incoming-*``) and packs
    whose index was never written. Runs under the exclusive lock, so no writer owns them."""
    n = 0

    def old(p) -> bool:
        try:
            return now - os.stat(p).st_mtime >= grace
        except FileNotFoundError:
            return False

    for dp, _, files in os.walk(repo.path):
        for f in files:
            if not f.startswith(fsio.TMP_PREFIX):
                continue
            p = os.path.join(dp, f)
            if old(p):
                fsio.unlink(p)
                n += 1
    for d in os.listdir(repo.path):  # scratch directories (fsck's throw-away index)
        p = repo.path / d
        if d.startswith(fsio.TMP_PREFIX) and p.is_dir() and old(p):
            fsio.rmtree(p)
            n += 1
    objects = repo.objects
    for q in leftover_quarantines(objects):
        if old(q):
            fsio.rmtree(q)
            n += 1
    for p in orphan_packs(objects):
        if old(p):
            fsio.unlink(p)
            n += 1
    return n


def leftover_quarantines(objects) -> list:
    """Quarantine directories a killed merge left behind (a finished or failed one removes its own)."""
    try:
        return sorted(objects.path / d for d in os.listdir(objects.path) if d.startswith("incoming-"))
    except FileNotFoundError:
        return []


def orphan_packs(objects) -> list:
    """``pack-*.pack`` files without their ``.idx`` (an interrupted move): no reader sees them."""
    try:
        names = set(os.listdir(objects.pack_dir))
    except FileNotFoundError:
        return []
    return sorted(objects.pack_dir / n for n in names
                  if n.startswith("pack-") and n.endswith(".pack") and n[:-5] + ".idx" not in names)


def last_gc(repo) -> dict | None:
    """The last line of gc.log (what status reports), or None."""
    try:
        lines = (repo.path / GC_LOG).read_text("utf-8").splitlines()
    except FileNotFoundError:
        return None
    for ln in reversed(lines):
        try:
            return json.loads(ln)
        except ValueError:
            continue
    return None


__all__ = ["GcStats", "gc", "last_gc", "parse_prune", "is_oid", "ObjectMissing"]
