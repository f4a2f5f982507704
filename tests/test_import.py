"""Import: every format's fixture (by path, skipped when ../shared is absent), hand-written
edge cases, idempotence, growth, branch switches, conflicts, aliases, and the round trip
through export."""

from __future__ import annotations

import copy
import json
import sqlite3
from pathlib import Path

import pytest

import convgit
from convgit import api, codec
from convgit.objects import (AttachmentPart, Message, OpaquePart, ReasoningPart, TextPart, ToolCallPart,
                             ToolResultPart, Turn)
from helpers.store import NOW, fast_repo, object_ids, tree_state

LATER = NOW + 10**12  # an import happens after the conversations it brings (2055)

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT.parent / "shared" / "fixtures"
needs_fixtures = pytest.mark.skipif(not FIX.is_dir(), reason="../shared/fixtures is absent")


def fx(rel: str) -> Path:
    return FIX / rel


def imp(repo, *paths, fmt="auto", dry_run=False):
    return api.import_paths(repo, [str(p) for p in paths], fmt=fmt, dry_run=dry_run, now_ms=LATER)


@pytest.fixture
def store(tmp_path):
    r = fast_repo(tmp_path / "s")
    yield r
    r.close()


def msgs(repo, rev):
    return [e.message for e in convgit.conversation(repo, rev)]


def write(tmp_path, name, doc) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc, ensure_ascii=False), "utf-8")
    return p


# -- ChatGPT --------------------------------------------------------------------------------

CG_ID = "d5dc5307-6807-41a0-8b04-4acee626eeb7"


@needs_fixtures
def test_chatgpt_tree_fixture(store):
    rep = imp(store, fx("chatgpt/librechat-chatgpt-tree.json"))
    assert rep.counts()["imported"] == 1
    refs = store.refs.read_all()
    assert set(refs) == {f"chatgpt/{CG_ID}", f"chatgpt/{CG_ID}-alt-1"}
    main = msgs(store, f"chatgpt/{CG_ID}")
    # null root and the empty hidden system node dropped: the current path starts at the user
    assert [m.role for m in main] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert [m.parts[0].text for m in main[:5:2]] == ["hi there", "hi again", "tell me a joke"]
    alt = msgs(store, f"chatgpt/{CG_ID}-alt-1")
    assert alt[2].parts[0].text == "so cool bro"  # the edited prompt: a sibling of "hi again"
    assert alt[1] == main[1] and alt[2] != main[2]  # fork after the first answer
    # the two identical regenerations are one message with both source ids
    ids = {api.rev_parse(store, "chatgpt:d0d2a7df"), api.rev_parse(store, "chatgpt:f63b8e17")}
    assert ids == {refs[f"chatgpt/{CG_ID}"]}
    # real dates and models in the log
    e = convgit.log(store, f"chatgpt/{CG_ID}")[0]
    assert e.turn["model"] == "text-davinci-002-render-sha"
    assert e.to_json(store)["started_at"].startswith("2024-05-01T")
    t = store.objects.read(e.turn["turn"])
    assert isinstance(t, Turn) and t.kind == "import" and t.meta["source_id"].startswith(("d0d2a7df", "f63b8e17"))


@needs_fixtures
def test_chatgpt_reimport_writes_nothing(store):
    imp(store, fx("chatgpt/librechat-chatgpt-tree.json"), fx("chatgpt/owi-importer-gpt-example.json"))
    before = tree_state(store)
    rep = imp(store, fx("chatgpt/librechat-chatgpt-tree.json"), fx("chatgpt/owi-importer-gpt-example.json"))
    assert rep.counts()["deduplicated"] == 2 and rep.new_objects == 0
    assert tree_state(store) == before


@needs_fixtures
def test_chatgpt_modern_export_skips_entry_without_mapping(store):
    rep = imp(store, fx("chatgpt/librechat-chatgpt-modern-export.json"))
    st = [c.status for c in rep.conversations]
    assert st.count("imported") == 2 and st.count("skipped") == 1
    skipped = next(c for c in rep.conversations if c.status == "skipped")
    assert "mapping" in skipped.reason and skipped.error_code == "schema_validation_failed" and skipped.warning
    assert rep.failures == []


