"""Provider API shapes → Payloads: OpenAI Responses (request / response object), a bare
OpenAI chat.completion, Anthropic Messages (request / response), Gemini ``contents``
(request / generateContent response) and Google AI Studio saved chats.

Each gives one linear conversation; a response becomes the model call's output and its
usage / model / ids the turn's. Opaque replay tokens (Anthropic ``signature``, Gemini
``thoughtSignature``, OpenAI ``encrypted_content``) are kept in part ``meta``.
"""

from __future__ import annotations

from typing import Any

from ..errors import SchemaValidationFailed
from ..objects import OpaquePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .chat import _drafts, completion_meta, parse_time
from .model import Draft, Payload, TurnInfo
from .parts import _b64, _pending_attachment, content_to_parts, normalize_role
from .shapes import is_anthropic_request  # noqa: F401 (re-exported)

def _s(d: dict, k: str) -> str | None:
    v = d.get(k)
    return v if isinstance(v, str) else None


def _d(d: dict, k: str) -> dict | None:
    v = d.get(k)
    return v if isinstance(v, dict) else None


# -- OpenAI ---------------------------------------------------------------------------------


def completion_payload(doc: dict) -> Payload:
    """A chat.completion on its own: the response, without its request."""
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise SchemaValidationFailed("choices must be a non-empty list")
    msg = choices[0].get("message")
    drafts = _drafts([msg], "choices[0].message")
    meta = completion_meta(doc)
    return Payload(messages=(), response=drafts, has_response=True, turn=TurnInfo(
        resolved_model=_s(doc, "model"), usage=_d(doc, "usage"),
        started_at=parse_time(doc.get("created"), "created"), meta=meta or None))


def responses_payload(doc: dict) -> Payload:
    """A Responses API request (``input``) and/or response object (``output``)."""
    msgs: list[Draft] = []
    if isinstance(doc.get("instructions"), str) and doc["instructions"]:
        msgs.append(Draft(role="system", parts=(TextPart(text=doc["instructions"]),)))
    inp = doc.get("input")
    if isinstance(inp, str):
        msgs.append(Draft(role="user", parts=(TextPart(text=inp),)))
    elif isinstance(inp, list):
        msgs.extend(_items(inp, "input"))
    out = doc.get("output")
    response = tuple(_items(out, "output")) if isinstance(out, list) else ()
    if not msgs and not response:
        raise SchemaValidationFailed("a Responses object needs input or output items")
    meta = {k: doc[k] for k in ("id", "status", "previous_response_id", "incomplete_details") if doc.get(k) is not None}
    opts = {k: doc[k] for k in _RESPONSES_OPTIONS if doc.get(k) not in (None, [], {})}
    # every other key of the object, as it is (``object: "response"`` says nothing)
    extra = {k: v for k, v in doc.items() if k not in _RESPONSES_KEYS and k not in _RESPONSES_OPTIONS
             and k not in meta and not _empty(v) and not (k == "object" and v == "response")}
    if not isinstance(doc.get("instructions"), str) and not _empty(doc.get("instructions")):
        extra["instructions"] = doc["instructions"]  # (a prompt's list of items: not a system text)
    if extra:
        meta["extra"] = extra
    return Payload(messages=tuple(msgs), response=response, has_response=bool(response), turn=TurnInfo(
        model=_s(doc, "model"), usage=_d(doc, "usage"), options=opts or None,
        started_at=parse_time(doc.get("created_at"), "created_at"), meta=meta or None))


_RESPONSES_OPTIONS = ("temperature", "top_p", "reasoning", "tools", "tool_choice", "text", "max_output_tokens",
                      "parallel_tool_calls", "max_tool_calls", "top_logprobs", "truncation", "store", "stream",
                      "service_tier", "metadata", "include", "prompt_cache_key", "safety_identifier", "user",
                      "background", "prompt_cache_retention")
_RESPONSES_KEYS = {"instructions", "input", "output", "model", "usage", "created_at"}


def _summary_meta(summary: Any) -> dict:
    """A reasoning item's ``summary`` as meta: nothing when its text (the items'
    ``summary_text`` joined by blank lines) says all of it, else the list as given."""
    if summary in (None, []):
        return {}
    plain = isinstance(summary, list) and len(summary) == 1 and isinstance(summary[0], dict) and \
        set(summary[0]) <= {"type", "text"} and summary[0].get("type") == "summary_text" and \
        isinstance(summary[0].get("text"), str)
    return {} if plain else {"summary": summary}


