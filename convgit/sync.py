"""Remotes: ``fetch``, ``pull`` and ``clone`` over remote format 2 (docs/format.md §13,
docs/remotes.md); ``push`` and ``fsck --remote`` are convgit/sync_push.py, ``remote
add|list|remove|rename`` convgit/remote_config.py.

push: read the refs document; check every thread to push is new or a fast-forward of the
remote's tip (else non_fast_forward, unless ``force``); walk what the pushed tips and their
turns reach, stopping at what the remote's packs hold (their indexes, cached here: a pack is
immutable); write that as packs of bounded size, each named by its hash, and upload each
once (pack, then its turns manifest, then its index: an index on the remote means its pack
is whole); then move the remote's refs by one compare-and-swap of the refs document that
also names the new packs. A pack is referenced only after it is whole; a lost race re-reads
the document, checks the fast-forwards again and retries with the same packs (never an
overwrite); an interrupted push re-run builds the same packs (same objects, same order,
same bytes) and skips the ones already there.

fetch: read the refs document; download only the packs that hold an object missing here,
next to their cached indexes (the quarantine); verify every object exactly as merge does
(merge.take_objects: re-hash, decode, canonical form, type rules, size limit) and move them
in as one local pack; then record the remote's tips as remote-tracking refs
(refs/remotes/NAME/THREAD). pull: fetch, then merge's ref rules (merge.apply_refs).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from blake3 import blake3

from . import fsio
from .config import crash_point
from .errors import (ConvgitError, InvalidInput, ObjectCorrupt, ObjectMissing, RemoteCorrupt, SourceCorrupt)
from .ids import is_oid
from .merge import MergeReport, apply_refs, take_objects
from .objects import Message
from .pack import Pack
from .refs import RefMove
from .remote_config import CACHE, add_remote, get_remote
from .remotes import open_remote, parse_url
from .remotes.bulkrefs import BULK_MIN, bulk_candidates, read_logs
from .remotes.refsdoc import DOC_KEY, RefsDoc, pack_key, parse
from .remotes.refsegments import Segments
from .remotes.syncstate import RemoteState, UnchangedRows
from .remotes.tracking import TrackingRefs, remote_names

PUSH_PACK_BYTES = 32 << 20  # objects (uncompressed) per uploaded pack: a resumed push re-sends at most one
MAX_CAS_RETRIES = 50


@dataclass
class SyncReport:
    """What a push, fetch, pull or clone moved: bytes and packs each way, the threads."""

    operation: str
    remote: str
    url: str
    bytes: int = 0  # payload bytes moved (uploaded by push, downloaded by fetch), the refs document excluded
    refs_bytes: int = 0  # bytes of the refs document and ref segments sent or received (not sent: a 304)
    packs: int = 0  # packs uploaded or downloaded
    packs_skipped: int = 0  # push: packs already on the remote (a resumed push)
    objects: int = 0  # objects sent (push) or taken (fetch)
    threads: list[dict] | UnchangedRows = field(default_factory=list)  # (a no-op: rows built when read)
    generation: int = 0  # the remote's refs generation after the operation
    retries: int = 0  # push: lost compare-and-swaps retried
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    path: str | None = None  # clone: the new store

    @property
    def moved(self) -> int:
        """Threads that moved (created, fast-forwarded, forced, diverged copies)."""
        return len(self.changed())

    def changed(self) -> list[dict]:
        """The rows of the threads that moved (none when no thread did: rows not built)."""
        if isinstance(self.threads, UnchangedRows):
            return []
        return [t for t in self.threads if t["action"] not in ("same", "kept", "up-to-date", "behind")]

    def to_json(self) -> dict:
        """The ``--json`` document of push, fetch, pull and clone (docs/json.md)."""
        out = {"status": "ok", "operation": self.operation, "remote": self.remote, "url": self.url, "bytes": self.bytes,
               "refs_bytes": self.refs_bytes, "packs": self.packs, "packs_skipped": self.packs_skipped,
               "objects": self.objects, "moved": self.moved,
               "threads": list(self.threads), "generation": self.generation, "retries": self.retries, "seconds": self.seconds}
        if self.path is not None:
            out["path"] = self.path
        if self.warnings:
            out["warnings"] = self.warnings
        return out


# -- the remote, as this store sees it ------------------------------------------------------


class _Remote:
    """A remote opened for one operation: its backend, the refs document, the pack indexes
    (cached under .convgit/remotes/NAME/packs/: immutable, downloaded once)."""

    def __init__(self, repo, name: str, settings: dict) -> None:
        self.repo, self.name, self.url = repo, name, settings["url"]
        self.store = open_remote(self.url, endpoint=settings.get("endpoint"), region=settings.get("region"),
                                 profile=settings.get("profile"))
        self.cache = repo.path / CACHE / name / "packs"
        self.packs: dict[str, Pack] = {}
        self.downloaded: set[str] = set()
        self.quarantine: Path | None = None  # this operation's downloads (fetch), removed at close
        self.manifests: dict[str, list] = {}
        self.state = RemoteState(repo.path / CACHE / name)
        self.doc_digest: str | None = None  # BLAKE3 of the refs document last read
        self._raw: tuple[bytes, str] | None = None  # ... its bytes and tag (None: absent, or not sent)
        self.doc_tag: str | None = None
        self.segments = Segments(self.store, repo.path / CACHE / name / "refs", self.url)
        self.doc_bytes = 0  # bytes of refs.json sent and received
        self._hit: Pack | None = None  # the pack that answered has() last

    def read_raw(self, seen: dict | None = None) -> None:
        """Read the refs document's bytes (not parsed yet: ``doc_digest`` says whether it is
        one seen before; ``parsed()`` parses it). ``seen``: ``{"doc", "tag"}`` of a document
        seen before: while the remote's still has that tag, its bytes are not sent (S3: a
        conditional GET answered 304) and ``doc_digest`` is that document's."""
        if seen and seen.get("tag"):
            got = self.store.get_unless(DOC_KEY, seen["tag"])
            if got is not None and got[0] is None:
                self._raw, self.doc_tag, self.doc_digest = None, got[1], seen["doc"]
                return
        else:
            got = self.store.get(DOC_KEY)
        self._raw = got
        self.doc_tag = got[1] if got is not None else None
        self.doc_digest = blake3(got[0]).hexdigest() if got is not None else None
        self.doc_bytes += len(got[0]) if got is not None else 0

    def parsed(self) -> RefsDoc:
        """The refs document last read, parsed (strictly: refsdoc.parse), its threads laid
        from its ref segments (format 2: refsegments.Segments)."""
        if self._raw is None and self.doc_tag is not None:
            self.read_raw()  # (not sent, being the one seen before: read now)
        if self._raw is None:
            return RefsDoc()
        doc = self.segments.resolve(parse(self._raw[0], self.url))
        doc.tag = self._raw[1]
        return doc

    def read_doc(self) -> RefsDoc:
        self.read_raw()
        return self.parsed()

    def write_doc(self, old: RefsDoc, new: RefsDoc) -> RefsDoc:
        """Replace the refs document ``old`` (as read) by ``new``, by compare-and-swap on
        ``old``'s tag: its ref segments uploaded first, then the document (format 2). Raises
        CasLost when another writer got there first. Returns ``new``, its tag set."""
        data = self.segments.lay(old, new, int(time.time() * 1000)).dump()
        crash_point("push_refs_after_segments")  # a segment nothing names yet: the refs unchanged
        new.tag = self.store.put_if_match(DOC_KEY, data, old.tag)
        self.doc_bytes += len(data)
        self._raw, self.doc_tag = (data, new.tag), new.tag
        self.doc_digest = blake3(data).hexdigest()
        return new

    @property
    def refs_bytes(self) -> int:
        """Bytes of the refs document and ref segments moved so far (the report's refs_bytes)."""
        return self.doc_bytes + self.segments.sent + self.segments.received

    def load_indexes(self, doc: RefsDoc) -> None:
        """Every pack the document names, its index cached and checked; a pack the document
        names but the remote lacks is RemoteCorrupt (nothing is built on such a remote)."""
        fsio.makedirs(self.cache)
        for name in doc.packs:
            if name in self.packs:
                continue
            idx = self.cache / f"{name}.idx"
            if not idx.exists():
                got = self.store.get(pack_key(name, "idx"))
                if got is None or self.store.size(pack_key(name, "pack")) is None:
                    raise RemoteCorrupt(f"remote {self.name}: the refs document names pack {name}, which the remote "
                                        f"lacks: refused (convgit fsck --remote {self.name})", pack=name)
                tmp = idx.with_name(f"{fsio.TMP_PREFIX}{name}.{os.getpid()}")
                fsio.replace_file(idx, got[0], fsync=False, tmp=tmp)
            try:
                p = Pack(idx)
                ok = p.idx_ok() and p.checksum.hex() == name[5:]
            except ObjectCorrupt:
                ok, p = False, None
            if not ok:
                if p is not None:
                    p.close()
                fsio.unlink(idx)
                raise RemoteCorrupt(f"remote {self.name}: the index of pack {name} is damaged", pack=name)
            self.packs[name] = p

    def manifest(self, name: str) -> list:
        """The (thread, turn) pairs pack ``name`` carries (its ``.turns`` manifest)."""
        if name not in self.manifests:
            f = self.cache / f"{name}.turns"
            data = f.read_bytes() if f.exists() else None
            if data is None:
                got = self.store.get(pack_key(name, "turns"))
                data = got[0] if got else b'{"turns": []}'
                fsio.replace_file(f, data, fsync=False, tmp=f.with_name(f"{fsio.TMP_PREFIX}{name}.t{os.getpid()}"))
            try:
                pairs = json.loads(data).get("turns", [])
                pairs = [(str(a), str(b)) for a, b in pairs]
            except (ValueError, TypeError, AttributeError):
                raise RemoteCorrupt(f"remote {self.name}: the turns manifest of pack {name} does not parse") from None
            self.manifests[name] = pairs
        return self.manifests[name]

    def has(self, oid: str) -> bool:
        return self.pack_with(oid) is not None

    def pack_with(self, oid: str) -> Pack | None:
        """The pack holding ``oid``; the last one that answered is tried first (a walk meets
        pack after pack: one probe per object, not one per object and pack)."""
        hit = self._hit
        if hit is not None and self.packs.get(hit.name) is hit and hit.contains(oid):
            return hit
        for p in self.packs.values():
            if p is not hit and p.contains(oid):
                self._hit = p
                return p
        return None

    # What this store remembers of the remote between operations (remotes/syncstate.py):
    # pack sizes, settled packs, the tracking refs' snapshot keyed by the refs document's
    # digest, the no-op markers. Hints, never trusted for safety.

    def _state(self) -> dict:
        return self.state.get()

    def save_state(self, doc: RefsDoc | None = None) -> None:
        """Write state.json (and the snapshot's body) if they changed (pack names the document
        no longer has are dropped)."""
        self.state.save(set(doc.packs) if doc is not None else None)

    def tracking_fp(self) -> list[int]:
        return _tracking_fp(self.repo.path, self.name)

    def tracking_view(self) -> dict[str, str] | None:
        """The tracking refs of this remote, from the snapshot while it is valid; else None."""
        return self.state.tracking_refs(self.tracking_fp())

    def unchanged(self) -> bool:
        """Is the refs document just read (its digest) the one the tracking refs' snapshot
        holds, and the snapshot still valid? Then a fetch has nothing to do, decided without
        parsing the document or reading the snapshot's body."""
        head = self.state.tracking_header(self.tracking_fp())
        return head is not None and self.doc_digest is not None and head["doc"] == self.doc_digest

    def record_tracking(self, doc: RefsDoc | None = None) -> None:
        """Snapshot the tracking refs (read again, under the exclusive store lock, taken only
        if it is free at once: otherwise the next sync reads the files), keyed by the digest
        of ``doc`` (the refs document just read) when its threads are exactly those refs."""
        try:
            with self.repo.exclusive_lock(timeout=0):
                fp = self.tracking_fp()
                broken: dict[str, str] = {}
                refs = TrackingRefs(self.repo.path, self.name).read_all(broken=broken)
                if broken:
                    return
        except ConvgitError:
            return
        same = doc is not None and self.doc_digest is not None and refs == doc.threads
        self.state.record_tracking(fp, refs, self.doc_digest if same else None, doc.generation if doc is not None else 0,
                                   self.doc_tag if same else None, doc.packs if same else None)

    def settled(self) -> set[str]:
        """The packs whose objects this store has taken (or uploaded)."""
        return self._state()["settled"]

    def settle(self, names, sizes: dict[str, int] | None = None) -> None:
        """Record packs ``names`` as settled (and known ``sizes``)."""
        st = self._state()
        new = set(names) - st["settled"]
        if new or (sizes and any(st["sizes"].get(k) != v for k, v in sizes.items())):
            st["settled"] |= new
            st["sizes"].update(sizes or {})
            self.state.dirty = True

    def pack_sizes(self, names) -> dict[str, int]:
        """The size of each pack in ``names`` (cached; a HEAD request for the others)."""
        st = self._state()
        out = {}
        for n in names:
            if n not in st["sizes"]:
                size = self.store.size(pack_key(n, "pack"))
                if size is None:
                    out[n] = 0
                    continue
                st["sizes"][n] = size
                self.state.dirty = True
            out[n] = st["sizes"][n]
        return out

    def close(self) -> None:
        for p in self.packs.values():
            p.close()
        if self.quarantine is not None:  # the packs fetched (their objects are in a local pack now)
            fsio.rmtree(self.quarantine)


