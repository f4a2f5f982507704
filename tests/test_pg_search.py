"""Full-text search on the PostgreSQL index (convgit/index/postgres/fts.py) by each of its
ways, against the SQLite index on the same objects: a query of whole words ranked in SQL from
counts (the shortlist, then exact scoring), every candidate evaluated in Python, the
candidates' messages read by primary key one by one or by a join, and the plan that keeps a
rare word from reading every message (EXPLAIN, on a table made large enough to matter)."""

from __future__ import annotations

import pytest

import convgit
from convgit.index.postgres import fts as pg_fts
from convgit.repository import Repository
from reliability.helpers import NOW, new_store, user
from reliability.test_index_recovery import build_corpus
from test_pg_index import TOOLS, WORDS, _twin

# Countable queries (the SQL way), NEAR (the Python way), over ties and filters.
QUERIES = ["topic", "turn", "tie", "fine", "quokka", "tie OR fine", "tie AND word", "tie NOT fine", "tie word zebra",
           "main OR topic OR tie", "(tie OR topic) NOT turn", "user: tie", "nothing-here", "zebra",
           '"tie word"', "ti*", "^tie", "^word", "tie + word OR fin*", '"word tie" NOT zebra', "user: ^ti*",
           "NEAR(tie word, 2)"]
OPTIONS = [{}, {"count": 1}, {"count": 3}, {"count": 7}, {"count": 0}, {"latest": True, "count": 3},
           {"latest": True, "count": 0}, {"filters": {"role": ["user"]}, "count": 4},
           {"filters": {"model": ["gpt-4o"]}, "count": 2}, {"filters": {"thread": ["team/t1"]}, "count": 3},
           {"filters": {"since": "2023-11-14T22:14:00Z"}, "latest": True, "count": 5}]


@pytest.fixture(scope="module")
def stores(tmp_path_factory, pg_server):
    """(SQLite store, its PostgreSQL twin): the recovery corpus, plus 24 threads whose user
    message is the same words (ties at every cut) and some that repeat a word (scores apart)."""
    tmp = tmp_path_factory.mktemp("pgsearch")
    a = new_store(tmp / "a", fsync=False)
    build_corpus(a)
    for i, c in enumerate([TOOLS, *WORDS]):
        convgit.commit(a, c, thread=f"extra/{i}", now_ms=NOW + 5_000_000 + i)
    for i in range(24):
        words = "tie word" + " tie" * (i % 3) + (" fine" if i % 4 == 0 else "") + (" zebra" if i == 17 else "")
        convgit.commit(a, {"messages": [user(words)], "response": {"role": "assistant", "content": f"tie answer {i % 5}"},
                           "model": "gpt-4o" if i % 2 else "claude-x"}, thread=f"ties/{i}", now_ms=NOW + 6_000_000 + i * 7)
    a.close()
    b = _twin(a.path, tmp / "b" / ".convgit", pg_server.create_database())
    ra, rb = Repository.open(a.path), Repository.open(b)
    yield ra, rb
    ra.close()
    rb.close()


def _answers(repo, query: str, opts: dict) -> list[dict]:
    opts = dict(opts)
    f = convgit.make_filters(repo, **opts.pop("filters")) if "filters" in opts else None
    return [h.to_json() for h in convgit.search(repo, query, filters=f, **opts)]


@pytest.mark.parametrize("way", ["as chosen", "joins", "python"])
def test_every_way_of_the_postgres_search_answers_as_sqlite(stores, monkeypatch, way):
    a, b = stores
    if way == "joins":  # the candidates' messages read by a join, never one by one
        monkeypatch.setattr(pg_fts, "_lateral_max", lambda n_rows: 0)
    elif way == "python":  # every candidate evaluated in Python, none ranked in SQL
        monkeypatch.setattr(pg_fts, "_countable", lambda tree: False)
    found = 0
    for q in QUERIES:
        for opts in OPTIONS:
            want = _answers(a, q, opts)
            assert _answers(b, q, opts) == want, (q, opts)
            found += bool(want)
    assert found >= 120


def test_countable_are_ranked_in_sql_and_the_shortlist_holds_the_ties(stores, monkeypatch):
    """The SQL way answers (never falls back), and sends back only what can be among the first
    ``count``: here 3 of 24 tied rows (the same words, the same length) need them all."""
    a, b = stores
    asked = []
    real = pg_fts.PgFts._rows

    def rows(self, f, where, params, lateral):
        out = real(self, f, where, params, lateral)
        asked.append((where, len(out)))
        return out

    monkeypatch.setattr(pg_fts.PgFts, "_rows", rows)
    monkeypatch.setattr(pg_fts.PgFts, "_ranked_in_python", lambda *a, **k: pytest.fail("not ranked in SQL"))
    for q in ("tie", "tie OR fine", "tie NOT fine", "zebra", '"tie word"', "ti*", "^tie", "tie + word OR fin*"):
        for opts in ({"count": 3}, {"count": 1}, {"latest": True, "count": 2}, {"filters": {"role": ["user"]}, "count": 2}):
            asked.clear()
            assert _answers(b, q, opts) == _answers(a, q, opts)
            assert [w for w, _ in asked] == ["f.rowid = ANY(?)"]
    asked.clear()
    _answers(b, "word", {"count": 3})  # 24 rows: "tie word" (length 2) ties with ... every one of the same length
    assert asked and asked[0][1] < 24


