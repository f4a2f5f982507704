"""serve: the logging proxy (convgit.serve; needs the ``serve`` extra)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Optional

import typer

from ..errors import InvalidInput
from . import output
from .app import app, get_repo

_print_lock = threading.Lock()


def _line(text: str, *, err: bool = False) -> None:
    out = sys.stderr if err else sys.stdout
    with _print_lock:
        out.write(text + "\n")
        out.flush()


def _human(doc: dict) -> str:
    if doc.get("not_recorded"):
        return f"{doc['api']} call {doc['call'][:8]} NOT recorded: {doc['not_recorded']}"
    toks = ""
    if doc.get("input_tokens") is not None or doc.get("output_tokens") is not None:
        toks = f" {doc.get('input_tokens') or 0}+{doc.get('output_tokens') or 0} tok"
    err = f" error={doc['error']}" if doc.get("error") else ""
    return (f"{doc.get('model') or '?'} -> {doc.get('thread')} +{doc.get('new_messages') or 0} msg{toks} "
            f"{doc['duration_ms']} ms (status {doc.get('status')}){err}")


@app.command("serve")
def serve_cmd(
    host: Optional[str] = typer.Option(None, "--host", help="Address to listen on (default 127.0.0.1; loopback only unless --allow-remote)."),
    port: Optional[int] = typer.Option(None, "--port", help="Port (default 8787; 0 picks a free one)."),
    openai_upstream: Optional[str] = typer.Option(None, "--openai-upstream", metavar="URL", help="OpenAI-compatible upstream base URL (default https://api.openai.com)."),
    anthropic_upstream: Optional[str] = typer.Option(None, "--anthropic-upstream", metavar="URL", help="Anthropic upstream base URL (default https://api.anthropic.com)."),
    thread: Optional[str] = typer.Option(None, "--thread", help="Log every call to this thread (trusted; a conflicting history forks)."),
    no_store_raw: bool = typer.Option(False, "--no-store-raw", help="Do not keep the raw request and response bodies as blobs."),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="Allow a non-loopback --host (needs --token-file)."),
    token_file: Optional[Path] = typer.Option(None, "--token-file", metavar="FILE", help="Clients must send 'X-Convgit-Token: Bearer <token in FILE>'."),
    timeout: str = typer.Option("600", "--timeout", metavar="SECONDS", help="Upstream timeout in seconds."),
    ca_file: Optional[Path] = typer.Option(None, "--ca-file", metavar="FILE", help="PEM certificates to trust for https upstreams, besides certifi's bundle."),
    upstream_proxy: Optional[str] = typer.Option(None, "--upstream-proxy", metavar="URL", help="Reach the upstreams through this HTTP proxy (http://[user:password@]host:port; CONNECT for https)."),
    committer: str = typer.Option("process", "--committer", metavar="process|thread", help="Commit in a process of its own (the default: the relay keeps a core) or in a thread of the server's."),
    drain: bool = typer.Option(False, "--drain", help="Only commit what the spool holds from stopped servers, then exit."),
    json_: bool = typer.Option(False, "--json", help="One JSON line per call on stdout (and one when listening)."),
) -> None:
    """Run an OpenAI- and Anthropic-compatible logging proxy: every call is relayed and stored."""
    output.set_json(json_)
    try:
        import convgit.serve as serve
    except ImportError as e:
        raise InvalidInput(f"convgit serve needs the serve extra: pip install 'convgit[serve]' ({e})") from e
    from ..config import load_serve_settings, parse_seconds

    repo = get_repo()
    conf = load_serve_settings(repo.path / "config.toml")

    def say(doc: dict) -> None:
        _line(json.dumps(doc, ensure_ascii=False) if json_ else _human(doc))

    def warn(text: str) -> None:
        _line(f"convgit serve: warning: {text}", err=True)

    if drain:
        n = serve.drain(repo.path, on_call=say, warn=warn)
        if json_:
            _line(json.dumps({"status": "drained", "recorded": n}))
        else:
            _line(f"convgit serve: {n} spooled call(s) recorded", err=True)
        return
    try:  # (the relay's stack, aiohttp and starlette: not needed by --drain)
        from convgit.serve.proxy import redact_url
    except ImportError as e:
        raise InvalidInput(f"convgit serve needs the serve extra: pip install 'convgit[serve]' ({e})") from e
    opts = serve.ServeOptions(
        host=host or conf.get("host", serve.DEFAULT_HOST),
        port=port if port is not None else conf.get("port", serve.DEFAULT_PORT),
        openai_upstream=openai_upstream or conf.get("openai_upstream", serve.OPENAI_UPSTREAM),
        anthropic_upstream=anthropic_upstream or conf.get("anthropic_upstream", serve.ANTHROPIC_UPSTREAM),
        thread=thread or conf.get("thread"),
        store_raw=not no_store_raw,
        allow_remote=allow_remote,
        token=serve.read_token_file(token_file) if token_file is not None else None,
        timeout=parse_seconds(timeout, "--timeout"),
        committer=committer,
        ca_file=str(ca_file) if ca_file is not None else conf.get("ca_file"),
        upstream_proxy=upstream_proxy or conf.get("upstream_proxy"),
    )
    serve.check_options(opts)

    def listening(url: str) -> None:
        if json_:
            _line(json.dumps({"status": "listening", "url": url, "store": str(repo.path),
                              "openai_upstream": opts.openai_upstream, "anthropic_upstream": opts.anthropic_upstream,
                              "upstream_proxy": redact_url(opts.upstream_proxy) if opts.upstream_proxy else None}))
        else:
            via = f" via {redact_url(opts.upstream_proxy)}" if opts.upstream_proxy else ""
            _line(f"convgit serve: listening on {url} (store {repo.path}); "
                  f"OpenAI -> {opts.openai_upstream}, Anthropic -> {opts.anthropic_upstream}{via}", err=True)

    server = serve.Server(repo.path, opts, fsync=repo.config.fsync, on_listen=listening, on_call=say, warn=warn)
    repo.close()  # the committer thread opens its own
    server.run()
