"""Every command README.md, docs/*.md and examples/README.md show is run, and its output
checked (issue 11). The commands are read from the markdown (tests/helpers/doc_commands.py says what
counts), never copied here: a command a page gains is run by ``test_block`` or
``test_inline_command`` and fails there until ``CHECKS`` says what its output must hold.

How they run. Every shell block is run line by line with bash, as a user types it (``cd``
carries over, pipes and loops are bash's), in a fresh home (HOME / XDG dirs under tmp_path),
with ``convgit`` on PATH being this checkout. ``serve`` and ``mcp`` (stdio or ``--http``)
are started for real on 127.0.0.1 and used (a chat call through serve to a fake upstream,
an MCP session), then stopped. Inline commands run one by one in a copy of a prepared store.

The prepared store (built once per module, copied with ``shutil.copytree``): the six
examples/ conversations, a ``main`` thread about GPUs (docs/search.md's example), llm's
sample logs.db merged, the Claude Code fixture sessions imported, an origin remote on a real
S3 server (SeaweedFS, tests/helpers/s3.py) with the store pushed, and the fast ``hash``
embedding provider in config.toml (the local model is tested by test_semantic.py).

The only rewrites of a command, each narrow and for a stated reason (``rewrite``):

- the NAS endpoints ``http://nas:8333`` / ``http://192.168.1.10:8333`` become the local
  SeaweedFS address (its credentials are in the environment, or in the ``nas`` profile the
  page shows), and an ``s3://BUCKET/PREFIX`` URL gets a key prefix of the test's own
  (``s3://BUCKET/t<pid>-<n>/PREFIX``: one server serves every test); ``/tmp/demo`` becomes a directory under tmp_path; ``/path/to/examples`` is
  this checkout's examples/;
- ``convgit mcp --http`` gets ``--port 0``: the page's fixed 8788 is not free under xdist
  (serve's port comes from config.toml ``[serve] port = 0`` instead, no rewrite);
- README's Quickstart installs with ``python3 -m venv .venv && .venv/bin/pip install -q .``:
  the suite's own venv is that install, so the line runs from its first ``convgit`` on.

Where a page shows output (a ``console`` block: ``$ convgit …`` then what it prints), the
printed output is compared with it line by line after one normalisation (``normalise``):
the tmp directory becomes ``<tmp>``, and nothing else. Elsewhere ``CHECKS`` asserts the
essential content (the thread, the count, the JSON keys…), never only the exit code.
``NOT_RUN`` lists the few commands that cannot run here, each with its reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from helpers import doc_commands as dc
from helpers.cli import PY, cli_env, run_in_process

ROOT = dc.ROOT
LLM_DB = ROOT.parent / "shared" / "fixtures" / "llm" / "sample-logs.db"
NAS_ENDPOINTS = ("http://nas:8333", "http://192.168.1.10:8333")

# Commands that cannot run in a test, with the reason. Keep it short.
NOT_RUN: dict[str, str] = {}


# -- running ------------------------------------------------------------------------------------


@dataclass
class R:
    """What one command did: exit code, stdout, stderr, and what its server runner saw."""

    cmd: str
    rc: int
    out: str
    err: str
    seen: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"<{self.cmd!r} → {self.rc}\nstdout: {self.out[-3000:]}\nstderr: {self.err[-3000:]}\nseen: {self.seen}>"


class Sandbox:
    """A user's machine in tmp_path: home, a work directory (the cwd), convgit on PATH."""

    def __init__(self, tmp: Path, extra_env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        bindir = tmp / "bin"
        bindir.mkdir(exist_ok=True)
        wrapper = bindir / "convgit"
        wrapper.write_text(f'#!/bin/sh\nexec {PY} -m convgit "$@"\n')
        wrapper.chmod(0o755)
        self.env = cli_env(tmp)
        self.env.update(PATH=f"{bindir}:{self.env['PATH']}", PYTHONPATH=str(ROOT), **(extra_env or {}))
        self.home = Path(self.env["HOME"])
        self.work = tmp / "work"
        self.work.mkdir(exist_ok=True)
        self.cwd = self.work
        self.upstream = None  # a FakeUpstream when serve runs
        self.prefix = f"t{os.getpid()}-{time.monotonic_ns()}"  # this test's keys in the shared S3 server
        self.memo: dict = {}  # what a check leaves for the next one (examples/README's results)

    def rewrite(self, line: str) -> str:
        for nas in NAS_ENDPOINTS:
            line = line.replace(nas, self.env.get("S3_ENDPOINT", nas))
        line = re.sub(r"s3://([\w.-]+)/", lambda m: f"s3://{m.group(1)}/{self.prefix}/", line)
        line = line.replace("/tmp/demo", str(self.tmp / "demo")).replace("/path/to/examples", str(ROOT / "examples"))
        line = line.replace("python3 -m venv .venv && .venv/bin/pip install -q . && ", "")
        line = line.replace(".venv/bin/convgit", "convgit")
        if _argv(line)[:2] == ["mcp", "--http"]:
            line += " --port 0"
        return line

    def sh(self, line: str, stdin: str | None = None, timeout: float = 120) -> R:
        """One line in bash, in the current directory; a ``cd`` in it carries over."""
        script = f"{line}\n__rc=$?\nprintf '\\036%s' \"$PWD\" >&2\nexit $__rc\n"
        p = subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env, input=stdin or "",
                           capture_output=True, text=True, timeout=timeout)
        err, _, pwd = p.stderr.rpartition("\x1e")
        if pwd:
            self.cwd = Path(pwd)
        return R(line, p.returncode, p.stdout, err)

    def q(self, line: str, stdin: str | None = None) -> R:
        """A plain ``convgit ARGS`` line (``PLAIN``) run in this process, through the CLI's
        own entry point (typer's CliRunner), in the current directory and this environment:
        the same parser and code as a process, without its start-up."""
        argv = shlex.split(line)[1:]
        env = {k: v for k, v in self.env.items() if k not in os.environ or os.environ[k] != v}
        env.update({k: None for k in os.environ if k.startswith("CONVGIT_") and k not in self.env})
        res = run_in_process(argv, cwd=self.cwd, env=env, input=stdin or "")
        return R(line, res.rc, res.out, res.err)

    def run(self, shown: str, stdin: str | None = None) -> R:
        """A command as the page shows it: rewritten (``rewrite``), then started as a server
        (``serve``, ``mcp``), run in this process when it is a plain ``convgit ARGS`` line
        without shell syntax (``PLAIN``), else by bash, to its end."""
        line = self.rewrite(shown)
        argv = _argv(line)
        if argv[:1] == ["serve"] and "--drain" not in argv:
            r = _run_serve(self, line)
        elif argv[:1] == ["mcp"] and len(argv) > 1 and argv[1] in ("grant", "grants", "revoke"):
            r = self.sh(line, stdin)
        elif argv[:1] == ["mcp"] and "--print-token" not in argv:
            r = _run_mcp_http(self, line) if "--http" in argv else _run_mcp_stdio(self, line)
        elif PLAIN.fullmatch(line) and argv[:1] != ["--install-completion"]:  # (that one asks the shell)
            r = self.q(line, stdin)
        else:
            r = self.sh(line, stdin)
        r.cmd = shown
        return r


