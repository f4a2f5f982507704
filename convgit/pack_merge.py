"""Merging packs geometrically (git's ``repack --geometric=2``), without marking: the packs
sorted by object count, the smallest ones merged into one until every pack holds at least
twice as many objects as all the smaller ones together. The pack count stays logarithmic in
the objects written, each object is rewritten O(log n) times, and nothing is pruned: every
object of the merged packs is copied, reachable or not. Loose objects go into the merged
pack too once there are enough of them.

Safety (as gc's repack, docs/format.md §6.3): the merged pack is durable before any pack or
loose file it replaces is deleted, so every object stays readable at every moment (a reader
that had the old pack open keeps its mapping; one that misses looks again and finds the new
pack). The caller holds ``gc.lock`` (no gc or fsck meanwhile) and the store lock shared, as
a writer: writers go on beside it. Used by the serve committer (serve/compact.py) and by
``gc --auto`` on a store too large to mark while writers wait (convgit/gc.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import fsio
from .errors import ConvgitError, StorageFailed
from .pack import write_pack

FACTOR = 2
MIN_LOOSE = 64  # loose objects packed with a merge from this many (fewer: left to gc)
MAX_OBJECTS = 200_000  # a merge larger than this is left to gc (the committer would stall)


@dataclass
class Compaction:
    """What one merge did: packs merged (and the objects they held), loose objects packed,
    packs before and after."""

    packs_merged: int = 0
    objects: int = 0
    loose_packed: int = 0
    packs_before: int = 0
    packs_after: int = 0


def geometric_split(counts: list[int], factor: int = FACTOR) -> int:
    """How many of the smallest packs (``counts`` sorted ascending) to merge so that the rest,
    with the merged one, form a progression: each pack at least ``factor`` times the objects
    of all smaller ones together. 0 or 1: nothing to merge."""
    n = len(counts)
    for k in range(n + 1):
        total = sum(counts[:k])
        rest = counts[k:]
        if any(rest[i + 1] < factor * rest[i] for i in range(len(rest) - 1)):
            continue
        if k == 0 or not rest or rest[0] >= factor * total:
            return k
    return n


def merge_due(objects, factor: int = FACTOR) -> bool:
    """Whether the packs as this process sees them would be merged (cheap: the pack list is
    re-read only when the pack directory changed)."""
    return geometric_split(sorted(p.count for p in objects.packs()), factor) > 1


def merge_packs(objects, factor: int = FACTOR, min_loose: int | None = MIN_LOOSE,
                max_objects: int | None = MAX_OBJECTS) -> Compaction | None:
    """Merge ``objects``' small packs (the module docstring), with its loose objects when
    ``min_loose`` is not None and there are that many; at most ``max_objects`` objects of
    packs (None: no bound). The caller holds gc.lock and the store lock. Returns what was
    done, or None when there was nothing to do."""
    packs = sorted(objects.packs(reload=True), key=lambda p: (p.count, p.name))
    k = geometric_split([p.count for p in packs], factor)
    while k > 1 and max_objects is not None and sum(p.count for p in packs[:k]) > max_objects:
        k -= 1  # the largest of them stays for gc
    chosen = packs[:k] if k > 1 else []
    loose = list(objects.iter_loose()) if min_loose is not None else []
    if len(loose) < (min_loose or 0):
        loose = []
    if not chosen and not loose:
        return None
    if loose and not chosen and packs and packs[0].count < factor * len(loose):
        chosen = packs[:1]  # (the loose objects join the smallest pack rather than beside it)
    age = {p.name: i for i, p in enumerate(objects.packs_by_age())}
    where: dict[str, object] = {}
    order: list[str] = []
    # oldest pack first, each in its own order: a conversation's messages stay side by side
    for p in sorted(chosen, key=lambda p: age.get(p.name, 0)):
        for oid in p.ids_in_pack_order():
            if oid not in where:
                where[oid] = p
                order.append(oid)
    loose_data: dict[str, bytes] = {}
    for oid in loose:
        if oid not in where:
            try:
                loose_data[oid] = objects.read_bytes(oid)  # verified: a damaged file stays for fsck
            except ConvgitError:
                continue
            order.append(oid)

    def get(oid: str) -> bytes:
        if oid in loose_data:
            return loose_data[oid]
        data = where[oid].read(oid)  # (verifies the id)
        if data is None:
            raise StorageFailed(f"object {oid} could not be read from {where[oid].name}; no pack merged")
        return data

    before = len(packs)
    write_pack(objects.pack_dir, order, get, fsync=objects.fsync)  # durable before anything goes
    objects.packs(reload=True)
    for oid in loose_data:
        fsio.unlink_quiet(objects._file(oid))
    for p in chosen:
        p.close()
        fsio.unlink_quiet(p.idx_path)  # the idx first: readers stop looking in it
        fsio.unlink_quiet(p.pack_path)
    after = len(objects.packs(reload=True))
    return Compaction(packs_merged=len(chosen), objects=sum(p.count for p in chosen), loose_packed=len(loose_data),
                      packs_before=before, packs_after=after)
