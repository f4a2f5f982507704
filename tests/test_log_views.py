"""log and show (issue 5): filters shared with search, paging by key, streaming, and the
views -r, -x/--xl, -u, -s, -t."""

from __future__ import annotations

import json

import pytest

import convgit
from convgit.index import filters as query
from convgit.index import log as index_log
from convgit.views import code_blocks, truncate

from helpers.cli import assert_error, cli, dumps, env, ok, proj  # noqa: F401  (fixtures)
from helpers.store import NOW, conv, fast_repo

DAY = 86_400_000
CODE = "Here:\n\n```python\nprint('first')\n```\n\nand\n\n~~~\nsecond()\n~~~\n"


@pytest.fixture
def store(tmp_path):
    """Three threads with models, sources, times, a tool call and usage."""
    repo = fast_repo(tmp_path / "l")
    c = lambda data, **kw: convgit.commit(repo, data, now_ms=NOW, **kw)  # noqa: E731
    c({"messages": conv("q1"), "response": {"role": "assistant", "content": CODE}, "model": "gpt-4o",
       "source": "chatgpt", "started_at": NOW, "usage": {"prompt_tokens": 10, "completion_tokens": 20}}, thread="a")
    c({"messages": conv("q1", CODE, "q2"), "response": {"role": "assistant", "content": "a2"}, "model": "claude-x",
       "source": "claude", "started_at": NOW + DAY, "usage": {"input_tokens": 30, "output_tokens": 5}}, thread="a")
    c({"messages": conv("b1"), "response": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}]},
       "model": "gpt-4o", "started_at": NOW + 2 * DAY}, thread="b")
    c({"messages": conv("b1", "x", "c1")}, thread="c", on_conflict="fork")
    yield repo
    repo.close()


def texts(entries):
    return [e.text for e in entries]


def test_filters_combine_in_log(store):
    f = lambda **kw: convgit.make_filters(store, now_ms=NOW + 10 * DAY, **kw)  # noqa: E731
    log = lambda rev="a", **kw: texts(convgit.log(store, rev, filters=f(**kw)))  # noqa: E731
    assert log() == ["a2", "q2", CODE, "q1"]
    assert log(model=["gpt-4o"]) == [CODE, "q1"]
    assert log(model=["gpt-4o"], role=["assistant"]) == [CODE]
    assert log(source=["claude"], role=["user"]) == ["q2"]
    assert log(since="2023-11-15T12:00Z") == ["a2", "q2"]
    assert log(until="2023-11-15T12:00Z") == [CODE, "q1"]
    assert log(since="2023-11-15T12:00Z", until="2023-11-15T12:00Z") == []
    every = lambda **kw: sorted(texts(convgit.log(store, all_threads=True, filters=f(**kw))))  # noqa: E731
    # the turn that called a tool (its prompt "b1" belongs to thread c's turn, which is older)
    assert every(tools=True) == [""]
    assert every(thread=["b"]) == ["", "b1"]
    # b1 came first with thread c's turn (no model), but it is the prompt of b's gpt-4o call:
    # -m is turn-level (a message any call of the model covered, as llm logs -m)
    assert every(thread=["b", "a"], model=["gpt-4o"]) == sorted(["", "b1", CODE, "q1"])
    assert every(model=["nope"]) == []
    # count applies after the filters
    assert len(convgit.log(store, all_threads=True, count=1, filters=f(role=["user"]))) == 1


def test_log_all_streams_in_the_same_order_as_before(store):
    got = [e.id for e in convgit.log(store, all_threads=True)]
    expect, seen = [], set()
    for name, tip in store.refs.read_all().items():  # the plain algorithm: every id remembered
        oid = tip
        while oid is not None and oid not in seen:
            seen.add(oid)
            expect.append(oid)
            oid = store.objects.read(oid).parent
    assert got == expect
    it = convgit.iter_log(store, all_threads=True)
    first = next(it)
    assert first.id == expect[0]


