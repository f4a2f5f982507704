"""Nothing an ingest path is given is lost (the ingest audit): each input is committed or
imported, then read back through ``export --format native`` (messages, their parts and meta,
and every turn the thread recorded), and every field given must be there, in the structured
parts or in the meta the format keeps. Each case here lost something before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import convgit
from helpers.cli import cli, env, ok, proj  # noqa: F401
from test_import import fx, needs_fixtures

NOW = 1_733_040_000_000


def _exported(repo) -> list[dict]:
    """Every thread of ``repo`` as its native export document."""
    return [json.loads(convgit.export(repo, [t], fmt="native")) for t in sorted(convgit.show_refs(repo))]


def _messages(repo) -> list[dict]:
    docs = _exported(repo)
    assert len(docs) == 1, [d["thread"] for d in docs]
    return docs[0]["messages"]


def _turn_metas(repo) -> list[dict]:
    return [t.get("meta") or {} for d in _exported(repo) for t in d.get("turns", [])]


def _turns(repo) -> list[dict]:
    return [t for d in _exported(repo) for t in d.get("turns", [])]


# -- the reported loss: a chat document with an Anthropic-style block was read as Anthropic ---


JSON_MD_EXAMPLE = {"messages": [
    {"role": "user", "name": "ana", "content": [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "high"}}]},
    {"role": "assistant", "reasoning_content": "Check the file size first.", "content": "",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "file_size", "arguments": "{\"name\":\"cat.jpg\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "file_size", "content": "48213 bytes"},
    {"role": "ai", "content": [
        {"type": "thinking", "thinking": "Answer briefly.", "signature": "EqQBCkYIBxgC"},
        {"type": "output_text", "text": "A grey cat on a sofa (a 48 kB JPEG)."}]},
]}


def test_the_json_md_example_is_stored_as_documented(repo):
    """docs/json.md §1.3's own example: its last message's ``thinking`` block made the whole
    document read as an Anthropic request, which has no place for ``tool_calls``,
    ``tool_call_id``, ``reasoning_content`` or ``name``: all four were dropped (the tool call
    message became an empty text)."""
    convgit.commit(repo, JSON_MD_EXAMPLE, now_ms=NOW)
    msgs = _messages(repo)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[0]["meta"] == {"name": "ana"}
    assert msgs[1]["parts"] == [
        {"type": "reasoning", "text": "Check the file size first.", "meta": {"source_type": "reasoning_content"}},
        {"type": "tool_call", "name": "file_size", "id": "call_1", "arguments": "{\"name\":\"cat.jpg\"}"}]
    assert msgs[2]["parts"] == [{"type": "tool_result", "tool_call_id": "call_1", "name": "file_size",
                                 "output": "48213 bytes"}]
    assert msgs[3]["parts"] == [
        {"type": "reasoning", "text": "Answer briefly.", "meta": {"signature": "EqQBCkYIBxgC", "source_type": "thinking"}},
        {"type": "text", "text": "A grey cat on a sofa (a 48 kB JPEG).", "meta": {"source_type": "output_text"}}]


@pytest.mark.parametrize("how", ["commit", "import"])
def test_list_content_with_a_thinking_block_keeps_tool_calls(repo, tmp_path, how):
    """LiteLLM's shape for a reasoning model: an assistant message whose content is a list
    holding a signed ``thinking`` block, with OpenAI ``tool_calls`` beside it."""
    doc = {"model": "claude-sonnet-4", "messages": [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "use the tool", "signature": "sig=="},
                                          {"type": "text", "text": "Checking."}],
         "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": "{\"c\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}]}
    if how == "commit":
        convgit.commit(repo, doc, now_ms=NOW)
    else:
        p = tmp_path / "in.json"
        p.write_text(json.dumps(doc))
        rep = convgit.import_paths(repo, [p], now_ms=NOW)
        assert [c.error_code for c in rep.conversations] == [None]
    msgs = _messages(repo)
    assert msgs[1]["parts"][2] == {"type": "tool_call", "name": "weather", "id": "toolu_1", "arguments": "{\"c\":\"Paris\"}"}
    assert msgs[1]["parts"][0]["meta"]["signature"] == "sig=="
    assert msgs[2]["parts"] == [{"type": "tool_result", "tool_call_id": "toolu_1", "output": "sunny"}]


def test_a_real_anthropic_request_is_still_read_as_anthropic(repo):
    """The detection change does not take Anthropic's own shape away: tool results in a user
    turn still become a tool message, a base64 image a blob."""
    doc = {"model": "claude-sonnet-4", "system": "be brief", "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}},
                                     {"type": "text", "text": "what is it?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9", "name": "look", "input": {"x": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "a dot"}]}]}
    convgit.commit(repo, doc, now_ms=NOW)
    msgs = _messages(repo)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[1]["parts"][0]["data_base64"] == "iVBORw0K"


# -- Anthropic: every key of a message, a block, the request and the response ------------------


def test_anthropic_keeps_unmapped_keys_of_messages_blocks_request_and_response(repo):
    doc = {
        "model": "claude-sonnet-4", "max_tokens": 1024, "stream": False, "container": "cntr_1",
        "mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "ex"}],
        "messages": [
            {"role": "user", "id": "msg_local_1", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://x.example/a.png"},
                 "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r",
                                          "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}],
        "response": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-20250514",
                     "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
                     "container": {"id": "cntr_1", "expires_at": "2025-01-01T00:00:00Z"},
                     "usage": {"input_tokens": 3, "output_tokens": 1}},
    }
    convgit.commit(repo, doc, now_ms=NOW)
    msgs = _messages(repo)
    user = msgs[0]
    assert user["meta"] == {"id": "msg_local_1"}
    assert user["parts"][0] == {"type": "attachment", "url": "https://x.example/a.png",
                                "meta": {"cache_control": {"type": "ephemeral"}}}
    assert user["parts"][1]["meta"] == {"cache_control": {"type": "ephemeral"}}
    assert msgs[2]["parts"] == [{"type": "tool_result", "tool_call_id": "toolu_1", "output": "r",
                                 "meta": {"cache_control": {"type": "ephemeral", "ttl": "1h"}}}]
    (call,) = [t for t in _turns(repo) if t["kind"] == "call"]
    assert call["options"] == {"max_tokens": 1024, "stream": False}
    assert call["meta"]["extra"] == {"container": "cntr_1", "mcp_servers": doc["mcp_servers"]}
    assert call["meta"]["container"] == doc["response"]["container"]
    assert call["meta"]["id"] == "msg_1" and call["meta"]["stop_reason"] == "end_turn"


# -- OpenAI chat: the request's and the response's other keys -----------------------------------


def test_chat_request_and_completion_keep_every_key(repo):
    resp = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o-2024-08-06",
            "system_fingerprint": "fp_1", "provider": "OpenAI", "prompt_filter_results": [{"prompt_index": 0}],
            "choices": [{"index": 0, "finish_reason": "stop", "native_finish_reason": "stop",
                         "logprobs": {"content": [{"token": "hi", "logprob": -0.1}]},
                         "message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
    doc = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], "response": resp,
           "temperature": 0.2, "metadata": {"run": "r1"}, "store": True, "prediction": {"type": "content", "content": "hi"},
           "x_trace": "abc"}
    convgit.commit(repo, doc, now_ms=NOW)
    (call,) = [t for t in _turns(repo) if t["kind"] == "call"]
    assert call["options"] == {"temperature": 0.2, "metadata": {"run": "r1"}, "store": True,
                               "prediction": {"type": "content", "content": "hi"}}
    meta = call["meta"]
    assert meta["extra"] == {"x_trace": "abc"}
    assert meta["response_provider"] == "OpenAI"
    assert meta["response_prompt_filter_results"] == [{"prompt_index": 0}]
    assert meta["choice"] == {"native_finish_reason": "stop", "logprobs": resp["choices"][0]["logprobs"]}
    assert meta["response_id"] == "chatcmpl-1" and meta["finish_reason"] == "stop"


def test_option_keys_beside_explicit_options_are_kept(repo):
    convgit.commit(repo, {"model": "m", "options": {"temperature": 1}, "seed": 7,
                          "messages": [{"role": "user", "content": "q"}], "response": {"role": "assistant", "content": "a"}},
                   now_ms=NOW)
    (call,) = [t for t in _turns(repo) if t["kind"] == "call"]
    assert call["options"] == {"temperature": 1}
    assert call["meta"]["extra"] == {"seed": 7}


def test_legacy_function_call_and_function_role_are_told_apart_and_exported_back(repo, proj):
    """``function_call`` and role ``function`` (OpenAI's legacy shape) were stored exactly as a
    ``tool_calls`` entry without id and a tool message without ``tool_call_id``: the export
    could not give them back (a replay then fails)."""
    doc = {"messages": [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": None, "function_call": {"name": "now", "arguments": "{}"}},
        {"role": "function", "name": "now", "content": "12:00"},
        {"role": "assistant", "content": "noon"}]}
    convgit.commit(repo, doc, now_ms=NOW)
    msgs = _messages(repo)
    assert msgs[1]["parts"] == [{"type": "tool_call", "name": "now", "arguments": "{}",
                                 "meta": {"source_type": "function_call"}}]
    assert msgs[2]["meta"] == {"source_role": "function"}
    back = json.loads(convgit.export(repo, ["HEAD"], fmt="openai"))["messages"]
    assert back[1] == {"role": "assistant", "content": None, "function_call": {"name": "now", "arguments": "{}"}}
    assert back[2] == {"role": "function", "name": "now", "content": "12:00"}


def test_native_parts_keep_their_alternative_keys(repo):
    """A part carrying both of two alternative keys (a Responses ``function_call`` with ``id``
    and ``call_id``, a tool result with ``output`` and ``content``) kept only the first; a
    tool result's other keys had no place at all."""
    doc = {"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
                                           "arguments": "{}", "status": "completed"}]},
        {"role": "tool", "content": [{"type": "function_call_output", "call_id": "call_1", "output": "ok",
                                      "id": "fco_1"},
                                     {"type": "image_url", "image_url": {"url": "https://x.example/p.png"}}]},
        {"role": "assistant", "parts": [{"type": "text", "text": "done"}], "content": "done (as content)"}]}
    convgit.commit(repo, doc, now_ms=NOW)
    msgs = _messages(repo)
    assert msgs[1]["parts"] == [{"type": "tool_call", "name": "f", "id": "fc_1", "arguments": "{}",
                                 "meta": {"call_id": "call_1", "status": "completed", "source_type": "function_call"}}]
    assert msgs[2]["parts"][0] == {"type": "tool_result", "tool_call_id": "call_1", "output": "ok",
                                   "meta": {"id": "fco_1", "source_type": "function_call_output"}}
    assert msgs[3]["meta"] == {"content": "done (as content)"}


