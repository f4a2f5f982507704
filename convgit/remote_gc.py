"""``gc --remote NAME``: a remote's packs compacted and what nothing names deleted, failing
closed (docs/remotes.md, docs/format.md §13.7).

1. Read the refs document (generation G). Refuse (gc_refused) if it does not parse or names
   a pack whose index is missing: nothing is deleted from a remote in doubt.
2. Repack: when the document names at least ``min_packs`` packs smaller than ``small``
   bytes, download them (each checked against its name), verify every object as fetch does,
   write their objects (and turns manifests) as one pack, upload it create-only, and replace
   them with it by one compare-and-swap of the document (generation G+1) that also lists them
   as ``retired`` with the time. A lost race abandons the repack: the new pack is left
   unreferenced (a later gc deletes it), nothing else changed.
3. Delete: a pack key is deletable when the document does not name it and it is older than
   the grace period: for a retired pack, counted from its retirement; for any other (a push
   that lost or was refused, or is still running), from when it was written. Just before
   deleting, the document is read again: if its generation moved, nothing is deleted (a
   push may be about to name one of them). The index goes first, then the manifest, then the
   pack (a reader never finds an index whose pack is gone). Ref segments (``refs/``, format
   2) the document does not name go by the same rule: counted from when a write stopped
   naming them (``retired_segments``), else from when they were written (a push that lost).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field

from . import codec, fsio
from .errors import GcRefused, RemoteCorrupt
from .pack import Pack, PackWriter
from .remotes import CasLost
from .remotes.refsdoc import MANIFEST_FORMAT, PACKS, SEGMENTS, pack_key, segment_key
from .sync import CACHE, SyncReport, _open, _RemoteSource

SMALL_PACK = 4 << 20
MIN_PACKS = 8


@dataclass
class RemoteGcReport:
    """What ``gc --remote`` did (or, with ``dry_run``, would do)."""

    remote: str
    url: str
    dry_run: bool = False
    packs_before: int = 0
    packs_after: int = 0
    repacked: int = 0  # small packs replaced by one
    deleted: list[str] = field(default_factory=list)  # pack names whose keys were deleted
    segments_deleted: int = 0  # ref segments nothing names, deleted
    segments_kept_young: int = 0  # ref segments nothing names, inside the grace period
    bytes_deleted: int = 0
    kept_young: int = 0  # unreferenced packs inside the grace period
    generation: int = 0
    skipped: str | None = None  # why nothing was deleted (the generation moved)
    seconds: float = 0.0

    def to_json(self) -> dict:
        """The ``gc --remote --json`` document."""
        return {"status": "dry-run" if self.dry_run else ("skipped" if self.skipped else "done"), "remote": self.remote,
                "url": self.url, "packs_before": self.packs_before, "packs_after": self.packs_after,
                "repacked": self.repacked, "deleted": self.deleted, "segments_deleted": self.segments_deleted,
                "bytes_deleted": self.bytes_deleted,
                "kept_young": self.kept_young, "segments_kept_young": self.segments_kept_young,
                "generation": self.generation, "reason": self.skipped,
                "seconds": self.seconds}


def gc_remote(repo, remote: str | None = None, *, grace_seconds: float | None = None, dry_run: bool = False,
              small: int = SMALL_PACK, min_packs: int = MIN_PACKS, now: float | None = None,
              progress=None) -> RemoteGcReport:
    """Compact remote ``remote`` and delete the packs nothing names (module docstring).
    ``grace_seconds``: default gc.grace_seconds (two weeks); 0 is unsafe while others push.
    ``progress(done, total)``: bytes of the small packs downloaded to be repacked."""
    t0 = time.perf_counter()
    grace = repo.config.grace_seconds if grace_seconds is None else grace_seconds
    if grace is None:
        grace = float("inf")  # gc.grace_seconds = never: nothing unreferenced is ever deleted
    r = _open(repo, remote)
    rep = RemoteGcReport(r.name, r.url, dry_run=dry_run)
    try:
        try:
            doc = r.read_doc()
            r.load_indexes(doc)
        except RemoteCorrupt as e:
            raise GcRefused(f"gc --remote refused: {e.message}") from e
        for thread, tip in doc.threads.items():
            if not r.has(tip):
                raise GcRefused(f"gc --remote refused: thread {thread!r} points at {tip}, which no pack holds")
        rep.packs_before = rep.packs_after = len(doc.packs)
        rep.generation = doc.generation
        sizes = {n: r.store.size(pack_key(n, "pack")) or 0 for n in doc.packs}
        smalls = [n for n in doc.packs if sizes[n] < small]
        if len(smalls) >= min_packs and not dry_run:
            doc = _repack(r, doc, smalls, rep, now, progress, sizes)
        now_s = time.time() if now is None else now
        keys = r.store.list(PACKS)
        by_pack: dict[str, list[str]] = {}
        for key in keys:
            name = key.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            by_pack.setdefault(name, []).append(key)
        doomed = []
        for name, ks in sorted(by_pack.items()):
            if name in doc.packs:
                continue
            born = doc.retired[name] / 1000 if name in doc.retired else max(keys[k] for k in ks)
            if now_s - born < grace:
                rep.kept_young += 1
                continue
            doomed.append((name, ks))
        named = {d for d, _ in doc.segments}
        segs = []
        for key, written in r.store.list(SEGMENTS + "/").items():
            digest = key.rsplit("/", 1)[-1].split(".", 1)[0]
            if digest in named or key != segment_key(digest):
                continue
            born = doc.retired_segments[digest] / 1000 if digest in doc.retired_segments else written
            if now_s - born < grace:
                rep.segments_kept_young += 1
            else:
                segs.append((digest, key))
        if dry_run:
            rep.deleted = [n for n, _ in doomed]
            rep.segments_deleted = len(segs)
            return rep
        if doomed or segs:
            again = r.read_doc()
            if again.generation != doc.generation:
                rep.skipped = f"the remote's refs moved meanwhile (generation {doc.generation} -> {again.generation})"
                return rep
            order = {"idx": 0, "turns": 1, "pack": 2}
            for name, ks in doomed:
                for k in sorted(ks, key=lambda k: order.get(k.rsplit(".", 1)[-1], 3)):
                    rep.bytes_deleted += r.store.size(k) or 0
                    r.store.delete(k)
                rep.deleted.append(name)
            for digest, key in segs:
                rep.bytes_deleted += r.store.size(key) or 0
                r.store.delete(key)
                rep.segments_deleted += 1
            if any(n in doc.retired for n, _ in doomed) or any(d in doc.retired_segments for d, _ in segs):
                _forget_retired(r, doc, {n for n, _ in doomed}, {d for d, _ in segs})
    finally:
        r.close()
        rep.seconds = round(time.perf_counter() - t0, 3)
    return rep


def _repack(r, doc, smalls: list[str], rep: RemoteGcReport, now: float | None, progress=None,
            sizes: dict[str, int] | None = None):
    """The small packs as one (see the module docstring, step 2); the document after."""
    total, done = sum((sizes or {}).get(n, 0) for n in smalls), 0
    out = r.repo.path / CACHE / r.name / "repack"
    fsio.rmtree(out)
    fsio.makedirs(out)
    w = PackWriter(out, fsync=False)
    turns: list = []
    try:
        source = _RemoteSource(r, SyncReport("gc", r.name, r.url))
        for name in smalls:
            try:
                source._download(r.packs[name])  # into the operation's quarantine, checked against its name
            except RemoteCorrupt as e:
                raise GcRefused(f"gc --remote refused: {e.message} (convgit fsck --remote {r.name})") from e
            done += (sizes or {}).get(name, 0)
            if progress:
                progress(done, total)
            p: Pack = r.packs[name]
            for oid in p.ids_in_pack_order():
                data = p.read(oid)  # re-hashed against its id
                codec.decode(data, oid)
                w.add(oid, data, verified=True)
            turns += [list(t) for t in r.manifest(name)]
        idx = w.finish()
    except BaseException:
        w.abort()
        raise
    new_name = idx.stem
    manifest = json.dumps({"format": MANIFEST_FORMAT, "turns": turns}, sort_keys=True).encode()
    r.store.put_new(pack_key(new_name, "pack"), idx.with_suffix(".pack").read_bytes())
    r.store.put_new(pack_key(new_name, "turns"), manifest)
    r.store.put_new(pack_key(new_name, "idx"), idx.read_bytes())
    fsio.rmtree(out)
    t_ms = int((time.time() if now is None else now) * 1000)
    packs = [p for p in doc.packs if p not in smalls]
    packs.insert(0, new_name)  # the oldest history first: its turns manifest is read first
    new = dataclasses.replace(doc, generation=doc.generation + 1, packs=packs, tag=None,
                              retired={**doc.retired, **{n: t_ms for n in smalls}})
    try:
        new = r.write_doc(doc, new)
    except CasLost:
        return doc  # another writer moved the refs: no repack this time (the new pack is unreferenced)
    rep.repacked = len(smalls)
    rep.packs_after = len(packs)
    rep.generation = new.generation
    return new


def _forget_retired(r, doc, gone: set[str], segments: set[str]) -> None:
    """Drop deleted packs and segments from the document's retired lists (best effort: a lost
    race keeps them listed, which only means a later gc looks for keys that are gone)."""
    new = dataclasses.replace(doc, generation=doc.generation + 1, tag=None,
                              retired={k: v for k, v in doc.retired.items() if k not in gone},
                              retired_segments={k: v for k, v in doc.retired_segments.items() if k not in segments})
    try:
        r.write_doc(doc, new)
    except CasLost:
        pass
