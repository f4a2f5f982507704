"""``convgit index sync --from REMOTE``: keep a store's index (SQLite or PostgreSQL) current
from a remote's refs document, without a local copy of the objects (docs/remotes.md "An
index without the objects").

The store becomes an index-only store: ``[store] objects_from = "REMOTE"`` in its
config.toml, so every object it lacks (all of them, in a store made for this) is read from
the remote's packs by byte range through their cached indexes (remotes/ranged.py). A sync is
a fetch that takes no object (the tracking refs move from the refs document and the packs'
turns manifests) followed by pull's ref rules (merge's ``apply_refs``); the repository
transaction then brings the index up to the moved threads through its usual catch-up, whose
reader reads the new messages (and only those) by range. Threads, reflogs and the index are
local; the objects stay on the remote.
"""

from __future__ import annotations

import dataclasses
import time
import tomllib
from dataclasses import dataclass, field

from . import fsio
from .errors import InvalidInput
from .remotes.syncstate import UnchangedRows
from .sync import CACHE, SyncReport, _Remote, get_remote, sync_fetch, sync_pull


@dataclass
class IndexSyncReport:
    """What an index sync read and moved."""

    remote: str
    url: str
    bytes_read: int = 0  # pack bytes read by range (chunk headers and chunks)
    requests: int = 0  # ranged reads made
    idx_bytes: int = 0  # pack indexes downloaded (cached afterwards)
    pack_bytes: int = 0  # the size of every pack the refs document names (what a fetch would download)
    packs: int = 0  # packs the refs document names
    threads: list[dict] | UnchangedRows = field(default_factory=list)
    generation: int = 0
    backend: str = "sqlite"
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def moved(self) -> int:
        """Threads that moved here (created, fast-forwarded, diverged copies)."""
        if isinstance(self.threads, UnchangedRows):
            return 0
        return sum(1 for t in self.threads if t["action"] not in ("same", "kept", "up-to-date", "behind"))

    def to_json(self) -> dict:
        """The ``--json`` document of ``index sync`` (docs/json.md)."""
        out = {"status": "ok", "operation": "index-sync", "remote": self.remote, "url": self.url,
               "bytes_read": self.bytes_read, "requests": self.requests, "idx_bytes": self.idx_bytes,
               "pack_bytes": self.pack_bytes, "packs": self.packs, "moved": self.moved, "threads": list(self.threads),
               "generation": self.generation, "index": self.backend, "seconds": self.seconds}
        if self.warnings:
            out["warnings"] = self.warnings
        return out


def _mark_index_only(repo, name: str) -> None:
    """Write ``[store] objects_from = NAME`` into config.toml (once), and read through it now."""
    from .repository import _ranged_objects

    path = repo.path / "config.toml"
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        text = ""
    data = tomllib.loads(text) if text else {}
    if "store" in data:
        raise InvalidInput(f"{path}: has a [store] table already: add objects_from = {name!r} to it by hand")
    if text and not text.endswith("\n"):
        text += "\n"
    text += ("\n" if text.strip() else "") + f'[store]\nobjects_from = "{name}"\n'
    tomllib.loads(text)
    fsio.replace_file(path, text.encode("utf-8"), fsync=repo.config.fsync)
    repo.config = dataclasses.replace(repo.config, objects_from=name)
    repo.objects = _ranged_objects(repo.objects, repo.path, name)


