"""remote (add, list, remove, rename), push, fetch, pull, clone: remotes (docs/remotes.md)."""

from __future__ import annotations

from typing import Optional

import typer

from .. import api
from ..ids import short
from . import output, progress
from .app import _Group, app, get_repo
from .params import QUIET_OPT, complete_thread

JSON_OPT = typer.Option(False, "--json", help="Output JSON.")
PROFILE_OPT = typer.Option(None, "--profile", metavar="NAME",
                           help="The AWS profile (~/.aws/config, ~/.aws/credentials) an s3:// remote reads its keys, "
                           "region and endpoint from (default: AWS_PROFILE, else default); its name is kept, never a key.")
REMOTE_ARG = typer.Argument(None, metavar="REMOTE", help="The remote (default: origin, or the only one).")

remote_app = typer.Typer(cls=_Group, help="Manage remotes: other places (a directory, s3://bucket/prefix) to push to and pull from.",
                         invoke_without_command=True, rich_markup_mode=None,
                         context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(remote_app, name="remote")


_size = output.human_size  # (one formatter: cli/output.py)


def _list(json_: bool) -> None:
    output.set_json(json_)
    rows = api.list_remotes(get_repo())
    if json_:
        output.emit_json(rows)
        return
    for r in rows:
        extra = f"  (endpoint {r['endpoint']})" if r.get("endpoint") else ""
        output.line(f"{r['name']}\t{r['url']}{extra}")


@remote_app.callback()
def remote_list(ctx: typer.Context, json_: bool = JSON_OPT) -> None:
    """List remotes (name and URL)."""
    if ctx.invoked_subcommand is None:
        _list(json_)


@remote_app.command("list")
def remote_list_cmd(json_: bool = JSON_OPT) -> None:
    """List remotes (name and URL)."""
    _list(json_)


@remote_app.command("add")
def remote_add(
    name: str = typer.Argument(..., metavar="NAME"),
    url: str = typer.Argument(..., metavar="URL", help="A directory, file://PATH or s3://BUCKET/PREFIX."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", metavar="URL",
                                           help="An S3-compatible server (MinIO, SeaweedFS, R2): its address."),
    region: Optional[str] = typer.Option(None, "--region", help="The S3 region (default: AWS_REGION, or the profile's)."),
    profile: Optional[str] = PROFILE_OPT,
    json_: bool = JSON_OPT,
) -> None:
    """Add remote NAME at URL (written to config.toml as [remote.NAME])."""
    output.set_json(json_)
    doc = api.add_remote(get_repo(), name, url, endpoint=endpoint, region=region, profile=profile)
    output.emit_json(doc) if json_ else output.info(f"added remote {name} ({url})")


@remote_app.command("remove")
def remote_remove(name: str = typer.Argument(..., metavar="NAME"), json_: bool = JSON_OPT) -> None:
    """Remove remote NAME: its config, its remote-tracking refs and its cache (the remote itself is untouched)."""
    output.set_json(json_)
    doc = api.remove_remote(get_repo(), name)
    output.emit_json(doc) if json_ else output.info(f"removed remote {name}")


@remote_app.command("rename")
def remote_rename(old: str = typer.Argument(..., metavar="OLD"), new: str = typer.Argument(..., metavar="NEW"),
                  json_: bool = JSON_OPT) -> None:
    """Rename remote OLD to NEW (its remote-tracking refs follow)."""
    output.set_json(json_)
    doc = api.rename_remote(get_repo(), old, new)
    output.emit_json(doc) if json_ else output.info(f"renamed remote {old} to {new}")


def _render(rep, *, json_: bool, quiet: bool, verb: str) -> None:
    if not output.report(rep, json_=json_, quiet=quiet):
        return
    changed = rep.changed()  # (a no-op's rows are not even built)
    if not changed and not rep.bytes:
        output.line("Already up to date." if verb != "pushed" else "Everything up to date.")
        return
    for t in changed:
        extra = f" as {t['as']}" if t.get("as") and t["as"] != t["thread"] else ""
        output.line(f"{t['action']:<12} {t['thread']}{extra} {short(t['old']) or '-'} -> {short(t['new']) or '-'}")
    output.line(f"{verb} {rep.packs} pack(s), {_size(rep.bytes)}, {rep.objects} object(s)"
                + (f"; {rep.packs_skipped} pack(s) already there" if rep.packs_skipped else "")
                + f" ({rep.remote}, generation {rep.generation})")


@app.command("push")
def push_cmd(
    remote: Optional[str] = REMOTE_ARG,
    threads: Optional[list[str]] = typer.Argument(None, metavar="THREAD...", autocompletion=complete_thread,
                                                  help="Threads to push (default: all); LOCAL:REMOTE pushes LOCAL under another name."),
    force: bool = typer.Option(False, "--force", "-f", help="Move diverged threads on the remote anyway (the old tip is "
                               "recorded in the remote's refs document and in the reflog of refs/remotes/REMOTE/THREAD)."),
    quiet: bool = QUIET_OPT,
    json_: bool = JSON_OPT,
) -> None:
    """Upload what the remote lacks (whole packs, each once; an interrupted push resumes)
    and move its threads. Fast-forward only: a thread the remote has moved elsewhere is
    refused with non_fast_forward (pull first, or push LOCAL:NEWNAME, or --force)."""
    output.set_json(json_)
    with progress.Transfer("pushing", on=progress.enabled(json_=json_, quiet=quiet), after="moving the remote's threads") as tick:
        rep = api.push(get_repo(), remote, threads or None, force=force, progress=tick)
    _render(rep, json_=json_, quiet=quiet, verb="pushed")


@app.command("fetch")
def fetch_cmd(remote: Optional[str] = REMOTE_ARG, quiet: bool = QUIET_OPT, json_: bool = JSON_OPT) -> None:
    """Download what the remote has and this store lacks (every object verified as merge
    does) and record its threads as refs/remotes/REMOTE/THREAD (threads --remotes; usable as
    revisions, e.g. log origin/main). Threads here do not move."""
    output.set_json(json_)
    with progress.Transfer("fetching", on=progress.enabled(json_=json_, quiet=quiet), after="verifying") as tick:
        rep = api.fetch(get_repo(), remote, progress=tick)
    _render(rep, json_=json_, quiet=quiet, verb="fetched")


@app.command("pull")
def pull_cmd(remote: Optional[str] = REMOTE_ARG, quiet: bool = QUIET_OPT, json_: bool = JSON_OPT) -> None:
    """fetch, then merge's rules per thread: new → created, behind → fast-forward, ahead →
    kept, diverged → both kept (the remote's as NAME-merged-<tip>)."""
    output.set_json(json_)
    with progress.Transfer("pulling", on=progress.enabled(json_=json_, quiet=quiet),
                           after="verifying, moving threads, indexing") as tick:
        rep = api.pull(get_repo(), remote, progress=tick)
    _render(rep, json_=json_, quiet=quiet, verb="pulled")


@app.command("clone")
def clone_cmd(
    url: str = typer.Argument(..., metavar="URL", help="A directory, file://PATH or s3://BUCKET/PREFIX."),
    directory: Optional[str] = typer.Argument(None, metavar="DIR", help="Where (default: the URL's last part)."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", metavar="URL", help="An S3-compatible server's address."),
    region: Optional[str] = typer.Option(None, "--region", help="The S3 region."),
    profile: Optional[str] = PROFILE_OPT,
    quiet: bool = QUIET_OPT,
    json_: bool = JSON_OPT,
) -> None:
    """A new store in DIR with every thread of the remote at URL (as remote origin), its
    index built, HEAD on the remote's head thread."""
    output.set_json(json_)
    with progress.Transfer("cloning", on=progress.enabled(json_=json_, quiet=quiet),
                           after="verifying, moving threads, indexing") as tick:
        repo, rep = api.clone(url, directory, endpoint=endpoint, region=region, profile=profile, progress=tick)
    repo.close()
    _render(rep, json_=json_, quiet=quiet, verb="cloned")
