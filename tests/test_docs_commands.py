"""The command forms the docs show but nobody can type as they stand (issue 11: "every command
shown in README, docs/ and examples/ is run by a test"): test_docs_run.py runs every command
shown; what it cannot run is what this file checks.

- a *syntax form* (``convgit remote add NAME URL [--endpoint URL]``, ``convgit log THREAD``),
- a span that only *names* a command needing an argument (``convgit mcp grant``),

each read from the markdown by tests/helpers/doc_commands.py, is parsed by the real CLI with its
metavariables filled in: its command exists and every option it uses is one that command
takes (a renamed or removed option fails here).
"""

from __future__ import annotations

import re
import shlex

import pytest

from helpers import doc_commands as dc
from helpers.cli import cli, env  # noqa: F401  (fixtures)

FORMS = sorted({(page, c) for page, kind, c in dc.shown() if kind in ("syntax", "name")})


def test_the_docs_show_syntax_forms_and_names():
    kinds = {kind for _, kind, _ in dc.shown()}
    assert kinds == {"block", "inline", "syntax", "name"}
    assert len(FORMS) >= 20 and {p for p, _ in FORMS} >= {"docs/cli.md", "docs/remotes.md", "docs/mcp.md"}


def _words(form: str) -> list[str]:
    """The form as words a parser can read: ``[optional]`` parts kept without brackets,
    ``a|b`` choices reduced to the first, ``…``/``...`` and ``<placeholders>`` dropped or
    filled, upper-case metavariables kept (they stand for a value)."""
    text = form.replace("…", " ").replace("...", " ")
    text = re.sub(r"<[^>]*>", "X", text)
    text = re.sub(r"\|[\w-]+", "", text)  # REV|--all → REV; native|openai → native
    text = text.replace("[", " ").replace("]", " ")
    words = shlex.split(text)[1:]
    if words[:1] == ["-C"]:
        words[1] = "."  # -C DIR must name a directory
    return words


@pytest.mark.parametrize("page,form", FORMS, ids=[f"{p}:{c[:60]}" for p, c in FORMS])
def test_every_form_the_docs_show_parses(page, form, cli):
    """``--help`` appended: the real parser reads the whole line first (an unknown command or
    option fails with exit 2) and then prints the command's help instead of running it."""
    words = _words(form)
    r = cli(*words, "--help")
    assert r.rc == 0, f"{page}: `{form}` does not parse: {r.err.strip()[-500:]}"
    assert r.out.startswith("Usage: convgit "), r
