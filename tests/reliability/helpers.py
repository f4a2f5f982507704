"""Helpers shared by the reliability tests (no fixtures here).

Conventions (research/reliability.md §3):
- *acked*: the library call returned (or the CLI exited 0); ack lines are written after it.
- *fsck clean*: no problem of severity ``error``; leftovers (temp files, unreachable objects)
  are warnings / information.
- *no write*: the files of ``.convgit`` are byte-identical before and after (the derived index
  and kernel-lock files excepted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import convgit
from convgit import graph
from convgit.api import message_text
from convgit.repository import Repository

NOW = 1_700_000_000_000
PY = sys.executable


# -- stores ---------------------------------------------------------------------------------


def new_store(parent: Path | str, *, fsync: bool = True, extra_toml: str = "") -> Repository:
    """A store at ``parent/.convgit`` (config.toml written explicitly)."""
    repo = convgit.init(Path(parent) / ".convgit")
    (repo.path / "config.toml").write_text(f"[core]\nfsync = {'true' if fsync else 'false'}\n{extra_toml}")
    path = repo.path
    repo.close()
    return Repository.open(path)


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def history(repo: Repository, thread: str) -> list[dict]:
    """The thread's conversation as a payload (root first), read back from the store."""
    tip = repo.refs.read(thread)
    if tip is None:
        return []
    out = [{"role": m.role, "content": message_text(repo, m)} for _, m in graph.iter_ancestry(repo.objects, tip)]
    out.reverse()
    return out


def append(repo: Repository, thread: str, text: str, **kw):
    """Commit the thread's history plus one message (what a stateless caller does)."""
    return convgit.commit(repo, {"messages": history(repo, thread) + [user(text)]}, thread=thread, **kw)


def chain(repo: Repository, tip: str | None) -> list[str]:
    """Ids from the root to ``tip``."""
    return graph.ancestry_ids(repo.objects, tip) if tip else []


def chain_texts(repo: Repository, tip: str | None) -> list[str]:
    if tip is None:
        return []
    out = [message_text(repo, m) for _, m in graph.iter_ancestry(repo.objects, tip)]
    out.reverse()
    return out


def fsck_errors(repo: Repository, *, check_index: bool = True) -> list[str]:
    from convgit.fsck import fsck

    rep = fsck(repo, check_index=check_index)
    return [f"{p.kind}: {p.message}" for p in rep.errors]


def is_ancestor(repo: Repository, a: str, b: str | None) -> bool:
    oid = b
    while oid is not None:
        if oid == a:
            return True
        oid = graph.read_message(repo.objects, oid).parent
    return False


# -- files ----------------------------------------------------------------------------------


def _skip(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name.startswith("index.sqlite") or name.endswith(".lock") or rel == "lock"


def store_files(store: Path | str) -> dict[str, bytes | None]:
    """relative path -> bytes (None for a directory) of everything under ``.convgit`` except the
    derived index and kernel-lock files. Equal = nothing written, nothing deleted."""
    store = Path(store)
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(store):
        for n in dirnames:
            rel = (Path(dirpath) / n).relative_to(store).as_posix()
            out[rel] = None
        for n in filenames:
            p = Path(dirpath) / n
            rel = p.relative_to(store).as_posix()
            if not _skip(rel):
                out[rel] = p.read_bytes()
    return out


def tree_snapshot(store: Path | str) -> dict[str, tuple]:
    """relative path -> (size, mode, mtime_ns, bytes) of every file (index and locks excepted),
    directories by presence: the "deletes nothing / writes nothing" oracle of T3.3."""
    store = Path(store)
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(store):
        for n in dirnames:
            out[(Path(dirpath) / n).relative_to(store).as_posix()] = ("d",)
        for n in filenames:
            p = Path(dirpath) / n
            rel = p.relative_to(store).as_posix()
            if _skip(rel):
                continue
            st = p.lstat()
            out[rel] = (st.st_size, st.st_mode, st.st_mtime_ns, p.read_bytes() if not p.is_symlink() else os.readlink(p))
    return out


def temp_files(store: Path | str) -> list[str]:
    return sorted(os.path.join(dp, f) for dp, _, fs in os.walk(store) for f in fs if f.startswith("tmp_"))


def age_tree(root: Path | str, seconds: float) -> None:
    """Move every mtime under ``root`` back by ``seconds`` (git's test-tool chmtime)."""
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            st = os.lstat(p)
            os.utime(p, (st.st_atime - seconds, st.st_mtime - seconds), follow_symlinks=False)


# -- the real CLI -----------------------------------------------------------------------------


def cli_env(base: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    for var, sub in (("HOME", "home"), ("XDG_DATA_HOME", "data"), ("XDG_CONFIG_HOME", "config")):
        d = Path(base) / "cli-user" / sub
        d.mkdir(parents=True, exist_ok=True)
        env[var] = str(d)
    env.update({"NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "100"})
    env.update(extra)
    return env


def run_cli(args, *, store: Path | str, env: dict[str, str], input: bytes | str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m convgit -C <dir holding .convgit> ARGS`` in a real process."""
    if isinstance(input, str):
        input = input.encode()
    project = Path(store).parent if Path(store).name == ".convgit" else Path(store)
    return subprocess.run([PY, "-m", "convgit", "-C", str(project), *map(str, args)], env=env,
                          input=input or b"", capture_output=True, timeout=timeout, cwd=str(project))


def cli_json(args, *, store: Path | str, cwd: Path | None = None, input: str | None = None) -> tuple[int, str]:
    """One CLI invocation in-process (typer's CliRunner): (exit code, stdout)."""
    from typer.testing import CliRunner

    from convgit.cli import app as app_mod, output

    project = Path(store).parent if Path(store).name == ".convgit" else Path(store)
    old = os.getcwd()
    os.chdir(project)
    try:
        r = CliRunner().invoke(app_mod.app, [str(a) for a in args], input=input, catch_exceptions=False,
                               prog_name="convgit")
    finally:
        app_mod.reset_repo()
        output.set_json(False)
        os.chdir(old)
    return r.exit_code, r.stdout


def dumps(doc) -> str:
    return json.dumps(doc, ensure_ascii=False)
