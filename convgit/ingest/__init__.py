"""Turn input documents into hashed objects, before anything touches disk.

Pipeline: decode → coerce the shape (one module per format) → normalise → enforce limits →
build the message chain (hashing) — all pure; ``convgit.commit`` then decides and writes.
"""

from __future__ import annotations

from ..config import Config
from ..errors import PayloadTooLarge
from .build import Chain, build_chain
from .decode import decode_json
from .model import Draft, Payload, TurnInfo

__all__ = ["Chain", "Draft", "Payload", "TurnInfo", "build_chain", "decode_json", "parse_payload"]


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
