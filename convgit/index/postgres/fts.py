"""Full-text search in the PostgreSQL index, answering as the SQLite index's FTS5 table does.

Tokens: a message's five columns (user, assistant, system, tool, reasoning; index/fts.py) are
cut and folded by convgit's tokenizer (``fts.iter_tokens``: the rules of SQLite's ``unicode61
remove_diacritics 2``, space-less scripts one character a token), not by a PostgreSQL text
search configuration: ``unaccent`` folds more than SQLite does ("ø" → "o", "ł" → "l", Greek
accents), which would change which messages a query finds. Each row keeps its columns' tokens
in order (``TEXT[]``) and a ``tsvector`` of them, each lexeme its column's letter + the token,
under a GIN index: a query is first a ``tsquery`` that finds a superset of the matches (the
candidates), then evaluated exactly over their tokens.

Two ways to an answer. A query of phrases (words, "phrases", ``prefix*``, ``^``, joined by
AND / OR / NOT, in any columns; not NEAR) with a count is ranked by the server: whether a row
matches and its bm25 depend only on how many instances of each phrase each column holds,
which SQL counts in the token arrays (``_count_sql``); only a shortlist, the rows that can be
among the first ``count`` (ties and all), comes back, to be evaluated and scored here as
below. NEAR, and a count of 0 (all), send every candidate's tokens here. Either way the candidates' messages and turns (the
filters, the key) are read by primary key one candidate at a time (a LATERAL subquery the
planner cannot turn into a join) up to ``_lateral_max`` candidates, as the planner, which has
no estimate for a rare word, would otherwise read every message to join 20 candidates.

The query language is FTS5's as index/fts.py hands it over: words and "phrases", ``prefix*``,
``+``, ``^`` (first token of a column), AND / OR / NOT / implicit AND, parentheses and column
filters (``user:``, ``{user tool}:``, ``-tool:``), ``NEAR(… , n)``.

Ranking is FTS5's bm25 computed the way SQLite computes it (k1 = 1.2, b = 0.75, per-column
weights, IDF floored at 1e-6, document length over every column), in the same order of
floating-point operations, so scores are the same numbers and ties fall the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..filters import Filters
from ..filters import sql as filter_sql
from ..fts import COLUMNS, WEIGHTS, QuerySyntax, iter_tokens

LETTERS = {"user": "u", "assistant": "a", "system": "s", "tool": "t", "reasoning": "r"}
_ARRAY_COLS = tuple(LETTERS[c] for c in COLUMNS)
OVERSIZED = "*"  # the one lexeme of a row too large for a tsvector: always a candidate
_MAX_LEXEME = 400  # characters of a token kept in the tsvector (PostgreSQL's limit is 2 KB)
_MAX_TSVECTOR = 512 * 1024
K1, B = 1.2, 0.75
_SHORT = 256  # tokens: up to this many, a phrase is looked for in a column by subscripts (_count_sql)


def tokens(text: str | None) -> list[str]:
    """The tokens of a column's (prepared) text as FTS5 cuts them."""
    return [t for _, _, t in iter_tokens(text)] if text else []


def fts_row(rowid: int, values: tuple) -> tuple:
    """(rowid, token count, lexemes, five token arrays) for one message's column values."""
    cols = [tokens(v) for v in values]
    lex = sorted({LETTERS[c] + t[:_MAX_LEXEME] for c, toks in zip(COLUMNS, cols) for t in toks})
    if sum(len(x.encode("utf-8")) + 8 for x in lex) > _MAX_TSVECTOR:
        lex = [OVERSIZED]
    return (rowid, sum(len(c) for c in cols), lex, *[c or None for c in cols])


