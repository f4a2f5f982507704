"""docs/cli.md stays in sync with the CLI: every command's --help, verbatim, and the exit codes
of convgit/errors.py. On failure: run `.venv/bin/python scripts/gen_cli_docs.py`."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from convgit.errors import ALL_ERRORS

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gen_cli_docs.py"
DOC = ROOT / "docs" / "cli.md"


def _load():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen = _load()
PATHS = gen.command_paths()


@pytest.fixture(scope="module")
def doc() -> str:
    assert DOC.exists(), f"docs/cli.md is missing: {gen.REGENERATE}"
    return DOC.read_text("utf-8")


def test_every_command_is_documented():
    assert ("commit",) in PATHS and ("threads", "rename") in PATHS
    documented = set(gen.PORCELAIN) | set(gen.PLUMBING)
    assert set(PATHS) == documented, (
        f"commands and scripts/gen_cli_docs.py disagree: {sorted(set(PATHS) ^ documented)}; "
        "add a paragraph for each new command, then " + gen.REGENERATE
    )


@pytest.mark.parametrize("path", [(), *PATHS], ids=lambda p: " ".join(p) or "convgit")
def test_help_block_in_docs_verbatim(doc, path):
    block = gen.help_block(path)
    name = " ".join(("convgit", *path))
    assert block in doc, f"the --help of `{name}` in docs/cli.md is out of date: {gen.REGENERATE}"
    if path:
        assert f"### `{name}`\n" in doc


def test_docs_are_exactly_what_the_script_writes(doc):
    assert doc == gen.render(), f"docs/cli.md differs from its generator: {gen.REGENERATE}"


def test_exit_code_table_matches_errors_module(doc):
    rows = dict(re.findall(r"^\| (\d+) \| `([a-z_]+)` \|", doc, re.M))
    table = {code: int(exit_) for exit_, code in rows.items()}
    assert table == {cls.code: cls.exit_code for cls in ALL_ERRORS}, gen.REGENERATE


def test_help_is_stable_and_short_options_agree():
    """-h is --help, and the capture is deterministic (fixed COLUMNS, no colour)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    env.update(gen.HELP_ENV)
    p = subprocess.run([sys.executable, "-m", "convgit", "log", "-h"], capture_output=True, env=env)
    assert p.returncode == 0 and p.stdout.decode() == gen.help_text(("log",))
    assert "\x1b[" not in "".join(gen.all_help().values())


def test_check_mode(tmp_path, monkeypatch):
    assert gen.main(["--check"]) == 0
    monkeypatch.setattr(gen, "DOC", tmp_path / "cli.md")
    (tmp_path / "cli.md").write_text("stale\n")
    assert gen.main(["--check"]) == 1
