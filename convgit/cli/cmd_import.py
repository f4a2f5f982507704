"""import, export."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from .. import api, fsio
from ..errors import ALL_ERRORS, ConvgitError, InvalidInput, StorageFailed
from . import output
from .app import app, get_repo

JSON_OPT = typer.Option(False, "--json", help="Output JSON.")
_BY_CODE = {c.code: c for c in ALL_ERRORS}


@app.command("import")
def import_cmd(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Export files: JSON, JSONL, a ZIP export, an llm logs.db; - reads one from stdin."),
    fmt: str = typer.Option("auto", "--format", "-f", metavar="FORMAT", help="auto (default), chatgpt, claude, open-webui, librechat, llm, native, openai, openai-completion, openai-responses, anthropic, gemini, aistudio, sharegpt, messages, conversation, transcript."),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Report what would be imported; write nothing."),
    json_: bool = JSON_OPT,
) -> None:
    """Import conversations from other tools; re-importing writes only what is new.

    Every conversation is imported (or reported) on its own: one bad conversation never
    stops the others. The exit code is 0 when every conversation was imported or already
    there, else the code of the first failure; a file of which nothing could be imported
    is a failure. PATH - reads stdin.
    """
    output.set_json(json_)
    from ..ingest.sources import FORMATS

    if fmt not in FORMATS:
        raise InvalidInput(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    if paths.count("-") > 1:
        raise InvalidInput("- (stdin) can be given only once")
    for p in paths:  # every path readable before anything is imported
        if p == "-":
            if sys.stdin is None or sys.stdin.isatty():
                raise InvalidInput("no input on stdin: pipe an export into `convgit import -`")
            continue
        if not os.path.exists(p):
            raise InvalidInput(f"{p}: no such file")
        if os.path.isdir(p):
            raise InvalidInput(f"{p}: is a directory")
    repo = get_repo()
    with _stdin_spool(repo, "-" in paths, dry_run) as spool:
        files = [spool if p == "-" else p for p in paths]
        total = sum(os.path.getsize(p) for p in files)
        with _progress(total, json_) as advance:
            report = api.import_paths(repo, files, fmt=fmt, dry_run=dry_run, progress=advance)
        if spool is not None:
            _relabel(report, spool, "-")
    for w in report.warnings:  # the import stands (HEAD was moved, or not, by the library)
        output.info(f"convgit: warning: {w}")
    fails = report.failures
    if fails and len(fails) == len(report.conversations):
        f = fails[0]
        cls = _BY_CODE.get(f.error_code or "", ConvgitError)
        err = cls(f.reason or "nothing could be imported", conversation=f.label,
                  report=report.to_json() if len(fails) > 1 else None)
        if len(fails) == 1:
            err.details.pop("report")
        raise err
    if json_:
        output.emit_json(report.to_json())
    else:
        _say(report)
    if fails:
        raise typer.Exit(_BY_CODE.get(fails[0].error_code or "", ConvgitError).exit_code)


def _say(report) -> None:
    for c in report.conversations:
        label = c.title or c.upstream_id or c.label
        if c.status in ("skipped", "conflict"):
            code = f" [{c.error_code}]" if c.error_code else ""
            output.info(f"convgit: {'warning: ' if c.warning else ''}{c.status}: {c.label}: {c.reason}{code}")
            continue
        main = next((t["thread"] for t in c.threads if t["branch"] == "main"), c.threads[0]["thread"] if c.threads else "")
        extra = f", {len(c.threads) - 1} branch thread(s)" if len(c.threads) > 1 else ""
        if c.status == "imported":
            output.line(f"imported      {main}: {c.new_messages} new message(s){extra}  ({label})")
        elif c.status == "appended":
            output.line(f"appended {c.appended:<4} {main}  ({label})")
        elif c.status == "updated":
            output.line(f"updated       {main}: threads moved, no new messages  ({label})")
        for w in c.warnings:
            output.info(f"convgit: warning: {c.label}: {w}")
    n = report.counts()
    verb = "Would import" if report.dry_run else "Imported"
    summary = ", ".join(f"{v} {k}" for k, v in n.items() if v)
    output.info(f"{verb} {len(report.conversations)} conversation(s): {summary or 'none'}; "
                f"{sum(c.new_messages for c in report.conversations)} new message(s) in {report.seconds:.1f}s")


@contextmanager
def _stdin_spool(repo, wanted: bool, dry_run: bool):
    """stdin copied to a temporary file in the store, removed afterwards, so that a piped
    export is read exactly like a file (ZIP, SQLite, JSON, JSONL: detection needs to seek).
    A leftover from a killed run is a ``tmp_*`` file that gc removes."""
    if not wanted:
        yield None
        return
    where = tempfile.gettempdir() if dry_run else str(repo.path)  # --dry-run writes nothing in the store
    try:
        fd, path = tempfile.mkstemp(prefix=f"{fsio.TMP_PREFIX}stdin-", dir=where)
    except OSError as e:
        raise StorageFailed(f"cannot spool stdin to {where}: {e.strerror}") from None
    try:
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
        except OSError as e:
            raise StorageFailed(f"cannot spool stdin to {where}: {e.strerror}") from None
        if os.path.getsize(path) == 0:
            raise InvalidInput("-: stdin is empty: no conversations")
        yield path
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _relabel(report, path: str, name: str) -> None:
    """Conversations read from the spool file are named after stdin (``-``, ``-[3]``)."""
    for c in report.conversations:
        if c.label.startswith(path):
            c.label = name + c.label[len(path):]
        if c.reason and path in c.reason:
            c.reason = c.reason.replace(path, name)


class _progress:
    """A rich progress bar on a terminal (stderr), nothing otherwise."""

    def __init__(self, total: int, json_: bool) -> None:
        self.total = total
        self.bar = None
        self.on = not json_ and sys.stderr.isatty()

    def __enter__(self):
        if not self.on or self.total < (1 << 20):
            return None
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        from rich.console import Console

        self.bar = Progress(TextColumn("importing"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                            console=Console(file=sys.stderr), transient=True)
        self.bar.start()
        task = self.bar.add_task("import", total=self.total)
        return lambda n: self.bar.advance(task, n)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


@app.command("export")
def export_cmd(
    revs: Optional[list[str]] = typer.Argument(None, metavar="REV...", help="Threads or messages to export (default HEAD)."),
    all_: bool = typer.Option(False, "--all", help="Every thread (native: one document holding them all; jsonl: one line each)."),
    fmt: str = typer.Option("native", "--format", "-f", metavar="FORMAT", help="native (default), openai, anthropic, markdown, jsonl."),
    out: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Write to FILE instead of stdout."),
) -> None:
    """Write a thread back out: to replay it to an API (openai, anthropic), to read it
    (markdown), or to import it elsewhere (native, jsonl: same ids on import)."""
    repo = get_repo()
    if all_:
        if revs:
            raise InvalidInput("give REV... or --all, not both")
        revs = sorted(repo.refs.read_all())
    text = api.export(repo, revs or ["HEAD"], fmt=fmt)
    if out is not None:
        try:
            out.write_text(text, "utf-8")
        except OSError as e:
            raise InvalidInput(f"{out}: {e.strerror}") from None
    else:
        sys.stdout.write(text)