def _tracking_fp(root: Path, remote: str) -> list[int]:
    """What changes whenever a tracking ref of ``remote`` moves: its journal (appended before
    every move) and packed file, as (size, mtime_ns, inode) each."""
    t = TrackingRefs(root, remote)
    return fsio.stat_fingerprint(t.journal_path, t.packed_path)


class _RemoteSource:
    """A remote read as merge reads a source: objects come from its packs, each downloaded
    whole, when first needed, into this operation's quarantine directory (beside a link to
    its cached index) and checked against its name. (Per operation: two fetches into one
    store never share a file.)"""

    def __init__(self, remote: _Remote, report: SyncReport, progress=None, total: int = 0) -> None:
        self.r, self.report, self.progress, self.total = remote, report, progress, total
        self._last: tuple[str, Pack | None] | None = None  # (id, the pack that holds it)

    def _pack_of(self, oid: str) -> Pack | None:
        last = self._last  # (size() then read_raw() of the same id; a pack downloaded since is another object)
        if last is None or last[0] != oid or (last[1] is not None and self.r.packs.get(last[1].name) is not last[1]):
            last = self._last = (oid, self.r.pack_with(oid))
        return last[1]

    def size(self, oid: str) -> int | None:
        p = self._pack_of(oid)
        return p.size(oid) if p is not None else None

    def read_raw(self, oid: str) -> bytes | None:
        p = self._pack_of(oid)
        if p is None:
            return None
        if p.name not in self.r.downloaded:
            self._download(p)
            p = self.r.packs[p.name]
        try:
            return p.read(oid)
        except ObjectCorrupt as e:
            raise SourceCorrupt(f"merge source: {e.message}", oid=oid) from e

    def _download(self, p: Pack) -> None:
        if self.progress:
            self.progress(self.report.bytes, self.total)  # (the bar appears before the first pack, not after it)
        got = self.r.store.get(pack_key(p.name, "pack"))
        if got is None:
            raise RemoteCorrupt(f"remote {self.r.name}: pack {p.name} is missing", pack=p.name)
        data = got[0]
        if len(data) < 44 or blake3(data[:-32]).digest() != data[-32:] or data[-32:].hex() != p.name[5:]:
            raise RemoteCorrupt(f"remote {self.r.name}: pack {p.name} is corrupt (its bytes do not hash to its name); "
                                "nothing was taken", pack=p.name)
        r = self.r
        if r.quarantine is None:
            r.quarantine = r.repo.path / CACHE / r.name / f"incoming-{os.getpid()}-{time.monotonic_ns()}"
            fsio.makedirs(r.quarantine)
        idx = r.quarantine / p.idx_path.name
        os.link(p.idx_path, idx)
        fsio.write_new_file(idx.with_suffix(".pack"), data)
        r.packs[p.name] = Pack(idx)  # the same index (checked when it was cached), beside its pack
        p.close()
        r.downloaded.add(p.name)
        self.report.bytes += len(data)
        self.report.packs += 1
        r.settle((), {p.name: len(data)})
        if self.progress:
            self.total = max(self.total, self.report.bytes)
            self.progress(self.report.bytes, self.total)


