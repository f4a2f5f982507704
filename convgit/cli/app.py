"""The typer application: global options, error mapping, and the command modules.

Start-up: a command imports only its own module. The root group knows every command's name
and module (``COMMANDS``) and imports the module, and builds the click command, when the
command is looked up (``--help`` looks up all of them). Parameters are converted without
pydantic (``params.lean``).

The modules whose functions typer reads (commands, callbacks, completion functions: this one,
``params``, ``views`` and the hot commands' modules) do not use ``from __future__ import
annotations``: typer takes every signature with ``inspect.signature(eval_str=True)`` and
``get_type_hints``, which ``eval`` each annotation string twice, a few ms of `log`'s start-up;
annotations evaluated once at import cost next to nothing (tests/test_startup.py).
"""

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Optional

from .lean_typer import import_typer

import_typer()  # (typer loaded without the modules of its rare paths; the imports below find it)
import typer
import typer.main
from typer.core import TyperGroup

from .. import __version__
from ..errors import ConvgitError, InvalidInput, storage_failure
from . import output, params, resume_gc

# Every command, in the order `convgit --help` lists them (typer's order: the commands in the
# order their modules registered them, then the groups), and the module that registers it.
# tests/test_startup.py checks this table against what the modules register.
COMMANDS = {
    "help": "app",
    "init": "cmd_commit", "commit": "cmd_commit",
    "embed": "cmd_embed",
    "import": "cmd_import", "export": "cmd_import",
    "log": "cmd_log", "show": "cmd_log",
    "gc": "cmd_maintenance", "fsck": "cmd_maintenance", "merge": "cmd_maintenance",
    "rev-parse": "cmd_plumbing", "cat-object": "cmd_plumbing", "hash-object": "cmd_plumbing",
    "update-ref": "cmd_plumbing", "show-ref": "cmd_plumbing", "reindex": "cmd_plumbing", "path": "cmd_plumbing",
    "search": "cmd_search",
    "serve": "cmd_serve",
    "status": "cmd_status",
    "switch": "cmd_threads", "fork": "cmd_threads", "reflog": "cmd_threads",
    "push": "cmd_remote", "fetch": "cmd_remote", "pull": "cmd_remote", "clone": "cmd_remote",
    "bundle": "cmd_maintenance",
    "threads": "cmd_threads",
    "remote": "cmd_remote",
    "mcp": "cmd_mcp",
    "index": "cmd_index",
}


class _Group(TyperGroup):
    """The one place that maps convgit errors to a message and an exit code."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        params.lean(self)
        # (the lazy table leans each command it builds; typer built these ones already)
        built = self.commands._built if isinstance(self.commands, _LazyCommands) else self.commands
        for cmd in built.values():
            if not isinstance(cmd, _Group):  # a group leans its own
                params.lean(cmd)

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)  # names only: a lazy table builds nothing to list

    def format_commands(self, ctx, formatter) -> None:
        """The command list with each command's whole first sentence (click cuts it at ~45
        characters with "..."): wrapped, never truncated."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, _summary_line(cmd.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx):
        if ctx.parent is None:
            # Errors raised before the command parses its own --json (a bad -C DIR) must
            # still come out as JSON; each command then sets the flag exactly.
            rest = [*getattr(ctx, "_protected_args", ()), *ctx.args]
            output.set_json("--json" in rest)
        try:
            try:
                rv = super().invoke(ctx)
            except typer.Exit:  # (import exits non-zero when some files failed: the rest was written)
                _after_write(ctx)
                raise
            if ctx.parent is None and _repo is not None:
                output.warnings(_repo.warnings)
            _after_write(ctx)
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
        except Exception as e:
            # A full disk or an I/O error (OSError, sqlite3.Error) that reached here unmapped
            # is still storage_failed (40), never a traceback; anything else is a bug and
            # keeps its traceback. (sqlite3 is not imported here: start-up stays lean.)
            failed = storage_failure(e)
            if failed is None:
                raise
            output.report_error(failed)
            ctx.exit(failed.exit_code)
        except KeyboardInterrupt:
            sys.stderr.write("convgit: interrupted\n")
            ctx.exit(130)


# The commands that add objects: after one of them, gc --auto is started in the background
# when it would act ([gc] auto; convgit/gc_auto.py). clone writes a new store (its packs as
# the remote has them); the others move refs only.
AUTO_GC_AFTER = frozenset({"commit", "import", "merge", "fetch", "pull"})


def _after_write(ctx) -> None:
    """The one automatic-gc hook of the command line: after a command of ``AUTO_GC_AFTER``
    that opened the store, a cheap check and, when due, a detached ``gc --auto``. It never
    fails the command, prints nothing and never waits."""
    if ctx.parent is not None or _repo is None or ctx.invoked_subcommand not in AUTO_GC_AFTER:
        return
    if not _repo.config.gc_auto:
        return
    from ..gc_auto import start_background_gc

    try:
        start_background_gc(_repo)
    except (ConvgitError, OSError):
        pass  # (a store that cannot be locked now: the next write tries again)


