"""Walking the message DAG: pure functions over an object store."""

from __future__ import annotations

from typing import Callable, Iterator

from . import codec
from .errors import ObjectCorrupt
from .objects import AttachmentPart, Message, ReasoningPart, TextPart, Turn


def read_message(objects, oid: str) -> Message:
    """The message ``oid`` (ObjectCorrupt if that id holds another type)."""
    obj = objects.read(oid)
    if not isinstance(obj, Message):
        raise ObjectCorrupt(f"{oid} is a {type(obj).__name__.lower()}, not a message", oid=oid)
    return obj


def find_turn(objects, oid: str):
    """The turn object ``oid``, or None when it is not stored, cannot be read, or is not a
    turn."""
    from .errors import ConvgitError
    from .objects import Turn

    try:
        obj = objects.read(oid)
    except ConvgitError:
        return None
    return obj if isinstance(obj, Turn) else None


def iter_ancestry(objects, tip: str | None, stop: set[str] | None = None) -> Iterator[tuple[str, Message]]:
    """(id, message) from ``tip`` back to the root (or until an id in ``stop``)."""
    oid = tip
    seen = 0
    while oid is not None and (stop is None or oid not in stop):
        msg = read_message(objects, oid)
        yield oid, msg
        oid = msg.parent
        seen += 1
        if seen > 50_000_000:  # pragma: no cover - a cycle is impossible with hashes
            raise ObjectCorrupt("ancestry too long")


def ancestry_ids(objects, tip: str | None) -> list[str]:
    """Ids from the root to ``tip`` (reading order)."""
    ids = [oid for oid, _ in iter_ancestry(objects, tip)]
    ids.reverse()
    return ids


def longest_stored_prefix(objects, ids: list[str]) -> int:
    """How many leading ids of a chain (root first, each the parent of the next) are stored,
    with nothing missing before them: ``ids[:k]`` are all stored, ``ids[k]`` is not.

    Stored messages are closed under "parent of" (a message is only written after its parent
    and gc keeps ancestors of what it keeps), so membership is monotone along the chain and a
    binary search needs only log2(n) existence checks. That holds for what convgit writes, not
    for a store whose files were deleted by hand: so the prefix found is checked id by id (an
    existence check, no read: a few ms for 1,000 ids) and ends before the first hole, which
    makes a commit write the missing messages again (healing the store) instead of
    acknowledging a history whose middle is gone.
    """
    lo = stored_search(objects, ids)
    hole = first_missing(objects, ids, lo - 1)  # ids[lo - 1] itself was just found stored
    return hole if hole < lo - 1 else lo


def stored_search(objects, ids: list[str], lo: int = 0) -> int:
    """The binary search of ``longest_stored_prefix`` alone, from ``lo``: the first index at
    or after ``lo`` whose id ``objects`` does not hold, if membership is monotone along the
    chain (no hole check)."""
    hi = len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if objects.contains(ids[mid]):
            lo = mid + 1
        else:
            hi = mid
    return lo


def first_missing(objects, ids: list[str], end: int | None = None) -> int:
    """The index of the first of ``ids[:end]`` that is not stored (``end`` if all are).

    The common answer is "all", so the probe is cheap where the store lets it be: a loose
    file's existence, or a lookup in the pack indexes already loaded, trying first where the
    previous id was (a chain's old part sits in packs, its recent part in loose files). Only
    an id found in neither is asked of ``objects.contains``, which re-reads the pack list.

    The packs are tried oldest first (``packs_by_age`` when the store has it), starting at the
    pack that held the previous id and going round: a chain's messages were written in
    order, so its next id is in that pack or a later one. A chain spread over a pack per
    batch (``convgit serve``) then costs about one pack probe per id and one per pack, not
    one per id and pack. A chain whose ids are all loose files (a re-send of a recent
    conversation) opens no pack index."""
    end = len(ids) if end is None else end
    is_loose = getattr(objects, "is_loose", None)
    packs = getattr(objects, "packs", None)
    if is_loose is None or packs is None:
        for i in range(end):
            if not objects.contains(ids[i]):
                return i
        return end
    by_age = getattr(objects, "packs_by_age", None)
    loaded = None  # the packs, listed (and their indexes opened) for the first id not loose
    at = 0  # where the previous id was found

    def in_packs(oid: str) -> bool:
        nonlocal at, loaded
        if loaded is None:
            loaded = by_age() if by_age is not None else packs()
        n = len(loaded)
        if n and loaded[at].contains(oid):  # the common case: the same pack as the previous id
            return True
        for k in range(1, n):
            j = at + k if at + k < n else at + k - n
            if loaded[j].contains(oid):
                at = j
                return True
        return False

    probes = (is_loose, in_packs)
    for i in range(end):
        oid = ids[i]
        if probes[0](oid):
            continue
        if probes[1](oid):
            probes = probes[::-1]
            continue
        if not objects.contains(oid):
            return i
    return end


def sub_turns(turn) -> list[str]:
    """The per-message turns an import turn lists in ``meta["turns"]`` (docs/format.md §3.2)."""
    subs = (turn.meta or {}).get("turns")
    if not isinstance(subs, (list, tuple)):
        return []
    from .ids import is_oid

    return [s for s in subs if isinstance(s, str) and is_oid(s)]


def typed_references(obj) -> list[tuple[str, str]]:
    """The ids an object points at, each with the type it must have: a message's parent
    (message) and blobs (blob); a turn's input, output and fork point (messages) and the
    per-message turns an import turn lists (turns)."""
    out: list[tuple[str, str]] = []
    if isinstance(obj, Message):
        if obj.parent:
            out.append((obj.parent, "message"))
        for p in obj.parts:
            if isinstance(p, _BLOB_PARTS) and p.blob:
                out.append((p.blob, "blob"))
    elif isinstance(obj, Turn):
        for oid in (obj.input, obj.output, obj.forked_at):
            if oid:
                out.append((oid, "message"))
        out.extend((t, "turn") for t in sub_turns(obj))
        out.extend((b, "blob") for b in raw_blobs(obj))
    return out