def _items(items: list, where: str) -> list[Draft]:
    """Responses items → messages: consecutive non-message items of the model join one
    assistant message; function_call_output items become tool messages."""
    out: list[Draft] = []
    pending: list = []

    def flush():
        if pending:
            out.append(Draft(role="assistant", parts=tuple(pending)))
            pending.clear()

    for i, it in enumerate(items):
        w = f"{where}[{i}]"
        if not isinstance(it, dict):
            raise SchemaValidationFailed(f"{w}: must be an object")
        t = it.get("type", "message")
        if t == "message":
            role = normalize_role(it.get("role", "assistant"), w)
            rest = {k: v for k, v in it.items() if k not in ("type", "role", "content") and v is not None}
            parts = content_to_parts(it.get("content"), w)
            if role == "assistant":
                pending.extend(parts)
                if rest:
                    pending.append(OpaquePart(data={"message": rest}, source="openai-responses"))
                continue
            flush()
            out.append(Draft(role=role, parts=tuple(parts), meta=rest or None))
        elif t == "reasoning":
            summary = "\n\n".join(s.get("text", "") for s in it.get("summary") or () if isinstance(s, dict)
                                   and isinstance(s.get("text"), str))
            rest = {k: v for k, v in it.items() if k not in ("type", "summary")}
            pending.append(ReasoningPart(text=summary, meta={"source_type": "reasoning", **rest,
                                                             **_summary_meta(it.get("summary"))}))
        elif t == "function_call" and isinstance(it.get("name"), str):
            rest = {k: v for k, v in it.items() if k not in ("type", "name", "call_id", "arguments")}
            pending.append(ToolCallPart(name=it["name"], id=_s(it, "call_id"), arguments=it.get("arguments"), meta=rest or None))
        elif t == "function_call_output":
            flush()
            rest = {k: v for k, v in it.items() if k not in ("type", "call_id", "output")}
            if it.get("call_id") is not None and not isinstance(it.get("call_id"), str):
                rest["call_id"] = it["call_id"]
            out.append(Draft(role="tool", parts=(ToolResultPart(tool_call_id=_s(it, "call_id"), output=it.get("output"),
                                                                meta=rest or None),)))
        else:
            pending.append(OpaquePart(data=it, source="openai-responses"))
    flush()
    return out


# -- Anthropic ------------------------------------------------------------------------------


def anthropic_payload(doc: dict) -> Payload:
    """Messages API request (``system``, ``messages``) and/or response (``type: message``)."""
    msgs: list[Draft] = []
    system = doc.get("system")
    if isinstance(system, str) and system:
        msgs.append(Draft(role="system", parts=(TextPart(text=system),)))
    elif isinstance(system, list) and system:
        msgs.append(Draft(role="system", parts=tuple(_blocks(system, "system"))))
    for i, m in enumerate(doc.get("messages") or ()):
        msgs.extend(_anthropic_message(m, f"messages[{i}]"))
    response: tuple = ()
    resp = doc.get("response") if isinstance(doc.get("response"), dict) else (doc if doc.get("type") == "message" else None)
    meta = {}
    usage = _d(doc, "usage")
    model = _s(doc, "model")
    resolved = None
    if resp is not None:
        response = tuple(_anthropic_message({"role": resp.get("role", "assistant"), "content": resp.get("content")}, "response"))
        # every key of the response kept: the mapped ones, and the others as they are
        meta = {k: v for k, v in resp.items() if k not in ("content", "usage", "model", "role", "type")
                and not _empty(v)}
        if resp.get("type") not in (None, "message"):
            meta["type"] = resp["type"]
        if resp.get("role") not in (None, "assistant"):
            meta["role"] = resp["role"]
        if usage is not None and _d(resp, "usage") not in (None, usage):
            meta["response_usage"] = resp["usage"]
        usage = usage or _d(resp, "usage")
        resolved = _s(resp, "model")
        if resp is doc:
            model = None
    opts = {k: doc[k] for k in _ANTHROPIC_OPTIONS if k in doc and resp is not doc}
    if resp is not doc:  # the request's other keys (a response's own are in meta above)
        extra = {k: v for k, v in doc.items() if k not in _ANTHROPIC_OPTIONS and k not in _ANTHROPIC_DOC_KEYS
                 and not _empty(v)}
        if extra:
            meta["extra"] = extra
    if not msgs and not response:
        raise SchemaValidationFailed("the conversation has no messages")
    return Payload(messages=tuple(msgs), response=response, has_response=bool(response), turn=TurnInfo(
        model=model, resolved_model=resolved, usage=usage, options=opts or None, meta=meta or None))