# -- fetch and pull ---------------------------------------------------------------------------


def _incoming_turns(remote: _Remote, doc: RefsDoc) -> dict[str, list[str]]:
    turns: dict[str, list[str]] = {n: [] for n in doc.threads}
    for name in doc.packs:
        for thread, turn in remote.manifest(name):
            if thread in turns and is_oid(turn):
                turns[thread].append(turn)
    return turns


def _up_to_date(remote: _Remote, doc: RefsDoc | None, report: SyncReport) -> bool:
    """A fetch with nothing to do, decided from the refs document and the tracking refs'
    snapshot alone (no file per thread, no lock): True when every remote thread's tip is
    its tracking ref's and no other tracking ref exists (their objects are here: a tracking
    ref moves only to a stored object, and gc keeps what they name). ``doc`` None: the
    document is not parsed; only its digest is compared with the snapshot's."""
    fp = remote.tracking_fp()
    if doc is None:
        if not remote.unchanged():
            return False
        report.generation = remote.state.tracking_header(fp)["generation"]
    else:
        view = remote.tracking_view()
        if view is None or view != doc.threads:
            return False
        report.generation = doc.generation
        remote.state.key_tracking(fp, remote.doc_digest, doc.generation, remote.doc_tag, doc.packs)  # (the next one need not parse it)
    report.threads = UnchangedRows(lambda: _tracking_at(remote, fp), "up-to-date")
    return True


