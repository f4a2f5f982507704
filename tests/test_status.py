"""convgit status (issue 5): counts, dedup ratio, text bytes, objects, bytes on disk, index
freshness and last gc."""

from __future__ import annotations

import json

import convgit
from convgit import api
from convgit.repository import Repository

from helpers.cli import cli, dumps, env, ok, proj  # noqa: F401  (fixtures)
from helpers.store import conv, fast_repo


def _store(tmp_path):
    repo = fast_repo(tmp_path / "st")
    convgit.commit(repo, conv("u1", "a1", "u2", "a2"), thread="t1")
    convgit.commit(repo, conv("u1", "a1", "u3", "café"), thread="t2", on_conflict="fork")
    convgit.commit(repo, conv("x", "y"), thread="t3")
    return repo


def test_counts_and_dedup(tmp_path):
    repo = _store(tmp_path)
    st = convgit.status(repo)
    assert (st["threads"], st["messages"], st["message_refs"]) == (3, 8, 10)
    assert st["dedup_ratio"] == 1.25
    assert st["turns"] == 3
    assert st["text_bytes"] == len("u1a1u2a2u3caféxy".encode())  # each stored text once
    assert st["format_version"] == 1 and st["store"] == str(repo.path)
    assert st["head"] == "t3"  # the library's commit moves HEAD, as the CLI's does
    # 8 messages + 3 turns, all loose
    assert st["objects"] == {"loose": 11, "packed": 0, "packs": 0}
    b = st["bytes"]
    assert b["total"] >= b["objects_loose"] + b["index"] > 0 and b["packs"] == 0
    assert st["last_gc"] is None and st["last_gc_record"] is None
    # a deleted thread's messages are no longer counted (the index keeps them as unreachable)
    convgit.delete_thread(repo, "t3")
    st = convgit.status(repo)
    assert (st["threads"], st["messages"], st["message_refs"], st["turns"]) == (2, 6, 8, 2)
    repo.close()


def test_packed_objects_after_gc(tmp_path):
    repo = _store(tmp_path)
    api.gc(repo, prune="never")
    st = convgit.status(repo)
    assert st["objects"]["loose"] == 0 and st["objects"]["packed"] >= 11 and st["objects"]["packs"] >= 1
    assert st["bytes"]["packs"] > 0
    repo.close()


def test_last_gc_from_gc_log(tmp_path):
    repo = _store(tmp_path)
    (repo.path / "gc.log").write_text(
        json.dumps({"started_at": 1, "finished_at": "2024-06-01T00:00:00Z", "pruned": 3}) + "\n"
        + json.dumps({"started_at": 2}) + "\n"  # a gc that did not finish
        + '{"started_at": 3, "finished'  # a torn line
    )
    st = convgit.status(repo)
    assert st["last_gc"] == "2024-06-01T00:00:00Z" and st["last_gc_record"]["pruned"] == 3
    repo.close()


def test_index_freshness(tmp_path):
    """The index notices what moved without it: a ref another tool wrote (through a temp
    file and a rename, as tools do), and a commit whose index update never happened (a
    crash between the ref move and the index update: its journal line is unread)."""
    import json
    import os
    import sqlite3

    repo = _store(tmp_path)
    path = repo.path
    repo.close()
    idx = path / "index.sqlite"
    with Repository.open(path) as r:
        st = convgit.status(r)
        assert st["index"]["up_to_date"] and st["index"]["stale_threads"] == 0
        t2 = r.refs.read("t2")
    # 1. Another tool points t1 at t2's tip (temp file + rename: the directory changes).
    tmp = path / "refs" / "threads" / "t1.new"
    tmp.write_text(t2 + "\n")
    os.replace(tmp, path / "refs" / "threads" / "t1")
    with Repository.open(path) as r:
        r._index = None
        st = convgit.status(r)
        assert not st["index"]["up_to_date"] and st["index"]["stale_threads"] == 1
        assert st["messages"] == 8 - 2  # t1's own two are left behind
        assert convgit.status(r)["index"]["up_to_date"]  # caught up now
    # 2. A commit whose index update was lost: the index has not read its journal line.
    db = sqlite3.connect(idx)
    state = json.loads(db.execute("SELECT value FROM meta WHERE key='refs_state'").fetchone()[0])
    db.close()
    with Repository.open(path) as other:
        convgit.commit(other, conv("x", "y", "z", "w"), thread="t3")
    db = sqlite3.connect(idx)
    db.execute("UPDATE threads SET tip = 'stale' WHERE name = 't3'")
    db.execute("UPDATE meta SET value=? WHERE key='refs_state'", (json.dumps(state),))
    db.commit()
    db.close()
    with Repository.open(path) as r:
        r._index = None
        st = convgit.status(r)
        assert not st["index"]["up_to_date"] and st["index"]["stale_threads"] == 1
        assert st["messages"] == 8 - 2 + 2  # t3 grew by two
        assert convgit.status(r)["index"]["up_to_date"]
    (idx).unlink()
    with Repository.open(path) as r:
        r._index = None
        st = convgit.status(r)
        assert st["index"]["rebuilt_now"] and st["messages"] == 8


def test_status_cli(cli, proj):
    ok(cli("commit", "-", "--json", "--thread", "main", input=dumps(conv("hello", "hi"))))
    out = ok(cli("status")).out
    for label in ("Store", "Threads", "Turns", "Messages", "Text", "Objects", "On disk", "Index", "Last gc"):
        assert f"\n{label} " in "\n" + out, label
    assert "dedup 1.00x" in out and "never (no gc.log)" in out
    doc = ok(cli("status", "--json")).json()
    assert {"store", "format_version", "threads", "turns", "messages", "message_refs", "dedup_ratio", "text_bytes",
            "objects", "bytes", "index", "last_gc"} <= set(doc)
    assert doc["messages"] == 2 and doc["threads"] == 1


def test_status_is_a_typed_report_that_reads_as_its_json_document(tmp_path):
    """``api.status`` returns a StatusReport (attributes, ``to_json``) that also reads as the
    dict it used to be; ``to_json`` has the documented keys in their order."""
    repo = _store(tmp_path)
    st = convgit.status(repo)
    assert isinstance(st, convgit.StatusReport)
    assert (st.threads, st.messages, st.message_refs, st.dedup_ratio) == (3, 8, 10, 1.25)
    doc = st.to_json()
    assert list(doc) == ["store", "format_version", "head", "threads", "turns", "messages", "message_refs",
                         "dedup_ratio", "text_bytes", "objects", "bytes", "index", "last_gc", "last_gc_record", "gc_auto",
                         "seconds"]
    assert dict(st) == doc and st == doc and st["index"] == doc["index"] == st.index
    assert json.loads(json.dumps(doc)) == doc  # plain JSON values only
    convgit.gc(repo, prune="now")
    st = convgit.status(repo)
    assert st.to_json()["last_gc"] == st.last_gc_record["finished_at"] is not None
    repo.close()
