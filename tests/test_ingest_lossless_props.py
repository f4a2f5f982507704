"""Property tests of the ingest audit: generated OpenAI chat-completions and Anthropic
Messages documents (arbitrary part lists, tool calls and results, signed thinking, images,
unknown extra keys on messages, parts and the request) are committed, then read back
through ``export --format native``: every value given is found in the stored messages or the
call's turn, every unknown key where it belongs, and committing the same document again
writes nothing."""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import convgit
from helpers.store import fast_repo

NOW = 1_733_040_000_000

# -- values ------------------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_name = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_scalar = st.one_of(_text, st.integers(-10**6, 10**6), st.booleans())
_json = st.recursive(_scalar, lambda inner: st.one_of(
    st.lists(inner, min_size=1, max_size=3), st.dictionaries(_name, inner, min_size=1, max_size=3)), max_leaves=6)
# unknown keys: a prefix no format maps, so each must come back under its own name
_extra = st.dictionaries(_name.map(lambda s: "x_" + s), _json, max_size=2)


def _leaves(v, path=""):
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _leaves(x, f"{path}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _leaves(x, f"{path}[{i}]")
    elif not isinstance(v, bool) and v is not None:
        yield path, v


def _stored_values(docs) -> set:
    """Every scalar of the exported documents, JSON strings (tool arguments) opened too."""
    out = set()
    for _, v in _leaves(docs):
        out.add(v)
        if isinstance(v, str) and v[:1] in "[{":
            try:
                out |= _stored_values(json.loads(v))
            except ValueError:
                pass
    return out


def _find_key(docs, key: str, value) -> bool:
    """``key`` with ``value`` somewhere in ``docs`` (a meta object, a part, a turn; a
    completion's own keys are kept as ``response_<key>``)."""
    if isinstance(docs, dict):
        if any(k in docs and docs[k] == value for k in (key, f"response_{key}")):
            return True
        return any(_find_key(v, key, value) for v in docs.values())
    if isinstance(docs, list):
        return any(_find_key(v, key, value) for v in docs)
    return False


def _extras(v):
    """Every (key, value) of an ``x_`` key anywhere in the input."""
    if isinstance(v, dict):
        for k, x in v.items():
            if k.startswith("x_"):
                yield k, x
            else:
                yield from _extras(x)
    elif isinstance(v, list):
        for x in v:
            yield from _extras(x)


# Values a format maps to structure rather than keeps as given: part and call types, roles,
# a completion's ``"object": "chat.completion"`` and its first choice's ``"index": 0``.
_IMPLIED = (".type", ".role", ".object", ".index")


def _check_nothing_dropped(doc) -> None:
    with tempfile.TemporaryDirectory() as d:
        repo = fast_repo(Path(d) / "s")
        try:
            first = convgit.commit(repo, doc, now_ms=NOW)
            docs = [json.loads(convgit.export(repo, [t], fmt="native")) for t in sorted(convgit.show_refs(repo))]
            stored = _stored_values(docs)
            for path, v in _leaves(doc):
                if path.endswith(_IMPLIED):
                    continue
                assert v in stored, f"{path} = {v!r} was dropped"
            for k, v in _extras(doc):
                assert _find_key(docs, k, v), f"unknown key {k} = {v!r} was dropped"
            again = convgit.commit(repo, doc, now_ms=NOW + 1000)  # the same input again
            assert again.new_messages == 0 and again.tip == first.tip
            assert again.new_objects <= 1  # (the second call's own turn, if it is one)
        finally:
            repo.close()


# -- OpenAI chat completions -------------------------------------------------------------------

_chat_text_part = st.builds(lambda t, x: {"type": "text", "text": t, **x}, _text, _extra)
_chat_image = st.builds(lambda u, det: {"type": "image_url", "image_url": {"url": f"https://img.example/{u}.png", "detail": det}},
                        _name, st.sampled_from(["low", "high", "auto"]))
_chat_unknown_part = st.builds(lambda t, x: {"type": "x_kind_" + t, "payload": x}, _name, _json)
_chat_parts = st.lists(st.one_of(_chat_text_part, _chat_image, _chat_unknown_part, _text), min_size=1, max_size=4)
_tool_call = st.builds(
    lambda i, n, a, x: {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}, **x},
    _name, _name, st.dictionaries(_name, _scalar, max_size=3), _extra)


