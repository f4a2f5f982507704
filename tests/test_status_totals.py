"""The index's running totals (meta ``totals``, index/schema.py TOTALS) that ``status`` reads:
after any sequence of writes they equal a direct count over the rows, and a rebuilt index's;
status answers the same from them as from a count; fsck notices totals that drifted."""

from __future__ import annotations

import itertools
import json
import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

import convgit
from convgit import api
from convgit.index import Index
from convgit.index.schema import TOTALS, count_totals, read_totals
from convgit.repository import Repository

from helpers.store import NOW, conv, fast_repo

_seq = itertools.count()


def _chatgpt(cid: str, texts: list[str]) -> dict:
    """A linear ChatGPT export entry with these texts (user/assistant alternating)."""
    nodes = {"root": {"id": "root", "parent": None, "children": ["n0"], "message": None}}
    for i, text in enumerate(texts):
        nid, parent = f"n{i}", ("root" if i == 0 else f"n{i - 1}")
        nodes[nid] = {"id": nid, "parent": parent, "children": [f"n{i + 1}"] if i + 1 < len(texts) else [],
                      "message": {"id": nid, "author": {"role": "user" if i % 2 == 0 else "assistant"},
                                  "create_time": 100.0 + i, "content": {"content_type": "text", "parts": [text]},
                                  "status": "finished_successfully", "weight": 1.0, "recipient": "all",
                                  "metadata": {}}}
    return {"id": cid, "conversation_id": cid, "title": cid, "create_time": 99.0,
            "current_node": f"n{len(texts) - 1}", "mapping": nodes}


def _status_counts(st_: dict) -> dict:
    return {k: st_[k] for k in ("threads", "turns", "messages", "message_refs", "dedup_ratio", "text_bytes")}


def _rebuilt_totals(repo: Repository) -> dict:
    """The totals of an index rebuilt from the objects beside the live one (counted)."""
    where = repo.path / f"tmp_check{next(_seq)}.sqlite"
    fresh = Index(repo, path=where, autorefresh=False)
    try:
        return count_totals(fresh.db)
    finally:
        fresh.close()
        where.unlink()


def _assert_totals_true(repo: Repository) -> None:
    """The running totals equal a direct count of the live rows and a rebuilt index's count
    (and status reports exactly them)."""
    status = api.status(repo)
    db = repo.index.db
    have, want = read_totals(db), count_totals(db)
    assert have == want
    assert want == _rebuilt_totals(repo)
    assert {k: status[k] for k in TOTALS} == want


# One operation: (kind, a thread pick, a text pick). Texts come from a small pool so that
# threads share messages (dedup) and some operations are no-ops.
OPS = st.tuples(
    st.sampled_from(["new", "continue", "continue", "fork", "delete", "rewind", "import", "merge", "gc", "reindex",
                     "rename"]),
    st.integers(0, 5), st.integers(0, 3),
)


def _apply(repo: Repository, op, tmp, clock) -> None:
    kind, pick, word = op
    names = sorted(repo.refs.read_all())
    name = names[pick % len(names)] if names else None
    t = next(clock)
    if kind == "new" or (name is None and kind not in ("import", "merge", "gc", "reindex")):
        convgit.commit(repo, {"messages": conv(f"q{word}", f"a{word}")}, now_ms=t)
    elif kind == "continue":
        hist = [{"role": e.role, "content": e.text} for e in api.conversation(repo, name)]
        convgit.commit(repo, {"messages": hist + conv(f"more {word}", f"ok {t}")}, thread=name, now_ms=t)
    elif kind == "fork":
        depth = len(api.conversation(repo, name))
        convgit.fork(repo, f"{name}~{word % depth}", f"f{t}", now_ms=t)
    elif kind == "delete":
        convgit.delete_thread(repo, name)
    elif kind == "rewind":  # move a thread back (messages above become unreachable unless held)
        depth = len(api.conversation(repo, name))
        if depth > 1:
            tip = repo.refs.read(name)
            convgit.update_ref(repo, name, api.rev_parse(repo, f"{name}~1"), tip)
    elif kind == "rename":
        convgit.rename_thread(repo, name, f"r{t}")
    elif kind == "import":
        path = tmp / f"export{t}.json"
        path.write_text(json.dumps([_chatgpt(f"c{word}", [f"q{word}", f"a{word}", f"imported {pick}"][: 2 + pick % 2])]))
        api.import_paths(repo, [str(path)], now_ms=t)
    elif kind == "merge":
        src = fast_repo(tmp / f"src{t}")
        convgit.commit(src, {"messages": conv(f"q{word}", f"a{word}", f"from elsewhere {pick}")}, now_ms=t)
        src.close()
        api.merge(repo, tmp / f"src{t}" / ".convgit")
    elif kind == "gc":
        api.gc(repo, prune="now")
    elif kind == "reindex":
        api.reindex(repo)