def test_reingesting_the_fixed_shapes_adds_nothing(repo):
    for doc in (JSON_MD_EXAMPLE, JSON_MD_EXAMPLE):
        res = convgit.commit(repo, doc, now_ms=NOW)
    assert res.new_objects == 0 and res.deduplicated


# -- OpenAI Responses --------------------------------------------------------------------------


def test_responses_object_keeps_every_key(repo, tmp_path):
    doc = {"id": "resp_1", "object": "response", "created_at": 1765591383, "status": "completed", "model": "o4-mini",
           "billing": {"payer": "developer"}, "service_tier": "default", "truncation": "disabled", "x_gateway": "gw1",
           "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add 2+2"}]}],
           "output": [
               {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "first"},
                                                               {"type": "summary_text", "text": "second"}]},
               {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{\"a\":2}",
                "status": "completed"}]}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    rep = convgit.import_paths(repo, [p], now_ms=NOW)
    assert [c.error_code for c in rep.conversations] == [None]
    (call,) = [t for t in _turns(repo) if t["kind"] == "call"]
    assert call["options"]["service_tier"] == "default" and call["options"]["truncation"] == "disabled"
    assert call["meta"]["call"]["extra"] == {"billing": {"payer": "developer"}, "x_gateway": "gw1"}  # (import: under "call")
    reasoning = _messages(repo)[1]["parts"][0]
    assert reasoning["text"] == "first\n\nsecond"
    assert reasoning["meta"]["summary"] == doc["output"][0]["summary"]  # two items: where one ends is kept


