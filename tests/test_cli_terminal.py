"""What convgit does only on a terminal, run on a real pseudo-terminal (``pty``): the pager,
progress bars, summarised reports; and shell completion through typer's protocol (the
``_CONVGIT_COMPLETE`` variable, as a shell calls it) and its install/show options."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from helpers.cli import PY, cli, cli_env, conv, dumps, env, ok, proj, run  # noqa: F401

from convgit.cli import progress


def run_pty(args, *, cwd: Path, env: dict, timeout: float = 60, stdin: bytes | None = None) -> tuple[int, str]:
    """convgit with stdout and stderr on a pseudo-terminal (stdin too, unless ``stdin`` is given):
    (exit code, everything the terminal received)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    e = {k: v for k, v in env.items() if k not in ("NO_COLOR",)}
    e["TERM"] = "xterm"
    p = subprocess.Popen([PY, "-m", "convgit", *map(str, args)], cwd=cwd, env=e, stdout=slave, stderr=slave,
                         stdin=subprocess.PIPE if stdin is not None else slave)
    os.close(slave)
    if stdin is not None:
        p.stdin.write(stdin)
        p.stdin.close()
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], timeout)
        if not r:
            p.kill()
            raise AssertionError(f"convgit {args} hung; so far: {out[-2000:]!r}")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(timeout=timeout), out.decode("utf-8", "replace").replace("\r\n", "\n")


def _thread(cli, name: str, n: int = 3):
    ok(cli("commit", "-", "--thread", name, input=dumps({"messages": conv(*[f"{name} line {i}" for i in range(n)])})))


# -- the pager ------------------------------------------------------------------------------


@pytest.fixture
def pager_script(tmp_path) -> tuple[str, Path]:
    """A pager that marks every line it shows and notes that it ran (and with which LESS)."""
    seen = tmp_path / "pager-ran"
    script = tmp_path / "mypager.py"
    script.write_text(
        "import os, sys\n"
        f"open({str(seen)!r}, 'w').write(os.environ.get('LESS', ''))\n"
        "for line in sys.stdin:\n"
        "    sys.stdout.write('PAGED|' + line)\n"
    )
    return f"{sys.executable} {script}", seen


def test_log_and_show_go_through_the_pager_on_a_terminal(cli, proj, env, pager_script):
    _thread(cli, "main")
    pager, seen = pager_script
    rc, out = run_pty(["log", "--oneline"], cwd=proj, env={**env, "CONVGIT_PAGER": pager})
    assert rc == 0 and seen.read_text() == "FRX"  # git's default LESS
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 3 and all(ln.startswith("PAGED|") for ln in lines), out
    assert "\x1b[" in out  # still coloured through the pager, as git does
    seen.unlink()
    rc, out = run_pty(["show"], cwd=proj, env={**env, "PAGER": pager})
    assert rc == 0 and seen.exists() and "PAGED|" in out and "main line 2" in out
    # CONVGIT_PAGER wins over PAGER
    rc, out = run_pty(["show"], cwd=proj, env={**env, "PAGER": "false", "CONVGIT_PAGER": pager})
    assert rc == 0 and "PAGED|" in out


def test_no_pager_when_asked_piped_or_json(cli, proj, env, pager_script, run):
    _thread(cli, "main")
    pager, seen = pager_script
    e = {**env, "CONVGIT_PAGER": pager}
    for args in (["--no-pager", "log"], ["-P", "show"], ["log", "--json"]):
        rc, out = run_pty(args, cwd=proj, env=e)
        assert rc == 0 and "PAGED|" not in out and not seen.exists(), (args, out)
    r = ok(run("log", env_extra={"CONVGIT_PAGER": pager}))  # piped: never a pager
    assert "PAGED|" not in r.out and not seen.exists()
    rc, out = run_pty(["log"], cwd=proj, env={**env, "CONVGIT_PAGER": "cat"})
    assert rc == 0 and "main line 2" in out


def test_a_pager_that_quits_early_is_not_an_error(cli, proj, env):
    for i in range(40):
        _thread(cli, f"t{i}", 2)
    rc, out = run_pty(["log", "--all"], cwd=proj, env={**env, "CONVGIT_PAGER": "head -n 3"})
    assert rc == 0 and "Traceback" not in out and len([ln for ln in out.splitlines() if ln.strip()]) <= 3


# -- progress and summaries -------------------------------------------------------------------


def _big_jsonl(path: Path, n: int, size: int = 0) -> Path:
    pad = "x" * size
    path.write_text("\n".join(dumps({"messages": conv(f"question {i} {pad}", f"answer {i}")}) for i in range(n)) + "\n")
    return path


