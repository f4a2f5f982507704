"""The porcelain commands, driven as a user would (in-process through CliRunner for speed;
tests/test_cli_process.py repeats a representative set in real processes)."""

from __future__ import annotations

import json

import pytest

from helpers.cli import (  # noqa: F401  (fixtures)
    assert_error,
    cli,
    conv,
    dumps,
    env,
    native,
    object_ids,
    ok,
    proj,
    store_state,
    write_json,
)

# -- small helpers ----------------------------------------------------------------------------


def commit(cli, doc, *args) -> dict:
    return ok(cli("commit", "-", "--json", *args, input=dumps(doc))).json()


def rev(cli, r: str) -> str:
    return ok(cli("rev-parse", r)).out.strip()


def types_of(cli, store) -> dict[str, str]:
    """id → type (message / turn / blob) of every stored object, asked through cat-object -t."""
    return {oid: ok(cli("cat-object", "-t", oid)).out.strip() for oid in object_ids(store)}


def log_json(cli, *args) -> list[dict]:
    return ok(cli("log", "--json", *args)).json()


# -- init -------------------------------------------------------------------------------------


def test_init_here_and_in_dir_idempotent(cli, tmp_path):
    here = tmp_path / "a"
    r = ok(cli("init", cwd=here))
    assert r.out == f"Initialized empty convgit store in {here / '.convgit'}\n"
    assert (here / ".convgit" / "format").read_text() == "convgit-store 1\n"
    assert (here / ".convgit" / "HEAD").read_text() == "ref: refs/threads/main\n"
    for sub in ("objects", "refs/threads", "logs", "config.toml"):
        assert (here / ".convgit" / sub).exists(), sub
    before = store_state(here / ".convgit")
    r = ok(cli("init", "--json", cwd=here))
    assert r.json() == {"status": "exists", "path": str(here / ".convgit")}
    assert store_state(here / ".convgit") == before
    r = ok(cli("init", "--json", "sub/dir", cwd=here))
    assert r.json() == {"status": "created", "path": str(here / "sub" / "dir" / ".convgit")}
    assert (here / "sub" / "dir" / ".convgit" / "format").exists()
    assert "Reinitialized existing convgit store" in ok(cli("init", "sub/dir", cwd=here)).out


# -- commit -----------------------------------------------------------------------------------

RESULT_KEYS = {"status", "thread", "tip", "deduplicated", "appended_messages", "new_objects", "new_messages",
               "turn", "forked_from"}


def test_commit_native_shape_json_result(cli, proj, tmp_path):
    store = proj / ".convgit"
    f = write_json(tmp_path / "c.json", native("hello", "hi there"))
    doc = ok(cli("commit", f, "--json")).json()
    assert set(doc) >= RESULT_KEYS
    assert doc["action"] == "created" and doc["deduplicated"] is False
    assert doc["appended_messages"] == 2 and doc["new_messages"] == 2
    assert doc["new_objects"] == 3  # two messages and the turn that records the event
    ids = object_ids(store)
    assert len(ids) == 3 and doc["tip"] in ids and doc["turn"] in ids
    assert (store / "refs" / "threads" / doc["thread"]).read_text().strip() == doc["tip"]
    # The thread committed to becomes HEAD.
    assert (store / "HEAD").read_text() == f"ref: refs/threads/{doc['thread']}\n"
    assert rev(cli, "HEAD") == doc["tip"]
    msgs = log_json(cli)
    assert [(m["role"], m["text"]) for m in msgs] == [("assistant", "hi there"), ("user", "hello")]


def test_commit_human_output(cli, proj, tmp_path):
    f = write_json(tmp_path / "c.json", native("hello", "hi"))
    out = ok(cli("commit", "--thread", "t", f)).out
    assert out.startswith("Created thread t at ") and out.endswith(": 2 new message(s)\n")
    out = ok(cli("commit", "--thread", "t", f)).out
    assert out.startswith("Already stored: t at ") and "(nothing written)" in out
    write_json(f, native("hello", "hi", "more"))
    assert ok(cli("commit", f)).out.startswith("Appended 1 message(s) to t, now at ")


