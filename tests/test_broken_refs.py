"""An unreadable ref file (issue 9, defect 6): listed as broken, never with a stale tip;
removable by `threads delete`, `update-ref -d` and `fsck --repair` (reflog archived, no
object deleted); gc keeps refusing and says how to fix it."""

from __future__ import annotations

import json
import os
import time

import pytest

import convgit
from helpers.cli import assert_error, cli, conv, dumps, env, object_ids, ok, proj  # noqa: F401


def _two_threads(cli) -> dict[str, str]:
    x = ok(cli("commit", "-", "-t", "X", "--json", input=dumps({"messages": conv("hi", "yo")}))).json()
    y = ok(cli("commit", "-", "-t", "Y", "--json", input=dumps({"messages": conv("hey")}))).json()
    return {"X": x["tip"], "Y": y["tip"]}


def _break(store, name: str = "X") -> None:
    # Overwritten in place, as `echo garbage > ref` does: the ref directory's mtime stays,
    # so an index that trusts its signature would not notice.
    with open(store / "refs" / "threads" / name, "r+b") as f:
        f.write(b"garbage\n")
        f.truncate()


@pytest.fixture
def broken(cli, proj):
    tips = _two_threads(cli)
    store = proj / ".convgit"
    time.sleep(1.1)  # old enough for the index to trust its ref-directory signature
    ok(cli("threads"))
    _break(store)
    return store, tips


def test_threads_lists_a_broken_ref_as_broken_never_with_its_old_tip(cli, broken):
    store, tips = broken
    rows = ok(cli("threads", "--json")).json()
    assert [r["name"] for r in rows] == ["X", "Y"]
    x, y = rows
    assert x["tip"] is None and "not a valid object id" in x["broken"] and "garbage" not in x["broken"] and x["messages"] == 0
    assert y["tip"] == tips["Y"] and y["broken"] is None
    r = ok(cli("threads"))
    assert tips["X"][:12] not in r.out
    assert "X  (unreadable ref)" in r.out and tips["Y"][:12] in r.out
    assert "warning: thread 'X' is corrupt" in r.err and "convgit threads delete X" in r.err


def test_fsck_names_the_fix_and_gc_refuses_saying_how_to_fix_it(cli, broken):
    store, _ = broken
    doc = assert_error(cli("fsck", "--json"), "fsck_failed")
    msgs = [p["message"] for p in doc["problems"] if p["kind"] == "bad_ref"]
    assert len(msgs) == 1 and "convgit threads delete X" in msgs[0] and "fsck --repair" in msgs[0]
    before = object_ids(store)
    doc = assert_error(cli("gc", "--prune=now", "--json"), "gc_refused")
    assert "convgit threads delete X" in doc["error_message"] and "fsck --repair" in doc["error_message"]
    assert object_ids(store) == before


@pytest.mark.parametrize("how", [["threads", "delete", "X"], ["update-ref", "-d", "X"]])
def test_delete_removes_an_unreadable_ref_and_archives_its_reflog(cli, broken, how):
    store, tips = broken
    ids = object_ids(store)
    reflog = (store / "logs" / "refs" / "threads" / "X").read_text()
    ok(cli(*how, "--json"))
    assert not (store / "refs" / "threads" / "X").exists()
    assert not (store / "logs" / "refs" / "threads" / "X").exists()
    archived = list((store / "logs" / "deleted").glob("X.*"))
    assert len(archived) == 1 and archived[0].read_text().startswith(reflog)
    assert "unreadable ref" in archived[0].read_text().splitlines()[-1]
    assert object_ids(store) == ids  # no object deleted
    assert [r["name"] for r in ok(cli("threads", "--json")).json()] == ["Y"]
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"
    # the archived reflog still says where the thread was: until gc prunes, it can come back
    ok(cli("update-ref", "X", tips["X"]))
    assert ok(cli("rev-parse", "X")).out.strip() == tips["X"]
    ok(cli("gc", "--prune=now"))  # no longer refused
    assert object_ids(store) == [] and ok(cli("log", "X", "--json")).json()[0]["id"] == tips["X"]  # all packed


def test_threads_delete_of_a_broken_ref_says_so(cli, broken):
    r = ok(cli("threads", "delete", "X"))
    assert r.out == "Deleted thread X (its ref file was unreadable; reflog kept)\n"
    doc = ok(cli("threads", "delete", "Y", "--json")).json()  # Y is HEAD (committed last), and the last one
    assert doc["broken"] is None and doc["head"] == "Y" and not doc["head_moved"]


def test_a_compare_and_swap_delete_of_a_broken_ref_is_still_refused(cli, broken):
    store, tips = broken
    assert_error(cli("update-ref", "-d", "X", tips["X"]), "object_corrupt")
    assert (store / "refs" / "threads" / "X").read_bytes() == b"garbage\n"


def test_fsck_repair_removes_every_broken_ref_and_no_object(cli, broken):
    store, tips = broken
    (store / "refs" / "threads" / "Z").symlink_to(store / "nowhere")  # a dangling symlink
    ids = object_ids(store)
    doc = ok(cli("fsck", "--repair", "--json")).json()
    assert doc["status"] == "ok"
    removed = [r for r in doc["repaired"] if r.startswith("removed unreadable ref")]
    assert len(removed) == 2
    assert any(f"convgit update-ref X {tips['X']}" in r for r in removed)  # how to get it back
    assert not (store / "refs" / "threads" / "X").exists()
    assert not os.path.lexists(store / "refs" / "threads" / "Z")
    assert object_ids(store) == ids
    assert [r["name"] for r in ok(cli("threads", "--json")).json()] == ["Y"]
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"


def test_library_lists_and_deletes_a_broken_ref(cli, broken):
    store, _ = broken
    repo = convgit.open_repo(store.parent)
    try:
        rows = {r["name"]: r for r in convgit.threads(repo)}
        assert rows["X"]["tip"] is None and rows["X"]["broken"]
        assert convgit.delete_thread(repo, "X")["broken"]
        assert repo.refs.read_all() == {"Y": rows["Y"]["tip"]}
    finally:
        repo.close()


def test_a_ref_rewritten_in_place_to_another_tip_is_listed_with_its_real_tip(cli, proj):
    tips = _two_threads(cli)
    store = proj / ".convgit"
    time.sleep(1.1)
    ok(cli("threads"))
    with open(store / "refs" / "threads" / "X", "r+") as f:  # in place: no directory change
        f.write(tips["Y"] + "\n")
    rows = {r["name"]: r for r in ok(cli("threads", "--json")).json()}
    assert rows["X"]["tip"] == tips["Y"] and rows["X"]["messages"] == 1
    assert json.loads(ok(cli("log", "X", "--json")).out)[0]["id"] == tips["Y"]
