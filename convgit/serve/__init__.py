"""``convgit serve``: an OpenAI- and Anthropic-compatible logging proxy (docs/serve.md).

Point a client at it (``base_url="http://127.0.0.1:8787/v1"``) and every Chat Completions,
Responses and Messages call is relayed to the upstream unchanged and stored: the request's
history deduplicated (only the new tail is written), the answer assembled from the stream,
a ``call`` turn with model, usage, timing, status and error. The path of a call:

    client → proxy (relay, byte for byte) → upstream
                 └→ spool (durable, group-committed) → committer (a process of its own, worker.py;
                                                             or a thread) → convgit.commit.commit_many (+ embed.on_commit)

Needs the ``serve`` extra (starlette, uvicorn, aiohttp; uvloop and httptools when present), imported only here: no other command
pays for them. ``ServeOptions`` + ``Server`` are the library entry points; ``convgit serve``
(cli/cmd_serve.py) renders.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..config import is_loopback
from ..errors import InvalidInput

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
OPENAI_UPSTREAM = "https://api.openai.com"
ANTHROPIC_UPSTREAM = "https://api.anthropic.com"
GC_YOUNG = 50_000  # allocations between young collections while serving (Python's default: 700)
GC_OLDER = (20, 50)  # young collections per middle one, middle ones per full one (default: 10, 10)


@dataclass
class ServeOptions:
    """How to serve: where to listen, the upstreams, the default thread, raw bodies kept or
    not, remote access (only with a token), the upstream timeout in seconds."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    openai_upstream: str = OPENAI_UPSTREAM
    anthropic_upstream: str = ANTHROPIC_UPSTREAM
    thread: str | None = None
    store_raw: bool = True
    allow_remote: bool = False
    token: str | None = None
    timeout: float = 600.0
    committer: str = "process"  # "process": a worker process commits (worker.py); "thread": a thread of the server's
    ca_file: str | None = None  # PEM certificates trusted for https upstreams besides certifi's bundle
    upstream_proxy: str | None = None  # an HTTP(S) proxy the upstream connections go through (CONNECT for https)
    warnings: list[str] = field(default_factory=list)


def check_options(opts: ServeOptions) -> None:
    """Refuse what would expose the store or the keys: a non-loopback host without
    ``allow_remote`` and a token, a bad port, a bad upstream or thread name."""
    from ..ids import check_thread_name

    if not is_loopback(opts.host):
        if not opts.allow_remote:
            raise InvalidInput(f"refusing to listen on {opts.host}, which is not a loopback address: "
                               "give --allow-remote and --token-file to serve other machines")
        if not opts.token:
            raise InvalidInput("--allow-remote needs --token-file (clients then send X-Convgit-Token)")
    if not (0 <= opts.port <= 65535):
        raise InvalidInput(f"--port must be 0-65535, not {opts.port}")
    for name, url in (("openai", opts.openai_upstream), ("anthropic", opts.anthropic_upstream)):
        if not url.startswith(("http://", "https://")):
            raise InvalidInput(f"the {name} upstream must be an http(s) URL, not {url!r}")
    if opts.thread is not None:
        check_thread_name(opts.thread)
    if opts.timeout <= 0:
        raise InvalidInput("--timeout must be positive")
    if opts.committer not in ("process", "thread"):
        raise InvalidInput(f"--committer must be process or thread, not {opts.committer!r}")
    if opts.upstream_proxy is not None:
        from urllib.parse import urlsplit

        from .proxy import redact_url

        try:
            u = urlsplit(opts.upstream_proxy)
            ok = u.scheme in ("http", "https") and bool(u.hostname) and (u.port is None or u.port > 0)
        except ValueError:  # (a bad port, an unclosed [IPv6 address)
            ok = False
        if not ok:
            raise InvalidInput("--upstream-proxy must be an http(s) URL, http://[user:password@]host:port, "
                               f"not {redact_url(opts.upstream_proxy)!r}")
    if opts.ca_file is not None:
        from .proxy import tls_context

        tls_context(opts.ca_file)  # (a file that is missing or holds no certificate: refused before listening)


def read_token_file(path: str | Path) -> str:
    """The access token in ``path`` (first line, stripped); invalid_input if unreadable or empty."""
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read the token file {path}: {e}") from e
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if len(token) < 8:
        raise InvalidInput(f"the token in {path} is empty or shorter than 8 characters")
    return token