def _tracking_at(remote: _Remote, fp: list[int]) -> dict[str, str]:
    """The tracking refs as the snapshot at ``fp`` has them (else as their files are now)."""
    got = remote.state.tracking_refs(fp)
    return got if got is not None else TrackingRefs(remote.repo.path, remote.name).read_all(broken={})


def _fetch(tx, remote: _Remote, report: SyncReport, progress=None, *, take: bool = True,
           doc: RefsDoc | None = None) -> RefsDoc:
    """Fetch inside transaction ``tx``: objects verified and moved in, tracking refs moved.
    ``take=False`` (index sync): no object is taken; the store reads them from the remote by
    range (its ``objects`` is a RangedObjects), so only the tracking refs move. ``doc``: the
    refs document, when already read."""
    repo = tx.repo
    doc = doc if doc is not None else remote.read_doc()
    report.generation = doc.generation
    tracking = tx.tracking(remote.name)
    local = tracking.read_all(broken={})
    contains = repo.objects.prober()  # (the store lock is held: many ids, mostly stored, one pack list)
    if all(local.get(n) == t and contains(t) for n, t in doc.threads.items()) and set(local) == set(doc.threads):
        report.threads = [{"thread": n, "action": "up-to-date", "old": t, "new": t} for n, t in sorted(doc.threads.items())]
        return doc  # nothing moved since the last fetch: the refs document was all it read
    remote.load_indexes(doc)
    for name, tip in doc.threads.items():
        if not contains(tip) and not remote.has(tip):
            raise RemoteCorrupt(f"remote {remote.name}: thread {name!r} points at {tip}, which no pack holds "
                                f"(convgit fsck --remote {remote.name})", thread=name)
    turns = _incoming_turns(remote, doc)
    mr = MergeReport(remote.url)
    # The progress total: the packs not settled here yet (what a fetch downloads, or an index
    # sync reads by range, in the usual case; their sizes cached after one HEAD each).
    total = sum(remote.pack_sizes([p for p in doc.packs if p not in remote.settled()]).values()) if progress else 0
    if not take:
        seen = _read_ahead(repo, remote, doc, local, turns, tracking, progress, total)
    else:
        # Only what moved is walked (a tip at its tracking ref was taken and checked before; of
        # its turns only one not stored here is new): a few threads of 100,000, not every tip.
        moved = {n: t for n, t in doc.threads.items() if local.get(n) != t or not contains(t)}
        wanted = {n: ts if n in moved else [t for t in ts if not contains(t)] for n, ts in turns.items()}
        try:
            seen = take_objects(tx, _RemoteSource(remote, report, progress, total), moved, wanted, mr, False)
        except RemoteCorrupt:
            raise
        except SourceCorrupt as e:
            msg = e.message.removeprefix("merge source: ").removeprefix("merge source ")
            raise RemoteCorrupt(f"remote {remote.name}: {msg}; nothing was taken", **e.details) from e
    if progress:
        progress(max(total, report.bytes), max(total, report.bytes))  # the transfer is over (verifying, moving refs)
    report.objects = mr.new_objects
    moves, entries = [], []
    for name, tip in sorted(doc.threads.items()):
        old = local.get(name)
        new_turns = [t for t in turns[name] if t in seen]
        action = "up-to-date" if old == tip else ("new" if old is None else "updated")
        entries.append({"thread": name, "action": action, "old": old, "new": tip})
        if old != tip or new_turns:
            extra = tuple((t, f"fetch: turn from {remote.name}") for t in new_turns[1:])
            moves.append(RefMove(name, tip, message=f"fetch {remote.name}", turn=new_turns[0] if new_turns else None,
                                 extra=extra))
    gone = [n for n in local if n not in doc.threads]
    entries += [{"thread": n, "action": "deleted", "old": local[n], "new": None} for n in gone]
    for r in tx.move_tracking(remote.name, moves, gone, declare_packed=lambda: declare_packed_logs(repo)):
        if isinstance(r, Exception):
            raise r
    report.threads = entries
    remote.settle(doc.packs)  # (saved once the transaction has committed: sync_fetch)
    return doc