def test_commit_openai_list_request_and_response(cli, proj):
    # A bare OpenAI messages list (with a system prompt and role aliases).
    d = commit(cli, [{"role": "system", "content": "be brief"}, {"role": "human", "content": "q"},
                     {"role": "ai", "content": [{"type": "text", "text": "a"}]}])
    assert d["action"] == "created" and d["appended_messages"] == 3
    assert [m["role"] for m in log_json(cli, "--reverse")] == ["system", "user", "assistant"]
    # A request object with a chat.completion response: a recorded model call.
    req = {
        "model": "gpt-4o", "temperature": 0.2,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"},
                     {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}],
        "response": {
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "a2"}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2},
        },
    }
    d2 = commit(cli, req)
    assert d2["action"] == "appended" and d2["thread"] == d["thread"]
    assert d2["appended_messages"] == 2 and d2["new_messages"] == 2
    top = log_json(cli, "-n", "1")[0]
    assert top["role"] == "assistant" and top["text"] == "a2"
    assert top["model"] == "gpt-4o-2024-08-06"  # the resolved model wins
    assert top["turn"] == d2["turn"]
    turn = ok(cli("cat-object", "-p", d2["turn"])).json()
    assert turn["type"] == "turn" and turn["model"] == "gpt-4o" and turn["usage"]["prompt_tokens"] == 9
    # A request without a response is an OpenAI request too.
    d3 = commit(cli, {"model": "gpt-4o", "messages": req["messages"][:2] + [{"role": "user", "content": "new"}]})
    assert d3["action"] == "created" and d3["new_messages"] == 1


def test_commit_stateless_continuation_writes_only_new(cli, proj):
    store = proj / ".convgit"
    d1 = commit(cli, conv("q1", "a1"))
    n = len(object_ids(store))
    d2 = commit(cli, conv("q1", "a1", "q2", "a2"))
    assert d2["action"] == "appended" and d2["thread"] == d1["thread"]
    assert (d2["appended_messages"], d2["new_messages"], d2["new_objects"]) == (2, 2, 3)
    assert len(object_ids(store)) == n + 3
    assert log_json(cli)[2]["id"] == d1["tip"]


def test_commit_exact_duplicate_writes_nothing(cli, proj):
    store = proj / ".convgit"
    d1 = commit(cli, conv("q1", "a1"))
    before = store_state(store)
    d2 = commit(cli, conv("q1", "a1"))
    assert d2["action"] == "deduplicated" and d2["deduplicated"] is True
    assert (d2["thread"], d2["tip"]) == (d1["thread"], d1["tip"])
    assert (d2["appended_messages"], d2["new_objects"], d2["new_messages"]) == (0, 0, 0)
    assert store_state(store) == before
    # A prefix of a stored conversation is stored too.
    assert commit(cli, conv("q1"))["deduplicated"] is True
    assert store_state(store) == before


def test_commit_model_option_records_the_call(cli, proj):
    store = proj / ".convgit"
    d1 = commit(cli, conv("q1", "a1"), "--model", "my-model")
    assert log_json(cli)[0]["model"] == "my-model"
    assert ok(cli("cat-object", "-p", d1["turn"])).json()["model"] == "my-model"
    # A real call that repeats stored content still records its turn (and only that).
    n = len(object_ids(store))
    d2 = commit(cli, conv("q1", "a1"), "-m", "my-model")
    assert d2["action"] == "deduplicated" and d2["new_objects"] == 1 and d2["turn"] not in (None, d1["turn"])
    assert len(object_ids(store)) == n + 1
    assert rev(cli, d2["thread"]) == d1["tip"]


def test_commit_trusted_thread(cli, proj):
    store = proj / ".convgit"
    d = commit(cli, conv("q1", "a1"), "--thread", "work")
    assert (d["action"], d["thread"]) == ("created", "work")
    d = commit(cli, conv("q1", "a1", "q2"), "-t", "work")
    assert (d["action"], d["appended_messages"]) == ("appended", 1)
    tip = d["tip"]
    before = store_state(store)
    for again in (conv("q1", "a1", "q2"), conv("q1", "a1")):  # the tip, or an ancestor of it
        d = commit(cli, again, "--thread", "work")
        assert d["action"] == "deduplicated" and d["thread"] == "work" and d["new_objects"] == 0
    assert store_state(store) == before and rev(cli, "work") == tip
    # The same messages under another trusted thread: a new thread, no new message.
    d = commit(cli, conv("q1", "a1"), "--thread", "other")
    assert d["action"] == "created" and d["new_messages"] == 0 and rev(cli, "other") == rev(cli, "work~1")


