"""Turn input documents into hashed objects, before anything touches disk.

Pipeline: decode → coerce the shape (one module per format) → normalise → enforce limits →
build the message chain (hashing) — all pure; ``convgit.commit`` then decides and writes.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..config import Config
from ..errors import InvalidInput, PayloadTooLarge
from .build import Chain, build_chain
from .model import Draft, Payload, TurnInfo

__all__ = ["Chain", "Draft", "Payload", "TurnInfo", "build_chain", "decode_json", "parse_payload"]


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


def parse_payload(raw: bytes | str, config: Config | None = None) -> Payload:
    """Decode and normalise one conversation document: native / OpenAI chat, or another API
    shape (OpenAI Responses, Anthropic Messages, Gemini, AI Studio, ShareGPT, ``conversation``)."""
    config = config or Config()
    size = len(raw)
    if size > config.max_payload_bytes:
        raise PayloadTooLarge(
            f"input is {size} bytes; the limit is {config.max_payload_bytes} (limits.max_payload_bytes)"
        )
    from .sources import payload_from_document

    payload = payload_from_document(decode_json(raw))
    n = len(payload.all_messages)
    if n > config.max_messages:
        raise PayloadTooLarge(f"{n} messages in one payload; the limit is {config.max_messages} (limits.max_messages)")
    return payload
