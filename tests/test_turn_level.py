"""Calls that added no message are seen where llm logs shows calls (issue 11): ``log -m``,
``search -m`` and ``log -s``/``-u`` are turn-level: a re-sent stateless call of a model shows
its prompt and answer under that model, and is listed (with its tokens) as a call."""

from __future__ import annotations

from helpers.cli import cli, dumps, env, ok, proj  # noqa: F401

REQ = [{"role": "user", "content": "Which bird fishes with a pouch?"}]
ANS = {"role": "assistant", "content": "The pelican."}


def _setup(cli):
    ok(cli("commit", "-", "--thread", "t", input=dumps({
        "messages": REQ, "response": ANS, "model": "gpt-4o", "started_at": "2026-01-01T10:00:00Z",
        "usage": {"input_tokens": 10, "output_tokens": 3}})))
    # the same call re-sent statelessly to another model: every message is already stored
    r = ok(cli("commit", "-", "--json", input=dumps({
        "messages": REQ, "response": ANS, "model": "claude-x", "started_at": "2026-01-02T10:00:00Z",
        "usage": {"input_tokens": 11, "output_tokens": 4}}))).json()
    assert r["appended_messages"] == 0


def test_log_and_search_by_model_see_a_call_that_added_nothing(cli, proj):
    _setup(cli)
    texts = lambda *a: [e["text"] for e in ok(cli("log", "--json", *a)).json()]  # noqa: E731
    assert texts("-m", "gpt-4o") == ["The pelican.", "Which bird fishes with a pouch?"]
    assert texts("-m", "claude-x") == ["The pelican.", "Which bird fishes with a pouch?"]
    assert texts("-m", "o3") == []
    # the call's other conditions apply to the call: claude-x's was on 2026-01-02
    assert texts("-m", "claude-x", "--until", "2026-01-02") == []
    assert texts("-m", "claude-x", "--since", "2026-01-02") == ["The pelican.", "Which bird fishes with a pouch?"]
    # the message's own time (the first call) still filters without -m
    assert texts("--since", "2026-01-02") == []
    hits = ok(cli("search", "pelican", "-m", "claude-x", "--json")).json()
    assert [(h["role"], h["snippet"]) for h in hits] == [("assistant", "The pelican.")]
    assert ok(cli("search", "pelican", "-m", "o3", "--json")).json() == []


def test_log_short_lists_every_call_with_its_tokens(cli, proj):
    _setup(cli)
    rows = ok(cli("log", "-s", "--json")).json()
    assert [r["model"] for r in rows] == ["claude-x", "gpt-4o"]  # newest first
    assert rows[0]["response"] == "The pelican." and rows[0]["prompt"] == "Which bird fishes with a pouch?"
    assert rows[0]["started_at"].startswith("2026-01-02T10:00:00")
    doc = ok(cli("log", "-s", "-u", "--json")).json()
    assert doc["usage"] == {"turns": 2, "input_tokens": 21, "output_tokens": 7, "total_tokens": 28}
    # in reading order (show -s), the re-sent call comes after the one it repeats
    assert [r["model"] for r in ok(cli("show", "-s", "--json")).json()] == ["gpt-4o", "claude-x"]
    text = ok(cli("log", "-s", "-u")).out
    assert "claude-x" in text and "gpt-4o" in text and "Total:  21 input, 7 output tokens" in text
    # -m picks the calls too
    assert [r["model"] for r in ok(cli("log", "-s", "-m", "claude-x", "--json")).json()] == ["claude-x"]
    only = ok(cli("log", "-s", "-u", "-m", "claude-x", "--json")).json()
    assert only["usage"] == {"turns": 1, "input_tokens": 11, "output_tokens": 4, "total_tokens": 15}


def test_the_index_walks_the_calls_ancestry_as_the_objects_do(tmp_path):
    """``-m``'s covered messages (turn_views.turn_level) come from the index's rows
    (``calls_cover``): the same ids as the objects' ancestry of each call's output, its
    ``max(1, span) + 1`` messages, under each turn condition; walks overlap and reach roots."""
    import itertools

    import convgit
    from convgit import graph
    from convgit.index.filters import Filters
    from reliability.helpers import NOW, new_store, user
    from reliability.test_index_recovery import build_corpus

    repo = new_store(tmp_path / "s", fsync=False)
    build_corpus(repo)
    convgit.commit(repo, {"messages": [user(f"m{i}") if i % 2 == 0 else {"role": "assistant", "content": f"a{i}"}
                                       for i in range(9)], "response": {"role": "assistant", "content": "end"},
                          "model": "gpt-4o"}, thread="long", now_ms=NOW + 9_000_000)
    convgit.commit(repo, {"messages": [user("m0"), {"role": "assistant", "content": "a1"}],  # re-sent: adds nothing
                          "response": {"role": "assistant", "content": "a1"}, "model": "claude-x"}, now_ms=NOW + 9_000_001)
    seen = 0
    for f in (Filters(models=("gpt-4o",)), Filters(models=("claude-x",)), Filters(models=("gpt-4o", "claude-x")),
              Filters(models=("gpt-4o",), since=NOW + 5_000), Filters(models=("nope",)), Filters()):
        calls = repo.index.turn_rows(f)
        want = {oid for c in calls for oid, _ in itertools.islice(
            graph.iter_ancestry(repo.objects, c["output"]), max(1, c["span"] or 0) + 1)}
        assert repo.index.calls_cover(f) == want
        seen += len(want)
    assert seen >= 20
    repo.close()
