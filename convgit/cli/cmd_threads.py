"""threads (list, rename, delete), switch, fork."""

from __future__ import annotations

from typing import Optional

import typer

from .. import api
from ..ids import short
from ..refs import broken_ref_fix
from . import output
from .app import _Group, app, get_repo

JSON_OPT = typer.Option(False, "--json", help="Output JSON.")

threads_app = typer.Typer(cls=_Group, help="List, rename and delete threads.", invoke_without_command=True,
                          rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(threads_app, name="threads")


@threads_app.callback()
def threads_list(ctx: typer.Context, json_: bool = JSON_OPT) -> None:
    """List threads: name, tip, message count, title, where each was forked from."""
    if ctx.invoked_subcommand is not None:
        return
    output.set_json(json_)
    rows = api.threads(get_repo())
    if json_:
        output.emit_json(rows)
        return
    if not rows:
        output.info("no threads yet (convgit commit FILE to store a conversation)")
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        mark = "* " if r["current"] else "  "
        if r["broken"]:
            output.styled([(mark, "green"), (r["name"].ljust(width), "red"), ("  (unreadable ref)", "red")])
            output.info(f"convgit: warning: {r['broken']} ({broken_ref_fix(r['name'])})")
            continue
        fork = ""
        if r["forked_from"]:
            ff = r["forked_from"]
            fork = f"  [forked from {ff['thread'] or ''}{'@' + short(ff['message']) if ff['message'] else ''}]"
        output.styled([
            (mark, "green"), (r["name"].ljust(width), "green" if r["current"] else "bold"),
            (f"  {short(r['tip'])}", "yellow"), (f"  {r['messages']:>4} msg  ", None), (r["title"], None), (fork, "dim"),
        ])


@threads_app.command("rename")
def threads_rename(
    old: str = typer.Argument(..., metavar="OLD", help="The thread to rename."),
    new: str = typer.Argument(..., metavar="NEW", help="Its new name."),
    json_: bool = JSON_OPT,
) -> None:
    """Rename thread OLD to NEW (its reflog moves with it)."""
    output.set_json(json_)
    doc = api.rename_thread(get_repo(), old, new)
    for w in doc.get("warnings", ()):
        output.info(f"convgit: warning: {w}")
    output.emit_json(doc) if json_ else output.line(f"Renamed {old} to {new}")


@threads_app.command("delete")
def threads_delete(
    name: str = typer.Argument(..., metavar="NAME", help="The thread to delete."),
    json_: bool = JSON_OPT,
) -> None:
    """Delete a thread's ref (also an unreadable one). Messages stay (other threads may share
    them); gc frees the rest. Its reflog is kept under logs/deleted. Deleting the current
    thread switches HEAD to the most recently updated thread left."""
    output.set_json(json_)
    doc = api.delete_thread(get_repo(), name)
    for w in doc.get("warnings", ()):
        output.info(f"convgit: warning: {w}")
    if json_:
        output.emit_json(doc)
        return
    was = "its ref file was unreadable; reflog kept" if doc["broken"] else f"was {short(doc['tip'])}"
    msg = f"Deleted thread {name} ({was})"
    if doc["head_moved"]:
        msg += f"; it was the current thread: HEAD now names {doc['head']}"
    elif doc["head"] == name:
        msg += f"; HEAD still names {name}, which no longer exists (no thread left to switch to)"
    output.line(msg)


@app.command("switch")
def switch_cmd(name: str = typer.Argument(..., metavar="NAME", help="An existing thread."), json_: bool = JSON_OPT) -> None:
    """Make thread NAME the current one (HEAD)."""
    output.set_json(json_)
    doc = api.switch(get_repo(), name)
    output.emit_json(doc) if json_ else output.line(f"Switched to thread {name}")


@app.command("fork")
def fork_cmd(
    rev: str = typer.Argument(..., metavar="REV", help="Where the new thread starts: a thread, id or NAME~N."),
    name: Optional[str] = typer.Argument(None, metavar="NAME", help="Name of the new thread (default: <thread>-fork-<id>)."),
    json_: bool = JSON_OPT,
) -> None:
    """A new thread whose tip is REV. Writes no message; records where it forked from."""
    output.set_json(json_)
    r = api.fork(get_repo(), rev, name)
    if json_:
        output.emit_json(r.to_json())
    else:
        output.line(f"Created thread {r.thread} at {short(r.tip)} (forked from {r.forked_from['thread'] or short(r.tip)})")
