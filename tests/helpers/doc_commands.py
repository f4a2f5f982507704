"""The ``convgit …`` commands the documentation shows, read from the markdown itself (so a new
command in a page is seen by the tests without anybody copying it into a test).

What counts as a command shown (README.md, docs/*.md, examples/README.md):

- every line of a shell code block (```sh, bash, shell, console) that runs ``convgit`` (at
  the start of the line or of a part of it after ``|``, ``&&``, ``;`` or ``do``, or as
  ``.venv/bin/convgit``); ``# comments`` are cut off; in a ``console`` block only ``$ `` lines
  are commands, and the lines after one, up to the next ``$ `` line, are its output as shown;
- every inline code span ```convgit …``` in the prose (headings are titles, not commands;
  ```convgit serve: warning: …``` quotes a message).

A span holding a metavariable (``NAME``, ``FILE``, ``<tip>``, ``…``, ``[--opt X]``) is a
*syntax form*, not a command one can type; a span that is only the name of a command that
needs an argument (``convgit search``, ``convgit mcp grant``: prose naming the command, as
one writes `git log`) *names* it. Those two kinds are parsed (test_docs_commands.py); every
other command shown, in a block or inline, is run (test_docs_run.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # (the repository: tests/helpers/ is two below it)
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "examples" / "README.md"]
SHELL_LANGS = ("sh", "bash", "shell", "console")
# an upper-case word of 2+ letters (NAME, FILE, REMOTE), an option's one-letter metavar
# (--model M), <placeholders>, ellipses, [optional] parts, {choices}
METAVAR = re.compile(r"[<>…{}]|\.\.\.|\[[A-Z-]|\b[A-Z][A-Z_]+\b|--[\w-]+ [A-Z]\b")
_RUNS_CONVGIT = re.compile(r"(?:^|\|\s*|&&\s*|;\s*|\bdo\s+|/bin/)convgit(?: |$)")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass
class Line:
    """One command line of a shell block, with the output the page shows after it (console)."""

    text: str
    shown_output: list[str] | None = None


@dataclass
class Block:
    """A shell code block of a page: where it is, and its command lines in order."""

    page: str
    line: int  # 1-based line of its opening fence
    heading: str  # the nearest heading above it
    lang: str
    lines: list[Line] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def first(self) -> str:
        """Its first line that runs convgit (what names the block in a test's table)."""
        return next(ln.text for ln in self.lines if runs_convgit(ln.text))


def rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def runs_convgit(line: str) -> bool:
    return bool(_RUNS_CONVGIT.search(line))


def is_syntax(command: str) -> bool:
    return bool(METAVAR.search(command))


def _cut_comment(ln: str) -> str:
    return re.sub(r"\s+#\s.*$", "", ln).strip()


def blocks(page: Path) -> list[Block]:
    """Every shell block of ``page`` that runs convgit at least once."""
    text = page.read_text("utf-8")
    bare = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # for the headings
    out = []
    for m in _FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        if lang not in SHELL_LANGS:
            continue
        before = text[: m.start()]
        heads = re.findall(r"^#+ (.+)$", bare[: m.start()], re.M)
        b = Block(rel(page), before.count("\n") + 1, heads[-1] if heads else "", lang)
        for raw in body.splitlines():
            s = raw.strip()
            if lang == "console":
                if s.startswith("$ "):
                    b.lines.append(Line(_cut_comment(s[2:]), []))
                elif b.lines:
                    b.lines[-1].shown_output.append(raw)
                continue
            s = _cut_comment(s)
            if s and not s.startswith("#"):
                b.lines.append(Line(s))
        if any(runs_convgit(ln.text) for ln in b.lines):
            out.append(b)
    return out


def inline_commands(page: Path) -> list[str]:
    """Every ```convgit …``` span of the prose of ``page`` (outside code blocks and headings),
    whitespace collapsed (a span may wrap)."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text("utf-8"))
    prose = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
    spans = [" ".join(c.split()) for c in re.findall(r"`(convgit [^`]+)`", prose)]
    return [c for c in spans if not re.match(r"convgit [\w-]+: ", c)]  # "convgit serve: warning: …" is a message


@functools.lru_cache(maxsize=None)
def names_a_command(command: str) -> bool:
    """Is ``command`` only ``convgit`` and a command's name, of a command with a required
    argument (so that, typed alone, it is a usage error)?"""
    import typer.main

    from convgit.cli.app import app

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    cmd = group
    for word in command.split()[1:]:
        sub = cmd.get_command(ctx, word) if hasattr(cmd, "get_command") else None
        if sub is None:
            return False
        cmd = sub
    return any(p.required for p in cmd.params)


@functools.lru_cache(maxsize=None)
def shown() -> list[tuple[str, str, str]]:
    """(page, kind, command) for every command shown; kind: block, inline, syntax or name."""
    out = []
    for page in PAGES:
        for b in blocks(page):
            out += [(b.page, "block", ln.text) for ln in b.lines if runs_convgit(ln.text)]
        for c in inline_commands(page):
            kind = "syntax" if is_syntax(c) else "name" if names_a_command(c) else "inline"
            out.append((rel(page), kind, c))
    return out
