"""A full disk (issue 9, defect 12): every command fails with ``storage_failed`` (40) and no
traceback, a failed index update never fails a write that happened (the write stands, the
index catches up), and the store works again as soon as space is freed.

Two ways: a real 2 MiB tmpfs filled by a filler file (root only; skipped elsewhere), and
injected faults that run everywhere (SQLite's own SQLITE_FULL through ``max_page_count``,
ENOSPC from ``os.write``).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.cli import (  # noqa: F401  (fixtures)
    assert_error,
    cli,
    cli_env,
    dumps,
    env,
    native,
    ok,
    proj,
    run,
    store_state,
)
from convgit import fsio
from convgit.index import Index

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "chatgpt" / "librechat-chatgpt-tree.json"
if not FIXTURE.exists():
    FIXTURE = Path("/work/shared/fixtures/chatgpt/librechat-chatgpt-tree.json")


def _big(i: int, n: int = 6000) -> str:
    return dumps(native(f"question {i} " + "q" * n, f"answer {i} " + "a" * n))


def _ok_or_storage_failed(r) -> bool:
    """True if ``r`` succeeded; else assert it is a clean storage_failed (40)."""
    assert "Traceback" not in r.err and "Traceback" not in r.out, r
    if r.rc == 0:
        return True
    assert_error(r, "storage_failed")
    return False


# -- a real full file system ------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MiB tmpfs mounted at ``tmp_path/fs`` (unmounted afterwards)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    d = tmp_path / "fs"
    d.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)], capture_output=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {p.stderr.decode(errors='replace').strip()}")
    try:
        yield d
    finally:
        os.chdir(tmp_path)
        if subprocess.run(["umount", str(d)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)


def _fill(fs: Path, leave: int) -> Path:
    """Fill ``fs`` until only about ``leave`` bytes are free."""
    filler = fs / "filler"
    st = os.statvfs(fs)
    free = st.f_bavail * st.f_frsize
    with open(filler, "ab") as f:
        try:
            f.write(b"\0" * max(0, free - leave))
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


@pytest.mark.parametrize("leave", [0, 12 << 10, 40 << 10, 96 << 10, 200 << 10])
def test_full_tmpfs_every_command_fails_cleanly_and_recovers(cli, small_fs, leave):
    d = small_fs / "proj"
    ok(cli("init", cwd=d))
    for i in range(12):
        ok(cli("commit", "-", "-t", f"t{i}", input=_big(i, 1500), cwd=d))
    filler = _fill(small_fs, leave)

    committed = []
    for i in range(12):
        r = cli("commit", "-", "--json", "-t", f"n{i}", input=_big(100 + i), cwd=d)
        if _ok_or_storage_failed(r):
            committed.append(f"n{i}")
    for args in (["import", str(FIXTURE), "--json"], ["gc", "--prune=now", "--json"], ["log", "--json"],
                 ["log", "-t", "t1", "--json"], ["status", "--json"], ["threads", "--json"], ["fsck", "--json"],
                 ["reindex", "--json"], ["search", "question", "--json"], ["log"], ["status"]):
        _ok_or_storage_failed(cli(*args, cwd=d))
    assert not [p for p in (d / ".convgit").iterdir() if p.name.startswith(f"{fsio.TMP_PREFIX}index")]

    filler.unlink()
    r = ok(cli("commit", "-", "--json", "-t", "after", input=_big(999), cwd=d))
    assert r.json()["action"] == "created"
    names = {t["name"] for t in ok(cli("threads", "--json", cwd=d)).json()}
    assert {f"t{i}" for i in range(12)} | set(committed) | {"after"} <= names
    ok(cli("log", "-t", "after", "--json", cwd=d))
    ok(cli("gc", "--prune=now", "--json", cwd=d))
    rep = ok(cli("fsck", "--json", cwd=d)).json()
    assert rep["errors"] == 0, rep


def test_full_tmpfs_real_processes(run, small_fs, tmp_path):
    """The reported symptom, as a user meets it: no traceback from a real process."""
    d = small_fs / "proj"
    env = cli_env(tmp_path)
    ok(run("init", cwd=d, env_=env))
    for i in range(8):
        ok(run("commit", "-", "-t", f"t{i}", input=_big(i, 1500), cwd=d, env_=env))
    filler = _fill(small_fs, 24 << 10)
    for i in range(6):
        _ok_or_storage_failed(run("commit", "-", "--json", "-t", f"n{i}", input=_big(50 + i), cwd=d, env_=env))
    for args in (["import", str(FIXTURE), "--json"], ["gc", "--prune=now", "--json"], ["log", "--json"],
                 ["status", "--json"], ["fsck", "--json"]):
        _ok_or_storage_failed(run(*args, cwd=d, env_=env))
    filler.unlink()
    ok(run("commit", "-", "-t", "after", input=_big(999), cwd=d, env_=env))
    ok(run("log", "-t", "after", cwd=d, env_=env))
    assert ok(run("fsck", "--json", cwd=d, env_=env)).json()["errors"] == 0


# -- injected faults (everywhere) -------------------------------------------------------------


@pytest.fixture
def index_full(monkeypatch):
    """While ``full[0]`` is true, no index file may grow by a page: SQLite itself then fails
    with SQLITE_FULL ("database or disk is full") and rolls back on its own, exactly as on a
    full disk."""
    full = [False]
    real = Index._connect

    def connect(self, path):
        db = real(self, path)
        if full[0]:
            db.execute("PRAGMA max_page_count=1")  # clamped to the current size
        return db

    monkeypatch.setattr(Index, "_connect", connect)
    return full


def test_index_full_commit_stands_with_a_warning(cli, proj, index_full):
    ok(cli("commit", "-", "-t", "a", input=_big(1)))
    index_full[0] = True
    r = ok(cli("commit", "-", "--json", "-t", "b", input=_big(2)))  # the index file cannot grow
    assert r.json()["action"] == "created"
    assert "index not updated" in r.err and "database or disk is full" in r.err, r
    assert "no transaction is active" not in r.err, r
    assert (proj / ".convgit" / "refs" / "threads" / "b").read_text().strip() == r.json()["tip"]
    # Reading needs the index caught up, which needs space: storage_failed, not a rebuild loop.
    for args in (["log", "-t", "b", "--json"], ["status", "--json"], ["threads"]):
        assert_error(cli(*args), "storage_failed")
    index_full[0] = False  # space is back
    msgs = ok(cli("log", "-t", "b", "--json")).json()
    assert len(msgs) == 2
    assert ok(cli("fsck", "--json")).json()["errors"] == 0


def test_index_full_import_stands_with_a_warning(cli, proj, index_full):
    ok(cli("commit", "-", "-t", "a", input=_big(1)))
    index_full[0] = True
    r = cli("import", str(FIXTURE), "--json")
    assert r.rc == 0 and "Traceback" not in r.err, r
    assert "index not updated" in r.out + r.err
    index_full[0] = False
    assert len(ok(cli("threads", "--json")).json()) > 1
    assert ok(cli("fsck", "--json")).json()["errors"] == 0


def test_index_full_rebuild_fails_cleanly_and_leaves_no_temp_file(cli, proj, index_full):
    ok(cli("commit", "-", "-t", "a", input=_big(1)))
    store = proj / ".convgit"
    (store / "index.sqlite").unlink()
    index_full[0] = True
    for args in (["reindex", "--json"], ["log", "--json"], ["commit", "-", "--json", "-t", "b"]):
        assert_error(cli(*args, input=_big(2)), "storage_failed")
    assert not (store / "refs" / "threads" / "b").exists()  # checked before anything was written
    assert [p.name for p in store.iterdir() if p.name.startswith(fsio.TMP_PREFIX)] == []
    index_full[0] = False
    ok(cli("log", "-t", "a"))
    ok(cli("commit", "-", "-t", "b", input=_big(2)))


def test_index_full_gc_stands_and_the_next_command_rebuilds(cli, proj, index_full):
    ok(cli("commit", "-", "-t", "a", input=_big(1)))
    ok(cli("hash-object", "-w", "-", input="an unreachable blob"))
    index_full[0] = True
    r = ok(cli("gc", "--prune=now", "--json"))
    doc = r.json()
    assert doc["pruned"] == 1 and any("index not updated" in w for w in doc["warnings"]), doc
    assert "index not updated" in r.err
    index_full[0] = False
    ok(cli("log", "-t", "a"))
    assert ok(cli("fsck", "--json")).json()["errors"] == 0


def test_sqlite_rolled_back_on_its_own_is_not_rolled_back_twice(cli, proj, monkeypatch):
    """The reported chain: SQLite rolls back on SQLITE_FULL, index.py ran ROLLBACK again and
    "cannot rollback - no transaction is active" hid the real error."""
    import sqlite3

    ok(cli("commit", "-", "-t", "a", input=_big(1)))
    real = Index._flush

    def flush(self):
        real(self)
        self.db.execute("ROLLBACK")  # what SQLite does by itself on SQLITE_FULL
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Index, "_flush", flush)
    r = ok(cli("commit", "-", "-t", "b", input=_big(2)))
    assert "database or disk is full" in r.err and "no transaction" not in r.err, r
    doc = assert_error(cli("log", "-t", "b", "--json"), "storage_failed")
    assert "database or disk is full" in doc["error_message"]
    monkeypatch.setattr(Index, "_flush", real)
    assert len(ok(cli("log", "-t", "b", "--json")).json()) == 2


def test_enospc_writing_objects_is_storage_failed_and_writes_nothing(cli, proj, monkeypatch):
    ok(cli("commit", "-", "-t", "a", input=_big(1)))
    before = store_state(proj / ".convgit")
    real = os.write

    def write(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fsio.os, "write", write)
    doc = assert_error(cli("commit", "-", "--json", "-t", "b", input=_big(2)), "storage_failed")
    assert "No space left on device" in doc["error_message"]
    assert_error(cli("import", str(FIXTURE), "--json"), "storage_failed")
    monkeypatch.setattr(fsio.os, "write", real)
    files = lambda state: {k: v for k, v in state.items() if v is not None}  # noqa: E731 (an empty fan-out dir may stay)
    assert files(store_state(proj / ".convgit")) == files(before)
    ok(cli("commit", "-", "-t", "b", input=_big(2)))


def test_unmapped_enospc_reaching_the_cli_is_storage_failed(cli, proj, monkeypatch):
    """A last line of defence: an ENOSPC no module mapped is still exit 40, not a traceback."""
    from convgit import api

    def boom(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", "somewhere")

    monkeypatch.setattr(api, "status", boom, raising=False)
    r = cli("status", "--json")
    assert_error(r, "storage_failed")


def test_index_full_merge_stands_with_a_warning(cli, proj, tmp_path, index_full):
    other = tmp_path / "other"
    ok(cli("init", cwd=other))
    ok(cli("commit", "-", "-t", "theirs", input=_big(7), cwd=other))
    ok(cli("commit", "-", "-t", "a", input=_big(1)))
    index_full[0] = True
    r = ok(cli("merge", str(other), "--json"))
    assert any("index not updated" in w for w in r.json()["warnings"]), r
    assert (proj / ".convgit" / "refs" / "threads" / "theirs").exists()
    index_full[0] = False
    assert len(ok(cli("log", "-t", "theirs", "--json")).json()) == 2


def test_a_temp_index_left_by_a_dead_rebuild_is_removed_by_the_next_rebuild(cli, proj):
    """A rebuild killed mid-way leaves ``tmp_index.sqlite.<pid>.<ns>`` (as large as the
    index): on a full disk that space must come back without waiting for gc's grace."""
    ok(cli("commit", "-", "-t", "a", input=_big(1)))
    store = proj / ".convgit"
    p = subprocess.Popen(["true"])
    p.wait()  # a pid that no longer runs
    dead = store / f"{fsio.TMP_PREFIX}index.sqlite.{p.pid}.123"
    alive = store / f"{fsio.TMP_PREFIX}index.sqlite.{os.getppid()}.456"
    for f in (dead, Path(f"{dead}-journal"), alive):
        f.write_bytes(b"\0" * 4096)
    ok(cli("reindex", "--json"))
    assert not dead.exists() and not Path(f"{dead}-journal").exists()
    assert alive.exists()  # a live process's (it may be rebuilding right now)