def _read_ahead(repo, remote: _Remote, doc: RefsDoc, local: dict[str, str], turns, tracking, progress=None,
                total: int = 0) -> set[str]:
    """index sync: before any ref moves, read (by range) every message new since the last
    sync and every new turn, each re-hashed and decoded, so that a damaged or missing object
    refuses the sync with nothing moved (as fetch refuses a bad pack). Returns the new turns
    (those not in the tracking reflogs yet). The chunks read stay cached for the index."""
    from .objects import Turn

    counter = getattr(repo.objects, "counter", None)
    start = counter.bytes if counter is not None else 0

    def read(oid: str, want: type):
        if progress and counter is not None:
            progress(min(counter.bytes - start, total), total)
        try:
            obj = repo.objects.read(oid)
        except (ObjectCorrupt, ObjectMissing) as e:
            raise RemoteCorrupt(f"remote {remote.name}: {e.message}; nothing was indexed", oid=oid) from e
        if not isinstance(obj, want):
            raise RemoteCorrupt(f"remote {remote.name}: {oid} is not a {want.__name__.lower()}; nothing was indexed",
                                oid=oid)
        return obj

    stops = set(local.values())
    for name, tip in sorted(doc.threads.items()):
        oid = tip
        while oid is not None and oid not in stops:
            stops.add(oid)
            oid = read(oid, Message).parent
    new: set[str] = set()
    for name, ts in turns.items():
        if local.get(name) == doc.threads.get(name):
            continue  # unmoved: its turns were recorded when it last moved
        known = {e.turn for e in tracking.read_log(name)} if name in local else set()
        for t in ts:
            if t not in known and t not in new:
                read(t, Turn)
                new.add(t)
    return new


