"""The PostgreSQL index (``[index] backend = "postgres"``) against a real server started by the
tests (tests/helpers/pg.py): the same query battery answers byte for byte as the SQLite index
does for the same objects, before and after more writes and a reindex; two stores share one
database apart; an unreachable server is ``index_unavailable`` with nothing written; dropped
tables are rebuilt from the objects."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

import convgit
from convgit import errors
from convgit.repository import Repository
from reliability.helpers import NOW, cli_json, fsck_errors, history, new_store, tree_snapshot, user
from reliability.test_index_recovery import battery, build_corpus

TOOLS = {"messages": [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 degrees"},
    {"role": "assistant", "content": "It is sunny in Paris: 21 degrees.", "reasoning": "the tool said sunny"}],
    "model": "gpt-4o-mini"}
WORDS = [
    {"messages": [user("Compare the RTX 5080 with the RX 9070 XT, à la française: été, naïve, Øresund, łódź"),
                  {"role": "assistant", "content": "The RTX 5080 is faster; the RX 9070 XT is cheaper. Über cafés."}]},
    {"messages": [user("日本語のテキストと 한국어 텍스트 and emoji 🦘 東京タワーに行く"),
                  {"role": "assistant", "content": "Multilingual text is stored byte-exact: 🦘 東京"}]},
    {"messages": [user("the the the quokka quokka brief look fine"), {"role": "assistant", "content": "fine fine"}]},
]
SEARCHES = [
    ["convgit"], ["main"], ["topic"], ["topic", "-n", "3"], ["topic", "--latest", "-n", "4"], ["turn", "-n", "0"],
    ["fine OR look OR brief", "--in", "all"], ["a* OR e* OR i* OR o* OR u* OR t* OR s*", "--in", "all", "-n", "0"],
    ['"RX 9070"'], ["sunn*", "--in", "all"], ["get_weather", "--in", "tool"], ["paris NOT weather", "--in", "all"],
    ["ete"], ["été"], ["oresund"], ["Øresund"], ["uber"], ["🦘"], ["東京"], ["quokka"], ["user: topic"],
    ["{user tool}: paris"], ["--in", "all", "--", "-assistant: paris"], ["(topic OR main) AND turn", "-n", "0"],
    ["^topic"], ["main", "-m", "gpt-4o"], ["main", "--role", "assistant"], ["topic", "--thread", "team/t1"], ["paris", "-T", "get_weather", "--in", "all"], ["sunny weather", "--fts"],
    ["topic", "--since", "2023-11-14T22:13:30Z", "-n", "0"], ["paris", "--tools", "--in", "all"],
    ["sunny weather", "--in", "all"], ["what is", "-n", "5"], ["gpt-4o"], ["file.py"], ['"unterminated'],
    ["nosuchcolumn: x"], ["NEAR(topic turn, 2)", "-n", "0"], ["NEAR(main q1)"], ['NEAR("RX 9070" cheaper, 5)'],
    ["NEAR(sunny paris, 0)", "--in", "all"], ["NEAR(sunny paris, 6)", "--in", "all"], ["NEAR(the quokka fine, 3)"],
    ["user: NEAR(topic t*, 1) OR brief"], ["NEAR(a b"],
]


def _queries(names: list[str], store: Path) -> list[list[str]]:
    qs = [["search", "--json", *s] for s in SEARCHES]
    qs += [["log", "--all", "-n", "0", "--json"], ["log", "--all", "-m", "gpt-4o", "--json"],
           ["log", "--all", "--tools", "--json"], ["log", "--all", "--role", "user", "-n", "7", "--json"],
           ["log", "--all", "--since", "2023-11-14T22:13:30Z", "--json"], ["log", "main~1", "--json"],
           ["log", "--all", "--id-gt", "0", "-n", "5", "--json"], ["log", "main", "--id-gte", "0", "--json"],
           ["threads", "--json"], ["show", "alt", "--json"], ["log", "--all", "--graph"]]
    frag = store.parent.parent / "fragment.txt"  # the same path for both stores of a test
    frag.write_text("sunny", "utf-8")
    qs += [["log", "--all", "-f", str(frag), "--json"], ["search", "paris", "--in", "all", "-f", str(frag), "--json"],
           ["log", "--all", "-s", "-m", "gpt-4o"], ["log", "--all", "-s", "-u", "--json"]]
    rc, out = cli_json(["log", "--all", "-n", "0", "--json"], store=store)
    keys = [e["key"] for e in json.loads(out)]
    qs += [["log", "--all", "--id-gt", keys[len(keys) // 2], "--json"], ["search", "topic", "--id-gt", keys[3], "--json"]]
    return qs


def _answers(store: Path, names: list[str]) -> list[tuple[str, int, str]]:
    out = battery(store, names)
    for q in _queries(names, store):
        rc, stdout = cli_json(q, store=store)
        out.append((" ".join(q), rc, stdout))
    rc, stdout = cli_json(["status", "--json"], store=store)
    st = json.loads(stdout)
    keep = {k: st[k] for k in ("threads", "turns", "messages", "message_refs", "dedup_ratio", "text_bytes", "head")}
    keep["index"] = {k: st["index"][k] for k in ("schema_version", "up_to_date", "stale_threads")}
    out.append(("status", rc, json.dumps(keep, sort_keys=True)))
    return out


def _pg_config(dsn: str, extra: str = "") -> str:
    return f'[core]\nfsync = false\n[index]\nbackend = "postgres"\ndsn = "{dsn}"\n{extra}'


def _twin(src: Path, dst: Path, dsn: str) -> Path:
    """A copy of store ``src`` (objects, refs, reflogs; not its index) using the PostgreSQL index."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("index.sqlite*", "*.lock"))
    (dst / "config.toml").write_text(_pg_config(dsn))
    return dst