def test_responses_function_call_output_keeps_its_other_keys(repo):
    doc = {"model": "o4-mini", "input": [
        {"type": "message", "role": "user", "content": "go"},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "done", "id": "fco_1", "status": "completed"}]}
    convgit.commit(repo, doc, now_ms=NOW)
    assert _messages(repo)[2]["parts"] == [{"type": "tool_result", "tool_call_id": "call_1", "output": "done",
                                            "meta": {"id": "fco_1", "status": "completed"}}]


# -- coding-agent sessions ---------------------------------------------------------------------


def _jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    return path


def _import_one(repo, path, fmt):
    rep = convgit.import_paths(repo, [path], fmt=fmt, now_ms=NOW)
    assert rep.conversations and all(c.error_code is None for c in rep.conversations)


def _import_turn(repo) -> dict:
    """The conversation's import turn (the one listing the per-message turns)."""
    (t,) = [t for t in _turns(repo) if "turns" in (t.get("meta") or {})]
    return t


def _message_turn_metas(repo, msgs) -> list[dict]:
    """The meta of each message's own import turn (its provenance), in message order."""
    by_output = {t["output"]: t.get("meta") or {} for t in _turns(repo) if "turns" not in (t.get("meta") or {})}
    return [by_output.get(m["id"], {}) for m in msgs]


