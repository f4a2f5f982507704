"""The formats issue 11 adds to import, through the CLI, from fixtures written from each
format's documentation and source (tests/data/formats): SillyTavern chats (swipes as
branches), Claude Code sessions (a tree, sidechains, a whole ~/.claude/projects), Codex CLI
rollouts, Grok exports (a tree), chatbot-ui exports, and Open WebUI's webui.db. For each: the
threads and branches made, and that re-importing adds only what is new."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path


from helpers.cli import assert_error, cli, cli_env, env, ok, proj  # noqa: F401

FMT = Path(__file__).parent / "data" / "formats"
ST = FMT / "sillytavern-seraphina.jsonl"
CC = FMT / "claude-projects"
CC_FILE = next(CC.rglob("*.jsonl"))
CODEX = FMT / "codex-sessions"
CODEX_FILE = next(CODEX.rglob("rollout-*.jsonl"))


def imp(cli, *args) -> dict:
    return ok(cli("import", "--json", *map(str, args))).json()


def refs(cli) -> dict:
    return ok(cli("show-ref", "--json")).json()


def texts(cli, rev: str) -> list[str]:
    return [e["text"] for e in ok(cli("log", rev, "--reverse", "--json")).json()]


def test_sillytavern_swipes_are_sibling_branches(cli, proj):
    doc = imp(cli, ST)
    (c,) = doc["conversations"]
    assert c["status"] == "imported" and c["source"] == "sillytavern" and len(c["threads"]) == 3
    main = next(t["thread"] for t in c["threads"] if t["branch"] == "main")
    assert texts(cli, main) == [
        "*Seraphina looks up from her book.* Welcome to the glade, traveller. Are you hurt?",
        "Only tired. Where am I?",
        "In Eldoria's oldest forest. Rest here; the trees keep watch.",  # the chosen swipe (swipe_id 1)
        "Thank you. What is that glowing flower?"]
    alts = sorted(texts(cli, t["thread"])[-1] for t in c["threads"] if t["branch"] != "main")
    assert alts == ["Somewhere safe. Sit, drink this tea first.",
                    "You are in the Whispering Woods. Nothing will harm you here."]
    roles = [e["role"] for e in ok(cli("log", main, "--reverse", "--json")).json()]
    assert roles == ["assistant", "user", "assistant", "user"]
    e = ok(cli("log", main, "--json")).json()[1]
    assert e["model"] == "gpt-4o-mini" and e["started_at"].startswith("2024-05-12T17:33")
    alt_models = {ok(cli("log", t["thread"], "-n", "1", "--json")).json()[0]["model"]
                  for t in c["threads"] if t["branch"] != "main"}
    assert alt_models == {"gpt-4o", "gpt-4o-mini"}
    assert imp(cli, ST)["counts"]["deduplicated"] == 1


def test_sillytavern_chat_that_grew_appends(cli, proj, tmp_path):
    f = tmp_path / "chat.jsonl"
    shutil.copy(ST, f)
    imp(cli, f)
    with open(f, "a") as out:
        out.write(json.dumps({"name": "Seraphina", "is_user": False, "send_date": "May 12, 2024 5:36pm",
                              "mes": "A moonpetal. It heals.", "extra": {}}) + "\n")
    doc = imp(cli, f)
    assert doc["conversations"][0]["status"] == "appended" and doc["new_messages"] == 1


def test_claude_code_session_tree_tools_and_sidechain(cli, proj):
    doc = imp(cli, CC_FILE)
    (c,) = doc["conversations"]
    assert c["source"] == "claude-code" and c["upstream_id"] == "5f0c2a8e-1b7d-4c1e-9a3f-2d4b6e8f0a11"
    assert c["title"] == "Count pelicans in the CSV"  # the summary line
    main = next(t["thread"] for t in c["threads"] if t["branch"] == "main")
    log = ok(cli("log", main, "--reverse", "--json")).json()
    assert [e["role"] for e in log] == ["user", "assistant", "assistant", "tool", "assistant", "user"]
    assert log[1]["parts"][0]["type"] == "reasoning" and log[1]["model"] == "claude-sonnet-4-20250514"
    call = log[2]["parts"][0]
    assert call["type"] == "tool_call" and call["name"] == "Bash" and call["arguments"]["command"].startswith("grep")
    res = log[3]["parts"][0]
    assert res["type"] == "tool_result" and res["tool_call_id"] == "toolu_01X" and res["output"] == "42"
    # the system note between the tool result and the answer is skipped; the answer follows the result
    assert log[4]["parent"] == log[3]["id"] and log[4]["text"] == "There are 42 pelicans in birds.csv."
    side = [t["thread"] for t in c["threads"] if t["branch"] != "main"]
    assert len(side) == 1 and texts(cli, side[0]) == ["Check whether birds.csv has a header row.",
                                                      "Yes: the first line is species,count."]
    graph = ok(cli("log", "--graph", main)).out
    assert "[tool call] Bash(" in graph and "[tool result] Bash: 42" in graph


def test_claude_code_projects_directory_and_rerun_adds_only_new(cli, proj, tmp_path):
    projects = tmp_path / "projects"
    shutil.copytree(CC, projects)
    doc = imp(cli, "--format", "claude-code", projects)
    assert doc["counts"]["imported"] == 1
    again = imp(cli, "--format", "claude-code", projects)
    assert again["counts"]["deduplicated"] == 1 and again["new_objects"] == 0
    # the session goes on, and a second session appears
    f = next(projects.rglob("*.jsonl"))
    with open(f, "a") as out:
        out.write(json.dumps({"parentUuid": "a6", "isSidechain": False, "sessionId": "5f0c2a8e-1b7d-4c1e-9a3f-2d4b6e8f0a11",
                              "type": "assistant", "uuid": "a7", "timestamp": "2025-09-14T10:01:03.000Z",
                              "message": {"role": "assistant", "model": "claude-sonnet-4-20250514",
                                          "content": [{"type": "text", "text": "41."}]}}) + "\n")
    other = f.parent.parent / "-home-ana-other" / "0a0b0c0d-0000-4000-8000-000000000001.jsonl"
    other.parent.mkdir()
    other.write_text(json.dumps({"parentUuid": None, "sessionId": "0a0b0c0d-0000-4000-8000-000000000001",
                                 "type": "user", "uuid": "z1", "timestamp": "2025-09-15T08:00:00Z",
                                 "message": {"role": "user", "content": "hello"}}) + "\n")
    third = imp(cli, projects)  # auto-detected too
    by = {c["upstream_id"]: c for c in third["conversations"]}
    assert by["5f0c2a8e-1b7d-4c1e-9a3f-2d4b6e8f0a11"]["status"] == "appended"
    assert by["0a0b0c0d-0000-4000-8000-000000000001"]["status"] == "imported" and third["new_messages"] == 2


def test_claude_code_session_being_written_ignores_a_cut_last_line(cli, proj, tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_bytes(CC_FILE.read_bytes() + b'{"parentUuid":"a6","type":"assistant","uuid":"a7","mess')
    assert imp(cli, f)["new_messages"] == 8


def test_codex_rollout(cli, proj):
    doc = imp(cli, "--format", "codex", CODEX)
    (c,) = doc["conversations"]
    assert c["source"] == "codex" and c["upstream_id"] == "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    log = ok(cli("log", c["threads"][0]["thread"], "--reverse", "--json")).json()
    assert [e["role"] for e in log] == ["user", "user", "assistant", "assistant", "tool", "assistant"]
    assert log[2]["parts"][0]["type"] == "reasoning" and log[2]["parts"][0]["text"] == "**Listing files**"
    call = log[3]["parts"][0]
    assert call["name"] == "shell" and call["arguments"] == {"command": ["bash", "-lc", "ls *.py"]}
    assert log[4]["parts"][0]["tool_call_id"] == "call_abc123"
    assert log[5]["text"] == "Two Python files: count.py and plot.py." and log[5]["model"] == "gpt-5-codex"
    assert imp(cli, CODEX_FILE)["counts"]["deduplicated"] == 1  # detected without --format too


def test_grok_export_tree(cli, proj):
    doc = imp(cli, FMT / "grok-export.json")
    assert doc["counts"]["imported"] == 2
    first = doc["conversations"][0]
    assert first["title"] == "Pelican facts" and len(first["threads"]) == 2
    main = next(t["thread"] for t in first["threads"] if t["branch"] == "main")
    assert texts(cli, main) == ["How big is a pelican's pouch?", "Up to three gallons, roughly 11 L.",
                                "Do they store fish in it?", "No, they drain the water and swallow the fish."]
    alt = next(t["thread"] for t in first["threads"] if t["branch"] != "main")
    assert texts(cli, alt)[-1] == "It can hold about 11 litres of water."
    e = ok(cli("log", alt, "-n", "1", "--json")).json()[0]
    assert e["model"] == "grok-3" and e["started_at"] == "2025-03-02T09:00:05.000Z"  # Mongo {"$date"} time
    assert imp(cli, FMT / "grok-export.json")["counts"]["deduplicated"] == 2


def test_chatbot_ui_export(cli, proj):
    doc = imp(cli, FMT / "chatbot-ui-export.json")
    assert doc["counts"]["imported"] == 2 and {c["title"] for c in doc["conversations"]} == {"Regex help", "Poem"}
    regex = next(c for c in doc["conversations"] if c["title"] == "Regex help")
    log = ok(cli("log", regex["threads"][0]["thread"], "--reverse", "--json")).json()
    assert [e["role"] for e in log] == ["system", "user", "assistant"]  # the prompt is the system message
    assert log[2]["model"] == "gpt-4"
    assert imp(cli, FMT / "chatbot-ui-export.json")["counts"]["deduplicated"] == 2


def _webui_db(path: Path, chats: list[dict]) -> Path:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE chat (id VARCHAR(255) NOT NULL PRIMARY KEY, user_id VARCHAR(255), title TEXT, "
               "share_id VARCHAR(255), archived INTEGER, created_at BIGINT, updated_at BIGINT, chat JSON, "
               "pinned BOOLEAN, meta JSON DEFAULT '{}', folder_id TEXT)")
    db.execute("CREATE TABLE user (id VARCHAR(255), name VARCHAR(255))")
    for i, c in enumerate(chats):
        db.execute("INSERT INTO chat (id, user_id, title, archived, created_at, updated_at, chat) VALUES (?,?,?,?,?,?,?)",
                   (c["id"], "u1", c["title"], 0, 1717000000 + i, 1717000100 + i, json.dumps(c["chat"])))
    db.commit()
    db.close()
    return path


def _owui_chat(cid: str, title: str, texts_: list[str]) -> dict:
    msgs, parent = {}, None
    for i, t in enumerate(texts_):
        mid = f"{cid}-m{i}"
        msgs[mid] = {"id": mid, "parentId": parent, "childrenIds": [], "role": "user" if i % 2 == 0 else "assistant",
                     "content": t, "timestamp": 1717000000 + i, **({"model": "llama3.1:8b"} if i % 2 else {})}
        parent = mid
    return {"id": cid, "title": title, "chat": {"title": title, "models": ["llama3.1:8b"],
                                                 "history": {"messages": msgs, "currentId": parent}}}


def test_open_webui_database(cli, proj, tmp_path):
    db = _webui_db(tmp_path / "webui.db", [_owui_chat("c1", "Llamas", ["Do llamas spit?", "Sometimes."]),
                                           _owui_chat("c2", "Alpacas", ["And alpacas?", "Less often.", "Why?"])])
    doc = imp(cli, db)
    assert doc["counts"]["imported"] == 2 and {c["source"] for c in doc["conversations"]} == {"open-webui"}
    c2 = next(c for c in doc["conversations"] if c["title"] == "Alpacas")
    assert texts(cli, c2["threads"][0]["thread"]) == ["And alpacas?", "Less often.", "Why?"]
    assert imp(cli, db)["counts"]["deduplicated"] == 2
    # the same chat from the JSON export is the same thread (same source and id)
    exp = tmp_path / "export.json"
    exp.write_text(json.dumps([_owui_chat("c1", "Llamas", ["Do llamas spit?", "Sometimes.", "When angry?"])]))
    again = imp(cli, exp)
    assert again["conversations"][0]["status"] == "appended"
    older = imp(cli, "--format", "open-webui-db", db)  # the db is behind the export now: nothing new
    assert older["new_messages"] == 0


def test_wrong_forced_format_and_empty_directory(cli, proj, tmp_path):
    assert_error(cli("import", "--format", "grok", FMT / "chatbot-ui-export.json"), "schema_validation_failed")
    assert_error(cli("import", "--format", "open-webui-db", ST), "invalid_input")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_error(cli("import", empty), "invalid_input")
    # commit takes one conversation, not an export of many
    assert_error(cli("commit", FMT / "grok-export.json"), "schema_validation_failed")