def test_commit_conflict_reject_then_fork(cli, proj):
    store = proj / ".convgit"
    commit(cli, conv("q1", "a1", "q2", "a2"), "--thread", "work")
    before = store_state(store)
    diverged = conv("q1", "a1", "q2 (edited)", "a2'")
    r = cli("commit", "-", "--thread", "work", "--json", input=dumps(diverged))
    doc = assert_error(r, "duplicate_conflict")
    assert "--on-conflict fork" in doc["error_message"]
    assert store_state(store) == before
    assert_error(cli("commit", "-", "--thread", "work", input=dumps(diverged)), "duplicate_conflict")
    assert store_state(store) == before
    # Explicitly reject is the default.
    assert_error(cli("commit", "-", "-t", "work", "--on-conflict", "reject", input=dumps(diverged)), "duplicate_conflict")

    d = commit(cli, diverged, "--thread", "work", "--on-conflict", "fork")
    assert d["action"] == "forked" and d["thread"].startswith("work-fork-")
    assert d["forked_from"] == {"thread": "work", "message": rev(cli, "work~2")}
    assert d["new_messages"] == 2
    assert rev(cli, d["thread"] + "~2") == rev(cli, "work~2")  # shares the prefix
    rows = {t["name"]: t for t in ok(cli("threads", "--json")).json()}
    assert rows[d["thread"]]["forked_from"] == {"thread": "work", "message": rev(cli, "work~2")}
    assert rev(cli, "work") != d["tip"]


def test_commit_ambiguous_thread(cli, proj):
    store = proj / ".convgit"
    commit(cli, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                 {"role": "user", "content": "c"}], "--thread", "t")
    before = store_state(store)
    reordered = [{"role": "user", "content": "a"}, {"role": "user", "content": "c"},
                 {"role": "assistant", "content": "b"}]
    assert_error(cli("commit", "-", "-t", "t", "--json", input=dumps(reordered)), "ambiguous_thread")
    assert store_state(store) == before


def test_commit_new_thread_sharing_a_prefix_records_where_it_forked(cli, proj):
    commit(cli, conv("q1", "a1", "q2", "a2"), "--thread", "main")
    d = commit(cli, conv("q1", "a1", "other"))
    a1 = rev(cli, "main~2")
    assert d["action"] == "created" and d["forked_from"]["message"] == a1
    rows = {t["name"]: t for t in ok(cli("threads", "--json")).json()}
    assert rows[d["thread"]]["forked_from"] == {"thread": "main", "message": a1}
    assert f"[forked from main@{a1[:12]}]" in ok(cli("threads")).out


def test_commit_multiple_files_in_order(cli, proj, tmp_path):
    store = proj / ".convgit"
    a = write_json(tmp_path / "a.json", conv("q1", "a1"))
    b = write_json(tmp_path / "b.json", conv("q1", "a1", "q2", "a2"))
    c = write_json(tmp_path / "c.json", native("other"))
    docs = ok(cli("commit", a, b, c, "--json")).json()
    assert isinstance(docs, list) and [d["action"] for d in docs] == ["created", "appended", "created"]
    assert docs[0]["thread"] == docs[1]["thread"] != docs[2]["thread"]
    out = ok(cli("commit", a, c)).out.splitlines()
    assert out[0].startswith(f"{a}: Already stored") and out[1].startswith(f"{c}: Already stored")
    # Every input is read and validated before anything is stored.
    bad = tmp_path / "bad.json"
    bad.write_text('{"messages": [{"role": "user", "content": "x"}')
    new = write_json(tmp_path / "new.json", native("fresh"))
    before = store_state(store)
    doc = assert_error(cli("commit", new, bad, "--json"), "invalid_input")
    assert doc["error_message"].startswith(f"{bad}: ")
    assert_error(cli("commit", new, tmp_path / "missing.json"), "invalid_input")
    assert store_state(store) == before