def _reads_every_message(plan: str) -> bool:
    """Does the EXPLAIN ``plan`` read ``messages`` whole: a sequential scan, or an index scan
    with no index condition (the planner's other way to walk every row, in key order for a
    merge join)?"""
    lines = plan.splitlines()
    for i, ln in enumerate(lines):
        if "Seq Scan on messages" in ln:
            return True
        if " Scan using " in ln and " on messages" in ln:
            depth = len(ln) - len(ln.lstrip(" ->"))
            below = []
            for nxt in lines[i + 1:]:
                if "->" in nxt or len(nxt) - len(nxt.lstrip()) <= depth:
                    break
                below.append(nxt)
            if not any("Index Cond" in b for b in below):
                return True
    return False


def test_a_rare_word_reads_its_candidates_messages_by_key_not_every_message(stores):
    """The plan regression of issue 15 (a rare word's 20 candidates joined by reading all 1M
    messages): with 200,000 more rows in ``messages`` and ``message_fts`` (analyzed, so the
    planner weighs a real table; ``message_fts`` not, as after a rebuild), the search's
    statements never scan ``messages`` whole, where the statement of before did."""
    _, b = stores
    db = b.index.db
    # (message_fts is not analyzed, as after a rebuild: a tsquery's estimate is the default)
    db.raw("ALTER TABLE message_fts SET (autovacuum_enabled = false)")
    db.raw("INSERT INTO messages (rowid, id, role, depth, n_parts) SELECT 10000000 + g, md5(g::text) || md5(g::text), "
           "'user', 0, 1 FROM generate_series(1, 200000) g")
    db.raw("INSERT INTO message_fts (rowid, ntok, lex, u) SELECT 10000000 + g, 3, "
           "('ufill uw' || (g % 5000) || ' ux' || (g % 97))::tsvector, ARRAY['fill', 'w' || (g % 5000), 'x' || (g % 97)] "
           "FROM generate_series(1, 200000) g")
    try:
        db.raw("ANALYZE messages")
        seen = []
        real = db.execute

        def execute(sql, params=()):
            if "message_fts" in sql:
                plan = "\n".join(r[0] for r in real("EXPLAIN " + sql, params).fetchall())
                seen.append(plan)
            return real(sql, params)

        db.execute = execute
        try:
            for q, opts in (("zebra", {}), ("zebra", {"latest": True}), ("zebra", {"filters": {"role": ["user"]}}),
                            ('"tie word"', {}), ("zeb*", {}), ("zebra OR quokka", {})):
                assert _answers(b, q, opts)
        finally:
            del db.execute
        assert len(seen) >= 6
        assert not [p for p in seen if "Seq Scan on messages" in p], seen
        # ... where the one statement of before (a join the planner chose) read them all.
        old = ("SELECT f.rowid FROM message_fts f JOIN messages m ON m.rowid = f.rowid LEFT JOIN turns t "
               "ON t.rowid = m.turn_rowid WHERE (f.lex @@ ?::tsquery OR f.lex @@ ?::tsquery) "
               "AND m.rowid NOT IN (SELECT rowid FROM unreachable)")
        before = "\n".join(r[0] for r in db.execute("EXPLAIN " + old, ["'uzebra'", "'*'"]).fetchall())
        assert _reads_every_message(before), before
    finally:
        db.raw("DELETE FROM message_fts WHERE rowid > 10000000")
        db.raw("DELETE FROM messages WHERE rowid > 10000000")
        db.raw("ALTER TABLE message_fts RESET (autovacuum_enabled)")


def test_a_message_too_large_for_a_tsvector_is_found_and_ranked_alike(tmp_path, pg_server, monkeypatch):
    """A message of 40,000 distinct words (its tsvector would pass 512 KB: its one lexeme is
    the oversized mark, a candidate for every query) is counted in SQL as evaluated in Python."""
    a = new_store(tmp_path / "a", fsync=False)
    for i in range(6):
        convgit.commit(a, {"messages": [user("tie word" + " tie" * (i % 2))]}, thread=f"t{i}", now_ms=NOW + i)
    big = "tie word zebra fine " + " ".join(f"w{i:06d}x" for i in range(40_000)) + " word tie"
    convgit.commit(a, {"messages": [user(big)]}, thread="big", now_ms=NOW + 100)
    a.close()
    b = _twin(a.path, tmp_path / "b" / ".convgit", pg_server.create_database())
    with Repository.open(a.path) as ra, Repository.open(b) as rb:
        assert rb.index.db.raw("SELECT count(*) FROM message_fts WHERE lex = %s::tsvector", ("'*'",)).fetchone()[0] == 1
        for way in ("sql", "python"):
            if way == "python":
                monkeypatch.setattr(pg_fts, "_countable", lambda tree: False)
            for q in ("tie", "zebra", '"word tie"', '"tie word"', "w00001*", "^tie", "^zebra", "zebra OR tie", "w000123x"):
                for opts in ({"count": 3}, {"count": 20}, {"latest": True, "count": 2}):
                    want = _answers(ra, q, opts)
                    assert _answers(rb, q, opts) == want, (way, q, opts)
                    assert want or q == "^zebra"
