"""Import formats through the CLI (issue 9, defect 8): no text lost from unusual ChatGPT
content types (text carried in ``text`` or in ``parts``), every node kept in the chain, a
tool's ``code`` as a tool result, Claude ``files`` entries that are plain strings kept, and the
ids of conversations that were mapped correctly before left unchanged."""

from __future__ import annotations

import json

from helpers.cli import cli, env, ok, proj  # noqa: F401
from test_import import _node, _text, chatgpt_conv, fx, needs_fixtures


def _claude_conv(**extra):
    return {"uuid": "cl-1", "name": "Chat", "created_at": "2025-03-01T10:00:00.000000Z",
            "updated_at": "2025-03-01T10:00:09.000000Z", **extra,
            "chat_messages": [
                {"uuid": "m1", "sender": "human", "text": "hello claude", "created_at": "2025-03-01T10:00:00.000000Z",
                 "content": [{"type": "text", "text": "hello claude"}], "attachments": [], "files": []},
                {"uuid": "m2", "sender": "assistant", "text": "hello human", "created_at": "2025-03-01T10:00:05.000000Z",
                 "content": [{"type": "text", "text": "hello human"}], "attachments": [], "files": []}]}


# -- ChatGPT: every content type keeps its text ------------------------------------------------


def _content_types_conv():
    """A linear chain with one node per content type, the text carried in ``text`` (or the
    type's own key) and again in ``parts``; every marker must survive."""
    spec = [
        # key, role, content, extra message fields
        ("uec", "user", {"content_type": "user_editable_context", "user_profile": "UEC-PROFILE",
                         "user_instructions": "UEC-INSTR"}, {"metadata": {"is_visually_hidden_from_conversation": True}}),
        ("uecp", "user", {"content_type": "user_editable_context", "parts": ["UEC-PARTS"]}, {}),
        ("u1", "user", _text("U-PARTS"), {}),
        ("ut", "user", {"content_type": "text", "text": "U-TEXT"}, {}),
        ("th", "assistant", {"content_type": "thoughts", "thoughts": [
            {"summary": "TH-SUMMARY", "content": "TH-CONTENT", "chunks": [], "finished": True}],
            "source_analysis_msg_id": "x"}, {}),
        ("thp", "assistant", {"content_type": "thoughts", "parts": ["TH-PARTS"]}, {}),
        ("rr", "assistant", {"content_type": "reasoning_recap", "content": "RR-CONTENT"}, {}),
        ("rrp", "assistant", {"content_type": "reasoning_recap", "parts": ["RR-PARTS"]}, {}),
        ("c1", "assistant", {"content_type": "code", "language": "python", "text": "CODE-TEXT"}, {"recipient": "python"}),
        ("o1", "tool", {"content_type": "execution_output", "text": "EO-TEXT"}, {"author": {"name": "python"}}),
        ("c2", "assistant", {"content_type": "code", "language": "python", "parts": ["CODE-PARTS"]},
         {"recipient": "python"}),
        ("o2", "tool", {"content_type": "execution_output", "parts": ["EO-PARTS"]}, {"author": {"name": "python"}}),
        ("c3", "assistant", {"content_type": "code", "language": "json", "text": "CODE-PLAIN"}, {}),
        ("c4", "assistant", {"content_type": "code", "language": "json", "parts": ["CODE-PLAIN-PARTS"]}, {}),
        ("tc1", "tool", {"content_type": "code", "language": "unknown", "text": "TOOL-CODE"},
         {"author": {"name": "python"}, "recipient": "assistant"}),
        ("tc2", "tool", {"content_type": "code", "language": "unknown", "parts": ["TOOL-CODE-PARTS"]},
         {"author": {"name": "python"}, "recipient": "assistant"}),
        ("tq", "tool", {"content_type": "tether_quote", "url": "https://e.x", "domain": "e.x", "title": "T",
                        "text": "TQ-TEXT", "tether_id": None}, {"author": {"name": "browser"}}),
        ("tb", "tool", {"content_type": "tether_browsing_display", "result": "TB-RESULT", "summary": None,
                        "assets": [], "tether_id": None}, {"author": {"name": "browser"}}),
        ("se", "tool", {"content_type": "system_error", "name": "tool_error", "text": "SE-TEXT"},
         {"author": {"name": "python"}}),
        ("a1", "assistant", _text("FINAL"), {"metadata": {"model_slug": "o3"}}),
    ]
    nodes = [_node("root", None, None, None, None, ["sys"]),
             _node("sys", "root", "system", _text(""), None, [spec[0][0]],
                   metadata={"is_visually_hidden_from_conversation": True})]
    parent = "sys"
    for i, (key, role, content, extra) in enumerate(spec):
        nxt = [spec[i + 1][0]] if i + 1 < len(spec) else []
        nodes.append(_node(key, parent, role, content, 100.0 + i, nxt, **json.loads(json.dumps(extra))))
        parent = key
    doc = {"id": "ct", "conversation_id": "ct", "title": "Content types", "create_time": 99.0,
           "current_node": "a1", "mapping": {n["id"]: n for n in nodes}}
    return doc, [s[0] for s in spec]


