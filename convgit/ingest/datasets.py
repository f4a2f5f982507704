"""Dataset shapes → Payloads: ShareGPT (``conversations`` of ``{from, value}``), a
``conversation`` list (LMSYS style ``{role, content}``), and a raw "User:/Assistant:"
transcript (only when asked for explicitly, and strict).

ShareGPT ``function_call`` values become tool calls and ``observation`` values tool results;
``<image>``/``<video>``/``<audio>`` placeholders become attachment parts at their place, in
the order of the record's ``images``/``videos``/``audios`` lists.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import SchemaValidationFailed
from ..objects import AttachmentPart, TextPart, ToolCallPart, ToolResultPart
from .chat import _drafts
from .model import Draft, Payload, TurnInfo
from .parts import normalize_role
from .shapes import sharegpt_looks_like  # noqa: F401 (re-exported)

_FROM = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant",
         "bard": "assistant", "assistant": "assistant", "model": "assistant", "system": "system",
         "function_call": "assistant", "observation": "tool", "tool": "tool", "function": "tool"}
_MEDIA = re.compile(r"<(image|video|audio)>")


def sharegpt_payload(doc: Any) -> Payload:
    """One ShareGPT record as a Payload (media lists attached to their placeholders)."""
    if isinstance(doc, list):
        doc = {"conversations": doc}
    turns = doc.get("conversations") if isinstance(doc, dict) else None
    if not isinstance(turns, list) or not turns:
        raise SchemaValidationFailed("a ShareGPT record needs a non-empty \"conversations\" list")
    media = {k: list(doc.get(f"{k}s") or ()) for k in ("image", "video", "audio")}
    msgs: list[Draft] = []
    if isinstance(doc.get("system"), str) and doc["system"]:
        msgs.append(Draft(role="system", parts=(TextPart(text=doc["system"]),)))
    for i, t in enumerate(turns):
        w = f"conversations[{i}]"
        if not isinstance(t, dict):
            raise SchemaValidationFailed(f"{w}: must be an object")
        frm, val = t.get("from"), t.get("value")
        if not isinstance(frm, str) or frm.strip().lower() not in _FROM:
            raise SchemaValidationFailed(f"{w}: unknown speaker {frm!r}", role=frm)
        if not isinstance(val, str):
            raise SchemaValidationFailed(f"{w}: value must be a string")
        kind = frm.strip().lower()
        role = _FROM[kind]
        rest = {k: v for k, v in t.items() if k not in ("from", "value")}
        if kind != role:
            rest["from"] = frm
        if kind == "function_call":
            parts: list = [_call(val)]
        elif role == "tool":
            parts = [ToolResultPart(output=val)]
        else:
            parts = _with_media(val, media, w)
        msgs.append(Draft(role=role, parts=tuple(parts), meta=rest or None))
    meta = {k: v for k, v in doc.items() if k not in ("conversations", "system", "id", "images", "videos", "audios")}
    opts = {"tools": doc["tools"]} if doc.get("tools") else None
    meta.pop("tools", None)
    _unplaced(media, meta)
    if doc.get("system") is not None and not (isinstance(doc["system"], str) and doc["system"]):
        meta["system"] = doc["system"]
    if doc.get("id") is not None and not isinstance(doc["id"], str):
        meta["id"] = doc["id"]
    return Payload(messages=tuple(msgs), turn=TurnInfo(options=opts, meta=meta or None,
                                                       upstream_thread_id=doc["id"] if isinstance(doc.get("id"), str) else None))


def _unplaced(media: dict[str, list], meta: dict) -> None:
    """Media of the record that no placeholder took (more images than ``<image>``), kept."""
    left = {f"{k}s": v for k, v in media.items() if v}
    if left:
        meta["unplaced_media"] = left


def _call(val: str) -> ToolCallPart:
    try:
        d = json.loads(val)
    except ValueError:
        d = None
    if isinstance(d, dict) and isinstance(d.get("name"), str):
        # the value's other keys, and the string itself when no usual encoding gives it back
        meta = {k: v for k, v in d.items() if k not in ("name", "arguments")}
        if not any(json.dumps(d, ensure_ascii=a, separators=sep) == val
                   for a in (True, False) for sep in ((", ", ": "), (",", ":"))):
            meta["value"] = val
        return ToolCallPart(name=d["name"], arguments=d.get("arguments"), meta=meta or None)
    return ToolCallPart(name="function", arguments=val)


def _with_media(text: str, media: dict[str, list], where: str) -> list:
    if "<" not in text or not _MEDIA.search(text):
        return [TextPart(text=text)]
    parts: list = []
    pos = 0
    for m in _MEDIA.finditer(text):
        if m.start() > pos:
            parts.append(TextPart(text=text[pos:m.start()]))
        kind = m.group(1)
        if not media[kind]:
            raise SchemaValidationFailed(f"{where}: more <{kind}> placeholders than {kind}s")
        ref = media[kind].pop(0)
        parts.append(AttachmentPart(url=str(ref), meta={"placeholder": f"<{kind}>"}))
        pos = m.end()
    if pos < len(text):
        parts.append(TextPart(text=text[pos:]))
    return parts


def messages_with_media(doc: dict) -> Payload:
    """LLaMA-Factory's ``messages`` records with ``<image>`` placeholders and ``images``."""
    media = {k: list(doc.get(f"{k}s") or ()) for k in ("image", "video", "audio")}
    msgs = []
    for i, m in enumerate(doc["messages"]):
        d = _drafts([m], f"messages[{i}]")[0]
        if isinstance(m, dict) and isinstance(m.get("content"), str) and _MEDIA.search(m["content"]):
            # the content's text part becomes text and attachment parts at the placeholders;
            # the message's other parts (reasoning, tool calls) stay where they were
            placed = _with_media(m["content"], media, f"messages[{i}]")
            j = next((k for k, p in enumerate(d.parts) if isinstance(p, TextPart) and p.text == m["content"]
                      and p.meta is None), None)
            parts = placed if j is None and len(d.parts) <= 1 else \
                [*d.parts[:j], *placed, *d.parts[j + 1:]] if j is not None else [*d.parts, *placed]
            d = Draft(role=d.role, parts=tuple(parts), meta=d.meta)
        msgs.append(d)
    meta = {k: v for k, v in doc.items() if k not in ("messages", "images", "videos", "audios")}
    _unplaced(media, meta)
    return Payload(messages=tuple(msgs), turn=TurnInfo(meta=meta or None))


