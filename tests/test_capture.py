"""convgit.capture: the official SDKs' clients wrapped in-process, pointed at the fake
upstream (a real HTTP server on 127.0.0.1): calls answered as without the wrapper, and
recorded as the proxy records them (tests/test_serve.py)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

import convgit
from convgit.capture import capture, flush

sys.path.insert(0, str(Path(__file__).parent))
from helpers.serve import store, upstream  # noqa: E402,F401 (fixtures)
from test_serve import _conversation, _threads, _turns  # noqa: E402

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")


def test_openai_calls_are_answered_unchanged_and_logged(store, upstream):
    bare = openai.OpenAI(base_url=upstream.url + "/v1", api_key="sk-cap-SECRET", max_retries=0)
    client = capture(openai.OpenAI(base_url=upstream.url + "/v1", api_key="sk-cap-SECRET", max_retries=0), repo=store)
    msgs = [{"role": "user", "content": "hello cap"}]
    r = client.chat.completions.create(model="gpt-fake", messages=msgs)
    assert r.model_dump() == bare.chat.completions.create(model="gpt-fake", messages=msgs).model_dump()
    chunks = list(client.chat.completions.create(model="gpt-think-tool", messages=msgs, stream=True))
    assert [c.model_dump() for c in chunks] == [c.model_dump() for c in bare.chat.completions.create(
        model="gpt-think-tool", messages=msgs, stream=True)]
    msgs2 = msgs + [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "again"}]
    client.chat.completions.create(model="gpt-fake", messages=msgs2)
    first = client.responses.create(model="gpt-fake", input="one")
    client.responses.create(model="gpt-fake", input="two", previous_response_id=first.id)
    assert client.models.list().data[0].id == "fake-1"  # not logged
    flush()
    turns = _turns(store)
    assert len(turns) == 5 and {t.source for t in turns} == {"serve:openai-chat", "serve:openai-responses"}
    assert turns[1].meta["stream"] is True and turns[1].error is None
    chain = _conversation(store, turns[2].output)
    assert [t for _, t in chain] == ["hello cap", r.choices[0].message.content, "again",
                                     chain[-1][1]]  # the stateless continuation: one thread
    assert [t for role, t in _conversation(store, turns[-1].output) if role == "user"] == ["one", "two"]
    assert len(_threads(store)) == 3  # chat conversation, the tool-call stream's fork, the Responses chain
    for p in (store / ".convgit").rglob("*"):
        if p.is_file():
            assert b"sk-cap-SECRET" not in p.read_bytes()


def test_anthropic_async_and_a_stream_closed_early(store, upstream):
    async def run():
        client = capture(anthropic.AsyncAnthropic(base_url=upstream.url, api_key="k", max_retries=0), repo=store)
        m = await client.messages.create(model="claude-think", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
        events = []
        async for ev in await client.messages.create(model="claude-think", max_tokens=20, stream=True,
                                                     messages=[{"role": "user", "content": "hi"}]):
            events.append(ev.type)
        return m, events

    m, events = asyncio.run(run())
    assert events[0] == "message_start" and events[-1] == "message_stop"
    client = capture(anthropic.Anthropic(base_url=upstream.url, api_key="k", max_retries=0), repo=store)
    s = client.messages.create(model="slow", max_tokens=20, stream=True, messages=[{"role": "user", "content": "x"}])
    for i, _ in enumerate(s):
        if i == 5:
            break
    s.close()
    flush()
    t1, t2, t3 = _turns(store)
    assert t1.output == t2.output and t1.usage == t2.usage == {"input_tokens": 12, "output_tokens": 8}
    assert t3.error == "client_disconnected"


def test_errors_are_raised_as_before_and_recorded(store, upstream):
    client = capture(openai.OpenAI(base_url=upstream.url + "/v1", api_key="k", max_retries=0), repo=store)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="error-500", messages=[{"role": "user", "content": "x"}])
    flush()
    (t,) = _turns(store)
    assert t.error == "http_500" and t.meta["error_body"]["error"]["message"] == "the fake upstream failed"


def test_the_sdks_stream_helpers_are_logged_like_create(store, upstream):
    """``chat.completions.stream``, ``responses.stream`` and ``messages.stream`` (sync and
    async): the SDK's own helper events, unchanged, and the call stored as ``create`` stores
    it (the same message); a helper left early is recorded with what it got."""
    oc = capture(openai.OpenAI(base_url=upstream.url + "/v1", api_key="k", max_retries=0), repo=store)
    bare = openai.OpenAI(base_url=upstream.url + "/v1", api_key="k", max_retries=0)
    msgs = [{"role": "user", "content": "helper chat"}]
    with oc.chat.completions.stream(model="gpt-think-tool", messages=msgs) as s:
        kinds = [e.type for e in s]
        final = s.get_final_completion()
    with bare.chat.completions.stream(model="gpt-think-tool", messages=msgs) as s:
        assert [e.type for e in s] == kinds and s.get_final_completion().model_dump() == final.model_dump()
    oc.chat.completions.create(model="gpt-think-tool", messages=msgs)
    with oc.responses.stream(model="gpt-think", input="helper responses") as s:
        text = s.get_final_response().output_text
    assert text == bare.responses.create(model="gpt-think", input="helper responses").output_text
    oc.responses.create(model="gpt-think", input="helper responses")
    ac = capture(anthropic.Anthropic(base_url=upstream.url, api_key="k", max_retries=0), repo=store)
    amsgs = [{"role": "user", "content": "helper messages"}]
    with ac.messages.stream(model="claude-think", max_tokens=20, messages=amsgs) as s:
        m = s.get_final_message()
    assert m.content[1].text.startswith("echo helper messages")

    async def run():
        aac = capture(anthropic.AsyncAnthropic(base_url=upstream.url, api_key="k", max_retries=0), repo=store)
        async with aac.messages.stream(model="claude-think", max_tokens=20, messages=amsgs) as s:
            return await s.get_final_message()

    assert asyncio.run(run()).model_dump() == m.model_dump()
    with ac.messages.stream(model="slow", max_tokens=20, messages=[{"role": "user", "content": "early"}]) as s:
        for i, _ in enumerate(s):
            if i == 3:
                break
    flush()
    turns = _turns(store)
    assert [(t.source, t.meta["stream"], t.error) for t in turns] == [
        ("serve:openai-chat", True, None), ("serve:openai-chat", False, None),
        ("serve:openai-responses", True, None), ("serve:openai-responses", False, None),
        ("serve:anthropic", True, None), ("serve:anthropic", True, None),
        ("serve:anthropic", True, "client_disconnected")]
    assert turns[0].output == turns[1].output  # streamed by the helper == created whole
    assert turns[2].output == turns[3].output
    assert turns[4].output == turns[5].output
    assert _conversation(store, turns[4].output)[-1][1] == m.content[1].text
    assert [t for _, t in _conversation(store, turns[6].output)][0] == "early"


def test_the_thread_header_names_the_thread_in_process_too(store, upstream):
    """``extra_headers={"X-Convgit-Thread": NAME}`` names the thread as with the proxy; the
    header is convgit's (not sent upstream); a bad name raises before anything is sent."""
    from convgit.errors import InvalidRefName

    client = capture(openai.OpenAI(base_url=upstream.url + "/v1", api_key="k", max_retries=0), repo=store)
    msgs = [{"role": "user", "content": "named in process"}]
    r = client.chat.completions.create(model="gpt-fake", messages=msgs, extra_headers={"X-Convgit-Thread": "proj"})
    more = msgs + [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "streamed"}]
    list(client.chat.completions.create(model="gpt-fake", messages=more, stream=True,
                                        extra_headers={"x-convgit-thread": "proj", "x-other": "1"}))
    sent = [h for path, h, b in upstream.requests if b"named in process" in b]
    assert len(sent) == 2 and not [k for h in sent for k in h if k.lower().startswith("x-convgit")]
    assert sent[1].get("x-other") == "1"  # the caller's other headers go on as they were
    with pytest.raises(InvalidRefName):
        client.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": "refused in process"}],
                                       extra_headers={"X-Convgit-Thread": "bad..name"})
    assert not [b for _, _, b in upstream.requests if b"refused in process" in b]
    flush()
    assert [t for _, t in _conversation(store, "proj")][::2] == ["named in process", "streamed"]
    assert list(_threads(store)) == ["proj"]