class Server:
    """The proxy, its spool writer and its committer, for the store at ``repo_path``.

    ``run()`` serves until interrupted (SIGINT/SIGTERM); on the way out every spooled call is
    committed (or left in the spool if the store refuses, for the next start).
    ``on_listen(url)`` is called once the socket is bound; ``on_call(summary)`` once per
    recorded call; ``warn(text)`` for problems that never fail a call."""

    def __init__(self, repo_path: Path, opts: ServeOptions, *, fsync: bool = True,
                 on_listen: Callable[[str], None] | None = None, on_call: Callable[[dict], None] | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        from ..repository import Repository
        from .proxy import Proxy, ProxySettings
        from .recorder import Committer
        from .record import encode_record
        from .spool import SPOOL_DIR, SpoolWriter

        check_options(opts)
        self.repo_path = repo_path
        self.opts = opts
        self.on_listen = on_listen or (lambda url: None)
        self.warn = warn or (lambda text: None)
        if opts.committer == "process" and sys.executable:
            from .worker import CommitterProcess

            self.committer = CommitterProcess(repo_path, on_call=on_call or (lambda doc: None), warn=self.warn)
        else:
            self.committer = Committer(repo_path, open_repo=lambda: Repository.open(repo_path),
                                       on_call=on_call or (lambda doc: None), warn=self.warn)
        self.writer = SpoolWriter(repo_path / SPOOL_DIR, fsync=fsync, deliver=self.committer.deliver, warn=self.warn)
        self.committer.writer = self.writer
        if opts.committer == "process":
            self.writer.on_removed = getattr(self.committer, "segment_removed", None)
        self._encode = encode_record
        settings = ProxySettings(openai_upstream=opts.openai_upstream, anthropic_upstream=opts.anthropic_upstream,
                                 thread=opts.thread, store_raw=opts.store_raw, token=opts.token, timeout=opts.timeout,
                                 ca_file=opts.ca_file, upstream_proxy=opts.upstream_proxy)
        self.proxy = Proxy(settings, self._spool, config=_config(repo_path), offer=self.committer.offer,
                           cache=self.committer.prefix)
        self.url: str | None = None

    def _spool(self, record, expect_build: bool = False) -> "asyncio.Future":
        """Submit ``record`` to the spool now; the future is done once it is durable.
        ``expect_build``: the proxy will offer its build of the call (``Committer.offer``)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def done() -> None:
            loop.call_soon_threadsafe(_resolve, fut)

        if expect_build:
            self.committer.expect(record.id)
        self.writer.submit(self._encode(record), record, done)
        return fut

    def bind(self) -> socket.socket:
        """The listening socket (port 0: an ephemeral one, named by ``self.url``)."""
        family = socket.AF_INET6 if ":" in self.opts.host.strip("[]") else socket.AF_INET
        # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP
        # (with Nagle on, each small response waits ~40 ms for the client's delayed ACK).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.opts.host.strip("[]"), self.opts.port))
        except OSError as e:
            sock.close()
            raise InvalidInput(f"cannot listen on {self.opts.host}:{self.opts.port}: {e.strerror or e}") from e
        sock.listen(2048)
        sock.set_inheritable(True)
        host, port = sock.getsockname()[:2]
        self.url = f"http://{host if family == socket.AF_INET else f'[{host}]'}:{port}"
        return sock

    def run(self) -> None:
        """Serve until interrupted, then commit what is spooled."""
        import logging

        import uvicorn

        from .proxy import _UpstreamBroke, make_app

        class _Quiet(logging.Filter):
            def filter(self, rec: logging.LogRecord) -> bool:  # a broken upstream stream is relayed, not a bug
                return not (rec.exc_info and isinstance(rec.exc_info[1], _UpstreamBroke))

        logging.getLogger("uvicorn.error").addFilter(_Quiet())
        sock = self.bind()
        # The committer is CPU-bound Python in this process: with the default 5 ms switch
        # interval a request waits up to that long for the GIL while a batch is committed.
        # 0.5 ms hands the event loop the GIL back ten times sooner (the committer still gets
        # the rest of the CPU).
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, 0.0005))
        # The cyclic collector: each call allocates thousands of short-lived objects (decoded
        # JSON, the chain's drafts), so with the default threshold a young collection runs every
        # 700 allocations and older ones often walk the prefix cache and everything loaded.
        # What exists now is frozen (never scanned again) and a young collection waits for
        # GC_YOUNG allocations: 5-8% less CPU a call (docs/performance.md "Sixth version").
        thresholds = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(GC_YOUNG, *GC_OLDER)
        self.committer.start()
        app = make_app(self.proxy, on_start=lambda: self.on_listen(self.url))
        # (the upstream's own Server and Date headers are relayed: uvicorn adds none)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", server_header=False,
                                date_header=False, timeout_graceful_shutdown=10, loop="auto")

        class _Uvicorn(uvicorn.Server):
            def handle_exit(self, sig, frame) -> None:
                # Stop gracefully and return (uvicorn would raise the signal again after
                # shutting down, killing the process before the spool is committed).
                super().handle_exit(sig, frame)
                self._captured_signals.clear()

        try:
            _Uvicorn(config).run(sockets=[sock])
        finally:
            sock.close()
            self.writer.close()
            self.committer.close()
            sys.setswitchinterval(switch)
            gc.set_threshold(*thresholds)
            gc.unfreeze()


def _config(repo_path: Path):
    """The store's config (the proxy hashes chains with it), None when it cannot be read
    (the committer then reports the store's problem)."""
    from ..config import load_config

    try:
        return load_config(repo_path / "config.toml")
    except Exception:  # noqa: BLE001
        return None


def _resolve(fut) -> None:
    if not fut.done():
        fut.set_result(None)


def drain(repo_path: Path, *, on_call: Callable[[dict], None] | None = None,
          warn: Callable[[str], None] | None = None) -> int:
    """Commit what spool segments left by stopped servers hold (``convgit serve --drain``).
    Returns how many calls were recorded."""
    from ..repository import Repository
    from .recorder import Committer

    box: dict = {}

    def open_repo():
        box["repo"] = Repository.open(repo_path)
        return box["repo"]

    calls = []
    c = Committer(repo_path, open_repo=open_repo, on_call=lambda d: (calls.append(d), (on_call or (lambda x: None))(d)),
                  warn=warn or (lambda t: None))
    c.start()
    c.drained_leftovers.wait()
    c.close()
    return sum(1 for d in calls if "not_recorded" not in d)


__all__ = ["ServeOptions", "Server", "check_options", "drain", "is_loopback", "read_token_file"]