_BLOB_PARTS = (TextPart, ReasoningPart, AttachmentPart)  # the part kinds that may name a blob
RAW_KEYS = ("raw_request", "raw_response")


def raw_blobs(turn) -> list[str]:
    """The blobs a recorded call keeps its raw request and response bodies in
    (``meta.raw_request``, ``meta.raw_response``: docs/format.md §3.2, written by ``convgit serve``)."""
    meta = turn.meta or {}
    from .ids import is_oid

    return [meta[k] for k in RAW_KEYS if isinstance(meta.get(k), str) and is_oid(meta[k])]


def records_reachable(turn, reachable: set[str], parent_of: Callable[[str], str | None]) -> bool:
    """Does ``turn`` record a message in ``reachable``: its output, a message it gives
    provenance for (those after its input, up to its output), or, for a model call, its
    input (the request's last message, part of what the call sent)?

    The provenance rule of gc and fsck (docs/format.md §10): such a turn is kept whatever
    happened to the ref or reflog that named it. The input of an append, import or fork
    turn does not count: it is where that event's new messages start (a message another
    event brought), and a kept turn keeps its output, so counting it would make every
    deleted fork's own messages live as long as the thread it forked from.
    ``parent_of`` gives the parent of an unreachable message (None at a root or when it is
    not stored). ``reachable`` is closed under "parent of", so the walk stops at the first
    reachable message it meets.
    """
    if turn.kind == "call" and turn.input is not None and turn.input in reachable:
        return True
    oid = turn.output
    steps = 0
    while oid is not None and oid != turn.input and steps < 10_000_000:
        if oid in reachable:
            return True
        oid = parent_of(oid)
        steps += 1
    return False


def keep_recording_turns(pending: dict, reachable: set[str], parent_of: Callable[[str], str | None],
                         mark: Callable[[list[str]], None]) -> None:
    """The provenance rule's fixpoint (gc and fsck): while some turn in ``pending`` (id →
    Turn, none marked yet) records a reachable message (records_reachable), ``mark`` those
    turns (which adds what they reach to ``reachable``) and look again. ``pending`` is
    consumed."""
    while pending:
        keep = [t for t, obj in pending.items() if records_reachable(obj, reachable, parent_of)]
        if not keep:
            return
        for t in keep:
            del pending[t]
        mark(keep)


def deleted_provenance(archived: list[tuple[str, list]], tips, read: Callable[[str], object]) -> list[tuple[str, list]]:
    """Of deleted threads' archived reflogs ``archived`` ((log, entries naming a turn)), the
    entries whose turn records a message reachable from ``tips`` (records_reachable): the
    provenance a merge or a bundle must carry with those threads. ``read(oid)`` gives a
    decoded object or None."""
    from .ids import is_oid
    from .objects import Turn

    parents: dict[str, str | None] = {}

    def parent_of(oid: str) -> str | None:
        if oid not in parents:
            obj = read(oid)
            parents[oid] = obj.parent if isinstance(obj, Message) else None
        return parents[oid]

    reach: set[str] = set()
    for tip in tips:
        oid = tip
        while oid is not None and oid not in reach and is_oid(oid):
            reach.add(oid)
            oid = parent_of(oid)
    keep: dict[str, bool] = {}
    out = []
    for log, entries in archived:
        mine = []
        for e in entries:
            if not is_oid(e.turn):
                continue
            if e.turn not in keep:
                t = read(e.turn)
                keep[e.turn] = isinstance(t, Turn) and records_reachable(t, reach, parent_of)
            if keep[e.turn]:
                mine.append(e)
        if mine:
            out.append((log, mine))
    return out


def references(obj) -> list[str]:
    """The ids an object points at (``typed_references`` without the types)."""
    return [oid for oid, _ in typed_references(obj)]


def mark_reachable(objects, roots, *, on_missing=None, visit: Callable[[str, bytes], None] | None = None,
                   seen: set[str] | None = None, lost: list | None = None) -> set[str]:
    """Every id reachable from ``roots`` (messages, blobs, turns). A missing object calls
    ``on_missing(oid, referrer)`` (default: raise ObjectMissing). ``visit``, when given, is
    called with each object's id and verified bytes as it is reached (depth first: a thread's
    chain, tip to root, one after the other: gc packs them in this order as it reads them).

    ``seen``: ids already marked (not read again; the set is extended and returned). A
    per-message turn an import turn lists that is missing is not an error here (a gc before
    convgit 0.2 pruned them: the store already lost it, and refusing would protect nothing);
    it is appended to ``lost`` as (turn id, import turn id) and fsck reports it.
    """
    from .errors import ObjectMissing

    seen = set() if seen is None else seen
    todo: list[tuple[str, str | None, str | None]] = [(r, None, None) for r in roots]
    while todo:
        oid, by, want = todo.pop()
        if oid in seen:
            continue
        try:
            if visit is None:
                obj = objects.read(oid)
            else:
                data = objects.read_bytes(oid)
                obj = codec.decode(data, oid)
        except ObjectMissing:
            if want == "turn":
                if lost is not None:
                    lost.append((oid, by))
                continue
            if on_missing is None:
                raise ObjectMissing(f"object {oid} (referenced by {by or 'a ref'}) is missing", oid=oid) from None
            on_missing(oid, by)
            continue
        seen.add(oid)
        if visit is not None:
            visit(oid, data)
        for ref, kind in typed_references(obj):
            if ref not in seen:
                todo.append((ref, oid, kind))
    return seen
