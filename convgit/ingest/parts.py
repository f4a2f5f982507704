"""Normalisation shared by every format: roles, content strings and part lists → parts."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..errors import SchemaValidationFailed
from ..ids import is_oid
from ..objects import (
    ROLES,
    AttachmentPart,
    OpaquePart,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

ROLE_ALIASES = {
    "human": "user",
    "user_message": "user",
    "ai": "assistant",
    "bot": "assistant",
    "gpt": "assistant",
    "model": "assistant",
    "assistant_message": "assistant",
    "function": "tool",
}


def normalize_role(role: Any, where: str) -> str:
    """A role in canonical form (aliases such as ``human``, ``model`` mapped), or
    SchemaValidationFailed naming ``where``."""
    if not isinstance(role, str):
        raise SchemaValidationFailed(f"{where}: role must be a string, got {_tname(role)}")
    r = role.strip().lower()
    r = ROLE_ALIASES.get(r, r)
    if r not in ROLES:
        raise SchemaValidationFailed(
            f"{where}: unknown role {role!r} (expected one of {', '.join(ROLES)})", role=role
        )
    return r


def _tname(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _extra(d: dict, known: set[str]) -> dict | None:
    rest = {k: v for k, v in d.items() if k not in known}
    return rest or None


def content_to_parts(content: Any, where: str) -> list[Part]:
    """A content string, None, or a list of content parts (OpenAI, Anthropic or native)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(text=content)]
    if isinstance(content, dict):
        return [part_from_dict(content, where)]
    if isinstance(content, list):
        out: list[Part] = []
        for i, item in enumerate(content):
            if isinstance(item, str):
                out.append(TextPart(text=item))
            elif isinstance(item, dict):
                out.append(part_from_dict(item, f"{where}, part {i}"))
            else:
                raise SchemaValidationFailed(f"{where}, part {i}: expected an object or a string, got {_tname(item)}")
        return out
    raise SchemaValidationFailed(f"{where}: content must be a string, a list of parts or null, got {_tname(content)}")