def test_claude_code_keeps_every_line_key_block_key_and_the_lines_that_are_not_messages(repo, tmp_path):
    sid = "9d2f0c1e-0000-4000-8000-000000000001"
    base = {"sessionId": sid, "cwd": "/home/ana/p", "version": "1.0.98", "gitBranch": "main", "userType": "external"}
    lines = [
        {"type": "summary", "summary": "Listing files", "leafUuid": "a1"},
        {**base, "type": "user", "uuid": "u1", "parentUuid": None, "timestamp": "2025-09-01T10:00:00.000Z",
         "message": {"role": "user", "content": "list the files"}, "thinkingMetadata": {"level": "high"}},
        {**base, "type": "assistant", "uuid": "a0", "parentUuid": "u1", "timestamp": "2025-09-01T10:00:01.000Z",
         "requestId": "req_1", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4",
                                          "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                                       "input": {"command": "ls"}, "caller": "direct"}],
                                          "stop_reason": "tool_use", "stop_sequence": None,
                                          "container": {"id": "c1"}, "usage": {"input_tokens": 4, "output_tokens": 2}}},
        {**base, "type": "system", "uuid": "s1", "parentUuid": "a0", "timestamp": "2025-09-01T10:00:01.500Z",
         "subtype": "hook", "content": "PreToolUse hook ran", "level": "info"},
        {**base, "type": "user", "uuid": "r1", "parentUuid": "s1", "timestamp": "2025-09-01T10:00:02.000Z",
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                  "content": [{"type": "text", "text": "a.py"}, {"type": "text", "text": "b.py"}]}]},
         "toolUseResult": {"stdout": "a.py\nb.py", "stderr": "", "interrupted": False}},
        {**base, "type": "assistant", "uuid": "a1", "parentUuid": "r1", "timestamp": "2025-09-01T10:00:03.000Z",
         "message": {"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4",
                     "content": [{"type": "text", "text": "Two files.", "citations": [{"type": "char_location", "cited_text": "a.py"}]}]}},
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {"trackedFileBackups": {}}, "isSnapshotUpdate": False},
    ]
    _import_one(repo, _jsonl(tmp_path / f"{sid}.jsonl", lines), "claude-code")
    msgs = _messages(repo)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[1]["parts"][0]["meta"] == {"caller": "direct"}
    assert msgs[2]["parts"][0]["output"] == "a.py\nb.py"
    assert msgs[2]["parts"][0]["meta"] == {"content": lines[4]["message"]["content"][0]["content"]}
    assert msgs[3]["parts"][0]["meta"] == {"citations": [{"type": "char_location", "cited_text": "a.py"}]}
    metas = _message_turn_metas(repo, msgs)
    assert metas[0]["thinkingMetadata"] == {"level": "high"}
    assert metas[1]["message"] == {"container": {"id": "c1"}}
    assert metas[2]["toolUseResult"] == lines[4]["toolUseResult"]
    assert metas[2]["parentUuid"] == "s1"  # re-parented past the system line: where it hung is kept
    other = _import_turn(repo)["meta"]["conversation"]["other_lines"]
    assert [ln.get("type") for ln in other] == ["summary", "system", "file-history-snapshot"]
    assert other[1] == lines[3]


