"""Running a full-text search: rank in FTS5, order ties exactly, then describe each hit
(threads that reach it, its turn, a snippet). The FTS table and the query language are in fts.py."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidInput
from ..timefmt import iso
from . import reach
from .filters import Filters, details, sort_key
from .filters import sql as filter_sql
from .fts import _TEXT_COLUMN, COLUMNS, DEFAULT_IN, FTS_TABLE, WEIGHTS, Query, QuerySyntax, Term, parse, snippet
from .healing import healing_call


@dataclass
class Hit:
    """One message found. ``threads``: the first 20 threads (by name) whose history holds it,
    ``thread_count`` how many do (a lower bound when ``threads_more``)."""

    id: str
    role: str
    score: float
    key: str
    threads: list[str]
    thread_count: int
    threads_more: bool
    turn: dict | None
    column: str | None
    snippet: str
    highlights: list[tuple[int, int]]
    match: str = "fts"  # fts, fts-any (some of the words), semantic, hybrid (both lists)
    chunk: str | None = None  # the chunk that matched (semantic, hybrid)

    def to_json(self) -> dict:
        """The hit as one entry of ``search --json``."""
        t = self.turn or {}
        return {
            "id": self.id,
            "role": self.role,
            "threads": self.threads,
            "thread_count": self.thread_count,
            "threads_more": self.threads_more,
            "started_at": iso(t.get("started_at")),
            "model": t.get("resolved_model") or t.get("model"),
            "source": t.get("source"),
            "turn": t.get("turn"),
            "key": self.key,
            "score": round(self.score, 6),
            "in": self.column,
            "snippet": self.snippet,
            "highlights": [list(h) for h in self.highlights],
            "match": self.match,
            "chunk": self.chunk,
        }


_USER_ERRORS = ("fts5:", "no such column", "unterminated string", "unknown special query", "malformed MATCH")


def search(repo, text: str, *, count: int = 20, latest: bool = False, columns: tuple[str, ...] = DEFAULT_IN,
           filters=None, any_words: bool = False) -> list[Hit]:
    """The ``count`` best matches for an FTS5 query (0: all), best first, or newest first with
    ``latest``. Ranking: bm25 with per-column weights (``WEIGHTS``); ties by newest key.
    ``any_words``: a query of plain words (``plain_words``) that finds fewer than ``count``
    messages with every word is topped up with messages that have any of them (match kind
    ``fts-any``), ranked by bm25 too."""
    words = plain_words(text) if any_words else None
    if words:
        text = " ".join(words)  # (a comma is an FTS5 syntax error; plain words have none)
    q = parse(text, tuple(columns))
    ranked = [(r, s, "fts", None) for r, s in fts_ranked(repo, text, count=count, latest=latest, columns=columns,
                                                         filters=filters)]
    if words and len(words) > 1 and (count == 0 or len(ranked) < count):
        seen = {r for r, *_ in ranked}
        more = fts_ranked(repo, " OR ".join(words), count=count + len(seen) if count else 0, latest=latest,
                          columns=columns, filters=filters)
        ranked += [(r, s_, "fts-any", None) for r, s_ in more if r not in seen]
        if count:
            ranked = ranked[:count]
        q = parse(" OR ".join(words), tuple(columns))
        return describe(repo, ranked, columns, highlight_terms(q.terms))
    return describe(repo, ranked, columns, q.terms)


def highlight_terms(terms: list[Term]) -> list[Term]:
    """The terms worth highlighting for a query matched by any of its words: short ASCII
    words ("I", "my", "of") are left out when longer ones remain."""
    kept = [t for t in terms if any(len(tok) > 2 or not tok.isascii() for tok in t.tokens)]
    return kept or terms


_PLAIN = re.compile(r"^[^\W_]+(?:['’][^\W_]+)*$")


def plain_words(text: str) -> list[str] | None:
    """The words of a query typed in plain words (no quotes, operators, prefixes or column
    filters: only words and light punctuation , . ? ! ; ' ), None for any other query."""
    words = []
    for w in text.split():
        w = w.strip(",.?!;")
        if not w:
            continue
        if not _PLAIN.match(w) or w in ("AND", "OR", "NOT", "NEAR"):
            return None
        words.append(w)
    if re.search(r'["*^{}:()]|(^|\s)[-+]', text):
        return None
    return words or None


def fts_ranked(repo, text: str, *, count: int = 20, latest: bool = False, columns: tuple[str, ...] = DEFAULT_IN,
               filters=None) -> list[tuple[int, float]]:
    """(message rowid, bm25 score) of the ``count`` best full-text matches, in order."""
    import sqlite3

    if count < 0:
        raise InvalidInput("-n must be 0 (all) or more")
    q = parse(text, tuple(columns))
    f = filters or Filters()
    index = repo.index
    index.refresh_if_changed()

    def ranked_rows():
        own = getattr(index, "ranked", None)  # a backend with its own full-text search (postgres/fts.py)
        if own is not None:
            try:
                return own(q, f, count, latest)
            except QuerySyntax as e:
                raise InvalidInput(_worded(text, e.detail)) from None
        try:
            return _ranked(index.db, q, f, count, latest)
        except sqlite3.OperationalError as e:
            if not any(s in str(e) for s in _USER_ERRORS):
                raise
            raise InvalidInput(_explain(index.db, q, text, e)) from None

    return healing_call(repo, ranked_rows)  # a damaged page: the index is a cache


def describe(repo, ranked: list[tuple[int, float, str, str | None]], columns, terms: list[Term],
             chunk_texts: dict[str, str] | None = None) -> list[Hit]:
    """Hits for (message rowid, score, match kind, chunk id) in that order: threads that reach
    each message, its turn, and a snippet (from the chunk's text when there is one)."""
    db = repo.index.db
    rows = {r[0]: r[1:] for r in _in_rowids(
        db, "SELECT m.rowid, m.id, m.role FROM messages m WHERE m.rowid IN ({})", [r[0] for r in ranked])}
    ranked = [r for r in ranked if r[0] in rows]
    info = details(db, [rows[r[0]][0] for r in ranked])
    hits = []
    for rowid, score, match, cid in ranked:
        oid, role = rows[rowid]
        depth, turn = info.get(oid, (0, None))
        key = sort_key((turn or {}).get("started_at"), (turn or {}).get("turn"), oid, depth)
        names, n, more = reach.threads_reaching(db, oid)
        if cid is not None and chunk_texts and cid in chunk_texts:
            col = _TEXT_COLUMN.get(role, "system")
            snip, hl = snippet(chunk_texts[cid], terms)
        else:
            col, snip, hl = _snippet_for(db, rowid, oid, role, columns, terms)
        hits.append(Hit(oid, role, score, key, names, n, more, turn, col, snip, hl, match, cid))
    return hits


# Newest key first, as SQL: the key's parts, without building the string for every match.
_KEY_DESC = "coalesce(t.started_at, 0) DESC, substr(coalesce(t.id, m.id), 1, 16) DESC, m.depth DESC, m.id"


def _ranked(db, q: Query, f, count: int, latest: bool) -> list[tuple[int, float]]:
    """(rowid, score) of the results in order: score (best first) or key (``latest``), then
    key newest first, then message id. The same order after an index rebuild."""
    bm = f"bm25({FTS_TABLE}, {', '.join(str(WEIGHTS[c]) for c in COLUMNS)})"
    if count and not latest and not f.any():
        # Fast path: rank inside FTS5 alone (no join per match), fetch a few more than asked
        # so that ties at the cut can be ordered exactly; a longer tie takes them all.
        base = f"SELECT rowid, {bm} AS s FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? ORDER BY s"
        extra = 32
        rows = db.execute(base + " LIMIT ?", (q.fts, count + extra)).fetchall()
        if len(rows) == count + extra and rows[count - 1][1] == rows[-1][1]:
            rows = db.execute(f"SELECT rowid, s FROM ({base}) WHERE s <= ?", (q.fts, rows[count - 1][1])).fetchall()
        keyed = {r[0]: r[1:] for r in _in_rowids(
            db, "SELECT m.rowid, coalesce(t.started_at, 0), substr(coalesce(t.id, m.id), 1, 16), m.depth, m.id "
                "FROM messages m LEFT JOIN turns t ON t.rowid = m.turn_rowid WHERE m.rowid IN ({})", [r[0] for r in rows])}
        rows = [r for r in rows if r[0] in keyed]
        rows.sort(key=lambda r: keyed[r[0]][3])
        rows.sort(key=lambda r: keyed[r[0]][:3], reverse=True)
        rows.sort(key=lambda r: r[1])
        return [(r[0], r[1]) for r in rows[:count]]
    with_, with_params, conds, params = filter_sql(f)
    conds = conds[1:]  # unreachable messages are not in the FTS index
    order = _KEY_DESC if latest else "s, " + _KEY_DESC
    sql = (f"{with_}SELECT m.rowid, {bm} AS s FROM {FTS_TABLE} JOIN messages m ON m.rowid = {FTS_TABLE}.rowid "
           f"LEFT JOIN turns t ON t.rowid = m.turn_rowid WHERE {FTS_TABLE} MATCH ?{''.join(' AND ' + c for c in conds)} "
           f"ORDER BY {order}" + (" LIMIT ?" if count else ""))
    return db.execute(sql, [*with_params, q.fts, *params] + ([count] if count else [])).fetchall()


def _in_rowids(db, sql: str, rowids: list[int]) -> list[tuple]:
    out: list[tuple] = []
    for i in range(0, len(rowids), 500):
        chunk = rowids[i : i + 500]
        out.extend(db.execute(sql.format(",".join("?" * len(chunk))), chunk).fetchall())
    return out


def _explain(db, q: Query, text: str, e: Exception) -> str:
    """The error for the user's own query (not for the column filter wrapped around it)."""
    msg = str(e)
    inner = q.fts[q.fts.index(": (") + 3 : -1]
    try:
        db.execute(f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? LIMIT 1", (inner,)).fetchall()
    except Exception as e2:  # noqa: BLE001 - any SQLite complaint is the answer
        msg = str(e2)
    return _worded(text, msg)


def _worded(text: str, msg: str) -> str:
    """The error for a query the engine refused with ``msg``, with a hint."""
    hint = ""
    if "no such column" in msg:
        hint = (f"; a word followed by ':' filters on a column ({', '.join(COLUMNS)}): "
                "put other words with ':' in double quotes")
    elif "syntax error" in msg:
        hint = '; put words with special characters in double quotes ("like this"), or see FTS5 query syntax'
    return f"malformed search query {text!r}: {msg}{hint}"


def _snippet_for(db, rowid: int, oid: str, role: str, columns, terms: list[Term]):
    by_col: dict[str, list[str]] = {}
    text_col = _TEXT_COLUMN.get(role, "system")
    for type_, text, name in db.execute(
        "SELECT type, coalesce(text, convgit_text(?, position)), name FROM parts WHERE message_rowid=? ORDER BY position",
        (oid, rowid),
    ):
        col = {"text": text_col, "reasoning": "reasoning", "tool_call": "tool", "tool_result": "tool"}.get(type_)
        if col and text:
            by_col.setdefault(col, []).append(f"{name} {text}" if name and col == "tool" and type_ != "text" else text)
    fallback = None
    for col in COLUMNS:
        if col not in columns or col not in by_col:
            continue
        text = "\n".join(by_col[col])
        snip, hl = snippet(text, terms)
        if hl:
            return col, snip, hl
        fallback = fallback or (col, snip, hl)
    return fallback or (None, "", [])
