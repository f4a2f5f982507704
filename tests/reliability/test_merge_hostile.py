"""T7/T8: hostile merge sources. Bundles and stores with wrong hashes, path-traversing ref
names, parent-link cycles (hand-made objects whose claimed ids do not match), objects over the
limits, refs and reflogs naming objects of the wrong type, and a source that is the store
itself: each is rejected with a clear error (source_corrupt, exit 34, or invalid_input, exit
10), nothing is stored (no object, no pack, no quarantine left), and the refs are untouched.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import msgspec
import pytest

import convgit
from convgit import codec, errors
from convgit.bundle import create_bundle
from convgit.merge import merge
from convgit.objects import Blob, Message, TextPart, Turn
from convgit.repository import Repository

from .helpers import NOW, cli_json, new_store, store_files, user

LIMIT = 64 * 1024  # the destination's limits, lowered so "huge" stays small in a test


def _msg(text: str, parent: str | None = None, blob: str | None = None) -> Message:
    part = TextPart(text="" if blob else text, blob=blob) if blob else TextPart(text=text)
    return Message(parent=parent, role="user", parts=(part,))


def _enc(obj) -> tuple[str, bytes]:
    return codec.encode_and_hash(obj)


@pytest.fixture
def dest(tmp_path):
    repo = new_store(tmp_path / "dest", extra_toml=f"[limits]\nmax_message_bytes = {LIMIT}\nmax_payload_bytes = {LIMIT}\n")
    convgit.commit(repo, {"messages": [user("mine 1"), user("mine 2")]}, thread="a", now_ms=NOW)
    convgit.commit(repo, {"messages": [user("shared root")]}, thread="s", now_ms=NOW)
    yield repo
    repo.close()


@pytest.fixture
def good_bundle(tmp_path):
    """A valid bundle (threads x, y) to tamper with."""
    src = new_store(tmp_path / "bsrc", fsync=False)
    convgit.commit(src, {"messages": [user("x1"), user("x2")]}, thread="x", now_ms=NOW)
    convgit.commit(src, {"messages": [user("y1")]}, thread="y", now_ms=NOW)
    path = tmp_path / "good.db"
    create_bundle(src, path)
    src.close()
    return path


def _db(path: Path):
    return sqlite3.connect(path)


def _put(db, oid: str, data) -> None:
    db.execute("INSERT OR REPLACE INTO objects VALUES (?, ?)", (oid, data))


def _ref(db, name: str, tip) -> None:
    db.execute("INSERT OR REPLACE INTO refs VALUES (?, ?)", (name, tip))


def _tip(db, name: str) -> str:
    return db.execute("SELECT tip FROM refs WHERE name=?", (name,)).fetchone()[0]


# -- hostile bundles: each function tampers with a copy of the good bundle ----------------------


def b_wrong_hash(db):
    tip = _tip(db, "x")
    data = db.execute("SELECT data FROM objects WHERE id=?", (tip,)).fetchone()[0]
    _put(db, tip, data.replace(b"x2", b"x3"))


def b_wrong_hash_deep(db):
    root = codec.decode(db.execute("SELECT data FROM objects WHERE id=?", (_tip(db, "x"),)).fetchone()[0]).parent
    data = db.execute("SELECT data FROM objects WHERE id=?", (root,)).fetchone()[0]
    _put(db, root, data + b"\x00")


def b_dotdot_ref(db):
    _ref(db, "../../escape", _tip(db, "x"))


def b_traversal_in_the_middle(db):
    _ref(db, "a/../../../etc/passwd", _tip(db, "x"))


def b_absolute_ref(db):
    _ref(db, "/abs", _tip(db, "x"))


def b_lock_ref(db):
    _ref(db, "x.lock", _tip(db, "x"))


def b_control_char_ref(db):
    _ref(db, "evil\nname", _tip(db, "x"))


def b_parent_cycle(db):
    """Two messages each claiming the other as parent, stored under ids they do not hash to."""
    ida, idb = "a1" * 32, "b2" * 32
    _put(db, ida, codec.encode(_msg("A", parent=idb)))
    _put(db, idb, codec.encode(_msg("B", parent=ida)))
    _ref(db, "cycle", ida)


def b_self_parent(db):
    ida = "c3" * 32
    _put(db, ida, codec.encode(_msg("self", parent=ida)))
    _ref(db, "self", ida)


def b_huge_object(db):
    blob_id, blob = _enc(Blob(data=os.urandom(LIMIT + 1)))
    mid, m = _enc(_msg("", blob=blob_id))
    _put(db, blob_id, blob)
    _put(db, mid, m)
    _ref(db, "huge", mid)


def b_ref_to_a_blob(db):
    bid, b = _enc(Blob(data=b"not a message"))
    _put(db, bid, b)
    _ref(db, "blobref", bid)


def b_turn_list_names_a_message(db):
    db.execute("INSERT INTO turns VALUES ('x', 99, ?)", (_tip(db, "x"),))


def b_parent_is_a_blob(db):
    bid, b = _enc(Blob(data=b"a blob where a parent message belongs"))
    mid, m = _enc(_msg("child", parent=bid))
    _put(db, bid, b)
    _put(db, mid, m)
    _ref(db, "badparent", mid)


def b_missing_object(db):
    root = codec.decode(db.execute("SELECT data FROM objects WHERE id=?", (_tip(db, "x"),)).fetchone()[0]).parent
    db.execute("DELETE FROM objects WHERE id=?", (root,))


def b_not_canonical(db):
    doc = {"type": "message", "role": "user", "parts": [{"text": "unsorted keys", "type": "text"}], "parent": None}
    data = msgspec.msgpack.encode(doc)  # insertion order, not sorted: decodes fine, not canonical
    oid = codec.hash_bytes(data)
    _put(db, oid, data)
    _ref(db, "noncanon", oid)


def b_tip_not_an_id(db):
    _ref(db, "x", "zzz")


def b_data_as_text(db):
    tip = _tip(db, "x")
    db.execute("UPDATE objects SET data = CAST(data AS TEXT) WHERE id=?", (tip,))


BUNDLES = {f.__name__[2:]: f for f in [
    b_wrong_hash, b_wrong_hash_deep, b_dotdot_ref, b_traversal_in_the_middle, b_absolute_ref, b_lock_ref,
    b_control_char_ref, b_parent_cycle, b_self_parent, b_huge_object, b_ref_to_a_blob,
    b_turn_list_names_a_message, b_parent_is_a_blob, b_missing_object, b_not_canonical, b_tip_not_an_id,
    b_data_as_text,
]}


def _assert_nothing_changed(repo, before_files, before_refs):
    assert store_files(repo.path) == before_files
    assert repo.refs.read_all() == before_refs
    assert not list((repo.path / "objects").glob("incoming-*"))


def _tampered(good_bundle, tmp_path, case, fn):
    bad = tmp_path / f"{case}.db"
    bad.write_bytes(good_bundle.read_bytes())
    db = _db(bad)
    fn(db)
    db.commit()
    db.close()
    return bad


@pytest.mark.parametrize("case", list(BUNDLES))
def test_a_hostile_bundle_is_rejected_and_nothing_is_stored(dest, good_bundle, tmp_path, case):
    bad = _tampered(good_bundle, tmp_path, case, BUNDLES[case])
    before_files, before_refs = store_files(dest.path), dest.refs.read_all()
    with pytest.raises(errors.SourceCorrupt) as e:
        merge(dest, bad)
    assert e.value.exit_code == 34 and e.value.message
    _assert_nothing_changed(dest, before_files, before_refs)


# Cases that make a bundle invalid in itself (a huge object is only over the destination's
# limits).
@pytest.mark.parametrize("case", [c for c in BUNDLES if c != "huge_object"])
def test_bundle_verify_flags_a_hostile_bundle(dest, good_bundle, tmp_path, case):
    bad = _tampered(good_bundle, tmp_path, case, BUNDLES[case])
    rc, out = cli_json(["bundle", "verify", str(bad), "--json"], store=dest.path)
    assert rc == 35 and json.loads(out)["problems"], out


def test_bundle_verify_names_a_parent_of_the_wrong_type(dest, good_bundle, tmp_path):
    bad = _tampered(good_bundle, tmp_path, "parent_is_a_blob", b_parent_is_a_blob)
    rc, out = cli_json(["bundle", "verify", str(bad), "--json"], store=dest.path)
    doc = json.loads(out)
    assert rc == 35 and doc["status"] == "error" and doc["error_code"] == "fsck_failed"
    assert any("as a message; it is a blob" in p for p in doc["problems"]), doc["problems"]


def test_bundle_verify_reports_text_rows_that_are_not_utf8(dest, good_bundle, tmp_path):
    """Object bytes stored as TEXT (invalid UTF-8), and ref/turn rows that are not UTF-8: each a
    problem in the report (exit 35), never a crash; in text mode too."""

    def tamper(db):
        b_data_as_text(db)
        db.execute("INSERT INTO refs VALUES (CAST(X'6e616d65ff' AS TEXT), ?)", (_tip(db, "y"),))
        db.execute("INSERT INTO refs VALUES ('z', CAST(X'c3' AS TEXT))")
        db.execute("INSERT INTO turns VALUES ('y', 98, CAST(X'ff00' AS TEXT))")

    bad = _tampered(good_bundle, tmp_path, "not_utf8", tamper)
    rc, out = cli_json(["bundle", "verify", str(bad), "--json"], store=dest.path)
    doc = json.loads(out)
    assert rc == 35 and doc["status"] == "error", out
    probs = doc["problems"]
    tip = sqlite3.connect(good_bundle).execute("SELECT tip FROM refs WHERE name='x'").fetchone()[0]
    assert any(tip in p and "stored as text" in p for p in probs), probs
    assert any(p.startswith("ref b'name\\xff'") and "not UTF-8" in p for p in probs), probs
    assert any("thread 'z'" in p and "not UTF-8" in p for p in probs), probs
    assert any("turn list" in p and "not UTF-8" in p for p in probs), probs
    rc, text = cli_json(["bundle", "verify", str(bad)], store=dest.path)
    assert rc == 35 and "stored as text" in text
    with pytest.raises(errors.SourceCorrupt):  # and merge takes nothing from it
        merge(dest, bad)


def b_text_blob_is_a_message(db):
    """A message whose text part points at a message (reached from nowhere else) where its
    blob belongs."""
    other, o = _enc(_msg("a message, not a blob"))
    mid, m = _enc(_msg("", blob=other))
    _put(db, other, o)
    _put(db, mid, m)
    _ref(db, "blobmsg", mid)


def b_text_blob_is_a_thread_tip(db):
    """The same, pointing at a message that a thread also reaches (merge walks it first)."""
    mid, m = _enc(_msg("", blob=_tip(db, "y")))
    _put(db, mid, m)
    _ref(db, "blobmsg", mid)


def b_turn_output_is_a_blob(db):
    bid, b = _enc(Blob(data=b"not a message"))
    tid, t = _enc(Turn(kind="append", thread="x", output=bid))
    _put(db, bid, b)
    _put(db, tid, t)
    db.execute("INSERT INTO turns VALUES ('x', 97, ?)", (tid,))


def b_unreadable_objects_table(db):
    db.execute("DROP TABLE objects")


@pytest.mark.parametrize("fn", [b_text_blob_is_a_message, b_turn_output_is_a_blob, b_turn_list_names_a_message,
                                b_parent_is_a_blob, b_ref_to_a_blob, b_data_as_text, b_unreadable_objects_table])
def test_bundle_verify_rejects_what_merge_rejects(dest, good_bundle, tmp_path, fn):
    """verify and merge apply the same type rules: a bundle merge refuses, verify flags."""
    bad = _tampered(good_bundle, tmp_path, fn.__name__, fn)
    before_files, before_refs = store_files(dest.path), dest.refs.read_all()
    with pytest.raises(errors.SourceCorrupt):
        merge(dest, bad)
    _assert_nothing_changed(dest, before_files, before_refs)
    rc, out = cli_json(["bundle", "verify", str(bad), "--json"], store=dest.path)
    assert rc == 35 and json.loads(out)["problems"], out


def test_the_good_bundle_merges(dest, good_bundle):
    """The control: the untampered bundle goes in (so each case above fails for its tampering)."""
    rep = merge(dest, good_bundle)
    assert {r["thread"] for r in rep.refs} == {"x", "y"} and rep.new_objects > 0


# -- hostile stores -------------------------------------------------------------------------


@pytest.fixture
def src_store(tmp_path):
    repo = new_store(tmp_path / "src", fsync=False)
    convgit.commit(repo, {"messages": [user("x1"), user("x2")]}, thread="x", now_ms=NOW)
    yield repo
    repo.close()


def _loose(repo, oid: str) -> Path:
    return repo.path / "objects" / oid[:2] / oid[2:]


def _plant(repo, oid: str, data: bytes) -> None:
    p = _loose(repo, oid)
    p.parent.mkdir(exist_ok=True)
    if p.exists():
        os.chmod(p, 0o644)
    p.write_bytes(data)


def s_wrong_hash(repo):
    tip = repo.refs.read("x")
    _plant(repo, tip, _loose(repo, tip).read_bytes().replace(b"x2", b"x3"))


def s_bad_ref_name(repo):
    (repo.path / "refs/threads/x..y").write_text(repo.refs.read("x") + "\n")


def s_dangling_symlink_ref(repo):
    os.symlink(repo.path / "nowhere", repo.path / "refs/threads/ghost")


def s_parent_cycle(repo):
    ida, idb = "d4" * 32, "e5" * 32
    _plant(repo, ida, codec.encode(_msg("A", parent=idb)))
    _plant(repo, idb, codec.encode(_msg("B", parent=ida)))
    (repo.path / "refs/threads/cycle").write_text(ida + "\n")


def s_huge_object(repo):
    bid, b = _enc(Blob(data=os.urandom(LIMIT + 1)))
    mid, m = _enc(_msg("", blob=bid))
    _plant(repo, bid, b)
    _plant(repo, mid, m)
    (repo.path / "refs/threads/huge").write_text(mid + "\n")


def s_ref_to_a_turn(repo):
    tid, t = _enc(Turn(kind="append", thread="x", output=repo.refs.read("x")))
    _plant(repo, tid, t)
    (repo.path / "refs/threads/turnref").write_text(tid + "\n")


def s_reflog_names_a_message_as_turn(repo):
    tip = repo.refs.read("x")
    with open(repo.path / "logs/refs/threads/x", "a") as f:
        f.write(f"{tip} {tip} {NOW} {tip}\tforged turn\n")


STORES = {f.__name__[2:]: f for f in [
    s_wrong_hash, s_bad_ref_name, s_dangling_symlink_ref, s_parent_cycle, s_huge_object, s_ref_to_a_turn,
    s_reflog_names_a_message_as_turn,
]}


@pytest.mark.parametrize("case", list(STORES))
def test_a_hostile_store_is_rejected_and_nothing_is_stored(dest, src_store, case):
    STORES[case](src_store)
    before_files, before_refs = store_files(dest.path), dest.refs.read_all()
    with pytest.raises(errors.SourceCorrupt) as e:
        merge(dest, src_store.path.parent)
    assert e.value.exit_code == 34 and e.value.message
    _assert_nothing_changed(dest, before_files, before_refs)


def test_the_clean_store_merges(dest, src_store):
    rep = merge(dest, src_store.path.parent)
    assert [r["action"] for r in rep.refs] == ["created"]


@pytest.mark.parametrize("how", ["store_dir", "project_dir", "symlink", "relative"])
def test_merging_a_store_into_itself_is_refused(dest, tmp_path, how, monkeypatch):
    target = {"store_dir": dest.path, "project_dir": dest.path.parent, "symlink": tmp_path / "link",
              "relative": Path("dest")}[how]
    if how == "symlink":
        os.symlink(dest.path.parent, target)
    if how == "relative":
        monkeypatch.chdir(tmp_path)
    before_files, before_refs = store_files(dest.path), dest.refs.read_all()
    with pytest.raises(errors.InvalidInput) as e:
        merge(dest, target)
    assert "itself" in e.value.message
    _assert_nothing_changed(dest, before_files, before_refs)


@pytest.mark.parametrize("case", ["wrong_hash", "dotdot_ref", "parent_cycle"])
def test_through_the_cli_a_hostile_bundle_exits_34_with_a_json_error(dest, good_bundle, tmp_path, case):
    bad = _tampered(good_bundle, tmp_path, case, BUNDLES[case])
    before = store_files(dest.path)
    rc, out = cli_json(["merge", str(bad), "--json"], store=dest.path)
    doc = json.loads(out)
    assert rc == 34 and doc["status"] == "error" and doc["error_code"] == "source_corrupt", out
    assert store_files(dest.path) == before


def test_mutation_a_merge_that_trusts_claimed_ids_stores_corrupt_objects(dest, good_bundle, tmp_path, monkeypatch):
    """Power check: with the re-hash disabled (hashing trusts the id the bundle claims for the
    tampered bytes), the wrong-hash bundle is taken and the store is corrupt afterwards, so the
    rejection test above would fail."""
    import convgit.pack as pack_mod
    from convgit.fsck import fsck

    bad = tmp_path / "bad.db"
    bad.write_bytes(good_bundle.read_bytes())
    db = _db(bad)
    b_wrong_hash(db)
    db.commit()
    tip = _tip(db, "x")
    tampered = db.execute("SELECT data FROM objects WHERE id=?", (tip,)).fetchone()[0]
    db.close()
    real_hash, real_blake3 = codec.hash_bytes, pack_mod.blake3

    class TrustingBlake3:
        def __init__(self, data=b""):
            self.data = bytearray(data)

        def update(self, d):
            self.data += d

        def digest(self):
            return real_blake3(bytes(self.data)).digest()

        def hexdigest(self):
            return tip if bytes(self.data) == tampered else real_blake3(bytes(self.data)).hexdigest()

    with monkeypatch.context() as m:
        m.setattr(codec, "hash_bytes", lambda data: tip if data == tampered else real_hash(data))
        m.setattr(pack_mod, "blake3", TrustingBlake3)
        merge(dest, bad)  # the mutation: accepted
    with Repository.open(dest.path) as r:
        assert fsck(r, check_index=False).errors, "the corrupt object should be in the store now"


def test_merge_checks_the_type_of_an_object_it_has_already_walked(dest, good_bundle, tmp_path):
    bad = _tampered(good_bundle, tmp_path, "blob_is_a_tip", b_text_blob_is_a_thread_tip)
    rc, out = cli_json(["bundle", "verify", str(bad), "--json"], store=dest.path)
    assert rc == 35 and any("as a blob; it is a message" in p for p in json.loads(out)["problems"]), out
    before_files, before_refs = store_files(dest.path), dest.refs.read_all()
    with pytest.raises(errors.SourceCorrupt) as e:
        merge(dest, bad)
    assert "as a blob; it is a message" in e.value.message
    _assert_nothing_changed(dest, before_files, before_refs)


# Without a reflog (whose turns are walked first and reach y's tip as a message), refs are
# walked last name first: "0-bad" is reached after thread y's tip was walked as a message,
# "zz-bad" before it (the tip is then first met as a blob).
@pytest.mark.parametrize("name", ["0-bad", "zz-bad"])
@pytest.mark.parametrize("kind", ["bundle", "store", "cli"])
def test_a_blob_reference_to_a_walked_message_is_refused_in_either_walk_order(dest, tmp_path, name, kind):
    src = new_store(tmp_path / "src2", fsync=False)
    convgit.commit(src, {"messages": [user("y1"), user("y2")]}, thread="y", now_ms=NOW)
    tip = src.refs.read("y")
    mid, m = _enc(_msg("", blob=tip))
    _plant(src, mid, m)
    (src.path / "refs/threads" / name).write_text(mid + "\n")
    (src.path / "logs/refs/threads/y").unlink()
    if kind == "bundle":
        where = tmp_path / "b.db"
        create_bundle(src, where)
    else:
        where = src.path.parent
    src.close()
    before_files, before_refs = store_files(dest.path), dest.refs.read_all()
    if kind == "cli":
        rc, out = cli_json(["merge", str(where), "--json"], store=dest.path)
        doc = json.loads(out)
        assert rc == 34 and doc["error_code"] == "source_corrupt", out
        assert "as a blob; it is a message" in doc["error_message"]
    else:
        with pytest.raises(errors.SourceCorrupt) as e:
            merge(dest, where)
        assert f"names {tip} as a blob; it is a message" in e.value.message
    _assert_nothing_changed(dest, before_files, before_refs)


def test_a_blob_reference_to_a_local_message_named_twice_is_refused(dest, tmp_path):
    """An id already stored here is typed once and every naming is checked: a thread of the
    source names the destination's tip as a message, another message names it as a blob."""
    src = new_store(tmp_path / "src3", fsync=False)
    convgit.commit(src, {"messages": [user("mine 1"), user("mine 2")]}, thread="a", now_ms=NOW)
    tip = src.refs.read("a")
    assert tip == dest.refs.read("a")
    mid, m = _enc(_msg("", blob=tip))
    _plant(src, mid, m)
    (src.path / "refs/threads/0-bad").write_text(mid + "\n")
    src.close()
    before_files, before_refs = store_files(dest.path), dest.refs.read_all()
    with pytest.raises(errors.SourceCorrupt) as e:
        merge(dest, src.path.parent)
    assert f"names {tip} as a blob; it is a message" in e.value.message
    _assert_nothing_changed(dest, before_files, before_refs)


def test_a_damaged_loose_copy_with_a_good_packed_one_is_taken_from_the_pack(dest, src_store):
    """The one re-hash of each object taken reads the bytes unverified; when they do not match
    (a damaged loose copy beside a good packed one, as an interrupted gc leaves), the source's
    verified read is the fallback: the good copy is taken, the damaged one never."""
    from convgit.fsck import fsck

    tip = src_store.refs.read("x")
    good = _loose(src_store, tip).read_bytes()
    convgit.api.gc(src_store, prune="now")
    assert not _loose(src_store, tip).exists()
    _plant(src_store, tip, good.replace(b"x2", b"x3"))
    rep = merge(dest, src_store.path.parent)
    assert [r["action"] for r in rep.refs] == ["created"]
    assert dest.objects.read_bytes(tip) == good
    assert not fsck(dest, check_index=False).errors


@pytest.mark.parametrize("enabled", [True, False])
def test_merge_leaves_the_cycle_collector_as_it_found_it(dest, src_store, enabled):
    import gc

    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        merge(dest, src_store.path.parent)
        assert gc.isenabled() is enabled
        with pytest.raises(errors.InvalidInput):
            merge(dest, dest.path.parent)  # (an error too)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