def index_sync(repo, remote: str | None = None, *, progress=None) -> IndexSyncReport:
    """Bring this store's threads and index up to remote ``remote`` (default: origin)
    reading objects by range, storing none (the store becomes index-only for that remote).
    Returns IndexSyncReport (bytes read by range vs the packs' total size).
    ``progress(done, total)``: bytes read by range, of the packs not synced before."""
    t0 = time.perf_counter()
    name, settings = get_remote(repo, remote)
    if repo.config.objects_from not in (None, name):
        raise InvalidInput(f"this store reads its objects from remote {repo.config.objects_from!r} "
                           f"([store] objects_from): it cannot index {name!r} too", remote=name)
    if repo.config.objects_from is None:
        _mark_index_only(repo, name)
    r = _Remote(repo, name, settings)
    report = IndexSyncReport(name, r.url, backend=getattr(repo.config, "index_backend", "sqlite"))
    fetched = SyncReport("fetch", name, r.url)
    counter = repo.objects.counter
    before = counter.bytes, counter.requests
    cache = repo.path / CACHE / name / "packs"
    had = {p.name: p.stat().st_size for p in cache.glob("*.idx")} if cache.is_dir() else {}
    try:
        doc = sync_fetch(r, fetched, progress, take=False)
        # The refs document seen before (a no-op: sync_fetch compared its digest, or its ETag on
        # S3, and parsed nothing): the packs it names are the snapshot's, noted when it was keyed.
        packs = r.state.known_packs(r.tracking_fp(), r.doc_digest) if doc is None else doc.packs
        sync_pull(r, fetched)
        if packs is None:  # (a snapshot keyed before it noted its packs: parsed once here)
            doc = r.parsed()
            packs = doc.packs
            r.state.key_tracking(r.tracking_fp(), r.doc_digest, doc.generation, r.doc_tag, doc.packs)
        report.warnings.extend(fetched.warnings)
        report.packs = len(packs)
        report.pack_bytes = sum(r.pack_sizes(packs).values())  # (sizes cached: a pack never changes)
        r.save_state(doc)
    finally:
        r.close()
    now = {p.name: p.stat().st_size for p in cache.glob("*.idx")} if cache.is_dir() else {}
    report.idx_bytes = sum(n for k, n in now.items() if k not in had)
    report.bytes_read = counter.bytes - before[0]
    report.requests = counter.requests - before[1]
    report.threads = fetched.threads
    report.generation = fetched.generation
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def check_index_only(repo, on_remote_pack) -> tuple[list[tuple[str, str, str, str | None]], int | None, list[str]]:
    """fsck's remote half on an index-only store: what can be checked without the objects.
    Reads the remote's refs document and lists its ``packs/`` keys (one listing, as gc
    --remote does), then checks: every pack the document names is listed whole (``.pack`` and
    ``.idx``); every cached pack index is sound and named by its checksum; every thread's and
    tracking ref's tip is in a pack the remote still has (``on_remote_pack(oid)``: the names of
    the cached packs holding it); the tracking refs against the document (moved since the
    last sync: information). Returns (problems as (severity, kind, message, oid), the number of
    packs the document names or None when the remote was not reached, what was not checked)."""
    from .errors import ConvgitError, ObjectCorrupt, RemoteCorrupt
    from .pack import Pack
    from .remotes.refsdoc import PACKS
    from .remotes.tracking import TrackingRefs

    out: list[tuple[str, str, str, str | None]] = []
    name = repo.config.objects_from
    try:
        name, settings = get_remote(repo, name)
        r = _Remote(repo, name, settings)
    except ConvgitError as e:
        out.append(("error", "remote", f"[store] objects_from names remote {name!r}: {e.message}", None))
        return out, None, [f"the remote's side (refs document, packs): remote {name!r} cannot be opened"]
    try:
        try:
            doc = r.read_doc()
            keys = r.store.list(PACKS)
        except RemoteCorrupt as e:
            out.append(("error", "remote", e.message, None))
            return out, None, [f"the remote's packs: its refs document is damaged (convgit fsck --remote {name})"]
        except ConvgitError as e:
            out.append(("warning", "remote", f"remote {name} not reached: {e.message}", None))
            return out, None, [f"the remote's side (refs document, packs): remote {name} was not reached"]
        exts: dict[str, set[str]] = {}
        for key in keys:
            base = key.rsplit("/", 1)[-1]
            stem, _, ext = base.rpartition(".")
            exts.setdefault(stem, set()).add(ext)
        whole = {n for n, e in exts.items() if {"pack", "idx"} <= e}
        for p in doc.packs:
            if p not in whole:
                missing = " and ".join(x for x in ("pack", "idx") if x not in exts.get(p, set()))
                out.append(("error", "remote", f"remote {name}: its refs document names pack {p}, whose {missing} "
                                               f"it lacks (convgit fsck --remote {name})", None))
        cache = repo.path / CACHE / name / "packs"
        cached = sorted(f.stem for f in cache.glob("pack-*.idx")) if cache.is_dir() else []
        for p in cached:
            try:
                pk = Pack(cache / f"{p}.idx")
                sound = pk.idx_ok() and pk.checksum.hex() == p[5:]
                pk.close()
            except ObjectCorrupt:
                sound = False
            if not sound:
                out.append(("error", "pack", f"the cached index of pack {p} (.convgit/{CACHE}/{name}/packs/) is damaged: "
                                             "delete it, and index sync downloads it again", None))
            elif p not in whole:
                out.append(("info", "remote", f"pack {p}, cached here, is gone from remote {name} (gc --remote "
                                              "retired it): its objects are read from the packs that replaced it", None))
        unsynced = [p for p in doc.packs if p not in set(cached)]
        if unsynced:
            out.append(("info", "remote", f"{len(unsynced)} pack(s) of remote {name} not synced here yet "
                                          "(convgit index sync)", None))
        tips = {f"thread {t!r}": tip for t, tip in repo.refs.read_all(broken={}).items()}
        tracking = TrackingRefs(repo.path, name).read_all(broken={})
        tips |= {f"tracking ref {name}/{t}": tip for t, tip in tracking.items()}
        for what, tip in sorted(tips.items()):
            held = on_remote_pack(tip)
            if held and not any(p in whole for p in held):
                out.append(("error", "remote", f"{what} points at {tip}, which is only in pack(s) remote {name} no "
                                               f"longer has ({', '.join(held)}): it cannot be read (convgit index sync)",
                            tip))
        moved = sorted(t for t in set(doc.threads) | set(tracking) if doc.threads.get(t) != tracking.get(t))
        if moved:
            out.append(("info", "remote", f"{len(moved)} thread(s) of remote {name} moved since the last sync "
                                          "(convgit index sync)", None))
        return out, len(doc.packs), []
    finally:
        r.close()
