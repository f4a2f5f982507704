"""HEAD after a write (issue 9, defects 10 and 13): one rule, in the library, that the CLI
follows too; one check of ``on_conflict`` with one code; HEAD read before the commit point,
and a HEAD that cannot be written after it is a warning, never a failure."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

import convgit
from convgit import errors, fsio
from helpers.cli import assert_error, cli, conv, dumps, env, ok, proj, run, store_state, write_json  # noqa: F401

FIXTURE = Path("/work/shared/fixtures/chatgpt/librechat-chatgpt-tree.json")


def _head(store: Path) -> str:
    return (store / "HEAD").read_text()


def _lib_store(tmp_path) -> convgit.Repository:
    return convgit.init(tmp_path / "lib")


STEPS = [
    ("commit", {"messages": conv("q1", "a1")}, {"thread": "work"}),
    ("commit", {"messages": conv("q2")}, {}),  # an automatic name
    ("commit", {"messages": conv("q1", "a1", "q3")}, {}),  # continues work
    ("commit", {"messages": conv("q1", "a1")}, {}),  # an exact duplicate: HEAD follows it too
    ("commit", {"messages": conv("q1", "other")}, {"thread": "work", "on_conflict": "fork"}),
]


def test_library_and_cli_leave_head_on_the_same_thread(cli, proj, tmp_path):
    repo = _lib_store(tmp_path)
    store = proj / ".convgit"
    now = 1_733_040_000_000
    try:
        for i, (_, doc, kw) in enumerate(STEPS):
            r = convgit.commit(repo, doc, now_ms=now + i, **kw)
            args = ["--thread", kw["thread"]] if "thread" in kw else []
            args += ["--on-conflict", kw["on_conflict"]] if "on_conflict" in kw else []
            c = ok(cli("commit", "-", "--json", *args, input=dumps(doc))).json()
            assert repo.refs.read_head() == r.thread, (i, r)
            lib_head = _head(repo.path)
            # automatic names hold the time: compare the thread each one committed to
            assert _head(store) == f"ref: refs/threads/{c['thread']}\n"
            assert (r.status, r.tip) == (c["action"], c["tip"])
            if "thread" in kw:
                assert lib_head == _head(store)
    finally:
        repo.close()


def test_library_commit_many_and_cli_bulk_commit_agree_on_head(cli, proj, tmp_path):
    docs = [{"messages": conv("x1")}, {"messages": conv("y1")}, {"messages": conv("z1")}]
    paths = [write_json(tmp_path / f"{i}.json", d) for i, d in enumerate(docs)]
    repo = _lib_store(tmp_path)
    try:
        results = convgit.commit_many(repo, docs)
        assert repo.refs.read_head() == results[-1].thread
    finally:
        repo.close()
    out = ok(cli("commit", *paths, "--json")).json()
    assert _head(proj / ".convgit") == f"ref: refs/threads/{out[-1]['thread']}\n"


def test_library_and_cli_import_move_head_the_same_way(cli, proj, tmp_path):
    repo = _lib_store(tmp_path)
    try:
        rep = convgit.api.import_paths(repo, [FIXTURE])
        lib_head = repo.refs.read_head()
        assert repo.refs.read(lib_head) is not None  # HEAD named nothing: now the first import
        assert lib_head == next(t["thread"] for c in rep.conversations for t in c.threads if t["branch"] == "main")
    finally:
        repo.close()
    ok(cli("import", FIXTURE))
    assert _head(proj / ".convgit") == f"ref: refs/threads/{lib_head}\n"


@pytest.mark.parametrize("json_", [False, True])
def test_a_bad_on_conflict_is_one_error_with_one_code(cli, proj, tmp_path, json_):
    store = proj / ".convgit"
    before = store_state(store)
    doc = assert_error(cli("commit", "-", "-t", "w", "--on-conflict", "merge", *(["--json"] if json_ else []),
                           input=dumps({"messages": conv("q")})), "schema_validation_failed")
    if json_:
        assert "--on-conflict must be reject or fork" in doc["error_message"]
    # the bulk path (several files, no --thread) checks it too
    p = write_json(tmp_path / "a.json", {"messages": conv("q")})
    assert_error(cli("commit", p, p, "--on-conflict", "merge"), "schema_validation_failed")
    assert store_state(store) == before
    repo = convgit.open_repo(proj)
    try:
        with pytest.raises(errors.SchemaValidationFailed) as e:
            convgit.commit(repo, {"messages": conv("q")}, thread="w", on_conflict="merge")
        assert e.value.exit_code == errors.SchemaValidationFailed.exit_code == 11
        assert e.value.code == "schema_validation_failed"
    finally:
        repo.close()
    assert store_state(store) == before


# -- defect 13: nothing reported as failed after the commit point -----------------------------


def test_an_unreadable_head_stops_commit_before_anything_is_written(cli, run, proj, tmp_path):
    store = proj / ".convgit"
    (store / "HEAD").write_text("garbage\n")
    before = store_state(store)
    for json_ in ([], ["--json"]):
        assert_error(run("commit", "-t", "work", "-", *json_, input=dumps({"messages": conv("q")})), "object_corrupt")
    p = write_json(tmp_path / "a.json", {"messages": conv("q")})
    assert_error(cli("commit", p, p), "object_corrupt")  # bulk
    assert_error(cli("import", FIXTURE), "object_corrupt")
    assert store_state(store) == before
    assert not (store / "refs" / "threads" / "work").exists()
    repo = convgit.open_repo(proj)
    try:
        with pytest.raises(errors.ObjectCorrupt):
            convgit.commit(repo, {"messages": conv("q")}, thread="work")
    finally:
        repo.close()
    assert store_state(store) == before
    (store / "HEAD").write_text("ref: refs/threads/main\n")  # repaired: commits work again
    assert ok(cli("commit", "-t", "work", "-", "--json", input=dumps({"messages": conv("q")}))).json()["action"] == "created"


def fail_head_writes(monkeypatch) -> None:
    """Writing HEAD's temp file fails as on a full disk (every other write succeeds)."""
    real = fsio._write_all

    def write_all(fd, data, path):
        if os.path.basename(str(path)).startswith(f"{fsio.TMP_PREFIX}HEAD"):
            raise fsio._storage_error("write", path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        return real(fd, data, path)

    monkeypatch.setattr(fsio, "_write_all", write_all)


@pytest.fixture
def full_disk_for_head(monkeypatch):
    """``fail_head_writes`` for the whole test."""
    fail_head_writes(monkeypatch)


def test_head_that_cannot_be_written_after_the_commit_is_a_warning(cli, proj, full_disk_for_head):
    store = proj / ".convgit"
    r = ok(cli("commit", "-t", "work", "-", input=dumps({"messages": conv("q")})))
    assert "warning: the write stands, but HEAD could not be moved to work" in r.err
    assert "No space left on device" in r.err and r.out.startswith("Created thread work")
    tip = (store / "refs" / "threads" / "work").read_text().strip()
    assert _head(store) == "ref: refs/threads/main\n"
    doc = ok(cli("commit", "-t", "more", "-", "--json", input=dumps({"messages": conv("q2")}))).json()
    assert doc["action"] == "created" and len(doc["warnings"]) == 1
    assert "HEAD could not be moved to more" in doc["warnings"][0]
    assert (store / "refs" / "threads" / "more").read_text().strip() == doc["tip"]
    repo = convgit.open_repo(proj)
    try:
        res = convgit.commit(repo, {"messages": conv("q3")}, thread="lib")
        assert res.warnings and res.to_json()["warnings"] == res.warnings
        assert repo.refs.read("lib") == res.tip and repo.refs.read_head() == "main"
    finally:
        repo.close()
    assert ok(cli("log", "work", "--json")).json()[0]["id"] == tip


def test_head_that_cannot_be_written_after_an_import_is_a_warning(cli, proj, full_disk_for_head):
    doc = ok(cli("import", FIXTURE, "--json")).json()
    assert doc["status"] == "ok" and "HEAD could not be moved" in doc["warnings"][0]
    assert all(c["status"] == "imported" for c in doc["conversations"])


def test_without_a_warning_the_json_result_has_no_warnings_key(cli, proj):
    doc = ok(cli("commit", "-t", "w", "-", "--json", input=dumps({"messages": conv("q")}))).json()
    assert "warnings" not in doc
    assert json.loads(ok(cli("threads", "--json")).out)[0]["current"] is True


def test_rename_and_delete_read_head_first_and_warn_when_it_cannot_be_written(cli, proj, monkeypatch):
    store = proj / ".convgit"
    ok(cli("commit", "-t", "a", "-", input=dumps({"messages": conv("qa")})))
    ok(cli("commit", "-t", "b", "-", input=dumps({"messages": conv("qb")})))  # HEAD: b
    (store / "HEAD").write_text("garbage\n")
    before = store_state(store)
    assert_error(cli("threads", "rename", "b", "c"), "object_corrupt")
    assert_error(cli("threads", "delete", "b"), "object_corrupt")
    assert store_state(store) == before
    (store / "HEAD").write_text("ref: refs/threads/b\n")
    fail_head_writes(monkeypatch)
    r = ok(cli("threads", "rename", "b", "c"))
    assert r.out == "Renamed b to c\n" and "HEAD could not be moved to c" in r.err
    assert (store / "refs" / "threads" / "c").exists() and not (store / "refs" / "threads" / "b").exists()
    ok(cli("commit", "-t", "b", "-", input=dumps({"messages": conv("qb2")})))  # HEAD still names b
    doc = ok(cli("threads", "delete", "b", "--json")).json()
    assert doc["head"] == "b" and doc["head_moved"] is False and "HEAD could not be moved" in doc["warnings"][0]
    assert not (store / "refs" / "threads" / "b").exists()
