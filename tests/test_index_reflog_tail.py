"""The index's update after a move reads the moved thread's new reflog lines, not its whole
reflog: a long-running thread (an agent whose every call is a move) costs the same to index
at its 10,000th call as at its first. What is read is counted by the kernel
(``/proc/self/io``: ``rchar``, every byte a read system call returned to this process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from blake3 import blake3

import convgit

from helpers.store import NOW, conv, fast_repo

PROC_IO = Path("/proc/self/io")


def rchar() -> int:
    for line in PROC_IO.read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def _texts(name: str, n: int) -> list[str]:
    return [f"{name} message {i}" for i in range(n)]


def _long_and_short(tmp_path, moves: int):
    """A store with thread ``long`` (a reflog of ``moves`` + 2 lines, ~700 bytes each) and
    thread ``short`` (1 line), both indexed."""
    repo = fast_repo(tmp_path / "s")
    t1 = convgit.commit(repo, {"messages": conv(*_texts("long", 2))}, thread="long", now_ms=NOW).tip
    t2 = convgit.commit(repo, {"messages": conv(*_texts("long", 4))}, thread="long", now_ms=NOW).tip
    convgit.commit(repo, {"messages": conv(*_texts("short", 4))}, thread="short", now_ms=NOW)
    for i in range(moves):  # real moves, back and forth (ending at t2): each one a reflog line
        repo.refs.update("long", t1 if i % 2 == 0 else t2, message=f"m{i} " + blake3(str(i).encode()).hexdigest() * 9)
    repo.index.refresh_if_changed()
    return repo


@pytest.mark.skipif(not PROC_IO.exists(), reason="counts reads with /proc/self/io (Linux)")
def test_indexing_a_move_reads_the_new_reflog_lines_not_the_whole_reflog(tmp_path):
    repo = _long_and_short(tmp_path, 600)
    size = len(repo.refs.log_bytes("long"))
    assert size > 350_000
    n = {"long": 4, "short": 4}
    read = {"long": [], "short": []}
    for name in ("long", "short") * 3:  # the same commit on each thread, in turn: 2 messages, 1 line
        n[name] += 2
        before = rchar()
        r = convgit.commit(repo, {"messages": conv(*_texts(name, n[name]))}, thread=name, now_ms=NOW)
        read[name].append(rchar() - before)
        assert r.thread == name and r.appended_messages == 2
    # What the whole commit (objects, refs, index) read: the same for both threads, and far
    # below the long reflog (reading it whole, as the index did, read >= ``size`` per commit).
    assert max(read["long"]) <= max(read["short"]) + 16_384, read
    assert max(read["long"]) < size // 10, read
    # ... and the index it updated is the one a rebuild makes from the objects and reflogs.
    dump = repo.index.dump()
    convgit.reindex(repo)
    assert repo.index.dump() == dump
    repo.close()


def test_a_move_after_the_reflog_was_packed_indexes_only_its_new_lines(tmp_path):
    """The packed part of a reflog (``packed-logs``) is not read again for its text either:
    the index's position past it is a length the reader keeps. The turns and the thread's
    row after moves across a packing equal a rebuild's."""
    repo = _long_and_short(tmp_path, 50)
    with repo.exclusive_lock():
        repo.pack_refs()
    assert repo.refs.packed_logs() is not None and repo.refs.packed_logs().head("long")[0] > 0
    n = 4
    for _ in range(3):
        n += 2
        r = convgit.commit(repo, {"messages": conv(*_texts("long", n))}, thread="long", now_ms=NOW)
        assert r.appended_messages == 2
    rows = {t["name"]: t for t in convgit.threads(repo)}
    assert rows["long"]["tip"] == repo.refs.read("long")
    dump = repo.index.dump()
    convgit.reindex(repo)
    assert repo.index.dump() == dump
    repo.close()
