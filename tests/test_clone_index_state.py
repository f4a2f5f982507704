"""A clone's index has its catch-up state (index/writer.py ``record_moves`` on a new index):
the index built by the clone knows where the refs journal ended, so the first write after
the clone catches up only what it moved, instead of reading and comparing every thread (it
used to: 7.7 s at 10,000 threads, most of a fetch at 100,000). Checked through the index's
own generation state (``refs_unchanged``, ``pending_names``) and by counting the threads
the first write's catch-up is given, at both sizes of clone (threads written one by one,
and packed at once from BULK_MIN on)."""

from __future__ import annotations

import pytest

import convgit
from convgit.index import writer
from convgit.remotes.bulkrefs import BULK_MIN


@pytest.mark.parametrize("n", [6, BULK_MIN + 4])
def test_the_first_write_after_a_clone_is_incremental(tmp_path, monkeypatch, n):
    monkeypatch.setenv("CONVGIT_FSYNC", "0")  # (the set-up: n threads)
    a = convgit.init(tmp_path / "a")
    convgit.commit_many(a, [{"messages": [{"role": "user", "content": f"question {i} about zebras"}]} for i in range(n)])
    convgit.add_remote(a, "origin", str(tmp_path / "remote"))
    convgit.push(a)
    b, _ = convgit.clone(str(tmp_path / "remote"), tmp_path / "b")
    # The index is at the journal's end: nothing pending, no thread to read again.
    assert b.index.refs_unchanged() and b.index.pending_names() == set()
    assert len(b.index.thread_tips()) == n and b.index.thread_tips() == convgit.show_refs(b)
    b.close()

    given: list[int] = []  # the threads each catch-up is given (every thread: a full refresh)
    full: list[int] = []
    real_catch_up, real_refresh = writer.IndexWriter._catch_up, writer.IndexWriter.refresh

    def catch_up(self, refs, **kw):
        def counted():
            got = refs() if callable(refs) else refs
            given.append(len(got))
            return got
        return real_catch_up(self, counted, **kw)

    def refresh(self):
        full.append(1)
        return real_refresh(self)

    monkeypatch.setattr(writer.IndexWriter, "_catch_up", catch_up)
    monkeypatch.setattr(writer.IndexWriter, "refresh", refresh)
    b = convgit.open_repo(tmp_path / "b")
    convgit.commit(b, {"messages": [{"role": "user", "content": "a question after the clone"},
                                    {"role": "assistant", "content": "striped"}]}, thread="after-clone")
    assert full == [] and given == [1], (full, given)  # (main: a full refresh, every thread read and compared)
    assert b.index.refs_unchanged()
    # and the index is what a rebuilt one would be
    tips = b.index.thread_tips()
    assert len(tips) == n + 1 and tips == convgit.show_refs(b)
    assert convgit.status(b).to_json()["threads"] == n + 1
    b.close()
