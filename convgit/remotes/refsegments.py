"""Ref segments (remote format 2, docs/format.md §13.3): where a remote's threads live.

``refs.json`` names its segments, a base first and then deltas; each segment is
``refs/<BLAKE3 of its bytes>.json``, written create-only and never overwritten, like a
pack. The remote's threads are the segments' threads laid over each other in order (a
delta's null tip: the thread is gone). A write adds one delta with exactly the threads that
moved, or, once the deltas would outgrow half the base (or there would be ``MAX_SEGMENTS``
segments), writes one new base with every thread and stops naming the others (listed in
``retired_segments`` with the time, for ``gc --remote``'s grace period). So a push of a few
threads sends a few hundred bytes of refs however many threads the remote has, and the
bases rewritten now and then cost at most twice the deltas' bytes over time.

A segment read is cached under ``.convgit/remotes/NAME/refs/`` (immutable: read once) once
its names and tips passed the checks, and checked against its name whenever it is read, from
the cache or the remote; bytes from the cache, being the ones checked, are not checked again
(100,000 thread names cost 0.4 s to check).
"""

from __future__ import annotations

import os
from pathlib import Path

from blake3 import blake3

from .. import fsio
from ..errors import RemoteCorrupt
from .refsdoc import RefsDoc, dump_segment, parse_segment, segment_key

MAX_SEGMENTS = 32  # a base and up to 31 deltas: a reader that is far behind makes at most 32 requests


class Segments:
    """The ref segments of one remote, read through a local cache and written create-only.
    ``sent``/``received``: bytes of segments moved by this object (the wire's share of refs)."""

    def __init__(self, store, folder: Path, where: str) -> None:
        self.store, self.folder, self.where = store, folder, where
        self.sent = self.received = 0

    def _cached(self, digest: str) -> Path:
        return self.folder / f"{digest}.json"

    def _keep(self, digest: str, data: bytes) -> None:
        try:
            fsio.makedirs(self.folder)
            p = self._cached(digest)
            fsio.replace_file(p, data, fsync=False, tmp=p.with_name(f"{fsio.TMP_PREFIX}{digest}.{os.getpid()}"))
        except OSError:
            pass  # a cache: the next read asks the remote again

    def read(self, digest: str) -> tuple[bytes, bool]:
        """The bytes of segment ``digest``, checked against its name, and whether they come
        from the cache (whose segments were checked, names and tips, before they were kept:
        the same bytes need no second check); RemoteCorrupt when the remote lacks it or
        holds other bytes under its name."""
        try:
            data = self._cached(digest).read_bytes()
            if blake3(data).hexdigest() == digest:
                return data, True
        except OSError:
            pass
        got = self.store.get(segment_key(digest))
        if got is None:
            raise RemoteCorrupt(f"remote {self.where}: the refs document names ref segment {digest}, which the remote "
                                f"lacks: refused (convgit fsck --remote)", segment=digest)
        data = got[0]
        self.received += len(data)
        if blake3(data).hexdigest() != digest:
            raise RemoteCorrupt(f"remote {self.where}: ref segment {segment_key(digest)} does not hash to its name: "
                                f"refused; nothing was taken from it", segment=digest)
        return data, False

    def resolve(self, doc: RefsDoc) -> RefsDoc:
        """``doc`` with its threads laid from its segments (a format-1 document as it is)."""
        if doc.version == 1:
            return doc
        threads: dict[str, str] = {}
        for i, (digest, _) in enumerate(doc.segments):
            data, known = self.read(digest)
            layer = parse_segment(data, digest, self.where, base=i == 0, checked=known)
            if not known:
                self._keep(digest, data)  # (checked now: kept only once it passed)
            for name, tip in layer.items():
                if tip is None:
                    threads.pop(name, None)
                else:
                    threads[name] = tip
        doc.threads = threads
        if doc.head is not None and doc.head not in threads:
            doc.head = None  # a stale head only loses the clone's default thread
        self._forget({d for d, _ in doc.segments})
        return doc

    def _forget(self, keep: set[str]) -> None:
        """Drop the cached segments the document just read no longer names (a base
        replaced by a newer one is not needed again)."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for fn in names:
            if fn.endswith(".json") and fn[:-5] not in keep:
                try:
                    os.unlink(self.folder / fn)
                except OSError:
                    pass

    def _write(self, data: bytes) -> tuple[str, int]:
        digest = blake3(data).hexdigest()
        if self.store.put_new(segment_key(digest), data):
            self.sent += len(data)
        self._keep(digest, data)
        return digest, len(data)

    def lay(self, old: RefsDoc, new: RefsDoc, now_ms: int) -> RefsDoc:
        """Name ``new.threads`` in ``new.segments`` as laid over ``old``'s (``old``: the
        document read, which ``new`` will replace by compare-and-swap): the same segments when
        no thread changed, else one more delta, or one new base (see the module docstring).
        The segments are uploaded before this returns; ``new`` is returned, ready to dump."""
        diff: dict[str, str | None] = {n: t for n, t in new.threads.items() if old.threads.get(n) != t}
        diff.update({n: None for n in old.threads if n not in new.threads})
        segments = list(old.segments) if old.version == 2 else []
        delta = dump_segment(diff) if segments and diff else b""
        if segments and not diff:
            new.segments = segments
        elif segments and len(segments) < MAX_SEGMENTS and sum(n for _, n in segments[1:]) + len(delta) <= segments[0][1] // 2:
            new.segments = segments + [self._write(delta)]
        else:
            new.segments = [self._write(dump_segment(dict(new.threads)))]
        named = {d for d, _ in new.segments}
        retired = {**new.retired_segments, **{d: now_ms for d, _ in segments if d not in named}}
        new.retired_segments = {d: t for d, t in retired.items() if d not in named}
        new.version = 2
        return new