def _str_or_none(d: dict, key: str, where: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise SchemaValidationFailed(f"{where}: {key} must be a string, got {_tname(v)}")
    return v


def part_from_dict(d: dict, where: str) -> Part:
    """One part given as a dict (native or provider content block) as a Part."""
    t = d.get("type")
    if t in ("text", "input_text", "output_text"):
        text = d.get("text", "")
        if not isinstance(text, str):
            raise SchemaValidationFailed(f"{where}: text must be a string, got {_tname(text)}")
        meta = _native_meta(d, {"type", "text", "blob"}, where)
        if t != "text":
            meta = {**(meta or {}), "source_type": t}
        return TextPart(text=text, blob=_blob_ref(d, text, where), meta=meta)
    if t in ("reasoning", "thinking", "redacted_thinking"):
        text_key = _value_key(d, ("text", "thinking"))
        text = d.get(text_key, "")
        if not isinstance(text, str):
            raise SchemaValidationFailed(f"{where}: reasoning text must be a string")
        known = {"type", "blob", *_taken(d, text_key, ("text", "thinking"))} if t != "redacted_thinking" else {"type"}
        meta = _native_meta(d, known, where)
        if t != "reasoning":
            meta = {**(meta or {}), "source_type": t}
        if t == "redacted_thinking":
            return ReasoningPart(text="", meta=meta)
        return ReasoningPart(text=text, blob=_blob_ref(d, text, where), meta=meta)
    if t in ("tool_call", "tool_use", "function_call"):
        name = d.get("name")
        if not isinstance(name, str) or not name:
            raise SchemaValidationFailed(f"{where}: a tool call needs a name")
        args_key = _value_key(d, ("arguments", "input"))
        args = d.get(args_key)
        id_key = _first_key(d, ("id", "call_id"), where)
        cid = d.get(id_key) if id_key else None
        # the keys not taken (a Responses item's "call_id" beside its "id") stay in meta
        meta = _native_meta(d, {"type", "name", *_taken(d, args_key, ("arguments", "input")),
                                *_taken(d, id_key, ("id", "call_id"))}, where)
        if t != "tool_call":
            meta = {**(meta or {}), "source_type": t}
        return ToolCallPart(name=name, id=cid, arguments=args, meta=meta)
    if t in ("tool_result", "function_call_output"):
        out_key = _value_key(d, ("output", "content"))
        out = d.get(out_key)
        is_err = d.get("is_error", False)
        if not isinstance(is_err, bool):
            raise SchemaValidationFailed(f"{where}: is_error must be true or false")
        id_keys = ("tool_call_id", "tool_use_id", "call_id")
        id_key = _first_key(d, id_keys, where)
        cid = d.get(id_key) if id_key else None
        meta = _native_meta(d, {"type", "is_error", "name", *_taken(d, out_key, ("output", "content")),
                                *_taken(d, id_key, id_keys)}, where)
        if t != "tool_result":
            meta = {**(meta or {}), "source_type": t}
        return ToolResultPart(tool_call_id=cid, name=_str_or_none(d, "name", where), output=out, is_error=is_err,
                              meta=meta)
    if t == "attachment":
        return _attachment(d, where)
    if t in ("image_url", "input_image"):
        iu = d.get("image_url")
        url = iu.get("url") if isinstance(iu, dict) else iu
        if not isinstance(url, str):
            if t == "input_image":  # e.g. by file_id: nothing to map, kept whole
                return OpaquePart(data=d, source="part")
            raise SchemaValidationFailed(f"{where}: image_url needs a url")
        meta = _extra(d, {"type", "image_url"})
        if isinstance(iu, dict) and len(iu) > 1:
            meta = {**(meta or {}), **{k: v for k, v in iu.items() if k != "url"}}
        if t != "image_url":
            meta = {**(meta or {}), "source_type": t}
        return _from_url(url, meta, where)
    if t == "input_audio":
        ia = d.get("input_audio") or {}
        data, fmt = ia.get("data"), ia.get("format")
        if not isinstance(data, str):
            raise SchemaValidationFailed(f"{where}: input_audio needs base64 data")
        meta = {**(_extra(d, {"type", "input_audio"}) or {}), **(_extra(ia, {"data", "format"}) or {})}
        if fmt is not None and not isinstance(fmt, str):
            meta["format"] = fmt
        return _pending_attachment(_b64(data, where), f"audio/{fmt}" if isinstance(fmt, str) else None, None, None,
                                   meta or None)
    if t == "file":
        f = d.get("file") or {}
        fd = f.get("file_data") if isinstance(f, dict) else None
        if isinstance(fd, str):
            name = f.get("filename") if isinstance(f.get("filename"), str) else None
            meta = {**(_extra(d, {"type", "file"}) or {}),
                    **(_extra(f, {"file_data", "filename"} if name is not None or "filename" not in f else {"file_data"}) or {})}
            if fd.startswith("data:"):
                return _from_url(fd, meta or None, where, name=name)
            return _pending_attachment(_b64(fd, where), None, name, None, meta or None)
        return OpaquePart(data=d, source="file")
    if t == "opaque":
        if _extra(d, {"type", "data", "source"}):  # keys an opaque part cannot hold: the whole object
            return OpaquePart(data=d, source="part")
        return OpaquePart(data=d.get("data"), source=_str_or_none(d, "source", where))
    return OpaquePart(data=d, source="part")


def _first_key(d: dict, keys: tuple[str, ...], where: str) -> str | None:
    """The first of ``keys`` that ``d`` holds as a string (the others are kept in meta);
    a value that is neither a string nor null is an error."""
    for k in keys:
        if _str_or_none(d, k, where) is not None:
            return k
    return None


def _value_key(d: dict, keys: tuple[str, ...]) -> str:
    """The first of ``keys`` whose value in ``d`` is not null (else the first one)."""
    return next((k for k in keys if d.get(k) is not None), keys[0])


def _taken(d: dict, key: str | None, keys: tuple[str, ...]) -> set[str]:
    """Of alternative ``keys``, those mapped: the one used and any that are null."""
    return {k for k in keys if k == key or d.get(k) is None}


def _native_meta(d: dict, known: set[str], where: str) -> dict | None:
    """Extra keys of a part kept as its meta. A native ``meta`` object (as ``log --json``
    prints it) is the meta itself, so a logged part commits back to the same id."""
    extra = _extra(d, known | {"meta"})
    meta = d.get("meta")
    if meta is None:
        return extra
    if not isinstance(meta, dict):
        raise SchemaValidationFailed(f"{where}: meta must be an object")
    return {**meta, **(extra or {})} or None


def _blob_ref(d: dict, text: str, where: str) -> str | None:
    """A stored part's ``blob`` reference. Ignored when the text is given too (``log --json``
    prints both; the text is blobbed again to the same id)."""
    blob = d.get("blob")
    if blob is None or text:
        return None
    if not is_oid(blob):
        raise SchemaValidationFailed(f"{where}: blob must be a 64-hex object id")
    return blob


def _attachment(d: dict, where: str) -> AttachmentPart:
    mime = _str_or_none(d, "mime_type", where)
    name = _str_or_none(d, "name", where)
    url = _str_or_none(d, "url", where)
    blob = _str_or_none(d, "blob", where)
    if blob is not None and not is_oid(blob):
        raise SchemaValidationFailed(f"{where}: blob must be a 64-hex object id")
    meta = _native_meta(d, {"type", "mime_type", "name", "url", "blob", "data_base64", "size"}, where)
    if "data_base64" in d:
        raw = d["data_base64"]
        if not isinstance(raw, str):
            raise SchemaValidationFailed(f"{where}: data_base64 must be a string")
        return _pending_attachment(_b64(raw, where), mime, name, url, meta)
    if blob is None and url is None:
        raise SchemaValidationFailed(f"{where}: an attachment needs data_base64, blob or url")
    size = d.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise SchemaValidationFailed(f"{where}: size must be a non-negative integer")
    return AttachmentPart(mime_type=mime, name=name, blob=blob, url=url, size=size, meta=meta)


def _from_url(url: str, meta: dict | None, where: str, name: str | None = None) -> AttachmentPart:
    if url.startswith("data:"):
        head, sep, body = url[5:].partition(",")
        if not sep:
            raise SchemaValidationFailed(f"{where}: malformed data: URL")
        mime = head.split(";")[0] or None
        if head.endswith(";base64"):
            data = _b64(body, where)
        else:
            from urllib.parse import unquote_to_bytes

            data = unquote_to_bytes(body)
        return _pending_attachment(data, mime, name, None, meta)
    return AttachmentPart(url=url, name=name, meta=meta)


class PendingAttachment(AttachmentPart, tag="attachment"):
    """An attachment whose bytes are not stored yet (build.py turns them into a blob)."""

    data: bytes = b""


def _pending_attachment(data: bytes, mime, name, url, meta=None) -> AttachmentPart:
    return PendingAttachment(mime_type=mime, name=name, url=url, size=len(data), meta=meta, data=data)


def _b64(s: str, where: str) -> bytes:
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError) as e:
        raise SchemaValidationFailed(f"{where}: invalid base64 data: {e}") from e


def is_empty(parts: list[Part]) -> bool:
    """True when ``parts`` hold no content: only empty text."""
    return all(isinstance(p, TextPart) and p.text == "" and p.blob is None for p in parts)