def test_import_shows_a_progress_bar_on_a_terminal_only(cli, proj, env, tmp_path, run):
    f = _big_jsonl(tmp_path / "big.jsonl", 400, 4000)  # > 1 MiB
    rc, out = run_pty(["import", f], cwd=proj, env=env)
    assert rc == 0 and "importing" in out and "left" in out, out[-3000:]
    g = _big_jsonl(tmp_path / "big2.jsonl", 400, 4001)
    r = ok(run("import", g))
    assert "importing" not in r.err and "\x1b" not in r.err  # piped: no progress
    rc, out = run_pty(["import", "-q", _big_jsonl(tmp_path / "big3.jsonl", 400, 4002)], cwd=proj, env=env)
    assert rc == 0 and out.strip() == ""  # -q: nothing at all


def test_a_long_report_is_summarised_on_a_terminal(cli, proj, env, tmp_path):
    f = _big_jsonl(tmp_path / "many.jsonl", 30)
    rc, out = run_pty(["import", f], cwd=proj, env=env)
    imported = [ln for ln in out.splitlines() if ln.startswith("imported")]
    assert rc == 0 and len(imported) == 10 and "20 more (--verbose lists every conversation)" in out, out
    g = _big_jsonl(tmp_path / "many2.jsonl", 30, 1)
    rc, out = run_pty(["import", "--verbose", g], cwd=proj, env=env)
    assert rc == 0 and len([ln for ln in out.splitlines() if ln.startswith("imported")]) == 30


def test_eta_is_the_work_left_at_the_average_rate():
    assert progress.eta_seconds(0, 100, 5) is None
    assert progress.eta_seconds(25, 100, 10) == pytest.approx(30)  # 2.5 units/s, 75 left
    assert progress.eta_seconds(100, 100, 10) == 0
    assert progress.format_eta(None) == "-:--:--" and progress.format_eta(3725) == "1:02:05"


def test_import_progress_follows_the_imported_bytes(proj, tmp_path):
    """The library reports bytes once their conversations are imported, in all exactly the
    input's size (a bar that ends at 100%, not before the work)."""
    import convgit

    f = _big_jsonl(tmp_path / "p.jsonl", 50, 100)
    repo = convgit.open_repo(proj)
    seen = []
    convgit.import_paths(repo, [f], progress=seen.append)
    assert sum(seen) == f.stat().st_size and all(n > 0 for n in seen)
    repo.close()


# -- shell completion -------------------------------------------------------------------------


def _complete(env, cwd, words: str, shell: str = "bash") -> list[str]:
    e = {**env, "_CONVGIT_COMPLETE": f"complete_{shell}"}
    if shell == "bash":
        e.update(COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)))
    else:
        e["_TYPER_COMPLETE_ARGS"] = words
    p = subprocess.run([PY, "-m", "convgit"], cwd=cwd, env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_completion_of_commands_threads_and_revisions(cli, proj, env):
    _thread(cli, "main")
    _thread(cli, "idea")
    _thread(cli, "ideas-2")
    assert _complete(env, proj, "convgit thr") == ["threads"]
    assert _complete(env, proj, "convgit switch id") == ["idea", "ideas-2"]
    assert _complete(env, proj, "convgit log ") == ["HEAD", "idea", "ideas-2", "main"]
    assert "main~1" in _complete(env, proj, "convgit show main")
    assert _complete(env, proj, "convgit log --thread ma") == ["main"]
    assert _complete(env, proj, "convgit threads delete i") == ["idea", "ideas-2"]
    assert "idea" in " ".join(_complete(env, proj, "convgit fork id", shell="zsh"))


def test_completion_outside_a_store_offers_nothing_and_creates_nothing(env, tmp_path):
    from helpers.cli import default_store

    here = tmp_path / "nowhere"
    here.mkdir()
    assert _complete(env, here, "convgit switch ") == []
    assert not default_store(tmp_path).exists()


def test_show_and_install_completion(env, tmp_path):
    p = subprocess.run(["bash", "-c", f"{PY} -m convgit --show-completion"], env=env, capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0 and "_convgit_completion" in p.stdout and "_CONVGIT_COMPLETE" in p.stdout, p
    home = Path(env["HOME"])
    p = subprocess.run(["bash", "-c", f"{PY} -m convgit --install-completion"], env=env, capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0 and "bash completion installed" in p.stdout, p
    assert "convgit" in (home / ".bashrc").read_text()
    script = next((home / ".bash_completions").glob("convgit*"))
    assert "_CONVGIT_COMPLETE" in script.read_text()


def test_fsck_progress_counts_every_object(cli, proj, env, tmp_path):
    import convgit

    f = _big_jsonl(tmp_path / "many.jsonl", 800)
    ok(cli("import", "-q", f))
    repo = convgit.open_repo(proj)
    seen = []
    rep = convgit.fsck(repo, progress=lambda done, total: seen.append((done, total)))
    repo.close()
    total = rep.loose + rep.packed
    assert rep.ok and seen[-1] == (total, total) and total > 2000
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    rc, out = run_pty(["fsck"], cwd=proj, env=env)
    assert rc == 0 and "checking objects" in out and f"checked {rep.loose} loose" in out