def _more(repo) -> None:
    """The same further writes, at fixed times, on either store."""
    t = NOW + 10_000_000
    convgit.commit(repo, {"messages": history(repo, "main") + [user("one more on main about quokka")],
                          "response": {"role": "assistant", "content": "more"}, "model": "gpt-4o"}, now_ms=t)
    convgit.fork(repo, "main~2", "late-fork", now_ms=t + 1)
    convgit.commit(repo, {"messages": history(repo, "late-fork") + [user("a fresh angle")]}, thread="late-fork", now_ms=t + 2)
    convgit.delete_thread(repo, "team/t2")
    convgit.commit(repo, {"messages": [user("brand new: zyzzyva fine")]}, thread="fresh", now_ms=t + 3)


def test_the_postgres_index_answers_byte_for_byte_as_the_sqlite_one(tmp_path, pg_dsn):
    a = new_store(tmp_path / "a", fsync=False)
    names = build_corpus(a)
    for i, c in enumerate([TOOLS, *WORDS]):
        convgit.commit(a, c, thread=f"extra/{i}", now_ms=NOW + 5_000_000 + i)
    names = sorted(a.refs.read_all())
    a.close()
    b_path = _twin(a.path, tmp_path / "b" / ".convgit", pg_dsn)
    want = _answers(a.path, names)
    assert sum(1 for _, rc, _ in want if rc == 0) >= 60
    refused = ('"unterminated', "nosuchcolumn", "NEAR(a b")  # malformed on purpose: the same error on both
    assert all(rc == 0 for q, rc, _ in want if not any(r in q for r in refused)), [q for q, rc, _ in want if rc]
    hits = {q: json.loads(out) for q, rc, out in want if q.startswith("search") and rc == 0}
    assert sum(1 for h in hits.values() if h) >= 25  # the searches find things
    assert all(hits[f"search --json {q}"] for q in ("NEAR(topic turn, 2) -n 0", 'NEAR("RX 9070" cheaper, 5)',
                                                     "NEAR(sunny paris, 6) --in all"))
    got = _answers(b_path, names)
    assert not (b_path / "index.sqlite").exists()
    diff = [q for (q, rc, out), (_, rc2, out2) in zip(want, got) if (rc, out) != (rc2, out2)]
    assert diff == []
    assert got == want

    # Caught up incrementally after more writes (commit, fork, delete): still the same answers.
    for path in (a.path, b_path):
        with Repository.open(path) as r:
            _more(r)
    names = sorted(Repository.open(a.path).refs.read_all())
    want = _answers(a.path, names)
    got = _answers(b_path, names)
    assert [q for (q, rc, out), (_, rc2, out2) in zip(want, got) if (rc, out) != (rc2, out2)] == []

    # ... and after a reindex (a rebuild from the objects, swapped in).
    rc, out = cli_json(["reindex", "--json"], store=b_path)
    assert rc == 0 and json.loads(out)["messages"] > 50
    some = [q for q in _queries(names, b_path) if q[1] in ("--all", "--json") or q[0] == "threads"][::2]
    assert len(some) >= 20
    assert [cli_json(q, store=b_path) for q in some] == [cli_json(q, store=a.path) for q in some]
    with Repository.open(b_path) as r:
        assert fsck_errors(r) == []


