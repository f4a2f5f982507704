"""init, commit."""

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from .. import api
from ..errors import ConvgitError, InvalidInput
from ..ids import short
from . import output
from .app import app, get_repo
from .params import QUIET_OPT

JSON_OPT = typer.Option(False, "--json", help="Output JSON.")


@app.command("init")
def init_cmd(
    directory: Optional[Path] = typer.Argument(None, metavar="DIR", help="Where to create .convgit/ (default: here)."),
    json_: bool = JSON_OPT,
    quiet: bool = QUIET_OPT,
) -> None:
    """Create an empty store in DIR/.convgit (idempotent)."""
    output.set_json(json_)
    target = (directory or Path(".")).absolute()
    existed = (target / ".convgit" / "format").exists()
    repo = api.init(target)
    doc = {"status": "exists" if existed else "created", "path": str(repo.path)}
    if json_:
        output.emit_json(doc)
    elif not quiet:
        verb = "Reinitialized existing" if existed else "Initialized empty"
        output.line(f"{verb} convgit store in {repo.path}")


def read_input(file: Optional[str]) -> bytes:
    if file in (None, "-"):
        if file is None and sys.stdin.isatty():
            raise InvalidInput("no input: give a FILE, or - to read the conversation from stdin")
        return sys.stdin.buffer.read()
    try:
        return Path(file).read_bytes()
    except FileNotFoundError:
        raise InvalidInput(f"{file}: no such file") from None
    except IsADirectoryError:
        raise InvalidInput(f"{file}: is a directory") from None
    except OSError as e:
        raise InvalidInput(f"{file}: {e.strerror}") from None


@app.command("commit")
def commit_cmd(
    files: Optional[list[str]] = typer.Argument(None, metavar="FILE|-", help="JSON conversations, committed in order (default: stdin)."),
    thread: Optional[str] = typer.Option(None, "--thread", "-t", metavar="NAME", help="Trusted thread: create or extend exactly this thread."),
    on_conflict: str = typer.Option("reject", "--on-conflict", metavar="reject|fork", help="When --thread holds a different history: reject or fork."),
    model: Optional[str] = typer.Option(None, "--model", "-m", metavar="MODEL", help="Record the call as made with this model."),
    continue_: bool = typer.Option(False, "--continue", "-c", help="The input holds only new messages: append them to THREAD (the first argument, when it is not a file) or HEAD's thread, like llm -c."),
    json_: bool = JSON_OPT,
) -> None:
    """Store a conversation; only messages not already stored are written.

    Input: convgit's native shape {"messages": [...]} or an OpenAI Chat Completions
    messages list / request (optionally with "response" and turn metadata). Without
    --thread, an exact duplicate is a no-op, a re-sent history plus new messages continues
    the thread whose tip it extends, anything else starts a new thread. The thread
    committed to becomes HEAD.

    With -c/--continue [THREAD]: the input holds only the new messages, appended after the
    tip of THREAD (default: HEAD's thread). A first message with "parent": "<id>" (an id
    convgit printed) is appended after that stored message.
    """
    output.set_json(json_)
    api.check_on_conflict(on_conflict)  # the library's one check, before any input is read
    if continue_:
        thread, files = _continue_args(thread, list(files or []))
        if len(files) > 1:
            raise InvalidInput("--continue takes one FILE (or - for stdin)")
    files = files or [None]
    inputs = [read_input(f) for f in files]  # every file readable before anything is stored
    repo = get_repo()
    payloads = []
    for f, raw in zip(files, inputs):  # every input valid before anything is stored
        with _labelled(f, len(files)):
            payloads.append(api.to_payload(repo, raw, model=model))
    results = []
    if thread is None and len(payloads) > 1:
        # No trusted thread: the bulk path (same decisions, two flushes for all the files).
        for f, result in zip(files, api.commit_many(repo, payloads)):
            _report(repo, result, f, json_)
            results.append(result)
        output.emit_json([r.to_json() for r in results]) if json_ else None
        return
    for f, payload in zip(files, payloads):
        try:
            with _labelled(f, len(files)):
                result = api.commit(repo, payload, thread=thread, on_conflict=on_conflict, continue_=continue_)
        except ConvgitError as e:
            if results:  # the files before this one are committed: say so in the one document
                e.details = {**e.details, "committed": [r.to_json() for r in results]}
            raise
        _report(repo, result, f if len(files) > 1 else None, json_)
        results.append(result)
    if json_:
        output.emit_json(results[0].to_json() if len(results) == 1 else [r.to_json() for r in results])


def _continue_args(thread: Optional[str], args: list[str]) -> tuple[Optional[str], list[str]]:
    """``commit -c [THREAD] [FILE|-]``: the first argument is THREAD when two are given, or
    when the one given is neither ``-`` nor an existing path (the input is then stdin)."""
    if thread is None and args:
        first = args[0]
        if len(args) >= 2 or (first != "-" and not Path(first).exists()):
            return first, args[1:]
    return thread, args


def _report(repo, result, label, json_: bool) -> None:
    """Warnings to stderr (HEAD followed the thread in the library); a line for people."""
    output.warnings(result.warnings)
    if not json_:
        _say(result, label)


@contextmanager
def _labelled(f: str | None, n: int):
    try:
        yield
    except ConvgitError as e:
        if n > 1 and f is not None:
            e.message = f"{f}: {e.message}"
        raise


def _say(result, label: str | None) -> None:
    t = result.thread or "(no thread)"
    if result.status == "deduplicated":
        msg = f"Already stored: {t} at {short(result.tip)} (nothing written)"
        if result.turn:
            msg = f"Recorded call on {t} at {short(result.tip)} (no new messages)"
    elif result.status == "created":
        msg = f"Created thread {t} at {short(result.tip)}: {result.new_messages} new message(s)"
        if result.forked_from and result.forked_from.get("threads"):
            msg += f", sharing history with {', '.join(result.forked_from['threads'])}"
    elif result.status == "forked":
        msg = f"Forked {result.forked_from['thread']} as {t} at {short(result.tip)}: {result.new_messages} new message(s)"
    else:
        msg = f"Appended {result.appended_messages} message(s) to {t}, now at {short(result.tip)}"
    output.line(f"{label}: {msg}" if label else msg)