def test_commit_from_stdin(cli, proj):
    d = ok(cli("commit", "--json", input=dumps(native("from stdin")))).json()  # no FILE: stdin
    assert d["action"] == "created"
    assert ok(cli("commit", "-", "--json", input=dumps(native("from stdin")))).json()["deduplicated"]


# -- log --------------------------------------------------------------------------------------


@pytest.fixture
def forks(cli, proj):
    """main: q1 a1 q2 a2; side: forked at main~2 with "s1" "s2"; HEAD is main."""
    main = commit(cli, conv("q1", "a1", "q2", "a2"), "--thread", "main")
    side = commit(cli, conv("q1", "a1", "s1", "s2"), "--thread", "side")
    ok(cli("switch", "main"))
    return {"main": main["tip"], "side": side["tip"]}


def test_log_json_messages(cli, forks):
    msgs = log_json(cli)
    assert [m["text"] for m in msgs] == ["a2", "q2", "a1", "q1"]
    assert msgs[0]["id"] == forks["main"]
    for m, older in zip(msgs, msgs[1:] + [None]):
        assert m["parent"] == (older["id"] if older else None)
        assert m["role"] in ("user", "assistant")
        assert m["parts"] and all("type" in p for p in m["parts"])
        assert m["parts"][0] == {"type": "text", "text": m["text"]}
        assert len(m["id"]) == 64


def test_log_count_reverse_and_rev(cli, forks):
    assert [m["text"] for m in log_json(cli, "-n", "2")] == ["a2", "q2"]
    assert [m["text"] for m in log_json(cli, "--count", "0")] == ["a2", "q2", "a1", "q1"]
    assert [m["text"] for m in log_json(cli, "-n", "9")] == ["a2", "q2", "a1", "q1"]
    assert [m["text"] for m in log_json(cli, "--reverse")] == ["q1", "a1", "q2", "a2"]
    assert [m["text"] for m in log_json(cli, "side")] == ["s2", "s1", "a1", "q1"]
    assert [m["text"] for m in log_json(cli, "side~1", "-n", "2")] == ["s1", "a1"]
    # -n picks the newest N, --reverse then prints them oldest first.
    assert [m["text"] for m in log_json(cli, forks["side"][:10], "--reverse", "-n", "2")] == ["s1", "s2"]
    assert_error(cli("log", "--count=-1", "--json"), "invalid_input")


def test_log_human_and_oneline(cli, forks):
    out = ok(cli("log")).out
    assert out.startswith(f"message {forks['main']} (main)\nRole:   assistant\n")
    assert "\n    a2\n" in out and "\n    q1\n" in out
    assert out.count("message ") == 4
    lines = ok(cli("log", "--oneline")).out.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith(forks["main"][:12] + " (main) assistant")
    assert lines[0].endswith(" a2") and lines[3].endswith(" q1")
    assert ok(cli("log", "--oneline", "--reverse", "-n", "1")).out.split()[-1] == "a2"  # as git: newest N, then reversed


def test_log_all_each_message_once(cli, forks):
    msgs = log_json(cli, "--all")
    ids = [m["id"] for m in msgs]
    assert len(ids) == len(set(ids)) == 6
    reachable = {m["id"] for t in ("main", "side") for m in log_json(cli, t)}
    assert set(ids) == reachable
    assert len(log_json(cli, "--all", "-n", "3")) == 3
    oneline = ok(cli("log", "--all", "--oneline")).out.splitlines()
    assert len(oneline) == 6


def test_log_graph(cli, forks):
    out = ok(cli("log", "--graph")).out
    lines = out.splitlines()
    assert len(lines) == 6 and all("● " in ln for ln in lines)
    assert lines[0].endswith("user: q1") and "(main)" in out and "(side)" in out
    assert any(ln.startswith("├─●") for ln in lines) and any(ln.startswith("└─●") for ln in lines)
    # --all adds trees that do not share a root.
    commit(cli, native("unrelated"), "--thread", "solo")
    assert "unrelated" not in ok(cli("log", "--graph", "main")).out
    out_all = ok(cli("log", "--graph", "--all")).out
    assert "unrelated" in out_all and "(solo)" in out_all
    # --graph --json is the fork tree as JSON (tests/test_cli_everyday.py checks its shape).
    assert "conversations" in ok(cli("log", "--graph", "--json")).json()