@settings(max_examples=12)
@given(st.lists(OPS, min_size=1, max_size=7))
def test_running_totals_equal_a_fresh_count_after_any_sequence(tmp_path, ops):
    tmp = tmp_path / f"ex{next(_seq)}"
    tmp.mkdir()
    repo = fast_repo(tmp / "s")
    clock = itertools.count(NOW, 1000)
    try:
        for op in ops:
            _apply(repo, op, tmp, clock)
            _assert_totals_true(repo)
        before = _status_counts(api.status(repo))
        api.reindex(repo)  # counted from the rows
        assert _status_counts(api.status(repo)) == before
    finally:
        repo.close()


def test_every_kind_of_write_keeps_the_totals_and_status_json_matches_a_rebuild(tmp_path):
    """A fixed sequence with every kind of write, the status JSON compared with the one a
    rebuilt index gives (running totals against totals counted from the rows)."""
    repo = fast_repo(tmp_path / "s")
    clock = itertools.count(NOW, 1000)
    ops = [("new", 0, 0), ("continue", 0, 1), ("fork", 0, 1), ("new", 0, 2), ("continue", 1, 2),
           ("rewind", 0, 0), ("rename", 1, 0), ("import", 1, 0), ("import", 0, 0), ("merge", 0, 1),
           ("delete", 2, 0), ("gc", 0, 0), ("continue", 0, 3)]
    try:
        for op in ops:
            _apply(repo, op, tmp_path, clock)
            _assert_totals_true(repo)
        live = api.status(repo)
        assert live["threads"] >= 4 and live["turns"] > 0 and live["message_refs"] > live["messages"] > 0
    finally:
        repo.close()
    db = sqlite3.connect(tmp_path / "s" / ".convgit" / "index.sqlite")
    db.execute("DELETE FROM meta WHERE key='totals'")  # status must then count them itself
    db.commit()
    db.close()
    with Repository.open(tmp_path / "s" / ".convgit") as r:
        counted = api.status(r)
    assert _status_counts(counted) == _status_counts(live)


def test_status_reads_the_totals_fsck_names_totals_that_drifted_and_reindex_cures_them(tmp_path):
    repo = fast_repo(tmp_path / "s")
    convgit.commit(repo, {"messages": conv("a", "b")}, now_ms=NOW)
    convgit.commit(repo, {"messages": conv("c", "d")}, now_ms=NOW + 1)
    assert api.fsck(repo).ok
    db = repo.index.db
    wrong = dict(read_totals(db), messages=read_totals(db)["messages"] + 1)
    db.execute("INSERT OR REPLACE INTO meta VALUES ('totals', ?)", (json.dumps(wrong),))
    # status reads the one row (it does not count): the planted figure is what it reports
    assert api.status(repo)["messages"] == wrong["messages"] == count_totals(db)["messages"] + 1
    report = api.fsck(repo).to_json()
    assert report["status"] != "ok"
    totals = [p for p in report["problems"] if "(totals)" in p["message"]]
    assert totals and {(p["severity"], p["kind"]) for p in totals} == {("error", "index")}, report
    # named twice: against its own rows (which total, both figures) and against a rebuild
    assert any("messages 5 (its rows count 4)" in p["message"] for p in totals), totals
    assert any("disagrees with the objects (totals)" in p["message"] for p in totals), totals
    api.reindex(repo)
    assert read_totals(repo.index.db) == count_totals(repo.index.db)
    assert api.status(repo)["messages"] == 4
    assert api.fsck(repo).ok
    repo.close()


