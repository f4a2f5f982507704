"""The stored object types: frozen, tagged msgspec Structs (pure values, no I/O).

Contract (docs/format.md): every Struct here is encoded by ``codec.encode`` with sorted keys
and defaults omitted, so a new field with a default never changes an existing object's bytes.
Nothing here is ever renamed or retyped.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

ROLES = ("system", "developer", "user", "assistant", "tool")

# Text longer than this many UTF-8 bytes is stored in a blob object and referenced by id.
# Part of the hashing contract: changing it changes ids of long messages.
TEXT_BLOB_THRESHOLD = 32 * 1024


class _Obj(msgspec.Struct, frozen=True, tag_field="type", omit_defaults=True):
    pass


# -- parts ----------------------------------------------------------------------------------


class TextPart(_Obj, tag="text"):
    """Visible text. ``blob`` is set (and ``text`` empty) when the text is over the threshold."""

    text: str = ""
    blob: str | None = None
    meta: dict[str, Any] | None = None


class ReasoningPart(_Obj, tag="reasoning"):
    """Model reasoning / thinking; ``meta`` keeps signatures or encrypted content."""

    text: str = ""
    blob: str | None = None
    meta: dict[str, Any] | None = None


class ToolCallPart(_Obj, tag="tool_call"):
    """A call the assistant asked for. ``arguments`` is kept exactly as sent (often a JSON string)."""

    name: str
    id: str | None = None
    arguments: Any = None
    meta: dict[str, Any] | None = None


class ToolResultPart(_Obj, tag="tool_result"):
    """What a tool returned. ``output`` is a string or any JSON value; ``meta`` the result's
    other keys (e.g. Anthropic's ``cache_control``), added later (a field with a default:
    results without it keep their bytes)."""

    tool_call_id: str | None = None
    name: str | None = None
    output: Any = None
    is_error: bool = False
    meta: dict[str, Any] | None = None


class AttachmentPart(_Obj, tag="attachment"):
    """A file, image or audio clip: its bytes in ``blob``, or only a ``url`` pointing at it."""

    mime_type: str | None = None
    name: str | None = None
    blob: str | None = None
    url: str | None = None
    size: int | None = None
    meta: dict[str, Any] | None = None


class OpaquePart(_Obj, tag="opaque"):
    """Anything convgit does not map, kept losslessly with where it came from."""

    data: Any = None
    source: str | None = None


Part = Union[TextPart, ReasoningPart, ToolCallPart, ToolResultPart, AttachmentPart, OpaquePart]
PART_TYPES = ("text", "reasoning", "tool_call", "tool_result", "attachment", "opaque")


# -- objects --------------------------------------------------------------------------------


class Message(_Obj, tag="message"):
    """One message. ``parent`` is inside the object, so an id covers its whole history."""

    parent: str | None
    role: str
    parts: tuple[Part, ...] = ()
    meta: dict[str, Any] | None = None


class Blob(_Obj, tag="blob"):
    """Raw bytes: a long text or an attachment, referenced by id from a part."""

    data: bytes


class Turn(_Obj, tag="turn"):
    """One recorded event on a thread (a model call, an append, an import, a fork).

    Times, models and token counts live here and never in a message, so identical content
    always collapses to one message. ``input`` is the tip the event started from (None for a
    new root), ``output`` the tip it left.
    """

    kind: str
    thread: str
    output: str
    input: str | None = None
    model: str | None = None
    resolved_model: str | None = None
    options: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    started_at: int | None = None  # UTC epoch milliseconds
    duration_ms: int | None = None
    error: str | None = None
    source: str | None = None
    upstream_thread_id: str | None = None
    forked_from: str | None = None  # thread name the event forked from
    meta: dict[str, Any] | None = None
    forked_at: str | None = None  # the message a new thread branched off at


Object = Union[Message, Blob, Turn]
OBJECT_TYPES = ("message", "blob", "turn")
TURN_KINDS = ("call", "append", "import", "fork")
