"""A relayed call, as the spool keeps it (``CallRecord``), and how it becomes a stored
conversation: the request's messages + the response's as the chain, and a ``call`` turn with
model, usage, timing, status, error, source and the upstream's response id.

Nothing here touches the network. Credentials never reach a record: a record holds the
request and response bodies and no header at all (only the response's ``Content-Encoding``,
to decode the body, and the upstream's request id).
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any, Callable

import msgspec

from ..errors import SchemaValidationFailed
from ..ingest import Chain, Draft, Payload, TurnInfo, build_chain
from ..ingest.apis import anthropic_payload, responses_payload
from ..ingest.chat import parse_chat
from . import sse
from .prefix import PrefixCache, message_key

SOURCES = {sse.OPENAI_CHAT: "serve:openai-chat", sse.OPENAI_RESPONSES: "serve:openai-responses",
           sse.ANTHROPIC: "serve:anthropic"}

# Errors recorded on a turn (docs/serve.md).
CLIENT_DISCONNECTED = "client_disconnected"
UPSTREAM_STREAM_ERROR = "upstream_stream_error"
UPSTREAM_UNREACHABLE = "upstream_unreachable"
UPSTREAM_TIMEOUT = "upstream_timeout"
UPSTREAM_MALFORMED = "upstream_malformed_json"


class CallRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """One relayed call, complete or not: what the spool holds until it is committed."""

    id: str  # unique per call: the alias ``call:<id>`` says it is recorded
    api: str  # sse.OPENAI_CHAT | sse.OPENAI_RESPONSES | sse.ANTHROPIC
    request: bytes
    response: bytes = b""
    stream: bool = False
    status: int | None = None  # the upstream's HTTP status (None: no answer)
    started_at: int = 0  # UTC epoch ms
    duration_ms: int = 0
    ttft_ms: int | None = None  # first response byte, from the start
    error: str | None = None
    thread: str | None = None
    content_encoding: str | None = None
    upstream_request_id: str | None = None
    store_raw: bool = True


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(CallRecord)


def encode_record(rec: CallRecord) -> bytes:
    """The spool's bytes for one record."""
    return _encoder.encode(rec)


def decode_record(data: bytes) -> CallRecord:
    """A record back from the spool's bytes."""
    return _decoder.decode(data)


def decode_body(data: bytes, encoding: str | None) -> bytes:
    """A body as sent, decompressed (gzip, deflate, zstd; brotli when installed)."""
    enc = (encoding or "").strip().lower()
    if not data or enc in ("", "identity"):
        return data
    if enc in ("gzip", "x-gzip"):
        return gzip.decompress(data)
    if enc == "deflate":
        try:
            return zlib.decompress(data)
        except zlib.error:
            return zlib.decompress(data, -zlib.MAX_WBITS)
    if enc == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    if enc == "br":
        import brotli  # type: ignore[import-not-found]

        return brotli.decompress(data)
    raise SchemaValidationFailed(f"unknown Content-Encoding {encoding!r}")


class Built(msgspec.Struct):
    """A record made ready to commit: the payload, the thread named for it (trusted), the
    raw bodies to keep as blobs, the tip its chain will have and the response id."""

    payload: Payload
    thread: str | None
    tip: str
    response_id: str | None
    history: tuple[Draft, ...]  # every message of the chain (a Responses chain continues from it)
    root: str = ""  # the chain's first message: calls of one conversation share it
    chain: Chain | None = None  # the payload's messages hashed (the commit uses it: hashed once)


HistoryLookup = Callable[[str], "tuple[Draft, ...] | None"]


def loads_json(data: bytes) -> Any:
    """``json.loads(data)``, the same value, about twice as fast: msgspec decodes what is
    strict UTF-8 JSON (the values it gives are the ones Python gives), and Python's own
    reader takes what msgspec refuses (NaN, huge exponents, lone surrogates, UTF-16 ...) and
    raises its own errors."""
    try:
        return msgspec.json.decode(data)
    except msgspec.MsgspecError:
        return json.loads(data)