class PgFts:
    """The full-text table of one PostgreSQL index (``message_fts`` and ``fts_stats``)."""

    def __init__(self, db) -> None:
        self.db = db

    def insert(self, rows: list[tuple]) -> None:
        """Add rows ``(rowid, user, assistant, system, tool, reasoning)`` (fts.fts_values)."""
        out = [fts_row(r[0], r[1:]) for r in rows]
        if not out:
            return
        with self.db.copy("COPY message_fts (rowid, ntok, lex, u, a, s, t, r) FROM STDIN") as cp:
            for rowid, ntok, lex, *cols in out:
                cp.write_row((rowid, ntok, " ".join(_quote(x) for x in lex), *cols))
        self.db.raw("UPDATE fts_stats SET rows = rows + %s, tokens = tokens + %s",
                    (len(out), sum(r[1] for r in out)))

    def delete(self, rowid: int) -> None:
        """Take message row ``rowid`` out."""
        row = self.db.raw("DELETE FROM message_fts WHERE rowid = %s RETURNING ntok", (rowid,)).fetchone()
        if row is not None:
            self.db.raw("UPDATE fts_stats SET rows = rows - 1, tokens = tokens - %s", (row[0],))

    # -- searching --------------------------------------------------------------------------

    def ranked(self, q, f: Filters | None, count: int, latest: bool) -> list[tuple[int, float]]:
        """(message rowid, bm25 score) of the results in the SQLite index's order: score (best
        first) or key (``latest``), then key newest first, then message id."""
        try:
            tree = parse_fts(q.fts)
        except QuerySyntax:
            parse_fts(q.fts[q.fts.index(": (") + 3 : -1])  # the user's own query words the error, as SQLite's does
            raise
        cand = tree.candidates()
        if cand is None:
            return []
        f = f or Filters()
        n_rows, n_tokens = self.db.raw("SELECT rows, tokens FROM fts_stats").fetchone()
        if not n_rows:
            return []
        if count and _countable(tree):
            out = self._ranked_in_sql(tree, cand, f, count, latest, n_rows, n_tokens)
            if out is not None:
                return out
        return self._ranked_in_python(tree, cand, f, count, latest, n_rows, n_tokens)

    def _ranked_in_python(self, tree, cand: str, f: Filters, count: int, latest: bool, n_rows: int,
                          n_tokens: int) -> list[tuple[int, float]]:
        """Every candidate's tokens evaluated and scored here (any query): first how many there
        are, up to ``_lateral_max`` (the GIN index alone), to read their messages the right way."""
        big = _quote(OVERSIZED)
        most = _lateral_max(n_rows)
        n = self.db.raw("SELECT count(*) FROM (SELECT 1 FROM message_fts WHERE lex @@ %s::tsquery OR lex @@ %s::tsquery "
                        "LIMIT %s) x", (cand, big, most + 1)).fetchone()[0]
        rows = self._rows(f, "(f.lex @@ ?::tsquery OR f.lex @@ ?::tsquery)", [cand, big], lateral=n <= most)
        matched = _matches(tree, rows)
        if not matched:
            return []
        phrases = tree.phrases()
        return _ordered(_scored(matched, phrases, self._idf(phrases, n_rows), float(n_tokens) / float(n_rows)),
                        count, latest)

    def _ranked_in_sql(self, tree, cand: str, f: Filters, count: int, latest: bool, n_rows: int,
                       n_tokens: int) -> list[tuple[int, float]] | None:
        """A countable query (``_countable``), ranked from counts in SQL: which rows match and
        their bm25 are functions of how many instances of each phrase each column holds, so the
        server finds the matches and their order, without sending their tokens; then only the
        rows that can be among the first ``count`` (a shortlist) are evaluated and scored here
        exactly as ``_ranked_in_python`` does, and ordered. The phrases' row counts (for the IDF)
        bound the matches, which says how to read their messages. None: not answered this way
        (the caller evaluates every candidate instead; not expected)."""
        phrases = tree.phrases()
        hits: dict[int, int] = {}
        idf = self._idf(phrases, n_rows, hits)
        bound = _most(tree, hits)
        if bound == 0:
            return []
        avgdl = float(n_tokens) / float(n_rows)
        counts, count_params, match, score, score_params = _sql_terms(tree, phrases, idf, avgdl)
        with_, with_params, conds, params = filter_sql(f)
        big = _quote(OVERSIZED)
        # The counts, once per candidate (OFFSET 0: a subquery kept whole, so that the match and
        # the score read its columns rather than each repeating the counting).
        cands = (f"(SELECT f.rowid, f.ntok, {counts} FROM message_fts f "
                 "WHERE f.lex @@ ?::tsquery OR f.lex @@ ?::tsquery OFFSET 0) ")
        cand_params = [*count_params, cand, big]
        if f.any() or latest:  # the matches joined to their message and turn (the filters, the key)
            join, join_params, key = _join("c", conds, params, lateral=bound <= _lateral_max(n_rows))
        else:  # the counts alone (unreachable rows are never in message_fts; this holds if one were)
            join, join_params, key = "c WHERE c.rowid NOT IN (SELECT rowid FROM unreachable) AND ", [], ()
        if latest:
            # The order is the key's alone (_ordered's): the matches' first ``count`` are the answer.
            order = f"{key[0]} DESC, {key[1]} DESC, {key[2]} DESC, {key[3]}"
            sql = f"{with_}SELECT c.rowid FROM {cands}{join}{match} ORDER BY {order} LIMIT ?"
            args = [*with_params, *cand_params, *join_params, count]
        else:
            # Every match's score as _scored computes it, then the shortlist: each row whose
            # score is at most the count-th best's plus a margin (so that a last-bit difference
            # in the server's arithmetic, were there one, could not leave a row out), ties and all.
            head = (with_.rstrip() + ", ") if with_ else "WITH "
            sql = (f"{head}s AS MATERIALIZED (SELECT c.rowid, {score} AS s FROM {cands}{join}{match}), "
                   "cut AS (SELECT s.s FROM s ORDER BY s.s LIMIT 1 OFFSET ?) "
                   "SELECT s.rowid FROM s WHERE s.s <= coalesce((SELECT cut.s + 1e-9::float8 * (abs(cut.s) + 1.0::float8) "
                   "FROM cut), 'Infinity'::float8)")
            args = [*with_params, *score_params, *cand_params, *join_params, count - 1]
        short = [r[0] for r in self.db.execute(sql, args).fetchall()]
        if not short:
            return []
        matched = _matches(tree, self._rows(f, "f.rowid = ANY(?)", [short], lateral=True))
        if len(matched) != len(short):  # a shortlisted row gone, or not a match after all
            return None
        return _ordered(_scored(matched, phrases, idf, avgdl), count, latest)

    def _rows(self, f: Filters, where: str, where_params: list, lateral: bool) -> list[tuple]:
        """(rowid, ntok, the five token arrays, started_at, turn id prefix, depth, message id)
        of the rows of ``message_fts f`` that ``where`` picks and the filters keep."""
        with_, with_params, conds, params = filter_sql(f)
        join, join_params, key = _join("f", conds, params, lateral)
        sql = (f"{with_}SELECT f.rowid, f.ntok, {', '.join('f.' + c for c in _ARRAY_COLS)}, {', '.join(key)} "
               f"FROM message_fts {join}{where}")
        return self.db.execute(sql, [*with_params, *join_params, *where_params]).fetchall()

    def _idf(self, phrases: list, n_rows: int, hits: dict | None = None) -> list[float]:
        """bm25's IDF of each phrase (FTS5's: floored at 1e-6); ``hits``: id(phrase) → rows holding it."""
        idf = []
        for p in phrases:
            n = self._phrase_rows(p)
            if hits is not None:
                hits[id(p)] = n
            v = math.log((n_rows - n + 0.5) / (n + 0.5))
            idf.append(v if v > 0.0 else 1e-6)
        return idf

    def _phrase_rows(self, p: "Phrase") -> int:
        """How many rows hold phrase ``p`` in its columns (bm25's document frequency)."""
        cand = p.candidates()
        if cand is None:
            return 0
        big = _quote(OVERSIZED)
        cols = ", ".join(_ARRAY_COLS)
        if len(p.tokens) == 1 and not p.initial:  # one lexeme: the GIN index counts exactly
            n = self.db.raw("SELECT count(*) FROM message_fts WHERE lex @@ %s::tsquery", (cand,)).fetchone()[0]
            rows = self.db.raw(f"SELECT {cols} FROM message_fts WHERE lex @@ %s::tsquery", (big,)).fetchall()
        else:  # counted in SQL, as Phrase.positions finds instances (_count_sql)
            holds, params = [], []
            for c in COLUMNS:
                if c in p.cols:
                    sql, ps = _count_sql(p, LETTERS[c])
                    holds.append(f"{sql} > 0")
                    params += ps
            return self.db.execute(f"SELECT count(*) FROM message_fts f WHERE (f.lex @@ ?::tsquery OR f.lex @@ ?::tsquery) "
                                   f"AND ({' OR '.join(holds)})", [cand, big, *params]).fetchone()[0]
        for r in rows:
            if p.positions(dict(zip(COLUMNS, (x or [] for x in r)))):
                n += 1
        return n


