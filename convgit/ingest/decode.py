"""Strict JSON decoding of input documents, shared by every reader of conversations
(``parse_payload`` for commit, ``sources`` for import). The lowest module of ``ingest``."""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import InvalidInput


def decode_json(raw: bytes | str, *, what: str = "input") -> Any:
    """Decode JSON strictly: UTF-8 only, no NaN/Infinity, no trailing data, no lone surrogates."""
    if isinstance(raw, str):
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidInput(f"{what} is not valid Unicode: {e.reason}") from e
    if raw.startswith(b"\xef\xbb\xbf"):
        raise InvalidInput(f"{what} starts with a byte-order mark; save it as plain UTF-8")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(f"{what} is not valid UTF-8 (byte {e.start})") from e
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise InvalidInput(f"{what} is not valid JSON: {e}") from e
    except RecursionError:
        raise InvalidInput(f"{what} is nested too deeply") from None


__all__ = ["decode_json"]