def test_two_stores_share_one_database_apart(tmp_path, pg_dsn):
    stores = []
    for name in ("one", "two"):
        repo = new_store(tmp_path / name, fsync=False)
        (repo.path / "config.toml").write_text(_pg_config(pg_dsn))
        repo = Repository.open(repo.path)
        convgit.commit(repo, {"messages": [user(f"only in {name}: quokka")]}, thread=f"t-{name}", now_ms=NOW)
        stores.append(repo.path)
        repo.close()
    for name, path in zip(("one", "two"), stores):
        rc, out = cli_json(["threads", "--json"], store=path)
        assert rc == 0 and [t["name"] for t in json.loads(out)] == [f"t-{name}"]
        rc, out = cli_json(["search", "quokka", "--json"], store=path)
        assert [h["snippet"] for h in json.loads(out)] == [f"only in {name}: quokka"]
        rc, out = cli_json(["status", "--json"], store=path)
        assert json.loads(out)["index"]["path"].startswith("postgresql://127.0.0.1:")
    import psycopg

    with psycopg.connect(pg_dsn) as c:
        schemas = [r[0] for r in c.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'cg\\_%' ORDER BY 1")]
    assert len(schemas) == 2  # one namespace per store, named from its path


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def test_an_unreachable_server_is_index_unavailable_and_nothing_is_written(tmp_path):
    repo = new_store(tmp_path / "s", fsync=False)
    convgit.commit(repo, {"messages": [user("before")]}, thread="t", now_ms=NOW)
    repo.close()
    (repo.path / "config.toml").write_text(_pg_config(f"host=127.0.0.1 port={_dead_port()} user=postgres dbname=x"))
    before = tree_snapshot(repo.path)
    for args, data in ((["commit", "--thread", "t", "-", "--json"], json.dumps({"messages": [user("after")]})),
                       (["log", "--json"], None), (["search", "before", "--json"], None), (["status", "--json"], None),
                       (["reindex", "--json"], None)):
        rc, out = cli_json(args, store=repo.path, input=data)
        doc = json.loads(out)
        assert rc == errors.IndexUnavailable.exit_code and doc["error_code"] == "index_unavailable", (args, rc, out)
        assert "cannot be reached" in doc["error_message"]
    assert tree_snapshot(repo.path) == before  # no object, ref or reflog written


def test_no_dsn_is_invalid_input(tmp_path):
    repo = new_store(tmp_path / "s", fsync=False, extra_toml='[index]\nbackend = "postgres"\n')
    repo.close()
    rc, out = cli_json(["log", "--json"], store=repo.path)
    assert rc == 10 and "index.dsn" in json.loads(out)["error_message"]
    (repo.path / "config.toml").write_text('[index]\nbackend = "mysql"\n')
    rc, out = cli_json(["log", "--json"], store=repo.path)
    assert rc == 10 and "index.backend must be one of sqlite, postgres" in json.loads(out)["error_message"]


def test_dropped_tables_are_rebuilt_from_the_objects(tmp_path, pg_dsn):
    import psycopg

    repo = new_store(tmp_path / "s", fsync=False)
    (repo.path / "config.toml").write_text(_pg_config(pg_dsn, 'namespace = "team_x"\n'))
    repo = Repository.open(repo.path)
    for i in range(3):
        convgit.commit(repo, {"messages": [user(f"quokka number {i}")]}, thread=f"t{i}", now_ms=NOW + i)
    path = repo.path
    repo.close()
    want = [cli_json(q, store=path) for q in (["log", "--all", "--json"], ["search", "quokka", "--json"], ["threads", "--json"])]
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute("DROP TABLE team_x.messages CASCADE")
        c.execute("DROP TABLE team_x.message_fts")
    got = [cli_json(q, store=path) for q in (["log", "--all", "--json"], ["search", "quokka", "--json"], ["threads", "--json"])]
    assert got == want  # healed: rebuilt from the objects, then answered
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute("DROP SCHEMA team_x CASCADE")
    rc, out = cli_json(["reindex", "--json"], store=path)
    assert rc == 0 and json.loads(out)["messages"] == 3 and json.loads(out)["threads"] == 3
    assert [cli_json(q, store=path) for q in (["log", "--all", "--json"], ["search", "quokka", "--json"],
                                               ["threads", "--json"])] == want
    with Repository.open(path) as r:
        assert fsck_errors(r) == []


def test_semantic_and_hybrid_search_answer_alike(tmp_path, pg_dsn):
    pytest.importorskip("numpy")
    a = new_store(tmp_path / "a", fsync=False, extra_toml='[embed]\nprovider = "hash"\n')
    for i, c in enumerate([TOOLS, *WORDS]):
        convgit.commit(a, c, thread=f"t{i}", now_ms=NOW + i)
    a.close()
    b = tmp_path / "b" / ".convgit"
    shutil.copytree(a.path, b, ignore=shutil.ignore_patterns("index.sqlite*", "*.lock"))
    (b / "config.toml").write_text(_pg_config(pg_dsn, '[embed]\nprovider = "hash"\n'))
    for path in (a.path, b):  # each embeds (the hash provider is deterministic): one in SQLite's chunks, one in PostgreSQL's
        rc, out = cli_json(["embed", "--json"], store=path)
        assert rc == 0, out
    qs = [["search", "--json", "--semantic", "weather in paris"], ["search", "--json", "--hybrid", "quokka fine"],
          ["search", "--json", "sunny weather"], ["embed", "--status", "--json"]]
    want = [cli_json(q, store=a.path) for q in qs]
    assert all(rc == 0 for rc, _ in want) and json.loads(want[0][1])
    assert [cli_json(q, store=b) for q in qs] == want


def test_the_running_totals_hold_on_postgres_after_every_kind_of_write(tmp_path, pg_dsn):
    """The index's running totals (schema.TOTALS), kept by the shared writer through the
    dialect, equal a direct count on the server after each kind of write."""
    import itertools

    from convgit.index.schema import count_totals, read_totals
    from test_status_totals import _apply, _assert_totals_true

    repo = new_store(tmp_path / "s", fsync=False)
    (repo.path / "config.toml").write_text(_pg_config(pg_dsn))
    repo.close()
    repo = Repository.open(repo.path)
    clock = itertools.count(NOW, 1000)
    try:
        assert repo.index.backend == "postgres"
        for op in [("new", 0, 0), ("continue", 0, 1), ("fork", 0, 1), ("rewind", 0, 0), ("rename", 1, 0),
                   ("import", 1, 0), ("merge", 0, 1), ("delete", 2, 0), ("gc", 0, 0), ("continue", 0, 3),
                   ("reindex", 0, 0)]:
            _apply(repo, op, tmp_path, clock)
            _assert_totals_true(repo)
        assert read_totals(repo.index.db) == count_totals(repo.index.db) and read_totals(repo.index.db)["turns"] > 0
    finally:
        repo.close()
