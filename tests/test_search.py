"""Full-text search (issue 5): ranking, which text is searched, the query language and its
errors, snippets, Unicode, messages shared by many threads, filters, and the same answers
after the index is rebuilt."""

from __future__ import annotations

import json

import pytest

import convgit
from convgit import errors
from convgit.index.fts import find_matches, parse, prepare, snippet

from helpers.cli import assert_error, cli, dumps, env, ok, proj  # noqa: F401  (fixtures)
from helpers.store import NOW, conv, fast_repo

DAY = 86_400_000


def _call(messages, response, **turn):
    return {"messages": messages, "response": response, **turn}


@pytest.fixture
def corpus(tmp_path):
    """A crafted store: the word "zebra" in each kind of text, in known amounts."""
    repo = fast_repo(tmp_path / "c")
    c = lambda data, **kw: convgit.commit(repo, data, now_ms=NOW, **kw)  # noqa: E731
    ids = {}
    r = c(_call(conv("How do I configure the zebra parser?"), {"role": "assistant", "content": "Edit zebra.toml."},
                model="gpt-4o", source="chatgpt", started_at=NOW), thread="asked")
    ids["asked"] = r.tip
    r = c(_call(conv("Tell me about cats and their stripes, in detail please, with many words here"),
                {"role": "assistant", "content": "Cats are not a zebra. A zebra has stripes; zebra stripes differ."},
                model="claude-x", source="claude", started_at=NOW + DAY), thread="answered")
    ids["answered"] = r.tip
    r = c(_call([{"role": "system", "content": "You are a zebra expert."}, {"role": "user", "content": "hello"}],
                {"role": "assistant", "content": "hi"}, model="gpt-4o", started_at=NOW + 2 * DAY), thread="sys")
    ids["sys"] = r.tip
    r = c(_call(conv("look it up"), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "zebra facts"}'}}]},
        model="gpt-4o", started_at=NOW + 3 * DAY), thread="tool")
    ids["tool"] = r.tip
    r = c(_call(conv("think about it"), {"role": "assistant", "content": [
        {"type": "reasoning", "text": "The user might mean a zebra crossing."}, {"type": "text", "text": "Done."}]},
        model="o3", started_at=NOW + 4 * DAY), thread="reason")
    ids["reason"] = r.tip
    r = c(_call(conv("Zebra zebra ZEBRA!"), {"role": "assistant", "content": "Yes."}, model="gpt-4o-mini",
                started_at=NOW + 5 * DAY), thread="shouted")
    ids["shouted"] = r.tip
    yield repo, ids
    repo.close()


def _ids(hits):
    return [h.id for h in hits]


def _text(repo, oid):
    return repo.index.message_text(oid)


def test_ranking_user_text_above_assistant_text(corpus):
    repo, ids = corpus
    hits = convgit.search(repo, "zebra")
    texts = [(h.role, _text(repo, h.id)) for h in hits]
    # Both user messages first (the one saying it three times, short, above the longer
    # question), then the assistant message that says it three times, then the short one.
    assert texts == [
        ("user", "Zebra zebra ZEBRA!"),
        ("user", "How do I configure the zebra parser?"),
        ("assistant", "Cats are not a zebra. A zebra has stripes; zebra stripes differ."),
        ("assistant", "Edit zebra.toml."),
    ]
    assert [h.score for h in hits] == sorted(h.score for h in hits)
    assert hits[0].column == "user" and hits[2].column == "assistant"


def test_system_tool_and_reasoning_only_when_asked(corpus):
    repo, ids = corpus
    default = {h.id for h in convgit.search(repo, "zebra", count=0)}
    every = convgit.search(repo, "zebra", count=0, columns=("user", "assistant", "system", "tool", "reasoning"))
    extra = {h.id: h.column for h in every if h.id not in default}
    assert sorted(extra.values()) == ["reasoning", "system", "tool"]
    assert ids["tool"] in extra and ids["reason"] in extra  # the tool call, the reasoning message
    only_tool = convgit.search(repo, "zebra", columns=("tool",))
    assert [h.id for h in only_tool] == [ids["tool"]] and only_tool[0].snippet.startswith("lookup ")
    # tool names are searchable too
    assert _ids(convgit.search(repo, "lookup", columns=("tool",))) == [ids["tool"]]


