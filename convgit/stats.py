"""``convgit status``: what a store holds and what it costs, in one look."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .gc_auto import auto_state
from .document import Document as _Document


def _du(path: Path, parts: dict[str, str] | None = None) -> tuple[int, int, dict[str, int]]:
    """(allocated bytes, files, bytes per part) under ``path``: what ``du`` would count, in
    one walk. ``parts``: directory path → part name; a file counts towards the part of the
    nearest such directory above it (none: no part)."""
    parts = parts or {}
    total = files = 0
    sums = dict.fromkeys(parts.values(), 0)
    stack: list[tuple[str, str | None]] = [(str(path), parts.get(str(path)))]
    while stack:
        d, part = stack.pop()
        try:
            it = os.scandir(d)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        with it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append((e.path, parts.get(e.path, part)))
                    else:
                        st = e.stat(follow_symlinks=False)
                        size = getattr(st, "st_blocks", 0) * 512 or st.st_size
                        total += size
                        files += 1
                        if part is not None:
                            sums[part] += size
                except FileNotFoundError:
                    continue  # removed meanwhile (gc, a lock file)
    return total, files, sums


_TAIL = 65536


def last_gc(store: Path) -> dict | None:
    """The last complete record of ``gc.log`` (JSON lines written by gc), or None. Reads the
    file's tail (one gc's record is well under 64 KiB), the whole file only if that holds none."""
    path = store / "gc.log"
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL))
            tail = f.read()
            if size > _TAIL:
                tail = tail[tail.find(b"\n") + 1:]  # (a line cut by the seek is not a record)
            rec = _last_record(tail)
            if rec is None and size > _TAIL:
                f.seek(0)
                rec = _last_record(f.read())
            return rec
    except (FileNotFoundError, NotADirectoryError):
        return None


def _last_record(data: bytes) -> dict | None:
    for line in reversed(data.decode("utf-8", errors="replace").splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if isinstance(rec, dict) and rec.get("finished_at") is not None:
            return rec
    return None


@dataclass(frozen=True, eq=False)
class StatusReport(_Document):
    """What ``status`` found (docs/json.md "status"). It reads as its JSON document too
    (``report["messages"]``), as the dict it was before. ``objects``: loose, packed, packs;
    ``bytes``: the disk use by part; ``index``: the index's path, schema and freshness;
    ``last_gc_record``: the last complete record of ``gc.log``, or None."""

    store: str
    format_version: int | None
    head: str | None
    threads: int
    turns: int
    messages: int
    message_refs: int
    text_bytes: int
    objects: dict
    bytes: dict
    index: dict
    last_gc_record: dict | None
    seconds: float
    gc_auto: dict | None = None  # gc_auto.auto_state: automatic gc enabled, and whether it stopped after a failure

    @property
    def dedup_ratio(self) -> float | None:
        """message_refs / messages (None for an empty store)."""
        return round(self.message_refs / self.messages, 3) if self.messages else None

    def to_json(self) -> dict:
        """``status --json`` (the keys in their documented order)."""
        gc = self.last_gc_record
        return {
            "store": self.store,
            "format_version": self.format_version,
            "head": self.head,
            "threads": self.threads,
            "turns": self.turns,
            "messages": self.messages,
            "message_refs": self.message_refs,
            "dedup_ratio": self.dedup_ratio,
            "text_bytes": self.text_bytes,
            "objects": dict(self.objects),
            "bytes": dict(self.bytes),
            "index": dict(self.index),
            "last_gc": gc.get("finished_at") if gc else None,
            "last_gc_record": gc,
            "gc_auto": self.gc_auto,
            "seconds": self.seconds,
        }


def status(repo) -> StatusReport:
    """Counts, sizes, deduplication and the state of the index and of gc.

    ``message_refs`` is the number of messages the threads hold, each thread counted in full
    (root to tip); ``messages`` the messages stored once, reachable from a thread.
    ``dedup_ratio`` = message_refs / messages: what storing every thread's history separately
    would take, over what is stored.
    """
    from .index.healing import healing_call

    return healing_call(repo, _status, repo)


def _status(repo) -> StatusReport:
    from .repository import read_format_version

    from .index import SCHEMA_VERSION

    store = repo.path
    t0 = time.perf_counter()
    idx = repo._index
    if idx is None:  # open without catching up, to tell how fresh it was
        idx = repo._index = repo.open_index(autorefresh=False)
    was_rebuilt = idx.rebuilt
    stale: list[str] = []
    if not was_rebuilt and not idx.refs_unchanged():  # else nothing can have moved
        pending = idx.pending_names()  # the journal says which threads moved (O(changes))
        if pending is None:
            refs = repo.refs.read_all()
            known = idx.thread_tips()
            stale = sorted(n for n in set(refs) | set(known) if refs.get(n) != known.get(n))
            idx.refresh()
        else:
            refs = {n: repo.refs.read(n) for n in pending}
            known = idx.thread_tips(pending)
            stale = sorted(n for n in pending if refs.get(n) != known.get(n))
            idx.refresh_if_changed()
    counts = idx.counts()
    messages, refs_total = counts["messages"], counts["message_refs"]
    loose = sum(1 for _ in repo.objects.iter_loose())
    packs = repo.objects.packs(reload=True)
    packed = sum(p.count for p in packs)
    total, files, sums = _du(store, {str(store / "objects"): "loose", str(store / "objects" / "pack"): "packs"})
    pack_bytes = sums["packs"]
    obj_bytes = sums["loose"] + pack_bytes
    index_bytes = idx.disk_bytes()  # (on the server, for the PostgreSQL index: not part of ``total``)
    local_index = index_bytes if getattr(idx, "backend", "sqlite") == "sqlite" else 0
    return StatusReport(
        store=str(store),
        format_version=read_format_version(store),
        head=repo.refs.read_head(),
        threads=counts["threads"],
        turns=counts["turns"],
        messages=messages,
        message_refs=refs_total,
        text_bytes=counts["text_bytes"],
        objects={"loose": loose, "packed": packed, "packs": len(packs)},
        bytes={
            "total": total,
            "objects_loose": obj_bytes - pack_bytes,
            "packs": pack_bytes,
            "index": index_bytes,
            "other": total - obj_bytes - local_index,
            "files": files,
        },
        index={
            "path": str(idx.path),
            "schema_version": SCHEMA_VERSION,
            "up_to_date": not stale and not was_rebuilt,
            "rebuilt_now": was_rebuilt,
            "stale_threads": len(stale),
            "built_at": counts["built_at"],
        },
        last_gc_record=last_gc(store),
        gc_auto=auto_state(repo),
        seconds=round(time.perf_counter() - t0, 3),
    )