# ``convgit`` and arguments, no pipe, redirection, glob, ~, $ or command separator: bash would
# only split it into words, which shlex does the same way.
PLAIN = re.compile(r"convgit(?: [^|&;<>$`~*?\\]+)?")


def _argv(line: str) -> list[str]:
    """The arguments after the first ``convgit`` of a line (options before the command
    skipped: ``-C DIR``)."""
    try:
        words = shlex.split(line)
    except ValueError:
        return []
    for i, w in enumerate(words):
        if w == "convgit" or w.endswith("/convgit"):
            rest = words[i + 1:]
            while rest[:1] == ["-C"]:
                rest = rest[2:]
            return rest
    return []


def _popen(sb: Sandbox, line: str, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=sb.cwd, env=sb.env, stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _stop(p: subprocess.Popen) -> tuple[str, str]:
    """SIGINT (Ctrl-C) to the server this test started, then its output."""
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    return out, err


def _wait_line(p: subprocess.Popen, pattern: str, stream: str = "stderr") -> tuple[str, list[str]]:
    lines = []
    f = getattr(p, stream)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ln = f.readline()
        if not ln:
            break
        lines.append(ln)
        m = re.search(pattern, ln)
        if m:
            return m.group(1), lines
    _stop(p)
    raise AssertionError(f"no line matching {pattern!r}: {''.join(lines)}")


def _run_serve(sb: Sandbox, line: str) -> R:
    """Start serve (config.toml gives port 0 and the fake upstream), send a chat call through
    it, stop it with Ctrl-C; ``seen``: the reply and what ``log`` then shows."""
    p = _popen(sb, line)
    url, lines = _wait_line(p, r"listening on (http://\S+)|\"url\": \"(http://[^\"]+)\"",
                            "stdout" if "--json" in line else "stderr")
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Through the proxy: ping?"}]})
    req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", body.encode(), {"Content-Type": "application/json"})
    reply = json.loads(urllib.request.urlopen(req, timeout=60).read())
    out, err = _stop(p)
    log = sb.q("convgit log --all --json").out
    return R(line, p.returncode, out, "".join(lines) + err, {"reply": reply, "log": json.loads(log)})


def _rpc(p: subprocess.Popen, msg: dict) -> dict | None:
    p.stdin.write(json.dumps(msg) + "\n")
    p.stdin.flush()
    if "id" not in msg:
        return None
    while True:
        ln = p.stdout.readline()
        if not ln:
            raise AssertionError(f"the MCP server ended: {p.stderr.read()[-2000:]}")
        doc = json.loads(ln)
        if doc.get("id") == msg["id"]:
            return doc


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "docs-test", "version": "1"}}}


def _run_mcp_stdio(sb: Sandbox, line: str) -> R:
    """An MCP session over stdio (newline-delimited JSON-RPC): initialize, list the tools,
    search; then stdin closes and the server must end by itself."""
    p = _popen(sb, line, stdin=subprocess.PIPE)
    init = _rpc(p, INIT)
    _rpc(p, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    tools = _rpc(p, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    found = _rpc(p, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                     "params": {"name": "search", "arguments": {"query": "egg"}}})
    p.stdin.close()
    rc = p.wait(timeout=30)
    return R(line, rc, p.stdout.read(), p.stderr.read(), {"init": init, "tools": tools, "search": found})


def _run_mcp_http(sb: Sandbox, line: str) -> R:
    """Start ``mcp --http``, take the client's token (``mcp --print-token``), initialize and
    search through the SDK's streamable HTTP client, and check a wrong token is refused."""
    import asyncio

    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    p = _popen(sb, line)
    url, lines = _wait_line(p, r"serving (http://\S+)")
    client = _argv(line)[_argv(line).index("--client") + 1] if "--client" in _argv(line) else "default"
    token = sb.q(f"convgit mcp --print-token --client {client}").out.strip()

    async def session():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(url, http_client=http)) as c:
            tools = await c.list_tools()
            found = await c.call_tool("search", {"query": "egg"})
            return [t.name for t in tools.tools], json.loads(found.content[0].text)

    try:
        tools, found = asyncio.run(session())
        wrong = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            headers={"Accept": "application/json, text/event-stream", "Authorization": "Bearer cgt_no"})
    finally:
        out, err = _stop(p)
    return R(line, 0, out, "".join(lines) + err, {"tools": tools, "search": found, "wrong_token": wrong.status_code})


# -- the prepared stores ------------------------------------------------------------------------


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


GPU = {"messages": [{"role": "user", "content": "Should I buy the RTX 5080 or the RX 9070 XT?"},
                    {"role": "assistant", "content": "Compare two GPU upgrades: the RX 9070 XT is cheaper."}],
       "model": "gpt-4o"}
LAPTOP = {"messages": [{"role": "user", "content": "a laptop with an RTX 5080, for a zebra screensaver"},
                       {"role": "assistant", "content": "ok"}]}
TOKYO = {"messages": [{"role": "user", "content": "東京で velvet のソファを買える店は? (foo)"},
                      {"role": "assistant", "content": "銀座と渋谷に何軒かあります。"}]}
CONFIG = '[core]\nfsync = false\n[embed]\nprovider = "hash"\n[serve]\nport = 0\n'


def _user_files(sb: Sandbox) -> None:
    """What a user of these pages has at hand: llm's logs.db where llm keeps it, Claude Code
    sessions, the AWS profile docs/remotes.md shows."""
    llm_dir = sb.home / ".config" / "io.datasette.llm"
    llm_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(LLM_DB, llm_dir / "logs.db")
    shutil.copytree(ROOT / "tests" / "data" / "formats" / "claude-projects", sb.home / ".claude" / "projects")
    endpoint = sb.env.get("S3_ENDPOINT")
    if endpoint:
        (sb.home / ".aws").mkdir()
        (sb.home / ".aws" / "config").write_text(f"[profile nas]\nregion = us-east-1\nendpoint_url = {endpoint}\n")
        (sb.home / ".aws" / "credentials").write_text(
            f"[nas]\naws_access_key_id = {sb.env['AWS_ACCESS_KEY_ID']}\n"
            f"aws_secret_access_key = {sb.env['AWS_SECRET_ACCESS_KEY']}\n")


