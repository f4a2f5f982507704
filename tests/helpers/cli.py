"""Helpers and fixtures for the CLI tests: run convgit as a user would.

Two ways to run a command, with one result type:

- ``run``: a real process (``python -m convgit``) with its own cwd and an environment whose
  HOME / XDG dirs point into ``tmp_path`` and which carries no ``CONVGIT_*`` variable but
  ``CONVGIT_GC_AUTO=0`` (no background gc; tests/test_gc_auto.py turns it on).
- ``cli``: the same command in-process through typer's CliRunner (fast, for bulk cases).

Test modules import what they need: ``from helpers.cli import cli, run, proj, ...``
(pytest picks up fixtures imported into a test module).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from convgit.errors import ALL_ERRORS

PY = sys.executable
ERRORS = {cls.code: cls for cls in ALL_ERRORS}  # error_code → class (its exit_code)

# Stable, colourless, unwrapped-by-the-terminal output for every run.
STABLE_ENV = {"NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "100"}


# -- environments -----------------------------------------------------------------------------


def cli_env(base: Path, **extra: str) -> dict[str, str]:
    """The environment of a user whose home and data dirs live under ``base``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    for var, sub in (("HOME", "home"), ("XDG_DATA_HOME", "data"), ("XDG_CONFIG_HOME", "config")):
        d = base / "user" / sub  # beside, not inside, what tests/conftest.py creates
        d.mkdir(parents=True, exist_ok=True)
        env[var] = str(d)
    env.update(STABLE_ENV)
    env["CONVGIT_GC_AUTO"] = "0"  # no background gc after writes (unless ``extra`` says so)
    env.update(extra)
    return env


def default_store(base: Path) -> Path:
    """Where the per-user default store lands for ``cli_env(base)`` (XDG on Linux)."""
    return base / "user" / "data" / "convgit" / ".convgit"


def ancestor_store(path: Path) -> Path | None:
    """A ``.convgit`` directory in ``path`` or above it (would hijack store discovery)."""
    for d in (path, *path.parents):
        if (d / ".convgit").is_dir():
            return d / ".convgit"
    return None


# -- results ----------------------------------------------------------------------------------


@dataclass
class Result:
    rc: int
    out_bytes: bytes
    err_bytes: bytes
    args: tuple[str, ...] = ()

    @property
    def out(self) -> str:
        return self.out_bytes.decode("utf-8")

    @property
    def err(self) -> str:
        return self.err_bytes.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.out)

    def __repr__(self) -> str:
        return f"<convgit {' '.join(self.args)} → {self.rc}\nstdout: {self.out[:2000]}\nstderr: {self.err[:2000]}>"


def ok(r: Result) -> Result:
    """Assert success (and that nothing was said on stderr that looks like a crash)."""
    assert r.rc == 0, r
    assert "Traceback" not in r.err, r
    return r


def assert_error(r: Result, code: str, *, json_: bool | None = None) -> dict | None:
    """Assert ``r`` failed with ``code``: its documented exit code, no traceback, and the
    error shape (a JSON document on stdout under --json, one line on stderr otherwise)."""
    cls = ERRORS[code]
    assert r.rc == cls.exit_code, (code, cls.exit_code, r)
    assert "Traceback" not in r.err and "Traceback" not in r.out, r
    if json_ is None:
        json_ = "--json" in r.args
    if json_:
        doc = r.json()
        assert doc["status"] == "error", r
        assert doc["error_code"] == code, r
        assert isinstance(doc["error_message"], str) and doc["error_message"], r
        return doc
    assert r.out == "", r
    assert r.err.startswith("convgit: error: "), r
    assert r.err.rstrip("\n").endswith(f"[{code}]"), r
    assert r.err.count("\n") == 1, r
    return None


# -- runners ----------------------------------------------------------------------------------


Runner = Callable[..., Result]


def run_process(args: Sequence[Any], *, cwd: Path, env: dict[str, str], input: bytes | str | None = None,
                timeout: float = 60) -> Result:
    if isinstance(input, str):
        input = input.encode("utf-8")
    argv = [str(a) for a in args]
    p = subprocess.run(
        [PY, "-m", "convgit", *argv], cwd=cwd, env=env, input=input if input is not None else b"",
        capture_output=True, timeout=timeout,
    )
    return Result(p.returncode, p.stdout, p.stderr, tuple(argv))


