"""What the proxy reads of a request body before relaying it: only whether it streams
(``proxy.wants_stream``: one key decoded, the history beside it skipped). Its answer must be
Python's own reading of the body (``json.loads(body).get("stream") is True``) for every body,
valid JSON or not, since the call's record says whether it streamed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("aiohttp")
from convgit.serve.proxy import wants_stream  # noqa: E402


def _python(body: bytes) -> bool:
    try:
        return json.loads(body).get("stream") is True
    except (ValueError, AttributeError):
        return False


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
                     max_leaves=12)


@given(st.dictionaries(st.sampled_from(["stream", "messages", "model", "Stream", "stream_options"]), _json, max_size=4),
       st.booleans())
def test_it_reads_stream_as_python_does_on_objects(doc, spaced):
    body = json.dumps(doc, separators=(", ", ": ") if spaced else (",", ":")).encode()
    assert wants_stream(body) == _python(body)


@given(_json)
def test_it_reads_stream_as_python_does_on_any_json(doc):
    body = json.dumps(doc).encode()
    assert wants_stream(body) == _python(body)


@pytest.mark.parametrize("body", [
    b'{"stream": true, "stream": false}', b'{"stream": false, "stream": true}', b'{"x": NaN, "stream": true}',
    b'{"stream": true', b"", b"\xff\xfe", b'"stream"', b'{"stream": "true"}', b'{"stream": 1}',
    b'{"messages": [' + b'{"role": "user", "content": "x"},' * 2000 + b'{}], "stream": true}',
])
def test_edge_bodies(body):
    assert wants_stream(body) == _python(body)


@given(_json)
def test_loads_json_gives_what_python_gives(doc):
    from convgit.serve.record import loads_json

    body = json.dumps(doc).encode()
    a, b = loads_json(body), json.loads(body)
    # (NaN != NaN: compare their JSON, which spells every float exactly)
    assert json.dumps(a) == json.dumps(b) and type(a) is type(b)


@pytest.mark.parametrize("body", [b'"\\ud800"', b"1e400", b"NaN", b'{"a": Infinity}', b"\xef\xbb\xbf{}", b'{"a":1,"a":2}',
                                  "{}".encode("utf-16"), b"123456789012345678901234567890"])
def test_loads_json_on_what_msgspec_refuses(body):
    from convgit.serve.record import loads_json

    assert json.dumps(loads_json(body)) == json.dumps(json.loads(body))


@pytest.mark.parametrize("body", [b"{", b"", b"\xff", b"[1,]"])
def test_loads_json_raises_pythons_error(body):
    from convgit.serve.record import loads_json

    with pytest.raises(ValueError) as got:
        loads_json(body)
    with pytest.raises(ValueError) as want:
        json.loads(body)
    assert str(got.value) == str(want.value)