def _s3_env(weed, bucket: str) -> dict[str, str]:
    return {**weed.env(), "S3_ENDPOINT": weed.endpoint, "BUCKET": bucket}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, weed):
    """The prepared store in ``base/work/.convgit`` (module docstring), and its sandbox's
    environment; tests copy it."""
    base = tmp_path_factory.mktemp("prepared")
    bucket = f"docs-{os.getpid()}-{time.monotonic_ns()}"
    sb = Sandbox(base, _s3_env(weed, bucket))
    _user_files(sb)
    sb.q("convgit init -q")
    (sb.work / ".convgit" / "config.toml").write_text(CONFIG)
    (sb.tmp / "gpu.json").write_text(json.dumps(GPU))
    (sb.tmp / "laptop.json").write_text(json.dumps(LAPTOP))
    (sb.tmp / "tokyo.json").write_text(json.dumps(TOKYO, ensure_ascii=False))
    examples = " ".join(str(f) for f in sorted((ROOT / "examples").glob("0*.json")))
    for line in (f"convgit commit {examples}", "convgit commit -t laptop ../laptop.json",
                 "convgit commit -t tokyo ../tokyo.json", "convgit commit -t main ../gpu.json",
                 f"convgit merge -q {sb.home}/.config/io.datasette.llm/logs.db",
                 f"convgit import -q --format claude-code {sb.home}/.claude/projects",
                 f"convgit remote add origin s3://{bucket}/convgit", "convgit push -q"):
        r = sb.q(line)
        assert r.rc == 0, r
    return base, sb.env


@pytest.fixture
def rich(prepared, tmp_path) -> Sandbox:
    """A copy of the prepared store, in this test's own tmp_path."""
    base, env = prepared
    shutil.copytree(base, tmp_path, dirs_exist_ok=True, symlinks=True)
    sb = Sandbox(tmp_path, {k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                                                "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP", "S3_ENDPOINT", "BUCKET")})
    cfg = sb.work / ".convgit" / "config.toml"
    cfg.write_text(cfg.read_text().replace(str(base), str(tmp_path)))
    return sb


@pytest.fixture
def upstream():
    from helpers.serve import FakeUpstream

    u = FakeUpstream().start()
    yield u
    u.stop()


def _with_upstream(sb: Sandbox, upstream) -> None:
    cfg = sb.work / ".convgit" / "config.toml"
    text = cfg.read_text().replace("[serve]\n", f'[serve]\nopenai_upstream = "{upstream.url}"\n'
                                               f'anthropic_upstream = "{upstream.url}"\n')
    cfg.write_text(text)


# -- the blocks -----------------------------------------------------------------------------------


def _fresh(tmp_path, weed) -> Sandbox:
    sb = Sandbox(tmp_path, _s3_env(weed, f"fresh-{os.getpid()}-{time.monotonic_ns()}"))
    _user_files(sb)
    return sb


def _readme_using_it(tmp_path, weed, upstream) -> Sandbox:
    """README "Using it": the files it names in the cwd, a laptop store beside it, llm's and
    Claude Code's files in the home; the default store (no init: the block has none) gets
    the hash embedding provider."""
    sb = _fresh(tmp_path, weed)
    ex = ROOT / "examples"
    shutil.copy(ex / "01-recipe.json", sb.work / "chat.json")
    shutil.copy(ex / "02-recipe-continued.json", sb.work / "call.json")
    shutil.copy(ex / "03-recipe-alternative.json", sb.work / "more.json")
    _chatgpt_zip(sb.work / "chatgpt-export.zip")
    (sb.work / "export.json").write_text(json.dumps({"messages": [
        {"role": "user", "content": "tokenizer and unicode, near each other"},
        {"role": "assistant", "content": "A tokenizer splits unicode text."}], "model": "gpt-4o"}))
    (sb.work / "gpu.json").write_text(json.dumps(GPU))
    laptop = tmp_path / "laptop"
    assert sb.q(f"convgit init -q {laptop}").rc == 0 and sb.q(f"convgit -C {laptop} commit {ex / '05-multilingual.json'}").rc == 0
    store = Path(sb.q("convgit path").out.strip())
    assert sb.q(f"convgit init -q {store.parent}").rc == 0
    (store / "config.toml").write_text(CONFIG)
    return sb


def _quickstart(tmp_path, weed, upstream) -> Sandbox:
    sb = _fresh(tmp_path, weed)
    shutil.copytree(ROOT / "examples", sb.work / "examples")
    return sb


def _rich_with_upstream(rich_sb: Sandbox, upstream) -> Sandbox:
    _with_upstream(rich_sb, upstream)
    return rich_sb


def _rich_new_remote(rich_sb: Sandbox, upstream) -> Sandbox:
    """The prepared store without its origin remote (the block adds it)."""
    assert rich_sb.q("convgit remote remove origin").rc == 0
    return rich_sb


def _team_bucket(rich_sb: Sandbox, upstream) -> Sandbox:
    """docs/remotes.md's index-only store: team-bucket holds what someone pushed (the
    prepared store); the block starts in an empty directory."""
    assert rich_sb.q(rich_sb.rewrite("convgit remote add team s3://team-bucket/convgit")).rc == 0
    assert rich_sb.q("convgit push -q team").rc == 0
    rich_sb.cwd = rich_sb.tmp / "elsewhere"
    rich_sb.cwd.mkdir()
    return rich_sb


def _remotes_profile(rich_sb: Sandbox, upstream) -> Sandbox:
    """The ``nas`` profile the page shows (written by _user_files): no AWS_* variables."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"):
        rich_sb.env.pop(k, None)
    assert rich_sb.q("convgit remote remove origin").rc == 0
    return rich_sb


# (page, the block's first convgit line) → how the block's sandbox is made: fresh (a new
# user) or from the prepared store. A new block fails test_block until it is given one here.
FRESH, RICH = "fresh", "rich"
BLOCK_SETUP: dict[tuple[str, str], tuple[str, Callable]] = {
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/convgit commit examples/*.json"
                  " && .venv/bin/convgit log --all --graph"): (FRESH, _quickstart),
    ("README.md", "convgit commit chat.json"): (FRESH, _readme_using_it),
    ("README.md", "convgit mcp --client claude-code"): (RICH, lambda sb, u: sb),
    ("README.md", "convgit serve"): (RICH, _rich_with_upstream),
    ("README.md", "convgit remote add origin s3://my-bucket/convgit --endpoint http://nas:8333"): (RICH, _rich_new_remote),
    ("docs/mcp.md", "convgit mcp --client claude-code"): (RICH, lambda sb, u: sb),
    ("docs/remotes.md", "convgit remote add origin s3://my-bucket/convgit"): (RICH, _rich_new_remote),
    ("docs/remotes.md", "convgit push"): (RICH, lambda sb, u: sb),  # the transcript: origin has it all
    ("docs/remotes.md", "convgit remote add origin s3://convgit/laptop-and-desktop --profile nas"): (RICH, _remotes_profile),
    ("docs/remotes.md", "convgit init team-index && cd team-index"): (RICH, _team_bucket),
    ("docs/search.md", "convgit embed"): (RICH, lambda sb, u: sb),
    ("docs/serve.md", "convgit serve"): (RICH, _rich_with_upstream),
    ("examples/README.md", "convgit init /tmp/demo && cd /tmp/demo"): (FRESH, lambda tmp, w, u: _fresh(tmp, w)),
}

BLOCKS = [b for page in dc.PAGES for b in dc.blocks(page)]


def normalise(text: str, sb: Sandbox) -> list[str]:
    """The documented normalisation of printed output before it is compared with a page's:
    the test's tmp directory reads ``<tmp>``; trailing blanks go."""
    return [ln.rstrip() for ln in text.replace(str(sb.tmp), "<tmp>").rstrip("\n").split("\n")]