def _quote(lexeme: str) -> str:
    """A lexeme as tsvector / tsquery text spell it (quoted)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _lateral_max(n_rows: int) -> int:
    """Up to how many candidates their messages and turns are read one by one by primary key
    (a nested loop, forced by ``_join``'s LATERAL ... OFFSET 0) rather than by the planner's
    choice, a hash join that reads every message: the planner cannot tell 20 candidates from
    4,000 (a rare word has no statistic), and reading a million messages for 20 is most of
    the time of a search; past this many, one pass over the table costs less than the lookups."""
    return max(1000, n_rows // 32)


def _join(alias: str, conds: list[str], params: list, lateral: bool) -> tuple[str, list, tuple[str, ...]]:
    """(FROM clause after ``alias`` up to and including a ``WHERE`` or ``AND`` that the caller's
    own condition follows, its parameters, the SQL of the key's parts: started_at, turn id
    prefix, depth, message id) joining ``alias``'s rows to their message and turn under the
    filters' conditions ``conds`` (filters.sql, over ``messages m`` and ``turns t``)."""
    key = ("coalesce(t.started_at, 0)", "substr(coalesce(t.id, m.id), 1, 16)", "m.depth", "m.id")
    if lateral:
        inner = ", ".join(f"{k} AS k{i}" for i, k in enumerate(key))
        return (f"{alias} CROSS JOIN LATERAL (SELECT {inner} FROM messages m LEFT JOIN turns t ON t.rowid = m.turn_rowid "
                f"WHERE m.rowid = {alias}.rowid AND {' AND '.join(conds)} OFFSET 0) k WHERE ",
                list(params), tuple(f"k.k{i}" for i in range(4)))
    return (f"{alias} JOIN messages m ON m.rowid = {alias}.rowid LEFT JOIN turns t ON t.rowid = m.turn_rowid "
            f"WHERE {' AND '.join(conds)} AND ", list(params), key)


def _matches(tree, rows: list[tuple]) -> list[tuple[tuple, dict]]:
    """(row, its phrases' instances) of the rows (``PgFts._rows``) that match the query."""
    out = []
    for r in rows:
        inst: dict = {}
        if tree.match(dict(zip(COLUMNS, (x or [] for x in r[2:7]))), inst):
            out.append((r, inst))
    return out


def _scored(matched: list, phrases: list, idf: list[float], avgdl: float) -> list[tuple]:
    """(rowid, score, started_at, turn id prefix, depth, message id) of matched rows: FTS5's
    bm25, its floating-point operations in SQLite's order (``_sql_terms`` writes the same)."""
    scored = []
    for r, inst in matched:
        d = float(r[1])
        score = 0.0
        for i, p in enumerate(phrases):
            freq = 0.0
            for pos in inst.get(id(p), ()):  # each instance weighs its column's weight
                freq += WEIGHTS[COLUMNS[pos >> 32]]
            score += idf[i] * ((freq * (K1 + 1.0)) / (freq + K1 * (1 - B + B * d / avgdl)))
        scored.append((r[0], -1.0 * score, r[7], r[8], r[9], r[10]))
    return scored


def _ordered(scored: list[tuple], count: int, latest: bool) -> list[tuple[int, float]]:
    """(rowid, score) in the SQLite index's order: score (best first) or key (``latest``), then
    key newest first, then message id; the first ``count`` (0: all)."""
    scored.sort(key=lambda x: x[5])
    scored.sort(key=lambda x: (x[2], x[3], x[4]), reverse=True)
    if not latest:
        scored.sort(key=lambda x: x[1])
    if count:
        scored = scored[:count]
    return [(x[0], x[1]) for x in scored]


def _countable(tree) -> bool:
    """Is the query AND / OR / NOT of phrases (words, "phrases", ``prefix*``, ``^``; no NEAR),
    each of some token in some column? Then whether a row matches, and its bm25, depend only on
    how many instances of each phrase each column holds, which SQL counts (``_count_sql``)."""
    if isinstance(tree, Phrase):
        return bool(tree.tokens) and bool(tree.cols)
    if isinstance(tree, Op):
        return _countable(tree.left) and _countable(tree.right)
    return False


def _count_sql(p: "Phrase", letter: str, row: str = "f") -> tuple[str, list]:
    """SQL for how many instances of phrase ``p`` the token array ``row.letter`` holds, counted
    as ``Phrase.positions`` finds them (each start where every token is equal, or starts with a
    prefix token; at the first token only for ``^``), and its parameters."""
    arr = f"{row}.{letter}"
    if len(p.tokens) == 1 and not p.tokens[0][1] and not p.initial:  # one word: C's array_positions
        return f"coalesce(cardinality(array_positions({arr}, ?::text)), 0)", [p.tokens[0][0]]
    params = [t for t, _ in p.tokens]

    def test(x: str, j: int) -> str:
        return f"starts_with({x}, ?::text)" if p.tokens[j][1] else f"{x} = ?::text"

    if p.initial:  # at the column's start: its first tokens, by subscript (a subscript walks
        # a text array from its start, so only small ones are cheap)
        return ("CASE WHEN " + " AND ".join(test(f"{arr}[{j + 1}]", j) for j in range(len(p.tokens)))
                + " THEN 1 ELSE 0 END"), params
    # Otherwise counted by a walk of the array unnested (a prefix: each token; a phrase: each
    # start whose next tokens follow, by lead()), only in a row whose lexemes hold every token
    # in this column (or that is oversized): the tsvector test is a binary search in C, the
    # walk a subquery per row.
    held = " & ".join(_quote(letter + t[:_MAX_LEXEME]) + (":*" if pre else "") for t, pre in p.tokens)
    guard = [f"(({held}) | {_quote(OVERSIZED)})"]
    if len(p.tokens) == 1:
        return (f"CASE WHEN {row}.lex @@ ?::tsquery THEN (SELECT count(*) FROM unnest({arr}) x "
                f"WHERE {test('x', 0)}) ELSE 0 END", guard + params)
    # (A short array by subscripts, cheaper than a window there; a long one by lead(), linear.)
    nexts = ", ".join(f"lead(x, {j}) OVER (ORDER BY o) AS x{j}" for j in range(1, len(p.tokens)))
    conds = " AND ".join(test("x" if j == 0 else f"x{j}", j) for j in range(len(p.tokens)))
    subs = " AND ".join(test(f"{arr}[i + {j}]", j) for j in range(len(p.tokens)))
    return (f"CASE WHEN NOT {row}.lex @@ ?::tsquery THEN 0 WHEN cardinality({arr}) <= {_SHORT} THEN "
            f"(SELECT count(*) FROM generate_subscripts({arr}, 1) i WHERE {subs}) "
            f"ELSE (SELECT count(*) FROM (SELECT x, {nexts} FROM unnest({arr}) WITH ORDINALITY AS a(x, o)) z "
            f"WHERE {conds}) END", guard + params + params)


def _most(tree, hits: dict[int, int]) -> int:
    """At most how many rows a countable query matches, from each phrase's row count."""
    if isinstance(tree, Phrase):
        return hits[id(tree)]
    a = _most(tree.left, hits)
    if tree.kind == "NOT":
        return a
    b = _most(tree.right, hits)
    return min(a, b) if tree.kind == "AND" else a + b


def _sql_terms(tree, phrases: list, idf: list[float], avgdl: float) -> tuple[str, list, str, str, list]:
    """For a countable query: (the SELECT list of each phrase's count in each of its columns,
    over ``message_fts f``; its parameters; the match condition over those counts as ``c``; the
    bm25 score over them, the very floating-point operations of ``_scored`` in its order (the
    weighted counts are sums of halves, exact either way); the score's parameters)."""
    counts, count_params, freqs = [], [], []
    for i, p in enumerate(phrases):
        for c in COLUMNS:
            if c in p.cols:
                sql, params = _count_sql(p, LETTERS[c])
                counts.append(f"{sql} AS n{i}{LETTERS[c]}")
                count_params += params
        freqs.append(" + ".join(f"{WEIGHTS[c]!r}::float8 * c.n{i}{LETTERS[c]}" for c in COLUMNS if c in p.cols))
    index = {id(p): i for i, p in enumerate(phrases)}

    def match(node) -> str:
        if isinstance(node, Phrase):
            i = index[id(node)]
            return "(" + " + ".join(f"c.n{i}{LETTERS[c]}" for c in COLUMNS if c in node.cols) + ") > 0"
        a, b = match(node.left), match(node.right)
        return f"({a} {'AND NOT' if node.kind == 'NOT' else node.kind} {b})"

    score, score_params = "0.0::float8", []
    for i, freq in enumerate(freqs):
        score = (f"({score} + ?::float8 * ((({freq}) * ?::float8) / (({freq}) + ?::float8 * "
                 "(?::float8 + ?::float8 * c.ntok::float8 / ?::float8))))")
        score_params += [idf[i], K1 + 1.0, K1, 1 - B, B, avgdl]
    return ", ".join(counts), count_params, match(tree), f"-1.0::float8 * {score}", score_params


# -- the query: parsed and evaluated ------------------------------------------------------------


@dataclass
class Phrase:
    """A phrase: tokens (each possibly a prefix), in the columns ``cols``; ``initial``: at a column's start."""

    tokens: list[tuple[str, bool]]
    cols: frozenset
    initial: bool = False

    def phrases(self) -> list["Phrase"]:
        """Itself."""
        return [self]

    def positions(self, row: dict) -> list[int]:
        """Where the phrase starts in the row, as FTS5 numbers positions: column << 32 | token,
        in order."""
        out: list[int] = []
        k = len(self.tokens)
        if not k:
            return out
        for ci, c in enumerate(COLUMNS):
            if c not in self.cols:
                continue
            toks = row.get(c) or []
            last = min(1, len(toks) - k + 1) if self.initial else len(toks) - k + 1
            for i in range(max(0, last)):
                for j, (want, prefix) in enumerate(self.tokens):
                    got = toks[i + j]
                    if not (got == want or (prefix and got.startswith(want))):
                        break
                else:
                    out.append(ci << 32 | i)
        return out

    def match(self, row: dict, inst: dict) -> bool:
        """Does the row hold the phrase? (Its instances go into ``inst``: id → positions.)"""
        pos = self.positions(row)
        if pos:
            inst[id(self)] = pos
        return bool(pos)

    def candidates(self) -> str | None:
        """A tsquery for the rows that may hold it (None: none can)."""
        if not self.tokens:
            return None
        alts = []
        for c in sorted(self.cols, key=COLUMNS.index):
            alts.append("(" + " & ".join(_quote(LETTERS[c] + t[:_MAX_LEXEME]) + (":*" if p else "")
                                         for t, p in self.tokens) + ")")
        return "(" + " | ".join(alts) + ")" if alts else None


@dataclass
class Op:
    """AND, OR or NOT of two sub-queries."""

    kind: str
    left: object
    right: object = field(default=None)

    def phrases(self) -> list[Phrase]:
        """The phrases, left to right (the order bm25 sums them in)."""
        return self.left.phrases() + self.right.phrases()

    def match(self, row: dict, inst: dict) -> bool:
        """Does the row match? (Every phrase is looked at, as FTS5 positions them all.)"""
        a = self.left.match(row, inst)
        b = self.right.match(row, inst)
        if self.kind == "AND":
            return a and b
        if self.kind == "OR":
            return a or b
        return a and not b

    def candidates(self) -> str | None:
        """A tsquery for a superset of the matching rows (None: none can match)."""
        a = self.left.candidates()
        if self.kind == "NOT":
            return a
        b = self.right.candidates()
        if self.kind == "AND":
            return None if a is None or b is None else f"({a} & {b})"
        if a is None or b is None:
            return a if b is None else b
        return f"({a} | {b})"


@dataclass
class Near:
    """``NEAR(p1 p2 …, n)``: instances of every phrase, in one column, each ending at most
    ``n`` tokens before the last one starts (FTS5's fts5ExprNearIsMatch, step for step)."""

    items: list[Phrase]
    n: int = 10

    def phrases(self) -> list[Phrase]:
        """The phrases, in order."""
        return list(self.items)

    def candidates(self) -> str | None:
        """Every phrase's candidates, together."""
        parts = [p.candidates() for p in self.items]
        return None if any(c is None for c in parts) else "(" + " & ".join(parts) + ")"

    def match(self, row: dict, inst: dict) -> bool:
        """Does a clump of the phrases' instances lie near enough? Only the instances that take
        part in one count (for bm25), as FTS5 trims the phrases' position lists."""
        lists = [p.positions(row) for p in self.items]
        if not all(lists):
            return False
        out: list[list[int]] = [[] for _ in lists]
        idx = [0] * len(lists)
        eof = 1 << 63
        try:
            while True:
                i_max = lists[0][idx[0]]
                while True:
                    ok = True
                    for i, p in enumerate(self.items):
                        i_min = i_max - len(p.tokens) - self.n
                        if lists[i][idx[i]] < i_min or lists[i][idx[i]] > i_max:
                            ok = False
                            while lists[i][idx[i]] < i_min:
                                idx[i] += 1  # IndexError: this phrase has no instance left
                            if lists[i][idx[i]] > i_max:
                                i_max = lists[i][idx[i]]
                    if ok:
                        break
                for i in range(len(lists)):
                    if not out[i] or out[i][-1] != lists[i][idx[i]]:
                        out[i].append(lists[i][idx[i]])
                adv, low = 0, None
                for i in range(len(lists)):
                    ahead = lists[i][idx[i] + 1] if idx[i] + 1 < len(lists[i]) else eof
                    if low is None or ahead < low:
                        adv, low = i, ahead
                idx[adv] += 1
                lists[adv][idx[adv]]  # IndexError at the end of its list
        except IndexError:
            pass
        for p, pos in zip(self.items, out):
            if pos:
                inst[id(p)] = pos
        return bool(out[0])


_BARE_EXTRA = ("_", "\x1a")


def _bare(c: str) -> bool:
    return (c.isascii() and (c.isalnum() or c in _BARE_EXTRA)) or ord(c) >= 0x80


def _lex(q: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i, n = 0, len(q)
    while i < n:
        c = q[i]
        if c.isspace():
            i += 1
        elif c == '"':
            j, buf = i + 1, []
            while True:
                if j >= n:
                    raise _syntax(q[i:])
                if q[j] == '"':
                    if j + 1 < n and q[j + 1] == '"':
                        buf.append('"')
                        j += 2
                        continue
                    break
                buf.append(q[j])
                j += 1
            out.append(("str", "".join(buf)))
            i = j + 1
        elif _bare(c):
            j = i
            while j < n and _bare(q[j]):
                j += 1
            w = q[i:j]
            near = w == "NEAR" and q[j:].lstrip().startswith("(")
            out.append(("kw", w) if w in ("AND", "OR", "NOT") or near else ("str", w))
            i = j
        elif c in "(){}:,+*^-":
            out.append(("op", c))
            i += 1
        else:
            raise _syntax(c)
    return out


def _syntax(near: str) -> QuerySyntax:
    return QuerySyntax(f'fts5: syntax error near "{near}"')


class _Parser:
    def __init__(self, toks: list[tuple[str, str]]) -> None:
        self.toks, self.i = toks, 0

    def peek(self, k: int = 0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else (None, None)

    def take(self):
        t = self.peek()
        self.i += 1
        return t

    def expect(self, kind: str, value: str) -> None:
        t = self.take()
        if t != (kind, value):
            raise _syntax(t[1] or "")

    def parse(self):
        node = self.or_(frozenset(COLUMNS))
        if self.peek()[0] is not None:
            raise _syntax(self.peek()[1])
        return node

    def or_(self, cols):
        node = self.and_(cols)
        while self.peek() == ("kw", "OR"):
            self.take()
            node = Op("OR", node, self.and_(cols))
        return node

    def and_(self, cols):
        node = self.not_(cols)
        while self.peek() == ("kw", "AND"):
            self.take()
            node = Op("AND", node, self.not_(cols))
        return node

    def not_(self, cols):
        node = self.seq(cols)
        while self.peek() == ("kw", "NOT"):
            self.take()
            node = Op("NOT", node, self.seq(cols))
        return node

    def _starts_primary(self) -> bool:
        kind, v = self.peek()
        return kind == "str" or (kind == "op" and v in "({^-") or (kind, v) == ("kw", "NEAR")

    def seq(self, cols):
        node = self.primary(cols)
        while self._starts_primary():
            node = Op("AND", node, self.primary(cols))
        return node

    def colspec(self):
        """A column filter if one starts here (``name:``, ``{a b}:``, ``-…:``), else None."""
        kind, v = self.peek()
        neg = False
        k = 0
        if (kind, v) == ("op", "-"):
            neg, k = True, 1
            kind, v = self.peek(1)
        if kind == "str" and self.peek(k + 1) == ("op", ":"):
            names, used = [v], k + 2
        elif (kind, v) == ("op", "{"):
            names, j = [], k + 1
            while self.peek(j)[0] == "str":
                names.append(self.peek(j)[1])
                j += 1
            if self.peek(j) != ("op", "}") or self.peek(j + 1) != ("op", ":"):
                return None
            used = j + 2
        else:
            return None
        for name in names:
            if name not in COLUMNS:
                raise QuerySyntax(f"no such column: {name}")
        self.i += used
        chosen = frozenset(names)
        return frozenset(COLUMNS) - chosen if neg else chosen

    def primary(self, cols):
        spec = self.colspec()
        if spec is not None:
            cols = cols & spec
        kind, v = self.peek()
        if (kind, v) == ("op", "("):
            self.take()
            node = self.or_(cols)
            self.expect("op", ")")
            return node
        if (kind, v) == ("kw", "NEAR"):
            return self.near(cols)
        return self.phrase(cols)

    def near(self, cols) -> Near:
        self.take()
        self.expect("op", "(")
        items = []
        while self.peek()[0] == "str" or self.peek() == ("op", "^"):
            items.append(self.phrase(cols))
        n = 10
        if self.peek() == ("op", ","):
            self.take()
            kind, v = self.take()
            if kind != "str" or not v.isdigit():
                raise _syntax(v or "")
            n = int(v)
        self.expect("op", ")")
        if not items:
            raise _syntax(")")
        return items[0] if len(items) == 1 else Near(items, n)

    def phrase(self, cols) -> Phrase:
        initial = False
        if self.peek() == ("op", "^"):
            self.take()
            initial = True
        toks: list[tuple[str, bool]] = []
        while True:
            kind, v = self.take()
            if kind != "str":
                raise _syntax(v or "")
            words = [t for _, _, t in iter_tokens(v)]
            prefix = self.peek() == ("op", "*")
            if prefix:
                self.take()
            toks += [(w, prefix and i == len(words) - 1) for i, w in enumerate(words)]
            if self.peek() != ("op", "+"):
                break
            self.take()
        return Phrase(toks, cols, initial)


def parse_fts(expr: str):
    """The query tree of an FTS5 expression (``fts.parse(...).fts``)."""
    return _Parser(_lex(expr)).parse()