def test_chatgpt_every_content_type_keeps_its_text_and_its_node(cli, proj, tmp_path):
    doc, keys = _content_types_conv()
    p = tmp_path / "ct.json"
    p.write_text(json.dumps([doc]))
    rep = ok(cli("import", p, "--json")).json()
    assert rep["counts"]["imported"] == 1
    shown = ok(cli("show", "chatgpt/ct", "--json")).json()["messages"]
    # every node with content is in the chain, in order, each the parent of the next
    assert len(shown) == len(keys)
    assert [m["parent"] for m in shown] == [None] + [m["id"] for m in shown[:-1]]
    for key, m in zip(keys, shown):
        assert ok(cli("rev-parse", f"chatgpt:{key}")).out.strip() == m["id"], key
    by = dict(zip(keys, shown))

    def only(key, *types):
        assert [pt["type"] for pt in by[key]["parts"]] == list(types), (key, by[key]["parts"])
        return by[key]["parts"]

    uec = only("uec", "text", "text")
    assert [x["text"] for x in uec] == ["UEC-PROFILE", "UEC-INSTR"] and by["uec"]["role"] == "system"
    assert only("uecp", "text")[0]["text"] == "UEC-PARTS" and by["uecp"]["role"] == "system"
    assert only("u1", "text")[0]["text"] == "U-PARTS"
    assert only("ut", "text")[0]["text"] == "U-TEXT"
    th = only("th", "reasoning")[0]
    assert th["text"] == "TH-CONTENT" and th["meta"]["summary"] == "TH-SUMMARY"
    assert only("thp", "reasoning")[0]["text"] == "TH-PARTS"
    assert only("rr", "reasoning")[0]["text"] == "RR-CONTENT"
    assert only("rrp", "reasoning")[0]["text"] == "RR-PARTS"
    for key, args in (("c1", "CODE-TEXT"), ("c2", "CODE-PARTS")):
        call = only(key, "tool_call")[0]
        assert call["name"] == "python" and call["arguments"] == args, call
    for key, out in (("o1", "EO-TEXT"), ("o2", "EO-PARTS")):
        res = only(key, "tool_result")[0]
        assert res["name"] == "python" and res["output"] == out, res
    assert only("c3", "text")[0]["text"] == "CODE-PLAIN"
    assert only("c4", "text")[0]["text"] == "CODE-PLAIN-PARTS"
    # a tool's code addressed to the assistant is the tool's result, not a call named "assistant"
    for key, out in (("tc1", "TOOL-CODE"), ("tc2", "TOOL-CODE-PARTS")):
        res = only(key, "tool_result")[0]
        assert res["name"] == "python" and res["output"] == out and by[key]["role"] == "tool", res
        assert by[key]["meta"]["recipient"] == "assistant"
    assert only("tq", "tool_result")[0]["output"]["text"] == "TQ-TEXT"
    assert only("tb", "tool_result")[0]["output"]["result"] == "TB-RESULT"
    se = only("se", "tool_result")[0]
    assert se["output"]["text"] == "SE-TEXT" and se["is_error"] is True
    assert only("a1", "text")[0]["text"] == "FINAL"
    # and log --json agrees (the same messages, every marker findable)
    logged = ok(cli("log", "chatgpt/ct", "--json", "-n", "0")).json()
    assert {m["id"] for m in logged} == {m["id"] for m in shown}
    dump = json.dumps(logged, ensure_ascii=False)
    for marker in ("UEC-PROFILE", "UEC-INSTR", "UEC-PARTS", "U-PARTS", "U-TEXT", "TH-CONTENT", "TH-PARTS", "RR-CONTENT",
                   "RR-PARTS", "CODE-TEXT", "CODE-PARTS", "EO-TEXT", "EO-PARTS", "CODE-PLAIN", "TOOL-CODE",
                   "TOOL-CODE-PARTS", "TQ-TEXT", "TB-RESULT", "SE-TEXT", "FINAL"):
        assert marker in dump, marker


