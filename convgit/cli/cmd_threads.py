"""threads (list, rename, delete, restore), switch, fork, reflog."""

from typing import Optional

import typer

from .. import api
from ..ids import short
from ..refs import broken_ref_fix
from . import output
from .params import complete_rev, complete_thread
from .app import _Group, app, get_repo

JSON_OPT = typer.Option(False, "--json", help="Output JSON.")

threads_app = typer.Typer(cls=_Group, help="List, rename, delete and restore threads.", invoke_without_command=True,
                          rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(threads_app, name="threads")


@threads_app.callback()
def threads_list(ctx: typer.Context, remotes: bool = typer.Option(
        False, "--remotes", "-r", help="List the remote-tracking refs (REMOTE/THREAD, what fetch recorded) instead."),
        json_: bool = JSON_OPT) -> None:
    """List threads: name, tip, message count, title, where each was forked from."""
    if ctx.invoked_subcommand is not None:
        return
    output.set_json(json_)
    if remotes:
        rows = api.tracking_refs(get_repo())
        if json_:
            output.emit_json(rows)
        for r in [] if json_ else rows:
            output.styled([("  ", None), (r["name"], "red"), (f"  {short(r['tip'])}", "yellow")])
        return
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
    old: str = typer.Argument(..., metavar="OLD", help="The thread to rename.", autocompletion=complete_thread),
    new: str = typer.Argument(..., metavar="NEW", help="Its new name."),
    json_: bool = JSON_OPT,
) -> None:
    """Rename thread OLD to NEW (its reflog moves with it)."""
    output.set_json(json_)
    doc = api.rename_thread(get_repo(), old, new)
    output.warnings(doc.get("warnings", ()))
    output.emit_json(doc) if json_ else output.line(f"Renamed {old} to {new}")


@threads_app.command("delete")
def threads_delete(
    name: str = typer.Argument(..., metavar="NAME", help="The thread to delete.", autocompletion=complete_thread),
    json_: bool = JSON_OPT,
) -> None:
    """Delete a thread's ref (also an unreadable one). Messages stay (other threads may share
    them); gc frees the rest. Its reflog is kept under logs/deleted. Deleting the current
    thread switches HEAD to the most recently updated thread left."""
    output.set_json(json_)
    doc = api.delete_thread(get_repo(), name)
    output.warnings(doc.get("warnings", ()))
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


@threads_app.command("restore")
def threads_restore(
    name: Optional[str] = typer.Argument(None, metavar="NAME", help="The deleted thread to bring back."),
    list_: bool = typer.Option(False, "--list", "-l", help="List the deleted threads that can be restored."),
    json_: bool = JSON_OPT,
) -> None:
    """Bring back a deleted thread at the tip it had, with its reflog, from the reflog kept
    under logs/deleted: possible as long as gc has not pruned its messages (not_found, exit
    15, once it has). --list shows the deleted threads."""
    output.set_json(json_)
    repo = get_repo()
    if list_ or name is None:
        if name is not None:
            from ..errors import InvalidInput

            raise InvalidInput("give NAME or --list, not both")
        rows = api.deleted_threads(repo)
        if json_:
            output.emit_json(rows)
            return
        if not rows:
            output.info("no deleted threads (their reflogs are kept under logs/deleted)")
        for r in rows:
            state = ("exists again" if r["exists"] else "restorable" if r["restorable"] else "pruned by gc")
            output.styled([(r["name"], "bold"), (f"  {short(r['tip']) or '-'}", "yellow"),
                           (f"  deleted {_when(r['deleted_at'])}  {state}", None)])
        return
    doc = api.restore_thread(repo, name)
    output.emit_json(doc) if json_ else output.line(f"Restored thread {name} at {short(doc['tip'])} (from {doc['from']})")


def _when(iso: str | None) -> str:
    return iso[:19].replace("T", " ") + " UTC" if iso else ""


@app.command("switch")
def switch_cmd(name: str = typer.Argument(..., metavar="NAME", help="An existing thread.", autocompletion=complete_thread),
               json_: bool = JSON_OPT) -> None:
    """Make thread NAME the current one (HEAD)."""
    output.set_json(json_)
    doc = api.switch(get_repo(), name)
    output.emit_json(doc) if json_ else output.line(f"Switched to thread {name}")


@app.command("fork")
def fork_cmd(
    rev: str = typer.Argument(..., metavar="REV", help="Where the new thread starts: a thread, id or NAME~N.",
                              autocompletion=complete_rev),
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


@app.command("reflog")
def reflog_cmd(
    thread: Optional[str] = typer.Argument(None, metavar="THREAD",
                                           help="The thread (default: HEAD's); a deleted one shows its archived reflog.",
                                           autocompletion=complete_thread),
    count: int = typer.Option(0, "-n", "--count", metavar="N", help="At most N entries (0 = all)."),
    json_: bool = JSON_OPT,
) -> None:
    """The moves of a thread, newest first, as git reflog: each with its time, the turn it
    recorded (kind, model, source) and what moved (commit, import, fork, rename, delete)."""
    output.set_json(json_)
    if count < 0:
        from ..errors import InvalidInput

        raise InvalidInput("-n must be 0 (all) or more")
    doc = api.reflog(get_repo(), thread)
    if count:
        doc["entries"] = doc["entries"][:count]
    if json_:
        output.emit_json(doc)
        return
    name = doc["thread"]
    if doc["deleted"]:
        output.info(f"convgit: {name} was deleted; its archived reflog (convgit threads restore {name} brings it back):")
    for e in doc["entries"]:
        tip = e["new"] or e["old"]
        bits = [b for b in (e["kind"], e["model"], e["source"]) if b]
        what = f" [{', '.join(bits)}]" if bits else ""
        output.styled([(short(tip) if tip else "-" * 12, "yellow"), (f" {name}@{{{e['index']}}}", "cyan"),
                       (f" {_when(e['time'])}", "dim"), (f"{what} ", "magenta"), (e["message"], None)])
    if doc["interrupted"]:
        output.info(f"convgit: {doc['interrupted']} move(s) a crash cut short are not shown (they never happened)")