# -- show -------------------------------------------------------------------------------------


def test_show(cli, forks):
    out = ok(cli("show")).out
    assert out.splitlines()[0] == f"Thread main · 4 message(s) · tip {forks['main'][:12]}"
    body = [ln for ln in out.splitlines() if ln and not ln.startswith(("──", "Thread "))]
    assert body == ["q1", "a1", "q2", "a2"]
    doc = ok(cli("show", "--json")).json()
    assert doc["thread"] == "main" and doc["tip"] == forks["main"]
    assert [m["text"] for m in doc["messages"]] == ["q1", "a1", "q2", "a2"]  # reading order
    doc = ok(cli("show", "side~1", "--json")).json()
    assert doc["thread"] is None and [m["text"] for m in doc["messages"]] == ["q1", "a1", "s1"]
    assert ok(cli("show", "side", "--json")).json()["thread"] == "side"
    assert ok(cli("show", forks["side"][:8], "--json")).json()["tip"] == forks["side"]


def test_show_renders_parts(cli, proj):
    commit(cli, [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "reasoning_content": "think think",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "rain"},
        {"role": "assistant", "content": "It rains."},
    ])
    out = ok(cli("show")).out
    assert '→ tool call get_weather({"city":"Oslo"})  id=c1' in out
    assert "← tool result of get_weather for c1:\n  rain" in out
    assert "[reasoning: 11 characters, --reasoning to show]" in out
    assert "think think" in ok(cli("show", "--reasoning")).out
    types = [[p["type"] for p in m["parts"]] for m in ok(cli("show", "--json")).json()["messages"]]
    assert types == [["text"], ["reasoning", "tool_call"], ["tool_result"], ["text"]]
    assert "[tool call] get_weather" in ok(cli("log", "--oneline")).out


# -- fork, threads, switch --------------------------------------------------------------------


def test_fork_writes_no_message(cli, forks, proj):
    store = proj / ".convgit"
    before = types_of(cli, store)
    d = ok(cli("fork", "main~2", "alt", "--json")).json()
    assert d["status"] == "forked" and d["thread"] == "alt"
    assert d["tip"] == rev(cli, "main~2")
    assert d["forked_from"] == {"thread": "main", "message": d["tip"]}
    after = types_of(cli, store)
    new = {oid: t for oid, t in after.items() if oid not in before}
    assert list(new.values()) == ["turn"] and d["turn"] in new  # no message object
    assert sum(t == "message" for t in after.values()) == sum(t == "message" for t in before.values())
    rows = {t["name"]: t for t in ok(cli("threads", "--json")).json()}
    assert rows["alt"]["forked_from"] == {"thread": "main", "message": d["tip"]}
    assert rows["alt"]["messages"] == 2
    # Default name, human output; a fork from a message id has no source thread.
    out = ok(cli("fork", "side")).out
    assert out.startswith(f"Created thread side-fork-{forks['side'][:6]} at {forks['side'][:12]} (forked from side)")
    d = ok(cli("fork", forks["main"], "--json")).json()
    assert d["thread"] == f"fork-{forks['main'][:6]}" and d["forked_from"]["thread"] is None
    d = ok(cli("fork", "HEAD", "from-head", "--json")).json()
    assert d["forked_from"]["thread"] == "main"
    # HEAD does not move on fork.
    assert (store / "HEAD").read_text() == "ref: refs/threads/main\n"
    assert_error(cli("fork", "main", "alt", "--json"), "ref_exists")


def test_threads_list(cli, forks):
    rows = ok(cli("threads", "--json")).json()
    assert [r["name"] for r in rows] == ["main", "side"]
    main, side = rows
    assert {"name", "tip", "messages", "title", "forked_from"} <= set(main)
    assert (main["tip"], main["messages"], main["title"], main["current"]) == (forks["main"], 4, "q1", True)
    assert (side["tip"], side["messages"], side["current"]) == (forks["side"], 4, False)
    out = ok(cli("threads")).out.splitlines()
    assert out[0].startswith("* main ") and forks["main"][:12] in out[0] and "4 msg" in out[0]
    assert out[1].startswith("  side ")


