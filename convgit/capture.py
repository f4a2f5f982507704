"""In-process capture: log an ``openai`` or ``anthropic`` client's calls without a proxy.

    from convgit.capture import capture
    client = capture(openai.OpenAI())            # or AsyncOpenAI, Anthropic, AsyncAnthropic
    client.chat.completions.create(...)          # relayed by the SDK as usual, and logged

The wrapper is this client only (the SDK modules are not patched): ``chat.completions.create``,
``responses.create`` and ``messages.create`` are recorded with the proxy's semantics
(docs/serve.md): the same records, the same durable spool, the same committer thread, so a
stateless history stores only its new tail and a Responses chain is one thread. A streamed
call (``stream=True``) yields the SDK's events unchanged and is recorded when the stream ends
(or is closed early: ``client_disconnected``). Everything else is the client's own. Calls
are committed in the background; ``flush()`` waits for them (it runs at exit too).
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .serve import record as rec_mod
from .serve import sse

_engines: dict[Path, "_Engine"] = {}
_lock = threading.Lock()


class _Engine:
    """One store's spool writer and committer, shared by every client captured into it."""

    def __init__(self, path: Path, fsync: bool) -> None:
        from .repository import Repository
        from .serve.recorder import Committer
        from .serve.spool import SPOOL_DIR, SpoolWriter

        self.warnings: list[str] = []
        self.calls: list[dict] = []
        self.committer = Committer(path, open_repo=lambda: Repository.open(path), on_call=self.calls.append,
                                   warn=self.warnings.append)
        self.writer = SpoolWriter(path / SPOOL_DIR, fsync=fsync, deliver=self.committer.deliver, warn=self.warnings.append)
        self.committer.writer = self.writer
        self.committer.start()

    def record(self, rec: rec_mod.CallRecord) -> None:
        """Spool ``rec`` and wait until it is durable (a few fsyncs per burst, group-committed)."""
        done = threading.Event()
        self.writer.submit(rec_mod.encode_record(rec), rec, done.set)
        done.wait()

    def flush(self, timeout: float = 60) -> None:
        """Wait until every spooled call is committed."""
        self.committer.drained_leftovers.wait(timeout)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.committer._cond:
                empty = not self.committer._queue
            if empty and self.committer.idle.wait(0.05) and not self.committer._queue:
                return
            time.sleep(0.01)

    def close(self) -> None:
        """Commit what is spooled, then stop the threads."""
        self.writer.close()
        self.committer.close(60)


def _engine(repo) -> _Engine:
    from .repository import Repository

    if repo is None:
        repo = Repository.discover()
    elif isinstance(repo, (str, Path)):
        repo = Repository.open(Path(repo) if Path(repo).name == ".convgit" else Path(repo) / ".convgit")
    path, fsync = repo.path, repo.config.fsync
    with _lock:
        eng = _engines.get(path)
        if eng is None:
            eng = _engines[path] = _Engine(path, fsync)
    return eng


def flush(timeout: float = 60) -> None:
    """Wait until the calls of every captured client are committed."""
    for eng in list(_engines.values()):
        eng.flush(timeout)


@atexit.register
def _close_all() -> None:
    for eng in list(_engines.values()):
        eng.close()
    _engines.clear()


def capture(client: Any, repo=None, thread: str | None = None, *, store_raw: bool = True) -> Any:
    """``client`` (an ``openai.OpenAI``/``AsyncOpenAI`` or ``anthropic.Anthropic``/
    ``AsyncAnthropic``) wrapped so that its model calls are logged into ``repo`` (a
    Repository, a store path, or None: discovered as usual), on ``thread`` if given."""
    if thread is not None:
        from .ids import check_thread_name

        check_thread_name(thread)
    eng = _engine(repo)
    kind = type(client).__module__.split(".")[0]
    if kind not in ("openai", "anthropic"):
        raise TypeError(f"capture takes an openai or anthropic client, not {type(client).__name__}")
    routes = {("chat", "completions"): sse.OPENAI_CHAT, ("responses",): sse.OPENAI_RESPONSES} if kind == "openai" \
        else {("messages",): sse.ANTHROPIC}
    is_async = type(client).__name__.startswith("Async")
    return _Wrapped(client, (), routes, _Context(eng, thread, store_raw, is_async))


class _Context:
    def __init__(self, engine: _Engine, thread: str | None, store_raw: bool, is_async: bool) -> None:
        self.engine, self.thread, self.store_raw, self.is_async = engine, thread, store_raw, is_async


