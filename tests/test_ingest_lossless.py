"""Nothing an ingest path is given is lost (the ingest audit): each input is committed or
imported, then read back through ``export --format native`` (messages, their parts and meta,
and every turn the thread recorded), and every field given must be there, in the structured
parts or in the meta the format keeps. Each case here lost something before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import convgit
from cli_helpers import cli, env, ok, proj  # noqa: F401

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
