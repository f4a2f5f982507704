"""The ASGI application: relay to the upstream, spool what was said, answer the client.

Routes (docs/serve.md): ``POST /v1/chat/completions``, ``POST /v1/responses`` and
``POST /v1/messages`` are relayed and logged; every other request is relayed and not logged.
The client's headers (its API key included) and body go to the upstream untouched, except
the hop-by-hop headers and convgit's own ``X-Convgit-*``; the upstream's status, headers
and body bytes come back unchanged. A streamed answer is relayed chunk by chunk as it
arrives; only the chunk holding the stream's final event waits for the spool's fsync, so a
client that received the whole answer has its call durable. Records hold no header.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import aiohttp
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from ..errors import InvalidInput
from ..ids import check_thread_name
from . import record as rec_mod
from . import sse
from .record import CallRecord

LOGGED = {"/v1/chat/completions": sse.OPENAI_CHAT, "/v1/responses": sse.OPENAI_RESPONSES, "/v1/messages": sse.ANTHROPIC}

_HISTORY = 4096  # Responses chains remembered by response id (as the committer does)
UPSTREAM_CONNECTIONS = 1000  # open connections to the upstreams at most (a request past them waits)

# What the upstream client raises when the upstream cannot be reached, breaks a response, or
# is silent past the timeout (aiohttp's timeouts are also TimeoutError)
_UPSTREAM_ERRORS = (aiohttp.ClientError, TimeoutError)
# Headers aiohttp would add to a request that lacks them: the client's headers go as they are
_NOT_ADDED = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})

_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
        "transfer-encoding", "upgrade", "host", "content-length"}


@dataclass
class ProxySettings:
    """What the proxy needs: the two upstream base URLs, the default thread, whether raw
    bodies are kept, the access token (None: no check), the upstream timeout (seconds)."""

    openai_upstream: str = "https://api.openai.com"
    anthropic_upstream: str = "https://api.anthropic.com"
    thread: str | None = None
    store_raw: bool = True
    token: str | None = None
    timeout: float = 600.0
    ca_file: str | None = None
    upstream_proxy: str | None = None  # every upstream request goes through it (https: a CONNECT tunnel)


class _UpstreamBroke(Exception):
    """The upstream's stream broke after the response started: the client's connection is
    closed the same way (uvicorn drops it), after the partial call was spooled."""


def upstream_url(base: str, path: str, query: str) -> str:
    """``base`` + the request's path (a base ending in ``/v1`` takes paths without repeating it)."""
    base = base.rstrip("/")
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    return base + path + (f"?{query}" if query else "")