class _Wrapped:
    """The client (or one of its resources) with the logged ``create`` methods replaced."""

    def __init__(self, target: Any, path: tuple[str, ...], routes: dict, ctx: _Context) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_routes", routes)
        object.__setattr__(self, "_ctx", ctx)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        path = (*self._path, name)
        if name == "create" and self._path in self._routes:
            return _logged(value, self._routes[self._path], self._ctx)
        if name == "stream" and self._path in self._routes:
            # The SDK's helper itself, run with this wrapper as its resource: it calls
            # ``self.create(stream=True)`` (openai) or ``self._post(..., stream=True)``
            # (anthropic), which are the logged ones here; its events are the SDK's own.
            helper = getattr(type(self._target), "stream")
            return lambda *args, **kwargs: helper(self, *args, **kwargs)
        if name == "_post" and self._path in self._routes and self._routes[self._path] == sse.ANTHROPIC:
            return _logged_post(value, self._ctx)
        if any(p[: len(path)] == path for p in self._routes):
            return _Wrapped(value, path, self._routes, self._ctx)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __repr__(self) -> str:
        return f"convgit.capture({self._target!r})"


def _jsonable(v: Any) -> Any:
    if hasattr(v, "model_dump"):
        return v.model_dump(mode="json", exclude_unset=True)
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items() if not _not_given(x)}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if hasattr(v, "__iter__"):
        return [_jsonable(x) for x in v]
    return str(v)


def _not_given(v: Any) -> bool:
    return type(v).__name__ in ("NotGiven", "Omit")


def _request(kwargs: dict) -> bytes:
    body = {k: _jsonable(v) for k, v in kwargs.items()
            if not k.startswith("extra_") and k not in ("timeout",) and not _not_given(v)}
    return json.dumps(body, ensure_ascii=False).encode()


def _event_bytes(api: str, ev: Any) -> bytes:
    d = _jsonable(ev)
    data = json.dumps(d, ensure_ascii=False, separators=(",", ":"))
    if api == sse.OPENAI_CHAT:
        return f"data: {data}\n\n".encode()
    return f"event: {d.get('type')}\ndata: {data}\n\n".encode()


def _kwargs(args: tuple, kwargs: dict) -> dict:
    return kwargs


def _thread_of(kwargs: dict, default: str | None) -> str | None:
    """The thread a call names with ``extra_headers={"X-Convgit-Thread": NAME}`` (as for
    ``convgit serve``, so the same code logs through the proxy and in-process), else
    ``default``. The header is taken out of the call's headers (it is convgit's, not the
    upstream's) and checked as a thread name before the call is made: a bad name raises
    InvalidRefName and nothing is sent (as the proxy answers 400 before relaying)."""
    headers = kwargs.get("extra_headers")
    if not isinstance(headers, dict):
        return default
    keys = [k for k in headers if isinstance(k, str) and k.lower() == "x-convgit-thread"]
    if not keys:
        return default
    values = {headers[k] for k in keys}
    kwargs["extra_headers"] = {k: v for k, v in headers.items() if k not in keys}
    values = {v.strip() if isinstance(v, str) else v for v in values} - {""}
    if not values:
        return default
    if len(values) > 1:
        from .errors import InvalidInput

        raise InvalidInput("X-Convgit-Thread: given more than once, with different values")
    from .ids import check_thread_name

    return check_thread_name(values.pop())


