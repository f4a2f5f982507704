"""Rendering: JSON for programs (stdout, one document), rich for people on a terminal, plain
text when piped. Conversation text is data: never interpreted as rich markup."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ..errors import ConvgitError

# The --json flag of the command being run; the error handler renders errors to match.
state = {"json": False}


def set_json(flag: bool) -> None:
    state["json"] = bool(flag)


def is_tty() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def color() -> bool:
    return is_tty() and not os.environ.get("NO_COLOR")


_console = None


def console():
    """A rich console for stdout (terminal only), with markup, emoji and highlighting off."""
    global _console
    if _console is None:
        from rich.console import Console

        _console = Console(markup=False, highlight=False, emoji=False, no_color=not color())
    return _console


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2, default=_default))
    sys.stdout.write("\n")


def emit_json_lines_array(items, out=None) -> None:
    """A JSON array written item by item to ``out`` (default stdout), one row a line."""
    out = sys.stdout if out is None else out
    first = True
    out.write("[")
    for item in items:
        out.write("\n  " if first else ",\n  ")
        out.write(json.dumps(item, ensure_ascii=False, default=_default))
        first = False
    out.write("\n]\n" if not first else "]\n")


def _default(v):
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


def report_error(e: ConvgitError) -> None:
    if state["json"]:
        emit_json(e.to_json())
    else:
        sys.stderr.write(f"convgit: error: {e.message} [{e.code}]\n")