def test_codex_keeps_item_keys_images_raw_arguments_outputs_and_other_lines(repo, tmp_path):
    sid = "0199a1b2-0000-7000-8000-000000000002"
    lines = [
        {"timestamp": "2025-09-14T11:00:00.000Z", "type": "session_meta",
         "payload": {"id": sid, "cwd": "/p", "originator": "codex_cli_rs", "cli_version": "0.36.0",
                     "instructions": "You are Codex.", "source": "cli", "model_provider": "openai"}},
        {"timestamp": "2025-09-14T11:00:01.000Z", "type": "turn_context",
         "payload": {"cwd": "/p", "approval_policy": "on-request", "model": "gpt-5-codex", "effort": "high"}},
        {"timestamp": "2025-09-14T11:00:01.000Z", "type": "response_item",
         "payload": {"type": "message", "role": "user", "id": "msg_u1",
                     "content": [{"type": "input_text", "text": "what is this?"},
                                 {"type": "input_image", "image_url": "https://img.example/x.png"}]}},
        {"timestamp": "2025-09-14T11:00:02.000Z", "type": "response_item",
         "payload": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look"}],
                     "content": [{"type": "reasoning_text", "text": "raw thought"}], "encrypted_content": "gAAA"}},
        {"timestamp": "2025-09-14T11:00:03.000Z", "type": "response_item",
         "payload": {"type": "function_call", "id": "fc_1", "name": "shell", "call_id": "call_1",
                     "arguments": "{\"command\": [\"ls\"]}", "status": "completed"}},
        {"timestamp": "2025-09-14T11:00:04.000Z", "type": "response_item",
         "payload": {"type": "function_call_output", "call_id": "call_1",
                     "output": {"content": "x.png", "success": True}}},
        {"timestamp": "2025-09-14T11:00:04.500Z", "type": "event_msg",
         "payload": {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 10, "output_tokens": 5}}}},
        {"timestamp": "2025-09-14T11:00:04.600Z", "type": "response_item",
         "payload": {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "png"}}},
        {"timestamp": "2025-09-14T11:00:05.000Z", "type": "response_item",
         "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "An image."}]}},
        {"timestamp": "2025-09-14T11:00:05.100Z", "type": "event_msg",
         "payload": {"type": "agent_message", "message": "An image."}},
    ]
    _import_one(repo, _jsonl(tmp_path / f"rollout-2025-09-14T11-00-00-{sid}.jsonl", lines), "codex")
    msgs = _messages(repo)
    assert msgs[0]["parts"][1] == {"type": "attachment", "url": "https://img.example/x.png",
                                   "meta": {"source_type": "input_image"}}
    assert msgs[1]["parts"][0]["meta"] == {"encrypted_content": "gAAA", "content": lines[3]["payload"]["content"]}
    assert msgs[2]["parts"][0]["arguments"] == {"command": ["ls"]}
    assert msgs[2]["parts"][0]["meta"] == {"arguments": "{\"command\": [\"ls\"]}"}  # not the compact encoding: kept
    assert msgs[3]["parts"][0]["output"] == "x.png" and msgs[3]["parts"][0]["meta"] == {"output": {"success": True}}
    metas = _message_turn_metas(repo, msgs)
    assert metas[0]["id"] == "msg_u1"
    assert metas[2]["id"] == "fc_1" and metas[2]["status"] == "completed"
    conv = _import_turn(repo)["meta"]["conversation"]
    kinds = [ln.get("type") for ln in conv["other_lines"]]
    assert kinds == ["session_meta", "turn_context", "event_msg", "response_item"]  # the agent_message echo is not kept twice
    assert conv["other_lines"][0]["payload"] == {"instructions": "You are Codex.", "source": "cli", "model_provider": "openai"}
    assert conv["other_lines"][3]["payload"]["type"] == "web_search_call"


# -- Open WebUI, LibreChat, SillyTavern --------------------------------------------------------