_ANTHROPIC_OPTIONS = ("max_tokens", "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking",
                      "stop_sequences", "metadata", "stream", "service_tier")
_ANTHROPIC_DOC_KEYS = {"system", "messages", "model", "response", "usage"}


def _empty(v: Any) -> bool:
    return v is None or v == [] or v == {}


def _anthropic_message(m: Any, where: str) -> list[Draft]:
    if not isinstance(m, dict):
        raise SchemaValidationFailed(f"{where}: a message must be an object")
    role = normalize_role(m.get("role"), where)
    # The message's other keys (``name``, an SDK's ``id``...) are part of it, as in the chat
    # shape (json.md §1.2): kept in its meta. A native ``meta`` object is the meta itself.
    meta = {k: v for k, v in m.items() if k not in ("role", "content", "meta") and not _empty(v)}
    if isinstance(m.get("meta"), dict):
        meta = {**m["meta"], **meta}
    elif m.get("meta") is not None:
        raise SchemaValidationFailed(f"{where}: meta must be an object")
    c = m.get("content")
    if isinstance(c, str):
        return [Draft(role=role, parts=(TextPart(text=c),), meta=meta or None)]
    if not isinstance(c, list):
        raise SchemaValidationFailed(f"{where}: content must be a string or a list of blocks")
    results = [b for b in c if isinstance(b, dict) and b.get("type") == "tool_result"]
    others = [b for b in c if not (isinstance(b, dict) and b.get("type") == "tool_result")]
    out = []
    if results and role == "user":  # tool results answer the previous turn: role tool (formats.md §2.2)
        out.append(Draft(role="tool", parts=tuple(_blocks(results, where)), meta=None if others else meta or None))
        if others:
            out.append(Draft(role=role, parts=tuple(_blocks(others, where)), meta=meta or None))
        return out
    parts = _blocks(c, where)
    if not parts:
        raise SchemaValidationFailed(f"{where}: the message is empty")
    return [Draft(role=role, parts=tuple(parts), meta=meta or None)]


def _blocks(blocks: list, where: str) -> list:
    out = []
    for j, b in enumerate(blocks):
        if isinstance(b, dict) and b.get("type") == "image" and isinstance(b.get("source"), dict):
            src = b["source"]
            # the block's other keys (cache_control) and the source's beside the mapped ones
            rest = {k: v for k, v in b.items() if k not in ("type", "source")}
            if src.get("type") == "base64" and isinstance(src.get("data"), str):
                extra = {k: v for k, v in src.items() if k not in ("type", "data", "media_type")}
                if src.get("media_type") is not None and not isinstance(src.get("media_type"), str):
                    extra["media_type"] = src["media_type"]
                out.append(_pending_attachment(_b64(src["data"], where), _s(src, "media_type"), None, None,
                                               {**rest, **({"source": extra} if extra else {})} or None))
                continue
            if src.get("type") == "url" and isinstance(src.get("url"), str):
                from ..objects import AttachmentPart

                extra = {k: v for k, v in src.items() if k not in ("type", "url")}
                out.append(AttachmentPart(url=src["url"], meta={**rest, **({"source": extra} if extra else {})} or None))
                continue
        if isinstance(b, dict) and b.get("type") == "tool_result" and isinstance(b.get("content"), list):
            b = {**b, "content": b["content"]}
        out.extend(content_to_parts([b], f"{where}.content[{j}]"))
    return out


# -- Gemini ---------------------------------------------------------------------------------