def test_latest_orders_by_time(corpus):
    repo, _ = corpus
    hits = convgit.search(repo, "zebra", latest=True)
    keys = [h.key for h in hits]
    assert keys == sorted(keys, reverse=True)
    assert _text(repo, hits[0].id) == "Zebra zebra ZEBRA!"


def test_count(corpus):
    repo, _ = corpus
    assert len(convgit.search(repo, "zebra", count=2)) == 2
    assert len(convgit.search(repo, "zebra", count=0)) == 4
    with pytest.raises(errors.InvalidInput):
        convgit.search(repo, "zebra", count=-1)


@pytest.mark.parametrize("query, expected", [
    ('"zebra parser"', ["How do I configure the zebra parser?"]),
    ("zebra AND parser", ["How do I configure the zebra parser?"]),
    ("parser OR cats", ["How do I configure the zebra parser?",
                        "Tell me about cats and their stripes, in detail please, with many words here",
                        "Cats are not a zebra. A zebra has stripes; zebra stripes differ."]),
    ("zebra NOT parser", ["Zebra zebra ZEBRA!", "Cats are not a zebra. A zebra has stripes; zebra stripes differ.", "Edit zebra.toml."]),
    ("confi*", ["How do I configure the zebra parser?"]),
    ("NEAR(cats stripes, 3)", ["Tell me about cats and their stripes, in detail please, with many words here"]),
    ("assistant: stripes", ["Cats are not a zebra. A zebra has stripes; zebra stripes differ."]),
    ("zebra.toml", ["Edit zebra.toml."]),
])
def test_fts5_syntax(corpus, query, expected):
    repo, _ = corpus
    assert [_text(repo, h.id) for h in convgit.search(repo, query, count=0)] == expected


@pytest.mark.parametrize("query", ["a AND", '"unterminated', "NEAR(a b", "nosuch: zebra", "(zebra", "zebra)", "", "  ", "?", "*"])
def test_malformed_queries_are_invalid_input(corpus, query):
    repo, _ = corpus
    with pytest.raises(errors.InvalidInput) as e:
        convgit.search(repo, query)
    assert e.value.code == "invalid_input"
    assert "sqlite3" not in e.value.message and "Traceback" not in e.value.message


def test_malformed_query_through_the_cli(cli, proj):
    ok(cli("commit", "-", "--json", input=dumps(conv("hello zebra"))))
    doc = assert_error(cli("search", "zebra AND", "--json"), "invalid_input")
    assert "malformed search query" in doc["error_message"]
    assert_error(cli("search", "nosuch: x"), "invalid_input")
    assert_error(cli("search", "x", "--in", "nope"), "invalid_input")
    # a glued word is a phrase, not an error
    assert ok(cli("search", "gpt-4o", "--json")).json() == []


def test_snippet_and_highlights(tmp_path):
    repo = fast_repo(tmp_path / "s")
    long = ("filler words " * 40) + "the needle is here " + ("more filler " * 40)
    convgit.commit(repo, conv(long, "ok"), thread="t")
    (h,) = convgit.search(repo, "needle")
    assert h.snippet.startswith("…") and h.snippet.endswith("…")
    assert len(h.snippet) <= 200
    assert [h.snippet[s:e] for s, e in h.highlights] == ["needle"]
    j = h.to_json()
    assert j["snippet"] == h.snippet and j["highlights"] == [list(x) for x in h.highlights]
    # a phrase is one highlight; a prefix highlights whole words
    (h,) = convgit.search(repo, '"needle is here"')
    assert [h.snippet[s:e] for s, e in h.highlights] == ["needle is here"]
    (h,) = convgit.search(repo, "need*")
    assert [h.snippet[s:e] for s, e in h.highlights] == ["needle"]
    repo.close()


def test_snippet_unit():
    terms = parse("café 東京").terms
    text = "Un CAFE au 東京タワー, pas un cafétéria."
    spans = find_matches(text, terms)
    assert [text[s:e] for s, e in spans] == ["CAFE", "東京"]
    s, hl = snippet("a\n\n  b   needle\tc", parse("needle").terms)
    assert s == "a b needle c" and [s[x:y] for x, y in hl] == ["needle"]