def build(rec: CallRecord, *, history_for: HistoryLookup, config=None, raw: dict[str, str] | None = None,
          cache: PrefixCache | None = None) -> Built:
    """A record → the payload to commit (raises SchemaValidationFailed for a request that is
    no conversation). ``history_for(response_id)``: the messages of the stored chain that a
    Responses call's ``previous_response_id`` continues, or None when unknown. ``raw``: the
    ids of the blobs holding the raw bodies, named in the turn's meta. ``cache``: the
    conversations' prefixes already parsed and hashed (convgit/serve/prefix.py): the same
    result, only the messages after the cached prefix parsed and hashed."""
    try:
        req = loads_json(rec.request)
    except ValueError as e:
        raise SchemaValidationFailed(f"the request body is not JSON: {e}") from e
    if not isinstance(req, dict):
        raise SchemaValidationFailed("the request body is not a JSON object")
    error = rec.error
    meta: dict[str, Any] = {"call": rec.id, "stream": rec.stream}
    if rec.status is not None:
        meta["http_status"] = rec.status
    if rec.ttft_ms is not None:
        meta["ttft_ms"] = rec.ttft_ms
    if rec.upstream_request_id:
        meta["upstream_request_id"] = rec.upstream_request_id
    resp = None
    body = b""
    if rec.response:
        try:
            body = decode_body(rec.response, rec.content_encoding)
        except Exception as e:  # an undecodable body: the call is still recorded
            error = error or UPSTREAM_MALFORMED
            meta["decode_error"] = str(e)[:200]
    ok = rec.status is not None and 200 <= rec.status < 300
    if body and ok and rec.stream:
        a = sse.assemble(rec.api, body)
        resp = a.doc
        if a.error is not None:
            meta["stream_error"] = a.error
            error = error or UPSTREAM_STREAM_ERROR
        elif not a.complete:
            error = error or UPSTREAM_STREAM_ERROR
    elif body and ok:
        try:
            resp = loads_json(body)
        except ValueError:
            error = error or UPSTREAM_MALFORMED
        if resp is not None and not isinstance(resp, dict):
            resp, error = None, error or UPSTREAM_MALFORMED
    elif rec.status is not None and not ok:
        error = error or f"http_{rec.status}"
        try:
            meta["error_body"] = json.loads(body) if body else None
        except ValueError:
            meta["error_body"] = body[:2000].decode("utf-8", "replace")
    if raw:
        meta.update(raw)

    try:
        ctx: dict = {}  # what the prefix cache found (a chat request's messages)
        payload, response_id = _parse(rec.api, req, resp, meta, history_for, cache, ctx)
    except SchemaValidationFailed as e:
        if resp is None:
            raise
        # The response is no message convgit can store (an empty partial stream, an odd
        # shape): the call is recorded with its request alone; the raw body keeps the rest.
        meta["response_unparsed"] = str(e)[:200]
        error = error or UPSTREAM_MALFORMED
        ctx = {}
        payload, response_id = _parse(rec.api, req, None, meta, history_for, cache, ctx)
    if not isinstance(response_id, str):
        response_id = None
    if response_id:
        meta["response_id"] = response_id
    t = payload.turn
    model = req.get("model") if isinstance(req.get("model"), str) else t.model
    info = TurnInfo(
        model=model,
        resolved_model=t.resolved_model,
        options=t.options,
        usage=t.usage,
        started_at=rec.started_at,
        duration_ms=rec.duration_ms,
        error=error,
        source=SOURCES[rec.api],
        meta={**(t.meta or {}), **meta},
    )
    payload = msgspec.structs.replace(payload, turn=info, has_response=bool(payload.response))
    if cache is not None:
        chat = ctx.get("chat")
        chain = cache.build_chain(payload.all_messages, config, known=chat, ends=(len(payload.messages),))
        if chat is not None:
            _remember_chat(cache, ctx, payload, chain)
    else:
        chain = build_chain(payload.all_messages, None, config)
    if not chain.ids:
        raise SchemaValidationFailed("the call has no messages")
    aliases = {f"call:{rec.id}": chain.tip}
    if response_id:
        aliases[response_id] = chain.tip
    payload = msgspec.structs.replace(payload, turn=msgspec.structs.replace(info, meta={**info.meta, "aliases": aliases}))
    return Built(payload, rec.thread, chain.tip, response_id, payload.all_messages, chain.ids[0], chain)


def with_raw(b: Built, raw: dict[str, str] | None) -> Built:
    """``b`` with the ids of the raw-body blobs named in its turn's meta (as ``build(raw=)``
    does: the chain, and so the tip, is the same)."""
    if not raw:
        return b
    t = b.payload.turn
    meta = dict(t.meta or {})
    aliases = meta.pop("aliases", None)
    meta.update(raw)
    if aliases is not None:
        meta["aliases"] = aliases
    return msgspec.structs.replace(b, payload=msgspec.structs.replace(b.payload, turn=msgspec.structs.replace(t, meta=meta)))


