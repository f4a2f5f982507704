"""The refs journal (issue 10): the index reads only what moved, at any store size, and still
notices what moved without it (a crash between a ref move and the index update, another
tool's rename, a reboot, a gc).

Structural, not timed: the number of ref files read by one commit does not grow with the
number of threads.
"""

from __future__ import annotations

import json
import os

import pytest

import convgit
from convgit import api
from convgit import index as index_mod
from convgit.index import catchup as index_catchup
from convgit import refs as refs_mod
from convgit.refs import RefStore
from helpers.store import NOW, conv, fast_repo


def _store(tmp_path, n: int, name: str = "s"):
    """``n`` threads with loose ref files (whose reads these tests count), not created
    straight in packed-refs as a bulk commit would."""
    repo = fast_repo(tmp_path / name)
    saved, refs_mod.BULK_CREATE_MIN = refs_mod.BULK_CREATE_MIN, 10**6
    try:
        convgit.commit_many(repo, [{"messages": conv(f"q{i}", f"a{i}"), "model": "m"} for i in range(n)], now_ms=NOW)
    finally:
        refs_mod.BULK_CREATE_MIN = saved
    repo.index.refresh()
    return repo


def _ref_reads(monkeypatch) -> list:
    reads: list = []
    real = RefStore._read_path

    def counting(self, path, name):
        reads.append(name)
        return real(self, path, name)

    monkeypatch.setattr(RefStore, "_read_path", counting)
    return reads


@pytest.mark.parametrize("n", [50, 500])
def test_a_commit_reads_the_same_few_refs_at_any_size(tmp_path, monkeypatch, n):
    repo = _store(tmp_path, n)
    path = repo.path
    repo.close()
    reads = _ref_reads(monkeypatch)
    with convgit.open_repo(path) as r:
        for k in range(3):  # stateless continuations of one thread, each from a fresh open
            hist = conv("q7", "a7") if k == 0 else [m for e in reversed(convgit.log(r, "HEAD")) for m in
                                                   [{"role": e.role, "content": e.text}]]
            out = convgit.commit(r, {"messages": hist + [{"role": "user", "content": f"more {k}"}],
                                     "response": {"role": "assistant", "content": f"ok {k}"}})
            assert out.appended_messages == 2
        # and a reader that opens afterwards reads nothing at all
    before = len(reads)
    with convgit.open_repo(path) as r:
        assert r.index.refs_unchanged()
        assert convgit.log(r, out.thread, count=1)[0].text == "ok 2"
    assert len(reads) - before <= 2
    assert before <= 20, reads  # not one per thread


@pytest.mark.parametrize("fsync", [False, True])
def test_a_commit_whose_index_update_was_lost_is_caught_up_from_the_journal(tmp_path, monkeypatch, fsync):
    repo = _store(tmp_path, 20)
    path = repo.path
    if fsync:  # the store default: each write path (fsync on or off) must note its moves
        (path / "config.toml").write_text("[core]\nfsync = true\n")
        repo.close()
        repo = convgit.open_repo(path)
    monkeypatch.setattr(index_mod.Index, "record_moves", lambda self, *a, **k: None)  # as if it crashed there
    out = convgit.commit(repo, {"messages": conv("brand", "new")}, thread="fresh")
    repo.close()
    monkeypatch.undo()
    reads = _ref_reads(monkeypatch)
    with convgit.open_repo(path) as r:
        assert [e.text for e in convgit.log(r, out.thread)] == ["new", "brand"]
        assert out.thread in reads and len(reads) <= 3  # the journal named it: nothing else read


def test_a_rename_by_another_tool_is_noticed(tmp_path):
    repo = _store(tmp_path, 5)
    tips = repo.refs.read_all()
    a, b = sorted(tips)[:2]
    tmp = repo.path / "refs" / "threads" / "x.tmp"
    tmp.write_text(tips[b] + "\n")
    os.replace(tmp, repo.path / "refs" / "threads" / "copied")
    path = repo.path
    repo.close()
    with convgit.open_repo(path) as r:
        names = {t["name"] for t in convgit.threads(r)}
        assert "copied" in names