def _open(repo, name: str | None) -> _Remote:
    name, settings = get_remote(repo, name)
    return _Remote(repo, name, settings)


def fetch(repo, remote: str | None = None, *, progress=None) -> SyncReport:
    """Fetch from ``remote`` (default: origin): missing packs downloaded and verified, every
    remote thread recorded as ``refs/remotes/REMOTE/THREAD``. Returns SyncReport."""
    t0 = time.perf_counter()
    r = _open(repo, remote)
    report = SyncReport("fetch", r.name, r.url)
    try:
        sync_fetch(r, report, progress)
    finally:
        report.refs_bytes = r.refs_bytes
        r.close()
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def sync_fetch(r: _Remote, report: SyncReport, progress=None, *, take: bool = True) -> RefsDoc | None:
    """The fetch half of fetch, pull, clone and index sync: the refs document read once;
    nothing more when it is the one the tracking refs' snapshot was taken from (a no-op
    costs one request, a hash of the document and no file per thread: the document is not
    even parsed; then None is returned) or when its threads match the snapshot; else a fetch
    in one transaction, then a new snapshot. Returns the refs document."""
    repo = r.repo
    r.read_raw(r.state.tracking_header(r.tracking_fp()))
    if _up_to_date(r, None, report):
        r.save_state()
        return None
    doc = r.parsed()
    if _up_to_date(r, doc, report):
        r.save_state(doc)
        return doc
    # Thousands of new tracking refs (a clone, a first fetch): written packed at once under the exclusive lock.
    known = r.tracking_view()
    if known is None and len(doc.threads) >= BULK_MIN:
        known = TrackingRefs(repo.path, r.name).read_all(broken={})
    many = known is not None and sum(1 for n in doc.threads if n not in known) >= BULK_MIN
    with repo.transaction(exclusive=many) as tx:
        doc = _fetch(tx, r, report, progress, take=take, doc=doc)
    report.warnings.extend(tx.warnings)
    r.record_tracking(doc)
    r.save_state(doc)
    return doc