def _import_doc(repo, tmp_path, doc, fmt="auto", name="in.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    _import_one(repo, p, fmt)


def test_open_webui_keeps_output_item_content_files_and_unmapped_values(repo, tmp_path):
    out_text = {"type": "output_text", "text": "See [1].", "annotations": [{"type": "url_citation", "url": "https://e.x"}]}
    chat = {"id": "owui-1", "title": "T", "chat": {"history": {"currentId": "a1", "messages": {
        "u1": {"id": "u1", "parentId": None, "role": "user", "content": "find it", "timestamp": "yesterday",
               "files": [{"type": "file", "id": "f1", "name": "a.txt", "url": "/api/v1/files/f1"}, "legacy.txt"]},
        "a1": {"id": "a1", "parentId": "u1", "role": "assistant", "content": "See [1].", "timestamp": 1744577557,
               "model": {"id": "gpt-4o"},
               "output": [{"type": "reasoning", "id": "r1", "content": [{"type": "reasoning_text", "text": "step 1"},
                                                                          {"type": "reasoning_text", "text": "step 2"}]},
                          {"type": "message", "id": "m1", "role": "assistant", "content": [out_text]}]}}}}}
    _import_doc(repo, tmp_path, chat)
    msgs = _messages(repo)
    assert msgs[0]["parts"][2] == {"type": "opaque", "data": "legacy.txt", "source": "open-webui-file"}
    assert msgs[1]["parts"][0]["meta"]["content"] == chat["chat"]["history"]["messages"]["a1"]["output"][0]["content"]
    assert msgs[1]["parts"][1]["meta"]["content"] == [out_text]
    metas = _message_turn_metas(repo, msgs)
    assert metas[0]["timestamp"] == "yesterday" and metas[1]["model"] == {"id": "gpt-4o"}


def test_librechat_keeps_part_keys_text_beside_content_and_files(repo, tmp_path):
    doc = {"conversationId": "lc-1", "title": "T", "messages": [
        {"messageId": "m1", "parentMessageId": "00000000-0000-0000-0000-000000000000", "isCreatedByUser": True,
         "text": "hi", "createdAt": "2024-05-01T16:35:11.530Z", "files": ["note.txt"]},
        {"messageId": "m2", "parentMessageId": "m1", "isCreatedByUser": False, "text": "summary text",
         "createdAt": "2024-05-01T16:35:12.604Z", "model": "gpt-4o",
         "content": [{"type": "text", "text": "hello", "tool_call_ids": ["t1"]},
                     {"type": "tool_call", "tool_call": {"id": "t1", "name": "search", "args": "{}"}, "progress": 1}]}]}
    _import_doc(repo, tmp_path, doc)
    msgs = _messages(repo)
    assert msgs[0]["parts"][1] == {"type": "opaque", "data": "note.txt", "source": "librechat-file"}
    assert msgs[1]["parts"][0]["meta"] == {"tool_call_ids": ["t1"]}
    assert msgs[1]["parts"][1]["meta"] == {"part": {"progress": 1}}
    assert _message_turn_metas(repo, msgs)[1]["text"] == "summary text"


def test_sillytavern_keeps_the_chosen_swipe_swipe_info_and_an_unread_date(repo, tmp_path):
    lines = [{"user_name": "You", "character_name": "Sera", "create_date": "2024-05-12@17h32m10s", "chat_metadata": {}},
             {"name": "You", "is_user": True, "send_date": "sometime", "mes": "hi"},
             {"name": "Sera", "is_user": False, "send_date": "May 12, 2024 5:32pm", "mes": "hello", "swipe_id": 1,
              "swipes": ["hey", "hello"], "swipe_info": [{"send_date": "May 12, 2024 5:31pm", "gen_started": "t0"},
                                                         {"send_date": "May 12, 2024 5:32pm", "gen_started": "t1"}]}]
    _import_doc(repo, tmp_path, "".join(json.dumps(x) + "\n" for x in lines), fmt="sillytavern", name="chat.jsonl")
    main = json.loads(convgit.export(repo, [next(t for t in convgit.show_refs(repo) if "-alt-" not in t)], fmt="native"))
    by_output = {t["output"]: t.get("meta") or {} for t in main["turns"] if "turns" not in (t.get("meta") or {})}
    metas = [by_output[m["id"]] for m in main["messages"]]
    assert metas[0]["send_date"] == "sometime"
    assert metas[1]["swipe_id"] == 1 and metas[1]["swipe_info"] == lines[2]["swipe_info"]


# -- llm's logs.db -----------------------------------------------------------------------------

_LEGACY_DDL = """
CREATE TABLE conversations (id TEXT PRIMARY KEY, name TEXT, model TEXT);
CREATE TABLE schemas (id TEXT PRIMARY KEY, content TEXT);
CREATE TABLE responses (id TEXT PRIMARY KEY, model TEXT, prompt TEXT, system TEXT, prompt_json TEXT,
  options_json TEXT, response TEXT, response_json TEXT, conversation_id TEXT, duration_ms INTEGER,
  datetime_utc TEXT, input_tokens INTEGER, output_tokens INTEGER, token_details TEXT, schema_id TEXT,
  resolved_model TEXT, reasoning TEXT);
CREATE TABLE tools (id INTEGER PRIMARY KEY, hash TEXT, name TEXT, description TEXT, input_schema TEXT, plugin TEXT);
CREATE TABLE tool_responses (tool_id INTEGER, response_id TEXT);
CREATE TABLE tool_calls (id INTEGER PRIMARY KEY, response_id TEXT, tool_id INTEGER, name TEXT, arguments TEXT,
  tool_call_id TEXT);
CREATE TABLE tool_results (id INTEGER PRIMARY KEY, response_id TEXT, tool_id INTEGER, name TEXT, output TEXT,
  tool_call_id TEXT, instance_id INTEGER, exception TEXT);
"""


def test_llm_legacy_db_keeps_exceptions_raw_arguments_tools_schema_prompt_json_and_the_conversation(repo, tmp_path):
    import sqlite3

    path = tmp_path / "logs.db"
    db = sqlite3.connect(path)
    db.executescript(_LEGACY_DDL)
    db.execute("INSERT INTO conversations VALUES ('c1', 'Weather chat', 'gpt-4o')")
    db.execute("INSERT INTO schemas VALUES ('s1', '{\"type\":\"object\"}')")
    db.execute("INSERT INTO tools VALUES (1, 'h1', 'weather', 'The weather', '{\"type\": \"object\"}', 'my_plugin')")
    for rid, prompt, resp in (("r1", "weather?", ""), ("r2", "", "It fails.")):
        db.execute("INSERT INTO responses (id, model, prompt, response, conversation_id, datetime_utc, prompt_json, "
                   "schema_id) VALUES (?, 'gpt-4o', ?, ?, 'c1', '2025-01-01T10:00:00', ?, ?)",
                   (rid, prompt, resp, json.dumps({"messages": [{"role": "user", "content": prompt}]}), "s1"))
        db.execute("INSERT INTO tool_responses VALUES (1, ?)", (rid,))
    db.execute("INSERT INTO tool_calls VALUES (1, 'r1', 1, 'weather', '{\"city\":\"Paris\"}', 'call_1')")
    db.execute("INSERT INTO tool_results VALUES (1, 'r2', 1, 'weather', 'error', 'call_1', NULL, 'TimeoutError: slow')")
    db.commit()
    db.close()
    _import_one(repo, path, "llm")
    msgs = _messages(repo)
    call = next(p for m in msgs for p in m["parts"] if p["type"] == "tool_call")
    assert call["arguments"] == {"city": "Paris"} and call["meta"] == {"arguments": "{\"city\":\"Paris\"}"}
    result = next(p for m in msgs for p in m["parts"] if p["type"] == "tool_result")
    assert result["is_error"] is True and result["meta"] == {"exception": "TimeoutError: slow"}
    calls = [t for t in _turns(repo) if (t.get("meta") or {}).get("llm_id")]
    assert [t["meta"]["tools"][0]["name"] for t in calls] == ["weather", "weather"]
    assert all(t["meta"]["schema"] == "{\"type\":\"object\"}" and "prompt_json" in t["meta"] for t in calls)
    imp = _import_turn(repo)
    assert imp["meta"]["title"] == "Weather chat" and imp["meta"]["conversation"] == {"model": "gpt-4o"}


@needs_fixtures
def test_llm_db_turns_keep_their_tools_and_fragments(repo):
    _import_one(repo, fx("llm/sample-logs.db"), "llm")
    metas = [t.get("meta") or {} for t in _turns(repo)]
    assert any(t.get("name") == "llm_version" for m in metas for t in m.get("tools", []))
    assert any(f.get("source") == "novel.txt" and f.get("hash") for m in metas for f in m.get("fragments", []))


# -- Gemini, Claude.ai -------------------------------------------------------------------------


def test_gemini_keeps_part_request_and_response_keys(repo):
    doc = {"model": "gemini-2.5-pro", "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}],
           "tools": [{"functionDeclarations": [{"name": "f"}]}], "x_client": "c1",
           "contents": [{"role": "user", "parts": [{"text": "hi", "partMetadata": {"k": "v"}}]},
                        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}, "id": "fc1"}, "thoughtSignature": "sg"}]},
                        {"role": "user", "parts": [{"functionResponse": {"name": "f", "id": "fc1", "response": {"ok": 1},
                                                                         "willContinue": False}}]}],
           "response": {"candidates": [{"content": {"role": "model", "parts": [{"text": "done"}]}, "finishReason": "STOP"}],
                        "modelVersion": "gemini-2.5-pro-001", "responseId": "r1", "createTime": "2025-01-01T00:00:00Z",
                        "promptFeedback": {"blockReason": "NONE"}}}
    convgit.commit(repo, doc, now_ms=NOW)
    msgs = _messages(repo)
    assert msgs[0]["parts"][0]["meta"] == {"partMetadata": {"k": "v"}}
    assert msgs[1]["parts"][0]["meta"] == {"thoughtSignature": "sg"}
    assert msgs[2]["parts"][0]["meta"] == {"functionResponse": {"willContinue": False}}
    (call,) = [t for t in _turns(repo) if t["kind"] == "call"]
    assert call["options"]["safetySettings"] == doc["safetySettings"] and call["options"]["tools"] == doc["tools"]
    assert call["meta"]["extra"] == {"x_client": "c1"}
    assert call["meta"]["response_createTime"] == "2025-01-01T00:00:00Z"
    assert call["meta"]["response_promptFeedback"] == {"blockReason": "NONE"}


