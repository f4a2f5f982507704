"""The log walk: messages in log order (from a revision, or every thread once), their turn
details from the index, filtered (filters.py), or paged by key."""

from __future__ import annotations

from typing import Iterator

from ..graph import iter_ancestry
from ..provenance import ThreadProvenance, choose, earliest
from .filters import KEY_SQL, Filters, _Match, details, sql
from .healing import healing_iter


def _walk_all(repo, stops: set[str] | None = None) -> Iterator[tuple[str, object]]:
    """(thread, id, message) for every message reachable from a thread, once: thread by
    thread in name order, each from its tip back to where it joins a thread already walked.

    Only thread tips and fork points (messages with two or more children) are remembered: a
    walk that reaches a message already listed must reach it at one of those (else it would
    have come down the same child). Memory grows with threads and forks, not messages. The
    threads come from the index (just caught up), so the first message comes at once; the
    refs are read at the end, and a thread the index left out (a damaged history) or that
    moved meanwhile is walked then.
    """
    db = repo.index.db
    stops = set() if stops is None else stops
    stop_q = ("SELECT EXISTS (SELECT 1 FROM threads WHERE tip = ?1) OR "
              "(SELECT count(*) FROM (SELECT 1 FROM messages WHERE parent_rowid = "
              "(SELECT rowid FROM messages WHERE id = ?1) LIMIT 2) AS c) > 1")

    def walk(tip: str):
        for oid, msg in iter_ancestry(repo.objects, tip, stop=stops):
            yield oid, msg
            if db.execute(stop_q, (oid,)).fetchone()[0]:
                stops.add(oid)

    walked = dict(db.execute("SELECT name, tip FROM threads ORDER BY name").fetchall())
    for name, tip in walked.items():
        for oid, msg in walk(tip):
            yield name, oid, msg
    for name, tip in repo.refs.read_all().items():
        if walked.get(name) != tip:
            for oid, msg in walk(tip):
                yield name, oid, msg


def iter_messages(repo, rev: str | None = None, *, all_threads: bool = False,
                  filters: Filters | None = None) -> Iterator[tuple[str, object, int, dict | None]]:
    """(id, message, depth, turn info) in log order (newest first from ``rev``, or every
    thread with ``all_threads``), filtered. Streams: objects are read in growing batches."""
    return healing_iter(repo, lambda: _iter_messages(repo, rev, all_threads, filters))


def _iter_messages(repo, rev, all_threads, filters):
    repo.index.refresh_if_changed()
    db = repo.index.db
    f = filters or Filters()
    if f.paging:
        yield from _paged(repo, rev, all_threads, f)
        return
    if all_threads:
        walk: Iterator = _walk_all(repo)
    else:
        tip, thread, skipped = _start(repo, "HEAD" if rev is None else rev)
        walk = ((thread, oid, msg) for oid, msg in iter_ancestry(repo.objects, tip))
    local: dict[str, ThreadProvenance] = {}

    def resolver(thread: str | None) -> ThreadProvenance | None:
        if thread is None:
            return None
        if thread not in local:
            local.clear()  # threads are walked one after the other
            local[thread] = ThreadProvenance(repo.index.thread_turns(thread))
        return local[thread]

    if not all_threads and skipped:  # thread~N: the turns above the start cover it too
        r = resolver(thread)
        for oid, depth in skipped:
            r.at(oid, depth)
    match = _Match(db, f) if f.any() else None
    size = 1  # grows to 512: `log -n 1` reads one object, not a batch
    while True:
        chunk = []
        for item in walk:
            chunk.append(item)
            if len(chunk) >= size:
                break
        if not chunk:
            return
        size = min(size * 2, 512)
        info = details(db, [oid for _, oid, _ in chunk])
        for thread, oid, msg in chunk:
            depth, turn = info.get(oid, (-1, None))
            r = resolver(thread) if depth >= 0 else None
            turn = choose(r.at(oid, depth) if r is not None else None, turn)
            if match is None or match(oid, msg.role, depth, turn):
                yield oid, msg, depth, turn


def _start(repo, rev: str) -> tuple[str, str | None, list[tuple[str, int]]]:
    """Where a walk of ``rev`` starts: (its id, the thread it names or None, the (id, depth)
    of the messages between that thread's tip and the start, tip first)."""
    from .. import revparse

    base, n = revparse.split_rev(rev)
    top, thread = revparse.resolve_base(repo, base)
    tip = revparse.resolve(repo, rev)
    skipped: list[tuple[str, int]] = []
    if thread is not None and n:
        for oid, _ in iter_ancestry(repo.objects, top, stop={tip}):
            depth = repo.index.depth(oid)
            if depth is None:
                return tip, None, []
            skipped.append((oid, depth))
    return tip, thread, skipped


def _paged(repo, rev, all_threads: bool, f: Filters) -> Iterator[tuple[str, object, int, dict | None]]:
    """Messages with a key above the bound, oldest first (the index drives; 1,000 a batch)."""
    import dataclasses

    from .. import revparse
    from ..graph import read_message

    db = repo.index.db
    with_, with_params, conds, params = sql(dataclasses.replace(f, id_gt=None, id_gte=None))
    if not all_threads:
        tip = revparse.resolve(repo, "HEAD" if rev is None else rev)
        anc = ("anc2(rid) AS (SELECT rowid FROM messages WHERE id = ? UNION SELECT m0.parent_rowid FROM messages m0 "
               "JOIN anc2 ON m0.rowid = anc2.rid WHERE m0.parent_rowid IS NOT NULL) ")
        with_ = (with_.rstrip() + ", " + anc) if with_ else "WITH RECURSIVE " + anc
        with_params = [*with_params, tip]
        conds.append("m.rowid IN (SELECT rid FROM anc2)")
    params = [*with_params, *params]
    strict = f.id_gt is not None and (f.id_gte is None or f.id_gt >= f.id_gte)
    after = f.id_gt if strict else f.id_gte
    while True:
        q = (f"{with_}SELECT id, k FROM (SELECT m.id AS id, {KEY_SQL} AS k FROM messages m "
             f"LEFT JOIN turns t ON t.rowid = m.turn_rowid WHERE {' AND '.join(conds)}) AS keyed "
             f"WHERE k {'>' if strict else '>='} ? ORDER BY k LIMIT 1000")
        rows = db.execute(q, [*params, after]).fetchall()
        if not rows:
            return
        info = details(db, [r[0] for r in rows])
        for oid, _key in rows:
            depth, turn = info.get(oid, (-1, None))
            yield oid, read_message(repo.objects, oid), depth, earliest(turn)
        after, strict = rows[-1][1], True
