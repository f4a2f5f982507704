"""Issue 11, the CLI surfaces its audit found untested (/work/notes/issue-11-map.md): a no-op
``pull`` says "Already up to date.", ``search -c``, ``--tools`` on the SQLite index, the reflog's
``source``, and ``log --all --json`` streaming from a real process."""

from __future__ import annotations

import json
import os
import select
import subprocess
from pathlib import Path

from helpers.cli import PY, cli, cli_env, conv, dumps, env, ok, proj, run  # noqa: F401  (fixtures)

FMT = Path(__file__).resolve().parent / "data" / "formats"


def _commit(cli, texts, *args, **turn) -> dict:
    return ok(cli("commit", "-", "--json", *args, input=dumps({"messages": conv(*texts), **turn}))).json()


def _tool_thread(cli, name: str, tool: str) -> None:
    doc = {"messages": [
        {"role": "user", "content": f"please use {tool}"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": f"c-{tool}", "type": "function", "function": {"name": tool, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"c-{tool}", "content": f"{tool} says please"},
        {"role": "assistant", "content": f"done with {tool}, please ask again"},
    ]}
    ok(cli("commit", "-", "--thread", name, input=dumps(doc)))


def test_a_pull_with_nothing_new_says_already_up_to_date(cli, tmp_path):
    remote = tmp_path / "remote"
    a, b = tmp_path / "a", tmp_path / "b"
    ok(cli("init", cwd=a))
    ok(cli("commit", "-", "--thread", "main", cwd=a, input=dumps({"messages": conv("q1", "a1")})))
    ok(cli("remote", "add", "origin", remote, cwd=a))
    ok(cli("push", cwd=a))
    ok(cli("clone", remote, b, cwd=tmp_path))
    assert ok(cli("pull", cwd=b)).out == "Already up to date.\n"
    assert ok(cli("pull", "-q", cwd=b)).out == ""
    # and once something came: the thread that moved is named, not "Already up to date."
    ok(cli("commit", "-", "--thread", "main", cwd=a, input=dumps({"messages": conv("q1", "a1", "q2")})))
    ok(cli("push", cwd=a))
    out = ok(cli("pull", cwd=b)).out
    assert "main" in out and "Already up to date." not in out
    assert ok(cli("pull", cwd=b)).out == "Already up to date.\n"
    assert [e["text"] for e in ok(cli("log", "main", "--json", cwd=b)).json()] == ["q2", "a1", "q1"]


def test_search_current_conversation_with_c(cli, proj):
    _commit(cli, ["zebra older question", "zebra older answer"], "--thread", "older")
    _commit(cli, ["zebra newer question", "zebra newer answer"], "--thread", "newer")
    ok(cli("switch", "older"))  # -c is the conversation updated last, whatever HEAD names
    hits = ok(cli("search", "zebra", "-c", "--json")).json()
    assert sorted(h["snippet"] for h in hits) == ["zebra newer answer", "zebra newer question"]
    assert all(h["threads"] == ["newer"] for h in hits)
    assert len(ok(cli("search", "zebra", "--json")).json()) == 4
    _commit(cli, ["zebra older question", "zebra older answer", "zebra older again"], "--thread", "older")
    assert {h["threads"][0] for h in ok(cli("search", "zebra", "-c", "--json")).json()} == {"older"}


def test_tools_filter_on_the_sqlite_index(cli, proj):
    _tool_thread(cli, "w", "get_weather")
    _commit(cli, ["please no tools", "fine, please"], "--thread", "plain")
    got = ok(cli("log", "--all", "--tools", "--json")).json()
    assert [e["role"] for e in got] == ["assistant", "tool", "assistant", "user"]
    assert all("no tools" not in (e["text"] or "") and "fine" not in (e["text"] or "") for e in got)
    hits = ok(cli("search", "please", "--tools", "--json")).json()
    assert hits and all(h["threads"] == ["w"] for h in hits)
    assert len(ok(cli("search", "please", "--json")).json()) > len(hits)
    _commit(cli, ["still no tools"], "--thread", "only")
    assert ok(cli("log", "only", "--tools", "--json")).json() == []


def test_reflog_names_the_source_of_each_turn(cli, proj):
    _commit(cli, ["hi", "hello"], "--thread", "t", source="my-app", model="m1")
    e = ok(cli("reflog", "t", "--json")).json()["entries"]
    assert [(x["kind"], x["model"], x["source"]) for x in e] == [("call", "m1", "my-app")]
    assert "[call, m1, my-app]" in ok(cli("reflog", "t")).out
    _commit(cli, ["hi", "hello", "more"], "--thread", "t")  # a turn with no source
    e = ok(cli("reflog", "t", "--json")).json()["entries"]
    assert [x["source"] for x in e] == [None, "my-app"]
    ok(cli("import", FMT / "grok-export.json"))
    name = "grok/c0a1b2c3-0002-4d5e-8f90-aa11bb22cc33"
    e = ok(cli("reflog", name, "--json")).json()["entries"]
    assert [(x["kind"], x["source"]) for x in e] == [("import", "grok")]
    assert "[import, grok]" in ok(cli("reflog", name)).out


def test_log_all_json_streams_its_first_rows_before_the_walk_ends(cli, proj, tmp_path):
    """The root message's object is replaced by a fifo, so the walk blocks there until the
    test writes it: the rows before it can only be read then if the CLI writes as it walks
    (a buffered CLI would print nothing until the end, and this test would time out)."""
    ok(cli("commit", "-", "--thread", "a", input=dumps({"messages": conv(*[f"m{i}" for i in range(8)])})))
    whole = ok(cli("log", "--all", "--json")).out
    root = json.loads(whole)[-1]
    assert root["text"] == "m0" and root["parent"] is None
    f = proj / ".convgit" / "objects" / root["id"][:2] / root["id"][2:]
    data = f.read_bytes()
    f.chmod(0o644)
    f.unlink()
    os.mkfifo(f)
    e = cli_env(tmp_path / "u2")
    e.pop("PYTHONUNBUFFERED", None)  # as a user runs it: stdout to a pipe is block-buffered
    p = subprocess.Popen([PY, "-m", "convgit", "log", "--all", "--json"], cwd=proj, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=e)
    try:
        got = b""
        fd = p.stdout.fileno()
        while b'"text": "m7"' not in got:  # the first row (flushed at once): read while the walk waits at m0
            ready, _, _ = select.select([fd], [], [], 120)
            assert ready, f"no streamed row within 120 s: {got!r}"
            chunk = os.read(fd, 65536)
            assert chunk, f"stdout closed early: {got!r} {p.stderr.read()!r}"
            got += chunk
        assert p.poll() is None  # still walking: it cannot end before the fifo is written
        assert got.startswith(b"[\n  {") and b'"text": "m0"' not in got
        with open(f, "wb") as w:  # let the walk go on
            w.write(data)
        rest, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0 and b"Traceback" not in err, err
    assert (got + rest).decode() == whole