def _logged(create, api: str, ctx: _Context, request_of=_kwargs):
    """``create`` logging each call (sync or async, streamed or not). ``request_of(args,
    kwargs)``: the request document of a call (default: its keyword arguments)."""

    def record(kwargs, t0, started, *, response=b"", status=None, stream=False, ttft=None, error=None,
               thread=ctx.thread):
        rec = rec_mod.CallRecord(
            id=uuid.uuid4().hex, api=api, request=_request(kwargs), response=response, stream=stream, status=status,
            started_at=started, duration_ms=int((time.perf_counter() - t0) * 1000), ttft_ms=ttft, error=error,
            thread=thread, store_raw=ctx.store_raw)
        try:
            ctx.engine.record(rec)
        except Exception as e:  # logging never fails the caller's call
            ctx.engine.warnings.append(f"capture: call not spooled ({e})")

    def failed(kwargs, t0, started, e, rec=record):
        resp = getattr(e, "response", None)
        status = getattr(e, "status_code", None)
        body = getattr(resp, "content", b"") if resp is not None else b""
        rec(kwargs, t0, started, response=body if isinstance(body, bytes) else b"", status=status,
            error=None if status else rec_mod.UPSTREAM_UNREACHABLE)

    if ctx.is_async or inspect.iscoroutinefunction(create):
        async def acreate(*args, **kwargs):
            t0, started = time.perf_counter(), int(time.time() * 1000)
            rec = functools.partial(record, thread=_thread_of(kwargs, ctx.thread))
            req = request_of(args, kwargs)
            try:
                result = await create(*args, **kwargs)
            except Exception as e:
                failed(req, t0, started, e, rec)
                raise
            if req.get("stream") is True:
                return _AsyncStream(result, api, req, t0, started, rec)
            rec(req, t0, started, response=_jsonable_bytes(result), status=200)
            return result
        return acreate

    def screate(*args, **kwargs):
        t0, started = time.perf_counter(), int(time.time() * 1000)
        rec = functools.partial(record, thread=_thread_of(kwargs, ctx.thread))
        req = request_of(args, kwargs)
        try:
            result = create(*args, **kwargs)
        except Exception as e:
            failed(req, t0, started, e, rec)
            raise
        if req.get("stream") is True:
            return _Stream(result, api, req, t0, started, rec)
        rec(req, t0, started, response=_jsonable_bytes(result), status=200)
        return result
    return screate


def _logged_post(post, ctx: _Context):
    """The resource's ``_post`` as anthropic's ``messages.stream`` helper calls it: a streamed
    ``/v1/messages`` request is logged as ``messages.create(stream=True)`` would be (its
    ``body`` is the request); anything else is passed on."""
    logged = _logged(post, sse.ANTHROPIC, ctx, request_of=lambda args, kwargs: kwargs["body"])

    def call(path, *args, **kwargs):
        body = kwargs.get("body")
        if path != "/v1/messages" or kwargs.get("stream") is not True or not isinstance(body, dict) \
                or body.get("stream") is not True:
            return post(path, *args, **kwargs)
        return logged(path, *args, **kwargs)
    return call


def _jsonable_bytes(result: Any) -> bytes:
    return json.dumps(_jsonable(result), ensure_ascii=False).encode()


class _StreamBase:
    def __init__(self, stream, api, kwargs, t0, started, record) -> None:
        self._stream, self._api, self._kwargs = stream, api, kwargs
        self._t0, self._started, self._record = t0, started, record
        self._parts: list[bytes] = []
        self._ttft = None
        self._done = False

    def _event(self, ev) -> None:
        if self._ttft is None:
            self._ttft = int((time.perf_counter() - self._t0) * 1000)
        self._parts.append(_event_bytes(self._api, ev))

    def _finish(self, error: str | None) -> None:
        if self._done:
            return
        self._done = True
        if error is None and self._api == sse.OPENAI_CHAT:
            self._parts.append(b"data: [DONE]\n\n")
        self._record(self._kwargs, self._t0, self._started, response=b"".join(self._parts), status=200, stream=True,
                     ttft=self._ttft, error=error)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Stream(_StreamBase):
    """The SDK's stream, yielded through unchanged; the call is recorded when it ends."""

    def __iter__(self):
        try:
            for ev in self._stream:
                self._event(ev)
                yield ev
        except GeneratorExit:
            self._finish(rec_mod.CLIENT_DISCONNECTED)
            raise
        except Exception:
            self._finish(rec_mod.UPSTREAM_STREAM_ERROR)
            raise
        self._finish(None)

    def close(self) -> None:
        """Close the stream (an unfinished one is recorded as ``client_disconnected``)."""
        self._finish(rec_mod.CLIENT_DISCONNECTED)
        self._stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _AsyncStream(_StreamBase):
    """The async SDK's stream, yielded through unchanged; recorded when it ends."""

    async def __aiter__(self):
        try:
            async for ev in self._stream:
                self._event(ev)
                yield ev
        except GeneratorExit:
            self._finish(rec_mod.CLIENT_DISCONNECTED)
            raise
        except Exception:
            self._finish(rec_mod.UPSTREAM_STREAM_ERROR)
            raise
        self._finish(None)

    async def close(self) -> None:
        """Close the stream (an unfinished one is recorded as ``client_disconnected``)."""
        self._finish(rec_mod.CLIENT_DISCONNECTED)
        await self._stream.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
