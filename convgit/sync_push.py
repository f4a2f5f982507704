"""``push``: upload the packs a remote lacks and move its refs by compare-and-swap (docs/remotes.md,
docs/format.md §13), and ``fsck --remote``; the rest of the remotes is convgit/sync.py."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time

from blake3 import blake3

from . import codec, fsio
from .config import crash_point, push_pack_bytes
from .errors import (ConvgitError, InvalidInput, NonFastForward, NotFound, RefStale,
                     RemoteCorrupt)
from .graph import typed_references
from .ids import check_thread_name
from .objects import Message
from .pack import PackWriter
from .refs import RefMove
from .remotes import CasLost
from .refformat import applied_entries
from .remotes.bulkrefs import BULK_MIN, read_logs
from .remotes.refsdoc import MANIFEST_FORMAT, RefsDoc, pack_key, segment_key
from .remotes.tracking import TrackingRefs
from .remotes.syncstate import UnchangedRows
from .sync import (CACHE, MAX_CAS_RETRIES, PUSH_PACK_BYTES, SyncReport, _open, _refs_fp, _Remote,
                   declare_packed_logs)


def _is_ancestor(repo, a: str, b: str) -> bool:
    """Is ``a`` in the history of ``b`` here (``a`` stored here, else False)?"""
    if not repo.objects.contains(a):
        return False
    oid: str | None = b
    while oid is not None:
        if oid == a:
            return True
        if not repo.objects.contains(oid):
            return False  # the remote's history, not fetched yet
        obj = repo.objects.read(oid)
        oid = obj.parent if isinstance(obj, Message) else None
    return False


def _refspec(spec: str) -> tuple[str, str]:
    """``THREAD`` or ``LOCAL:REMOTE`` (push a thread under another name on the remote)."""
    src, sep, dst = spec.partition(":")
    if sep and (not src or not dst):
        raise InvalidInput(f"bad push spec {spec!r}: THREAD or LOCAL:REMOTE")
    check_thread_name(src)
    return src, check_thread_name(dst) if sep else src


def _outgoing(repo, remote: _Remote, tips: dict[str, str], local_of: dict[str, str],
              builder: "_PackBuilder | None" = None) -> tuple[list[str], dict[str, str]]:
    """What the remote lacks of what ``tips`` (remote thread → tip) and their local threads'
    turns reach, in a fixed order (so a re-run builds the same packs), and the turn → remote
    thread of each turn sent. Each object is read once: its bytes go to ``builder`` as they
    are walked (the packs are built in the same pass)."""
    order: list[str] = []
    seen: set[str] = set()
    turn_of: dict[str, str] = {}
    roots: list[str] = []
    logs = read_logs(repo.refs, {local_of[n] for n in tips})  # (all at once: 100,000 threads)
    for name in sorted(tips):
        roots.append(tips[name])
        for e in applied_entries(logs[local_of[name]], tips[name]):  # (not a move a crash cut short)
            if e.turn and e.turn not in turn_of and repo.objects.contains(e.turn):
                turn_of[e.turn] = name
                roots.append(e.turn)
    if builder is not None:
        builder.turn_of = turn_of
    for root in roots:
        stack = [root]
        while stack:
            oid = stack.pop()
            if oid in seen or remote.has(oid):
                continue
            seen.add(oid)
            order.append(oid)
            data = repo.objects.read_bytes(oid)
            if builder is not None:
                builder.add(oid, data)
            stack.extend(ref for ref, _ in typed_references(codec.decode(data, oid)))
    return order, {t: n for t, n in turn_of.items() if t in seen}


class _PackBuilder:
    """The outgoing objects as packs of up to PUSH_PACK_BYTES, written under the cache's
    ``outgoing-*/`` as the walk gives them (``packs``: (idx path, manifest bytes) each)."""

    def __init__(self, repo, remote: _Remote) -> None:
        self.repo, self.remote = repo, remote
        self.out_dir = None
        self.packs: list = []
        self.turn_of: dict[str, str] = {}
        self._w, self._fill, self._turns = None, 0, []
        self._limit = push_pack_bytes(PUSH_PACK_BYTES)

    def add(self, oid: str, data: bytes) -> None:
        if self._w is None:
            if self.out_dir is None:
                self.out_dir = self.repo.path / CACHE / self.remote.name / f"outgoing-{os.getpid()}-{time.monotonic_ns()}"
                fsio.makedirs(self.out_dir)
            self._w, self._fill, self._turns = PackWriter(self.out_dir, fsync=False), 0, []
        self._w.add(oid, data, verified=True)
        self._fill += len(data)
        if oid in self.turn_of:
            self._turns.append([self.turn_of[oid], oid])
        if self._fill >= self._limit:
            self._finish()

    def _finish(self) -> None:
        idx = self._w.finish()
        self._w = None
        manifest = json.dumps({"format": MANIFEST_FORMAT, "turns": self._turns}, sort_keys=True).encode()
        self.packs.append((idx, manifest))

    def finish(self) -> list:
        """Every pack, the last one closed."""
        if self._w is not None:
            self._finish()
        return self.packs

    def cleanup(self) -> None:
        """The packs built go (uploaded, or the push failed)."""
        if self._w is not None:
            self._w.abort()
            self._w = None
        if self.out_dir is not None:
            fsio.rmtree(self.out_dir)


def _upload(remote: _Remote, packs, report: SyncReport, progress=None) -> list[str]:
    """Upload each pack not on the remote yet: pack, manifest, then index (create-only).
    Returns their names."""
    names = []
    total = sum(idx.with_suffix(".pack").stat().st_size for idx, _ in packs)
    done = 0
    fsio.makedirs(remote.cache)
    for idx, manifest in packs:
        name = idx.stem
        names.append(name)
        for ext, data in (("idx", idx.read_bytes()), ("turns", manifest)):  # cached: the next push need not fetch them
            f = remote.cache / f"{name}.{ext}"
            if not f.exists():
                fsio.replace_file(f, data, fsync=False, tmp=f.with_name(f"{fsio.TMP_PREFIX}{name}.{ext}.{os.getpid()}"))
        if remote.store.size(pack_key(name, "idx")) is not None:
            report.packs_skipped += 1  # whole already (an interrupted push, or another pusher)
            continue
        data = idx.with_suffix(".pack").read_bytes()
        remote.settle((), {name: len(data)})
        if progress:
            progress(done, total)  # (before each pack: a one-pack push shows its bar too)
        sent = 0
        if remote.store.put_new(pack_key(name, "pack"), data):
            sent += len(data)
        done += len(data)
        if progress:
            progress(done, total)
        if remote.store.put_new(pack_key(name, "turns"), manifest):
            sent += len(manifest)
        crash_point("push_mid_pack")  # the pack is there, its index is not: never referenced
        idx_bytes = idx.read_bytes()
        if remote.store.put_new(pack_key(name, "idx"), idx_bytes):
            sent += len(idx_bytes)
        report.bytes += sent
        report.packs += 1
        crash_point("push_after_pack")
    return names


def push(repo, remote: str | None = None, threads: list[str] | None = None, *, force: bool = False,
         progress=None) -> SyncReport:
    """Push ``threads`` (default: every thread; ``LOCAL:REMOTE`` pushes thread LOCAL as REMOTE) to ``remote``: upload the packs it lacks,
    then move its refs by compare-and-swap. Fast-forward only: a thread whose remote tip is
    not in its history here raises NonFastForward (nothing moved), unless ``force`` (the
    forced move is recorded in the refs document and in the tracking ref's reflog).
    Returns SyncReport."""
    t0 = time.perf_counter()
    r = _open(repo, remote)
    report = SyncReport("push", r.name, r.url)
    try:
        if not threads and _nothing_to_push(r, report):
            report.seconds = round(time.perf_counter() - t0, 3)
            return report
        refs_fp = _refs_fp(repo.refs)  # (before the threads are read: any move after it changes it)
        local = repo.refs.read_all()
        specs = [(n, n) for n in sorted(local)] if not threads else [_refspec(t) for t in dict.fromkeys(threads)]
        for n, _ in specs:
            if n not in local:
                raise NotFound(f"no thread named {n!r} to push", thread=n)
        tips = {dst: local[src] for src, dst in specs}
        local_of = {dst: src for src, dst in specs}
        names = list(tips)
        if r.doc_digest is None:
            r.read_raw()  # (read by _nothing_to_push already, unless it had no marker to compare with)
        doc = r.parsed()  # (read again if it was not sent, being the one of the marker)
        r.load_indexes(doc)
        _check_tips(r, doc)
        moving = _plan_push(repo, r, doc, tips, force)
        uploaded: list[str] = []
        if moving:
            builder = _PackBuilder(repo, r)
            try:
                order, _ = _outgoing(repo, r, {n: tips[n] for n in moving}, local_of, builder)
                report.objects = len(order)
                built = builder.finish()
                if built:
                    uploaded = _upload(r, built, report, progress)
            finally:
                builder.cleanup()
        for attempt in range(MAX_CAS_RETRIES):
            moving = _plan_push(repo, r, doc, tips, force)
            report.threads = [{"thread": n, "action": moving.get(n, "up-to-date" if doc.threads.get(n) == tips[n] else "behind"),
                               "old": doc.threads.get(n), "new": tips[n]} for n in names]
            if not moving:
                break
            new = dataclasses.replace(doc, generation=doc.generation + 1, threads=dict(doc.threads), packs=list(doc.packs),
                                      head=doc.head or _head(repo, tips), forced=list(doc.forced), tag=None)
            new.packs += [p for p in uploaded if p not in new.packs]
            new.retired = {k: v for k, v in doc.retired.items() if k not in new.packs}
            for n in moving:
                if moving[n] == "forced":
                    new.forced.append({"thread": n, "old": doc.threads.get(n), "new": tips[n],
                                       "time_ms": int(time.time() * 1000)})
                new.threads[n] = tips[n]
            try:
                doc = r.write_doc(doc, new)
                r.settle(uploaded)  # their objects are here: a fetch need not count them
                break
            except CasLost:
                report.retries += 1
                time.sleep(random.uniform(0.01, 0.05) * min(attempt + 1, 10))
                doc = r.read_doc()  # another writer moved the refs: check again, never overwrite
                r.load_indexes(doc)
        else:
            raise RefStale(f"push to {r.name}: the refs document kept changing ({MAX_CAS_RETRIES} tries); try again")
        report.generation = doc.generation
        forced = {t["thread"] for t in report.threads if t["action"] == "forced"}
        known = r.tracking_view()  # (the snapshot, while valid: a no-op push reads no file per thread)
        if known is None:
            known = TrackingRefs(repo.path, r.name).read_all(broken={})
        moves = [RefMove(n, doc.threads[n], message=f"push {r.name}" + (" --force" if n in forced else ""))
                 for n in names if n in doc.threads and known.get(n) != doc.threads[n]
                 and repo.objects.contains(doc.threads[n])]
        if moves:
            # (thousands: the exclusive store lock, under which new ones are written packed at once)
            with repo.transaction(index="none", exclusive=len(moves) >= BULK_MIN) as tx:
                for res in tx.move_tracking(r.name, moves, declare_packed=lambda: declare_packed_logs(repo)):
                    if isinstance(res, Exception):
                        raise res
            r.record_tracking(doc)
        if not threads and all(doc.threads.get(n) == tips[n] for n in names):
            _record_pushed(r, doc, refs_fp, names)
        r.save_state(doc)
    finally:
        report.refs_bytes = r.refs_bytes
        r.close()
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def _nothing_to_push(r: _Remote, report: SyncReport) -> bool:
    """A push of every thread with nothing to do, decided from three fingerprints and the
    refs document's digest (state.json's ``pushed``): no thread here has moved since every
    one was at the remote's tip in the refs document with that digest, which the remote
    still has, and no tracking ref has moved since. Nothing parsed, no file per thread."""
    pushed = r._state().get("pushed")
    if not pushed or pushed["refs"] != _refs_fp(r.repo.refs) or pushed["tracking"] != r.tracking_fp():
        return False
    r.read_raw(pushed)
    if r.doc_digest != pushed["doc"]:
        return False
    report.generation = pushed["generation"]
    report.threads = UnchangedRows(lambda: r.repo.refs.read_all(broken={}), "up-to-date")
    return True


def _record_pushed(r: _Remote, doc: RefsDoc, refs_fp: list[int], names: list[str]) -> None:
    """Note (state.json's ``pushed``) that every thread here, as read at ``refs_fp``, is at
    its tip in ``doc`` and so is its tracking ref (the snapshot, valid now, says so)."""
    if r.doc_digest is None:
        return
    fp = r.tracking_fp()
    view = r.tracking_view()
    if view is None:
        r.record_tracking(doc)
        fp = r.tracking_fp()
        view = r.tracking_view()
    if view is None or not all(view.get(n) == doc.threads[n] for n in names):
        return
    if view == doc.threads:
        r.state.key_tracking(fp, r.doc_digest, doc.generation, r.doc_tag, doc.packs)
    r.state.set("pushed", {"doc": r.doc_digest, "refs": refs_fp, "tracking": fp, "generation": doc.generation,
                           "tag": r.doc_tag})


def _head(repo, tips: dict[str, str]) -> str | None:
    try:
        h = repo.refs.read_head()
    except ConvgitError:
        return None
    return h if h in tips else None


def _check_tips(r: _Remote, doc: RefsDoc) -> None:
    """Every remote tip is in a pack the document names (else nothing is built on it). The
    answer is a function of the document alone (packs and their indexes never change), so a
    document this store has checked before (the same bytes) is not checked again."""
    st = r._state()
    if r.doc_digest is not None and st.get("checked") == r.doc_digest:
        return
    for name, tip in doc.threads.items():
        if not r.has(tip):
            raise RemoteCorrupt(f"remote {r.name}: thread {name!r} points at {tip}, which no pack holds: push refused "
                                f"(convgit fsck --remote {r.name})", thread=name)
    if r.doc_digest is not None:
        r.state.set("checked", r.doc_digest)


def _plan_push(repo, r: _Remote, doc: RefsDoc, tips: dict[str, str], force: bool) -> dict[str, str]:
    """thread → "new" / "fast-forward" / "forced" for each thread that moves; a diverged or
    behind thread raises NonFastForward unless ``force``."""
    moving = {}
    refused = []
    for n, tip in tips.items():
        theirs = doc.threads.get(n)
        if theirs == tip:
            continue
        if theirs is None:
            moving[n] = "new"
        elif _is_ancestor(repo, theirs, tip):
            moving[n] = "fast-forward"
        elif _is_ancestor(repo, tip, theirs) and not force:
            continue  # behind the remote (known here since a fetch): nothing to push
        elif force:
            moving[n] = "forced"
        else:
            refused.append(n)
    if refused:
        raise NonFastForward(
            f"push to {r.name} refused: {', '.join(refused)} on the remote holds messages this store lacks or has "
            f"diverged (convgit pull {r.name} first, or push --force to replace it)", threads=refused)
    return moving


# -- fsck --remote ------------------------------------------------------------------------------


def fsck_remote(repo, remote: str | None = None) -> dict:
    """Check remote ``remote``: the refs document parses, its ref segments are there (each
    hashing to its name), every pack it names is there with a sound index named by its
    checksum, every thread's tip is in some pack. Returns
    ``{"remote", "url", "generation", "packs", "threads", "problems": [...], "ok"}``."""
    r = _open(repo, remote)
    problems: list[str] = []
    doc = RefsDoc()
    try:
        try:
            doc = r.read_doc()
        except RemoteCorrupt as e:
            problems.append(e.message)
        for digest, _ in doc.segments:  # asked of the remote itself, whatever this store has cached
            got = r.store.get(segment_key(digest))
            if got is None or blake3(got[0]).hexdigest() != digest:
                problems.append(f"the refs document names ref segment {digest}, which the remote "
                                + ("lacks" if got is None else "holds other bytes under (it does not hash to its name)"))
        for name in doc.packs:
            missing = [ext for ext in ("pack", "idx") if r.store.size(pack_key(name, ext)) is None]
            if missing:  # asked of the remote itself, whatever this store has cached
                problems.append(f"the refs document names pack {name}, whose {' and '.join(missing)} the remote lacks")
                continue
            try:
                r.load_indexes(RefsDoc(packs=[name]))
            except RemoteCorrupt as e:
                problems.append(e.message)
        for thread, tip in doc.threads.items():
            if not r.has(tip):
                problems.append(f"thread {thread!r} points at {tip}, which no pack holds")
    finally:
        r.close()
    return {"remote": r.name, "url": r.url, "generation": doc.generation, "packs": len(doc.packs),
            "threads": len(doc.threads), "problems": problems, "ok": not problems}