UNICODE = [
    ("Un café crème, s'il vous plaît", ["cafe", "café", "CAFÉ", "creme", "plait"]),
    ("Überprüfung der Straße", ["uberprufung", "Überprüfung", "straße"]),
    ("東京タワーに行きました", ["東京", "東", "タワー", '"東京タワー"', "行き"]),
    ("我喜欢用数据库", ["数据库", "数据", "喜欢"]),
    ("데이터베이스 설계", ["데이터", "베이스", "설계"]),
    ("party time 🎉🎉 now", ["🎉", "party", "time"]),
    ("Ελληνικά και русский текст", ["ελληνικά", "ΕΛΛΗΝΙΚΆ", "русский", "ТЕКСТ"]),
]


@pytest.mark.parametrize("text, queries", UNICODE, ids=[u[0][:12] for u in UNICODE])
def test_unicode_is_found(tmp_path, text, queries):
    repo = fast_repo(tmp_path / "u")
    tip = convgit.commit(repo, conv(text, "ok"), thread="t").tip
    user_id = repo.index.db.execute("SELECT parent FROM message_ids WHERE id=?", (tip,)).fetchone()[0]
    for q in queries:
        hits = convgit.search(repo, q)
        assert [h.id for h in hits] == [user_id], q
        assert hits[0].highlights, q
    assert convgit.search(repo, "東京都") == [] if "東京" in text else True
    repo.close()


def test_cjk_needs_the_whole_query_in_order(tmp_path):
    repo = fast_repo(tmp_path / "u")
    convgit.commit(repo, conv("京東の話", "ok"), thread="t")
    assert convgit.search(repo, "東京") == []  # the same characters in another order
    assert len(convgit.search(repo, "京東")) == 1
    assert prepare("abc東京") == "abc 東  京 "
    repo.close()


def test_a_shared_message_appears_once_with_every_thread(tmp_path):
    repo = fast_repo(tmp_path / "sh")
    for i in range(25):
        convgit.commit(repo, conv("the shared opening about marmots", "answer", f"branch {i}"), thread=f"t{i:02d}")
    (h,) = convgit.search(repo, "marmots")
    assert h.thread_count == 25 and not h.threads_more
    assert h.threads == [f"t{i:02d}" for i in range(20)]  # the first 20 by name
    assert h.to_json()["thread_count"] == 25
    repo.close()


def test_filters_combine_in_search(corpus):
    repo, ids = corpus
    f = lambda **kw: convgit.make_filters(repo, now_ms=NOW + 10 * DAY, **kw)  # noqa: E731
    allkinds = ("user", "assistant", "system", "tool", "reasoning")
    t = lambda **kw: sorted(_text(repo, h.id) for h in convgit.search(repo, "zebra", count=0, columns=allkinds, filters=f(**kw)))  # noqa: E731
    assert t(model=["gpt-4o"]) == ["", "Edit zebra.toml.", "How do I configure the zebra parser?", "You are a zebra expert."]
    assert t(model=["gpt-4o"], role=["user"]) == ["How do I configure the zebra parser?"]
    assert t(model=["gpt-4o", "claude-x"], role=["assistant"]) == [
        "", "Cats are not a zebra. A zebra has stripes; zebra stripes differ.", "Edit zebra.toml."]
    assert t(source=["claude"]) == ["Cats are not a zebra. A zebra has stripes; zebra stripes differ."]
    assert t(tools=True) == [""]  # the tool call message (no text part)
    assert t(thread=["answered", "asked"], role=["assistant"]) == [
        "Cats are not a zebra. A zebra has stripes; zebra stripes differ.", "Edit zebra.toml."]
    # since/until are turn start times: days 0..5 after NOW (2023-11-14T22:13:20Z)
    assert len(t(since="2023-11-16T00:00Z")) == 4  # sys, tool, reasoning, shouted
    assert len(t(since="2023-11-16T00:00Z", until="2023-11-18T00:00Z")) == 2  # sys (system), tool
    assert t(since="11d") == t() and len(t(since="8d")) == 4 and t(since="1d") == []
    key = convgit.search(repo, "zebra", latest=True)[1].key  # the second newest
    assert [_text(repo, h.id) for h in convgit.search(repo, "zebra", filters=f(id_gt=key))] == ["Zebra zebra ZEBRA!"]
    assert len(convgit.search(repo, "zebra", filters=f(id_gte=key))) == 2


