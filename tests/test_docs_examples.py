"""The commands the README and examples/README.md show are run, as a user would type them
(bash, in a fresh home, with the files they name), and their output is checked."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from cli_helpers import PY, cli_env

ROOT = Path(__file__).resolve().parent.parent
LLM_DB = ROOT.parent / "shared" / "fixtures" / "llm" / "sample-logs.db"


def _block(doc: Path, heading: str) -> list[str]:
    """The commands of the first ```sh block after ``heading``, comments removed."""
    text = doc.read_text("utf-8")
    part = text[text.index(heading):]
    body = part[part.index("```sh\n") + 6:]
    body = body[: body.index("```")]
    out = []
    for ln in body.splitlines():
        ln = re.sub(r"\s+#\s.*$", "", ln).strip()
        if ln and not ln.startswith("#"):
            out.append(ln)
    return out


@pytest.fixture
def shell(tmp_path):
    """bash in tmp_path/work with ``convgit`` on PATH (this checkout) and a fresh home."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "convgit"
    wrapper.write_text(f'#!/bin/sh\nexec {PY} -m convgit "$@"\n')
    wrapper.chmod(0o755)
    env = cli_env(tmp_path)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT)
    work = tmp_path / "work"
    work.mkdir()

    def sh(cmd: str, cwd: Path = work) -> subprocess.CompletedProcess:
        p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (cmd, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        return p

    sh.work, sh.env = work, env
    return sh


def _chatgpt_zip(path: Path) -> None:
    conv = {"id": "c1", "title": "Pelicans", "current_node": "n2", "create_time": 1700000000.0, "mapping": {
        "root": {"id": "root", "message": None, "parent": None, "children": ["n1"]},
        "n1": {"id": "n1", "parent": "root", "children": ["n2"], "message": {
            "id": "n1", "author": {"role": "user"}, "create_time": 1700000000.0,
            "content": {"content_type": "text", "parts": ["Why do pelicans have pouches?"]}}},
        "n2": {"id": "n2", "parent": "n1", "children": [], "message": {
            "id": "n2", "author": {"role": "assistant"}, "create_time": 1700000001.0,
            "content": {"content_type": "text", "parts": ["To scoop fish and drain the water."]}}},
    }}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("conversations.json", json.dumps([conv]))


@pytest.mark.skipif(not LLM_DB.is_file(), reason="../shared/fixtures is absent")
def test_every_command_of_the_readme_runs(shell, tmp_path):
    work = shell.work
    ex = ROOT / "examples"
    shutil.copy(ex / "01-recipe.json", work / "chat.json")
    shutil.copy(ex / "02-recipe-continued.json", work / "call.json")
    shutil.copy(ex / "03-recipe-alternative.json", work / "more.json")
    _chatgpt_zip(work / "chatgpt-export.zip")
    (work / "export.json").write_text(json.dumps({"messages": [
        {"role": "user", "content": "tokenizer and unicode, near each other"},
        {"role": "assistant", "content": "A tokenizer splits unicode text."}], "model": "gpt-4o"}))
    laptop = tmp_path / "laptop"
    shell(f"convgit init {laptop} && convgit -C {laptop} commit {ex / '05-multilingual.json'}")
    llm_dir = Path(shell.env["HOME"]) / ".config" / "io.datasette.llm"
    llm_dir.mkdir(parents=True)
    shutil.copy(LLM_DB, llm_dir / "logs.db")
    shutil.copytree(ROOT / "tests" / "data" / "formats" / "claude-projects", Path(shell.env["HOME"]) / ".claude" / "projects")
    shell("convgit init")
    out = {}
    for cmd in _block(ROOT / "README.md", "## Using it"):
        cmd = cmd.replace("../laptop", str(laptop))
        out[cmd] = shell(cmd)
    o = {k.split("  ")[0]: v.stdout for k, v in out.items()}
    assert "Created thread idea" in o["convgit fork HEAD~2 idea"]
    cont = next(k for k in o if "convgit commit -c idea -" in k)
    assert o[cont].startswith("Appended 1 message(s) to idea"), o[cont]
    assert "idea" in o["convgit log --all --graph"] and "├─●" in o["convgit log --all --graph"]
    assert "imported" in o["convgit import chatgpt-export.zip"]
    assert json.loads((work / "all.json").read_text())  # a document
    assert "tokenizer" in o["convgit search 'NEAR(tokenizer unicode, 5)' --since 2w"]
    assert "gpt-4o" in o["convgit log --all -m gpt-4o -s"]
    assert "created" in o[f"convgit merge {laptop}"]
    llm = next(k for k in o if k.startswith("convgit merge ~/"))
    assert o[llm].count("imported") == 13
    assert "idea@{0}" in o["convgit reflog idea"]
    assert "Total:" in o["convgit log --turns -u"] and "gpt-4o" in o["convgit log --turns -u"]
    assert "imported      claude-code/" in o["convgit import --format claude-code ~/.claude/projects"]
    assert o["convgit threads restore idea"].startswith("Restored thread idea at ")
    assert o["convgit help log"].startswith("Usage: convgit log")
    # the llm merge again: nothing new, said once
    assert shell(f"convgit merge {llm.split()[-1]}").stdout == "Already up to date.\n"


def test_examples_readme_results_and_fork_tree(shell):
    """examples/README.md: the tips of its table and the fork tree as `log --graph --all`
    draws it (thread names A and B standing for the automatic names)."""
    doc = (ROOT / "examples" / "README.md").read_text("utf-8")
    cmds = _block(ROOT / "examples" / "README.md", "## Committing them in order")
    assert cmds[0].startswith("convgit init /tmp/demo")
    d = shell.work / "demo"
    shell(f"convgit init {d}")
    results = []
    for f in sorted((ROOT / "examples").glob("0*.json")):
        results.append(json.loads(shell(f"convgit commit --json {f}", cwd=d).stdout))
    table = re.findall(r"^\| (\d) \| (\S+) \| `(\w+)` \| .*? \| `([0-9a-f]{12})…` \| (\d+) \|", doc, re.M)
    assert len(table) == 6
    for (n, name, status, tip, new), r in zip(table, results):
        assert (r["action"], r["tip"][:12], r["new_messages"]) == (status, tip, int(new)), name
    graph = shell("convgit log --graph --all", cwd=d).stdout
    a = results[1]["thread"]  # 02 fast-forwards 01's thread: A
    b = results[2]["thread"]
    drawn = graph.replace(f"({a})", "(A)").replace(f"({b})", "(B)")
    shown = doc[doc.index("shows the split:"):]
    shown = shown[shown.index("```\n") + 4:]
    shown = "\n".join(ln.strip() for ln in shown[: shown.index("```")].splitlines())
    drawn_lines = [ln.strip() for ln in drawn.splitlines()]
    start = next(i for i, ln in enumerate(drawn_lines) if "f6b6c2a4525c" in ln)
    assert "\n".join(drawn_lines[start:start + 7]) == shown.strip(), drawn
