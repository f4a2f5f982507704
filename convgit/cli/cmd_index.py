"""index sync: keep this store's index current from a remote without its objects (docs/remotes.md)."""

from __future__ import annotations

from typing import Optional

import typer

from .. import api
from . import output, progress
from .app import _Group, app, get_repo

index_app = typer.Typer(cls=_Group, help="The index kept from a remote without a local copy of the objects (index sync).",
                        invoke_without_command=True, rich_markup_mode=None,
                        context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(index_app, name="index")


_size = output.human_size  # (one formatter: cli/output.py)


@index_app.callback()
def index_main(ctx: typer.Context) -> None:
    """The index kept from a remote without a local copy of the objects (index sync)."""
    if ctx.invoked_subcommand is None:
        output.line(ctx.get_help())


@index_app.command("sync")
def index_sync_cmd(
    remote: Optional[str] = typer.Option(None, "--from", metavar="REMOTE",
                                         help="The remote (default: origin, or the only one)."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print nothing but warnings and errors."),
    json_: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """Bring this store's threads and index (SQLite or PostgreSQL) up to REMOTE's refs,
    reading only the new objects from its packs by byte range and storing none: the store
    becomes index-only ([store] objects_from = REMOTE; log, show, search read through it)."""
    output.set_json(json_)
    with progress.Transfer("syncing the index", on=progress.enabled(json_=json_, quiet=quiet),
                           after="moving threads, indexing") as tick:
        rep = api.index_sync(get_repo(), remote, progress=tick)
    if not output.report(rep, json_=json_, quiet=quiet):
        return
    output.line(f"index synced from {rep.remote} ({rep.url}): {rep.moved} thread(s) moved, "
                f"read {_size(rep.bytes_read)} of {_size(rep.pack_bytes)} in {rep.packs} pack(s) by range "
                f"({rep.requests} reads), {_size(rep.idx_bytes)} of pack indexes")
