"""Server-sent events: split a relayed stream into events, spot the event that ends it, and
assemble the provider's final response document from the events (pure, no I/O).

The proxy relays the upstream's bytes unchanged; this module only reads a copy. Three shapes:

- OpenAI Chat Completions: ``data: {chat.completion.chunk}`` events, ended by ``data: [DONE]``;
  assembled into a ``chat.completion`` (content, reasoning, refusal, tool calls with their
  arguments, per choice; the usage chunk when the request asked for one).
- OpenAI Responses: typed events (``response.output_text.delta`` ...), ended by
  ``response.completed`` / ``response.incomplete`` / ``response.failed``, whose ``response`` is
  the whole response; a stream cut before that is assembled from the item and delta events.
- Anthropic Messages: ``message_start``, ``content_block_start/delta/stop`` (text, thinking
  with its ``signature_delta``, ``input_json_delta`` for tool input), ``message_delta``
  (stop reason, output usage), ``message_stop``.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"
ANTHROPIC = "anthropic"

_TERMINAL_EVENTS = {"message_stop", "response.completed", "response.incomplete", "response.failed", "error"}


class EventSplitter:
    """Incremental SSE framing: feed raw chunks, get ``(event, data)`` pairs of complete events.

    ``event`` is the ``event:`` field (or None), ``data`` the joined ``data:`` lines. Only
    framing is done here; nothing is decoded as JSON."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        """The events completed by ``chunk``."""
        self._buf += chunk
        buf = self._buf.replace(b"\r\n", b"\n") if b"\r" in self._buf else self._buf
        *blocks, rest = buf.split(b"\n\n")
        self._buf = rest
        return [ev for ev in (_parse_block(b) for b in blocks) if ev is not None]

    def flush(self) -> list[tuple[str | None, str]]:
        """A last event not followed by a blank line (a stream cut short)."""
        rest, self._buf = self._buf, b""
        ev = _parse_block(rest) if rest.strip() else None
        return [ev] if ev is not None else []


def _parse_block(block: bytes) -> tuple[str | None, str] | None:
    event = None
    data: list[str] = []
    for raw in block.split(b"\n"):
        line = raw.decode("utf-8", "replace")
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if event is None and not data:
        return None
    return event, "\n".join(data)


def is_terminal(event: str | None, data: str) -> bool:
    """Whether this event ends the stream (``[DONE]``, ``message_stop``, ``response.completed``
    and the other final Responses events, an ``error`` event)."""
    if data == "[DONE]":
        return True
    if event is not None:
        return event in _TERMINAL_EVENTS
    if data.startswith("{") and '"type"' in data[:40]:
        try:
            t = json.loads(data).get("type")
        except (ValueError, AttributeError):
            return False
        return t in _TERMINAL_EVENTS
    return False


def iter_events(raw: bytes) -> Iterator[tuple[str | None, Any]]:
    """Every event of a whole stream, its data decoded as JSON where it is JSON."""
    sp = EventSplitter()
    for event, data in [*sp.feed(raw), *sp.flush()]:
        try:
            doc: Any = json.loads(data)
        except ValueError:
            doc = data
        yield event, doc


class Assembled:
    """A stream turned back into its provider's response document (``doc``), whether the
    stream ended as it should (``complete``), and the error event it carried, if any."""

    def __init__(self, doc: dict | None, complete: bool, error: Any = None) -> None:
        self.doc = doc
        self.complete = complete
        self.error = error


def assemble(api: str, raw: bytes) -> Assembled:
    """The final response document of a stream of ``api`` (one of the three shapes)."""
    if api == OPENAI_CHAT:
        return _chat(raw)
    if api == OPENAI_RESPONSES:
        return _responses(raw)
    if api == ANTHROPIC:
        return _anthropic(raw)
    raise ValueError(f"unknown API {api!r}")


# -- OpenAI Chat Completions ------------------------------------------------------------------


def _chat(raw: bytes) -> Assembled:
    head: dict = {}
    choices: dict[int, dict] = {}
    usage = None
    done = False
    error = None
    for _event, d in iter_events(raw):
        if d == "[DONE]":
            done = True
            continue
        if not isinstance(d, dict):
            continue
        if "error" in d and "choices" not in d:
            error = d["error"]
            continue
        for k in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if d.get(k) is not None:
                head[k] = d[k]
        if d.get("usage"):
            usage = d["usage"]
        for c in d.get("choices") or ():
            if not isinstance(c, dict):
                continue
            st = choices.setdefault(c.get("index", 0), {"message": {}, "tools": {}, "finish_reason": None})
            _chat_delta(st, c.get("delta") or {})
            if c.get("finish_reason") is not None:
                st["finish_reason"] = c["finish_reason"]
    if not head and not choices:
        return Assembled(None, done, error)
    out_choices = []
    for i in sorted(choices):
        st = choices[i]
        msg = dict(st["message"])
        msg.setdefault("role", "assistant")
        msg.setdefault("content", None)
        if st["tools"]:
            msg["tool_calls"] = [st["tools"][j] for j in sorted(st["tools"])]
        out_choices.append({"index": i, "message": msg, "finish_reason": st["finish_reason"]})
    if not out_choices:  # a stream of usage only
        out_choices = [{"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": None}]
    doc = {**head, "object": "chat.completion", "choices": out_choices}
    if usage is not None:
        doc["usage"] = usage
    return Assembled(doc, done, error)


def _chat_delta(st: dict, delta: dict) -> None:
    msg = st["message"]
    for k, v in delta.items():
        if k == "tool_calls" and isinstance(v, list):
            for tc in v:
                if not isinstance(tc, dict):
                    continue
                cur = st["tools"].setdefault(tc.get("index", len(st["tools"])),
                                             {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    cur["id"] = tc["id"]
                if tc.get("type"):
                    cur["type"] = tc["type"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    cur["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    cur["function"]["arguments"] += fn["arguments"]
        elif k == "role" and isinstance(v, str):
            msg["role"] = v
        elif isinstance(v, str) and k in ("content", "reasoning_content", "reasoning", "refusal"):
            msg[k] = (msg.get(k) or "") + v
        elif v is not None and k not in msg:
            msg[k] = v


# -- OpenAI Responses ---------------------------------------------------------------------------


def _responses(raw: bytes) -> Assembled:
    resp: dict | None = None
    items: dict[int, dict] = {}
    final = None
    error = None
    for event, d in iter_events(raw):
        if not isinstance(d, dict):
            continue
        t = d.get("type") or event
        if isinstance(d.get("response"), dict):
            resp = d["response"]
            if t in ("response.completed", "response.incomplete", "response.failed"):
                final = resp
        if t == "error":
            error = d.get("error", d)
        elif t in ("response.output_item.added", "response.output_item.done") and isinstance(d.get("item"), dict):
            items[d.get("output_index", len(items))] = json.loads(json.dumps(d["item"]))
        elif t == "response.content_part.added" and isinstance(d.get("part"), dict):
            it = items.setdefault(d.get("output_index", 0), {"type": "message", "role": "assistant", "content": []})
            content = it.setdefault("content", [])
            ci = d.get("content_index", len(content))
            while len(content) <= ci:
                content.append({"type": "output_text", "text": ""})
            content[ci] = dict(d["part"])
        elif t in ("response.output_text.delta", "response.refusal.delta") and isinstance(d.get("delta"), str):
            it = items.setdefault(d.get("output_index", 0), {"type": "message", "role": "assistant", "content": []})
            content = it.setdefault("content", [])
            ci = d.get("content_index", 0)
            key = "refusal" if t == "response.refusal.delta" else "text"
            while len(content) <= ci:
                content.append({"type": "refusal" if key == "refusal" else "output_text", key: ""})
            content[ci][key] = content[ci].get(key, "") + d["delta"]
        elif t == "response.function_call_arguments.delta" and isinstance(d.get("delta"), str):
            it = items.setdefault(d.get("output_index", 0), {"type": "function_call", "arguments": ""})
            it["arguments"] = (it.get("arguments") or "") + d["delta"]
        elif t in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta") and isinstance(d.get("delta"), str):
            it = items.setdefault(d.get("output_index", 0), {"type": "reasoning", "summary": []})
            field = "summary" if "summary" in t else "content"
            lst = it.setdefault(field, []) or []
            it[field] = lst
            si = d.get("summary_index" if field == "summary" else "content_index", 0)
            while len(lst) <= si:
                lst.append({"type": "summary_text" if field == "summary" else "reasoning_text", "text": ""})
            lst[si]["text"] = lst[si].get("text", "") + d["delta"]
    if final is not None:
        return Assembled(final, True, error or final.get("error"))
    if resp is None and not items:
        return Assembled(None, False, error)
    doc = dict(resp or {"object": "response"})
    doc["output"] = [items[i] for i in sorted(items)]
    return Assembled(doc, False, error)


# -- Anthropic Messages -----------------------------------------------------------------------


def _anthropic(raw: bytes) -> Assembled:
    msg: dict | None = None
    blocks: dict[int, dict] = {}
    partial_json: dict[int, str] = {}
    done = False
    error = None
    for event, d in iter_events(raw):
        if not isinstance(d, dict):
            continue
        t = d.get("type") or event
        if t == "message_start" and isinstance(d.get("message"), dict):
            msg = json.loads(json.dumps(d["message"]))
        elif t == "content_block_start" and isinstance(d.get("content_block"), dict):
            blocks[d.get("index", len(blocks))] = dict(d["content_block"])
        elif t == "content_block_delta" and isinstance(d.get("delta"), dict):
            i = d.get("index", 0)
            b = blocks.setdefault(i, {"type": "text", "text": ""})
            delta = d["delta"]
            dt = delta.get("type")
            if dt == "text_delta":
                b["text"] = b.get("text", "") + delta.get("text", "")
            elif dt == "thinking_delta":
                b["thinking"] = b.get("thinking", "") + delta.get("thinking", "")
            elif dt == "signature_delta":
                b["signature"] = b.get("signature", "") + delta.get("signature", "")
            elif dt == "input_json_delta":
                partial_json[i] = partial_json.get(i, "") + delta.get("partial_json", "")
            elif dt == "citations_delta" and delta.get("citation") is not None:
                b.setdefault("citations", []).append(delta["citation"])
        elif t == "message_delta":
            if msg is None:
                msg = {"type": "message", "role": "assistant", "content": []}
            for k, v in (d.get("delta") or {}).items():
                msg[k] = v
            if isinstance(d.get("usage"), dict):
                msg["usage"] = {**(msg.get("usage") or {}), **d["usage"]}
        elif t == "message_stop":
            done = True
        elif t == "error":
            error = d.get("error", d)
    if msg is None and not blocks:
        return Assembled(None, done, error)
    for i, text in partial_json.items():
        b = blocks.get(i)
        if b is None:
            continue
        try:
            b["input"] = json.loads(text) if text else (b.get("input") or {})
        except ValueError:  # cut mid-argument: keep what arrived
            b["input"] = {"_partial_json": text}
    doc = dict(msg or {"type": "message", "role": "assistant"})
    doc["content"] = [blocks[i] for i in sorted(blocks)]
    return Assembled(doc, done, error)
