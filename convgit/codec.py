"""The ONE canonical encoder and the hashing contract.

id = lowercase hex BLAKE3-256 of the exact stored bytes. The stored bytes are msgpack with
sorted map keys (struct fields and nested dicts alike) and default-valued fields omitted.
Changing anything here changes every id: it is versioned with the store format.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
from blake3 import blake3

from .errors import ObjectCorrupt
from .objects import Blob, Message, Object, Turn

_encoder = msgspec.msgpack.Encoder(order="sorted")
_decoder = None  # Decoder(Object), made by the first decode: ~1.3 ms, which a commit that reads no object never pays
_raw_decoder = msgspec.msgpack.Decoder()


class EncodeError(ValueError):
    """A value cannot be stored canonically (NaN/inf float, non-str map key, huge int)."""


def encode(obj: Object) -> bytes:
    """Canonical bytes of an object. Rejects values with no canonical form."""
    if type(obj) is Message:
        _check_message(obj)
    else:
        _check_value(obj)
    try:
        return _encoder.encode(obj)
    except (OverflowError, TypeError, msgspec.EncodeError, UnicodeEncodeError) as e:
        raise EncodeError(str(e)) from e


def hash_bytes(data: bytes) -> str:
    """The object id of ``data``: its BLAKE3 hash in hex."""
    return blake3(data).hexdigest()


def encode_and_hash(obj: Object) -> tuple[str, bytes]:
    """``(id, canonical bytes)`` of ``obj``."""
    data = encode(obj)
    return hash_bytes(data), data


def decode(data: bytes, oid: str | None = None) -> Object:
    """Decode stored bytes. Raises ObjectCorrupt for anything that is not a known object."""
    global _decoder
    decoder = _decoder
    if decoder is None:
        decoder = _decoder = msgspec.msgpack.Decoder(Object)
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
        raise ObjectCorrupt(f"object {oid or '?'} does not decode: {e}", oid=oid) from e


def decode_raw(data: bytes) -> Any:
    """Plain msgpack decode (for ``cat-object -p`` of unknown future fields)."""
    return _raw_decoder.decode(data)


def is_canonical(data: bytes, obj: Object) -> bool:
    """True if re-encoding the decoded object gives the same bytes (fsck's check)."""
    try:
        return encode(obj) == data
    except EncodeError:
        return False


def type_name(obj: Object) -> str:
    """The stored type name of ``obj``: ``message``, ``turn`` or ``blob``."""
    if isinstance(obj, Message):
        return "message"
    if isinstance(obj, Turn):
        return "turn"
    if isinstance(obj, Blob):
        return "blob"
    raise TypeError(type(obj))


_MAX_DEPTH = 64


def _check_value(v: Any, depth: int = 0) -> None:
    """Reject what has no canonical form before any write: NaN/inf and absurd nesting.

    (The msgpack encoder itself rejects lone surrogates, ints beyond 64 bits and non-string
    map keys; those surface as EncodeError from ``encode``.)
    """
    if depth > _MAX_DEPTH:
        raise EncodeError(f"value nested deeper than {_MAX_DEPTH} levels")
    t = type(v)
    if t is dict:  # (the usual cases by exact type first: this runs for every stored value)
        items = v.values()
    elif t is list or t is tuple:
        items = v
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise EncodeError("NaN and infinite numbers cannot be stored")
        return
    elif isinstance(v, dict):
        items = v.values()
    elif isinstance(v, (list, tuple)):
        items = v
    elif isinstance(v, msgspec.Struct):
        items = [getattr(v, f) for f in v.__struct_fields__]
    else:
        return
    for x in items:
        if type(x) not in _LEAVES and isinstance(x, _CONTAINERS):
            _check_value(x, depth + 1)


_CONTAINERS = (float, dict, list, tuple, msgspec.Struct)
_LEAVES = frozenset({str, int, bool, type(None), bytes})  # (exact types: never a container)


def _check_message(m: Message) -> None:
    """_check_value for a message, visiting only the fields that can hold floats."""
    if m.meta is not None:
        _check_value(m.meta, 1)
    for p in m.parts:
        for f in _ANY_FIELDS.get(type(p), p.__struct_fields__):
            v = getattr(p, f)
            if v is not None and isinstance(v, _CONTAINERS):
                _check_value(v, 2)


def _any_fields() -> dict:
    from .objects import AttachmentPart, OpaquePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

    return {
        TextPart: ("meta",), ReasoningPart: ("meta",), AttachmentPart: ("meta",),
        ToolCallPart: ("arguments", "meta"), ToolResultPart: ("output",), OpaquePart: ("data",),
    }


_ANY_FIELDS = _any_fields()