def gemini_payload(doc: dict) -> Payload:
    """``{contents, systemInstruction}`` request and/or a generateContent response."""
    msgs: list[Draft] = []
    si = doc.get("systemInstruction") or doc.get("system_instruction")
    if isinstance(si, dict) and si.get("parts"):
        msgs.append(Draft(role="system", parts=tuple(_gparts(si["parts"], "systemInstruction"))))
    for i, c in enumerate(doc.get("contents") or ()):
        msgs.append(_gcontent(c, f"contents[{i}]"))
    response: tuple = ()
    meta: dict = {}
    resp = doc.get("response") if isinstance(doc.get("response"), dict) else (doc if "candidates" in doc else None)
    if resp is not None:
        cands = resp.get("candidates")
        if not isinstance(cands, list) or not cands or not isinstance(cands[0], dict):
            raise SchemaValidationFailed("candidates must be a non-empty list")
        response = (_gcontent(cands[0].get("content"), "candidates[0].content"),)
        meta = {k: v for k, v in cands[0].items() if k not in ("content",)}
        if len(cands) > 1:
            meta["other_candidates"] = cands[1:]
        if resp.get("responseId"):
            meta["response_id"] = resp["responseId"]
        # the response's other keys (promptFeedback, createTime, ...), as they are
        for k, v in resp.items():
            if k not in ("candidates", "responseId", "usageMetadata", "modelVersion") and not _empty(v):
                meta[f"response_{k}"] = v
    usage = _d(resp or {}, "usageMetadata")
    if usage is not None:
        usage = {**usage, "input_tokens": usage.get("promptTokenCount"), "output_tokens": usage.get("candidatesTokenCount")}
        usage = {k: v for k, v in usage.items() if v is not None}
    if not msgs and not response:
        raise SchemaValidationFailed("the conversation has no messages")
    opts = _d(doc, "generationConfig")
    options = {"generationConfig": opts} if opts else {}
    # request keys: tools, toolConfig, safetySettings, cachedContent are the call's options;
    # anything else is kept as it is
    for k in ("tools", "toolConfig", "safetySettings", "cachedContent", "labels"):
        if not _empty(doc.get(k)):
            options[k] = doc[k]
    if resp is not doc:
        extra = {k: v for k, v in doc.items() if k not in ("contents", "systemInstruction", "system_instruction",
                                                             "response", "model", "generationConfig", *options)
                 and not _empty(v)}
        if extra:
            meta["extra"] = extra
    return Payload(messages=tuple(msgs), response=response, has_response=bool(response), turn=TurnInfo(
        model=_s(doc, "model"), resolved_model=_s(resp or {}, "modelVersion"), usage=usage,
        options=options or None, meta=meta or None))


def _gcontent(c: Any, where: str) -> Draft:
    if not isinstance(c, dict):
        raise SchemaValidationFailed(f"{where}: must be an object")
    role = c.get("role", "model")
    parts = _gparts(c.get("parts"), where)
    if role in ("user", "function", "tool") and parts and all(isinstance(p, ToolResultPart) for p in parts):
        role = "tool"
    rest = {k: v for k, v in c.items() if k not in ("role", "parts") and not _empty(v)}
    return Draft(role=normalize_role(role, where), parts=tuple(parts), meta=rest or None)