def test_claude_voice_note_keeps_its_other_keys(repo, tmp_path):
    conv = {"uuid": "cl-1", "name": "Chat", "chat_messages": [
        {"uuid": "m1", "sender": "human", "created_at": "2025-03-01T10:00:00Z",
         "content": [{"type": "voice_note", "transcript": "hello", "title": "Voice 1", "duration": 2.5}]},
        {"uuid": "m2", "sender": "assistant", "created_at": "2025-03-01T10:00:05Z", "text": "hi", "content": []}]}
    _import_doc(repo, tmp_path, [conv])
    assert _messages(repo)[0]["parts"] == [{"type": "text", "text": "hello", "meta": {
        "source_type": "voice_note", "title": "Voice 1", "duration": 2.5}}]


# -- Grok, chatbot-ui, datasets ----------------------------------------------------------------


def test_grok_keeps_every_response_and_conversation_key(repo, tmp_path):
    doc = {"conversations": [{"conversation": {"id": "g1", "title": "T", "create_time": "2025-01-01T00:00:00Z",
                                               "starred": True, "system_prompt_name": "default"},
                              "responses": [
        {"response": {"_id": "r1", "message": "hi", "sender": "human", "create_time": "2025-01-01T00:00:00Z",
                      "manual": False, "partial": False}},
        {"response": {"_id": "r2", "message": "hello", "sender": "ASSISTANT", "create_time": "2025-01-01T00:00:01Z",
                      "parent_response_id": "r1", "model": "grok-3", "thinking_trace": "said hi back",
                      "cited_web_search_results": [{"url": "https://e.x"}]}, "share_link": "s1"}]}]}
    _import_doc(repo, tmp_path, doc, fmt="grok")
    msgs = _messages(repo)
    metas = _message_turn_metas(repo, msgs)
    assert metas[1]["thinking_trace"] == "said hi back" and metas[1]["entry_share_link"] == "s1"
    assert metas[1]["cited_web_search_results"] == [{"url": "https://e.x"}]
    conv = _import_turn(repo)["meta"]["conversation"]
    assert conv["starred"] is True and conv["system_prompt_name"] == "default"