def check(r: R, sb: Sandbox, shown_output: list[str] | None = None) -> None:
    """The command succeeded, printed what the page shows (a transcript), and what CHECKS
    says its output must hold."""
    assert r.rc == 0 and "Traceback" not in r.err, r
    if shown_output is not None:  # a console transcript: the output must be what the page shows
        assert normalise(r.out, sb) == [ln.rstrip() for ln in shown_output], r
        return
    fn = CHECKS.get(r.cmd)
    assert fn is not None, f"no check for {r.cmd!r}: add one to CHECKS (or, if it cannot run, to NOT_RUN)"
    fn(r, sb)


@pytest.mark.skipif(not LLM_DB.is_file(), reason="../shared/fixtures is absent")
@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_block(block, tmp_path, request, upstream):
    key = (block.page, block.first)
    assert key in BLOCK_SETUP, f"{block.id} (under {block.heading!r}) is a new block: give it a setup in BLOCK_SETUP"
    kind, setup = BLOCK_SETUP[key]
    if kind == FRESH:
        sb = setup(tmp_path, request.getfixturevalue("weed"), upstream)
    else:
        sb = setup(request.getfixturevalue("rich"), upstream)
    sb.upstream = upstream
    for ln in block.lines:
        if ln.text in NOT_RUN:
            continue
        if not dc.runs_convgit(ln.text):  # pip install …, pytest: the test venv is that install
            continue
        r = sb.run(ln.text)
        check(r, sb, ln.shown_output)


INLINE = sorted({c for _, kind, c in dc.shown() if kind == "inline"})


@pytest.mark.skipif(not LLM_DB.is_file(), reason="../shared/fixtures is absent")
@pytest.mark.parametrize("command", INLINE)
def test_inline_command(command, rich, upstream):
    _with_upstream(rich, upstream)
    setup = INLINE_SETUP.get(command)
    stdin = setup(rich) if setup else None
    r = rich.run(command, stdin=stdin)
    check(r, rich)


def test_every_command_shown_is_run_or_listed():
    """The lists here name only what the pages show (a stale entry fails), and every command
    shown is run (blocks, inline) or listed in NOT_RUN with its reason."""
    shown = {c for _, kind, c in dc.shown() if kind in ("block", "inline")}
    assert len(shown) >= 80 and len(BLOCKS) >= 10
    assert set(NOT_RUN) <= shown and len(NOT_RUN) <= 5
    assert not (set(CHECKS) - shown), "CHECKS names commands no page shows"
    assert not set(INLINE_SETUP) - set(INLINE)
    missing = {c for c in shown if c not in CHECKS and c not in NOT_RUN}
    transcripts = {ln.text for b in BLOCKS for ln in b.lines if ln.shown_output}
    assert not (missing - transcripts), f"commands without a check: {sorted(missing - transcripts)}"
    used = {(b.page, b.first) for b in BLOCKS}
    assert used == set(BLOCK_SETUP), f"BLOCK_SETUP names blocks no page has: {set(BLOCK_SETUP) - used}"


# -- what each command's output must hold ---------------------------------------------------------


LLM = Path(PY).parent / "llm"  # llm 0.36, a test dependency
NEW_CONV = json.dumps({"messages": [{"role": "user", "content": "What is a pelican's wingspan?"},
                                    {"role": "assistant", "content": "Up to about 3 metres."}]})
ID = re.compile(r"^[0-9a-f]{64}$")
LOG_KEYS = {"id", "parent", "role", "text", "parts", "meta", "depth", "turn", "started_at", "model", "provenance", "key"}


def _store(sb: Sandbox) -> Path:
    return Path(sb.q("convgit path").out.strip())


def _threads(sb: Sandbox) -> dict[str, str]:
    return {name.removeprefix("refs/threads/"): tip
            for tip, name in (ln.split(" ", 1) for ln in sb.q("convgit show-ref").out.splitlines())}


def _log_all(sb: Sandbox) -> list[dict]:
    return json.loads(sb.q("convgit log --all --json").out)


def _has(*subs: str, err: bool = False) -> Callable[[R, Sandbox], None]:
    def fn(r: R, sb: Sandbox) -> None:
        text = r.err if err else r.out
        for sub in subs:
            assert sub in text, (sub, r)
    return fn


def _match(pattern: str, err: bool = False) -> Callable[[R, Sandbox], None]:
    def fn(r: R, sb: Sandbox) -> None:
        assert re.search(pattern, r.err if err else r.out, re.M), (pattern, r)
    return fn


def _all(*fns: Callable[[R, Sandbox], None]) -> Callable[[R, Sandbox], None]:
    def fn(r: R, sb: Sandbox) -> None:
        for f in fns:
            f(r, sb)
    return fn


def _same_as(other: str) -> Callable[[R, Sandbox], None]:
    """What the page says the command equals (``help log`` = ``log --help``)."""
    def fn(r: R, sb: Sandbox) -> None:
        assert r.out == sb.q(other).out and r.out.startswith("Usage: convgit "), r
    return fn


