"""Plumbing for scripts: rev-parse, cat-object, hash-object, update-ref, show-ref, reindex, path."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from .. import api
from ..errors import InvalidInput
from . import output
from .app import app, get_repo
from .params import complete_rev
from .cmd_commit import read_input

JSON_OPT = typer.Option(False, "--json", help="Output JSON.")


@app.command("rev-parse")
def rev_parse_cmd(revs: list[str] = typer.Argument(..., metavar="REV", help="Thread, HEAD, NAME~N, id or unique prefix (4+ hex).",
                                                   autocompletion=complete_rev),
                  json_: bool = JSON_OPT) -> None:
    """Print the full id each revision names."""
    output.set_json(json_)
    repo = get_repo()
    ids = [api.rev_parse(repo, r) for r in revs]
    if json_:
        output.emit_json(ids if len(ids) > 1 else ids[0])
    else:
        for i in ids:
            output.line(i)


@app.command("cat-object")
def cat_object_cmd(
    rev: str = typer.Argument(..., metavar="REV", help="An object id, unique prefix (4+ hex) or revision."),
    type_: bool = typer.Option(False, "-t", help="Print the object's type."),
    size: bool = typer.Option(False, "-s", help="Print its size in bytes."),
    pretty: bool = typer.Option(False, "-p", help="Print its content as JSON."),
    raw: bool = typer.Option(False, "--raw", help="Write its stored bytes to stdout."),
    json_: bool = JSON_OPT,
) -> None:
    """Show an object (message, turn or blob): -t type, -s size, -p content, --raw bytes."""
    output.set_json(json_)
    if sum((type_, size, pretty, raw)) != 1 and not json_:
        raise InvalidInput("give exactly one of -t, -s, -p, --raw (or --json)")
    from ..codec import type_name

    oid, data, obj = api.cat_object(get_repo(), rev)
    if raw:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    elif json_:
        output.emit_json({"id": oid, "type": type_name(obj), "size": len(data), "object": api.object_json(obj)})
    elif type_:
        output.line(type_name(obj))
    elif size:
        output.line(str(len(data)))
    else:
        output.emit_json(api.object_json(obj))


@app.command("hash-object")
def hash_object_cmd(
    file: Optional[str] = typer.Argument(None, metavar="FILE|-", help="The input (- or omitted: stdin)."),
    write: bool = typer.Option(False, "-w", help="Also store the object."),
    type_: str = typer.Option("blob", "-t", "--type", metavar="TYPE", help="blob (raw bytes), or message / turn (JSON as cat-object -p prints)."),
    json_: bool = JSON_OPT,
) -> None:
    """Compute the id FILE would have as an object (and store it with -w)."""
    output.set_json(json_)
    data = read_input(file)
    repo = get_repo()
    oid = api.hash_object(repo, data, type_=type_, write=write)
    output.emit_json({"id": oid, "type": type_, "written": write}) if json_ else output.line(oid)


@app.command("update-ref")
def update_ref_cmd(
    name: str = typer.Argument(..., metavar="NAME", help="The thread."),
    new: Optional[str] = typer.Argument(None, metavar="NEW", help="New tip (with -d: the expected current tip)."),
    old: Optional[str] = typer.Argument(None, metavar="OLD", help="Expected current tip (compare-and-swap)."),
    delete: bool = typer.Option(False, "-d", help="Delete the thread: update-ref -d NAME [OLD]."),
    create: bool = typer.Option(False, "--create", help="Fail if the thread exists."),
    json_: bool = JSON_OPT,
) -> None:
    """Move a thread to NEW, only if it is at OLD when given (compare-and-swap)."""
    output.set_json(json_)
    if delete:
        doc = api.update_ref(get_repo(), name, None, new)
    else:
        if new is None:
            raise InvalidInput("update-ref needs NEW (or -d)")
        doc = api.update_ref(get_repo(), name, new, old, create=create)
    if json_:
        output.emit_json(doc)


@app.command("show-ref")
def show_ref_cmd(json_: bool = JSON_OPT) -> None:
    """Every thread and its tip."""
    output.set_json(json_)
    refs = api.show_refs(get_repo())
    if json_:
        output.emit_json(refs)
    else:
        for name, tip in refs.items():
            output.line(f"{tip} refs/threads/{name}")


@app.command("reindex")
def reindex_cmd(json_: bool = JSON_OPT) -> None:
    """Rebuild index.sqlite from objects, refs and reflogs (it is only a cache)."""
    output.set_json(json_)
    repo = get_repo()
    from . import progress

    with progress.Counter("rebuilding the index (threads)", on=progress.enabled(json_=json_), min_items=50) as tick:
        stats = api.reindex(repo, progress=tick)
    if json_:
        output.emit_json({"status": "rebuilt", **stats})
    else:
        output.line(f"Rebuilt the index: {stats['messages']} messages in {stats['threads']} threads ({stats['seconds']}s)")


@app.command("path")
def path_cmd(json_: bool = JSON_OPT) -> None:
    """Print the store's path (the .convgit directory in use). Creates nothing: when the
    default store does not exist yet, prints where it will be (and says so on stderr)."""
    output.set_json(json_)
    doc = api.store_path()
    if json_:
        output.emit_json(doc)
        return
    output.line(doc["path"])
    if not doc["exists"]:
        output.info("convgit: no store there yet: the first command that stores something creates it")