def sync_pull(r: _Remote, report: SyncReport) -> None:
    """The pull half of pull, clone and index sync: merge's ref rules from the tracking refs
    onto the threads, in an exclusive transaction only when some thread is not at its
    remote's tip already (a no-op compares two fingerprints; one after the threads or the
    tracking refs moved reads the threads and the tracking refs' snapshot)."""
    repo = r.repo
    fp = r.tracking_fp()
    # "pulled": every thread was at its remote tip when the threads' and the tracking refs'
    # journals were as they are now (neither moved since): nothing to read.
    same = r._state().get("pulled") == [_refs_fp(repo.refs), fp]
    if not same:
        view = r.tracking_view()
        if view is not None:
            before = repo.refs.read_all()
            same = all(before.get(n) == t for n, t in view.items())
            if same:
                _record_pulled(r, view)
    if same:
        report.threads = UnchangedRows(lambda: _tracking_at(r, fp), "same", with_as=True)
        r.save_state()
        return
    with repo.transaction(exclusive=True) as tx:
        _pull_refs(tx, r.name, report)
    report.warnings.extend(tx.warnings)
    if len(tx.moved) > 1:
        repo.auto_pack()  # (a clone's thousands of new threads: packed, as any writer's past AUTO_PACK_LOOSE)


def _refs_fp(refs) -> list[int]:
    """What changes whenever a thread moves: the refs journal (appended before every move)
    and ``packed-refs``, as (size, mtime_ns, inode) each."""
    return fsio.stat_fingerprint(refs.journal_path, refs.packed_path)


def _record_pulled(r: _Remote, view: dict[str, str]) -> None:
    """Note that every thread is at its remote tip (checked again under the exclusive store
    lock, when it is free at once), with both journals' fingerprints."""
    repo = r.repo
    try:
        with repo.exclusive_lock(timeout=0):
            fps = [_refs_fp(repo.refs), _tracking_fp(repo.path, r.name)]
            if r.tracking_view() != view:
                return
            now = repo.refs.read_all()
            if not all(now.get(n) == t for n, t in view.items()):
                return
    except ConvgitError:
        return
    r.state.set("pulled", fps)


def _pull_refs(tx, remote: str, report: SyncReport) -> None:
    """merge's ref rules from the tracking refs of ``remote`` onto the threads."""
    tracking = tx.tracking(remote)
    everything = tracking.read_all()
    tx.read_head()
    before = tx.repo.refs.read_all()
    # A thread already at the remote's tip has nothing to take (its turns came with it): only
    # the others are merged, so a pull with nothing new reads no reflog.
    incoming = {n: t for n, t in everything.items() if before.get(n) != t}
    logs = read_logs(tracking, incoming)  # (all at once: a clone's 100,000 threads)
    turns = {n: list(dict.fromkeys(e.turn for e in logs[n] if e.turn and tx.repo.objects.contains(e.turn))) for n in logs}
    seen = {t for ts in turns.values() for t in ts}
    mr = MergeReport(remote)
    if not before and len(incoming) >= BULK_MIN and tx.exclusive:
        incoming = _create_threads(tx, incoming, turns, mr)
    if incoming:
        apply_refs(tx, None, incoming, turns, seen, mr, False)
    # (a diverged thread pulled before is already there under its -merged- name: nothing moved)
    rows = {e["thread"]: {"thread": e["thread"], "old": e["local"], "new": e["incoming"], "as": e["as"],
                          "action": "same" if e["action"] == "diverged" and before.get(e["as"]) == e["incoming"]
                          else e["action"]} for e in mr.refs}
    report.threads = [rows.get(n) or {"thread": n, "old": t, "new": t, "as": n, "action": "same"}
                      for n, t in sorted(everything.items())]