def _results(out: str) -> list[tuple[str, str]]:
    """search's human output: (the header line, the text line) of each result."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return [(lines[i], lines[i + 1]) for i in range(0, len(lines) - 1, 2) if re.match(r"^[0-9a-f]{12}  ", lines[i])]


# -- commits, logs, shows

def _commit_chat(r: R, sb: Sandbox) -> None:
    m = re.fullmatch(r"Created thread (\S+) at 4e21a26e908e: 3 new message\(s\)\n", r.out)
    assert m, r
    sb.memo["chat"] = m.group(1)


def _log_oneline(r: R, sb: Sandbox) -> None:
    lines = r.out.splitlines()
    assert len(lines) == 5 and lines[0].startswith(f"75e619da0162 ({sb.memo['chat']}) assistant"), r
    assert lines[-1].startswith("f6b6c2a4525c system    You are a concise cooking assistant"), r


def _show(r: R, sb: Sandbox) -> None:
    head = r.out.splitlines()[0]
    assert head == f"Thread {sb.memo['chat']} · 5 message(s) · tip 75e619da0162", r
    assert [ln.split(" · ")[0] for ln in r.out.splitlines() if ln.startswith("── ")] == \
        ["── system", "── user", "── assistant", "── user", "── assistant"], r


def _graph_with_idea(r: R, sb: Sandbox) -> None:
    lines = r.out.splitlines()
    assert lines[3].startswith("├─● d4fb2bf31cc9 user") and lines[5].startswith("└─● 8470fc3f537a user"), r
    assert lines[7].strip() == "● a4f83c1d5ca2 user: and with less sugar?  (idea)", r


def _threads_list(r: R, sb: Sandbox) -> None:
    rows = r.out.splitlines()
    assert len(rows) == len(_threads(sb)), r
    idea = next(ln for ln in rows if ln.startswith("* idea "))  # HEAD, marked
    assert "6 msg" in idea and f"[forked from {sb.memo['chat']}@4e21a26e908e]" in idea, r


def _export_all(r: R, sb: Sandbox) -> None:
    """"imports back into an empty store as it was": the same messages, in the same threads."""
    doc = json.loads((sb.cwd / "all.json").read_text())
    assert doc, r
    back = sb.tmp / "back"
    assert sb.q(f"convgit init -q {back}").rc == 0 and sb.q(f"convgit -C {back} import -q {sb.cwd / 'all.json'}").rc == 0
    ours = {(e["id"], e["parent"], e["role"], e["text"]) for e in _log_all(sb)}
    theirs = {(e["id"], e["parent"], e["role"], e["text"]) for e in json.loads(sb.q(f"convgit -C {back} log --all --json").out)}
    assert ours == theirs and len(ours) > 10


def _llm_db_export(r: R, sb: Sandbox) -> None:
    """A logs.db that ``llm logs -d back.db`` reads: llm 0.36's own CLI lists one
    conversation per exported thread."""
    m = re.fullmatch(r"Exported (\d+) threads \((\d+) messages, (\d+) turns\) to back\.db \(llm 0\.36 logs\.db\)\n", r.out)
    assert m, r
    p = subprocess.run([str(LLM), "logs", "-d", str(sb.cwd / "back.db"), "-n", "0", "--json"], capture_output=True,
                       text=True, env={**sb.env, "LLM_USER_PATH": str(sb.tmp / "llm-user")}, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert len({row["conversation_id"] for row in rows}) == int(m.group(1)) and len(rows) == int(m.group(3)), rows[:2]


def _merge_llm(r: R, sb: Sandbox) -> None:
    """13 conversations imported; "again and again idempotent": a second merge changes nothing."""
    assert r.out.count("\nimported ") + r.out.startswith("imported ") == 13, r
    again = sb.sh(r.cmd)
    assert again.rc == 0 and again.out == "Already up to date.\n", again


def _status_readme(r: R, sb: Sandbox) -> None:
    n = len(_threads(sb))
    assert re.search(rf"^Threads   {n} \(HEAD: idea\)$", r.out, re.M), r
    assert re.search(r"^Index     up to date", r.out, re.M) and re.search(r"^Messages  \d+ stored", r.out, re.M), r


def _gc(r: R, sb: Sandbox) -> None:
    assert r.out.startswith("gc did: pack ") and re.search(r"\(loose \d+ -> 0, packs", r.out), r


def _fsck(r: R, sb: Sandbox) -> None:
    assert re.fullmatch(rf"checked \d+ loose and \d+ packed object\(s\) in \d+ pack\(s\), {len(_threads(sb))} thread\(s\): ok\n", r.out), r


def _quickstart(r: R, sb: Sandbox) -> None:
    names = sorted(p.name for p in (sb.cwd / "examples").glob("*.json"))
    said = [ln.split(":")[0] for ln in r.out.splitlines() if ln.startswith("examples/")]
    assert said == [f"examples/{n}" for n in names], r
    graph = r.out[r.out.index("● "):]
    assert graph.count("├─●") == 1 and "(open-webui/b7e4c2a0-5d1f-4f3e-9a51-0c6d2e8f7a13)" in graph, r
    assert len(_threads(sb)) == 5  # 02 fast-forwarded 01's thread


# -- examples/README.md: its table and its tree

def _examples_results(r: R, sb: Sandbox) -> None:
    doc = (ROOT / "examples" / "README.md").read_text("utf-8")
    results = [json.loads(d) for d in re.split(r"(?<=\n})\n(?=\{)", r.out.strip())]
    table = re.findall(r"^\| (\d) \| (\S+) \| `(\w+)` \| .*? \| `([0-9a-f]{12})…` \| (\d+) \|", doc, re.M)
    assert len(table) == 6 == len(results), r
    for (n, name, status, tip, new), res in zip(table, results):
        assert (res["action"], res["tip"][:12], res["new_messages"]) == (status, tip, int(new)), name
    sb.memo["A"], sb.memo["B"] = results[1]["thread"], results[2]["thread"]


def _examples_graph(r: R, sb: Sandbox) -> None:
    """The fork tree as examples/README.md draws it (thread names A and B standing for the
    automatic names)."""
    if "A" not in sb.memo:  # run inline, in the prepared store: the same fork is in it
        assert re.search(r"^[├└]─● d4fb2bf31cc9 user", r.out, re.M) and re.search(r"^[├└]─● 8470fc3f537a user", r.out, re.M), r
        assert "(main)" in r.out, r
        return
    doc = (ROOT / "examples" / "README.md").read_text("utf-8")
    drawn = r.out.replace(f"({sb.memo['A']})", "(A)").replace(f"({sb.memo['B']})", "(B)")
    shown = doc[doc.index("shows the split:"):]
    shown = shown[shown.index("```\n") + 4:]
    shown_lines = [ln.strip() for ln in shown[: shown.index("```")].splitlines()]
    drawn_lines = [ln.strip() for ln in drawn.splitlines()]
    start = drawn_lines.index(shown_lines[0])
    assert drawn_lines[start:start + len(shown_lines)] == shown_lines, drawn


# -- remotes

def _push(r: R, sb: Sandbox) -> None:
    """Every thread is new on the remote; again: "Everything up to date." (0 bytes)."""
    new = {ln.split()[1] for ln in r.out.splitlines() if ln.startswith("new ")}
    assert new == set(_threads(sb)) and re.search(r"^pushed 1 pack\(s\), .* \d+ object\(s\)", r.out, re.M), r
    again = sb.q("convgit push")
    assert again.out == "Everything up to date.\n", again
    assert json.loads(sb.q("convgit push --json").out)["bytes"] == 0


def _clone(r: R, sb: Sandbox) -> None:
    """The other machine: every thread created there; the lines after this run in it."""
    created = {ln.split()[1] for ln in r.out.splitlines() if ln.startswith("created ")}
    assert created == set(_threads(sb)) and "cloned 1 pack(s)" in r.out, r
    sb.cwd = sb.home / "convgit"
    assert (sb.cwd / ".convgit").is_dir() and _log_all(sb)


def _log_origin_main(r: R, sb: Sandbox) -> None:
    assert r.out.startswith("message d8906768ed50") and "Compare two GPU upgrades" in r.out, r
    assert r.out.count("\nmessage ") + 1 == 2, r


def _remote_added(r: R, sb: Sandbox) -> None:
    url = re.search(r"(s3://\S+)", sb.rewrite(r.cmd)).group(1)
    assert r.err.strip() == f"added remote origin ({url})", r
    conf = (_store(sb) / "config.toml").read_text()
    assert f'url = "{url}"' in conf, conf
    if "--endpoint" in r.cmd:
        assert f'endpoint = "{sb.env["S3_ENDPOINT"]}"' in conf, conf
    if "--profile nas" in r.cmd:  # no AWS_* in the environment: the profile is all it has
        assert 'profile = "nas"' in conf, conf
        pushed = sb.sh("convgit push && convgit fetch --json")  # a process: boto reads the profile files
        assert pushed.rc == 0 and "pushed 1 pack(s)" in pushed.out and '"status": "ok"' in pushed.out, pushed


def _index_sync(r: R, sb: Sandbox) -> None:
    m = re.match(r"index synced from origin \(s3://\S+\): (\d+) thread\(s\) moved", r.out)
    assert m, r
    if "team-index" in str(sb.cwd):  # the index-only store: every thread, and no object here
        assert int(m.group(1)) == len(_threads(sb)) > 10, r
        assert not list((sb.cwd / ".convgit" / "objects").rglob("*.pack"))


def _zebra(r: R, sb: Sandbox) -> None:
    """The search finds the one zebra message, and the log lists every thread's messages."""
    first = _results(r.out)
    assert first and "zebra" in first[0][1] and first[0][0].endswith("laptop"), r
    assert "Compare two GPU upgrades" in r.out and "The pixel is pure red" in r.out, r