def test_index_full_ref_moves_stand_with_a_warning(cli, proj, monkeypatch):
    """fork, threads rename / delete and update-ref: the ref moved, so the command succeeds
    with a warning; the index that could not follow catches up once there is space."""
    import sqlite3

    from convgit.refs import RefStore

    ok(cli("commit", "-", "-t", "a", input=_big(1)))
    ok(cli("commit", "-", "-t", "b", input=_big(2)))
    tip_b = (proj / ".convgit" / "refs" / "threads" / "b").read_text().strip()
    full = [False]
    real_catch_up = Index._catch_up

    def catch_up(self, *a, **k):
        if full[0]:
            raise sqlite3.OperationalError("database or disk is full")
        return real_catch_up(self, *a, **k)

    monkeypatch.setattr(Index, "_catch_up", catch_up)
    for meth in ("update", "rename"):
        real = getattr(RefStore, meth)

        def moved(self, *a, _real=real, **k):  # the disk fills up right after the ref moved
            out = _real(self, *a, **k)
            full[0] = True
            return out

        monkeypatch.setattr(RefStore, meth, moved)
    threads = proj / ".convgit" / "refs" / "threads"
    for args, check in (
        (["fork", "a", "f", "--json"], lambda: (threads / "f").exists()),
        (["threads", "rename", "f", "g", "--json"], lambda: (threads / "g").exists() and not (threads / "f").exists()),
        (["update-ref", "g", tip_b, "--json"], lambda: (threads / "g").read_text().strip() == tip_b),
        (["threads", "delete", "g", "--json"], lambda: not (threads / "g").exists()),
    ):
        full[0] = False
        r = cli(*args)
        assert r.rc == 0 and "Traceback" not in r.err, r
        assert "warning: index not updated" in r.err and "database or disk is full" in r.err, r
        assert check(), r
        r.json()  # stdout is still the one result document
        full[0] = False  # space is back: the next command catches the index up
        shown = {t["name"]: t["tip"] for t in ok(cli("threads", "--json")).json()}
        assert shown == {p.name: p.read_text().strip() for p in threads.iterdir() if not p.name.endswith(".lock")}
    assert set(shown) == {"a", "b"}
    assert ok(cli("fsck", "--json")).json()["errors"] == 0