def declare_packed_logs(repo) -> None:
    """Declare the format version that reads packed reflogs (before a bulk creation, format.md §13.6)."""
    from .repository import PACKED_FORMAT, require_format

    require_format(repo.path, PACKED_FORMAT, fsync=repo.config.fsync)


def _create_threads(tx, incoming: dict[str, str], turns: dict[str, list[str]], mr: MergeReport) -> dict[str, str]:
    """A pull into a store with no thread yet (a clone): the threads created with merge's
    reflog lines, but packed at once, in one rename (remotes/bulkrefs.py): all or none, so no
    merge journal. Returns the threads left to merge's usual path."""
    repo = tx.repo
    moves = [RefMove(n, t, expected=None, message="merge: created", turn=turns[n][0] if turns[n] else None,
                     extra=tuple((x, "merge: recorded turn") for x in turns[n][1:])) for n, t in sorted(incoming.items())]
    picked = bulk_candidates(repo.refs, moves, {}, repo.objects.contains)
    if len(picked) < BULK_MIN:
        return incoming
    declare_packed_logs(repo)
    made = [moves[i] for i in picked]
    tx.create_packed(made)
    for m in made:
        mr.refs.append({"thread": m.name, "action": "created", "local": None, "incoming": m.new, "as": m.name})
    done = {m.name for m in made}
    return {n: t for n, t in incoming.items() if n not in done}


def pull(repo, remote: str | None = None, *, progress=None) -> SyncReport:
    """Fetch from ``remote``, then merge's ref rules per thread: new → created, behind →
    fast-forward, ahead → kept, diverged → both kept (the remote's as
    ``NAME-merged-<tip>``). Returns SyncReport (``threads``: one entry per remote thread)."""
    t0 = time.perf_counter()
    r = _open(repo, remote)
    report = SyncReport("pull", r.name, r.url)
    try:
        sync_fetch(r, report, progress)
        sync_pull(r, report)
    finally:
        report.refs_bytes = r.refs_bytes
        r.close()
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def clone(url: str, path: str | Path | None = None, *, endpoint: str | None = None, region: str | None = None,
          profile: str | None = None, progress=None) -> tuple[object, SyncReport]:
    """A new store at ``path`` (default: the last part of the URL) holding every thread of
    the remote at ``url`` (as remote ``origin``), its index built, HEAD on the remote's head
    thread (else its first). Returns (repository, SyncReport)."""
    from .repository import Repository

    kind, where, prefix = parse_url(url)
    if path is None:
        base = (prefix or where).rstrip("/").rsplit("/", 1)[-1] or "store"
        path = Path(base)
    path = Path(path)
    store = path / ".convgit"
    if path.exists() and any(path.iterdir()):
        raise InvalidInput(f"cannot clone into {path}: it exists and is not empty")
    created = not path.exists()
    repo = Repository.init(store)
    try:
        add_remote(repo, "origin", url, endpoint=endpoint, region=region, profile=profile)
        report = pull(repo, "origin", progress=progress)
        report.operation = "clone"
        report.path = str(path)
        doc_head = _Remote(repo, "origin", get_remote(repo, "origin")[1]).read_doc().head
        threads = repo.refs.read_all()
        head = doc_head if doc_head in threads else (sorted(threads)[0] if threads else None)
        if head:
            with repo.transaction(index="none") as tx:
                tx.write_head(head)
    except BaseException:
        repo.close()  # a clone that failed leaves nothing behind (as git's)
        fsio.rmtree(path if created else store)
        raise
    return repo, report


# -- threads --remotes (push and fsck --remote are convgit/sync_push.py) ------------------------


def tracking_refs(repo) -> list[dict]:
    """Every remote-tracking ref: ``{"remote", "thread", "name", "tip"}`` (threads --remotes)."""
    out = []
    for remote in remote_names(repo.path):
        for thread, tip in TrackingRefs(repo.path, remote).read_all(broken={}).items():
            out.append({"remote": remote, "thread": thread, "name": f"{remote}/{thread}", "tip": tip})
    return out


__all__ = ["SyncReport", "clone", "fetch", "pull", "tracking_refs"]