# -- search

def _embedded(r: R, sb: Sandbox) -> None:
    m = re.fullmatch(r"embedded (\d+) chunks \((\d+) new\) into hash-hash-v1-256-\w+ in [\d.]+ s\n", r.out)
    assert m and int(m.group(1)) > 5, r


def _gpu_hybrid(r: R, sb: Sandbox) -> None:
    res = _results(r.out)
    assert res and "RX 9070 XT" in res[0][1] and res[0][0].endswith("main"), r


def _semantic_main(r: R, sb: Sandbox) -> None:
    res = _results(r.out)
    assert len(res) == 2 and all(h.endswith("semantic  main") for h, _ in res), r


def _fts_not_laptop(r: R, sb: Sandbox) -> None:
    res = _results(r.out)
    assert len(res) == 1 and res[0][1].strip() == "Should I buy the «RTX 5080» or the RX 9070 XT?", r


def _embed_status(r: R, sb: Sandbox) -> None:
    assert re.search(r"^chunks     (\d+): \1 indexed, 0 pending, 0 failed$", r.out, re.M), r


# -- servers

def _serve(r: R, sb: Sandbox) -> None:
    """Listening on loopback, the call relayed to the (fake) upstream and its reply stored."""
    assert re.search(r"listening on http://127\.0\.0\.1:\d+ ", r.err), r
    answer = r.seen["reply"]["choices"][0]["message"]["content"]
    texts = {e["text"] for e in r.seen["log"]}
    assert answer and answer in texts and "Through the proxy: ping?" in texts, r
    assert re.search(r"^gpt-4o-mini-2024 -> \S+ \+2 msg", r.out, re.M), r


def _mcp_stdio(r: R, sb: Sandbox) -> None:
    init = r.seen["init"]["result"]
    assert init["serverInfo"]["name"] == "convgit", r
    tools = {t["name"] for t in r.seen["tools"]["result"]["tools"]}
    assert tools == {"save_conversation", "search", "get_conversation", "list_conversations", "fork_conversation"}
    found = json.loads(r.seen["search"]["result"]["content"][0]["text"])
    assert found["status"] == "ok" and any("egg" in x["excerpt"] for x in found["results"]), r


def _mcp_http(r: R, sb: Sandbox) -> None:
    assert re.search(r"^convgit mcp: serving http://127\.0\.0\.1:\d+/mcp$", r.err, re.M), r
    assert set(r.seen["tools"]) >= {"save_conversation", "search"} and r.seen["wrong_token"] == 401, r
    assert any("egg" in x["excerpt"] for x in r.seen["search"]["results"]), r


