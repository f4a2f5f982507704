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
from . import output, progress
from .params import complete_rev
from .app import app, get_repo

JSON_OPT = typer.Option(False, "--json", help="Output JSON.")
_BY_CODE = {c.code: c for c in ALL_ERRORS}
# On a terminal, a report of more conversations than this is summarised (--verbose: all).
SUMMARY_AT = 20


@app.command("import")
def import_cmd(
    paths: list[str] = typer.Argument(..., metavar="PATH", help="Export files: JSON, JSONL, a ZIP export, an llm logs.db, Open WebUI's webui.db; a directory (e.g. ~/.claude/projects) for every file in it; - reads one from stdin."),
    fmt: str = typer.Option("auto", "--format", "-f", metavar="FORMAT", help="auto (default), chatgpt, claude, open-webui, librechat, llm, grok, chatbot-ui, open-webui-db, sillytavern, claude-code, codex, native, openai, openai-completion, openai-responses, anthropic, gemini, aistudio, sharegpt, messages, conversation, transcript."),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Report what would be imported; write nothing."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print nothing but warnings and errors."),
    verbose: bool = typer.Option(False, "-v", "--verbose",
                                 help=f"One line per conversation also on a terminal (there, more than {SUMMARY_AT} are summarised)."),
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
    repo = get_repo()
    with _stdin_spool(repo, "-" in paths, dry_run) as spool:
        files = [spool if p == "-" else p for p in paths]
        with progress.Bar("importing", total_bytes(files, fmt), on=progress.enabled(json_=json_, quiet=quiet)) as advance:
            report = api.import_paths(repo, files, fmt=fmt, dry_run=dry_run, progress=advance)
        if spool is not None:
            _relabel(report, spool, "-")
    finish_import(report, json_=json_, quiet=quiet, verbose=verbose)


def total_bytes(files, fmt: str = "auto") -> int:
    """The input size a progress bar counts (a directory: the files import reads in it)."""
    total = 0
    for p in files:
        if os.path.isdir(p):
            from ..ingest.sources import expand_dir

            total += sum(f.stat().st_size for f in expand_dir(p, None if fmt == "auto" else fmt))
        elif os.path.isfile(p):
            total += os.path.getsize(p)
    return total


def finish_import(report, *, json_: bool, quiet: bool, verbose: bool, source: str | None = None) -> None:
    """Warnings, the report (JSON or lines), and the exit code of an import (also of a merge
    of an llm logs.db, ``source``)."""
    output.warnings(report.warnings)  # the import stands (HEAD was moved, or not, by the library)
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
        doc = report.to_json()
        if source is not None:
            doc = {**doc, "source": source, "merged_as": "llm-import"}
        output.emit_json(doc)
    elif source is not None and not quiet and not fails and all(
            c.status == "deduplicated" for c in report.conversations):
        output.line("Already up to date.")
    else:
        say_import(report, quiet=quiet, verbose=verbose)
    if fails:
        raise typer.Exit(_BY_CODE.get(fails[0].error_code or "", ConvgitError).exit_code)


def say_import(report, *, quiet: bool = False, verbose: bool = False) -> None:
    """The report for people: a line per conversation (problems on stderr), then totals. On
    a terminal a long report shows its first lines only, unless ``verbose``."""
    shown = 0
    limit = None if verbose or not output.is_tty() or len(report.conversations) <= SUMMARY_AT else SUMMARY_AT // 2
    hidden = 0
    for c in report.conversations:
        label = c.title or c.upstream_id or c.label
        if c.status in ("skipped", "conflict"):
            code = f" [{c.error_code}]" if c.error_code else ""
            output.info(f"convgit: {'warning: ' if c.warning else ''}{c.status}: {c.label}: {c.reason}{code}")
            continue
        for w in c.warnings:
            output.info(f"convgit: warning: {c.label}: {w}")
        if quiet or c.status == "deduplicated":
            continue
        if limit is not None and shown >= limit:
            hidden += 1
            continue
        shown += 1
        main = next((t["thread"] for t in c.threads if t["branch"] == "main"), c.threads[0]["thread"] if c.threads else "")
        extra = f", {len(c.threads) - 1} branch thread(s)" if len(c.threads) > 1 else ""
        if c.status == "imported":
            output.line(f"imported      {main}: {c.new_messages} new message(s){extra}  ({label})")
        elif c.status == "appended":
            output.line(f"appended {c.appended:<4} {main}  ({label})")
        elif c.status == "updated":
            output.line(f"updated       {main}: threads moved, no new messages  ({label})")
    if hidden:
        output.line(f"... and {hidden} more (--verbose lists every conversation)", "dim")
    if quiet:
        return
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


@app.command("export")
def export_cmd(
    revs: Optional[list[str]] = typer.Argument(None, metavar="REV", help="Threads or messages to export (default HEAD).",
                                               autocompletion=complete_rev),
    all_: bool = typer.Option(False, "--all", help="Every thread (native: one document holding them all; jsonl: one line each)."),
    fmt: str = typer.Option("native", "--format", "-f", metavar="FORMAT",
                            help="native (default), openai, anthropic, markdown, jsonl, llm-db (an llm logs.db file: needs -o)."),
    out: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Write to FILE instead of stdout."),
    json_: bool = typer.Option(False, "--json", help="With llm-db: print the report as JSON."),
) -> None:
    """Write a thread back out: to replay it to an API (openai, anthropic), to read it
    (markdown), to import it elsewhere (native, jsonl: same ids on import), or to go back to
    llm (llm-db: a logs.db that `llm logs` reads, with llm's own hashes)."""
    repo = get_repo()
    if all_:
        if revs:
            raise InvalidInput("give REV... or --all, not both")
        revs = sorted(repo.refs.read_all())
    if fmt == "llm-db":
        output.set_json(json_)
        _export_llm_db(repo, revs or ["HEAD"], out, json_)
        return
    if json_:
        raise InvalidInput("--json is for --format llm-db (the other formats are the document itself)")
    with progress.Counter("exporting threads", on=progress.enabled(), min_items=50) as tick:
        text = api.export(repo, revs or ["HEAD"], fmt=fmt, progress=tick)
    if out is not None:
        try:
            out.write_text(text, "utf-8")
        except OSError as e:
            raise InvalidInput(f"{out}: {e.strerror}") from None
    else:
        sys.stdout.write(text)


def _export_llm_db(repo, revs: list[str], out: Optional[Path], json_: bool) -> None:
    if out is None:
        raise InvalidInput("--format llm-db writes a database file: give it with -o FILE")
    with progress.Counter("exporting threads", on=progress.enabled(json_=json_), min_items=50) as tick:
        res = api.export_llm_db(repo, revs, out, progress=tick)
    if json_:
        output.emit_json(res.to_json())
    else:
        output.line(f"Exported {res.threads} thread{'s' if res.threads != 1 else ''} ({res.messages} messages, "
                   f"{res.turns} turns) to {out} (llm {res.to_json()['llm_version']} logs.db)")
