"""The repository transaction (issue 10): the one write path after objects are hashed.

Every operation that writes runs in ``repo.transaction()``; the transaction indexes exactly
what it moved (no rescan of the other refs), applies the HEAD rule, and turns a failure after
the commit point (the index, HEAD) into a warning, never an error. Structural, not timed.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import convgit
from convgit import codec
from convgit import index as index_mod
from convgit.errors import RefStale, StorageFailed
from convgit.objects import Message, TextPart
from convgit.refformat import STALE_MESSAGE, read_log_file
from convgit.refs import RefStore
from helpers.cli import env, ok, run  # noqa: F401  (fixtures)
from helpers.store import NOW, conv, fast_repo

ROOT = Path(__file__).resolve().parents[1]
# The ref store's moves, and the modules that may call them.
MOVES = {"update", "update_many", "rename", "write_head", "restore"}
ALLOWED = {"convgit/transaction.py", "convgit/refs.py", "convgit/merge_journal.py"}


def ref_moves_in(source: str) -> list[int]:
    """Lines of ``source`` that call a ref store move (``<x>.refs.update(...)`` and the like)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MOVES:
            owner = node.func.value
            if (isinstance(owner, ast.Attribute) and owner.attr == "refs") or (
                    isinstance(owner, ast.Name) and owner.id == "refs"):
                out.append(node.lineno)
    return out


def test_the_checker_finds_a_ref_move_outside_the_transaction():
    broken = "def f(repo):\n    with repo.write_lock():\n        repo.refs.update('t', None)\n"
    assert ref_moves_in(broken) == [3]
    assert ref_moves_in("def f(repo, d):\n    d.update({})\n    repo.index.update()\n") == []