def _gparts(parts: Any, where: str) -> list:
    if not isinstance(parts, list):
        raise SchemaValidationFailed(f"{where}: parts must be a list")
    out = []
    for j, p in enumerate(parts):
        w = f"{where}.parts[{j}]"
        if not isinstance(p, dict):
            raise SchemaValidationFailed(f"{w}: must be an object")
        extra = {k: v for k, v in p.items() if k in ("thoughtSignature", "thought_signature", "videoMetadata")}
        if isinstance(p.get("text"), str):
            # a part's other keys beside its text (e.g. partMetadata) are kept
            more = {k: v for k, v in p.items() if k not in ("text", "thought", *extra)}
            if p.get("thought") not in (None, True, False):
                more["thought"] = p["thought"]
            if p.get("thought") is True:
                out.append(ReasoningPart(text=p["text"], meta={"source_type": "thought", **extra, **more}))
            else:
                out.append(TextPart(text=p["text"], meta={**extra, **more} or None))
        elif isinstance(p.get("functionCall"), dict) and isinstance(p["functionCall"].get("name"), str):
            fc = p["functionCall"]
            more = {k: v for k, v in p.items() if k not in ("functionCall", *extra)}
            fmore = {k: v for k, v in fc.items() if k not in ("name", "args") and not (k == "id" and isinstance(v, str))}
            if fmore:
                more["functionCall"] = fmore
            out.append(ToolCallPart(name=fc["name"], id=_s(fc, "id"), arguments=fc.get("args"),
                                    meta={**extra, **more} or None))
        elif isinstance(p.get("functionResponse"), dict):
            fr = p["functionResponse"]
            more = {k: v for k, v in p.items() if k != "functionResponse"}
            fmore = {k: v for k, v in fr.items() if k not in ("response",) and not (k in ("id", "name") and isinstance(v, str))}
            if fmore:
                more["functionResponse"] = fmore
            out.append(ToolResultPart(tool_call_id=_s(fr, "id"), name=_s(fr, "name"), output=fr.get("response"),
                                      meta=more or None))
        elif isinstance(p.get("inlineData"), dict) and isinstance(p["inlineData"].get("data"), str):
            d = p["inlineData"]
            more = {k: v for k, v in p.items() if k not in ("inlineData", *extra)}
            dmore = {k: v for k, v in d.items() if k != "data" and not (k == "mimeType" and isinstance(v, str))}
            if dmore:
                more["inlineData"] = dmore
            out.append(_pending_attachment(_b64(d["data"], w), _s(d, "mimeType"), None, None, {**extra, **more} or None))
        elif isinstance(p.get("fileData"), dict) and isinstance(p["fileData"].get("fileUri"), str):
            from ..objects import AttachmentPart

            d = p["fileData"]
            more = {k: v for k, v in p.items() if k not in ("fileData", *extra)}
            dmore = {k: v for k, v in d.items() if k != "fileUri" and not (k == "mimeType" and isinstance(v, str))}
            if dmore:
                more["fileData"] = dmore
            out.append(AttachmentPart(url=d["fileUri"], mime_type=_s(d, "mimeType"), meta={**extra, **more} or None))
        else:
            out.append(OpaquePart(data=p, source="gemini"))
    return out


def aistudio_payload(doc: dict) -> Payload:
    """A Google AI Studio saved chat: ``chunkedPrompt.chunks``; consecutive model chunks (a
    thought, then the answer) form one assistant message."""
    cp = doc.get("chunkedPrompt")
    if not isinstance(cp, dict) or not isinstance(cp.get("chunks"), list):
        raise SchemaValidationFailed("an AI Studio chat needs chunkedPrompt.chunks")
    msgs: list[Draft] = []
    si = doc.get("systemInstruction")
    if isinstance(si, dict) and si.get("parts"):
        msgs.append(Draft(role="system", parts=tuple(_gparts(si["parts"], "systemInstruction"))))
    cur_role, cur_parts = None, []
    for i, ch in enumerate(cp["chunks"]):
        w = f"chunks[{i}]"
        if not isinstance(ch, dict):
            raise SchemaValidationFailed(f"{w}: must be an object")
        role = normalize_role(ch.get("role"), w)
        rest = {k: v for k, v in ch.items() if k not in ("role", "text", "isThought", "parts")}
        if isinstance(ch.get("text"), str):
            meta = {**rest, **({"parts": ch["parts"]} if ch.get("parts") else {})} or None
            part = (ReasoningPart(text=ch["text"], meta={"source_type": "thought", **(meta or {})})
                    if ch.get("isThought") else TextPart(text=ch["text"], meta=meta))
        else:
            part = OpaquePart(data=ch, source="aistudio")
        if role != cur_role or role != "assistant":
            if cur_parts:
                msgs.append(Draft(role=cur_role, parts=tuple(cur_parts)))
            cur_role, cur_parts = role, []
        cur_parts.append(part)
    if cur_parts:
        msgs.append(Draft(role=cur_role, parts=tuple(cur_parts)))
    if not msgs:
        raise SchemaValidationFailed("the conversation has no messages")
    rs = _d(doc, "runSettings") or {}
    meta = {k: v for k, v in doc.items() if k not in ("chunkedPrompt", "runSettings", "systemInstruction")}
    if cp.get("pendingInputs"):
        meta["pendingInputs"] = cp["pendingInputs"]
    return Payload(messages=tuple(msgs), turn=TurnInfo(model=_s(rs, "model"), options=rs or None, meta=meta or None))