def conversation_list_payload(doc: dict) -> Payload:
    """``{"conversation": [{role, content}, …], …}`` (LMSYS-Chat style)."""
    conv = doc.get("conversation")
    if not isinstance(conv, list) or not conv:
        raise SchemaValidationFailed("\"conversation\" must be a non-empty list of messages")
    meta = {k: v for k, v in doc.items() if k not in ("conversation", "model", "conversation_id")}
    up = doc.get("conversation_id") if isinstance(doc.get("conversation_id"), str) else None
    return Payload(messages=_drafts(conv, "conversation"),
                   turn=TurnInfo(model=doc.get("model") if isinstance(doc.get("model"), str) else None,
                                 upstream_thread_id=up, meta=meta or None))


_SPEAKER = re.compile(r"^(User|Human|Assistant|AI|System)\s*:[ \t]?(.*)$", re.I)
_LOOSE = re.compile(r"^\s*(user|human|assistant|ai|system|bot|gpt|model)\s*[:>\-]", re.I)


def transcript_payload(text: str) -> Payload:
    """A "User: … / Assistant: …" transcript. Strict: every speaker line starts at column 0
    with one of User/Human/Assistant/AI/System and a colon; text before the first speaker,
    an indented or otherwise ambiguous speaker marker inside a turn, or an empty turn is
    rejected rather than guessed."""
    if "\r" in text:
        raise SchemaValidationFailed("transcript: use \\n line endings (found \\r)")
    turns: list[list] = []
    for n, line in enumerate(text.split("\n"), 1):
        m = _SPEAKER.match(line)
        if m:
            turns.append([normalize_role(m.group(1).lower().replace("ai", "assistant"), f"line {n}"), [m.group(2)], n])
            continue
        if not turns:
            if line.strip():
                raise SchemaValidationFailed(f"transcript line {n}: text before the first speaker")
            continue
        if _LOOSE.match(line):
            raise SchemaValidationFailed(f"transcript line {n}: ambiguous speaker boundary {line[:40]!r}")
        turns[-1][1].append(line)
    if not turns:
        raise SchemaValidationFailed("transcript: no \"User:\"/\"Assistant:\" lines")
    msgs = []
    for role, lines, n in turns:
        body = "\n".join(lines).strip("\n")
        if not body.strip():
            raise SchemaValidationFailed(f"transcript line {n}: empty turn")
        msgs.append(Draft(role=role, parts=(TextPart(text=body),)))
    for a, b in zip(msgs, msgs[1:]):
        if a.role == b.role and a.role != "system":
            raise SchemaValidationFailed("transcript: two turns in a row by the same speaker (ambiguous boundary)")
    return Payload(messages=tuple(msgs))
