"""A sync with nothing to do (docs/remotes.md "What moves over the wire"): push, fetch, pull
and index sync read the remote's refs document once and compare it with the tracking refs'
snapshot, reading no ref file per thread; and whatever did change since (the remote, a
thread here, a tracking ref moved by a push) is still seen."""

from __future__ import annotations

import convgit
from convgit import refs as refs_mod

H = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]


def _count_ref_reads(monkeypatch) -> dict[str, int]:
    """Count the ref files read (RefStore._read_path), tracking refs and threads apart."""
    seen = {"tracking": 0, "threads": 0}
    real = refs_mod.RefStore._read_path

    def counting(self, path, name):
        seen["tracking" if "remotes" in path.parts else "threads"] += 1
        return real(self, path, name)

    monkeypatch.setattr(refs_mod.RefStore, "_read_path", counting)
    return seen


def test_a_noop_sync_reads_no_ref_file_per_thread(tmp_path, monkeypatch):
    remote = str(tmp_path / "remote")
    a = convgit.init(tmp_path / "a")
    for i in range(30):
        convgit.commit(a, {"messages": [{"role": "user", "content": f"question {i}"}]}, thread=f"t{i:02d}")
    convgit.add_remote(a, "origin", remote)
    convgit.push(a)
    b, _ = convgit.clone(remote, tmp_path / "b")
    ix = convgit.init(tmp_path / "ix")
    convgit.add_remote(ix, "origin", remote)
    convgit.index_sync(ix)
    convgit.fetch(a)  # (a's first fetch reads the files once, and snapshots them)

    seen = _count_ref_reads(monkeypatch)
    for op in (lambda: convgit.push(a), lambda: convgit.fetch(a), lambda: convgit.pull(b),
               lambda: convgit.fetch(b), lambda: convgit.index_sync(ix)):
        rep = op()
        assert rep.moved == 0 and getattr(rep, "bytes", 0) == 0
    assert seen["tracking"] == 0, seen  # the snapshot answered for the tracking refs
    seen["threads"] = 0
    convgit.pull(b)  # (and a second no-op pull reads not even the threads: nothing moved since the first)
    assert seen == {"tracking": 0, "threads": 0}, seen

    # Whatever changed is still seen: the remote moved (another machine pushed) ...
    convgit.commit(b, {"messages": [{"role": "user", "content": "question 3"}, {"role": "assistant", "content": "b"}]},
                   thread="t03")
    assert convgit.push(b).moved == 1
    assert {t["thread"]: t["action"] for t in convgit.pull(a).threads}["t03"] == "fast-forward"
    assert convgit.index_sync(ix).moved == 1
    # ... a thread deleted here comes back with the next pull, as before ...
    with a.transaction() as tx:
        tx.delete("t05")
    assert {t["thread"]: t["action"] for t in convgit.pull(a).threads}["t05"] == "created"
    # ... and a push from here moves the tracking ref a fetch then agrees with.
    convgit.commit(a, {"messages": [{"role": "user", "content": "question 7"}, {"role": "assistant", "content": "a"}]},
                   thread="t07")
    assert convgit.push(a).moved == 1
    assert convgit.fetch(a).moved == 0 and convgit.fetch(b).threads[7]["action"] == "updated"
    assert convgit.show_refs(a)["t07"] == convgit.rev_parse(b, "origin/t07")
