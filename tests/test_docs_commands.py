"""The commands docs/*.md shows (issue 11: "every command shown in README, docs/ and examples/
is run by a test"). README's "Using it" block and examples/README.md are run by
test_docs_examples.py; here:

- every ``convgit …`` command written in docs/*.md and README.md (in a shell block or inline)
  is parsed by the real CLI: its command exists and every option it uses is one that command
  takes (a renamed or removed option fails here);
- the shell blocks of docs/search.md and docs/remotes.md are run, as a user types them, and
  their output checked (remotes: a directory remote stands for the bucket; the S3 path is run
  by tests/test_remote.py against a real SeaweedFS). The blocks of docs/serve.md and
  docs/mcp.md start servers: tests/test_serve.py and tests/test_mcp.py start them for real.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from cli_helpers import cli, env  # noqa: F401  (fixtures)
from test_docs_examples import _block, shell  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
PLACEHOLDER = re.compile(r"[<>…|{}]|\.\.\.|\bFILE\b|\[[A-Z]")  # a syntax line (cli.md), not a command


def _shown_commands() -> list[tuple[str, str]]:
    """(document, command) for every ``convgit …`` a document writes as a command."""
    out: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text("utf-8")
        found = []
        for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
            if lang in ("sh", "bash", "console", "shell"):
                for ln in body.splitlines():
                    ln = re.sub(r"\s+#\s.*$", "", ln).strip().removeprefix("$ ")
                    if ln.startswith("convgit "):
                        found.append(ln)
        found += re.findall(r"`(convgit [^`\n]+)`", text)
        for cmd in found:
            if PLACEHOLDER.search(cmd) or "$(" in cmd or ">" in cmd or "&&" in cmd or ";" in cmd:
                continue
            out.append((doc.name, cmd))
    return sorted(set(out))


COMMANDS = _shown_commands()


def test_the_docs_show_many_commands():
    assert len(COMMANDS) >= 80
    assert {d for d, _ in COMMANDS} >= {"cli.md", "search.md", "remotes.md", "README.md", "performance.md"}


@pytest.mark.parametrize("doc,command", COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in COMMANDS])
def test_every_command_the_docs_show_parses(doc, command, cli):
    """``--help`` appended: the real parser reads the whole line first (an unknown command or
    option fails with exit 2) and then prints the command's help instead of running it."""
    try:
        args = shlex.split(command)[1:]
    except ValueError:
        pytest.fail(f"{doc}: not a shell command: {command}")
    r = cli(*args, "--help")
    assert r.rc == 0, f"{doc}: `{command}` does not parse: {r.err.strip()[-500:]}"


def test_the_search_page_block_runs(shell):
    cmds = [c for c in _block(ROOT / "docs" / "search.md", "# Search") if c.startswith("convgit ")]
    assert cmds[0] == "convgit embed" and cmds[-1] == "convgit embed --status"
    d = shell.work / "s"
    shell(f"convgit init {d}")
    (d / ".convgit" / "config.toml").write_text('[core]\nfsync = false\n[embed]\nprovider = "hash"\n')
    gpu = {"messages": [{"role": "user", "content": "Should I buy the RTX 5080 or the RX 9070 XT?"},
                        {"role": "assistant", "content": "Compare two GPU upgrades: the RX 9070 XT is cheaper."}]}
    other = {"messages": [{"role": "user", "content": "a laptop with an RTX 5080"}, {"role": "assistant", "content": "ok"}]}
    (d / "gpu.json").write_text(json.dumps(gpu))
    (d / "other.json").write_text(json.dumps(other))
    shell("convgit commit -t main gpu.json && convgit commit -t laptop other.json", cwd=d)
    outs = [shell(c, cwd=d).stdout for c in cmds]
    assert "2" in outs[0] or "embedded" in outs[0].lower()  # embed: what it embedded
    assert "RX 9070" in outs[1]  # auto (hybrid) finds the GPU thread
    assert "main" in outs[2] or "RX 9070" in outs[2]  # --semantic --thread main: only main's messages
    assert "laptop" not in outs[2]
    assert "RTX 5080" in outs[3] and "laptop" not in outs[3].split("\n")[0].lower()  # NOT laptop
    assert "pending" in outs[4] and "indexed" in outs[4]


def test_the_remotes_page_block_runs_against_a_directory_remote(shell, tmp_path):
    cmds = _block(ROOT / "docs" / "remotes.md", "# ")
    assert [c.split()[1] for c in cmds] == ["remote", "push", "clone", "pull", "log"]
    bucket = tmp_path / "nas" / "convgit"
    a = shell.work / "a"
    shell(f"convgit init {a}")
    (a / "c.json").write_text(json.dumps({"messages": [{"role": "user", "content": "sync me"},
                                                       {"role": "assistant", "content": "synced"}]}))
    shell("convgit commit -t main c.json", cwd=a)
    run = [c.replace("s3://my-bucket/convgit", str(bucket)).replace("~/convgit", str(shell.work / "b")) for c in cmds]
    out = {}
    for c in run:
        cwd = shell.work / "b" if c.split()[1] in ("pull", "log") else a
        out[c.split()[1]] = shell(c, cwd=cwd).stdout
    assert (shell.work / "b" / ".convgit").is_dir()
    assert "synced" in out["log"]
    again = shell("convgit push --json", cwd=a).stdout
    assert json.loads(again)["bytes"] == 0
