"""The hashing contract (DESIGN §3): canonical bytes, golden vectors, what cannot be encoded.

The golden vectors are pinned by syrupy snapshots (tests/__snapshots__/test_codec.ambr).
A diff there means every existing store would get new ids: it is a format change, not a fix.
"""

from __future__ import annotations

import math
import msgspec
import pytest
from blake3 import blake3
from hypothesis import given
from hypothesis import strategies as st

import convgit
from convgit import codec
from convgit.errors import ObjectCorrupt
from convgit.ingest import Draft, build_chain
from convgit.objects import (
    TEXT_BLOB_THRESHOLD,
    AttachmentPart,
    Blob,
    Message,
    OpaquePart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Turn,
)

ROOT = "6fdad5468dc64de712bc4a4aa3d95af9ad35feb8dbce0f912ddb4426eb6c6422"  # any 64-hex id
TOOL = "0123456789abcdef" * 4


def _msg(*parts, role="user", parent=None, meta=None) -> Message:
    return Message(parent=parent, role=role, parts=tuple(parts), meta=meta)


# -- golden vectors -------------------------------------------------------------------------

GOLDEN: dict[str, object] = {
    # every object type
    "blob_empty": Blob(data=b""),
    "blob_bytes": Blob(data=bytes(range(256))),
    "blob_utf8": Blob(data="héllo wörld ✓".encode()),
    "message_root_text": _msg(TextPart(text="Hello")),
    "message_child_text": _msg(TextPart(text="Hi! How can I help?"), role="assistant", parent=ROOT),
    "message_no_parts": _msg(role="system"),
    "message_every_role": [_msg(TextPart(text=r), role=r) for r in ("system", "developer", "user", "assistant", "tool")],
    "turn_minimal": Turn(kind="append", thread="main", output=ROOT),
    "turn_call_full": Turn(
        kind="call",
        thread="work/chat-1",
        input=ROOT,
        output=TOOL,
        model="gpt-4o",
        resolved_model="gpt-4o-2024-08-06",
        options={"temperature": 0.5, "max_tokens": 256, "stop": ["\n\n"]},
        usage={"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42},
        started_at=1_700_000_000_123,
        duration_ms=850,
        error=None,
        source="openai",
        upstream_thread_id="chatcmpl-abc",
        meta={"finish_reason": "stop"},
    ),
    "turn_fork": Turn(kind="fork", thread="main-fork-abc", input=ROOT, output=ROOT, started_at=0, forked_from="main"),
    "turn_error": Turn(kind="call", thread="t", output=ROOT, error="rate limited", started_at=1),
    "turn_new_thread_off_a_prefix": Turn(
        kind="append", thread="20231114-221320-abcdef", input=ROOT, output=TOOL, started_at=1_700_000_000_000,
        forked_from="main", forked_at=ROOT,
    ),
    # every part kind
    "part_text_with_meta": _msg(TextPart(text="x", meta={"source_type": "output_text"})),
    "part_reasoning": _msg(
        ReasoningPart(text="Let me think…", meta={"signature": "c2lnbmF0dXJl", "encrypted": None}), role="assistant"
    ),
    "part_reasoning_redacted": _msg(ReasoningPart(meta={"source_type": "redacted_thinking", "data": "EncR"}), role="assistant"),
    "part_tool_call_string_args": _msg(
        ToolCallPart(name="get_weather", id="call_1", arguments='{"city": "Paris"}'), role="assistant"
    ),
    "part_tool_call_object_args": _msg(
        ToolCallPart(name="search", arguments={"q": "convgit", "limit": 5, "filters": {"lang": "en", "after": None}}),
        role="assistant",
    ),
    "part_tool_result": _msg(ToolResultPart(tool_call_id="call_1", name="get_weather", output="22°C"), role="tool"),
    "part_tool_result_error_json": _msg(
        ToolResultPart(tool_call_id="call_2", output={"error": "timeout", "retry": True}, is_error=True), role="tool"
    ),
    "part_attachment_blob": _msg(
        TextPart(text="what is this?"),
        AttachmentPart(mime_type="image/png", name="cat.png", blob=TOOL, size=1234, meta={"detail": "low"}),
    ),
    "part_attachment_url": _msg(AttachmentPart(url="https://example.com/a.pdf", mime_type="application/pdf")),
    "part_opaque": _msg(OpaquePart(data={"type": "audio_ref", "id": "x", "n": [1, 2.5, True, None]}, source="part")),
    "part_opaque_none": _msg(OpaquePart()),
    # text is byte-exact
    "text_non_ascii": _msg(TextPart(text="Grüße aus Köln — 日本語のテキスト — Ελληνικά — עברית")),
    "text_emoji": _msg(TextPart(text="👋🏽 family: 👨‍👩‍👧‍👦 flag: 🇫🇷")),
    "text_nfc": _msg(TextPart(text="caf\u00e9")),
    "text_nfd": _msg(TextPart(text="cafe\u0301")),  # not normalised: another id than NFC
    "text_empty": _msg(TextPart(text="")),
    "text_whitespace": _msg(TextPart(text="  leading and trailing  \n\t\r\n")),
    "strings_empty_everywhere": _msg(
        ToolCallPart(name="f", id="", arguments=""), ToolResultPart(tool_call_id="", name="", output=""), role="assistant",
        meta={"": ""},
    ),
    # nested provider metadata: keys sorted at every level, whatever the insertion order
    "meta_nested": _msg(
        TextPart(text="x"),
        role="assistant",
        meta={
            "zeta": 1,
            "alpha": {"z": [3, {"b": 2, "a": 1}], "a": {"ü": True, "u": False, "U": None}},
            "Mid": -1,
            "emoji🎉": "✓",
            "float": 0.1,
            "big": 2**64 - 1,
            "neg": -(2**63),
        },
    ),
}


def _flatten(name: str, value):
    if isinstance(value, list):
        return [(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return [(name, value)]


GOLDEN_CASES = [c for name, v in GOLDEN.items() for c in _flatten(name, v)]


@pytest.mark.parametrize("name,obj", GOLDEN_CASES, ids=[c[0] for c in GOLDEN_CASES])
def test_golden_vector(name, obj, snapshot):
    oid, data = codec.encode_and_hash(obj)
    assert oid == blake3(data).hexdigest()
    assert codec.decode(data, oid) == obj
    assert codec.is_canonical(data, obj)
    assert {"type": codec.type_name(obj), "hex": data.hex(), "id": oid} == snapshot


def _mp_str(s: str) -> bytes:
    b = s.encode()
    assert len(b) < 32
    return bytes([0xA0 | len(b)]) + b


def test_canonical_form_by_hand():
    """msgpack written out byte by byte, without msgspec: a map with sorted keys, nil for a
    root's parent, defaults (meta, a part's blob) left out."""
    expected = (
        b"\x84"  # map of 4
        + _mp_str("parent") + b"\xc0"
        + _mp_str("parts") + b"\x91"  # array of 1
        + b"\x82" + _mp_str("text") + _mp_str("Hello") + _mp_str("type") + _mp_str("text")
        + _mp_str("role") + _mp_str("user")
        + _mp_str("type") + _mp_str("message")
    )
    oid, data = codec.encode_and_hash(GOLDEN["message_root_text"])
    assert data == expected
    assert oid == blake3(expected).hexdigest()


def test_nested_meta_keys_are_sorted_at_every_level():
    obj = GOLDEN["meta_nested"]
    raw = codec.decode_raw(codec.encode(obj))
    assert list(raw) == sorted(raw)

    def check(v):
        if isinstance(v, dict):
            assert list(v) == sorted(v)
            for x in v.values():
                check(x)
        elif isinstance(v, list):
            for x in v:
                check(x)

    check(raw)
    # reversed insertion order at every level: same bytes
    assert codec.encode(_msg(*obj.parts, role=obj.role, meta=_reverse_dicts(obj.meta))) == codec.encode(obj)


def test_nfc_and_nfd_are_different_objects():
    a, _ = codec.encode_and_hash(GOLDEN["text_nfc"])
    b, _ = codec.encode_and_hash(GOLDEN["text_nfd"])
    assert a != b


def test_default_fields_are_omitted_so_new_fields_never_change_old_ids():
    raw = codec.decode_raw(codec.encode(_msg(TextPart(text="x"))))
    assert raw == {"type": "message", "parent": None, "role": "user", "parts": [{"type": "text", "text": "x"}]}
    raw = codec.decode_raw(codec.encode(GOLDEN["turn_minimal"]))
    assert raw == {"type": "turn", "kind": "append", "thread": "main", "output": ROOT}


def _long_text_chain(text: str):
    return build_chain([Draft(role="user", parts=(TextPart(text=text),))])


def test_long_text_goes_to_a_blob(snapshot):
    text = "0123456789abcdef" * (TEXT_BLOB_THRESHOLD // 16) + "!"  # threshold + 1 bytes
    assert len(text.encode()) == TEXT_BLOB_THRESHOLD + 1
    chain = _long_text_chain(text)
    [(blob_id, blob_bytes)] = chain.blobs[0]
    blob = codec.decode(blob_bytes, blob_id)
    assert blob == Blob(data=text.encode())
    assert blake3(blob_bytes).hexdigest() == blob_id
    msg = chain.messages[0]
    assert msg.parts == (TextPart(text="", blob=blob_id),)
    assert {
        "blob_id": blob_id,
        "blob_len": len(blob_bytes),
        "blob_head_hex": blob_bytes[:24].hex(),
        "message_hex": chain.data[0].hex(),
        "message_id": chain.ids[0],
    } == snapshot


def test_blob_threshold_counts_utf8_bytes_not_characters():
    # exactly at the threshold: inline
    at = _long_text_chain("é" * (TEXT_BLOB_THRESHOLD // 2))
    assert at.blobs[0] == [] and at.messages[0].parts[0].text
    # one more byte: a blob, although far fewer characters than the threshold
    over = _long_text_chain("é" * (TEXT_BLOB_THRESHOLD // 2) + "x")
    assert len(over.blobs[0]) == 1
    assert over.messages[0].parts[0].text == ""
    # reasoning follows the same rule
    chain = build_chain([Draft(role="assistant", parts=(ReasoningPart(text="r" * (TEXT_BLOB_THRESHOLD + 1)),))])
    assert isinstance(chain.messages[0].parts[0], ReasoningPart) and chain.messages[0].parts[0].blob


def test_long_text_through_commit_is_stored_in_a_blob_and_read_back(repo):
    text = "line ✓\n" * (TEXT_BLOB_THRESHOLD // 4)
    r = convgit.commit(repo, {"messages": [{"role": "user", "content": text}]}, thread="long")
    msg = repo.objects.read(r.tip)
    [part] = msg.parts
    assert part.text == "" and part.blob
    assert repo.objects.read(part.blob) == Blob(data=text.encode())
    [entry] = convgit.log(repo, "long")
    assert entry.text == text
    assert entry.to_json(repo)["parts"][0]["text"] == text


# -- loose objects hash to their own names --------------------------------------------------


def test_loose_object_files_hash_to_their_own_path(repo):
    convgit.commit(
        repo,
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [
                    {"type": "text", "text": "see ✓"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ]},
                {"role": "assistant", "content": "x" * (TEXT_BLOB_THRESHOLD + 10)},
            ],
            "model": "m",
        },
    )
    objdir = repo.path / "objects"
    files = [p for p in objdir.rglob("*") if p.is_file()]
    assert len(files) >= 6  # 3 messages, 2 blobs, 1 turn
    kinds = set()
    for f in files:
        data = f.read_bytes()
        name = f.parent.name + f.name
        assert blake3(data).hexdigest() == name, f
        assert len(name) == 64 and name == name.lower()
        kinds.add(codec.type_name(codec.decode(data)))
    assert kinds == {"message", "blob", "turn"}


# -- what has no canonical form -------------------------------------------------------------


def _nested(depth: int):
    v: object = "x"
    for _ in range(depth):
        v = [v]
    return v


BAD_VALUES = {
    "nan": float("nan"),
    "inf": math.inf,
    "-inf": -math.inf,
    "nan_nested": {"a": [1, {"b": float("nan")}]},
    "int_key": {1: "x"},
    "none_key": {None: "x"},
    "bytes_key": {b"k": "x"},
    "tuple_key": {(1, 2): "x"},
    "nested_int_key": {"ok": {2: "x"}},
    "int_2**64": 2**64,
    "int_below_-2**63": -(2**63) - 1,
    "huge_int": 10**40,
    "lone_surrogate": "\ud800",
    "lone_surrogate_low": "a\udfffb",
    "lone_surrogate_key": {"\ud83d": 1},
    "too_deep": _nested(70),
}


@pytest.mark.parametrize("where", ["opaque_data", "message_meta", "tool_args", "turn_usage"])
@pytest.mark.parametrize("name", list(BAD_VALUES))
def test_encode_rejects_values_without_a_canonical_form(name, where):
    v = BAD_VALUES[name]
    if where == "opaque_data":
        obj = _msg(OpaquePart(data=v))
    elif where == "message_meta":
        obj = _msg(TextPart(text="x"), meta={"k": v})
    elif where == "tool_args":
        obj = _msg(ToolCallPart(name="f", arguments=v), role="assistant")
    else:
        obj = Turn(kind="call", thread="t", output=ROOT, usage={"u": v})
    with pytest.raises(codec.EncodeError):
        codec.encode(obj)
    with pytest.raises(codec.EncodeError):
        codec.encode_and_hash(obj)


@pytest.mark.parametrize("text", ["\ud800", "ok\udc00", "\udbff\udfff"])
def test_encode_rejects_lone_surrogates_in_text_fields(text):
    for obj in (
        _msg(TextPart(text=text)),
        _msg(ReasoningPart(text=text), role="assistant"),
        _msg(ToolCallPart(name=text), role="assistant"),
        Turn(kind="call", thread="t", output=ROOT, model=text),
    ):
        with pytest.raises(codec.EncodeError):
            codec.encode(obj)


@pytest.mark.parametrize("v", [2**64 - 1, -(2**63), 0, -1, 2**63])
def test_64_bit_boundaries_are_accepted(v):
    obj = _msg(OpaquePart(data=v))
    assert codec.decode(codec.encode(obj)) == obj


def test_bool_is_not_an_int():
    a = codec.encode(_msg(OpaquePart(data=True)))
    b = codec.encode(_msg(OpaquePart(data=1)))
    assert a != b
    assert codec.decode(a).parts[0].data is True


# -- decoding garbage -----------------------------------------------------------------------


GARBAGE = {
    "empty": b"",
    "text": b"hello, world",
    "truncated": codec.encode(_msg(TextPart(text="hello"))) [:-3],
    "msgpack_int": msgspec.msgpack.encode(42),
    "msgpack_list": msgspec.msgpack.encode([1, 2]),
    "unknown_type": msgspec.msgpack.encode({"type": "commit", "tree": "x"}),
    "no_type": msgspec.msgpack.encode({"parent": None, "role": "user"}),
    "message_missing_role": msgspec.msgpack.encode({"type": "message", "parent": None}),
    "message_wrong_field_type": msgspec.msgpack.encode({"type": "message", "parent": 7, "role": "user"}),
    "unknown_part": msgspec.msgpack.encode({"type": "message", "parent": None, "role": "user", "parts": [{"type": "video"}]}),
    "blob_data_not_bytes": msgspec.msgpack.encode({"type": "blob", "data": 12}),
    "trailing_bytes": codec.encode(Blob(data=b"x")) + b"\x00",
    "deep_nesting": b"\x91" * 100_000,
}


@pytest.mark.parametrize("name", list(GARBAGE))
def test_decode_of_garbage_raises_object_corrupt(name):
    with pytest.raises(ObjectCorrupt) as e:
        codec.decode(GARBAGE[name], "ab" * 32)
    assert e.value.code == "object_corrupt"


# -- properties -----------------------------------------------------------------------------

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
_scalar = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
_json = st.recursive(
    _scalar,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_text, kids, max_size=4),
    max_leaves=12,
)
_meta = st.none() | st.dictionaries(_text, _json, max_size=4)
_oid = st.text("0123456789abcdef", min_size=64, max_size=64)
_part = st.one_of(
    st.builds(TextPart, text=_text, meta=_meta),
    st.builds(ReasoningPart, text=_text, meta=_meta),
    st.builds(ToolCallPart, name=_text, id=st.none() | _text, arguments=_json, meta=_meta),
    st.builds(ToolResultPart, tool_call_id=st.none() | _text, name=st.none() | _text, output=_json, is_error=st.booleans()),
    st.builds(AttachmentPart, mime_type=st.none() | _text, name=st.none() | _text, blob=st.none() | _oid,
              url=st.none() | _text, size=st.none() | st.integers(0, 2**40), meta=_meta),
    st.builds(OpaquePart, data=_json, source=st.none() | _text),
)
_message = st.builds(
    Message,
    parent=st.none() | _oid,
    role=st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
    parts=st.lists(_part, max_size=4).map(tuple),
    meta=_meta,
)
_turn = st.builds(
    Turn,
    kind=st.sampled_from(["call", "append", "import", "fork"]),
    thread=_text,
    output=_oid,
    input=st.none() | _oid,
    model=st.none() | _text,
    options=_meta,
    usage=_meta,
    started_at=st.none() | st.integers(0, 2**53),
    meta=_meta,
)
_object = _message | _turn | st.builds(Blob, data=st.binary(max_size=64))


def _reverse_dicts(v):
    """The same value with every dict built in reversed insertion order."""
    if isinstance(v, dict):
        return {k: _reverse_dicts(v[k]) for k in reversed(list(v))}
    if isinstance(v, list):
        return [_reverse_dicts(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_reverse_dicts(x) for x in v)
    if isinstance(v, msgspec.Struct):
        return type(v)(**{f: _reverse_dicts(getattr(v, f)) for f in v.__struct_fields__})
    return v


@given(_object)
def test_roundtrip_and_determinism(obj):
    data = codec.encode(obj)
    assert codec.decode(data) == obj
    assert codec.encode(obj) == data
    assert codec.encode(codec.decode(data)) == data  # decoded objects re-encode to the same bytes
    assert codec.encode(_reverse_dicts(obj)) == data  # dict insertion order never matters
    assert codec.hash_bytes(data) == blake3(data).hexdigest()


@given(st.dictionaries(_text, _json, min_size=2, max_size=6), st.randoms(use_true_random=False))
def test_dict_key_order_never_changes_bytes(d, rnd):
    keys = list(d)
    rnd.shuffle(keys)
    shuffled = {k: d[k] for k in keys}
    a = codec.encode(_msg(TextPart(text="x"), meta=d))
    b = codec.encode(_msg(TextPart(text="x"), meta=shuffled))
    assert a == b


@given(_json)
def test_json_like_values_roundtrip_inside_every_any_field(v):
    for obj in (
        _msg(OpaquePart(data=v)),
        _msg(ToolCallPart(name="f", arguments=v), role="assistant"),
        _msg(ToolResultPart(output=v), role="tool"),
        _msg(TextPart(text="x"), meta={"v": v}),
    ):
        assert codec.decode(codec.encode(obj)) == obj