@needs_fixtures
def test_chatgpt_linear_export_escapes_and_custom_instructions(store):
    imp(store, fx("chatgpt/owi-importer-gpt-example.json"))
    (name,) = store.refs.read_all()
    ms = msgs(store, name)
    hidden = [m for m in ms if (m.meta or {}).get("hidden")]
    assert all(m.role == "system" for m in hidden)
    text = "".join(p.text for m in ms for p in m.parts if isinstance(p, TextPart))
    assert "\u2019" in text or "’" in text  # \u escapes decoded before hashing


def _node(nid, parent, role, content, t, children=(), **msg):
    m = None if role is None else {"id": nid, "author": {"role": role, **msg.pop("author", {})}, "create_time": t,
                                   "content": content, "status": "finished_successfully", "weight": 1.0,
                                   "recipient": msg.pop("recipient", "all"), "metadata": msg.pop("metadata", {}), **msg}
    return {"id": nid, "parent": parent, "children": list(children), "message": m}


def _text(*parts):
    return {"content_type": "text", "parts": list(parts)}


def chatgpt_conv(cid="conv-1", current="a2", extra=()):
    nodes = [
        _node("root", None, None, None, None, ["sys"]),
        _node("sys", "root", "system", _text(""), None, ["u1"], metadata={"is_visually_hidden_from_conversation": True}),
        _node("u1", "sys", "user", _text("plot sin(x)"), 100.0, ["th"]),
        _node("th", "u1", "assistant", {"content_type": "thoughts", "thoughts": [
            {"summary": "Plan", "content": "Use numpy.", "chunks": [], "finished": True}], "source_analysis_msg_id": "x"},
              101.0, ["rr"], metadata={"model_slug": "o3"}),
        _node("rr", "th", "assistant", {"content_type": "reasoning_recap", "content": "Thought for 2s"}, 102.0, ["c1"]),
        _node("c1", "rr", "assistant", {"content_type": "code", "language": "python", "text": "plot()"}, 103.0, ["o1"],
              recipient="python"),
        _node("o1", "c1", "tool", {"content_type": "execution_output", "text": "<figure>"}, 104.0, ["a1", "a2"],
              author={"name": "python"}),
        _node("a1", "o1", "assistant", _text("Here it is."), 105.0, [], metadata={"model_slug": "o3"}),
        _node("a2", "o1", "assistant", {"content_type": "multimodal_text", "parts": [
            {"content_type": "image_asset_pointer", "asset_pointer": "file-service://file-abc", "size_bytes": 10,
             "width": 2, "height": 2}, "Done."]}, 106.0, [], metadata={"model_slug": "o3"}),
        _node("w1", "o1", "assistant", {"content_type": "sonic_webpage", "url": "u"}, 107.0, []),
        *extra,
    ]
    return {"id": cid, "conversation_id": cid, "title": "Plot", "create_time": 99.0, "current_node": current,
            "mapping": {n["id"]: n for n in nodes}}


def test_chatgpt_content_types_tool_calls_reasoning_and_unknown(store, tmp_path):
    rep = imp(store, write(tmp_path, "c.json", [chatgpt_conv()]))
    assert rep.counts()["imported"] == 1
    refs = store.refs.read_all()
    assert set(refs) == {"chatgpt/conv-1", "chatgpt/conv-1-alt-1", "chatgpt/conv-1-alt-2"}
    main = msgs(store, "chatgpt/conv-1")
    assert [m.role for m in main] == ["user", "assistant", "assistant", "assistant", "tool", "assistant"]
    th, rr, call, out, ans = main[1:]
    assert isinstance(th.parts[0], ReasoningPart) and th.parts[0].text == "Use numpy." and th.parts[0].meta["summary"] == "Plan"
    assert isinstance(rr.parts[0], ReasoningPart) and rr.parts[0].meta["source_type"] == "reasoning_recap"
    assert isinstance(call.parts[0], ToolCallPart) and call.parts[0].name == "python" and call.parts[0].arguments == "plot()"
    assert isinstance(out.parts[0], ToolResultPart) and out.parts[0].name == "python" and out.parts[0].output == "<figure>"
    assert isinstance(ans.parts[0], AttachmentPart) and ans.parts[0].url == "file-service://file-abc" and ans.parts[0].size == 10
    unknown = msgs(store, "chatgpt/conv-1-alt-2")[-1]
    assert isinstance(unknown.parts[0], OpaquePart) and unknown.parts[0].data["url"] == "u"


