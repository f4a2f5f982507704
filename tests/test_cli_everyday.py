"""The everyday CLI a git and llm user expects (issue 11), through the CLI: merging an llm
logs.db, reflog and threads restore, log --graph options, quiet and summarised reports,
"Already up to date.", help, --color, metavars, path, short prefixes, tool summaries.
Terminal-only behaviour (pager, progress, summaries) is in tests/test_cli_terminal.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.cli import (assert_error, cli, cli_env, conv, default_store, dumps, env, ok, proj, run,  # noqa: F401
                         store_state)

ROOT = Path(__file__).resolve().parent.parent
LLM_DB = ROOT.parent / "shared" / "fixtures" / "llm" / "sample-logs.db"
needs_llm_db = pytest.mark.skipif(not LLM_DB.is_file(), reason="../shared/fixtures is absent")


def commit(cli, texts, *args, **turn) -> dict:
    return ok(cli("commit", "-", "--json", *args, input=dumps({"messages": conv(*texts), **turn}))).json()


# -- merge an llm logs.db ---------------------------------------------------------------------


@needs_llm_db
def test_merge_an_llm_logs_db_imports_it_and_is_idempotent(cli, proj):
    store = proj / ".convgit"
    before = store_state(store)
    dry = ok(cli("merge", "--dry-run", "--json", LLM_DB)).json()
    assert dry["dry_run"] is True and dry["counts"]["imported"] == 13 and dry["merged_as"] == "llm-import"
    assert store_state(store) == before  # --dry-run writes nothing
    doc = ok(cli("merge", "--json", LLM_DB)).json()
    assert doc["status"] == "ok" and doc["source"] == str(LLM_DB) and doc["counts"]["imported"] == 13
    assert all(c["source"] == "llm" for c in doc["conversations"])
    # the same threads an import makes
    names = ok(cli("show-ref", "--json")).json()
    assert len([n for n in names if n.startswith("llm/")]) == 13
    # again: nothing changes, said as git says it
    state = store_state(store)
    again = ok(cli("merge", LLM_DB))
    assert again.out == "Already up to date.\n"
    assert ok(cli("merge", "--json", LLM_DB)).json()["counts"]["deduplicated"] == 13
    assert {k: v for k, v in store_state(store).items() if not k.startswith("logs/journal")} == \
        {k: v for k, v in state.items() if not k.startswith("logs/journal")}
    assert ok(cli("merge", "-q", LLM_DB)).out == ""


@needs_llm_db
def test_merge_of_an_llm_db_reports_like_import(cli, proj, tmp_path):
    r = ok(cli("merge", LLM_DB))
    lines = r.out.splitlines()
    assert len(lines) == 13 and all(ln.startswith("imported ") for ln in lines)
    assert "Imported 13 conversation(s)" in r.err
    other = tmp_path / "other"
    ok(cli("init", cwd=other))
    imp = ok(cli("import", LLM_DB, cwd=other))
    assert imp.out == r.out  # the same report


def test_merge_of_a_store_twice_is_already_up_to_date(cli, proj, tmp_path):
    other = tmp_path / "other"
    ok(cli("init", cwd=other))
    ok(cli("commit", "-", "--thread", "a", input=dumps({"messages": conv("q", "a")}), cwd=other))
    first = ok(cli("merge", other / ".convgit"))
    assert first.out.startswith("created") and "took" in first.out
    assert ok(cli("merge", other / ".convgit")).out == "Already up to date.\n"
    assert ok(cli("merge", "-q", other / ".convgit")).out == ""
    assert ok(cli("merge", "--json", other / ".convgit")).json()["refs"][0]["action"] == "same"


def test_merge_of_a_sqlite_file_that_is_no_llm_db_is_refused(cli, proj, tmp_path):
    import sqlite3

    p = tmp_path / "x.db"
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE t (a)")
    db.commit()
    db.close()
    assert_error(cli("merge", p), "invalid_input")


# -- reflog and threads restore ------------------------------------------------------------


def test_reflog_shows_each_move_with_its_turn(cli, proj):
    commit(cli, ["q1", "a1"], "--thread", "main", model="gpt-4o")
    commit(cli, ["q1", "a1", "q2"], "--thread", "main")
    ok(cli("fork", "main~1", "idea"))
    doc = ok(cli("reflog", "--json")).json()
    assert doc["thread"] == "main" and doc["deleted"] is False
    e = doc["entries"]
    assert [x["index"] for x in e] == [0, 1]
    assert e[1]["model"] == "gpt-4o" and e[1]["kind"] == "call" and e[1]["old"] is None
    assert e[0]["old"] == e[1]["new"] and e[0]["time"].endswith("Z")
    text = ok(cli("reflog")).out.splitlines()
    assert len(text) == 2 and "main@{0}" in text[0] and "gpt-4o" in text[1] and "UTC" in text[1]
    assert len(ok(cli("reflog", "-n", "1", "--json")).json()["entries"]) == 1
    fork = ok(cli("reflog", "idea", "--json")).json()["entries"]
    assert fork[0]["kind"] == "fork" and fork[0]["message"].startswith("fork:")
    assert_error(cli("reflog", "nosuch"), "not_found")
    assert_error(cli("reflog", "bad..name", "--json"), "invalid_ref_name")
    assert_error(cli("reflog", "-n", "-1"), "invalid_input")


def test_reflog_leaves_out_a_move_a_crash_cut_short(cli, run, proj):
    """A commit killed after its reflog line, before its ref moved: the move never happened,
    so reflog does not show it as main@{0} (the ref is still at the first commit); the next
    real move chains on from the tip and shows, and the cut-short line is counted."""
    first = commit(cli, ["q1", "a1"], "--thread", "main")["tip"]
    r = run("commit", "-", "--thread", "main", input=dumps({"messages": conv("q1", "a1", "q2", "a2")}),
            env_extra={"CONVGIT_CRASH_AT": "ref_after_tmp_fsync"})
    assert r.rc == 137
    doc = ok(cli("reflog", "--json")).json()
    assert [e["new"] for e in doc["entries"]] == [first] and doc["interrupted"] == 1
    assert "1 move(s) a crash cut short" in ok(cli("reflog")).err
    again = commit(cli, ["q1", "a1", "q2", "a3"], "--thread", "main")["tip"]
    doc = ok(cli("reflog", "--json")).json()
    assert [(e["old"], e["new"]) for e in doc["entries"]] == [(first, again), (None, first)]
    assert doc["interrupted"] == 1 and ok(cli("rev-parse", "main")).out.strip() == again
    # an unreadable ref: its reflog is still shown whole (it tells where the thread was)
    (proj / ".convgit" / "refs" / "threads" / "main").write_text("garbage\n")
    doc = ok(cli("reflog", "main", "--json")).json()
    assert [e["new"] for e in doc["entries"]][::2] == [again, first] and len(doc["entries"]) == 3
    assert doc["interrupted"] == 0


def test_restore_a_deleted_thread_with_its_history(cli, proj):
    commit(cli, ["q1", "a1"], "--thread", "main")
    ok(cli("fork", "main", "idea"))
    commit(cli, ["q1", "a1", "idea q"], "--thread", "idea")
    tip = ok(cli("rev-parse", "idea")).out.strip()
    ok(cli("threads", "delete", "idea"))
    assert_error(cli("rev-parse", "idea"), "not_found")
    # a deleted thread's reflog is still there to read
    arch = ok(cli("reflog", "idea", "--json")).json()
    assert arch["deleted"] is True and arch["entries"][0]["message"] == "delete"
    listed = ok(cli("threads", "restore", "--list", "--json")).json()
    assert [(r["name"], r["tip"], r["restorable"]) for r in listed] == [("idea", tip, True)]
    doc = ok(cli("threads", "restore", "idea", "--json")).json()
    assert doc["status"] == "restored" and doc["tip"] == tip and doc["from"].startswith("logs/deleted/idea.")
    assert ok(cli("rev-parse", "idea")).out.strip() == tip
    assert [m["text"] for m in ok(cli("log", "idea", "--json")).json()] == ["idea q", "a1", "q1"]
    # its history came back with it: restore, delete, commit, fork
    msgs = [e["message"].split(":")[0] for e in ok(cli("reflog", "idea", "--json")).json()["entries"]]
    assert msgs[:2] == ["restore", "delete"] and msgs[-1] == "fork"
    assert not list((proj / ".convgit" / "logs" / "deleted").glob("idea.*"))
    assert_error(cli("threads", "restore", "idea"), "ref_exists")
    assert_error(cli("threads", "restore", "never-was"), "not_found")
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"
    # the index says the same after a rebuild
    before = ok(cli("threads", "--json")).json()
    ok(cli("reindex"))
    assert ok(cli("threads", "--json")).json() == before


def test_restore_after_gc_pruned_the_thread_is_a_clear_error(cli, proj):
    commit(cli, ["keep"], "--thread", "main")
    commit(cli, ["lonely root", "gone soon"], "--thread", "lone")
    ok(cli("threads", "delete", "lone"))
    ok(cli("gc", "--prune=now", "-q"))
    listed = ok(cli("threads", "restore", "--list", "--json")).json()
    assert listed[0]["name"] == "lone" and listed[0]["restorable"] is False
    doc = assert_error(cli("threads", "restore", "lone", "--json"), "not_found")
    assert "gc pruned it" in doc["error_message"] and doc["details"]["pruned"] is True
    r = cli("threads", "restore", "lone")
    assert_error(r, "not_found")
    assert "gc pruned it" in r.err


# -- log --graph ----------------------------------------------------------------------------


def _forked(cli):
    commit(cli, ["q1", "a1", "q2", "a2"], "--thread", "main")
    ok(cli("fork", "main~2", "side"))
    commit(cli, ["q1", "a1", "other q"], "--thread", "side")
    ok(cli("switch", "main"))


def test_log_graph_count_json_and_refusals(cli, proj):
    _forked(cli)
    full = ok(cli("log", "--graph")).out.splitlines()
    assert len(full) == 5
    two = ok(cli("log", "--graph", "-n", "2")).out.splitlines()
    assert two[:2] == full[:2] and len(two) == 3 and "3 more message(s)" in two[2]
    doc = ok(cli("log", "--graph", "--json")).json()
    assert doc["messages"] == doc["total"] == 5 and doc["truncated"] is False
    (conv_,) = doc["conversations"]
    assert [m["summary"] for m in conv_["messages"]] == ["q1", "a1"]
    branches = conv_["branches"]
    assert sorted(b["messages"][0]["summary"] for b in branches) == ["other q", "q2"]
    main = next(b for b in branches if b["messages"][0]["summary"] == "q2")
    assert main["messages"][-1]["tips"] == ["main"] and main["branches"] == []
    cut = ok(cli("log", "--graph", "--json", "-n", "3")).json()
    assert cut["messages"] == 3 and cut["total"] == 5 and cut["truncated"] is True
    assert_error(cli("log", "--graph", "--reverse"), "invalid_input")
    assert_error(cli("log", "--graph", "-m", "gpt-4o", "--json"), "invalid_input")
    r = cli("log", "--graph", "--oneline")
    assert_error(r, "invalid_input")
    assert "--oneline" in r.err


def test_tool_calls_are_summarised_in_graph_and_oneline(cli, proj):
    doc = {"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "rainy, 4C"},
    ]}
    ok(cli("commit", "-", "--thread", "w", input=dumps(doc)))
    graph = ok(cli("log", "--graph")).out
    assert "[tool call] get_weather(" in graph and "Oslo" in graph
    assert "[tool result]" in graph and "rainy, 4C" in graph
    one = ok(cli("log", "--oneline")).out
    assert "[tool call] get_weather(" in one and "rainy, 4C" in one
    show = ok(cli("show")).out
    assert "→ tool call get_weather(" in show and "← tool result of get_weather for c1:" in show
    # the index's message_tree view (for datasette) says the same
    import sqlite3

    db = sqlite3.connect(proj / ".convgit" / "index.sqlite")
    tree = [r[0].strip() for r in db.execute("SELECT tree FROM message_tree")]
    db.close()
    assert tree[1].startswith("assistant: [tool call] get_weather(") and "Oslo" in tree[1]
    assert tree[2] == "tool: [tool result] get_weather: rainy, 4C"


# -- quiet, summaries ------------------------------------------------------------------------


def test_quiet_import_and_gc(cli, proj, tmp_path):
    f = tmp_path / "convs.jsonl"
    f.write_text("\n".join(dumps({"messages": conv(f"q{i}", f"a{i}")}) for i in range(3)) + "\n")
    r = ok(cli("import", "-q", f))
    assert r.out == "" and r.err == ""
    assert len(ok(cli("show-ref", "--json")).json()) == 3
    r = ok(cli("gc", "-q"))
    assert r.out == "" and r.err == ""
    loud = ok(cli("gc"))
    assert loud.out.startswith("gc did:")


def test_piped_report_lists_every_conversation(cli, proj, tmp_path):
    f = tmp_path / "many.jsonl"
    f.write_text("\n".join(dumps({"messages": conv(f"q{i}", f"a{i}")}) for i in range(30)) + "\n")
    r = ok(cli("import", f))
    assert len(r.out.splitlines()) == 30  # not a terminal: the whole list, for scripts


# -- help, colour, metavars, descriptions -----------------------------------------------------


def test_help_command(run, proj):
    assert ok(run("help", "log")).out == ok(run("log", "--help")).out
    assert ok(run("help", "threads", "rename")).out == ok(run("threads", "rename", "-h")).out
    assert ok(run("help")).out == ok(run("--help")).out
    assert_error(run("help", "nosuch"), "invalid_input")


def test_help_lists_whole_descriptions_and_readable_metavars(run, proj):
    top = ok(run("-h")).out
    assert "..." not in top.split("Commands:")[1]
    assert "reflog" in top and "help" in top
    assert "Usage: convgit import [OPTIONS] PATH...\n" in ok(run("import", "-h")).out
    assert "Usage: convgit bundle create [OPTIONS] FILE.db [THREAD...]\n" in ok(run("bundle", "create", "-h")).out
    assert "Usage: convgit search [OPTIONS] QUERY\n" in ok(run("search", "-h")).out
    assert "<list[str]>" not in ok(run("import", "-h")).out


def test_color_option(run, proj):
    ok(run("commit", "-", "--thread", "c", input=dumps({"messages": conv("hello", "there")})))
    plain = ok(run("log", "--oneline")).out
    assert "\x1b[" not in plain
    forced = ok(run("--color", "always", "log", "--oneline")).out
    assert "\x1b[" in forced and "hello" in forced
    assert "\x1b[" not in ok(run("--color", "never", "log", "--oneline")).out
    assert_error(run("--color", "sometimes", "log"), "invalid_input")


# -- small everyday fixes ---------------------------------------------------------------------


def test_status_prints_last_gc_as_a_time(cli, proj):
    commit(cli, ["q", "a"], "--thread", "t")
    ok(cli("gc", "-q"))
    line = next(ln for ln in ok(cli("status")).out.splitlines() if ln.startswith("Last gc"))
    assert line.rstrip().endswith(" UTC") and "-" in line and ":" in line, line


def test_path_creates_no_store(run, tmp_path):
    here = tmp_path / "empty"
    r = ok(run("path", cwd=here))
    assert r.out.strip() == str(default_store(tmp_path)) and "no store there yet" in r.err
    assert ok(run("path", "--json", cwd=here)).json() == {"path": str(default_store(tmp_path)), "exists": False}
    assert not default_store(tmp_path).exists()


def test_rev_parse_says_a_prefix_needs_four_hex_digits(cli, proj):
    commit(cli, ["q", "a"], "--thread", "t")
    r = cli("rev-parse", "937")
    assert_error(r, "not_found")
    assert "4 or more hex digits" in r.err


# -- llm logs parity: -c, --cid, -T ------------------------------------------------------------


def _tool_thread(cli, name: str, tool: str):
    doc = {"messages": [
        {"role": "user", "content": f"use {tool}"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": f"c-{tool}", "type": "function", "function": {"name": tool, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"c-{tool}", "content": f"{tool} says hi"},
    ], "model": "gpt-4o"}
    ok(cli("commit", "-", "--thread", name, input=dumps(doc)))


def test_log_and_search_current_and_cid(cli, proj):
    commit(cli, ["first q", "first a"], "--thread", "older")
    commit(cli, ["second q", "second a"], "--thread", "imports/abc123")
    ok(cli("switch", "older"))
    # -c: the conversation updated last, whatever HEAD names
    assert [e["text"] for e in ok(cli("log", "-c", "--json")).json()] == ["second a", "second q"]
    assert [e["text"] for e in ok(cli("log", "--cid", "abc123", "--json")).json()] == ["second a", "second q"]
    assert [e["text"] for e in ok(cli("log", "--cid", "older", "--json")).json()] == ["first a", "first q"]
    hits = ok(cli("search", "q", "--cid", "older", "--json")).json()
    assert [h["id"] for h in hits] and all("older" in h["threads"] for h in hits)
    assert_error(cli("log", "--cid", "nope"), "not_found")
    assert_error(cli("log", "-c", "--cid", "older"), "invalid_input")
    assert_error(cli("log", "-c", "older"), "invalid_input")


def test_log_and_search_by_tool_name(cli, proj):
    _tool_thread(cli, "w", "get_weather")
    _tool_thread(cli, "t", "get_time")
    commit(cli, ["no tools here", "fine"], "--thread", "plain")
    got = ok(cli("log", "--all", "-T", "get_weather", "--json")).json()
    assert got and all("get_time" not in json.dumps(e) for e in got)
    assert any(p.get("name") == "get_weather" for e in got for p in e["parts"])
    both = ok(cli("log", "--all", "--tool", "get_weather", "--tool", "get_time", "--json")).json()
    assert len(both) == 2 * len(got)
    assert ok(cli("log", "--all", "-T", "no_such_tool", "--json")).json() == []
    assert all(h["threads"] == ["w"] for h in ok(cli("search", "use", "-T", "get_weather", "--json")).json())


def test_log_turns_lists_every_call_also_those_that_added_nothing(cli, proj):
    call = {"messages": conv("hi", "hello"), "model": "gpt-4o", "usage": {"input_tokens": 5, "output_tokens": 2}}
    ok(cli("commit", "-", "--thread", "t", input=dumps(call)))
    again = ok(cli("commit", "-", "--json", input=dumps({**call, "started_at": "2030-01-01T00:00:00Z"}))).json()
    assert again["new_objects"] <= 1 and again["appended_messages"] == 0  # a re-sent call: no new message
    commit(cli, ["other", "answer"], "--thread", "u", model="claude-3")
    rows = ok(cli("log", "--turns", "--json")).json()
    assert [r["model"] for r in rows] == ["gpt-4o", "claude-3", "gpt-4o"]  # newest first
    assert rows[0]["started_at"] == "2030-01-01T00:00:00.000Z" and rows[0]["prompt"] == "hi"
    assert rows[0]["response"] == "hello" and rows[0]["usage"]["input_tokens"] == 5
    # the log of messages shows the message once; the turns show both calls
    assert len(ok(cli("log", "t", "--json")).json()) == 2
    assert len(ok(cli("log", "--turns", "-m", "gpt-4o", "--json")).json()) == 2
    assert len(ok(cli("log", "--turns", "-n", "1", "--json")).json()) == 1
    assert [r["thread"] for r in ok(cli("log", "--turns", "u", "--json")).json()] == ["u"]
    assert ok(cli("log", "--turns", "--since", "2029-01-01", "--json")).json()[0]["turn"] == rows[0]["turn"]
    doc = ok(cli("log", "--turns", "-u", "--json")).json()
    assert doc["usage"]["input_tokens"] == 10 and doc["usage"]["turns"] == 3
    text = ok(cli("log", "--turns")).out
    assert text.count("  > hi") == 2 and "claude-3" in text
    assert_error(cli("log", "--turns", "--graph"), "invalid_input")


def test_bundle_create_is_the_backup(cli, proj, tmp_path):
    """docs/cli.md: `bundle create backup.db` then `merge backup.db` into an empty store gives
    back every thread and message with the same ids, and the same log."""
    commit(cli, ["q1", "a1"], "--thread", "main", model="gpt-4o")
    ok(cli("fork", "main~1", "side"))
    commit(cli, ["q1", "other"], "--thread", "side")
    b = tmp_path / "backup.db"
    ok(cli("bundle", "create", b))
    assert ok(cli("bundle", "verify", b, "--json")).json()["status"] == "ok"
    fresh = tmp_path / "fresh"
    ok(cli("init", cwd=fresh))
    ok(cli("merge", b, cwd=fresh))
    assert ok(cli("show-ref", "--json", cwd=fresh)).json() == ok(cli("show-ref", "--json")).json()
    assert ok(cli("log", "--all", "--json", cwd=fresh)).json() == ok(cli("log", "--all", "--json")).json()


def test_log_turns_schema_and_data(cli, proj):
    schema = {"type": "json_schema", "json_schema": {"name": "dog", "schema": {"type": "object"}}}
    for i, name in enumerate(["Rex", "Fido"]):
        ok(cli("commit", "-", input=dumps({"messages": conv(f"invent dog {i}", json.dumps({"name": name, "age": i})),
                                            "model": "gpt-4o", "response_format": schema})))
    commit(cli, ["plain question", "plain answer"], "--thread", "p", model="gpt-4o")
    only = ok(cli("log", "--turns", "--schema", "any", "--json")).json()
    assert len(only) == 2 and all(r["prompt"].startswith("invent dog") for r in only)
    # --schema X: a given schema, by llm's id for it, a prefix of that, its name, or the schema itself
    from convgit.ingest.llmdb import schema_id

    sid = schema_id({"type": "object"})
    assert {r["schema"]["id"] for r in only} == {sid} and only[0]["schema"]["name"] == "dog"
    other = {"type": "json_schema", "json_schema": {"name": "cat", "schema": {"type": "object", "required": ["x"]}}}
    ok(cli("commit", "-", input=dumps({"messages": conv("invent a cat", "{}"), "model": "gpt-4o", "response_format": other})))
    assert len(ok(cli("log", "--turns", "--schema", "any", "--json")).json()) == 3
    for x in (sid, sid[:6], "dog", '{"type": "object"}'):
        got = ok(cli("log", "--turns", "--schema", x, "--json")).json()
        assert sorted(r["prompt"] for r in got) == ["invent dog 0", "invent dog 1"], x
    f = proj / "cat.schema.json"
    f.write_text(json.dumps({"type": "object", "required": ["x"]}))
    assert [r["prompt"] for r in ok(cli("log", "--turns", "--schema", f, "--json")).json()] == ["invent a cat"]
    assert ok(cli("log", "--turns", "--schema", "nosuch", "--json")).json() == []
    assert_error(cli("log", "--turns", "--schema", "{not json"), "invalid_input")
    assert ok(cli("log", "--turns", "--data", "--schema", "dog")).out.splitlines() == [
        '{"name": "Fido", "age": 1}', '{"name": "Rex", "age": 0}']
    assert ok(cli("log", "--turns", "--data")).out.splitlines() == ['{}', '{"name": "Fido", "age": 1}', '{"name": "Rex", "age": 0}']
    assert ok(cli("log", "--turns", "--data", "--json")).json() == [{}, {"name": "Fido", "age": 1}, {"name": "Rex", "age": 0}]
    assert_error(cli("log", "--data"), "invalid_input")