CHECKS: dict[str, Callable[[R, Sandbox], None]] = {
    # README: Quickstart
    "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/convgit commit examples/*.json"
    " && .venv/bin/convgit log --all --graph": _quickstart,
    # README: Using it
    "convgit commit chat.json": _commit_chat,
    "cat call.json | convgit commit -": _match(r"^Appended 2 message\(s\) to \S+, now at 75e619da0162$"),
    "convgit log --oneline": _log_oneline,
    "convgit show": lambda r, sb: _show(r, sb) if "chat" in sb.memo else _has(
        "Thread main · 2 message(s) · tip d8906768ed50", "Should I buy the RTX 5080")(r, sb),
    "convgit fork HEAD~2 idea": lambda r, sb: _has(f"Created thread idea at 4e21a26e908e (forked from {sb.memo['chat']})")(r, sb),
    "convgit commit --thread idea more.json": _match(r"^Appended 2 message\(s\) to idea, now at 2b8dc2ba5202$"),
    'echo \'{"messages": [{"role": "user", "content": "and with less sugar?"}]}\' | convgit commit -c idea -':
        _match(r"^Appended 1 message\(s\) to idea, now at a4f83c1d5ca2$"),
    "convgit log --all --graph": _graph_with_idea,
    "convgit threads": lambda r, sb: _threads_list(r, sb) if "chat" in sb.memo else _all(
        _match(r"^\* main +d8906768ed50 +2 msg  Should I buy"),
        lambda r, sb: len(r.out.splitlines()) == len(_threads(sb)) or pytest.fail(repr(r)))(r, sb),
    "convgit rev-parse idea~1": lambda r, sb: ID.match(r.out.strip()) and r.out.startswith("2b8dc2ba5202") or pytest.fail(repr(r)),
    "convgit import chatgpt-export.zip": _all(_has("imported      chatgpt/c1: 2 new message(s)  (Pelicans)"),
                                              _has("Imported 1 conversation(s): 1 imported", err=True)),
    "cat export.json | convgit import -": _match(r"^imported      native/[0-9a-f]{12}: 2 new message\(s\)"),
    "convgit export --all > all.json": _export_all,
    "convgit search 'NEAR(tokenizer unicode, 5)' --since 2w": lambda r, sb: [t for _, t in _results(r.out)] == [
        "    «tokenizer» and «unicode», near each other", "    A «tokenizer» splits «unicode» text."] or pytest.fail(repr(r)),
    "convgit embed": _embedded,
    # "then plain words search by meaning too (hybrid)": results found by the vectors too
    "convgit search 'when we compared two GPU upgrades'": lambda r, sb: (
        _results(r.out) and all("semantic" in h for h, _ in _results(r.out))) or pytest.fail(repr(r)),
    "convgit log --all -m gpt-4o -s": lambda r, sb: (r.out.count("  gpt-4o  ") == 1 and "  > tokenizer and unicode" in r.out
                                                     and "  < A tokenizer splits unicode text." in r.out) or pytest.fail(repr(r)),
    "convgit log --turns -u": _all(_match(r"^Total:  0 input, 0 output tokens over 3 turn\(s\)$"),
                                   _match(r"^[0-9a-f]{12}  \S+ \S+ UTC  gpt-4o  native/\w+  call$")),
    "convgit import --format claude-code ~/.claude/projects": lambda r, sb: _match(
        r"^imported      claude-code/5f0c2a8e-1b7d-4c1e-9a3f-2d4b6e8f0a11: 8 new message\(s\), 1 branch thread\(s\)"
        if "chat" in sb.memo else r"^Imported 1 conversation\(s\): 1 deduplicated; 0 new message\(s\)", err="chat" not in sb.memo)(r, sb),
    "convgit status": lambda r, sb: _status_readme(r, sb) if "chat" in sb.memo else _has(
        f"Threads   {len(_threads(sb))} (HEAD: main)", "Index     up to date")(r, sb),
    "convgit gc": _gc,
    "convgit fsck": _fsck,
    "convgit merge ../laptop": _all(_match(r"^created +\S+-4d6851 - -> 4d68517fc519$"), _match(r"^took 5 new object\(s\)")),
    "convgit merge ~/.config/io.datasette.llm/logs.db": _merge_llm,
    "convgit export --all -f llm-db -o back.db": _llm_db_export,
    "convgit reflog idea": lambda r, sb: [ln.split()[1] + " " + ln.split("] ")[1][:5] for ln in r.out.splitlines()] == [
        "idea@{0} commi", "idea@{1} commi", "idea@{2} fork:"] or pytest.fail(repr(r)),
    "convgit threads delete idea": _match(r"^Deleted thread idea \(was a4f83c1d5ca2\)"),
    "convgit threads restore idea": _match(r"^Restored thread idea at a4f83c1d5ca2 \(from logs/deleted/idea\.\d+\)$"),
    "convgit help log": _same_as("convgit log --help"),
    # README and docs/mcp.md: agents
    "convgit mcp --client claude-code": _mcp_stdio,
    "convgit mcp --http": _mcp_http,
    # serve
    "convgit serve": _serve,
    # sync
    "convgit remote add origin s3://my-bucket/convgit --endpoint http://nas:8333": _remote_added,
    "convgit remote add origin s3://my-bucket/convgit": _remote_added,
    "convgit remote add origin s3://convgit/laptop-and-desktop --profile nas": _remote_added,
    "convgit remote add origin s3://team-bucket/convgit": _remote_added,
    "convgit push": _push,
    "convgit clone s3://my-bucket/convgit ~/convgit --endpoint http://nas:8333": _clone,
    "convgit clone s3://my-bucket/convgit ~/convgit": _clone,
    "convgit pull": lambda r, sb: r.out == "Already up to date.\n" or pytest.fail(repr(r)),
    "convgit log origin/main": _log_origin_main,
    "convgit init team-index && cd team-index": lambda r, sb: (
        r.out == f"Initialized empty convgit store in {sb.cwd}/.convgit\n" and sb.cwd.name == "team-index") or pytest.fail(repr(r)),
    "convgit index sync --from origin": _index_sync,
    'convgit search "zebra" && convgit log --all': _zebra,
    # docs/search.md
    "convgit search 'that conversation where we compared two GPU upgrades'": _gpu_hybrid,
    "convgit search 'welche Grafikkarte soll ich kaufen' --semantic --thread main": _semantic_main,
    "convgit search '\"RTX 5080\" NOT laptop' --fts": _fts_not_laptop,
    "convgit embed --status": _embed_status,
    # examples/README.md
    "convgit init /tmp/demo && cd /tmp/demo": lambda r, sb: (
        r.out == f"Initialized empty convgit store in {sb.tmp}/demo/.convgit\n" and sb.cwd == sb.tmp / "demo") or pytest.fail(repr(r)),
    'for f in /path/to/examples/0*.json; do convgit commit --json "$f"; done': _examples_results,
    "convgit log --graph --all": _examples_graph,
}


# -- the commands shown inline, run in a copy of the prepared store ------------------------------


def _empty_store_with(name: str, make: Callable[[Sandbox], Path]) -> Callable[[Sandbox], None]:
    """Setup: ``name`` (made by ``make`` from the prepared store) in a new, empty store's directory."""
    def setup(sb: Sandbox) -> None:
        src = make(sb)
        assert sb.q(f"convgit init -q {sb.tmp / 'empty'}").rc == 0
        sb.cwd = sb.tmp / "empty"
        shutil.copy(src, sb.cwd / name)
    return setup


def _backup(sb: Sandbox) -> Path:
    assert sb.q("convgit bundle create ../backup.db").rc == 0
    sb.memo["threads"] = _threads(sb)
    return sb.tmp / "backup.db"


def _llm_logs(sb: Sandbox) -> Path:
    return sb.home / ".config" / "io.datasette.llm" / "logs.db"


def _stdin_of_main(sb: Sandbox) -> str:
    sb.memo["id"] = sb.q("convgit rev-parse main").out.strip()
    return sb.q("convgit cat-object -p main").out


def _gc_due(sb: Sandbox) -> None:
    cfg = sb.cwd / ".convgit" / "config.toml"
    cfg.write_text(cfg.read_text() + "[gc]\nauto_threshold = 1\n")


def _granted(sb: Sandbox) -> None:
    assert sb.q("convgit mcp grant cursor main").rc == 0


INLINE_SETUP: dict[str, Callable[[Sandbox], str | None]] = {
    "convgit commit": lambda sb: NEW_CONV,
    "convgit commit -": lambda sb: NEW_CONV,
    "convgit commit --json": lambda sb: NEW_CONV,
    "convgit hash-object -t message": _stdin_of_main,
    "convgit merge backup.db": _empty_store_with("backup.db", _backup),
    "convgit merge logs.db": _empty_store_with("logs.db", _llm_logs),
    "convgit gc --auto": _gc_due,
    "convgit mcp grants": _granted,
}


def _commit_new(r: R, sb: Sandbox) -> None:
    if r.cmd.endswith("--json"):
        doc = json.loads(r.out)
        assert (doc["status"], doc["action"], doc["new_messages"]) == ("ok", "created", 2), r
    else:
        assert re.fullmatch(r"Created thread \S+ at [0-9a-f]{12}: 2 new message\(s\)\n", r.out), r
    assert "Up to about 3 metres." in sb.q("convgit show").out


