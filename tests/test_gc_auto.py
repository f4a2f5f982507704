"""Automatic gc (convgit/gc_auto.py): a write of the command line that leaves gc --auto
something to do starts it detached, in the background; `convgit serve` runs it in its
committer thread. Real processes throughout: the store's threshold is lowered in its
config.toml so that every process sees it, and the suite's ``CONVGIT_GC_AUTO=0``
(tests/conftest.py, tests/helpers/cli.py) is turned back on only here.

Every test that may have started a background gc waits for it (``wait_for_gc``: gc.lock is
held by the background gc from before it starts until it exits), so none outlives its test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import convgit
from helpers.cli import assert_error, cli_env, run_process
from convgit import fsio
from convgit.gc_auto import AUTO_LOG, estimate_loose, sample_dirs
from helpers.store import conv

ON = {"CONVGIT_GC_AUTO": "1", "CONVGIT_FSYNC": "0"}
THRESHOLD = 12


def _config(store: Path, extra: str = "") -> None:
    (store / "config.toml").write_text(f"[gc]\nauto_threshold = {THRESHOLD}\n{extra}")


@pytest.fixture
def proj(tmp_path) -> Path:
    d = tmp_path / "proj"
    d.mkdir()
    assert run_process(["init"], cwd=d, env=cli_env(tmp_path)).rc == 0
    _config(d / ".convgit")
    yield d
    wait_for_gc(d / ".convgit")  # whatever a test started ends with it


def _loose(store: Path) -> int:
    return sum(1 for d in (store / "objects").glob("??") for f in d.iterdir() if len(f.name) == 62)


def _gc_runs(store: Path) -> list[dict]:
    try:
        return [json.loads(ln) for ln in (store / "gc.log").read_text().splitlines()]
    except FileNotFoundError:
        return []


def _gc_running(store: Path) -> bool:
    fd = fsio.try_flock(store / "gc.lock", shared=False)
    if fd is None:
        return True
    os.close(fd)
    return False


def wait_for_gc(store: Path, timeout: float = 90) -> None:
    """Until no gc holds gc.lock (a background gc holds it until its process exits)."""
    end = time.monotonic() + timeout
    while _gc_running(store):
        assert time.monotonic() < end, "the background gc did not finish"
        time.sleep(0.05)


def _commit(tmp_path: Path, proj: Path, i: int, *, unset: tuple[str, ...] = (), **env: str):
    """One `convgit commit -` of a 4-message conversation (5 new objects with its turn)."""
    doc = json.dumps({"messages": conv(f"q{i}", f"a{i}", f"q{i}b", f"a{i}b")})
    e = cli_env(tmp_path, **env)
    for k in unset:
        del e[k]
    r = run_process(["commit", "-", "--thread", f"t{i}"], cwd=proj, env=e, input=doc)
    assert r.rc == 0, r
    return r


def _fsck(tmp_path: Path, proj: Path) -> dict:
    r = run_process(["fsck", "--json"], cwd=proj, env=cli_env(tmp_path))
    assert r.rc == 0, r
    return r.json()


def test_single_commits_end_up_packed_and_print_what_they_print_without_it(tmp_path, proj):
    store = proj / ".convgit"
    other = tmp_path / "other"
    other.mkdir()
    assert run_process(["init"], cwd=other, env=cli_env(tmp_path)).rc == 0
    _config(other / ".convgit", "auto = false\n")
    try:
        for i in range(5):  # 25 objects: past the threshold (12) twice
            on = _commit(tmp_path, proj, i, **ON)
            off = _commit(tmp_path, other, i, CONVGIT_FSYNC="0")
            assert (on.out, on.err) == (off.out, off.err) and on.err == ""
        wait_for_gc(store)
        _commit(tmp_path, proj, 5, **ON)  # whatever the last gc left, this one settles it
    finally:
        wait_for_gc(store)
    runs = _gc_runs(store)
    assert runs and all(r["status"] == "done" and r["pruned"] == 0 for r in runs)
    assert _loose(store) < THRESHOLD and _loose(other / ".convgit") == 5 * 5  # auto off: all loose
    assert (store / AUTO_LOG).read_text() == ""  # the background gc printed nothing, failed nothing
    doc = _fsck(tmp_path, proj)
    assert doc["status"] == "ok" and doc["packed"] >= 5 * len(runs)
    with convgit.open_repo(store) as repo:
        assert sorted(convgit.show_refs(repo)) == sorted(f"t{i}" for i in range(6))
        assert [e.text for e in convgit.conversation(repo, "t3")] == ["q3", "a3", "q3b", "a3b"]


def test_the_command_returns_while_its_gc_still_runs(tmp_path, proj):
    """A reader holding the store lock keeps the background gc waiting (it takes the lock
    exclusively): the commit that started it has exited, its output read to the end, while
    the gc still holds gc.lock. Released, the gc packs."""
    store = proj / ".convgit"
    for i in range(2):
        _commit(tmp_path, proj, i)  # 10 loose objects, auto off (the suite's default)
    assert not (store / AUTO_LOG).exists()
    try:
        with fsio.flock(store / "lock", shared=True, timeout=10):
            p = subprocess.Popen([sys.executable, "-m", "convgit", "commit", "-", "--thread", "t2"], cwd=proj,
                                 env=cli_env(tmp_path, **ON), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            out, err = p.communicate(json.dumps({"messages": conv("q", "a")}).encode(), timeout=60)  # EOF on both
            assert p.returncode == 0 and out.startswith(b"Created thread t2") and err == b""
            assert (store / AUTO_LOG).exists() and _gc_running(store)  # started, and not done
            assert _loose(store) >= THRESHOLD and not _gc_runs(store)
    finally:
        wait_for_gc(store)
    assert [r["status"] for r in _gc_runs(store)] == ["done"] and _loose(store) == 0


@pytest.mark.parametrize("how", ["config", "env"])
def test_auto_false_or_CONVGIT_GC_AUTO_0_starts_nothing(tmp_path, proj, how):
    store = proj / ".convgit"
    if how == "config":  # (the environment says nothing: CONVGIT_GC_AUTO would win)
        _config(store, "auto = false\n")
        for i in range(4):
            _commit(tmp_path, proj, i, unset=("CONVGIT_GC_AUTO",), CONVGIT_FSYNC="0")
    else:
        for i in range(4):
            _commit(tmp_path, proj, i, CONVGIT_GC_AUTO="0", CONVGIT_FSYNC="0")
    assert not (store / AUTO_LOG).exists() and not _gc_running(store)  # never started, so not running
    assert _loose(store) == 20 and not _gc_runs(store)
    with convgit.open_repo(store) as repo:
        assert convgit.gc_due(repo)  # it would have acted


def test_a_bad_CONVGIT_GC_AUTO_is_invalid_input(tmp_path, proj):
    r = run_process(["status"], cwd=proj, env=cli_env(tmp_path, CONVGIT_GC_AUTO="maybe"))
    assert r.rc == 10 and "CONVGIT_GC_AUTO" in r.err and "[invalid_input]" in r.err


def test_a_running_gc_is_not_doubled(tmp_path, proj):
    """While gc.lock is taken (a gc or an fsck runs), a write past the threshold starts no
    second gc; the next write after it is free does."""
    store = proj / ".convgit"
    fd = fsio.try_flock(store / "gc.lock", shared=False)
    assert fd is not None
    try:
        for i in range(3):
            _commit(tmp_path, proj, i, **ON)
        assert not (store / AUTO_LOG).exists()  # nothing started (the log is made just before)
    finally:
        os.close(fd)
    assert _loose(store) == 15 and not _gc_runs(store)
    try:
        _commit(tmp_path, proj, 3, **ON)
    finally:
        wait_for_gc(store)
    assert len(_gc_runs(store)) == 1 and _loose(store) == 0


def _fail_a_background_gc(tmp_path: Path, proj: Path) -> Path:
    """Three commits, a dangling ref, then a commit whose background gc fails on it (gc
    refuses a damaged store, exit 33, said in gc-auto.log). Returns the store."""
    store = proj / ".convgit"
    for i in range(3):
        _commit(tmp_path, proj, i)
    (store / "refs" / "threads" / "broken").write_text("0" * 64 + "\n")
    try:
        _commit(tmp_path, proj, 3, **ON)
    finally:
        wait_for_gc(store)
    return store


def test_a_failed_background_gc_stops_the_next_ones_for_a_day(tmp_path, proj):
    """gc refuses a store with a dangling ref (exit 33, said in gc-auto.log): the writes
    after it do not start it again while that log is fresh."""
    store = _fail_a_background_gc(tmp_path, proj)
    log = (store / AUTO_LOG).read_text()
    assert "gc_refused" in log and not _gc_runs(store)
    first = (store / AUTO_LOG).stat().st_mtime_ns
    time.sleep(0.05)
    try:
        _commit(tmp_path, proj, 4, **ON)
    finally:
        wait_for_gc(store)
    assert (store / AUTO_LOG).stat().st_mtime_ns == first  # not started again (the log untouched)


WRITER = """
import sys, convgit
repo = convgit.open_repo(sys.argv[1])
for i in range(int(sys.argv[2])):
    convgit.commit(repo, {"messages": [{"role": "user", "content": f"w{i}"}, {"role": "assistant", "content": f"r{i}"}]},
                   thread=f"w{i}")