def test_tree_import_is_independent_of_node_order(tmp_path):
    doc = chatgpt_conv()
    rev = copy.deepcopy(doc)
    rev["mapping"] = dict(reversed(list(doc["mapping"].items())))
    for n in rev["mapping"].values():
        n["children"] = list(reversed(n["children"]))
    a, b = fast_repo(tmp_path / "a"), fast_repo(tmp_path / "b")
    imp(a, write(tmp_path, "a.json", [doc]))
    imp(b, write(tmp_path, "b.json", [rev]))
    assert a.refs.read_all() == b.refs.read_all()
    ma = {o for o in object_ids(a) if isinstance(a.objects.read(o), Message)}
    mb = {o for o in object_ids(b) if isinstance(b.objects.read(o), Message)}
    assert ma == mb


def test_grown_export_appends_only_the_tail_and_branch_switch_moves_main(store, tmp_path):
    imp(store, write(tmp_path, "v1.json", [chatgpt_conv(current="a2")]))
    tip_main = store.refs.read("chatgpt/conv-1")
    before = object_ids(store)
    grown = chatgpt_conv(current="u2", extra=[_node("u2", "a1", "user", _text("thanks"), 200.0, [])])
    grown["mapping"]["a1"]["children"] = ["u2"]
    rep = imp(store, write(tmp_path, "v2.json", [grown]))
    (c,) = rep.conversations
    assert c.status == "appended" and c.new_messages == 1
    new_msgs = [o for o in object_ids(store) - before if isinstance(store.objects.read(o), Message)]
    assert len(new_msgs) == 1
    # main followed current_node onto the other branch: the move is in the reflog
    main = store.refs.read("chatgpt/conv-1")
    assert main == new_msgs[0] and store.objects.read(main).parent == api.rev_parse(store, "chatgpt:a1")
    log = store.refs.read_log("chatgpt/conv-1")
    assert log[-2].new == tip_main and log[-1].old == tip_main and log[-1].new == main
    # the old main tip is still a thread (an alt took it)
    assert tip_main in store.refs.read_all().values()
    # and the grown export again: nothing
    state = tree_state(store)
    assert imp(store, tmp_path / "v2.json").new_objects == 0
    assert tree_state(store) == state


def linear_claude(msgs_, uuid="c-1"):
    return [{"uuid": uuid, "name": "Chat", "created_at": "2025-01-01T00:00:00Z", "chat_messages": [
        {"uuid": f"m{i}", "sender": "human" if i % 2 == 0 else "assistant", "created_at": f"2025-01-01T00:00:0{i}Z",
         "text": t, "content": [{"type": "text", "text": t}]} for i, t in enumerate(msgs_)]}]


def test_linear_changed_history_is_a_conflict(store, tmp_path):
    imp(store, write(tmp_path, "a.json", linear_claude(["q", "a"])))
    assert imp(store, write(tmp_path, "b.json", linear_claude(["q", "a", "q2", "a2"]))).conversations[0].status == "appended"
    state = tree_state(store)
    rep = imp(store, write(tmp_path, "c.json", linear_claude(["q", "CHANGED", "q2", "a2", "q3"])))
    (c,) = rep.conversations
    assert c.status == "conflict" and c.error_code == "duplicate_conflict"
    assert tree_state(store) == state


@needs_fixtures
def test_claude_fixture_thinking_then_text(store):
    imp(store, fx("claude/owi-importer-claude-thinking.json"))
    ms = msgs(store, "claude/11111111-2222-3333-4444-555555555555")
    assert [m.role for m in ms] == ["user", "assistant"]
    assert [type(p) for p in ms[1].parts] == [ReasoningPart, TextPart]
    assert ms[1].parts[0].meta["summaries"] == [{"summary": "Planning a warm greeting"}]