def _merge_backup(r: R, sb: Sandbox) -> None:
    """Into an empty store: every thread of the bundle, at its tip."""
    created = {ln.split()[1]: ln.split()[-1] for ln in r.out.splitlines() if ln.startswith("created ")}
    assert created == {k: v[:12] for k, v in sb.memo["threads"].items()}, r
    assert _threads(sb) == sb.memo["threads"]


def _log_all_json(r: R, sb: Sandbox) -> None:
    doc = json.loads(r.out)
    assert len(doc) == len({e["id"] for e in doc}) > 50 and all(set(e) == LOG_KEYS for e in doc), r
    texts = {e["text"] for e in doc}
    assert {"Should I buy the RTX 5080 or the RX 9070 XT?", "How long should I boil an egg for a jammy yolk?"} <= texts, r


def _search_one(text: str) -> Callable[[R, Sandbox], None]:
    def fn(r: R, sb: Sandbox) -> None:
        res = _results(r.out)
        assert res and res[0][0].endswith("  tokyo") and text in res[0][1], r
    return fn


def _bundle_create(r: R, sb: Sandbox) -> None:
    n = len(_threads(sb))
    assert re.fullmatch(rf"Wrote backup\.db: {n} thread\(s\), \d+ object\(s\), [\d.]+ KiB\n", r.out), r
    v = sb.q("convgit bundle verify backup.db --json")
    assert v.rc == 0 and json.loads(v.out)["problems"] == [], v


def _completion(r: R, sb: Sandbox) -> None:
    script = sb.home / ".bash_completions" / "convgit.sh"
    assert r.out.startswith(f"bash completion installed in {script}\n"), r
    assert "_CONVGIT_COMPLETE" in script.read_text() and str(script) in (sb.home / ".bashrc").read_text()


def _status_json(r: R, sb: Sandbox) -> None:
    doc = json.loads(r.out)
    assert doc["threads"] == len(_threads(sb)) and doc["head"] == "main" and doc["index"]["up_to_date"], r
    assert {"messages", "dedup_ratio", "objects", "bytes", "last_gc"} <= set(doc)


def _drain(r: R, sb: Sandbox) -> None:
    """Nothing was spooled by a stopped server here: nothing to record, nothing written."""
    if r.cmd.endswith("--json"):
        assert json.loads(r.out) == {"status": "drained", "recorded": 0}, r
    else:
        assert r.err.strip() == "convgit serve: 0 spooled call(s) recorded", r


def _gc_auto(r: R, sb: Sandbox) -> None:
    """From cron: it acts when gc is due (here: [gc] auto_threshold = 1), quietly."""
    log = _store(sb) / "gc.log"
    assert log.is_file() and json.loads(log.read_text().splitlines()[-1]), r
    assert "loose 0" in sb.q("convgit status").out.replace("Objects   0 loose", "loose 0"), r


CHECKS.update({
    "convgit --help": lambda r, sb: (r.out.startswith("Usage: convgit [OPTIONS] COMMAND [ARGS]...")
                                     and all(f"\n  {c} " in r.out for c in ("commit", "log", "search", "serve", "mcp"))) or pytest.fail(repr(r)),
    "convgit --install-completion": _completion,
    "convgit --version": lambda r, sb: r.out == f"convgit {__import__('convgit').__version__}\n" or pytest.fail(repr(r)),
    "convgit bundle create backup.db": _bundle_create,
    "convgit commit": _commit_new,
    "convgit commit -": _commit_new,
    "convgit commit --json": _commit_new,
    "convgit export --all --format llm-db -o back.db": _llm_db_export,
    "convgit gc --auto": _gc_auto,
    "convgit hash-object -t message": lambda r, sb: r.out.strip() == sb.memo["id"] or pytest.fail(repr(r)),
    "convgit help threads rename": _same_as("convgit threads rename --help"),
    "convgit threads rename --help": lambda r, sb: r.out.startswith("Usage: convgit threads rename [OPTIONS] OLD NEW\n") or pytest.fail(repr(r)),
    "convgit init": lambda r, sb: r.out == f"Reinitialized existing convgit store in {sb.cwd}/.convgit\n" or pytest.fail(repr(r)),
    "convgit log": lambda r, sb: (r.out.startswith("message d8906768ed50") and r.out.count("message ") == 2
                                  and "    Should I buy the RTX 5080" in r.out) or pytest.fail(repr(r)),
    "convgit log --all": lambda r, sb: len(re.findall(r"^message [0-9a-f]{64}", r.out, re.M)) == len(_log_all(sb)) or pytest.fail(repr(r)),
    "convgit log --all --json": _log_all_json,
    "convgit log --all -n 0 --json": lambda r, sb: json.loads(r.out) == _log_all(sb) or pytest.fail(repr(r)),
    "convgit log --json": lambda r, sb: [e["text"][:12] for e in json.loads(r.out)] == ["Compare two ", "Should I buy"] or pytest.fail(repr(r)),
    "convgit log -n 1": lambda r, sb: (r.out.count("message ") == 1 and r.out.startswith("message d8906768ed50")) or pytest.fail(repr(r)),
    "convgit log -s": _has("d8906768ed50  ", "  gpt-4o  main\n  > Should I buy the RTX 5080", "  < Compare two GPU upgrades"),
    "convgit mcp": _mcp_stdio,
    "convgit mcp --client bench": _mcp_stdio,
    "convgit mcp --http --client cursor": _mcp_http,
    "convgit mcp --print-token --client cursor": lambda r, sb: (
        re.fullmatch(r"cgt_[\w-]{20,}\n", r.out) and sb.q(r.cmd).out == r.out) or pytest.fail(repr(r)),
    "convgit mcp grants": _match(r"^main  cursor  grant$"),
    "convgit merge backup.db": _merge_backup,
    "convgit merge logs.db": lambda r, sb: r.out.count("imported      llm/") == 13 or pytest.fail(repr(r)),
    "convgit path": lambda r, sb: r.out == f"{sb.cwd}/.convgit\n" or pytest.fail(repr(r)),
    "convgit push origin main:main-laptop": _match(r"^new +main-laptop - -> d8906768ed50$"),
    "convgit reindex": lambda r, sb: re.fullmatch(rf"Rebuilt the index: {len(_log_all(sb))} messages in {len(_threads(sb))} threads \([\d.]+s\)\n", r.out) or pytest.fail(repr(r)),
    "convgit search 東京": _search_one("«東京»"),
    "convgit search foo": _search_one("«foo»"),
    "convgit search velvet -n 20 --json": lambda r, sb: [(x["snippet"], x["threads"]) for x in json.loads(r.out)] == [("東京で velvet のソファを買える店は? (foo)", ["tokyo"])] or pytest.fail(repr(r)),
    "convgit serve --drain": _drain,
    "convgit serve --drain --json": _drain,
    "convgit status --json": _status_json,
})