def run_in_process(args: Sequence[Any], *, cwd: Path, env: dict[str, str | None] | None = None,
                   input: bytes | str | None = None) -> Result:
    """One invocation through CliRunner, leaving no state behind (cwd, open store, --json)."""
    from typer.testing import CliRunner

    from convgit.cli import app as app_mod, output

    argv = [str(a) for a in args]
    old = os.getcwd()
    os.chdir(cwd)
    try:
        r = CliRunner().invoke(app_mod.app, argv, input=input, env=env, catch_exceptions=False, prog_name="convgit")
    finally:
        app_mod.reset_repo()
        output.set_json(False)
        os.chdir(old)
    return Result(r.exit_code, r.stdout_bytes, r.stderr_bytes or b"", tuple(argv))


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return cli_env(tmp_path)


@pytest.fixture
def proj(tmp_path, cli) -> Path:
    """A project directory with a fresh store in ``proj/.convgit`` (made by ``convgit init``)."""
    d = tmp_path / "proj"
    r = cli("init", "--json", cwd=d)
    assert r.rc == 0, r
    return d


@pytest.fixture
def run(tmp_path, env) -> Runner:
    """``run(*args, cwd=, input=, env=)``: convgit in a real process (default cwd: tmp_path/proj)."""

    def _run(*args: Any, cwd: Path | None = None, input: bytes | str | None = None,
             env_extra: dict[str, str] | None = None, env_: dict[str, str] | None = None) -> Result:
        e = dict(env_ if env_ is not None else env)
        e.update(env_extra or {})
        c = cwd or tmp_path / "proj"
        c.mkdir(parents=True, exist_ok=True)
        return run_process(args, cwd=c, env=e, input=input)

    return _run


@pytest.fixture
def cli(tmp_path, env, monkeypatch) -> Runner:
    """``cli(*args, cwd=, input=, env_extra=)``: convgit in-process (default cwd: tmp_path/proj)."""
    for k, v in env.items():
        if k in ("HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME") or k in STABLE_ENV:
            monkeypatch.setenv(k, v)
    for k in list(os.environ):
        if k.startswith("CONVGIT_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("CONVGIT_GC_AUTO", "0")  # no background gc from an in-process command

    def _cli(*args: Any, cwd: Path | None = None, input: bytes | str | None = None,
             env_extra: dict[str, str | None] | None = None) -> Result:
        c = cwd or tmp_path / "proj"
        c.mkdir(parents=True, exist_ok=True)
        return run_in_process(args, cwd=c, env=env_extra, input=input)

    return _cli


# -- conversations ----------------------------------------------------------------------------


def conv(*texts: str, first: str = "user") -> list[dict]:
    """Messages alternating user/assistant (starting with ``first``), one per text."""
    roles = ("user", "assistant") if first == "user" else ("assistant", "user")
    return [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]


def native(*texts: str, **turn: Any) -> dict:
    """convgit's native shape: ``{"messages": [...], **turn metadata}``."""
    return {"messages": conv(*texts), **turn}


def write_json(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False), "utf-8")
    return path


def dumps(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False)


# -- the store as files -----------------------------------------------------------------------


def store_state(store: Path) -> dict[str, bytes | None]:
    """Every file and directory under a ``.convgit`` (relative path → bytes; None for a dir),
    except the derived index and lock files (``lock``, ``refs/threads/<name>.lock``: targets of
    kernel locks, not data). Equal states = nothing was written."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(store):
        for name in dirnames:
            out[(Path(dirpath) / name).relative_to(store).as_posix()] = None
        for name in filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(store).as_posix()
            if rel.startswith("index.sqlite") or rel == "lock" or rel.endswith(".lock"):
                continue
            out[rel] = p.read_bytes()
    return out


def object_ids(store: Path) -> list[str]:
    """Every loose object id in the store, from its file names."""
    objs = store / "objects"
    ids = []
    for d in sorted(objs.iterdir()):
        if d.is_dir() and len(d.name) == 2:
            ids.extend(d.name + f.name for f in sorted(d.iterdir()) if len(d.name + f.name) == 64)
    return ids


def unique_prefix(store: Path, oid: str, n: int = 4) -> str:
    """The shortest prefix of ``oid`` (at least ``n`` hex) that no other stored object has."""
    others = [o for o in object_ids(store) if o != oid]
    while any(o.startswith(oid[:n]) for o in others):
        n += 1
    return oid[:n]