def test_claude_tree_tools_and_attachments(store, tmp_path):
    root = "00000000-0000-4000-8000-000000000000"
    conv = [{"uuid": "t-1", "name": "T", "chat_messages": [
        {"uuid": "h1", "parent_message_uuid": root, "sender": "human", "created_at": "2026-01-01T00:00:00Z", "text": "",
         "content": [{"type": "text", "text": "read this"}],
         "attachments": [{"file_name": "a.txt", "file_size": 3, "file_type": "txt", "extracted_content": "abc"}],
         "files": [{"file_uuid": "f-1", "file_name": "img.png"}]},
        {"uuid": "a1", "parent_message_uuid": "h1", "sender": "assistant", "created_at": "2026-01-01T00:00:01Z", "text": "",
         "content": [{"type": "tool_use", "id": "tu1", "name": "search", "input": {"q": "x"}},
                     {"type": "tool_result", "tool_use_id": "tu1", "name": "search", "content": [{"type": "text", "text": "r"}]},
                     {"type": "text", "text": "found"}]},
        {"uuid": "a2", "parent_message_uuid": "h1", "sender": "assistant", "created_at": "2026-01-01T00:00:09Z", "text": "",
         "content": [{"type": "text", "text": "retry"}]},
    ]}]
    imp(store, write(tmp_path, "t.json", conv))
    refs = store.refs.read_all()
    assert set(refs) == {"claude/t-1", "claude/t-1-alt-1"}
    main = msgs(store, "claude/t-1")
    assert main[-1].parts[0].text == "retry"  # newest leaf is the main thread
    h = main[0]
    att = [p for p in h.parts if isinstance(p, AttachmentPart)]
    assert store.objects.read(att[0].blob).data == b"abc" and att[1].url == "claude-file:f-1"
    a1 = msgs(store, "claude/t-1-alt-1")[-1]
    assert [type(p) for p in a1.parts] == [ToolCallPart, ToolResultPart, TextPart]
    assert a1.parts[1].tool_call_id == a1.parts[0].id == "tu1"


# -- Open WebUI, LibreChat ---------------------------------------------------------------------


@needs_fixtures
def test_openwebui_fixtures(store):
    imp(store, fx("openwebui/librechat-openwebui-export.json"), fx("openwebui/owi-importer-webui-json.json"))
    refs = store.refs.read_all()
    assert {"open-webui/reasoning-chat", "open-webui/tool-chat", "open-webui/simple-chat"} <= set(refs)
    r = msgs(store, "open-webui/reasoning-chat")[-1]
    assert isinstance(r.parts[0], ReasoningPart) and "150 + 105" in r.parts[0].text and r.parts[1].text == "255"
    t = msgs(store, "open-webui/tool-chat")[-1]
    assert [type(p) for p in t.parts] == [ToolCallPart, ToolResultPart, TextPart]
    assert t.parts[0].id == t.parts[1].tool_call_id == "call_1"
    owui = [n for n in refs if n.startswith("open-webui/") and n not in ("open-webui/reasoning-chat", "open-webui/tool-chat", "open-webui/simple-chat")]
    first = msgs(store, owui[0])[0]
    assert "can''t" in first.parts[0].text  # the SQL-doubled quotes are data: kept as is


def test_openwebui_tree_ignores_children_ids_and_parses_details(store, tmp_path):
    m = {
        "u1": {"id": "u1", "parentId": None, "childrenIds": [], "role": "user", "content": "hi", "timestamp": 1700000000},
        "a1": {"id": "a1", "parentId": "u1", "childrenIds": [], "role": "assistant", "model": "m1", "timestamp": 1700000001,
               "content": '<details type="reasoning" done="true" duration="1"><summary>Thought</summary>&gt; think</details>\nHello'},
        "a2": {"id": "a2", "parentId": "u1", "childrenIds": [], "role": "assistant", "content": "<think>hm</think>Hi!", "timestamp": 1700000002},
    }
    doc = [{"id": "c", "title": "T", "chat": {"history": {"messages": m, "currentId": "a1"}}}]
    imp(store, write(tmp_path, "o.json", doc))
    main = msgs(store, "open-webui/c")
    assert isinstance(main[-1].parts[0], ReasoningPart) and main[-1].parts[0].text == "think" and main[-1].parts[1].text == "Hello"
    alt = msgs(store, "open-webui/c-alt-1")
    assert alt[-1].parts[0].text == "hm" and alt[-1].parts[1].text == "Hi!"


