"""How many syncs one call makes (docs/format.md §6.1-6.2): counted, not timed.

Every fsync convgit makes goes through ``fsio.fsync_fd`` and every syncfs through
``fsio._syncfs``; both are wrapped here to count (and still sync). The sequence itself is
checked for crash safety by tests/reliability/test_powerloss.py; this file pins its length:
a stateless continuation makes 3 (the objects' bytes; the reflog line, temp ref and the
objects' entries; the commit point), a new thread that HEAD follows 4 (HEAD's rename), a
retry 3, the CLI the same as the library.
"""

from __future__ import annotations

import json

import pytest

import convgit
from convgit import codec, fsio
from convgit.objects import Blob

from helpers.cli import cli, env, ok  # noqa: F401  (fixtures)

NOW = 1_765_000_000_000


def _count(monkeypatch) -> list[str]:
    calls: list[str] = []
    real_fsync, real_syncfs = fsio.fsync_fd, fsio._syncfs

    def fsync_fd(fd, path="?"):
        calls.append(f"fsync {path}")
        return real_fsync(fd, path)

    def syncfs(path):
        calls.append(f"syncfs {path}")
        return real_syncfs(path)

    monkeypatch.setattr(fsio, "fsync_fd", fsync_fd)
    monkeypatch.setattr(fsio, "_syncfs", syncfs)
    return calls


def _conv(*texts: str) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]


@pytest.fixture
def repo(tmp_path):
    r = convgit.init(tmp_path / ".convgit")
    convgit.commit(r, {"messages": _conv("q0", "a0")}, thread="main", now_ms=NOW)
    r.index  # (opened before counting: the index is SQLite's, not counted here)
    yield r
    r.close()


def test_a_stateless_continuation_makes_three_syncs(repo, monkeypatch):
    calls = _count(monkeypatch)
    r = convgit.commit(repo, {"messages": _conv("q0", "a0", "q1", "a1"), "model": "m"}, now_ms=NOW + 1, move_head=True)
    assert r.thread == "main" and r.new_messages == 2 and r.turn
    assert len(calls) == 3, calls
    assert [c.split()[0] for c in calls] == ["syncfs", "syncfs", "fsync"], calls  # bytes; entries+reflog+temp ref; commit point
    assert not list(repo.path.rglob("tmp_*"))


def test_a_new_thread_head_follows_makes_four_syncs(repo, monkeypatch):
    calls = _count(monkeypatch)
    r = convgit.commit(repo, {"messages": _conv("other q", "other a")}, now_ms=NOW + 2, move_head=True)
    assert r.thread != "main" and repo.refs.read_head() == r.thread
    assert len(calls) == 4, calls
    assert calls[-1] == f"fsync {repo.path}", calls  # HEAD's rename: its bytes were synced with the move
    assert (repo.path / "HEAD").read_text() == f"ref: refs/threads/{r.thread}\n"
    assert not list(repo.path.glob("tmp_HEAD*"))


def test_a_retry_records_its_turn_with_its_object_synced_first(repo, monkeypatch):
    calls = _count(monkeypatch)
    r = convgit.commit(repo, {"messages": _conv("q0", "a0"), "model": "m"}, now_ms=NOW + 3)
    assert r.new_messages == 0 and r.turn and r.new_objects == 1
    log = (repo.path / "logs" / "refs" / "threads" / "main").read_text().splitlines()
    assert r.turn in log[-1]
    # bytes, then the turn's entry (owed, paid before the line), then the line's own fsync
    assert [c.split()[0] for c in calls] == ["syncfs", "syncfs", "fsync"], calls
    assert calls[-1].endswith("logs/refs/threads/main")


def test_objects_written_without_a_ref_move_are_synced_when_the_transaction_ends(repo, monkeypatch):
    calls = _count(monkeypatch)
    with repo.transaction() as tx:
        blob = codec.encode_and_hash(Blob(b"a blob no ref names"))
        tx.write_objects([blob])
        assert fsio.owes_sync(repo.objects.path)
        n = len(calls)
    assert not fsio.owes_sync(repo.objects.path)
    assert len(calls) == n + 1 and calls[-1].startswith("syncfs"), calls


def test_the_cli_makes_as_many_as_the_library(cli, monkeypatch):
    ok(cli("init"))
    ok(cli("commit", "--thread", "main", "-", input=json.dumps({"messages": _conv("q0", "a0")})))
    ok(cli("status"))  # (the index built before counting)
    calls = _count(monkeypatch)  # (in-process: the same counters see the command's syncs)
    ok(cli("commit", "-", input=json.dumps({"messages": _conv("q0", "a0", "q1", "a1")})))
    assert len(calls) == 3, calls
    del calls[:]
    ok(cli("commit", "-", input=json.dumps({"messages": _conv("new q", "new a")})))
    assert len(calls) == 4, calls

