"""Remote-tracking refs keep to their own files (convgit/remotes/tracking.py): creating one
for a thread whose reflog gc has packed leaves that thread's reflog where it is (they once
shared the threads' ``packed-logs``, so a push after a gc archived the thread's reflog away
as a "stale" one of the new tracking ref); remote rename and remove take every tracking
file along."""

from __future__ import annotations

import convgit
from convgit.remotes.tracking import TrackingRefs


def test_a_push_after_gc_keeps_the_threads_reflogs(tmp_path):
    a = convgit.init(tmp_path / "a")
    convgit.commit(a, {"messages": [{"role": "user", "content": "hi"}]}, thread="main")
    convgit.commit(a, {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
                   thread="main")
    convgit.gc(a)  # packs the refs and their reflogs (packed-logs)
    before = a.refs.log_bytes("main")
    turns = [e.turn for e in a.refs.read_log("main")]
    assert before and all(turns)
    convgit.add_remote(a, "origin", str(tmp_path / "remote"))
    convgit.push(a)
    assert a.refs.log_bytes("main") == before
    assert not (a.path / "logs" / "remotes-deleted").exists()
    assert [e.turn for e in a.refs.read_log("main")] == turns
    # the tracking ref has its own reflog, in its own files
    t = TrackingRefs(a.path, "origin")
    assert [e.new for e in t.read_log("main")] == [convgit.show_refs(a)["main"]]
    convgit.gc(a)
    assert a.refs.log_bytes("main") == before  # (and gc keeps both)
    b, _ = convgit.clone(str(tmp_path / "remote"), tmp_path / "b")
    assert [e.turn for e in b.refs.read_log("main")][-1] == turns[-1]  # provenance travelled

    convgit.rename_remote(a, "origin", "nas")
    leftovers = sorted(p.name for p in (a.path / "logs" / "remotes").iterdir()) if (a.path / "logs" / "remotes").exists() else []
    assert all(not n.startswith("origin") for n in leftovers), leftovers
    assert convgit.rev_parse(a, "nas/main") == convgit.show_refs(a)["main"]
    convgit.remove_remote(a, "nas")
    left = [p for p in (a.path / "logs").rglob("*") if "nas" in p.name or "origin" in p.name]
    assert left == [], left