@needs_fixtures
def test_librechat_fixture_branches(store):
    imp(store, fx("librechat/librechat-tree.json"))
    refs = store.refs.read_all()
    base = "librechat/4a86c40e-e627-4454-b158-889680e23ad3"
    assert set(refs) == {base, f"{base}-alt-1", f"{base}-alt-2"}
    lens = sorted(len(msgs(store, n)) for n in refs)
    assert lens == [4, 4, 6]
    assert all(msgs(store, n)[0].parts[0].text.startswith("How do I use source venv") for n in refs)


# -- llm ------------------------------------------------------------------------------------


@needs_fixtures
def test_llm_logs_db_both_generations(store):
    rep = imp(store, fx("llm/sample-logs.db"))
    assert rep.failures == []
    refs = store.refs.read_all()
    assert len([n for n in refs if n.startswith("llm/")]) == 13  # 9 threads + 4 legacy conversations
    # b2 ids are aliases; a turn keeps model, tokens, time
    tip = api.rev_parse(store, "llm:b2:80b11b925010c2db677259dfb0042bd4")
    assert tip == refs["llm/01m8nd8gmsyryx7rz68sn4n5ry"]
    e = convgit.log(store, tip)[0]
    t = store.objects.read(e.turn["turn"])
    assert t.model == "echo" and t.usage["input_tokens"] == 17 and t.duration_ms == 0
    # the legacy conversation continued under llm 0.36 is not imported twice
    assert "llm/01m8nd8gmsyryx7rz68sn4n5ry" in refs and len(msgs(store, tip)) == 7
    # tool calls and reasoning
    tools = msgs(store, refs["llm/01m8nd8sfng4er67mj58sq7y4a"])
    assert [m.role for m in tools] == ["user", "assistant", "tool", "assistant"]
    assert tools[1].parts[1].name == "llm_version" and tools[2].parts[0].output == "0.36"
    think = msgs(store, refs["llm/01m8nd8t36q1g62x1twq8xbtr8"])[-1]
    assert isinstance(think.parts[0], ReasoningPart)
    # fork shares its prefix
    fork = msgs(store, refs["llm/01m8nd8txc79txhstxm4g8rbje"])
    assert fork[:3] == msgs(store, refs["llm/01m8nd8nmtyjbf6h3as977915h"])[:3]
    assert imp(store, fx("llm/sample-logs.db")).new_objects == 0


@needs_fixtures
def test_llm_altered_hash_is_rejected(store, tmp_path):
    db = tmp_path / "logs.db"
    db.write_bytes(fx("llm/sample-logs.db").read_bytes())
    c = sqlite3.connect(db)
    c.execute("UPDATE parts SET text='tampered' WHERE id=3")
    c.commit()
    c.close()
    rep = imp(store, db)
    bad = [x for x in rep.conversations if x.error_code]
    assert bad and all(x.error_code == "hash_mismatch" for x in bad)
    assert any(x.status == "imported" for x in rep.conversations)


