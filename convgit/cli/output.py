"""Rendering: JSON for programs (stdout, one document), rich for people on a terminal, plain
text when piped. Conversation text is data: never interpreted as rich markup."""

from __future__ import annotations

import json
import sys
from typing import Any

from ..config import child_env, terminal_var
from ..errors import ConvgitError

# The --json flag of the command being run (the error handler renders errors to match), the
# global --color choice, --no-pager, and whether stdout is a terminal behind a pager.
state = {"json": False, "color": "auto", "pager": True, "paged": False}
COLOR_CHOICES = ("auto", "always", "never")


def set_json(flag: bool) -> None:
    state["json"] = bool(flag)


def reset() -> None:
    """Back to the defaults (between in-process invocations)."""
    global _console
    state.update(json=False, color="auto", pager=True, paged=False)
    _console = None


def set_color(when: str) -> None:
    """``--color auto|always|never`` (auto: on a terminal, unless NO_COLOR is set)."""
    global _console
    from ..errors import InvalidInput

    if when not in COLOR_CHOICES:
        raise InvalidInput(f"--color must be one of {', '.join(COLOR_CHOICES)}, not {when!r}")
    state["color"] = when
    _console = None


def is_tty() -> bool:
    """Is stdout a terminal (also while it goes through a pager that shows it on one)?"""
    if state["paged"]:
        return True
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def color() -> bool:
    """Style the output? ``--color always``/``never`` decide; auto means a terminal without NO_COLOR."""
    if state["color"] == "always":
        return True
    if state["color"] == "never":
        return False
    return is_tty() and not terminal_var("NO_COLOR")


def stderr_tty() -> bool:
    """Is stderr a terminal (where progress is drawn)?"""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


_console = None


def console():
    """A rich console for stdout, with markup, emoji and highlighting off; styled when
    ``color()`` (also through a pager or with ``--color always``)."""
    global _console
    if _console is None or _console.file is not sys.stdout:
        from rich.console import Console

        on = color()
        _console = Console(file=sys.stdout, markup=False, highlight=False, emoji=False, no_color=not on,
                           force_terminal=on, color_system="standard" if on and not _term_ok() else "auto")
        _console.on_broken_pipe = _broken_pipe  # (rich exits 1; a reader that left is no error)
    return _console


def _broken_pipe() -> None:
    raise BrokenPipeError("the reader of the output went away")


def _term_ok() -> bool:
    return sys.stdout.isatty() and (terminal_var("TERM") or "") not in ("", "dumb")


def completion_requested(prog_name: str, complete_var: str | None) -> bool:
    """Is this run a shell asking for completions (typer's ``_CONVGIT_COMPLETE``)?"""
    var = complete_var or f"_{prog_name}_COMPLETE".replace("-", "_").upper()
    return bool(terminal_var(var))


# -- the pager ------------------------------------------------------------------------------

DEFAULT_PAGER = "less"


def pager_command() -> str | None:
    """The pager for long output, as git chooses it: CONVGIT_PAGER, then PAGER, then
    ``less`` (run with LESS=FRX unless LESS is set: quit if one screen, keep colours, leave
    the text on screen). An empty value or ``cat`` means no pager."""
    for var in ("CONVGIT_PAGER", "PAGER"):
        v = terminal_var(var)
        if v is not None:
            return None if v.strip() in ("", "cat") else v
    return DEFAULT_PAGER


class paged:
    """stdout through a pager while the block runs, when stdout is a terminal and neither
    --no-pager, --json nor a pager of "cat" says otherwise. A pager that cannot be started
    leaves stdout as it was."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.proc = None
        self.saved = None

    def __enter__(self):
        if not (self.enabled and state["pager"] and not state["json"] and sys.stdout.isatty()):
            return self
        cmd = pager_command()
        if cmd is None:
            return self
        import subprocess

        env = child_env(LESS="FRX", LV="-c")
        try:
            self.proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.PIPE, env=env)
        except OSError:
            return self
        import io

        self.saved = sys.stdout
        sys.stdout.flush()
        sys.stdout = io.TextIOWrapper(self.proc.stdin, encoding="utf-8", errors="replace", line_buffering=False)
        state["paged"] = True
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        try:
            sys.stdout.flush()
            sys.stdout.close()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the reader quit the pager early: not an error
        sys.stdout = self.saved
        state["paged"] = False
        try:
            self.proc.wait()
        except KeyboardInterrupt:
            self.proc.wait()
        if exc and exc[0] is BrokenPipeError:
            return True  # the pager closed before the output ended: the user quit it


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2, default=_default))
    sys.stdout.write("\n")


def emit_json_lines_array(items, out=None, *, flush_every: int = 0) -> None:
    """A JSON array written item by item to ``out`` (default stdout), one row a line
    (flushed every ``flush_every`` rows, and after the first, when given)."""
    out = sys.stdout if out is None else out
    first = True
    out.write("[")
    for n, item in enumerate(items):
        out.write("\n  " if first else ",\n  ")
        out.write(json.dumps(item, ensure_ascii=False, default=_default))
        first = False
        if flush_every and n % flush_every == 0:
            out.flush()
    out.write("\n]\n" if not first else "]\n")


def _default(v):
    if hasattr(v, "to_json"):  # a typed result (convgit/results.py)
        return v.to_json()
    if isinstance(v, (bytes, bytearray)):
        import base64

        return {"base64": base64.b64encode(v).decode()}
    raise TypeError(f"cannot serialise {type(v).__name__}")


def line(text: str = "", style: str | None = None) -> None:
    """One line of human output: styled on a terminal, plain otherwise."""
    if style and color():
        from rich.text import Text

        console().print(Text(text, style=style), soft_wrap=True)
    else:
        sys.stdout.write(text + "\n")


def styled(parts: list[tuple[str, str | None]]) -> None:
    """A line made of (text, style) pieces."""
    if color():
        from rich.text import Text

        t = Text()
        for s, st in parts:
            t.append(s, style=st or "")
        console().print(t, soft_wrap=True)
    else:
        sys.stdout.write("".join(s for s, _ in parts) + "\n")


def info(msg: str) -> None:
    """Talk (not data): stderr."""
    sys.stderr.write(msg + "\n")


def warnings(items) -> None:
    """Each warning of a result on stderr, as ``convgit: warning: …``."""
    for w in items:
        info(f"convgit: warning: {w}")


def report(result, *, json_: bool, quiet: bool) -> bool:
    """The common head of a command that reports a result: its warnings, then its JSON
    document with ``--json``. True when the caller is to print its text (neither --json nor
    -q)."""
    warnings(result.warnings)
    if json_:
        emit_json(result.to_json())
        return False
    return not quiet


def report_error(e: ConvgitError) -> None:
    if state["json"]:
        emit_json(e.to_json())
    else:
        sys.stderr.write(f"convgit: error: {e.message} [{e.code}]\n")


def human_size(n: float) -> str:
    """A byte count as people read it: ``512 B``, ``1.5 KiB``, ``3.2 MiB``, ``1.0 GiB``."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
