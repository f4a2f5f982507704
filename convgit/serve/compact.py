"""Bounding the pack count while serving: the committer merges small packs when idle.

Each committer batch of more than a few calls writes its objects as one pack, so a server
adds a pack per batch, and every existence probe, read and hole check then has more packs
to try. gc merges them (``gc --auto`` past ``[gc] auto_pack_limit`` packs), but gc marks
the whole store: far too heavy to run every few batches. This is git's ``repack
--geometric=2`` instead: the packs sorted by object count, the smallest ones are merged into
one until every pack holds at least twice as many objects as all the smaller ones together.
The pack count stays logarithmic in the objects written (a batch's pack is merged with its
equals, the result with its equals, and so on), and each object is rewritten O(log n) times.
Loose objects (the small batches') go into the merged pack too once there are enough of them.
The merge itself is convgit/pack_merge.py (gc --auto uses it too, on large stores).

Safety (as gc's repack, docs/format.md §6.3): the merged pack is durable before any pack or
loose file it replaces is deleted, so every object stays readable at every moment (a reader
that had the old pack open keeps its mapping; one that misses looks again and finds the new
pack). Nothing is pruned: every object of the merged packs is copied, reachable or not.
It runs under ``gc.lock`` taken without waiting (a gc or an fsck running: no merge now) and
the store lock shared, as a writer (a gc waits for it, and it for a gc). It holds
``compact.lock`` meanwhile, so that a gc asked for by hand waits for the merge to end
rather than skipping as it would beside another gc.
"""

from __future__ import annotations

import os

from .. import fsio
from ..gc import COMPACT_LOCK
from ..pack_merge import FACTOR, MAX_OBJECTS, MIN_LOOSE, Compaction, geometric_split, merge_due, merge_packs

__all__ = ["Compaction", "compact", "geometric_split", "merge_due"]


def compact(repo, *, loose: bool = True, factor: int = FACTOR, min_loose: int = MIN_LOOSE,
            max_objects: int = MAX_OBJECTS) -> Compaction | None:
    """Merge the store's small packs (see the module docstring), with its loose objects when
    ``loose`` and there are ``min_loose`` of them. Returns what was done, or None when there
    was nothing to do or a gc/fsck holds ``gc.lock``."""
    objects = repo.objects
    mark = fsio.try_flock(repo.path / COMPACT_LOCK, shared=False)  # (tells a gc by hand to wait, not skip)
    if mark is None:
        return None
    try:
        fd = fsio.try_flock(repo.path / "gc.lock", shared=False)
        if fd is None:
            return None
        try:
            with repo.write_lock():
                return merge_packs(objects, factor, min_loose if loose else None, max_objects)
        finally:
            os.close(fd)
    finally:
        os.close(mark)