# -- API and dataset shapes -------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("rel,roles,kinds", [
    ("anthropic/vercel-ai-thinking-text.response.json", ["assistant"], [ReasoningPart, TextPart]),
    ("openai/vercel-ai-deepseek-toolcall-reasoning_content.response.json", ["assistant"], [ReasoningPart, ToolCallPart]),
    ("openai/vercel-ai-responses-reasoning.response.json", ["assistant"], [ReasoningPart, TextPart]),
    ("gemini/vercel-ai-google-reasoning.response.json", ["assistant"], [TextPart]),
    ("gemini/vercel-ai-google-tool-call.response.json", ["assistant"], [ToolCallPart]),
    ("gemini/aistudio-chunkedprompt.json", ["user", "assistant"], [ReasoningPart, TextPart]),
    ("sharegpt/axolotl-conversation.json", None, [TextPart]),
])
def test_api_fixtures(store, rel, roles, kinds):
    rep = imp(store, fx(rel))
    assert rep.counts()["imported"] == 1, rep.to_json()
    (name,) = store.refs.read_all()
    ms = msgs(store, name)
    if roles:
        assert [m.role for m in ms] == roles
    assert [type(p) for p in ms[-1].parts][: len(kinds)] == kinds


@needs_fixtures
def test_replay_tokens_kept(store):
    imp(store, fx("anthropic/vercel-ai-thinking-text.response.json"), fx("gemini/vercel-ai-google-tool-call.response.json"),
        fx("openai/vercel-ai-responses-reasoning.response.json"))
    parts = [p for n in store.refs.read_all() for m in msgs(store, n) for p in m.parts]
    assert any((p.meta or {}).get("signature") for p in parts if isinstance(p, ReasoningPart))
    assert any((p.meta or {}).get("thoughtSignature") for p in parts if isinstance(p, ToolCallPart))
    assert any((p.meta or {}).get("encrypted_content") for p in parts if isinstance(p, ReasoningPart))


@needs_fixtures
def test_jsonl_and_sharegpt_datasets(store):
    rep = imp(store, fx("openai/cookbook-toy_chat_fine_tuning.jsonl"), fx("sharegpt/llamafactory-mllm-demo.json"),
              fx("sharegpt/axolotl-conversation-missingturns.json"))
    assert rep.failures == [] and rep.counts()["imported"] == 5 + 6 + 1
    # shared system prompts dedupe into one message
    roots = [msgs(store, n)[0] for n in store.refs.read_all() if n.startswith("native/")]
    assert len(roots) == 5 and len({codec.encode(m) for m in roots}) == 2  # the shared system prompt is one message
    mm = [m for n in store.refs.read_all() if n.startswith("messages/") for m in msgs(store, n)]
    assert any(isinstance(p, AttachmentPart) and p.url == "mllm_demo_data/1.jpg" for m in mm for p in m.parts)


def test_sharegpt_tool_calls_and_transcript(store, tmp_path):
    sg = {"conversations": [{"from": "human", "value": "weather?"},
                            {"from": "function_call", "value": json.dumps({"name": "w", "arguments": {"c": "P"}})},
                            {"from": "observation", "value": "rain"}, {"from": "gpt", "value": "Rain."}]}
    imp(store, write(tmp_path, "s.json", sg))
    (name,) = store.refs.read_all()
    ms = msgs(store, name)
    assert [m.role for m in ms] == ["user", "assistant", "tool", "assistant"]
    assert ms[1].parts[0].name == "w" and ms[2].parts[0].output == "rain"
    t = tmp_path / "t.txt"
    t.write_text("User: hi\nthere\nAssistant: hello\n")
    assert imp(store, t).failures[0].error_code == "invalid_input"  # never guessed without --format
    rep = imp(store, t, fmt="transcript")
    assert rep.counts()["imported"] == 1
    t.write_text("User: hi\n  Assistant: ambiguous\n")
    assert imp(store, t, fmt="transcript").failures[0].error_code == "schema_validation_failed"


def test_commit_accepts_api_shapes(store):
    r = convgit.commit(store, {"model": "claude", "system": "be brief", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "2+2"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "calc", "input": {"e": "2+2"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "4"}]}]})
    ms = msgs(store, r.tip)
    assert [m.role for m in ms] == ["system", "user", "assistant", "tool"]
    r2 = convgit.commit(store, {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                "systemInstruction": {"parts": [{"text": "sys"}]}})
    assert [m.role for m in msgs(store, r2.tip)] == ["system", "user"]
    with pytest.raises(convgit.errors.SchemaValidationFailed):
        convgit.commit(store, {"mapping": {}, "current_node": None, "title": "x"})


