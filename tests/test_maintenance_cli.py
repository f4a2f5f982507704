"""gc, fsck, merge and bundle through the CLI: results, and each failure's code and exit."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers.cli import assert_error, cli, cli_env, conv, dumps, env, ok, proj, store_state  # noqa: F401


def _files(store: Path) -> dict:
    return {str(p.relative_to(store)): p.stat().st_size for p in store.rglob("*")
            if p.is_file() and not p.name.startswith("index.sqlite") and not p.name.endswith(".lock")}


def _populate(cli, n=3):
    for i in range(n):
        ok(cli("commit", "-", "--thread", f"t{i}", input=dumps(conv("shared q", "shared a", f"q{i}"))))


def test_gc_packs_and_fsck_is_clean(cli, proj):
    _populate(cli)
    doc = json.loads(ok(cli("gc", "--json")).out)
    assert doc["status"] == "done" and doc["loose_after"] == 0 and doc["packs_after"] == 1
    assert doc["objects_after"] == doc["objects_before"] and doc["pruned"] == 0
    rep = json.loads(ok(cli("fsck", "--json")).out)
    assert rep["status"] == "ok" and rep["packed"] == doc["objects_after"] and rep["loose"] == 0
    # everything still reads from the pack
    assert len(json.loads(ok(cli("log", "t1", "--json")).out)) == 3


def test_gc_auto_is_silent_below_the_threshold(cli, proj):
    _populate(cli)
    r = ok(cli("gc", "--auto"))
    assert r.out == "" and r.err == ""
    assert any((proj / ".convgit" / "objects").glob("??/*"))  # nothing packed


def test_gc_dry_run_changes_nothing(cli, proj):
    _populate(cli)
    before = _files(proj / ".convgit")
    doc = json.loads(ok(cli("gc", "--prune=now", "--dry-run", "--json")).out)
    assert doc["status"] == "dry-run"
    assert _files(proj / ".convgit") == before


def test_delete_then_prune_now_frees_only_the_unshared_messages(cli, proj):
    _populate(cli)
    tip = json.loads(ok(cli("rev-parse", "t2", "--json")).out)
    ok(cli("threads", "delete", "t2"))
    doc = json.loads(ok(cli("gc", "--prune=now", "--json")).out)
    assert tip in doc["pruned_ids"] and doc["pruned"] == 2  # its last message and its turn
    assert_error(cli("cat-object", "-t", tip, "--json"), "not_found")
    assert json.loads(ok(cli("log", "t1", "--json")).out)[-1]["text"] == "shared q"
    assert json.loads(ok(cli("fsck", "--json")).out)["status"] == "ok"


def test_gc_refuses_with_a_garbage_ref_and_deletes_nothing(cli, proj):
    _populate(cli)
    store = proj / ".convgit"
    (store / "refs" / "threads" / "broken").write_text("not an id\n")
    before = _files(store)
    for json_ in (False, True):
        assert_error(cli("gc", "--prune=now", *(["--json"] if json_ else [])), "gc_refused")
    assert _files(store) == before


def test_fsck_reports_a_flipped_byte(cli, proj):
    _populate(cli)
    store = proj / ".convgit"
    tip = json.loads(ok(cli("rev-parse", "t0", "--json")).out)
    f = store / "objects" / tip[:2] / tip[2:]
    os.chmod(f, 0o644)
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    doc = assert_error(cli("fsck", "--json"), "fsck_failed")
    assert any(p["oid"] == tip and p["kind"] == "object_corrupt" for p in doc["problems"])
    r = cli("fsck")
    assert r.rc == 35 and tip in r.out and r.err.startswith("convgit: error: ")
    # the other threads still read
    assert len(json.loads(ok(cli("log", "t1", "--json")).out)) == 3


def test_merge_and_bundle_round_trip(cli, proj, tmp_path):
    _populate(cli)
    bundle = tmp_path / "b.db"
    ok(cli("bundle", "create", str(bundle)))
    assert json.loads(ok(cli("bundle", "verify", str(bundle), "--json")).out)["status"] == "ok"
    other = tmp_path / "other"
    other.mkdir()
    ok(cli("-C", str(other), "init"))
    first = json.loads(ok(cli("-C", str(other), "merge", str(bundle), "--json")).out)
    assert {r["action"] for r in first["refs"]} == {"created"} and first["new_objects"] > 0
    again = json.loads(ok(cli("-C", str(other), "merge", str(proj), "--json")).out)
    assert again["new_objects"] == 0 and {r["action"] for r in again["refs"]} == {"same"}
    assert json.loads(ok(cli("-C", str(other), "log", "t1", "--json")).out) == json.loads(ok(cli("log", "t1", "--json")).out)


def test_merge_rejects_a_corrupt_source_and_changes_nothing(cli, proj, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    ok(cli("-C", str(src), "init"))
    ok(cli("-C", str(src), "commit", "-", "--thread", "x", input=dumps(conv("a", "b"))))
    tip = json.loads(ok(cli("-C", str(src), "rev-parse", "x", "--json")).out)
    f = src / ".convgit" / "objects" / tip[:2] / tip[2:]
    os.chmod(f, 0o644)
    f.write_bytes(f.read_bytes() + b"garbage")
    _populate(cli, 1)
    before = store_state(proj / ".convgit")
    for json_ in (False, True):
        assert_error(cli("merge", str(src), *(["--json"] if json_ else [])), "source_corrupt")
    assert store_state(proj / ".convgit") == before
    assert not list((proj / ".convgit" / "objects").glob("incoming-*"))


def test_merge_into_itself_is_refused(cli, proj):
    _populate(cli, 1)
    assert_error(cli("merge", str(proj), "--json"), "invalid_input")