def test_fsck_fails_with_its_exit_code_on_totals_that_drifted(tmp_path):
    """Through the CLI: ``fsck --json`` exits 35 (fsck_failed) naming the totals; after
    ``reindex`` it exits 0."""
    import os
    import subprocess
    import sys

    repo = fast_repo(tmp_path / "s")
    convgit.commit(repo, {"messages": conv("a", "b")}, now_ms=NOW)
    db = repo.index.db
    db.execute("INSERT OR REPLACE INTO meta VALUES ('totals', ?)",
               (json.dumps(dict(read_totals(db), turns=read_totals(db)["turns"] + 3)),))
    path = repo.path
    repo.close()
    env = {**os.environ, "CONVGIT_DIR": str(path)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "convgit", *args], env=env, capture_output=True, text=True,
                              cwd=tmp_path, timeout=120)

    r = cli("fsck", "--json")
    assert r.returncode == 35, (r.returncode, r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    assert doc["error_code"] == "fsck_failed"
    assert any(p["kind"] == "index" and "turns 4 (its rows count 1)" in p["message"] for p in doc["problems"]), doc
    assert json.loads(cli("status", "--json").stdout)["turns"] == 4  # read, not counted
    assert cli("reindex").returncode == 0
    r = cli("fsck", "--json")
    assert r.returncode == 0, r.stdout
    assert json.loads(cli("status", "--json").stdout)["turns"] == 1


def _index_equals_a_rebuild(repo: Repository) -> None:
    """The live index holds what a rebuild holds (Index.dump: rows, the totals, and which
    reachable messages it keeps as unreachable), and status answers from it alike."""
    where = repo.path / f"tmp_dump{next(_seq)}.sqlite"
    fresh = Index(repo, path=where, autorefresh=False)
    try:
        want = fresh.dump()
    finally:
        fresh.close()
        where.unlink()
    have = repo.index.dump()
    assert {k: have[k] for k in want if have[k] != want[k]} == {}
    assert {k: api.status(repo)[k] for k in TOTALS} == want["totals"] == count_totals(repo.index.db)


def test_a_history_moved_back_then_continued_elsewhere_is_reachable_again(tmp_path):
    """A thread moved back leaves its newest message unreachable; a commit that continues
    that message (a stateless call sending the whole history again) makes it reachable. The
    index added the new message and stopped there (it was never unreachable), so the old one
    stayed out of status's counts and of search for good (issue 10's drift)."""
    repo = fast_repo(tmp_path / "s")
    convgit.commit(repo, {"messages": conv("q", "a", "the zebra answer")}, thread="t", now_ms=NOW)
    convgit.update_ref(repo, "t", "t~1")
    assert api.status(repo)["messages"] == 2
    assert api.search(repo, "zebra", mode="fts") == []
    convgit.commit(repo, {"messages": conv("q", "a", "the zebra answer", "go on")}, thread="u", now_ms=NOW + 1)
    _index_equals_a_rebuild(repo)
    assert api.status(repo)["messages"] == 4
    assert [h.threads for h in api.search(repo, "zebra", mode="fts")] == [["u"]]
    assert api.fsck(repo).ok
    # and on the thread that was moved back: back once more, then the same message again
    convgit.update_ref(repo, "u", "u~2")
    convgit.commit(repo, {"messages": conv("q", "a", "the zebra answer", "again")}, thread="t", now_ms=NOW + 2)
    _index_equals_a_rebuild(repo)
    # then a move that leaves the first continuation behind must not take the history with it
    convgit.update_ref(repo, "t", "t~1")
    _index_equals_a_rebuild(repo)
    assert api.fsck(repo).ok
    repo.close()


def test_a_refresh_racing_a_commit_never_moves_the_thread_back(tmp_path):
    """``refresh`` reads every ref, then catches the index up under index.lock. A commit by
    another process between the two (made and indexed) must not be undone by a catch-up to
    the tips read before it: the index moved the thread back, leaving the new message
    unreachable, the running totals short and search blind to it until a later catch-up.
    The other process is a second Repository on the same store, committing exactly there."""
    a = fast_repo(tmp_path / "s")
    convgit.commit(a, {"messages": conv("q", "a")}, thread="t", now_ms=NOW)
    b = Repository.open(a.path)
    b.index  # opened (and caught up) before the race
    read_all = a.refs.read_all
    raced = []

    def read_all_then_race(*args, **kwargs):
        out = read_all(*args, **kwargs)
        if not raced:
            raced.append(convgit.commit(b, {"messages": conv("q", "a", "the racing zebra")}, thread="t",
                                        now_ms=NOW + 1))
        return out

    a.refs.read_all = read_all_then_race
    try:
        a.index.refresh()
    finally:
        del a.refs.read_all
    assert raced
    tip = a.refs.read("t")
    assert a.index.thread_tips() == {"t": tip}
    assert read_totals(a.index.db)["messages"] == 3
    assert [h.threads for h in a.index.search("zebra")] == [["t"]]
    _index_equals_a_rebuild(a)
    b.close()
    a.close()


def test_a_damaged_index_is_rebuilt_with_its_totals_counted(tmp_path):
    """The healing rebuild (a garbled index file) counts the totals from its rows: status
    after it reads the same figures as before the damage, and fsck finds nothing."""
    repo = fast_repo(tmp_path / "s")
    convgit.commit(repo, {"messages": conv("a", "b", "c")}, thread="t", now_ms=NOW)
    convgit.fork(repo, "t~1", "f", now_ms=NOW + 1)
    convgit.delete_thread(repo, "t")
    before = _status_counts(api.status(repo))
    path = repo.path
    repo.close()
    with open(path / "index.sqlite", "r+b") as f:
        f.write(b"not a database" * 100)
    with Repository.open(path) as r:
        st = api.status(r)
        assert st["index"]["rebuilt_now"]
        assert _status_counts(st) == before
        assert read_totals(r.index.db) == count_totals(r.index.db)
        assert api.fsck(r).ok


def test_last_gc_reads_the_tail_of_a_long_gc_log(tmp_path):
    from convgit.stats import last_gc

    lines = [json.dumps({"started_at": i, "finished_at": i + 1, "pad": "x" * 200}) for i in range(1000)]
    (tmp_path / "gc.log").write_text("\n".join(lines) + '\n{"started_at": 5000, "fin')  # a torn last line
    assert (tmp_path / "gc.log").stat().st_size > 65536
    assert last_gc(tmp_path)["finished_at"] == 1000
    # a tail with no complete record: the whole file is read
    (tmp_path / "gc.log").write_text(lines[0] + "\n" + "y" * 70000 + "\n")
    assert last_gc(tmp_path)["finished_at"] == 1
    assert last_gc(tmp_path / "none") is None


def test_after_gc_status_reads_no_ref(tmp_path):
    """gc rotates the refs journal; it catches the index up itself, so that the next status
    finds nothing to re-read (it would otherwise read every ref once)."""
    repo = fast_repo(tmp_path / "s")
    for i in range(3):
        convgit.commit(repo, {"messages": conv(f"q{i}", "a")}, now_ms=NOW + i)
    api.gc(repo, prune="never")
    path = repo.path
    repo.close()
    with Repository.open(path) as r:
        idx = r.open_index(autorefresh=False)
        try:
            assert idx.refs_unchanged()
        finally:
            idx.close()
        st = api.status(r)
    assert st["index"]["up_to_date"] and st["threads"] == 3