def _summary_line(text: str) -> str:
    """The first paragraph of a command's help, as one line (for the command list)."""
    para = text.strip().split("\n\n", 1)[0]
    return " ".join(para.split())


class _LazyCommands(MutableMapping):
    """The root group's commands: every name of ``COMMANDS``, each built on first lookup."""

    def __init__(self, built: dict):
        self._built = dict(built)

    def __getitem__(self, name: str):
        cmd = self._built.get(name)
        if cmd is None:
            if name not in COMMANDS:
                raise KeyError(name)
            cmd = self._built[name] = _build(name)
        return cmd

    def __setitem__(self, name: str, cmd) -> None:
        self._built[name] = cmd

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self):
        yield from COMMANDS
        yield from (n for n in self._built if n not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(1 for n in self._built if n not in COMMANDS)

    def __contains__(self, name) -> bool:
        return name in COMMANDS or name in self._built


def _build(name: str):
    """Import the module of command ``name`` and build its click command from its registration."""
    __import__(f"{__package__}.{COMMANDS[name]}")  # (not importlib: -X importtime sees this one)
    opts = {"pretty_exceptions_short": app.pretty_exceptions_short, "rich_markup_mode": app.rich_markup_mode}
    for info in app.registered_commands:
        if info.name == name:
            cmd = typer.main.get_command_from_info(info, **opts)
            params.lean(cmd)
            return cmd
    for info in app.registered_groups:
        if info.name == name:
            return typer.main.get_group_from_info(info, suggest_commands=app.suggest_commands, **opts)
    raise KeyError(name)  # pragma: no cover - COMMANDS names a command no module registers


class _RootGroup(_Group):
    """convgit's own group: its commands are the lazy table (typer passes those it built)."""

    def __init__(self, *args, commands=None, **kwargs):
        super().__init__(*args, commands=_LazyCommands(commands or {}), **kwargs)

    def _main_shell_completion(self, ctx_args, prog_name, complete_var=None) -> None:
        # typer's completion protocol (the _CONVGIT_COMPLETE variable): its shell classes are
        # registered only when asked for, so a normal start-up loads none of it.
        if output.completion_requested(prog_name, complete_var):
            from typer._completion_classes import completion_init

            completion_init()
        super()._main_shell_completion(ctx_args, prog_name, complete_var)


app = typer.Typer(
    cls=_RootGroup,
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


def _completion(ctx, param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from . import completion

    completion.install_or_show(ctx, install=param.name == "install_completion")


@app.callback()
def main_options(
    ctx: typer.Context,
    directory: Optional[Path] = typer.Option(
        None, "-C", metavar="DIR", help="Run as if convgit was started in DIR (as git -C)."
    ),
    color: str = typer.Option("auto", "--color", metavar="WHEN",
                              help="Colour the output: auto (on a terminal, unless NO_COLOR is set), always, never."),
    no_pager: bool = typer.Option(False, "--no-pager", "-P", help="Never page output (log and show page long output on a terminal)."),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True, help="Print the version."),
    install_completion: bool = typer.Option(
        False, "--install-completion", callback=_completion, is_eager=True, expose_value=False,
        help="Install shell completion (bash, zsh, fish, powershell: the shell running convgit) and exit."),
    show_completion: bool = typer.Option(
        False, "--show-completion", callback=_completion, is_eager=True, expose_value=False,
        help="Print the shell completion script for the shell running convgit, and exit."),
) -> None:
    resume_gc()  # (the command's module is loaded; what runs from here may make garbage)
    reset_repo()
    output.set_color(color)
    output.state["pager"] = not no_pager
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


@app.command("help")
def help_cmd(
    ctx: typer.Context,
    command: Optional[list[str]] = typer.Argument(None, metavar="COMMAND",
                                                  help="A command (and subcommand: threads rename)."),
) -> None:
    """Show the help of convgit or of COMMAND (as COMMAND --help does)."""
    cur = ctx.find_root()
    path: list[str] = []
    for name in command or []:
        sub = cur.command.get_command(cur, name) if hasattr(cur.command, "get_command") else None
        if sub is None:
            raise InvalidInput(f"no such command: {' '.join([*path, name])} (convgit help lists them)")
        cur = sub.make_context(name, [], parent=cur, resilient_parsing=True)
        path.append(name)
    typer.echo(cur.command.get_help(cur))


def run(argv: list[str]) -> None:
    try:
        app(args=argv, prog_name="convgit")
    finally:
        reset_repo()
        output.reset()