def forward_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The client's headers (``raw``: as the ASGI server gave them, bytes, every repeat) as sent
    upstream: all of them (its API key included) except the hop-by-hop ones and convgit's own
    ``X-Convgit-*``. The upstream client writes a value as UTF-8, so a value is handed to it
    read as UTF-8: its bytes go out as they came (a UTF-8 ``X-Title: café`` stays that). A
    value that is not UTF-8 is read as latin-1 (it goes out re-encoded: the one case not
    byte for byte)."""
    out = []
    for k, v in raw:
        name = k.decode("latin-1")
        low = name.lower()
        if low in _HOP or low.startswith("x-convgit-"):
            continue
        try:
            out.append((name, v.decode("utf-8")))
        except UnicodeDecodeError:
            out.append((name, v.decode("latin-1")))
    return out


def _response_headers(resp: aiohttp.ClientResponse, extra: list[tuple[bytes, bytes]], *, length: int | None) -> list:
    out = [(k, v) for k, v in resp.raw_headers if k.decode("latin-1").lower() not in _HOP]
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    return out + extra


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 429: "rate_limit_error"}


class _Flags(msgspec.Struct):
    stream: Any = None


_flags = msgspec.json.Decoder(_Flags)


def wants_stream(body: bytes) -> bool:
    """Whether a request body asks for a stream (``"stream": true`` in a JSON object). Only
    that key is decoded: the history beside it (the whole conversation, re-sent on every
    call) is skipped, not built as Python objects."""
    try:
        return _flags.decode(body).stream is True
    except msgspec.ValidationError:  # not an object
        return False
    except msgspec.DecodeError:  # not strict JSON: Python's reading (NaN, Infinity), as the record's
        try:
            return json.loads(body).get("stream") is True
        except (ValueError, AttributeError):
            return False


def thread_header(headers: list[tuple[bytes, bytes]], default: str | None) -> str | None:
    """The thread a request names with ``X-Convgit-Thread`` (``default``, ``--thread``, when it
    names none or an empty one), checked as any thread name before anything is relayed.

    The value is read as UTF-8 (the bytes the client sent; HTTP's latin-1 reading would turn
    ``café`` into another name). Raises InvalidRefName (a name convgit refuses) or
    InvalidInput (not UTF-8; the header twice with different values)."""
    given = {v.strip() for k, v in headers if k.lower() == b"x-convgit-thread"} - {b""}
    if not given:
        return default
    if len(given) > 1:
        raise InvalidInput("given more than once, with different values")
    (raw,) = given
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the name is not UTF-8") from None
    return check_thread_name(name)


def error_body(api: str | None, status: int, message: str, code: str) -> bytes:
    """An error in the shape the client's SDK reads (OpenAI's or Anthropic's)."""
    if api == sse.ANTHROPIC:  # (its shape has no code: the message ends with it)
        kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        doc: dict = {"type": "error", "error": {"type": kind, "message": f"{message} ({code})"}}
    else:
        doc = {"error": {"message": message, "type": "convgit_proxy_error", "code": code, "param": None}}
    return json.dumps(doc).encode()