def test_bad_filter_values(corpus):
    repo, _ = corpus
    for kw in ({"since": "last tuesday"}, {"role": ["robot"]}, {"id_gt": "zzz"}):
        with pytest.raises(errors.InvalidInput):
            convgit.make_filters(repo, **kw)
    with pytest.raises(errors.NotFound):
        convgit.make_filters(repo, thread=["nope"])


def test_model_alias_from_config(corpus):
    repo, _ = corpus
    (repo.path / "config.toml").write_text('[core]\nfsync = false\n\n[aliases]\n"4o" = "gpt-4o"\n')
    f = convgit.make_filters(repo, model=["4o"])
    assert f.models == ("gpt-4o",)
    assert len(convgit.search(repo, "zebra", filters=f)) == 2


# -- the CLI ----------------------------------------------------------------------------------


def test_search_cli_human_and_json(cli, proj):
    c = lambda doc, *a: ok(cli("commit", "-", "--json", *a, input=dumps(doc))).json()  # noqa: E731
    c({"messages": conv("where is the aardvark?"), "response": {"role": "assistant", "content": "Under the aardvark tree."},
       "model": "gpt-4o", "started_at": NOW}, "--thread", "main")
    c({"messages": conv("where is the aardvark?", "Under the aardvark tree.", "more")}, "--thread", "side",
      "--on-conflict", "fork")
    out = ok(cli("search", "aardvark")).out
    first, second = out.split("\n\n")
    assert " user " in first and "main, side" in first and "«aardvark»" in first
    assert " assistant " in second and "gpt-4o" in second
    doc = ok(cli("search", "aardvark", "--json", "-n", "1")).json()
    assert len(doc) == 1 and doc[0]["threads"] == ["main", "side"] and doc[0]["role"] == "user"
    assert set(doc[0]) == {"id", "role", "threads", "thread_count", "threads_more", "started_at", "model", "source",
                           "turn", "key", "score", "in", "snippet", "highlights", "match", "chunk"}
    assert doc[0]["match"] == "fts" and doc[0]["chunk"] is None
    r = ok(cli("search", "nothinglikethis"))
    assert r.out == "" and "no messages match" in r.err
    assert ok(cli("search", "aardvark", "--in", "all", "--json", "-m", "gpt-4o")).json()[0]["model"] == "gpt-4o"


def test_search_answers_the_same_after_the_index_is_deleted(cli, proj):
    c = lambda doc, *a: ok(cli("commit", "-", "--json", *a, input=dumps(doc))).json()  # noqa: E731
    for i in range(6):
        c(conv("apples and pears", f"reply {i} about apples", f"q{i} pears pears"), "--thread", f"t{i}")
    c(conv("apples once more", "apples"), "--thread", "doomed")
    ok(cli("fork", "t1~1", "forked"))
    ok(cli("threads", "delete", "doomed"))  # its messages are unreachable now
    t2_tip = ok(cli("rev-parse", "t2")).out.strip()
    ok(cli("update-ref", "t2", "t2~2"))  # and t2's last two
    queries = [["apples"], ["pears", "--latest"], ["apples OR pears", "-n", "0", "--in", "all"], ["apples", "--thread", "t1"]]
    before = [ok(cli("search", *q, "--json")).out for q in queries]
    assert "apples once more" not in "".join(before) and "q2 pears" not in "".join(before)
    for f in (proj / ".convgit").glob("index.sqlite*"):
        f.unlink()
    after = [ok(cli("search", *q, "--json")).out for q in queries]
    assert after == before  # the same messages, threads, snippets and scores
    # a message left behind comes back when a thread reaches it again
    assert ok(cli("search", "q2", "--json")).json() == []
    ok(cli("update-ref", "t2", t2_tip))
    assert [h["threads"] for h in ok(cli("search", "q2", "--json")).json()] == [["t2"]]
    assert json.loads(before[0])  # (the first query found something)


def test_the_api_names_the_search_columns_as_fts_does():
    """The CLI's --help takes the columns from api (without loading the index): the same ones."""
    from convgit import api
    from convgit.index import fts

    assert api.SEARCH_COLUMNS == fts.COLUMNS and api.SEARCH_DEFAULT_IN == fts.DEFAULT_IN