def test_only_the_transaction_moves_refs_or_writes_head():
    offenders = {}
    for path in sorted((ROOT / "convgit").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED:
            continue
        lines = ref_moves_in(path.read_text("utf-8"))
        if lines:
            offenders[rel] = lines
    assert offenders == {}, f"ref moves outside convgit/transaction.py: {offenders}"


def _store(tmp_path, n: int):
    repo = fast_repo(tmp_path / "s")
    convgit.commit_many(repo, [{"messages": conv(f"q{i}", f"a{i}")} for i in range(n)], now_ms=NOW)
    repo.index.refresh()
    return repo


def _count_ref_reads(monkeypatch) -> list[str]:
    reads: list[str] = []
    real = RefStore._read_path

    def counting(self, path, name):
        reads.append(name)
        return real(self, path, name)

    def no_rescan(self, broken=None):
        raise AssertionError("a transaction read every ref")

    monkeypatch.setattr(RefStore, "_read_path", counting)
    monkeypatch.setattr(RefStore, "read_all", no_rescan)
    return reads


@pytest.mark.parametrize("op", ["commit", "fork", "rename", "delete", "update_ref", "import"])
def test_each_write_indexes_only_what_it_moved(tmp_path, monkeypatch, op):
    repo = _store(tmp_path, 60)
    tip = repo.refs.read_all()
    name = sorted(tip)[7]
    reads = _count_ref_reads(monkeypatch)
    if op == "commit":
        convgit.commit(repo, {"messages": conv("brand", "new")}, thread="fresh")
        assert [e.text for e in convgit.log(repo, "fresh")] == ["new", "brand"]
    elif op == "fork":
        convgit.fork(repo, tip[name], "forked")
        assert repo.index.thread_tips(["forked"]) == {"forked": tip[name]}
    elif op == "rename":
        convgit.rename_thread(repo, name, "renamed")
        assert repo.index.thread_tips(["renamed", name]) == {"renamed": tip[name]}
    elif op == "delete":
        convgit.delete_thread(repo, name)
        assert repo.index.thread_tips([name]) == {}
    elif op == "update_ref":
        other = tip[sorted(tip)[8]]
        convgit.update_ref(repo, name, other)
        assert repo.index.thread_tips([name]) == {name: other}
    else:
        f = tmp_path / "one.json"
        f.write_text('{"messages": [{"role": "user", "content": "imported q"}, {"role": "assistant", "content": "a"}]}')
        rep = convgit.import_paths(repo, [f], now_ms=NOW)
        thread = rep.conversations[0].threads[0]["thread"]
        assert [e.text for e in convgit.log(repo, thread)] == ["a", "imported q"]
    assert len(reads) <= 12, reads  # the moved refs (and HEAD's), never one per thread
    assert not repo.warnings


def _message(text: str, parent=None) -> tuple[str, bytes, Message]:
    m = Message(parent=parent, role="user", parts=(TextPart(text=text),))
    oid, data = codec.encode_and_hash(m)
    return oid, data, m


def test_a_transaction_moves_refs_indexes_them_and_applies_the_head_rule(tmp_path):
    repo = _store(tmp_path, 3)
    a, da, ma = _message("first by hand")
    b, db, mb = _message("second by hand", parent=a)
    with repo.transaction() as tx:
        head = tx.read_head()
        assert tx.write_objects([(a, da), (b, db)]) == 2
        assert tx.move("by-hand", b, expected=None, message="test") is None
        tx.follow("by-hand")
        # inside: the index has not caught up yet (it does once, at the end)
        assert repo.index.thread_tips(["by-hand"]) == {}
    assert tx.moved == {"by-hand"} and tx.warnings == []
    assert repo.refs.read_head() == "by-hand" and tx.head == "by-hand" and tx.head_moved and head != "by-hand"
    assert [e.text for e in convgit.log(repo, "by-hand")] == ["second by hand", "first by hand"]
    assert [e.message for e in repo.refs.read_log("by-hand")] == ["test"]


def test_a_failed_body_leaves_the_index_to_the_journal(tmp_path):
    repo = _store(tmp_path, 3)
    a, da, _ = _message("half done")
    with pytest.raises(RuntimeError):
        with repo.transaction() as tx:
            tx.write_objects([(a, da)])
            tx.move("half", a, expected=None)
            raise RuntimeError("crash after the commit point")
    assert repo.index.thread_tips(["half"]) == {}  # not indexed by the failed transaction
    path = repo.path
    repo.close()
    with convgit.open_repo(path) as r:  # the next command catches up from the journal
        assert [e.text for e in convgit.log(r, "half")] == ["half done"]


def test_a_lost_compare_and_swap_raises_and_moves_nothing(tmp_path):
    repo = _store(tmp_path, 2)
    name, tip = next(iter(repo.refs.read_all().items()))
    a, da, _ = _message("racer")
    with pytest.raises(RefStale):
        with repo.transaction() as tx:
            tx.write_objects([(a, da)])
            tx.move(name, a, expected="0" * 64)
    assert repo.refs.read(name) == tip


def test_an_index_failure_after_the_commit_point_is_a_warning(tmp_path, monkeypatch):
    repo = _store(tmp_path, 2)

    def full(self, *a, **k):
        raise StorageFailed("database or disk is full")

    monkeypatch.setattr(index_mod.Index, "record_moves", full)
    out = convgit.commit(repo, {"messages": conv("stands", "anyway")}, thread="kept")
    assert out.status == "created" and repo.refs.read("kept") == out.tip
    assert any("index not updated" in w and "disk is full" in w for w in out.warnings), out.warnings
    monkeypatch.undo()
    path = repo.path
    repo.close()
    with convgit.open_repo(path) as r:
        assert [e.text for e in convgit.log(r, "kept")] == ["anyway", "stands"]


def test_a_head_failure_after_the_commit_point_is_a_warning(tmp_path, monkeypatch):
    repo = _store(tmp_path, 2)

    def broken(self, name, staged=None):
        raise StorageFailed("No space left on device")

    monkeypatch.setattr(RefStore, "write_head", broken)
    out = convgit.commit(repo, {"messages": conv("head", "stays")}, thread="elsewhere")
    assert repo.refs.read("elsewhere") == out.tip
    assert any("HEAD could not be moved" in w for w in out.warnings), out.warnings
    assert repo.refs.read_head() != "elsewhere"
    assert not list(repo.path.glob("tmp_HEAD*"))  # HEAD's content staged before the move is not left behind


def test_the_library_and_the_cli_leave_head_alike(tmp_path, run):
    lib = fast_repo(tmp_path / "lib")
    for t in ("one", "two"):
        convgit.commit(lib, {"messages": conv(f"q {t}", f"a {t}")}, thread=t)
    assert lib.refs.read_head() == "two"
    convgit.rename_thread(lib, "two", "deux")
    assert lib.refs.read_head() == "deux"
    convgit.delete_thread(lib, "deux")
    ok(run("init"))
    for t in ("one", "two"):
        ok(run("commit", "--thread", t, "-", input=json.dumps({"messages": conv(f"q {t}", f"a {t}")})))
    ok(run("threads", "rename", "two", "deux"))
    ok(run("threads", "delete", "deux"))
    with convgit.open_repo(tmp_path / "proj" / ".convgit") as c:
        assert c.refs.read_head() == lib.refs.read_head() == "one"
        assert sorted(c.refs.read_all()) == sorted(lib.refs.read_all()) == ["one"]


@pytest.mark.parametrize("path", ["single", "batch"])
def test_a_new_thread_does_not_inherit_the_reflog_of_a_move_a_crash_cut_short(tmp_path, path):
    repo = convgit.init(tmp_path / "s")  # fsync on: commit_many moves its refs as one batch
    name = "stale-single" if path == "single" else "s/stale"
    stale_turn = "ab" * 32
    log = repo.refs.log_path(name)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"{'0' * 64} {'cd' * 32} 1700000000000 {stale_turn}\tcommit (new thread): 2 new message(s)\n")
    if path == "single":
        out = convgit.commit(repo, {"messages": conv("fresh", "thread")}, thread=name, now_ms=NOW)
    else:
        out = convgit.commit_many(repo, [{"messages": conv(f"bulk {i}", "x"), "source": "s", "upstream_thread_id": f"u{i}"}
                                         for i in range(5)] + [{"messages": conv("fresh", "thread"), "source": "s",
                                                                "upstream_thread_id": "stale"}], now_ms=NOW)[-1]
    assert out.thread == name
    entries = repo.refs.read_log(name)
    assert stale_turn not in {e.turn for e in entries} and len(entries) == 1
    # kept, as a deleted thread's reflog, ended by the stale line: a move that never happened
    # (not provenance that merge or a bundle would carry)
    archived = [read_log_file(p) for n, p in repo.refs.iter_log_files() if n is None]
    assert [[e.turn for e in es] for es in archived] == [[stale_turn, None]]
    assert archived[0][-1].message == STALE_MESSAGE and repo.refs.archived_entries() == []
    assert convgit.fsck(repo).errors == []
    repo.close()


def test_ref_operations_return_typed_results_that_read_as_their_documents(tmp_path):
    from convgit import DeleteResult, RenameResult, SwitchResult, UpdateRefResult

    repo = _store(tmp_path, 3)
    names = sorted(repo.refs.read_all())
    r = convgit.rename_thread(repo, names[0], "renamed")
    assert isinstance(r, RenameResult) and r.new == "renamed" and r["tip"] == r.tip
    assert r == {"status": "renamed", "old": names[0], "new": "renamed", "tip": r.tip} == r.to_json()
    s = convgit.switch(repo, "renamed")
    assert isinstance(s, SwitchResult) and dict(s) == s.to_json() and s.thread == "renamed"
    u = convgit.update_ref(repo, "copy", r.tip, create=True)
    assert isinstance(u, UpdateRefResult) and (u.old, u.new) == (None, r.tip)
    d = convgit.delete_thread(repo, "renamed")
    assert isinstance(d, DeleteResult) and d.head_moved and d.head != "renamed" and d.get("warnings") is None
    assert json.loads(json.dumps(d.to_json())) == dict(d)