# -- export round trip -------------------------------------------------------------------------


def test_native_export_round_trip_same_ids(store, tmp_path):
    imp(store, write(tmp_path, "c.json", [chatgpt_conv()]), write(tmp_path, "t.json", linear_claude(["a" * 40000, "b"])))
    other = fast_repo(tmp_path / "other")
    for name, tip in store.refs.read_all().items():
        p = tmp_path / "x.json"
        p.write_text(api.export(store, [name], fmt="native"))
        rep = imp(other, p)
        assert rep.failures == [], rep.to_json()
        assert tip in {t["tip"] for c in rep.conversations for t in c.threads}
    out = tmp_path / "all.jsonl"
    out.write_text(api.export(store, sorted(store.refs.read_all()), fmt="jsonl"))
    third = fast_repo(tmp_path / "third")
    imp(third, out)
    assert set(third.refs.read_all().values()) == set(store.refs.read_all().values())


def test_export_formats(store, tmp_path):
    imp(store, write(tmp_path, "c.json", [chatgpt_conv()]))
    oa = json.loads(api.export(store, ["chatgpt/conv-1"], fmt="openai"))
    assert [m["role"] for m in oa["messages"]] == ["user", "assistant", "assistant", "assistant", "tool", "assistant"]
    assert oa["messages"][3]["tool_calls"][0]["function"]["name"] == "python"
    an = json.loads(api.export(store, ["chatgpt/conv-1"], fmt="anthropic"))
    assert an["messages"][0]["role"] == "user" and all(m["role"] in ("user", "assistant") for m in an["messages"])
    md = api.export(store, ["chatgpt/conv-1"], fmt="markdown")
    assert "plot sin(x)" in md and "**tool call** `python`" in md
    # an OpenAI export commits back (replayable)
    assert convgit.commit(store, oa).status in ("created", "appended", "deduplicated")


def test_dry_run_writes_nothing(store, tmp_path):
    state = tree_state(store)
    rep = imp(store, write(tmp_path, "c.json", [chatgpt_conv()]), dry_run=True)
    assert rep.counts()["imported"] == 1 and tree_state(store) == state


def test_aliases_survive_reindex(store, tmp_path):
    imp(store, write(tmp_path, "c.json", [chatgpt_conv()]))
    a = api.rev_parse(store, "chatgpt:u1")
    store.index.rebuild()
    assert api.rev_parse(store, "chatgpt:u1") == a
    with pytest.raises(convgit.errors.NotFound):
        api.rev_parse(store, "chatgpt:nope")


def test_payload_claiming_a_wrong_id_is_rejected(store, tmp_path):
    doc = {"messages": [{"role": "user", "content": "x", "id": "ab" * 32}]}
    rep = imp(store, write(tmp_path, "n.json", doc))
    assert rep.failures[0].error_code == "hash_mismatch" and store.refs.read_all() == {}


def test_one_bad_conversation_among_good_ones(store, tmp_path):
    good = chatgpt_conv("g1")
    bad = chatgpt_conv("b1")
    bad["mapping"]["u1"]["message"]["author"]["role"] = "wizard"
    raw = "[" + ",".join([json.dumps(good), json.dumps(bad), '{"mapping": {"x": NaN}}', json.dumps(chatgpt_conv("g2"))]) + "]"
    p = tmp_path / "mix.json"
    p.write_text(raw)
    rep = imp(store, p)
    assert [c.status for c in rep.conversations] == ["imported", "skipped", "skipped", "imported"]
    assert [c.error_code for c in rep.conversations][1:3] == ["schema_validation_failed", "invalid_input"]
    assert {n.split("-alt")[0] for n in store.refs.read_all()} == {"chatgpt/g1", "chatgpt/g2"}


def test_limits_from_config(tmp_path):
    from helpers.store import set_config

    r = set_config(fast_repo(tmp_path / "s"), "[core]\nfsync = false\n[limits]\nmax_messages = 3\n")
    rep = imp(r, write(tmp_path, "c.json", [chatgpt_conv()]))
    assert rep.failures[0].error_code == "payload_too_large" and r.refs.read_all() == {}