@st.composite
def _chat_message(draw):
    kind = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    m: dict = {"role": kind}
    if kind == "assistant":
        calls = draw(st.lists(_tool_call, max_size=2))
        m["content"] = draw(st.one_of(_text, _chat_parts, st.none() if calls else _text))
        if calls:
            m["tool_calls"] = calls
        if draw(st.booleans()):
            m["reasoning_content"] = draw(_text)
    elif kind == "tool":
        m["tool_call_id"] = "call_" + draw(_name)
        m["content"] = draw(st.one_of(_text, st.lists(_chat_text_part, min_size=1, max_size=2)))
        if draw(st.booleans()):
            m["name"] = draw(_name)
    else:
        m["content"] = draw(st.one_of(_text, _chat_parts))
        if draw(st.booleans()):
            m["name"] = draw(_name)
    m.update(draw(_extra))
    return m


@settings(max_examples=40)
@given(msgs=st.lists(_chat_message(), min_size=1, max_size=5), top=_extra, model=st.none() | _name,
       bare=st.booleans())
def test_chat_completions_documents_lose_nothing(msgs, top, model, bare):
    """A request object, or (``bare``) the bare list of messages."""
    doc = {"messages": msgs, **top}
    if model is not None:
        doc["model"] = model
    _check_nothing_dropped(msgs if bare else doc)


@settings(max_examples=20)
@given(msgs=st.lists(_chat_message(), min_size=1, max_size=3), answer=_chat_message(),
       resp_extra=_extra, choice_extra=_extra)
def test_chat_request_response_pairs_lose_nothing(msgs, answer, resp_extra, choice_extra):
    answer = {**answer, "role": "assistant"}
    answer.pop("tool_call_id", None)
    if answer.get("content") is None and not answer.get("tool_calls"):
        answer["content"] = "ok"
    resp = {"id": "chatcmpl-x", "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-x",
            "choices": [{"index": 0, "finish_reason": "stop", "message": answer, **choice_extra}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}, **resp_extra}
    _check_nothing_dropped({"model": "gpt-x", "messages": msgs, "response": resp})


# -- Anthropic Messages ------------------------------------------------------------------------

_cache = st.sampled_from([{}, {"cache_control": {"type": "ephemeral"}}])
_a_text = st.builds(lambda t, c, x: {"type": "text", "text": t, **c, **x}, _text, _cache, _extra)
_a_image = st.one_of(
    st.builds(lambda b, c: {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                        "data": base64.b64encode(b).decode()}, **c},
              st.binary(min_size=1, max_size=24), _cache),
    st.builds(lambda u, c: {"type": "image", "source": {"type": "url", "url": f"https://img.example/{u}.jpg"}, **c},
              _name, _cache))
_a_document = st.builds(lambda t: {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": t},
                                   "title": "doc"}, _text)
_a_thinking = st.one_of(
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, _text, _name),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, _name))
_a_tool_use = st.builds(lambda i, n, a, c: {"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": a, **c},
                        _name, _name, st.dictionaries(_name, _json, max_size=2), _cache)
_a_tool_result = st.builds(
    lambda i, out, err, c: {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": out,
                            **({"is_error": True} if err else {}), **c},
    _name, st.one_of(_text, st.lists(_a_text, min_size=1, max_size=2)), st.booleans(), _cache)


@st.composite
def _a_message(draw, role):
    if role == "user":
        blocks = draw(st.lists(st.one_of(_a_text, _a_image, _a_document, _a_tool_result), min_size=1, max_size=4))
    else:
        blocks = draw(st.lists(st.one_of(_a_text, _a_thinking, _a_tool_use), min_size=1, max_size=4))
    content = draw(_text) if draw(st.integers(0, 4)) == 0 else blocks
    return {"role": role, "content": content, **draw(_extra)}


@st.composite
def _a_conversation(draw):
    n = draw(st.integers(1, 4))
    return [draw(_a_message("user" if i % 2 == 0 else "assistant")) for i in range(n)]


@settings(max_examples=40)
@given(msgs=_a_conversation(), system=st.one_of(_text, st.lists(_a_text, min_size=1, max_size=2)),
       top=_extra, opts=st.fixed_dictionaries({}, optional={"max_tokens": st.integers(1, 4096),
                                                            "temperature": st.sampled_from([0, 1]),
                                                            "top_k": st.integers(1, 50)}))
def test_anthropic_requests_lose_nothing(msgs, system, top, opts):
    _check_nothing_dropped({"model": "claude-x", "system": system, "messages": msgs, **opts, **top})


@settings(max_examples=20)
@given(msgs=_a_conversation(), answer=_a_message("assistant"), resp_extra=_extra)
def test_anthropic_request_response_pairs_lose_nothing(msgs, answer, resp_extra):
    resp = {"id": "msg_x", "type": "message", "role": "assistant", "model": "claude-x-1",
            "content": answer["content"] if isinstance(answer["content"], list) else [{"type": "text", "text": answer["content"]}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 2}, **resp_extra}
    _check_nothing_dropped({"model": "claude-x", "system": "s", "messages": msgs, "response": resp})
