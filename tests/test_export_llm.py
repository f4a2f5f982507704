"""``export --format llm-db``: a logs.db that llm 0.36 reads (checked with the real ``llm``
package: ``llm logs`` and llm's own hash verification), and that ``convgit import`` turns
back into the same messages, with the same times and models (the round trip)."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import assert_error, cli, cli_env, dumps, env, ok, proj, run  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
LLM_DB = ROOT.parent / "shared" / "fixtures" / "llm" / "sample-logs.db"
needs_llm_db = pytest.mark.skipif(not LLM_DB.is_file(), reason="../shared/fixtures is absent")

# What a message is, as log --json prints it; turn ids, provenance and keys name the import
# turns the second store recorded, so they differ by design.
SAME = ("id", "parent", "role", "text", "parts", "meta", "depth", "started_at", "model")


def messages(cli, cwd) -> list[dict]:
    rows = ok(cli("log", "--all", "--json", cwd=cwd)).json()
    return sorted(({k: e[k] for k in SAME} for e in rows), key=lambda e: (e["id"], e["depth"]))


def llm_env(tmp_path) -> dict:
    e = dict(os.environ)
    e["LLM_USER_PATH"] = str(tmp_path / "llm-home")  # never the real ~/.config/io.datasette.llm
    return e


def llm_check(tmp_path, db: Path) -> dict:
    """llm's own reading of the file, in one process: ``llm logs -d DB -n 0 --json`` (llm's
    CLI, run by click's runner), LogStore.verify() (re-derives every b2 hash from the stored
    parts) and every thread's chain as llm loads it."""
    code = (
        "import json, sys, sqlite_utils\n"
        "from click.testing import CliRunner\n"
        "from llm.cli import cli\n"
        "from llm.logs import LogStore\n"
        "r = CliRunner().invoke(cli, ['logs', '-d', sys.argv[1], '-n', '0', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "s = LogStore(sqlite_utils.Database(sys.argv[1]))\n"
        "chains = {r['id']: [m.role for m in s.thread_messages(r['id'])] for r in s.db['threads'].rows}\n"
        "print(json.dumps({'logs': json.loads(r.output), 'problems': s.verify(), 'chains': chains,\n"
        "                  'views': s.db.view_names()}))\n")
    r = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True,
                       env=llm_env(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _store(cli, tmp_path, name) -> Path:
    d = tmp_path / name
    ok(cli("init", cwd=d))
    return d


def test_round_trip_of_commits_with_every_part_kind(cli, proj, tmp_path):
    long_text = "pelican " * 5000  # over the blob threshold: stored as a blob, exported as text
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n tiny").decode()
    first = {"model": "gpt-4o", "usage": {"prompt_tokens": 12, "completion_tokens": 7}, "duration_ms": 420,
             "started_at": "2026-03-01T10:00:00Z", "messages": [
                 {"role": "system", "content": "Be terse."},
                 {"role": "user", "name": "ana", "content": [
                     {"type": "text", "text": "What is in this picture?"},
                     {"type": "attachment", "data_base64": png, "mime_type": "image/png", "name": "p.png"}]},
                 {"role": "assistant", "content": [
                 {"type": "thinking", "thinking": "Look first.", "signature": "sig-1"},
                 {"type": "text", "text": "A tiny PNG."},
                 {"type": "tool_use", "id": "call_1", "name": "size", "input": {"f": "p.png"}}]}]}
    ok(cli("commit", "-", "--thread", "main", input=dumps(first)))
    second = {"model": "claude-x", "started_at": "2026-03-01T10:05:00Z", "messages": [
        *first["messages"],
        {"role": "tool", "content": [{"type": "tool_result", "tool_call_id": "call_1", "name": "size",
                                      "output": "no such file", "is_error": True}]},
        {"role": "user", "content": [{"type": "weird_kind", "x": 1}, {"type": "text", "text": long_text}]}],
        "response": {"role": "assistant", "content": "Done."}}
    ok(cli("commit", "-", "--thread", "main", input=dumps(second)))
    ok(cli("fork", "main~2", "side"))
    ok(cli("commit", "-", "--thread", "side", "--model", "o3", input=dumps({
        "messages": [*second["messages"][:4], {"role": "user", "content": "And otherwise?"}],
        "response": {"role": "assistant", "content": "Nothing else."}})))

    out = tmp_path / "out.db"
    rep = ok(cli("export", "--all", "--format", "llm-db", "-o", out, "--json")).json()
    assert rep["status"] == "ok" and rep["threads"] == 2 and rep["attachments"] == 1
    assert rep["messages"] == 8  # 6 on main, 2 more on side: the shared history written once

    other = _store(cli, tmp_path, "other")
    ok(cli("import", out, cwd=other))
    before, after = messages(cli, proj), messages(cli, other)
    assert after == before  # same ids, parts, meta, times and models
    kinds = {p["type"] for e in before for p in e["parts"]}
    assert kinds == {"text", "reasoning", "tool_call", "tool_result", "attachment", "opaque"}
    # importing it again adds nothing
    assert ok(cli("import", "--json", out, cwd=other)).json()["counts"]["deduplicated"] == 2

    # llm's view of the same file
    v = llm_check(tmp_path, out)
    assert v["problems"] == []  # every b2 hash re-derived by llm itself
    assert v["chains"]["main"] == ["system", "user", "assistant", "tool", "user", "assistant"]
    assert v["chains"]["side"] == ["system", "user", "assistant", "tool", "user", "assistant"]
    assert "message_tree" in v["views"]  # llm ran its one missing migration (a view) itself
    rows = v["logs"]
    assert {r["conversation_id"] for r in rows} == {"main", "side"}
    by_model = {r["model"]: r for r in rows}
    assert set(by_model) == {"gpt-4o", "claude-x", "o3"}
    assert by_model["gpt-4o"]["input_tokens"] == 12 and by_model["gpt-4o"]["output_tokens"] == 7
    assert by_model["gpt-4o"]["prompt"] == "What is in this picture?"
    assert by_model["gpt-4o"]["response"] == "A tiny PNG."
    assert by_model["o3"]["prompt"] == "And otherwise?" and by_model["o3"]["response"] == "Nothing else."
    # the call's time as convgit has it (log --json's started_at of the message it produced)
    ours = {e["text"]: e["started_at"] for e in before}
    assert by_model["gpt-4o"]["datetime_utc"].replace(" ", "T")[:23] == ours["A tiny PNG."][:23]


@needs_llm_db
def test_round_trip_of_an_llm_import(cli, proj, tmp_path):
    ok(cli("import", LLM_DB))
    out = tmp_path / "again.db"
    ok(cli("export", "--all", "-f", "llm-db", "-o", out))
    other = _store(cli, tmp_path, "other")
    ok(cli("import", out, cwd=other))
    assert messages(cli, other) == messages(cli, proj)
    # the threads keep llm's conversation ids, so the second import names them as the first
    assert ok(cli("show-ref", "--json", cwd=other)).json().keys() == ok(cli("show-ref", "--json")).json().keys()
    v = llm_check(tmp_path, out)
    rows = v["logs"]
    src = sqlite3.connect(f"file:{LLM_DB}?mode=ro", uri=True)
    threads = {r[0] for r in src.execute("SELECT id FROM threads")}
    legacy = {r[0] for r in src.execute("SELECT DISTINCT conversation_id FROM responses")}
    assert {r["conversation_id"] for r in rows} == threads | legacy  # every conversation shows
    # llm re-reads a path-backed attachment (no bytes in the db) from its path to hash it:
    # here the file is absent, so exactly those messages fail llm's check (as they do in the
    # fixture itself); every other hash is llm's own.
    db = sqlite3.connect(out)
    path_only = {r[0] for r in db.execute(
        "SELECT p.message_hash FROM parts p JOIN part_attachments pa ON pa.part_id = p.id "
        "JOIN attachments a ON a.id = pa.attachment_id WHERE a.content IS NULL AND a.path IS NOT NULL")}
    assert path_only and sorted(v["problems"]) == sorted(path_only)


def test_export_llm_db_refusals_write_nothing(cli, proj, tmp_path):
    ok(cli("commit", "-", "--thread", "t", input=dumps({"messages": [{"role": "user", "content": "hi"}]})))
    assert_error(cli("export", "-f", "llm-db"), "invalid_input")  # no -o
    existing = tmp_path / "x.db"
    existing.write_bytes(b"keep")
    r = cli("export", "-f", "llm-db", "-o", existing, "--json")
    assert assert_error(r, "invalid_input", json_=True)["error_message"].startswith(str(existing))
    assert existing.read_bytes() == b"keep"
    assert_error(cli("export", "-f", "llm-db", "-o", tmp_path / "y.db", "t~1"), "not_found")
    head = ok(cli("rev-parse", "t")).out.strip()
    assert_error(cli("export", "-f", "llm-db", "-o", tmp_path / "y.db", head), "invalid_input")  # not a thread
    assert_error(cli("export", "--json", "-f", "markdown"), "invalid_input")
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db" or ".tmp" in p.name) == ["x.db"]
    # the default is HEAD's thread
    ok(cli("export", "-f", "llm-db", "-o", tmp_path / "y.db"))
    db = sqlite3.connect(tmp_path / "y.db")
    assert db.execute("SELECT id, name FROM threads").fetchall() == [("t", "t")]


def test_a_call_that_added_no_message_is_its_own_llm_turn(cli, proj, tmp_path):
    """A re-sent identical request (a second recorded call, no new message) is written as an
    llm turn of its own on the answer, as llm logs such a call as its own response row;
    reading the file back dates the answer by the first call and keeps the second in that
    turn's ``other_calls``."""
    ask = {"model": "gpt-4o", "started_at": "2026-03-01T10:00:00Z", "duration_ms": 300,
           "usage": {"input_tokens": 5, "output_tokens": 2},
           "messages": [{"role": "user", "content": "capital of France?"}],
           "response": {"role": "assistant", "content": "Paris."}}
    ok(cli("commit", "-", "--thread", "main", input=dumps(ask)))
    ok(cli("commit", "-", "--thread", "main", input=dumps({**ask, "model": "gpt-4o-mini",
                                                           "started_at": "2026-03-01T11:00:00Z"})))
    assert len(ok(cli("log", "--turns", "--json")).json()) == 2
    out = tmp_path / "out.db"
    rep = ok(cli("export", "--format", "llm-db", "-o", out, "--json")).json()
    assert rep["turns"] == 2 and rep["messages"] == 2
    db = sqlite3.connect(out)
    rows = db.execute("SELECT model, tip_message_hash, parent_message_hash FROM turns ORDER BY datetime_utc").fetchall()
    db.close()
    assert [r[0] for r in rows] == ["gpt-4o", "gpt-4o-mini"] and rows[0][1:] == rows[1][1:]
    logs = llm_check(tmp_path, out)["logs"]
    assert sorted(e["model"] for e in logs) == ["gpt-4o", "gpt-4o-mini"]
    assert all(e["response"] == "Paris." for e in logs)
    back = _store(cli, tmp_path, "back")
    ok(cli("import", out, cwd=back))
    assert messages(cli, back) == messages(cli, proj)
    doc = json.loads(ok(cli("export", "--all", "--format", "native", cwd=back)).out)
    turns = [t for th in doc.get("threads", [doc]) for t in th["turns"]]
    other = [c for t in turns for c in (t.get("meta") or {}).get("other_calls", [])]
    assert [c["model"] for c in other] == ["gpt-4o-mini"] and other[0]["usage"]["input_tokens"] == 5