repo.close()
"""


def test_a_writer_racing_the_background_gcs_loses_nothing(tmp_path, proj):
    """A library writer commits 40 threads while CLI commits keep starting background gcs:
    every thread is there with its messages, fsck is clean."""
    store = proj / ".convgit"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store), "40"], env=cli_env(tmp_path, CONVGIT_FSYNC="0"),
                              stderr=subprocess.PIPE)
    try:
        for i in range(6):
            _commit(tmp_path, proj, i, **ON)
        assert writer.wait(120) == 0, writer.stderr.read()
        wait_for_gc(store)
        _commit(tmp_path, proj, 6, **ON)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        wait_for_gc(store)
    assert _gc_runs(store)
    doc = _fsck(tmp_path, proj)
    assert doc["status"] == "ok"
    with convgit.open_repo(store) as repo:
        refs = convgit.show_refs(repo)
        assert set(refs) == {f"w{i}" for i in range(40)} | {f"t{i}" for i in range(7)}
        for i in (0, 17, 39):
            assert [e.text for e in convgit.conversation(repo, f"w{i}")] == [f"w{i}", f"r{i}"]


def test_the_library_starts_nothing_and_gc_due_says_when(tmp_path):
    repo = convgit.init(tmp_path / "s")
    _config(repo.path)
    repo.close()
    with convgit.open_repo(tmp_path / "s") as repo:
        for i in range(2):
            convgit.commit(repo, conv(f"q{i}", f"a{i}"))
        assert not convgit.gc_due(repo)  # 6 loose objects
        for i in range(2, 4):
            convgit.commit(repo, conv(f"q{i}", f"a{i}"))
        due = convgit.gc_due(repo)
        assert due and due.to_json()["loose_estimate"] == 12 and due.packs == 0  # exact: sample_dirs(12) == 256
        assert not (repo.path / AUTO_LOG).exists()  # the library never starts a gc
        assert convgit.gc(repo, auto=True).status == "done"
        assert not convgit.gc_due(repo) and convgit.gc(repo, auto=True).status == "nothing-to-do"


def test_the_estimate_extrapolates_from_a_few_fanout_directories(tmp_path):
    objects = tmp_path / "objects"
    assert sample_dirs(2000) == 5 and sample_dirs(12) == 256 and sample_dirs(10**9) == 1
    for d in range(256):  # 3 objects in every directory: 768 in all
        p = objects / f"{d:02x}"
        p.mkdir(parents=True)
        for j in range(3):
            (p / f"{j:062x}").write_bytes(b"")
    assert estimate_loose(objects, 2000) == 768 and estimate_loose(objects, 100) == 768
    for d in range(5):  # the sampled directories fuller than the rest: the estimate follows them
        for j in range(3, 10):
            (objects / f"{d:02x}" / f"{j:062x}").write_bytes(b"")
    assert estimate_loose(objects, 2000) == 10 * 256


def test_serve_keeps_its_store_packed(tmp_path):
    """A running `convgit serve` starts gc --auto in the background after a batch, as a
    write of the command line does (its committer goes on committing meanwhile)."""
    pytest.importorskip("uvicorn")
    import httpx
    from helpers.serve import FakeUpstream, ServeProcess

    store = tmp_path / "s"
    with convgit.init(store) as repo:
        _config(repo.path)
        for i in range(4):
            convgit.commit(repo, conv(f"q{i}", f"a{i}"))  # 12 loose objects: due
    up = FakeUpstream().start()
    sp = ServeProcess(store, up.url, env={"CONVGIT_GC_AUTO": "1"})
    try:
        url = sp.wait_listening()
        r = httpx.post(url + "/v1/chat/completions", json={"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]},
                       timeout=30)
        assert r.status_code == 200
        sp.wait_calls(1)
        end = time.monotonic() + 60
        while not _gc_runs(store / ".convgit") and time.monotonic() < end:
            time.sleep(0.05)
        assert [g["status"] for g in _gc_runs(store / ".convgit")] == ["done"], "".join(sp.stderr)
    finally:
        assert sp.stop() == 0
        up.stop()
    assert (store / ".convgit" / AUTO_LOG).read_text() == ""  # a background gc, and it went well
    assert _loose(store / ".convgit") < THRESHOLD
    with convgit.open_repo(store) as repo:
        assert len(convgit.show_refs(repo)) == 5
        assert convgit.fsck(repo).to_json()["status"] == "ok"


def test_status_says_automatic_gc_is_paused_and_a_gc_that_goes_well_ends_the_pause(tmp_path, proj):
    """The pause a failed background gc sets is not silent: ``status`` (JSON and text) names
    it, with the log's first line; once the cause is gone, a gc run by hand clears the log,
    status says on again, and the next write may start gc --auto again."""
    store = _fail_a_background_gc(tmp_path, proj)
    env = cli_env(tmp_path, **ON)
    st = json.loads(run_process(["status", "--json"], cwd=proj, env=env).out)
    failed = st["gc_auto"]["failed"]
    assert st["gc_auto"]["enabled"] is True and failed is not None
    assert "gc_refused" in failed["first_line"] and failed["log"].endswith(AUTO_LOG)
    assert failed["paused_until"] - failed["at"] == 86_400_000
    text = run_process(["status"], cwd=proj, env=env).out
    assert "Auto gc" in text and "paused until" in text and "gc_refused" in text
    (store / "refs" / "threads" / "broken").unlink()
    r = run_process(["gc", "-q"], cwd=proj, env=env)
    assert r.rc == 0, r
    assert (store / AUTO_LOG).read_text() == ""
    st = json.loads(run_process(["status", "--json"], cwd=proj, env=env).out)
    assert st["gc_auto"] == {"enabled": True, "failed": None}
    off = json.loads(run_process(["status", "--json"], cwd=proj, env=cli_env(tmp_path, CONVGIT_GC_AUTO="0")).out)
    assert off["gc_auto"]["enabled"] is False


@pytest.mark.parametrize("large", [True, False])
def test_gc_auto_on_a_store_past_the_mark_limit_merges_beside_a_writer(tmp_path, proj, large):
    """Past ``gc.auto_mark_limit`` objects, gc --auto merges packs and packs loose objects
    with the store lock shared: it completes while a writer holds the lock, and every answer
    is the same after. Below the limit it is the full gc, which waits for writers (here: it
    times out ``locked`` while the writer holds on)."""
    store = proj / ".convgit"
    _config(store, f"auto_mark_limit = {10 if large else 10**6}\n[core]\nlock_timeout = 1.0\n")
    for i in range(4):
        _commit(tmp_path, proj, i)  # (auto off: 20 loose objects, past the threshold of 12)
    before = run_process(["log", "--all", "--json"], cwd=proj, env=cli_env(tmp_path))
    assert before.rc == 0 and _loose(store) >= THRESHOLD
    with convgit.open_repo(store) as repo, repo.write_lock():  # a writer, mid-write
        r = run_process(["gc", "--auto", "--json"], cwd=proj, env=cli_env(tmp_path))
    if not large:
        assert_error(r, "locked")
        return
    assert r.rc == 0, r
    doc = r.json()
    assert doc["mode"] == "merge" and doc["status"] == "done" and doc["loose_before"] >= THRESHOLD
    assert doc["loose_after"] == 0 == _loose(store) and doc["packs_after"] >= 1 and doc["pruned"] == 0
    assert _gc_runs(store)[-1]["mode"] == "merge"
    assert run_process(["log", "--all", "--json"], cwd=proj, env=cli_env(tmp_path)).out == before.out
    assert _fsck(tmp_path, proj)["status"] == "ok"
    # nothing left to do: the next gc --auto does nothing
    assert run_process(["gc", "--auto", "--json"], cwd=proj, env=cli_env(tmp_path)).json()["status"] == "nothing-to-do"