def test_chatgpt_text_and_parts_together_keeps_both(cli, proj, tmp_path):
    """Content carrying text under both keys, or something that is not a string in ``parts``:
    nothing is dropped (mapped, or an opaque part)."""
    nodes = [
        _node("u1", None, "user", _text("hi"), 1.0, ["c1"]),
        _node("c1", "u1", "assistant", {"content_type": "code", "language": "python", "text": "A = 1",
                                        "parts": ["B = 2"]}, 2.0, ["o1"], recipient="python"),
        _node("o1", "c1", "tool", {"content_type": "execution_output", "parts": ["out", {"image": "x"}]}, 3.0, ["r1"],
              author={"name": "python"}),
        _node("r1", "o1", "assistant", {"content_type": "reasoning_recap", "content": "Thought for 2s",
                                        "parts": ["detail"]}, 4.0, []),
    ]
    doc = {"id": "tp", "conversation_id": "tp", "title": "t", "current_node": "r1", "mapping": {n["id"]: n for n in nodes}}
    p = tmp_path / "tp.json"
    p.write_text(json.dumps([doc]))
    ok(cli("import", p))
    shown = ok(cli("show", "chatgpt/tp", "--json")).json()["messages"]
    assert len(shown) == 4
    assert shown[1]["parts"][0]["arguments"] == "A = 1\nB = 2"
    assert [pt["type"] for pt in shown[2]["parts"]] == ["tool_result", "opaque"]
    assert shown[2]["parts"][0]["output"] == "out" and shown[2]["parts"][1]["data"] == {"parts": {"image": "x"}}
    assert [pt["text"] for pt in shown[3]["parts"]] == ["Thought for 2s", "detail"]


# ids of conversations that were mapped correctly before the content-type fixes: unchanged
PINNED_TIPS = {
    "chatgpt/6857150a-cd20-800f-a5f7-d2404f94b935": "3200e0f13b7692f9d55420d7cb5044de7b29592e4f3426650efa92fb5ceba2a3",
    "chatgpt/6b0f0d9c-0000-4000-8000-000000000001": "4048f3ff10baaf75f1ec4d885f6e4377affb7acca721dfc8ddfec1e1297a09d2",
    "chatgpt/6b0f0d9c-0000-4000-8000-000000000003": "eb350980a9a49e3f66a3ca9c16e5bb8837469d18efee0f02f6dbc2376c28e289",
    "chatgpt/conv-1": "bbfbb216a0568c218ef48c3efba509780bdcd96bb1d846a12b5f89fcb0fa86ee",
    "chatgpt/conv-1-alt-1": "cc4b4f0ba69a991b34ff3dd80a00739b03cb9da96607b51ee3e0d032d7f463ee",
    "chatgpt/conv-1-alt-2": "8b36d9cc4f58cdb3d2c7b3c76831ff33fc3870f4f999b7e3563cc29d6a0e2334",
    "chatgpt/d5dc5307-6807-41a0-8b04-4acee626eeb7": "937f2a5c876ea2595e6eb933eca4f45a40c145c76233449e017bacec9a8093e6",
    "chatgpt/d5dc5307-6807-41a0-8b04-4acee626eeb7-alt-1": "18b3ee68bb9666695a7c2adc3922fd3778871db8bb5737a1781a19ed9be8fd19",
    "claude/11111111-2222-3333-4444-555555555555": "a669f44ece0b63cbe702e2e956d7828c3b1d7447838373a19b9c20df2ebb8c1e",
}


@needs_fixtures
def test_correctly_mapped_conversations_keep_their_ids(cli, proj, tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps([chatgpt_conv()]))
    files = [fx(f) for f in ("chatgpt/librechat-chatgpt-tree.json", "chatgpt/owi-importer-gpt-example.json",
                             "chatgpt/librechat-chatgpt-modern-export.json", "claude/owi-importer-claude-thinking.json")]
    ok(cli("import", p, *files))
    tips = {t["name"]: t["tip"] for t in ok(cli("threads", "--json")).json()}
    assert tips == PINNED_TIPS


# -- Claude: files and attachments that are plain strings ---------------------------------------


def test_claude_plain_string_files_are_kept(cli, proj, tmp_path):
    doc = _claude_conv()
    m = doc["chat_messages"][0]
    m["files"] = ["photo.png", {"file_uuid": "f-1", "file_name": "report.pdf"}]
    m["attachments"] = ["notes.txt", {"file_name": "a.txt", "file_type": "txt", "extracted_content": "EXTRACTED"}]
    p = tmp_path / "claude.json"
    p.write_text(json.dumps([doc]))
    ok(cli("import", p))
    parts = ok(cli("show", "claude/cl-1", "--json")).json()["messages"][0]["parts"]
    atts = [pt for pt in parts if pt["type"] == "attachment"]
    assert {a.get("name") for a in atts} == {"photo.png", "report.pdf", "notes.txt", "a.txt"}
    assert next(a for a in atts if a["name"] == "photo.png")["url"] == "claude-file:photo.png"
    assert next(a for a in atts if a["name"] == "report.pdf")["url"] == "claude-file:f-1"
    assert next(a for a in atts if a["name"] == "notes.txt")["url"] == "claude-attachment:notes.txt"
