"""Batch moves of packed threads (docs/format.md §6.2): a bulk commit moving threads that live
in ``packed-refs`` alone rewrites their lines in one new ``packed-refs`` (one rename for all)
instead of giving each a loose ref file. Checked: the same refs, reflogs and answers as
commits one by one; what stays loose; the thresholds; a failing sync undoes it all; other
writers (deletes, single moves, creates) running at the same time lose nothing.
(Power loss and kill -9 at its steps: tests/reliability/test_powerloss.py, test_crash.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import convgit
from convgit import fsio, refs as refs_mod
from convgit.errors import StorageFailed
from convgit.fsck import fsck
from convgit.gc import gc
from convgit.repository import Repository

from helpers.store import NOW, conv


def _store(path: Path, threads: int = 8, *, packed: bool = True) -> Repository:
    """``threads`` threads p0.. of two messages, packed by gc unless not ``packed`` (fsync on:
    the batched path)."""
    repo = convgit.init(path)
    for j in range(threads):
        convgit.commit(repo, {"messages": conv(f"p{j} q", f"p{j} a")}, thread=f"p{j}", now_ms=NOW)
    if packed:
        gc(repo)
        assert not _loose(repo) and len(repo.refs.packed().refs) == threads
    return repo


def _loose(repo) -> list[str]:
    return sorted(repo.refs._loose_names())


def _more(j: int, k: int = 1) -> dict:
    return {"messages": conv(f"p{j} q", f"p{j} a", *[f"p{j} more {i}" for i in range(k)])}


def _state(repo) -> tuple:
    logs = {n: [(e.old, e.new, e.turn is not None) for e in repo.refs.read_log(n)] for n in repo.refs.read_all()}
    return repo.refs.read_all(), logs, [(e.id, e.text) for e in convgit.log(repo, "p3")]


def test_packed_threads_move_in_packed_refs_as_commits_one_by_one_would(tmp_path):
    bulk, single = _store(tmp_path / "bulk"), _store(tmp_path / "single")
    (bulk.refs.ref_path("p7")).write_text(bulk.refs.read("p7") + "\n")  # p7 also loose (it wins)
    (single.refs.ref_path("p7")).write_text(single.refs.read("p7") + "\n")
    items = [_more(j) for j in range(8)] + [{"messages": conv("brand new", "thread")}]
    bulk_results = convgit.commit_many(bulk, items, now_ms=NOW + 1)
    for it in items:
        convgit.commit(single, it, now_ms=NOW + 1)
    assert [r.status for r in bulk_results] == ["appended"] * 8 + ["created"]
    new = bulk_results[-1].thread
    # p0-p7 moved in packed-refs (p7's loose file, which won, unlinked after); the new thread is loose
    assert _loose(bulk) == [new]
    packed = bulk.refs.packed().refs
    assert all(packed[f"p{j}"] == bulk.refs.read(f"p{j}") == single.refs.read(f"p{j}") for j in range(8))
    b, s = _state(bulk), _state(single)
    assert b[0].keys() == s[0].keys() and {k: v for k, v in b[0].items() if k != new} == \
        {k: v for k, v in s[0].items() if k != new}
    assert {k: v for k, v in b[1].items() if k != new} == {k: v for k, v in s[1].items() if k != new}
    assert b[2] == s[2]
    assert fsck(bulk).errors == []
    dump = [(e.id, e.text) for e in convgit.log(bulk, "p5")]
    convgit.reindex(bulk)
    assert [(e.id, e.text) for e in convgit.log(bulk, "p5")] == dump  # the index followed the packed moves
    # They stay packed: the next batch moves them in packed-refs again.
    convgit.commit_many(bulk, [_more(j, 2) for j in range(6)], now_ms=NOW + 2)
    assert _loose(bulk) == [new] and bulk.refs.read("p2") == bulk.refs.packed().refs["p2"]
    bulk.close(), single.close()


def test_loose_threads_of_a_store_never_packed_move_into_a_first_packed_refs(tmp_path):
    """A store that never ran gc (format 1, no packed-refs): a batch continuing its threads
    declares format 2, makes packed-refs with their new tips and unlinks their loose files
    (each loose file wins until it goes), so the next batches are packed moves."""
    repo = convgit.init(tmp_path / "s")
    for j in range(5):
        convgit.commit(repo, {"messages": conv(f"p{j} q", f"p{j} a")}, thread=f"p{j}", now_ms=NOW)
    assert (repo.path / "format").read_text().split()[-1] == "1" and not (repo.path / "packed-refs").exists()
    assert _loose(repo) == [f"p{j}" for j in range(5)]
    convgit.commit_many(repo, [_more(j) for j in range(5)], now_ms=NOW + 1)
    assert (repo.path / "format").read_text().split()[-1] == "2" and _loose(repo) == []
    assert {f"p{j}": repo.refs.read(f"p{j}") for j in range(5)} == repo.refs.packed().refs
    assert [e.text for e in convgit.conversation(repo, "p4")][-1] == "p4 more 0"
    convgit.commit_many(repo, [_more(j, 2) for j in range(5)], now_ms=NOW + 2)
    assert _loose(repo) == [] and [e.text for e in convgit.conversation(repo, "p4")][-1] == "p4 more 1"
    assert fsck(repo).errors == []
    again = Repository.open(repo.path)  # (another process reads them the same)
    assert again.refs.read_all() == repo.refs.read_all()
    again.close(), repo.close()


def test_below_the_thresholds_each_thread_gets_a_loose_ref(tmp_path, monkeypatch):
    repo = _store(tmp_path / "s")
    convgit.commit_many(repo, [_more(j) for j in range(3)] + [{"messages": conv("x", "y")}], now_ms=NOW + 1)
    assert set(_loose(repo)) >= {"p0", "p1", "p2"}  # 3 packed moves: below PACKED_MOVES_MIN
    monkeypatch.setattr(refs_mod, "PACKED_BYTES_PER_MOVE", 8)  # packed-refs "too big" for 5 moves
    convgit.commit_many(repo, [_more(j) for j in range(3, 8)], now_ms=NOW + 1)
    assert set(_loose(repo)) >= {f"p{j}" for j in range(8)}
    assert fsck(repo).errors == []
    repo.close()


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "loose-never-packed"])
def test_a_failing_sync_leaves_every_thread_and_reflog_as_it_was(tmp_path, monkeypatch, packed):
    repo = _store(tmp_path / "s", packed=packed)
    before, loose_before = _state(repo), _loose(repo)
    pr = repo.path / "packed-refs"
    packed_before = pr.read_bytes() if pr.exists() else None
    real, real_dir = fsio.sync_filesystem, fsio.fsync_dir
    calls = []

    def renamed_in() -> bool:  # every temp file of the batch renamed in (packed-refs, or refs)
        return not [p for p in repo.path.rglob("*") if p.name.startswith(fsio.TMP_PREFIX)]

    def failing(path, kind="syncfs"):
        calls.append(kind)
        if "syncfs" in calls[:-1] and renamed_in():  # the sync after the renames (a directory's fsync, or a syncfs)
            calls.append("failed")
            raise StorageFailed(f"injected: {kind} failed")
        return (real if kind == "syncfs" else real_dir)(path)

    monkeypatch.setattr(fsio, "sync_filesystem", failing)
    monkeypatch.setattr(fsio, "fsync_dir", lambda path: failing(path, "fsync_dir"))
    with pytest.raises(StorageFailed):
        repo.refs.update_many([refs_mod.RefMove(f"p{j}", repo.refs.read(f"p{(j + 1) % 8}"), expected=repo.refs.read(f"p{j}"),
                                                message="swap") for j in range(8)])
    monkeypatch.setattr(fsio, "sync_filesystem", real)
    monkeypatch.setattr(fsio, "fsync_dir", real_dir)
    assert calls[-1] == "failed" and "syncfs" in calls[:-2], calls  # (after the batch's syncfs)
    assert (pr.read_bytes() if pr.exists() else None) == packed_before and _loose(repo) == loose_before
    assert _state(repo) == before
    assert not [p for p in repo.path.rglob("*") if p.name.startswith(fsio.TMP_PREFIX)]
    convgit.commit_many(repo, [_more(j) for j in range(8)], now_ms=NOW + 1)  # the next batch works
    assert fsck(repo).errors == []
    repo.close()


OTHER = r"""
import sys
import convgit
from convgit.repository import Repository
repo = Repository.open(sys.argv[1])
for i in range(int(sys.argv[2])):
    convgit.commit(repo, {"messages": [{"role": "user", "content": f"other {i}"}]}, thread=f"x{i}")
    if i % 2:
        convgit.delete_thread(repo, f"x{i - 1}")  # takes x{i-1} out of packed-refs if it got there
    texts = ["s", "s start", *[f"s {k}" for k in range(i + 1)]]
    convgit.commit(repo, {"messages": [{"role": ("user", "assistant")[j % 2], "content": t} for j, t in enumerate(texts)]},
                   thread="s")