def test_threads_empty(cli, proj):
    assert ok(cli("threads", "--json")).json() == []
    r = ok(cli("threads"))
    assert r.out == "" and "no threads yet" in r.err


def test_threads_rename_delete_switch(cli, forks, proj):
    store = proj / ".convgit"
    d = ok(cli("threads", "rename", "main", "trunk", "--json")).json()
    assert d == {"status": "renamed", "old": "main", "new": "trunk", "tip": forks["main"]}
    assert (store / "HEAD").read_text() == "ref: refs/threads/trunk\n"  # HEAD follows
    assert ok(cli("show-ref", "--json")).json() == {"side": forks["side"], "trunk": forks["main"]}
    assert not (store / "logs" / "refs" / "threads" / "main").exists()
    assert (store / "logs" / "refs" / "threads" / "trunk").exists()  # the reflog moved with it
    assert ok(cli("threads", "rename", "trunk", "main")).out == "Renamed trunk to main\n"

    d = ok(cli("switch", "side", "--json")).json()
    assert d == {"status": "switched", "thread": "side", "tip": forks["side"]}
    assert (store / "HEAD").read_text() == "ref: refs/threads/side\n"
    assert rev(cli, "HEAD") == forks["side"]
    assert ok(cli("switch", "main")).out == "Switched to thread main\n"

    n = len(object_ids(store))
    d = ok(cli("threads", "delete", "side", "--json")).json()
    assert d == {"status": "deleted", "thread": "side", "tip": forks["side"], "broken": None, "head": "main",
                 "head_moved": False}
    assert "side" not in ok(cli("show-ref", "--json")).json()
    assert len(object_ids(store)) == n  # messages stay (gc frees them)
    assert ok(cli("cat-object", "-t", forks["side"])).out == "message\n"
    assert_error(cli("threads", "delete", "side"), "not_found")
    assert_error(cli("switch", "side", "--json"), "not_found")
    out = ok(cli("threads", "delete", "main")).out  # the current and last thread: HEAD has nowhere to go
    assert out == (f"Deleted thread main (was {forks['main'][:12]}); "
                   "HEAD still names main, which no longer exists (no thread left to switch to)\n")
    assert (store / "HEAD").read_text() == "ref: refs/threads/main\n"


# -- rev-parse --------------------------------------------------------------------------------


def test_rev_parse(cli, forks, proj):
    store = proj / ".convgit"
    main = forks["main"]
    assert rev(cli, main) == main
    assert rev(cli, main.upper()) == main
    assert rev(cli, "main") == rev(cli, "HEAD") == rev(cli, "@") == main
    chain = [m["id"] for m in log_json(cli)]
    assert rev(cli, "main~1") == rev(cli, "HEAD~1") == rev(cli, "main^") == chain[1]
    assert rev(cli, "main~3") == rev(cli, "HEAD~3") == rev(cli, "main~2~1") == chain[3]
    assert rev(cli, "main~0") == main
    assert rev(cli, "main~") == chain[1] and rev(cli, "main^^") == rev(cli, "HEAD~1^") == chain[2]
    assert_error(cli("rev-parse", "main~4"), "not_found")
    assert ok(cli("rev-parse", "main", "side~1")).out.split() == [main, rev(cli, "side~1")]
    assert ok(cli("rev-parse", "main", "side", "--json")).json() == [main, forks["side"]]
    assert ok(cli("rev-parse", "main", "--json")).json() == main
    # Unique prefixes of 4+ hex; fewer is not a prefix.
    from helpers.cli import unique_prefix

    p = unique_prefix(store, main)
    assert rev(cli, p) == main and rev(cli, main[:12]) == main
    assert_error(cli("rev-parse", main[:3], "--json"), "not_found")
    assert_error(cli("rev-parse", "nope"), "not_found")
    assert_error(cli("rev-parse", "0" * 64, "--json"), "not_found")
    assert_error(cli("rev-parse", "main", "nope"), "not_found")  # any unknown fails the lot


