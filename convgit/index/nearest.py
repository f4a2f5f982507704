"""Nearest chunks → messages: the semantic half of search, over the index and one vector
store (vectors.py). Chunks are scored exactly against the query vector, grouped to their
message (its best chunk's score), and the messages are kept only when reachable and when the
filters of log and search (filters.py) hold; the candidate list grows until ``count``
messages pass or every vector was looked at."""

from __future__ import annotations

from . import chunks as C
from .filters import Filters
from .filters import sql as filter_sql
from .healing import healing_call


def semantic_ranked(repo, store, qvec, *, count: int = 20, filters: Filters | None = None,
                    ) -> list[tuple[int, float, str, str]]:
    """(message rowid, cosine score, "semantic", chunk id) of the best ``count`` messages
    (0: all), best first; ties by chunk id."""
    f = filters or Filters()
    repo.index.refresh_if_changed()
    matrix = store.matrix()
    if matrix is None:
        return []
    total = matrix.shape[0]
    want = count or total
    k = min(total, max(4 * want, 64))
    while True:
        top = store.nearest(qvec, k, matrix)
        ids = store.chunk_ids([r for r, _ in top])
        best: dict[str, tuple[float, str]] = {}
        for r, s in top:
            cid = ids[r]
            oid = cid.rpartition(":")[0]
            if oid not in best:  # ``top`` is best first: a message's first chunk is its best
                best[oid] = (s, cid)
        allowed = healing_call(repo, _allowed, repo.index.db, list(best), f)
        out = [(allowed[o], s, "semantic", c) for o, (s, c) in best.items() if o in allowed]
        out.sort(key=lambda x: (-x[1], x[3]))
        if len(out) >= want or k >= total:
            return out[:want]
        k = min(total, k * 4)


def _allowed(db, oids: list[str], f: Filters) -> dict[str, int]:
    """message id → rowid for those of ``oids`` that are reachable and pass the filters."""
    with_, with_params, conds, params = filter_sql(f)
    out: dict[str, int] = {}
    for i in range(0, len(oids), 500):
        part = oids[i : i + 500]
        sql = (f"{with_}SELECT m.id, m.rowid FROM messages m LEFT JOIN turns t ON t.rowid = m.turn_rowid "
               f"WHERE m.id IN ({','.join('?' * len(part))}){''.join(' AND ' + c for c in conds)}")
        out.update(db.execute(sql, [*with_params, *part, *params]).fetchall())
    return out


def chunk_texts(repo, cids: list[str], rules: C.ChunkRules) -> dict[str, str]:
    """chunk id → its text, for the chunks the index holds."""
    db = repo.index.db
    rows = C.rows_for(db, cids)
    keys = [c for c in cids if c in rows]
    return dict(zip(keys, C.texts_of(db, [rows[c] for c in keys], rules)))


def message_ids(db, rowids: list[int]) -> dict[int, str]:
    """message rowid → id (rowids differ between an index and its rebuild; ids never do)."""
    out: dict[int, str] = {}
    for i in range(0, len(rowids), 500):
        part = rowids[i : i + 500]
        out.update(db.execute(f"SELECT rowid, id FROM messages WHERE rowid IN ({','.join('?' * len(part))})", part))
    return out