print("done")
"""


def test_other_writers_at_the_same_time_lose_nothing(tmp_path):
    """Batches rewriting packed-refs while another process creates, deletes (out of
    packed-refs, under its lock) and moves other threads: every write of both is there."""
    repo = _store(tmp_path / "s")
    convgit.commit(repo, {"messages": conv("s", "s start")}, thread="s")
    for i in range(0, 20, 2):  # some x threads packed, for the deletes to take out of packed-refs
        convgit.commit(repo, {"messages": [{"role": "user", "content": f"other {i}"}]}, thread=f"x{i}")
    gc(repo)
    n = 20
    other = subprocess.Popen([sys.executable, "-c", OTHER, str(repo.path), str(n)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "CONVGIT_LOCK_TIMEOUT": "60"})
    for k in range(1, 13):
        convgit.commit_many(repo, [_more(j, k) for j in range(8)], now_ms=NOW + k)
    out, err = other.communicate(timeout=120)
    assert other.returncode == 0 and "done" in out, err
    refs = repo.refs.read_all()
    for j in range(8):
        assert [e.text for e in convgit.conversation(repo, f"p{j}")][-1] == f"p{j} more 11"
    assert [e.text for e in convgit.conversation(repo, "s")][-1] == f"s {n - 1}"
    assert {f"x{i}" for i in range(n) if i % 2} <= set(refs) and not {f"x{i}" for i in range(n - 1) if i % 2 == 0} & set(refs)
    assert fsck(repo).errors == []
    repo.close()