def test_rev_parse_ambiguous_prefix(cli, proj):
    """Two messages whose ids share their first 4 hex digits."""
    import convgit
    from convgit import api

    seen: dict[str, bytes] = {}
    with convgit.Repository.open(proj / ".convgit") as repo:  # hashing only: ~300 ids, no writes
        for i in range(100_000):
            data = dumps({"parent": None, "role": "user", "parts": [{"type": "text", "text": f"m{i}"}]}).encode()
            oid = api.hash_object(repo, data, type_="message")
            if oid[:4] in seen:
                pair = (seen[oid[:4]], data)
                break
            seen[oid[:4]] = data
    ids = [ok(cli("hash-object", "-w", "-t", "message", "-", input=d)).out.strip() for d in pair]
    assert ids[0][:4] == ids[1][:4] and ids[0] != ids[1]
    doc = assert_error(cli("rev-parse", ids[0][:4], "--json"), "ambiguous_revision")
    assert set(doc["details"]["candidates"]) >= set(ids)
    assert_error(cli("rev-parse", ids[0][:4]), "ambiguous_revision")
    n = 5
    while ids[0][:n] == ids[1][:n]:
        n += 1
    assert rev(cli, ids[0][:n]) == ids[0] and rev(cli, ids[1][:n]) == ids[1]


def test_rev_parse_thread_named_like_a_prefix_wins(cli, proj):
    a = commit(cli, native("one"), "--thread", "beef")["tip"]
    b = commit(cli, native("two"), "--thread", "other")["tip"]
    ok(cli("update-ref", b[:4], a))  # a thread whose name is b's prefix
    assert rev(cli, b[:4]) == a


def test_head_of_an_empty_store(cli, proj):
    assert_error(cli("log", "--json"), "not_found")
    assert_error(cli("rev-parse", "HEAD"), "not_found")
    assert_error(cli("show"), "not_found")


# -- objects ----------------------------------------------------------------------------------


def test_cat_object(cli, forks, proj):
    import blake3

    store = proj / ".convgit"
    tip = forks["main"]
    turn = log_json(cli)[0]["turn"]
    assert ok(cli("cat-object", "-t", "main")).out == "message\n"
    assert ok(cli("cat-object", "-t", turn)).out == "turn\n"
    raw = ok(cli("cat-object", "--raw", tip)).out_bytes
    assert blake3.blake3(raw).hexdigest() == tip
    assert raw == (store / "objects" / tip[:2] / tip[2:]).read_bytes()
    assert ok(cli("cat-object", "-s", tip[:12])).out == f"{len(raw)}\n"
    p = ok(cli("cat-object", "-p", "main")).json()
    assert p["type"] == "message" and p["role"] == "assistant" and p["parent"] == rev(cli, "main~1")
    assert p["parts"] == [{"type": "text", "text": "a2"}]
    j = ok(cli("cat-object", "--json", "main")).json()
    assert j == {"id": tip, "type": "message", "size": len(raw), "object": p}
    assert_error(cli("cat-object", "main"), "invalid_input")  # no mode
    assert_error(cli("cat-object", "-t", "-s", "main"), "invalid_input")
    assert_error(cli("cat-object", "-t", "nope", "--json"), "not_found")


def test_hash_object(cli, proj, tmp_path):
    import blake3

    store = proj / ".convgit"
    f = tmp_path / "data.bin"
    f.write_bytes(b"\x00hello\xff")
    oid = ok(cli("hash-object", f)).out.strip()
    assert len(oid) == 64
    assert ok(cli("hash-object", "-", input=b"\x00hello\xff")).out.strip() == oid
    assert object_ids(store) == []  # not stored without -w
    d = ok(cli("hash-object", "-w", f, "--json")).json()
    assert d == {"id": oid, "type": "blob", "written": True}
    assert object_ids(store) == [oid]
    assert ok(cli("cat-object", "-t", oid)).out == "blob\n"
    assert blake3.blake3(ok(cli("cat-object", "--raw", oid)).out_bytes).hexdigest() == oid
    assert_error(cli("hash-object", "-t", "tree", f), "invalid_input")