def test_a_reboot_or_a_new_journal_means_one_full_read(tmp_path, monkeypatch):
    repo = _store(tmp_path, 30)
    path = repo.path
    repo.close()
    monkeypatch.setattr(index_catchup, "_boot_id", lambda: "another-boot")
    reads = _ref_reads(monkeypatch)
    with convgit.open_repo(path) as r:
        convgit.log(r, count=1)
    assert len(reads) >= 30  # every ref once
    reads.clear()
    with convgit.open_repo(path) as r:
        convgit.log(r, count=1)
    assert len(reads) <= 2  # then the state is this boot's
    monkeypatch.undo()
    with convgit.open_repo(path) as r:
        api.gc(r, prune="now")
        st = json.loads(r.index.db.execute("SELECT value FROM meta WHERE key='refs_state'").fetchone()[0])
        assert st["size"] == 0  # gc started a new journal and the index read every ref
        assert st["ino"] == os.stat(r.refs.journal_path).st_ino


def test_answers_identical_to_a_rebuild_after_a_mix_of_moves(tmp_path):
    """Journal catch-ups in several processes' stead (commits, fork, rename, delete,
    update-ref back): the index equals a rebuild from scratch."""
    repo = _store(tmp_path, 10)
    tips = repo.refs.read_all()
    names = sorted(tips)
    convgit.fork(repo, f"{names[0]}~1", "f1", now_ms=NOW)
    convgit.rename_thread(repo, names[1], "renamed")
    convgit.delete_thread(repo, names[2])
    hist = [{"role": e.role, "content": e.text} for e in reversed(convgit.log(repo, names[3]))]
    convgit.commit(repo, {"messages": hist + [{"role": "user", "content": "more"}]}, thread=names[3])
    api.update_ref(repo, names[3], tips[names[3]])  # back: a message left behind
    path = repo.path
    repo.close()
    with convgit.open_repo(path) as r:
        r.index.refresh_if_changed()
        have = r.index.dump()
        unreachable = r.index.db.execute("SELECT count(*) FROM unreachable").fetchone()[0]
        r.index.rebuild()
        assert r.index.dump() == have
        assert unreachable >= 1


def test_a_store_nobody_gcs_keeps_a_short_journal(tmp_path, monkeypatch):
    """A long-lived writer (``convgit serve``) on a store where gc never runs: past
    JOURNAL_ROTATE bytes the next writer packs every ref and starts a new journal, as gc
    does, so the journal stays bounded; every answer stays what a rebuild gives."""
    from convgit import refs as refs_mod
    from convgit import transaction

    monkeypatch.setattr(refs_mod, "JOURNAL_ROTATE", 1024)
    monkeypatch.setattr(transaction, "AUTO_PACK_STEP", 256)
    repo = fast_repo(tmp_path / "s")
    journal = repo.refs.journal_path
    inodes, sizes = set(), []
    for i in range(150):  # a thread each (about 25 bytes of journal per move)
        convgit.commit(repo, {"messages": conv(f"busy q{i}", f"a{i}")}, thread=f"serve/call-{i:04d}", now_ms=NOW + i)
        if i % 10 == 0:  # a continuation of an older thread too
            convgit.commit(repo, {"messages": conv(f"busy q{i}", f"a{i}", "more", "ok")}, thread=f"serve/call-{i:04d}",
                           now_ms=NOW + i)
        st = os.stat(journal)
        inodes.add(st.st_ino)
        sizes.append(st.st_size)
    assert len(inodes) > 1, "the journal was never replaced"
    assert max(sizes) <= 1024 + 256 + 64
    assert (repo.path / "packed-refs").exists()
    have = {"threads": api.threads(repo), "log": [e.to_json(repo) for e in api.log(repo, None, all_threads=True, count=0)]}
    api.reindex(repo)
    want = {"threads": api.threads(repo), "log": [e.to_json(repo) for e in api.log(repo, None, all_threads=True, count=0)]}
    assert have == want and len(have["threads"]) == 150
    assert [p.message for p in api.fsck(repo).errors] == []