def test_log_all_reads_lazily(store, monkeypatch):
    reads = []
    real = store.objects.read
    monkeypatch.setattr(store.objects, "read", lambda oid: (reads.append(oid), real(oid))[1])
    it = convgit.iter_log(store, all_threads=True)
    next(it)
    assert len(reads) == 1  # the first entry comes before the rest is read


def test_walk_remembers_only_tips_and_forks(tmp_path):
    repo = fast_repo(tmp_path / "w")
    for i in range(5):
        convgit.commit(repo, conv("root", "r", f"leaf {i}", "x", "y", "z"), thread=f"t{i}")
    stops: set[str] = set()
    ids = [oid for _, oid, _ in index_log._walk_all(repo, stops)]
    assert len(ids) == len(set(ids)) == 2 + 5 * 4
    tips = set(repo.refs.read_all().values())
    fork = repo.index.db.execute("SELECT parent FROM message_ids GROUP BY parent HAVING count(*) > 1").fetchall()
    assert stops == tips | {fork[0][0]}  # five tips and the one fork point, not 22 messages
    repo.close()


def test_paging_by_key(store):
    everything = convgit.log(store, all_threads=True)
    keys = sorted(e.key for e in everything)
    assert len(set(keys)) == len(keys)  # a total order
    pages, after = [], None
    while True:
        f = convgit.make_filters(store, id_gt=after) if after else convgit.make_filters(store, id_gte="0")
        page = convgit.log(store, all_threads=True, count=3, filters=f)
        if not page:
            break
        pages.extend(page)
        after = page[-1].key
    assert [e.key for e in pages] == keys
    assert {e.id for e in pages} == {e.id for e in everything}
    # a message id stands for its key; gte includes it; a prefix of a key works
    mid = pages[2]
    assert convgit.log(store, all_threads=True, count=1, filters=convgit.make_filters(store, id_gt=mid.id))[0].id == pages[3].id
    assert convgit.log(store, all_threads=True, count=1, filters=convgit.make_filters(store, id_gte=mid.key))[0].id == mid.id
    assert len(convgit.log(store, all_threads=True, filters=convgit.make_filters(store, id_gt="2023111522"))) == 3
    # within a thread, and combined with a filter
    a = convgit.log(store, "a", filters=convgit.make_filters(store, id_gte="0", role=["user"]))
    assert texts(a) == ["q1", "q2"]


def test_key_shape(store):
    e = convgit.log(store, "a", count=1)[0]
    assert e.key == f"20231115221320000-{e.turn['turn'][:16]}-0000003"
    assert query.KEY_RE.match(e.key)
    assert e.to_json(store)["key"] == e.key
    assert query.key_of(store, e.id) == e.key  # the SQL and the Python keys agree