def test_chatbot_ui_keeps_the_model_object_and_message_keys(repo, tmp_path):
    doc = {"version": 4, "folders": [], "prompts": [], "history": [
        {"id": "c1", "name": "Chat", "model": {"id": "gpt-4", "name": "GPT-4", "maxLength": 24000, "tokenLimit": 8000},
         "prompt": "be kind", "temperature": 0.5, "folderId": "f1",
         "messages": [{"role": "user", "content": "hi", "x_edited": True}, {"role": "assistant", "content": "hey"}]}]}
    _import_doc(repo, tmp_path, doc, fmt="chatbot-ui")
    conv = _import_turn(repo)["meta"]["conversation"]
    assert conv["model"] == doc["history"][0]["model"] and conv["folderId"] == "f1"
    msgs = _messages(repo)
    assert _message_turn_metas(repo, msgs)[1] == {"x_edited": True}  # (msgs[0] is the prompt's system message)


def test_sharegpt_keeps_unplaced_media_and_function_call_keys(repo, tmp_path):
    rec = {"conversations": [{"from": "human", "value": "<image>what is it?"},
                             {"from": "function_call", "value": json.dumps({"name": "look", "arguments": {}, "id": "c9"})},
                             {"from": "observation", "value": "a cat"}, {"from": "gpt", "value": "A cat."}],
           "images": ["a.png", "b.png"]}
    _import_doc(repo, tmp_path, [rec], fmt="sharegpt")
    msgs = _messages(repo)
    assert msgs[1]["parts"][0]["meta"] == {"id": "c9"}
    assert _find_in(_turns(repo), "unplaced_media") == {"images": ["b.png"]}  # (in the import turn)


def test_llamafactory_messages_keep_tool_calls_beside_an_image_placeholder(repo, tmp_path):
    rec = {"messages": [{"role": "user", "content": "<image>what is it?"},
                        {"role": "assistant", "content": "<image>looks like this",
                         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "zoom", "arguments": "{}"}}]}],
           "images": ["a.png", "b.png"]}
    _import_doc(repo, tmp_path, [rec], fmt="messages")
    parts = _messages(repo)[1]["parts"]
    assert [p["type"] for p in parts] == ["attachment", "text", "tool_call"]


def _find_in(doc, key):
    if isinstance(doc, list):
        return next((got for got in (_find_in(v, key) for v in doc) if got is not None), None)
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        for v in doc.values():
            got = _find_in(v, key)
            if got is not None:
                return got
    return None