def test_hash_object_round_trips_cat_object(cli, forks, proj):
    for r in ("main", "main~3", log_json(cli)[0]["turn"]):
        oid = rev(cli, r)
        typ = ok(cli("cat-object", "-t", oid)).out.strip()
        pretty = ok(cli("cat-object", "-p", oid)).out
        assert ok(cli("hash-object", "-t", typ, "-", input=pretty)).out.strip() == oid
    # A message whose parent is not stored cannot be written.
    orphan = dumps({"parent": "ab" * 32, "role": "user", "parts": [{"type": "text", "text": "x"}]})
    before = store_state(proj / ".convgit")
    assert_error(cli("hash-object", "-w", "-t", "message", "-", "--json", input=orphan), "object_missing")
    assert store_state(proj / ".convgit") == before
    assert_error(cli("hash-object", "-t", "message", "-", input="[1]"), "schema_validation_failed")


# -- refs -------------------------------------------------------------------------------------


def test_update_ref_and_show_ref(cli, forks, proj):
    main, side = forks["main"], forks["side"]
    assert ok(cli("show-ref", "--json")).json() == {"main": main, "side": side}
    assert ok(cli("show-ref")).out == f"{main} refs/threads/main\n{side} refs/threads/side\n"
    r = ok(cli("update-ref", "t", "main~1"))
    assert r.out == ""  # plumbing: silent on success
    assert ok(cli("show-ref", "--json")).json()["t"] == rev(cli, "main~1")
    d = ok(cli("update-ref", "t", "main", "main~1", "--json")).json()
    assert d == {"status": "updated", "thread": "t", "old": rev(cli, "main~1"), "new": main}
    before = store_state(proj / ".convgit")
    assert_error(cli("update-ref", "t", "side", "main~1", "--json"), "ref_stale")  # CAS fails
    assert_error(cli("update-ref", "--create", "t", "side"), "ref_exists")
    assert_error(cli("update-ref", "t", "0" * 64), "not_found")
    assert_error(cli("update-ref", "t"), "invalid_input")  # no NEW
    assert_error(cli("update-ref", "-d", "t", side), "ref_stale")
    assert store_state(proj / ".convgit") == before
    d = ok(cli("update-ref", "-d", "t", main, "--json")).json()
    assert d["new"] is None and d["old"] == main
    assert "t" not in ok(cli("show-ref", "--json")).json()
    ok(cli("update-ref", "--create", "t2", side))
    assert rev(cli, "t2") == side


def test_reindex_and_path(cli, forks, proj):
    d = ok(cli("reindex", "--json")).json()
    assert d["status"] == "rebuilt" and d["messages"] == 6 and d["threads"] == 2
    assert ok(cli("reindex")).out.startswith("Rebuilt the index: 6 messages in 2 threads")
    assert ok(cli("path")).out == f"{proj / '.convgit'}\n"
    assert ok(cli("path", "--json")).json() == {"path": str(proj / ".convgit"), "exists": True}


# -- output hygiene ---------------------------------------------------------------------------

MARKUP = "[bold]x[/bold] [/] [red]r[/red] :smile: [link=u]l[/link]"  # short: --oneline truncates


@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
def test_conversation_text_is_never_markup(cli, proj, monkeypatch, tty):
    from convgit.cli import output

    if tty:  # the rich code path, as on a terminal with colour
        monkeypatch.setattr(output, "is_tty", lambda: True)
        monkeypatch.setattr(output, "_console", None)
        monkeypatch.delenv("NO_COLOR", raising=False)
    d = commit(cli, [{"role": "user", "content": MARKUP}, {"role": "assistant", "content": MARKUP}],
               "--thread", "m")
    ok(cli("fork", "m", "m2"))
    for args in (["log"], ["log", "--oneline"], ["log", "--graph", "--all"], ["show"], ["threads"]):
        out = ok(cli(*args)).out
        assert MARKUP in out, (args, out)
    assert json.loads(ok(cli("show", "--json")).out)["messages"][0]["text"] == MARKUP
    assert d["thread"] == "m"


def test_unicode_and_whitespace_kept_exactly(cli, proj):
    text = "  Ünïcödé\tcafe\u0301 — 日本語 🎉\r\n  trailing  "
    commit(cli, [{"role": "user", "content": text}])
    assert log_json(cli)[0]["text"] == text
    assert ok(cli("cat-object", "-p", "HEAD")).json()["parts"][0]["text"] == text