class Proxy:
    """The ASGI app behind Starlette's one catch-all route. ``spool(record) -> awaitable``
    returns once the record is durable (group-committed by the spool writer)."""

    def __init__(self, settings: ProxySettings, spool: Callable[..., Any], *, config=None,
                 offer: Callable[..., None] | None = None, cache=None) -> None:
        self.settings = settings
        self.spool = spool  # spool(record, expect_build=False) -> awaitable, submitted at once
        self.offer = offer or (lambda call_id, built: None)  # the build of an expected call, or None
        self.config = config  # the store's Config (how build hashes a chain), None: defaults
        self.cache = cache  # the prefixes parsed and hashed (prefix.PrefixCache, shared with the committer)
        self.session: aiohttp.ClientSession | None = None  # the upstream connections (start)
        self._history: OrderedDict[str, tuple] = OrderedDict()  # Responses: response id → chain
        self._proxy: str | None = None  # the upstream proxy's URL without credentials (start)
        self._proxy_headers: dict | None = None  # ... and its credentials, as Proxy-Authorization

    def prebuild(self, rec: CallRecord) -> "rec_mod.Built | None":
        """The whole answer's payload and tip, built before it is relayed (``X-Convgit-Tip``;
        the committer then uses it: the chain is hashed once). None when it cannot be known
        here: a Responses call continuing a response this process did not relay (the
        committer looks it up in the store), or a call that is no conversation (the committer
        says why)."""
        try:
            req_prev = rec.api == sse.OPENAI_RESPONSES and b"previous_response_id" in rec.request
            if req_prev:
                prev = json.loads(rec.request).get("previous_response_id")
                if isinstance(prev, str) and prev and prev not in self._history:
                    return None
            b = rec_mod.build(rec, history_for=self._history.get, config=self.config, cache=self.cache)
        except Exception:  # noqa: BLE001  (the committer builds it again and says why)
            return None
        if rec.api == sse.OPENAI_RESPONSES and b.response_id:
            self._history[b.response_id] = b.history
            while len(self._history) > _HISTORY:
                self._history.popitem(last=False)
        return b

    async def start(self) -> None:
        """Open the upstream client: kept-alive connections, no cookie jar (one client's
        cookies never reach another's requests), bodies as the upstream sent them (never
        decompressed), no redirect followed, no HTTP_PROXY or .netrc (trust_env off: a proxy is
        used only when named, ``upstream_proxy``). The timeout is
        per step: connecting (at most 30 s) and each read. An https upstream's certificate is
        checked against certifi's bundle, as httpx did before (the same on every system:
        some Python builds have no usable system store), and the settings' ``ca_file``."""
        t = self.settings.timeout
        if self.settings.upstream_proxy:
            self._proxy, cred = split_proxy_url(self.settings.upstream_proxy)
            if cred is not None:  # (UTF-8, as RFC 7617 has it: a password of any characters)
                import base64

                token = base64.b64encode(f"{cred[0]}:{cred[1]}".encode()).decode("ascii")
                self._proxy_headers = {"Proxy-Authorization": f"Basic {token}"}
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=UPSTREAM_CONNECTIONS, limit_per_host=0,
                                           ssl=tls_context(self.settings.ca_file)),
            timeout=aiohttp.ClientTimeout(total=None, connect=min(t, 30.0), sock_read=t),
            cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False, trust_env=False)

    async def _send(self, method: str, url: str, request: Request, body: bytes) -> aiohttp.ClientResponse:
        """Send the client's request upstream; the response's headers are read, its body not yet."""
        return await self.session.request(method, url, headers=forward_headers(scope_headers(request)), data=body,
                                          allow_redirects=False, skip_auto_headers=_NOT_ADDED,
                                          proxy=self._proxy, proxy_headers=self._proxy_headers)

    async def stop(self) -> None:
        """Close the upstream connections."""
        if self.session is not None:
            await self.session.close()
            self.session = None

    async def __call__(self, scope, receive, send) -> None:
        """Answer one ASGI request: refused (token), logged (the three APIs) or passed through."""
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        path = scope["path"]
        api = LOGGED.get(path) if scope["method"] == "POST" else None
        if self.settings.token is not None and not self._authorized(request):
            await _send_simple(send, 401, error_body(api, 401, "missing or wrong X-Convgit-Token", "unauthorized"))
            return
        if api is None:
            await self._pass_through(request, send)
        else:
            await self._logged(api, request, receive, send)

    def _authorized(self, request: Request) -> bool:
        given = request.headers.get("x-convgit-token", "")
        if given.lower().startswith("bearer "):
            given = given[7:]
        return hmac.compare_digest(given.strip().encode(), self.settings.token.encode())

    def _upstream_for(self, request: Request) -> str:
        path = request.url.path
        h = request.headers
        if path.startswith("/v1/messages") or "anthropic-version" in h or "x-api-key" in h:
            return self.settings.anthropic_upstream
        return self.settings.openai_upstream

    async def _pass_through(self, request: Request, send) -> None:
        body = await request.body()
        url = upstream_url(self._upstream_for(request), request.url.path, request.url.query)
        try:
            resp = await self._send(request.method, url, request, body)
        except _UPSTREAM_ERRORS as e:
            await _send_simple(send, 502, error_body(None, 502, f"upstream unreachable: {_describe(e)}",
                                                     rec_mod.UPSTREAM_UNREACHABLE))
            return
        try:
            await send({"type": "http.response.start", "status": resp.status,
                        "headers": _response_headers(resp, [], length=None)})
            async for chunk in resp.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except _UPSTREAM_ERRORS as e:
            raise _UpstreamBroke(_describe(e)) from e
        finally:
            resp.release()

    async def _logged(self, api: str, request: Request, receive, send) -> None:
        s = self.settings
        t0 = time.perf_counter()
        started = int(time.time() * 1000)
        body = await request.body()
        try:  # a bad name is refused before anything is relayed: no token spent, nothing to record
            thread = thread_header(scope_headers(request), s.thread)
        except InvalidInput as e:
            await _send_simple(send, 400, error_body(api, 400, f"X-Convgit-Thread: {e.message}", e.code))
            return
        stream = wants_stream(body)
        call = uuid.uuid4().hex
        extra = [(b"x-convgit-call", call.encode())]
        if thread:
            extra.append((b"x-convgit-thread", thread.encode("utf-8")))  # the bytes it came as

        def record(**kw) -> CallRecord:
            return CallRecord(id=call, api=api, request=body, stream=stream, started_at=started,
                              duration_ms=int((time.perf_counter() - t0) * 1000), thread=thread,
                              store_raw=s.store_raw, **kw)

        url = upstream_url(s.anthropic_upstream if api == sse.ANTHROPIC else s.openai_upstream,
                           request.url.path, request.url.query)
        try:
            resp = await self._send("POST", url, request, body)
        except _UPSTREAM_ERRORS as e:
            code = rec_mod.UPSTREAM_TIMEOUT if isinstance(e, TimeoutError) else rec_mod.UPSTREAM_UNREACHABLE
            await self.spool(record(error=code))
            await _send_simple(send, 502, error_body(api, 502, f"upstream: {type(e).__name__}: {_describe(e)}", code), extra)
            return
        meta = {"status": resp.status, "content_encoding": resp.headers.get("content-encoding"),
                "upstream_request_id": resp.headers.get("x-request-id") or resp.headers.get("request-id")}
        is_sse = "text/event-stream" in resp.headers.get("content-type", "")
        try:
            if is_sse:
                await self._relay_stream(resp, receive, send, extra, t0, record, meta)
            else:
                await self._relay_whole(resp, send, extra, t0, record, meta)
        finally:
            resp.release()  # (a response not read to its end: its connection is closed, not reused)

    async def _relay_whole(self, resp, send, extra, t0, record, meta) -> None:
        chunks = []
        ttft = None
        try:
            async for chunk in resp.content.iter_any():
                if ttft is None:
                    ttft = int((time.perf_counter() - t0) * 1000)
                chunks.append(chunk)
        except _UPSTREAM_ERRORS as e:
            await self.spool(record(response=b"".join(chunks), ttft_ms=ttft, error=rec_mod.UPSTREAM_STREAM_ERROR, **meta))
            await _send_simple(send, 502, error_body(None, 502, f"upstream broke: {_describe(e)}", rec_mod.UPSTREAM_STREAM_ERROR),
                               extra)
            return
        data = b"".join(chunks)
        rec = record(response=data, ttft_ms=ttft, **meta)
        ok = 200 <= resp.status < 300
        durable = self.spool(rec, expect_build=ok)  # the spool's write and fsync start now ...
        if ok:
            built = None
            try:
                built = self.prebuild(rec)  # ... and the chain is built meanwhile (the GIL is free during an fsync)
            finally:
                self.offer(rec.id, built)
            if built is not None:
                extra = [*extra, (b"x-convgit-tip", built.tip.encode())]
        await durable
        await send({"type": "http.response.start", "status": resp.status,
                    "headers": _response_headers(resp, extra, length=len(data))})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def _relay_stream(self, resp, receive, send, extra, t0, record, meta) -> None:
        state = {"chunks": [], "ttft": None, "spooled": False, "record": None}
        compressed = (meta.get("content_encoding") or "identity").lower() not in ("identity", "")
        splitter = sse.EventSplitter()

        async def spool(error: str | None) -> None:
            if not state["spooled"]:
                state["spooled"] = True
                state["record"] = record(response=b"".join(state["chunks"]), ttft_ms=state["ttft"], error=error, **meta)
                await self.spool(state["record"])

        async def relay() -> None:
            await send({"type": "http.response.start", "status": resp.status,
                        "headers": _response_headers(resp, extra, length=None)})
            async for chunk in resp.content.iter_any():
                if state["ttft"] is None:
                    state["ttft"] = int((time.perf_counter() - t0) * 1000)
                state["chunks"].append(chunk)
                if not compressed and not state["spooled"] and any(sse.is_terminal(e, d) for e, d in splitter.feed(chunk)):
                    await spool(None)  # the final event reaches the client only once the call is durable
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async def disconnected() -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return

        relay_task = asyncio.ensure_future(relay())
        watch = asyncio.ensure_future(disconnected())
        try:
            done, _ = await asyncio.wait({relay_task, watch}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the server is shutting down: keep what was said
            relay_task.cancel()
            watch.cancel()
            await asyncio.shield(spool(rec_mod.CLIENT_DISCONNECTED))
            raise
        if relay_task not in done:  # the client went away mid-stream
            relay_task.cancel()
            try:
                await relay_task
            except (asyncio.CancelledError, Exception):
                pass
            await spool(rec_mod.CLIENT_DISCONNECTED)
            return
        watch.cancel()
        exc = relay_task.exception()
        if exc is not None:
            if isinstance(exc, _UPSTREAM_ERRORS):
                await spool(rec_mod.UPSTREAM_STREAM_ERROR)
                raise _UpstreamBroke(_describe(exc)) from exc
            await spool(rec_mod.CLIENT_DISCONNECTED if isinstance(exc, OSError) else rec_mod.UPSTREAM_STREAM_ERROR)
            raise exc
        await spool(None if (compressed or state["spooled"]) else rec_mod.UPSTREAM_STREAM_ERROR)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        rec = state["record"]
        if rec is not None and rec.api == sse.OPENAI_RESPONSES and rec.error is None:
            self.prebuild(rec)  # after the last byte: only so that a whole call continuing it knows its tip


def redact_url(url: str) -> str:
    """``url`` with the credentials of its user part (a proxy's) hidden: ``user:***@`` for a
    password, ``***@`` for a user part alone (it may be a token); for anything printed."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        u = urlsplit(url)
    except ValueError:
        return "<an URL that cannot be parsed>"
    if "@" not in u.netloc:
        return url
    user, host = u.netloc.rsplit("@", 1)
    shown = f"{user.split(':', 1)[0]}:***" if ":" in user else "***"
    return urlunsplit((u.scheme, f"{shown}@{host}", u.path, u.query, u.fragment))


def split_proxy_url(url: str) -> tuple[str, tuple[str, str] | None]:
    """An upstream proxy URL as (the URL without its user part, (user, password) or None),
    percent-decoded. The credentials are handed to the HTTP client apart from the URL, so
    that no error message, which names the URL, can carry them."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    u = urlsplit(url)
    if "@" not in u.netloc:
        return url, None
    host = u.netloc.rsplit("@", 1)[1]
    bare = urlunsplit((u.scheme, host, u.path, u.query, u.fragment))
    return bare, (unquote(u.username or ""), unquote(u.password or ""))


@functools.lru_cache(maxsize=4)
def tls_context(ca_file: str | None = None):
    """The TLS settings for https upstreams: certificates verified, against certifi's bundle
    and the PEM certificates in ``ca_file`` (a company's or a local server's own CA).
    invalid_input when ``ca_file`` cannot be read or holds no certificate. Made once per
    ``ca_file`` (``check_options`` builds it to refuse a bad file, the proxy then uses it)."""
    import ssl

    import certifi

    ctx = ssl.create_default_context(cafile=certifi.where())
    if ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as e:
            raise InvalidInput(f"--ca-file {ca_file}: no certificate could be read from it ({e})") from e
    return ctx


def _describe(e: BaseException) -> str:
    """An upstream error in words (aiohttp's timeouts have none of their own)."""
    return str(e) or type(e).__name__


def scope_headers(request: Request) -> list[tuple[bytes, bytes]]:
    """The request's headers as the ASGI server gave them (raw bytes, every repeat)."""
    return list(request.scope.get("headers") or [])


async def _send_simple(send, status: int, body: bytes, extra: list | None = None) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def make_app(proxy: Proxy, *, on_start=None, on_stop=None) -> Starlette:
    """The Starlette application: one catch-all route to ``proxy``; its lifespan opens and
    closes the upstream pool (and calls ``on_start`` / ``on_stop``)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        await proxy.start()
        if on_start is not None:
            on_start()
        try:
            yield
        finally:
            await proxy.stop()
            if on_stop is not None:
                on_stop()

    return Starlette(routes=[Route("/{path:path}", endpoint=proxy)], lifespan=lifespan)
