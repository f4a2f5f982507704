"""The serve committer bounds the pack count (convgit/serve/compact.py): small packs merged
geometrically when it is idle, through the real `convgit serve` on 127.0.0.1 and the fake
upstream; every object stays readable and fsck stays clean."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

import convgit
from convgit.repository import Repository
from convgit.serve.compact import compact, geometric_split

sys.path.insert(0, str(Path(__file__).parent))
from helpers.serve import FakeUpstream, ServeProcess  # noqa: E402


def test_geometric_split_keeps_each_pack_twice_the_one_below():
    assert geometric_split([]) == 0 and geometric_split([7]) == 0
    assert geometric_split([5, 5]) == 2  # equals merge
    assert geometric_split([5, 10, 20, 40]) == 0  # a progression already
    assert geometric_split([1, 1, 2]) == 3  # 1+1 merged is 2, beside a 2: all of them
    assert geometric_split([3, 10, 100]) == 0
    assert geometric_split([3, 4, 100]) == 2  # the two small ones, the big one stays


def test_a_server_writing_a_pack_per_batch_keeps_few_packs(tmp_path):
    store = tmp_path / "s"
    convgit.init(store).close()
    up = FakeUpstream().start()
    sp = ServeProcess(store, up.url)
    calls = 24
    try:
        sp.wait_listening()
        with httpx.Client(timeout=30) as c:
            for k in range(calls):  # each call a new 20-message conversation: one pack per batch
                msgs = [{"role": ("user", "assistant")[j % 2], "content": f"conversation {k} message {j}"}
                        for j in range(19)]
                r = c.post(sp.url + "/v1/chat/completions", json={"model": "gpt-fake", "messages": msgs})
                assert r.status_code == 200
                sp.wait_calls(k + 1)  # recorded before the next call: a batch each
        assert all("not_recorded" not in d for d in sp.calls)
    finally:
        assert sp.stop() == 0
        up.stop()
    repo = Repository.open(store / ".convgit")
    try:
        packs = repo.objects.packs(reload=True)
        counts = sorted(p.count for p in packs)
        # one pack per batch would be 24; merged geometrically: a handful
        assert 1 <= len(packs) <= 6, counts
        assert not any(counts[i + 1] < counts[i] for i in range(len(counts) - 1))
        assert convgit.fsck(repo).ok
        threads = convgit.show_refs(repo)
        assert len(threads) == calls
        for name in threads:
            assert len(convgit.conversation(repo, name)) == 20
        assert compact(repo, loose=False) is None  # nothing left to merge
    finally:
        repo.close()


def test_a_merge_waits_for_no_gc_and_copies_every_object(tmp_path):
    store = tmp_path / "s"
    convgit.init(store).close()
    repo = convgit.open_repo(store)
    try:
        for k in range(3):  # three packs (bulk commits of more than 16 objects each)
            convgit.commit_many(repo, [{"messages": [{"role": "user", "content": f"b{k} c{i} m{j}"} for j in range(6)]}
                                       for i in range(4)])
        before = set(repo.objects.iter_oids())
        assert len(repo.objects.packs(reload=True)) == 3
        from convgit import fsio

        fd = fsio.try_flock(store / ".convgit" / "gc.lock", shared=True)  # an fsck running
        try:
            assert compact(repo) is None
            assert len(repo.objects.packs(reload=True)) == 3
        finally:
            import os

            os.close(fd)
        done = compact(repo)
        assert done is not None and done.packs_merged == 3 and done.packs_after == 1
        assert set(repo.objects.iter_oids()) == before
        for oid in before:
            repo.objects.read_bytes(oid)  # (verified)
        assert convgit.fsck(repo).ok
    finally:
        repo.close()


def test_a_gc_asked_for_during_a_merge_waits_for_it_and_runs(tmp_path, monkeypatch):
    """A user's `convgit gc` that finds the committer merging packs (gc.lock held, with
    compact.lock) waits for the merge and runs; one that finds another gc (gc.lock alone)
    still skips at once, as git's does."""
    import threading
    import time

    from convgit import api, fsio
    from convgit.serve import compact as compact_mod

    store = tmp_path / "s"
    convgit.init(store).close()
    repo = convgit.open_repo(store)
    other = convgit.open_repo(store)
    try:
        for k in range(3):
            convgit.commit_many(repo, [{"messages": [{"role": "user", "content": f"w{k} c{i} m{j}"} for j in range(6)]}
                                       for i in range(4)])
        real, started = compact_mod.merge_packs, threading.Event()

        def slow(*a, **kw):
            started.set()
            time.sleep(1.0)  # a merge that takes a while
            return real(*a, **kw)

        monkeypatch.setattr(compact_mod, "merge_packs", slow)
        merged: list = []
        t = threading.Thread(target=lambda: merged.append(compact_mod.compact(repo)))
        t.start()
        assert started.wait(30)
        stats = api.gc(other, prune="now")  # (the merge is still sleeping: gc.lock is held)
        t.join(30)
        assert merged[0] is not None and merged[0].packs_merged == 3
        assert stats.status == "done", stats.reason
        fd = fsio.try_flock(store / ".convgit" / "gc.lock", shared=False)  # another gc running
        try:
            t0 = time.monotonic()
            assert api.gc(other).status == "skipped" and time.monotonic() - t0 < 5
        finally:
            import os

            os.close(fd)
    finally:
        other.close()
        repo.close()
