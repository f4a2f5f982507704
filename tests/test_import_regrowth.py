"""Import formats of issue 11 (docs/import.md), what the audit found untested: a branched Open
WebUI ``webui.db`` chat, Claude Code's edited session, Codex's older layout, and exports that
grew (Codex, Grok, chatbot-ui): a re-import adds only the new messages to the same thread."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers.cli import cli, env, ok, proj  # noqa: F401  (fixtures)
from test_import_sessions import CODEX_FILE, FMT, _webui_db, imp, texts

CODEX_OLDER = next((FMT / "codex-older").glob("rollout-*.jsonl"))


def _threads(c: dict) -> dict[str, str]:
    """branch -> thread name of one imported conversation."""
    return {t["branch"]: t["thread"] for t in c["threads"]}


def test_open_webui_database_chat_with_an_edited_question_is_two_branches(cli, proj, tmp_path):
    msgs = {
        "m0": {"id": "m0", "parentId": None, "role": "user", "content": "Do llamas spit?", "timestamp": 1717000000},
        "m1": {"id": "m1", "parentId": "m0", "role": "assistant", "content": "Sometimes.", "model": "llama3.1:8b",
               "timestamp": 1717000001},
        "m2": {"id": "m2", "parentId": "m1", "role": "user", "content": "At people?", "timestamp": 1717000002},
        "m3": {"id": "m3", "parentId": "m2", "role": "assistant", "content": "Rarely.", "model": "llama3.1:8b",
               "timestamp": 1717000003},
        # the user edited the second question: a sibling of m2, and the chat's current branch
        "m4": {"id": "m4", "parentId": "m1", "role": "user", "content": "At other llamas?", "timestamp": 1717000010},
        "m5": {"id": "m5", "parentId": "m4", "role": "assistant", "content": "Mostly, yes.", "model": "llama3.1:8b",
               "timestamp": 1717000011},
    }
    chat = {"id": "c9", "title": "Llamas", "chat": {"title": "Llamas", "models": ["llama3.1:8b"],
                                                     "history": {"messages": msgs, "currentId": "m5"}}}
    db = _webui_db(tmp_path / "webui.db", [chat])
    (c,) = imp(cli, db)["conversations"]
    assert c["source"] == "open-webui" and c["upstream_id"] == "c9" and c["new_messages"] == 6
    by = _threads(c)
    assert len(by) == 2 and by["main"] == "open-webui/c9"
    assert texts(cli, by["main"]) == ["Do llamas spit?", "Sometimes.", "At other llamas?", "Mostly, yes."]
    (alt,) = [t for b, t in by.items() if b != "main"]
    assert texts(cli, alt) == ["Do llamas spit?", "Sometimes.", "At people?", "Rarely."]
    # the branches share the first two messages (one object each), and the fork point is known
    a, b = (ok(cli("log", t, "--json")).json() for t in (by["main"], alt))
    assert a[-2:] == b[-2:]
    assert "forked from open-webui/c9" in ok(cli("threads")).out
    again = imp(cli, db)
    assert again["counts"]["deduplicated"] == 1 and again["new_objects"] == 0


def test_claude_code_edited_session_is_two_branches(cli, proj, tmp_path):
    sid = "7a7a7a7a-1111-4222-8333-444455556666"

    def line(uuid, parent, role, text, ts):
        d = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/home/ana/pelican",
             "sessionId": sid, "version": "1.0.98", "gitBranch": "main", "type": role, "uuid": uuid,
             "timestamp": f"2025-09-20T08:00:{ts:02d}.000Z", "message": {"role": role, "content": text}}
        if role == "assistant":
            d["message"] = {"id": f"msg_{uuid}", "type": "message", "role": "assistant",
                            "model": "claude-sonnet-4-20250514", "content": [{"type": "text", "text": text}],
                            "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 5}}
        return json.dumps(d)

    f = tmp_path / f"{sid}.jsonl"
    f.write_text("\n".join([
        line("u1", None, "user", "Plot birds.csv", 0),
        line("a1", "u1", "assistant", "Which column on the y axis?", 2),
        line("u2", "a1", "user", "count, as bars", 5),
        line("a2", "u2", "assistant", "Done: bars.png.", 9),
        # Esc-Esc: the user edited the second prompt; the new branch hangs from the same parent
        line("u3", "a1", "user", "count, as a line", 30),
        line("a3", "u3", "assistant", "Done: line.png.", 34),
    ]) + "\n")
    (c,) = imp(cli, f)["conversations"]
    assert c["source"] == "claude-code" and c["upstream_id"] == sid and c["new_messages"] == 6
    by = _threads(c)
    assert len(by) == 2
    # the main thread ends at the last line of the file (the edit)
    assert texts(cli, by["main"]) == ["Plot birds.csv", "Which column on the y axis?", "count, as a line", "Done: line.png."]
    (alt,) = [t for b, t in by.items() if b != "main"]
    assert texts(cli, alt) == ["Plot birds.csv", "Which column on the y axis?", "count, as bars", "Done: bars.png."]
    assert imp(cli, f)["counts"]["deduplicated"] == 1


def test_codex_session_that_went_on_appends(cli, proj, tmp_path):
    f = tmp_path / "sessions" / CODEX_FILE.name
    f.parent.mkdir()
    shutil.copy(CODEX_FILE, f)
    (first,) = imp(cli, f)["conversations"]
    thread = first["threads"][0]["thread"]
    before = texts(cli, thread)
    with open(f, "a") as out:  # Codex appends the next turn to the same rollout file
        for ln in (
            {"timestamp": "2025-09-14T11:02:00.000Z", "type": "response_item",
             "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And plot.py?"}]}},
            {"timestamp": "2025-09-14T11:02:00.050Z", "type": "event_msg",
             "payload": {"type": "user_message", "message": "And plot.py?", "kind": "plain"}},
            {"timestamp": "2025-09-14T11:02:04.000Z", "type": "response_item",
             "payload": {"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "plot.py draws the bar chart."}]}},
        ):
            out.write(json.dumps(ln) + "\n")
    doc = imp(cli, "--format", "codex", f.parent)
    (c,) = doc["conversations"]
    assert c["status"] == "appended" and c["threads"][0]["thread"] == thread and doc["new_messages"] == 2
    assert texts(cli, thread) == [*before, "And plot.py?", "plot.py draws the bar chart."]
    assert ok(cli("log", thread, "-n", "1", "--json")).json()[0]["model"] == "gpt-5-codex"
    assert len(ok(cli("threads", "--json")).json()) == 1


def test_codex_older_layout(cli, proj):
    """The older rollout layout (docs/import.md): a first line with ``id``, ``timestamp`` and
    ``instructions``, then bare items with ``record_type: state`` lines between them."""
    doc = imp(cli, CODEX_OLDER)  # detected without --format
    (c,) = doc["conversations"]
    assert c["source"] == "codex" and c["upstream_id"] == "8c1d2e3f-4a5b-4c6d-9e7f-0a1b2c3d4e5f"
    assert c["title"] == "Does count.py handle an empty CSV?"  # the environment context is not the title
    thread = c["threads"][0]["thread"]
    assert thread == "codex/8c1d2e3f-4a5b-4c6d-9e7f-0a1b2c3d4e5f" and len(c["threads"]) == 1
    log = ok(cli("log", thread, "--reverse", "--json")).json()
    assert [e["role"] for e in log] == ["user", "user", "assistant", "assistant", "tool", "assistant"]
    assert log[2]["parts"][0] == {**log[2]["parts"][0], "type": "reasoning", "text": "**Reading count.py**"}
    call = log[3]["parts"][0]
    assert call["type"] == "tool_call" and call["name"] == "shell"
    assert call["arguments"] == {"command": ["bash", "-lc", "python count.py empty.csv"]}
    assert log[4]["parts"][0]["tool_call_id"] == "call_Zq81" and log[5]["text"] == "Yes: an empty CSV prints 0."
    assert imp(cli, "--format", "codex", CODEX_OLDER)["counts"]["deduplicated"] == 1


def test_grok_export_that_gained_responses_adds_only_those(cli, proj, tmp_path):
    doc = json.loads((FMT / "grok-export.json").read_text())
    first = imp(cli, FMT / "grok-export.json")
    hello = next(c for c in first["conversations"] if c["title"] == "Hello")
    thread = hello["threads"][0]["thread"]
    conv = next(c for c in doc["conversations"] if c["conversation"]["title"] == "Hello")
    conv["responses"] += [
        {"response": {"_id": "q3", "message": "Tell me a pelican fact", "sender": "human",
                      "create_time": "2025-03-03T10:01:00Z", "parent_response_id": "q2"}},
        {"response": {"_id": "q4", "message": "Pelicans fly in V formations.", "sender": "assistant",
                      "create_time": "2025-03-03T10:01:02Z", "parent_response_id": "q3", "model": "grok-3-mini"}},
    ]
    grown = tmp_path / "grok-export.json"
    grown.write_text(json.dumps(doc))
    again = imp(cli, grown)
    assert again["counts"] == {**again["counts"], "appended": 1, "deduplicated": 1, "imported": 0}
    assert again["new_messages"] == 2
    assert texts(cli, thread) == ["hi", "Hello! How can I help?", "Tell me a pelican fact", "Pelicans fly in V formations."]
    assert ok(cli("log", thread, "-n", "1", "--json")).json()[0]["model"] == "grok-3-mini"
    assert imp(cli, grown)["new_messages"] == 0


def test_chatbot_ui_export_that_gained_messages_adds_only_those(cli, proj, tmp_path):
    doc = json.loads((FMT / "chatbot-ui-export.json").read_text())
    first = imp(cli, FMT / "chatbot-ui-export.json")
    poem = next(c for c in first["conversations"] if c["title"] == "Poem")
    thread = poem["threads"][0]["thread"]
    before = texts(cli, thread)
    entry = next(h for h in doc["history"] if h["name"] == "Poem")
    entry["messages"] += [{"role": "user", "content": "Another, about herons"},
                          {"role": "assistant", "content": "Grey stilts in the reeds\nwaiting longer than the tide"}]
    grown = tmp_path / "chatbot-ui-export.json"
    grown.write_text(json.dumps(doc))
    again = imp(cli, grown)
    assert again["counts"] == {**again["counts"], "appended": 1, "deduplicated": 1, "imported": 0}
    assert again["new_messages"] == 2
    by = {c["title"]: c for c in again["conversations"]}
    assert by["Poem"]["threads"][0]["thread"] == thread
    assert texts(cli, thread) == [*before, "Another, about herons", "Grey stilts in the reeds\nwaiting longer than the tide"]
    assert len(ok(cli("threads", "--json")).json()) == 2
