"""convgit's native conversation shape and OpenAI Chat Completions (request, response, list).

Native: ``{"messages": [{"role", "content": str | [parts], "meta"?}], "response"?: [...],
"model"?, "usage"?, "started_at"?, "duration_ms"?, "source"?, "upstream_thread_id"?, ...}``.
OpenAI: a ``messages`` list alone, a request object (``model`` + ``messages``), optionally with
a ``response`` that is a ``chat.completion`` object. docs/json.md describes both.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

import msgspec

from ..errors import SchemaValidationFailed
from ..ids import is_oid
from ..objects import ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .model import Draft, Payload, TurnInfo
from .parts import content_to_parts, is_empty, normalize_role

_MESSAGE_KEYS = {
    "role", "content", "tool_calls", "tool_call_id", "function_call", "reasoning_content",
    "reasoning", "refusal", "meta", "id", "parent", "parts",
}
_TURN_KEYS = {
    "model", "resolved_model", "options", "usage", "started_at", "duration_ms", "error",
    "source", "upstream_thread_id",
}
# Request parameters of an OpenAI call, recorded as the turn's options.
_OPTION_KEYS = {
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "n", "stop", "seed",
    "presence_penalty", "frequency_penalty", "tools", "tool_choice", "response_format",
    "reasoning_effort", "logit_bias", "user", "stream", "parallel_tool_calls",
    "metadata", "store", "modalities", "audio", "prediction", "logprobs", "top_logprobs",
    "service_tier", "web_search_options", "stream_options", "functions", "function_call",
    "verbosity", "prompt_cache_key", "safety_identifier",
}
# Keys of the document itself (the rest, unknown to convgit, is kept in ``turn.meta.extra``).
_DOC_KEYS = {"messages", "response", *_TURN_KEYS}
# Keys of a chat.completion read into the payload; every other one is kept as
# ``turn.meta.response_<key>``.
_COMPLETION_KEYS = {"choices", "usage", "model"}


def parse_chat(doc: Any) -> Payload:
    """Turn a decoded JSON document into a Payload (raises SchemaValidationFailed)."""
    if isinstance(doc, list):
        return Payload(messages=_drafts(doc, "messages"))
    if not isinstance(doc, dict):
        raise SchemaValidationFailed(
            f"expected a conversation object or a list of messages, got {type(doc).__name__}"
        )
    if "messages" not in doc:
        if "choices" in doc:
            raise SchemaValidationFailed("a chat.completion response needs the request: give {\"messages\": [...], \"response\": {...}}")
        raise SchemaValidationFailed("no \"messages\" list in the payload")
    msgs = doc["messages"]
    if not isinstance(msgs, list):
        raise SchemaValidationFailed("\"messages\" must be a list")
    messages = _drafts(msgs, "messages")
    response: tuple[Draft, ...] = ()
    has_response = "response" in doc
    extra_meta: dict = {}
    usage = doc.get("usage")
    resolved = doc.get("resolved_model")
    if has_response:
        resp = doc["response"]
        if isinstance(resp, dict) and "choices" in resp:
            response, rusage, rmodel, rmeta = _from_completion(resp)
            usage = usage if usage is not None else rusage
            resolved = resolved if resolved is not None else rmodel
            extra_meta.update(rmeta)
        elif isinstance(resp, dict):
            response = _drafts([resp], "response")
        elif isinstance(resp, list):
            response = _drafts(resp, "response")
        elif resp is not None:
            raise SchemaValidationFailed("\"response\" must be a message, a list of messages or a chat.completion")
    if not messages and not response:
        raise SchemaValidationFailed("the conversation has no messages")
    options = doc.get("options")
    if options is None:
        opts = {k: doc[k] for k in _OPTION_KEYS if k in doc}
        options = opts or None
    # Nothing given is dropped: the other top-level keys (and the option keys beside an
    # explicit "options") are kept as they are.
    extra = {k: v for k, v in doc.items() if k not in _DOC_KEYS and (k not in _OPTION_KEYS or "options" in doc)}
    if extra:
        extra_meta["extra"] = extra
    if has_response and isinstance(doc["response"], dict) and "choices" in doc["response"]:
        rmodel, rusage = doc["response"].get("model"), doc["response"].get("usage")
        if rusage is not None and rusage != usage:
            extra_meta["response_usage"] = rusage
        if rmodel is not None and rmodel != resolved:
            extra_meta["response_model"] = rmodel
    turn = TurnInfo(
        model=_opt_str(doc, "model"),
        resolved_model=resolved if isinstance(resolved, str) else None,
        options=_opt_dict(options, "options"),
        usage=_opt_dict(usage, "usage"),
        started_at=parse_time(doc.get("started_at"), "started_at"),
        duration_ms=_opt_int(doc.get("duration_ms"), "duration_ms"),
        error=_opt_str(doc, "error"),
        source=_opt_str(doc, "source"),
        upstream_thread_id=_opt_str(doc, "upstream_thread_id"),
        meta=extra_meta or None,
    )
    return Payload(messages=messages, response=response, turn=turn, has_response=has_response)


def _from_completion(resp: dict):
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices:
        raise SchemaValidationFailed("response.choices must be a non-empty list")
    c0 = choices[0]
    if not isinstance(c0, dict) or not isinstance(c0.get("message"), dict):
        raise SchemaValidationFailed("response.choices[0].message is missing")
    drafts = _drafts([c0["message"]], "response.choices[0].message")
    model = resp.get("model") if isinstance(resp.get("model"), str) else None
    return drafts, resp.get("usage"), model, completion_meta(resp)


def completion_meta(resp: dict) -> dict:
    """What a chat.completion holds beside its first choice's message, usage and model, for
    the turn's meta: ``response_<key>`` for each other key (``id``, ``created``,
    ``system_fingerprint``, ``service_tier``, a provider's own), ``finish_reason``, the first
    choice's other keys (``logprobs``, ``content_filter_results``...) as ``choice``, and
    ``other_choices``. Implied values (``"object": "chat.completion"``, ``"index": 0``) and
    empty ones (null, [], {}) carry nothing and are left out."""
    choices = resp["choices"]
    c0 = choices[0]
    meta = {}
    for k, v in resp.items():
        if k in _COMPLETION_KEYS or (k == "object" and v == "chat.completion") or _empty_value(v):
            continue
        meta[f"response_{k}"] = v
    if not isinstance(resp.get("model"), str) and resp.get("model") is not None:
        meta["response_model"] = resp["model"]
    if c0.get("finish_reason") is not None:
        meta["finish_reason"] = c0["finish_reason"]
    rest = {k: v for k, v in c0.items() if k not in ("message", "finish_reason") and not _empty_value(v)
            and not (k == "index" and v == 0)}
    if rest:
        meta["choice"] = rest
    if len(choices) > 1:
        meta["other_choices"] = choices[1:]
    return meta


def _drafts(items: list, what: str) -> tuple[Draft, ...]:
    return tuple(message_draft(m, f"{what}[{i}]") for i, m in enumerate(items))


def message_draft(m: Any, where: str) -> Draft:
    """One native / OpenAI chat message (``where`` names it in errors) as a Draft."""
    if not isinstance(m, dict):
        raise SchemaValidationFailed(f"{where}: a message must be an object, got {type(m).__name__}")
    if "role" not in m:
        raise SchemaValidationFailed(f"{where}: missing \"role\"")
    role = normalize_role(m["role"], where)
    if "content" not in m and "parts" not in m and "tool_calls" not in m and "function_call" not in m:
        raise SchemaValidationFailed(f"{where}: missing \"content\"")
    parts = []
    for key in ("reasoning_content", "reasoning"):
        r = m.get(key)
        if isinstance(r, str) and r:
            parts.append(ReasoningPart(text=r, meta=None if key == "reasoning" else {"source_type": key}))
        elif r is not None and not _empty_value(r):
            parts.append(ReasoningPart(text="", meta={"source_type": key, "value": r}))
    content = m["parts"] if "parts" in m else m.get("content")
    body = content_to_parts(content, where)
    if role == "tool" and body and all(isinstance(p, TextPart) for p in body):
        out: Any = content if isinstance(content, (str, list)) else body[0].text
        body = [ToolResultPart(tool_call_id=_opt_str(m, "tool_call_id"), name=_opt_str(m, "name"), output=out)]
    parts.extend(body)
    refusal = m.get("refusal")
    if isinstance(refusal, str) and refusal:
        parts.append(TextPart(text=refusal, meta={"kind": "refusal"}))
    elif refusal is not None and not _empty_value(refusal):
        parts.append(TextPart(text="", meta={"kind": "refusal", "value": refusal}))
    calls = m.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise SchemaValidationFailed(f"{where}: tool_calls must be a list")
        for j, c in enumerate(calls):
            parts.append(_tool_call(c, f"{where}.tool_calls[{j}]"))
    fc = m.get("function_call")
    if isinstance(fc, dict):  # legacy: marked, so it is told apart from a tool_calls entry
        call = _tool_call({"type": "function", "function": fc}, f"{where}.function_call")
        parts.append(msgspec.structs.replace(call, meta={**(call.meta or {}), "source_type": "function_call"}))
    # An empty text beside a tool call (OpenAI's content "" with tool_calls) carries nothing.
    parts = [p for p in parts if not _blank(p)] or parts
    # convgit stores messages with no content (an llm prompt with no text, a ShareGPT row with
    # a missing turn); one that carries its convgit id (as every exported message does) may be
    # empty, since the id is checked against its hash. Without an id, an empty message is a mistake.
    if (not parts or is_empty(parts)) and not is_oid(m.get("id")):
        raise SchemaValidationFailed(f"{where}: the message is empty (no text, parts or tool calls)")
    meta = m.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise SchemaValidationFailed(f"{where}: meta must be an object")
    # Keys with no information (null, [], {}: what SDKs add to every message, e.g. OpenAI's
    # "annotations": [] and "audio": null) are dropped, so a re-sent message keeps its id.
    extra = {
        k: v for k, v in m.items()
        if k not in _MESSAGE_KEYS and not _empty_value(v)
        and not (k == "name" and role == "tool" and any(isinstance(p, ToolResultPart) and p.name == v for p in parts))
    }
    if role == "tool" and "tool_call_id" in m and not any(isinstance(p, ToolResultPart) for p in parts):
        extra["tool_call_id"] = m["tool_call_id"]
    if "parts" in m and not _empty_value(m.get("content")):  # "parts" wins; the content is kept
        extra["content"] = m["content"]
    if fc is not None and not isinstance(fc, dict) and not _empty_value(fc):
        extra["function_call"] = fc
    if isinstance(m["role"], str) and m["role"].strip().lower() == "function":  # legacy role: kept
        extra["source_role"] = "function"
    if extra:
        meta = {**(meta or {}), **extra}
    claimed = m.get("id")
    claimed_parent = m.get("parent")
    if claimed_parent is not None and not is_oid(claimed_parent):
        raise SchemaValidationFailed(f"{where}: parent must be a 64-hex convgit id")
    return Draft(
        role=role,
        parts=tuple(parts),
        meta=meta or None,
        claimed_id=claimed if is_oid(claimed) else None,
        claimed_parent=claimed_parent,
    )


def _empty_value(v: Any) -> bool:
    return v is None or v == [] or v == {}


def _blank(p) -> bool:
    return isinstance(p, TextPart) and p.text == "" and p.blob is None and p.meta is None


def _tool_call(c: Any, where: str) -> ToolCallPart:
    if not isinstance(c, dict):
        raise SchemaValidationFailed(f"{where}: a tool call must be an object")
    fn = c.get("function")
    if isinstance(fn, dict):
        name = fn.get("name")
        args = fn.get("arguments")
        meta = {k: v for k, v in c.items() if k not in ("id", "function", "type")}
        if c.get("type") not in (None, "function"):
            meta["type"] = c["type"]
        fmeta = {k: v for k, v in fn.items() if k not in ("name", "arguments")}
        if fmeta:
            meta["function"] = fmeta
    else:
        name = c.get("name")
        args = c.get("arguments")
        meta = {k: v for k, v in c.items() if k not in ("id", "name", "arguments", "type")}
    if not isinstance(name, str) or not name:
        raise SchemaValidationFailed(f"{where}: a tool call needs a function name")
    cid = c.get("id")
    if cid is not None and not isinstance(cid, str):
        raise SchemaValidationFailed(f"{where}: id must be a string")
    return ToolCallPart(name=name, id=cid, arguments=args, meta=meta or None)


def _opt_str(d: dict, key: str) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise SchemaValidationFailed(f"{key} must be a string, got {type(v).__name__}")
    return v


def _opt_dict(v: Any, key: str) -> dict | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise SchemaValidationFailed(f"{key} must be an object")
    return v


def _opt_int(v: Any, key: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise SchemaValidationFailed(f"{key} must be a non-negative number")
    return int(v)


_MIN_MS, _MAX_MS = 0, 253402300799999  # 1970 .. 9999-12-31


def parse_time(v: Any, key: str) -> int | None:
    """UTC epoch milliseconds from an int (ms, or seconds when small), a float (seconds) or ISO 8601."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise SchemaValidationFailed(f"{key} must be a time")
    if isinstance(v, (int, float)):
        ms = int(v * 1000) if (isinstance(v, float) or v < 100_000_000_000) else int(v)
    elif isinstance(v, str):
        try:
            d = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError as e:
            raise SchemaValidationFailed(f"{key}: not an ISO 8601 time: {v!r}") from e
        if d.tzinfo is None:
            d = d.replace(tzinfo=_dt.timezone.utc)
        ms = int(d.timestamp() * 1000)
    else:
        raise SchemaValidationFailed(f"{key} must be a time (epoch ms or ISO 8601)")
    if not (_MIN_MS <= ms <= _MAX_MS):
        raise SchemaValidationFailed(f"{key} is out of range: {v!r}")
    return ms