@pytest.mark.parametrize("value, ms", [
    ("2024-06-01", 1717200000000), ("2024-06-01T12:00Z", 1717243200000), ("2024-06-01 12:00:00+02:00", 1717236000000),
    ("2w", NOW - 14 * DAY), ("3d", NOW - 3 * DAY), ("12h", NOW - DAY // 2), ("30m", NOW - 1_800_000), ("1y", NOW - 365 * DAY),
])
def test_times(value, ms):
    assert query.parse_time(value, now_ms=NOW) == ms


def test_code_blocks():
    assert code_blocks(CODE) == ["print('first')", "second()"]
    assert code_blocks("```\nunclosed\nstill") == ["unclosed\nstill"]
    assert code_blocks("no code `here`") == []
    assert code_blocks("````md\n```\ninner\n```\n````") == ["```\ninner\n```"]
    assert truncate("a " * 100, 10) == "a a a a a…"


# -- the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def cstore(cli, proj):
    c = lambda doc, *a: ok(cli("commit", "-", "--json", *a, input=dumps(doc))).json()  # noqa: E731
    c({"messages": conv("q1"), "response": {"role": "assistant", "content": CODE}, "model": "gpt-4o",
       "started_at": NOW, "usage": {"prompt_tokens": 10, "completion_tokens": 20}}, "--thread", "a")
    c({"messages": conv("q1", CODE, "q2 " + "long " * 40), "response": {"role": "assistant", "content": "a2"},
       "model": "claude-x", "started_at": NOW + DAY, "usage": {"input_tokens": 30, "output_tokens": 5}}, "--thread", "a")
    return proj


def test_response_and_extract(cli, cstore):
    assert ok(cli("log", "-r")).out == "a2\n"
    assert ok(cli("show", "a~2", "-r")).out == CODE
    assert ok(cli("log", "-x")).out == "print('first')\n"
    assert ok(cli("log", "--xl")).out == "second()\n"
    assert ok(cli("show", "-x", "--json")).json() == [{"id": ok(cli("rev-parse", "a~2")).out.strip(), "code": "print('first')"}]
    assert ok(cli("log", "-r", "-x")).out == ""  # the newest response has no code
    assert ok(cli("log", "-r", "--json")).json()["text"] == "a2"
    assert_error(cli("log", "-r", "--role", "user"), "not_found")


def test_usage(cli, cstore):
    out = ok(cli("log", "-u")).out
    assert "Usage:  30 input, 5 output tokens" in out and "Usage:  10 input, 20 output tokens" in out
    assert out.rstrip().endswith("Total:  40 input, 25 output tokens (65 in all) over 2 turn(s)")
    doc = ok(cli("log", "-u", "--json")).json()
    assert doc["usage"] == {"turns": 2, "input_tokens": 40, "output_tokens": 25, "total_tokens": 65}
    assert [e["usage"]["input_tokens"] if e["usage"] else None for e in doc["entries"]] == [30, None, 10, None]
    assert doc["entries"][0]["usage"]["details"] == {"input_tokens": 30, "output_tokens": 5}
    show = ok(cli("show", "-u", "--json")).json()
    assert show["usage"]["total_tokens"] == 65 and "Total:" in ok(cli("show", "-u")).out


def test_short_and_truncate(cli, cstore):
    rows = ok(cli("log", "-s", "--json")).json()
    assert [(r["model"], r["prompt"][:2], r["response"][:2]) for r in rows] == [("claude-x", "q2", "a2"), ("gpt-4o", "q1", "He")]
    assert len(rows[0]["prompt"]) == 100 and rows[0]["prompt"].endswith("…")
    out = ok(cli("log", "-s")).out.splitlines()
    assert len(out) == 6 and out[1].startswith("  > q2") and out[2] == "  < a2"
    long = ok(cli("log", "-t", "--json")).json()[1]
    assert len(long["text"]) == 100 and len(long["parts"][0]["text"]) == 100
    assert all(len(ln) <= 104 for ln in ok(cli("log", "-t")).out.splitlines())


def test_filters_and_paging_through_the_cli(cli, cstore):
    assert [e["text"] for e in ok(cli("log", "-m", "gpt-4o", "--json")).json()] == [CODE, "q1"]
    assert [e["text"] for e in ok(cli("log", "--role", "user,assistant", "--model", "claude-x", "--json")).json()] == ["a2", "q2 " + "long " * 40]
    all_ = ok(cli("log", "--all", "--id-gte", "0", "--json")).json()
    assert [e["key"] for e in all_] == sorted(e["key"] for e in all_)
    page2 = ok(cli("log", "--all", "--id-gt", all_[1]["key"], "-n", "2", "--json")).json()
    assert [e["id"] for e in page2] == [e["id"] for e in all_[2:4]]
    assert "Key:    " in ok(cli("log", "--id-gte", "0")).out
    assert_error(cli("log", "--since", "whenever"), "invalid_input")
    assert_error(cli("log", "--thread", "nope", "--json"), "not_found")
    assert_error(cli("log", "--id-gt", "not-a-key"), "invalid_input")


def test_log_all_json_is_one_document(cli, cstore):
    out = ok(cli("log", "--all", "-n", "0", "--json")).out
    assert len(json.loads(out)) == 4
    assert json.loads(ok(cli("log", "--all", "-u", "--json")).out)["usage"]["turns"] == 2
    assert json.loads(ok(cli("log", "--all", "--role", "system", "--json")).out) == []
