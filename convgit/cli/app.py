"""The typer application: global options, error mapping, and the command modules."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup

from .. import __version__
from ..errors import ConvgitError, InvalidInput, storage_failure
from . import output


class _Group(TyperGroup):
    """The one place that maps convgit errors to a message and an exit code."""

    def invoke(self, ctx):
        if ctx.parent is None:
            # Errors raised before the command parses its own --json (a bad -C DIR) must
            # still come out as JSON; each command then sets the flag exactly.
            rest = [*getattr(ctx, "_protected_args", ()), *ctx.args]
            output.set_json("--json" in rest)
        try:
            rv = super().invoke(ctx)
            if ctx.parent is None and _repo is not None:
                for w in _repo.warnings:
                    output.info(f"convgit: warning: {w}")
            return rv
        except ConvgitError as e:
            output.report_error(e)
            ctx.exit(e.exit_code)
        except BrokenPipeError:
            # The reader went away (`convgit log | head`): not an error of ours.
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            ctx.exit(0)
        except (OSError, sqlite3.Error) as e:
            # A full disk or an I/O error that reached here unmapped is still storage_failed
            # (40), never a traceback; anything else is a bug and keeps its traceback.
            failed = storage_failure(e)
            if failed is None:
                raise
            output.report_error(failed)
            ctx.exit(failed.exit_code)
        except KeyboardInterrupt:
            sys.stderr.write("convgit: interrupted\n")
            ctx.exit(130)


app = typer.Typer(
    cls=_Group,
    name="convgit",
    help="git for LLM conversations: a content-addressed, deduplicated, forkable message store.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"convgit {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    directory: Optional[Path] = typer.Option(
        None, "-C", metavar="DIR", help="Run as if convgit was started in DIR (as git -C)."
    ),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    reset_repo()
    if directory is not None:
        try:
            os.chdir(directory)
        except OSError as e:
            output.report_error(InvalidInput(f"cannot change to {directory}: {e.strerror}"))
            raise typer.Exit(InvalidInput.exit_code)


_repo = None


def get_repo():
    """The store for this invocation, discovered once (after -C took effect)."""
    global _repo
    if _repo is None:
        from ..repository import Repository

        _repo = Repository.discover()
    return _repo


def reset_repo() -> None:
    global _repo
    if _repo is not None:
        _repo.close()
    _repo = None


from . import cmd_commit, cmd_import, cmd_log, cmd_maintenance, cmd_plumbing, cmd_search, cmd_status, cmd_threads  # noqa: E402,F401


def run(argv: list[str]) -> None:
    try:
        app(args=argv, prog_name="convgit")
    finally:
        reset_repo()