def _parse(api: str, req: dict, resp: Any, meta: dict, history_for: HistoryLookup,
           cache: PrefixCache | None = None, ctx: dict | None = None) -> tuple[Payload, Any]:
    """The payload of one API's request and response document (``resp`` None: request only)."""
    if api == sse.OPENAI_CHAT:
        doc = {**req, "response": resp} if _has(resp, "choices") else _request_only(req)
        payload = _parse_chat_cached(doc, cache, ctx) if cache is not None else None
        if payload is None:
            payload = parse_chat(doc)
        return payload, resp.get("id") if isinstance(resp, dict) else None
    if api == sse.ANTHROPIC:
        payload = anthropic_payload({**_request_only(req), "response": resp} if _has(resp, "content") else _request_only(req))
        return payload, resp.get("id") if isinstance(resp, dict) else None
    if api != sse.OPENAI_RESPONSES:
        raise SchemaValidationFailed(f"unknown API {api!r}")
    out = resp.get("output") if isinstance(resp, dict) else None
    doc = {k: v for k, v in req.items() if k not in ("output", "id", "status", "usage")}
    if isinstance(out, list) and out:
        doc["output"] = out
    prev = req.get("previous_response_id")
    history: tuple[Draft, ...] = ()
    if isinstance(prev, str) and prev:
        meta["previous_response_id"] = prev
        history = history_for(prev) or ()
        if not history:
            meta["previous_response_unknown"] = True
    if history and not doc.get("input") and "output" not in doc:
        payload = Payload(messages=())
    else:
        payload = responses_payload(doc)
    if isinstance(resp, dict):
        payload = msgspec.structs.replace(payload, turn=msgspec.structs.replace(
            payload.turn, usage=resp.get("usage") if isinstance(resp.get("usage"), dict) else None,
            resolved_model=resp.get("model") if isinstance(resp.get("model"), str) else None))
        for k in ("status", "incomplete_details"):
            if resp.get(k) is not None:
                meta[k] = resp[k]
    if history:
        msgs = payload.messages
        # Instructions are not carried over by the API, so clients send them again: the
        # same system message already at the head of the chain is not repeated.
        if msgs and msgs[0].role == "system" and history[0].role == "system" and history[0].parts == msgs[0].parts:
            msgs = msgs[1:]
        payload = msgspec.structs.replace(payload, messages=history + msgs)
    return payload, resp.get("id") if isinstance(resp, dict) else None


def _parse_chat_cached(doc: dict, cache: PrefixCache, ctx: dict) -> Payload | None:
    """``parse_chat(doc)`` with the request messages of the longest cached prefix taken as
    parsed (``ctx["chat"]``: what was found, for the chain), or None: no ``messages`` list,
    or an error (the full parse raises it, naming the right message)."""
    msgs = doc.get("messages")
    if not isinstance(msgs, list):
        return None
    found = cache.chat_prefix(msgs)
    n = found.n
    try:
        payload = parse_chat({**doc, "messages": msgs[n:]}) if n else parse_chat(doc)
    except SchemaValidationFailed:
        if not n:
            raise
        return None
    if n:
        payload = msgspec.structs.replace(payload, messages=found.drafts + payload.messages)
    ctx["chat"] = found
    answer = doc.get("response")
    if _has(answer, "choices") and isinstance(answer["choices"][0], dict):
        ctx["answer"] = answer["choices"][0].get("message")
    return payload


def _remember_chat(cache: PrefixCache, ctx: dict, payload: Payload, chain: Chain) -> None:
    """Teach the cache this call's request messages and answer, as the next call of the
    conversation re-sends them (found again at the request's end and at the answer's: a
    client re-sends the answer in its own shape, maybe not byte for byte)."""
    found = ctx["chat"]
    keys = found.keys
    drafts = payload.messages
    if isinstance(ctx.get("answer"), dict) and len(payload.response) == 1:
        keys = [*keys, message_key(ctx["answer"])]
        drafts = payload.all_messages
    if len(drafts) == len(chain.ids):
        cache.add_chat(keys, drafts, chain, (len(found.keys), len(keys)))


def _has(resp: Any, key: str) -> bool:
    return isinstance(resp, dict) and isinstance(resp.get(key), list) and bool(resp[key])


def _request_only(req: dict) -> dict:
    return {k: v for k, v in req.items() if k != "response"}


def summary(rec: CallRecord, built: Built | None, result: Any = None, problem: str | None = None,
            recovered: bool = False) -> dict:
    """The one-line-per-call log entry (``convgit serve --json`` prints it as JSON).
    ``recovered``: the call was found in the store already when its commit was tried again
    (a committer died after committing it, before its line was written): the line is marked
    so, and ``new_messages`` is null (what that commit added is not known here)."""
    usage = built.payload.turn.usage if built else None
    u = usage or {}
    doc = {
        "call": rec.id,
        "api": rec.api,
        "model": (built.payload.turn.resolved_model or built.payload.turn.model) if built else None,
        "status": rec.status,
        "stream": rec.stream,
        "thread": getattr(result, "thread", None),
        "tip": getattr(result, "tip", None),
        "new_messages": getattr(result, "new_messages", None),
        "input_tokens": u.get("input_tokens", u.get("prompt_tokens")),
        "output_tokens": u.get("output_tokens", u.get("completion_tokens")),
        "duration_ms": rec.duration_ms,
        "ttft_ms": rec.ttft_ms,
        "error": built.payload.turn.error if built else rec.error,
    }
    if problem:
        doc["not_recorded"] = problem
    if recovered:
        doc["recovered"] = True
    return doc
