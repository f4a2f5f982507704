"""Issue 9, defects 15 and 16, through the CLI.

15: bundles and llm logs.db files are opened read-only by a properly encoded ``file:`` URI, so
names with ``#``, ``?``, ``%`` or a space open that very file and create nothing else.

16: symlinks. No error message quotes a file's content (a ref, HEAD or format file linked to
a secret); merge reads nothing through a symlink that leads out of a source store; in a store,
nothing is written through a symlinked reflog, lock, index or directory (``unsafe_symlink``):
the symlink's target is neither created nor changed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers.cli import assert_error, cli, conv, dumps, env, ok, proj, store_state  # noqa: F401

LOGS_DB = Path("/work/shared/fixtures/llm/sample-logs.db")
NAMES = ["we#ird.db", "a?b.db", "50%.db", "with space.db", "team#2.db", "%23x.db"]
SECRET = b"TOPSECRET-c0ffee-do-not-print\n"


def _in(store_parent: Path) -> dict:
    """Run against that store from another cwd (``-C`` would move the cwd: relative names)."""
    return {"env_extra": {"CONVGIT_DIR": str(store_parent / ".convgit")}}


def _listing(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def _secret(tmp_path: Path) -> Path:
    p = tmp_path / "secret.txt"
    p.write_bytes(SECRET)
    return p


def _never_printed(r) -> None:
    for text in (r.out_bytes, r.err_bytes):
        assert b"TOPSECRET" not in text, r
        assert b"c0ffee" not in text, r


def _stamp(p: Path) -> tuple:
    st = os.stat(p)
    return p.read_bytes(), st.st_mtime_ns, st.st_size


# -- 15: SQLite URIs ------------------------------------------------------------------------------


@pytest.mark.skipif(not LOGS_DB.exists(), reason="shared fixture missing")
@pytest.mark.parametrize("name", NAMES)
def test_an_llm_logs_db_with_a_special_name_imports_and_creates_nothing_else(cli, proj, tmp_path, name):
    d = tmp_path / "files"
    d.mkdir()
    shutil.copyfile(LOGS_DB, d / name)
    # Relative names, as a user types them: `file:we#ird.db` would open (and create) `we`.
    doc = ok(cli("import", name, "--json", cwd=d, **_in(proj))).json()
    assert doc["counts"]["imported"] == 13 and doc["new_messages"] > 0
    # merge takes an llm logs.db through the importer: the file itself was read, not a stray `we`
    again = ok(cli("merge", name, "--json", cwd=d, **_in(proj))).json()
    assert again["merged_as"] == "llm-import" and again["counts"]["deduplicated"] == 13
    assert _listing(d) == {name}
    assert (d / name).read_bytes() == LOGS_DB.read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_a_bundle_with_a_special_name_merges_and_creates_nothing_else(cli, proj, tmp_path, name):
    ok(cli("commit", "-", "--thread", "x", input=dumps(conv("q", "a"))))
    d = tmp_path / "files"
    d.mkdir()
    ok(cli("bundle", "create", name, cwd=d, **_in(proj)))
    assert _listing(d) == {name}
    assert ok(cli("bundle", "verify", name, "--json", cwd=d, **_in(proj))).json()["status"] == "ok"
    other = tmp_path / "other"
    ok(cli("init", cwd=other))
    doc = ok(cli("merge", name, "--json", cwd=d, **_in(other))).json()
    assert [r["action"] for r in doc["refs"]] == ["created"] and doc["new_objects"] > 0
    assert _listing(d) == {name}


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_file_with_a_special_name_fails_cleanly_and_creates_nothing(cli, proj, tmp_path, name):
    d = tmp_path / "files"
    d.mkdir()
    # A missing file is `invalid_input` for import and bundle verify (docs/cli.md, exit 10) and
    # `not_a_store` for merge ("not a store, nor a bundle"), as for any other name.
    assert_error(cli("import", name, "--json", cwd=d, **_in(proj)), "invalid_input")
    assert_error(cli("merge", name, "--json", cwd=d, **_in(proj)), "not_a_store")
    assert_error(cli("bundle", "verify", name, "--json", cwd=d, **_in(proj)), "invalid_input")
    assert _listing(d) == set()


# -- 16: errors never echo a file's content -------------------------------------------------------


def test_a_ref_linked_to_a_secret_is_reported_without_its_content(cli, proj, tmp_path):
    secret = _secret(tmp_path)
    ok(cli("commit", "-", "--thread", "x", input=dumps(conv("q", "a"))))
    os.symlink(secret, proj / ".convgit/refs/threads/leak")
    for args in (("threads", "--json"), ("log", "leak", "--json"), ("fsck", "--json"), ("gc", "--json")):
        r = cli(*args)
        if args[0] == "threads":  # lists it as broken (issue 9, defect 6), never with its content
            assert [t for t in r.json() if t["name"] == "leak"][0]["broken"], r
        else:
            assert r.rc != 0, r
        _never_printed(r)
    assert_error(cli("log", "leak", "--json"), "object_corrupt")
    assert secret.read_bytes() == SECRET


@pytest.mark.parametrize("what", ["HEAD", "format"])
def test_head_or_format_linked_to_a_secret_is_reported_without_its_content(cli, proj, tmp_path, what):
    secret = _secret(tmp_path)
    f = proj / ".convgit" / what
    f.unlink()
    os.symlink(secret, f)
    for args in (("status", "--json"), ("log", "--json"), ("status",)):
        r = cli(*args)
        assert r.rc != 0, r
        _never_printed(r)
    assert secret.read_bytes() == SECRET


# -- 16: merge reads nothing through a symlink out of the source ----------------------------------


@pytest.fixture
def src(cli, tmp_path) -> Path:
    """A source store with threads x and y (y's reflog recording a turn)."""
    s = tmp_path / "src"
    ok(cli("init", cwd=s))
    ok(cli("-C", str(s), "commit", "-", "--thread", "x", input=dumps(conv("x1", "x2"))))
    ok(cli("-C", str(s), "commit", "-", "--thread", "y", input=dumps(conv("y1"))))
    return s / ".convgit"


def _merge_refused(cli, proj, src_dir):
    ok(cli("commit", "-", "--thread", "mine", input=dumps(conv("m"))))
    before = store_state(proj / ".convgit")
    r = cli("merge", str(src_dir), "--json")
    assert_error(r, "source_corrupt")
    _never_printed(r)
    r = cli("merge", str(src_dir))
    assert_error(r, "source_corrupt")
    _never_printed(r)
    assert store_state(proj / ".convgit") == before
    return r


def test_merge_refuses_a_source_ref_linked_to_a_local_secret(cli, proj, tmp_path, src):
    secret = _secret(tmp_path)
    (src / "refs/threads/x").unlink()
    os.symlink(secret, src / "refs/threads/x")
    r = _merge_refused(cli, proj, src)
    assert "refs/threads/x" in r.err and "symlink" in r.err


def test_merge_reports_a_bad_ref_file_without_its_content(cli, proj, tmp_path, src):
    (src / "refs/threads/x").write_bytes(SECRET)  # a plain file: still never quoted
    _merge_refused(cli, proj, src)


def test_merge_refuses_a_source_whose_refs_dir_leads_outside(cli, proj, tmp_path, src):
    outside = tmp_path / "outside-refs"
    shutil.copytree(src / "refs", outside)
    shutil.rmtree(src / "refs")
    os.symlink(outside, src / "refs")
    _merge_refused(cli, proj, src)


def test_merge_refuses_a_source_reflog_linked_outside(cli, proj, tmp_path, src):
    secret = _secret(tmp_path)
    log = src / "logs/refs/threads/y"
    log.unlink()
    os.symlink(secret, log)
    _merge_refused(cli, proj, src)


def test_merge_refuses_a_source_object_linked_outside(cli, proj, tmp_path, src):
    tip = ok(cli("-C", str(src.parent), "rev-parse", "x", "--json")).json()
    obj = src / "objects" / tip[:2] / tip[2:]
    outside = tmp_path / "outside-object"
    outside.write_bytes(obj.read_bytes())
    os.chmod(obj, 0o644)
    obj.unlink()
    os.symlink(outside, obj)
    _merge_refused(cli, proj, src)


def test_merge_takes_a_symlink_that_stays_inside_the_source(cli, proj, src):
    (src / "refs/threads/x").unlink()
    os.symlink("y", src / "refs/threads/x")  # relative, to a sibling ref: inside the source
    doc = ok(cli("merge", str(src), "--json")).json()
    assert {r["thread"] for r in doc["refs"]} == {"x", "y"}


# -- 16: nothing written through a symlink in the store -------------------------------------------


def _commit(cli, thread="main"):
    return cli("commit", "-", "--thread", thread, "--json", input=dumps(conv("q", "a")))


def test_no_append_through_a_symlinked_reflog(cli, proj, tmp_path):
    target = _secret(tmp_path)
    ok(_commit(cli, "other"))
    log = proj / ".convgit/logs/refs/threads/main"
    log.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, log)
    before = _stamp(target)
    r = _commit(cli)
    assert_error(r, "unsafe_symlink")
    _never_printed(r)
    assert _stamp(target) == before
    assert not (proj / ".convgit/refs/threads/main").exists()  # refused before the commit point


def test_no_lock_created_through_a_symlinked_ref_lock(cli, proj, tmp_path):
    target = tmp_path / "created-by-lock"
    os.symlink(target, proj / ".convgit/refs/threads/main.lock")
    assert_error(_commit(cli), "unsafe_symlink")
    assert not target.exists()


@pytest.mark.parametrize("name", ["gc.lock", "lock", "queue.lock", "index.lock"])
def test_a_symlinked_store_lock_is_refused_and_its_target_not_created(cli, proj, tmp_path, name):
    ok(_commit(cli))
    target = tmp_path / f"target-of-{name}"
    lock = proj / ".convgit" / name
    if lock.exists():
        lock.unlink()
    os.symlink(target, lock)
    for args in (("gc", "--json"), ("commit", "-", "--thread", "t2", "--json"), ("status", "--json")):
        assert_error(cli(*args, input=dumps(conv("z"))), "unsafe_symlink")
    assert not target.exists()


@pytest.mark.parametrize("name", ["index.sqlite", "index.sqlite-journal"])
def test_no_write_through_a_symlinked_index(cli, proj, tmp_path, name):
    ok(_commit(cli))
    target = tmp_path / "index-elsewhere"
    idx = proj / ".convgit" / name
    if idx.exists():
        shutil.copyfile(idx, target)
        idx.unlink()
    else:
        target.write_bytes(b"")
    os.symlink(target, idx)
    before = _stamp(target)
    for args in (("commit", "-", "--thread", "t2", "--json"), ("reindex", "--json"), ("log", "main", "--json")):
        assert_error(cli(*args, input=dumps(conv("z"))), "unsafe_symlink")
    assert _stamp(target) == before


def test_no_pack_written_into_a_symlinked_pack_dir(cli, proj, tmp_path):
    ok(_commit(cli))
    outside = tmp_path / "packs-elsewhere"
    outside.mkdir()
    pack = proj / ".convgit/objects/pack"
    if pack.exists():
        shutil.rmtree(pack)
    os.symlink(outside, pack)
    for args in (("gc", "--json"), ("merge", str(tmp_path / "nope"), "--json")):
        r = cli(*args)
        assert r.rc != 0, r
    assert_error(cli("gc", "--json"), "unsafe_symlink")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("sub", ["objects", "refs/threads", "logs", "objects/ab"])
def test_a_symlinked_store_directory_is_refused(cli, proj, tmp_path, sub):
    ok(_commit(cli))
    outside = tmp_path / "dir-elsewhere"
    d = proj / ".convgit" / sub
    if d.exists():
        shutil.copytree(d, outside, symlinks=True)
        shutil.rmtree(d)
    else:
        outside.mkdir()
    os.symlink(outside, d)
    before = sorted(str(p.relative_to(outside)) for p in outside.rglob("*"))
    assert_error(_commit(cli, "t2"), "unsafe_symlink")
    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == before


def test_no_ref_written_into_a_symlinked_nested_ref_directory(cli, proj, tmp_path):
    outside = tmp_path / "team-elsewhere"
    outside.mkdir()
    os.symlink(outside, proj / ".convgit/refs/threads/team")
    r = _commit(cli, "team/x")
    assert_error(r, "unsafe_symlink")
    assert list(outside.iterdir()) == []


def test_a_thread_name_that_is_a_symlinked_directory_is_refused_and_nothing_removed(cli, proj, tmp_path):
    outside = tmp_path / "dotfiles-only"  # what the "leftovers of deleted threads" clean-up removes
    outside.mkdir()
    (outside / ".keep").write_bytes(b"mine")
    (outside / "x.lock").write_bytes(b"mine too")
    ok(_commit(cli, "x"))
    os.symlink(outside, proj / ".convgit/refs/threads/team")
    r = _commit(cli, "team")
    assert r.rc != 0 and "Traceback" not in r.err, r  # read first: object_corrupt
    assert_error(cli("threads", "rename", "x", "team", "--json"), "unsafe_symlink")
    assert sorted(p.name for p in outside.iterdir()) == [".keep", "x.lock"]


def test_no_reflog_written_into_a_symlinked_nested_log_directory(cli, proj, tmp_path):
    outside = tmp_path / "logs-elsewhere"
    outside.mkdir()
    (proj / ".convgit/logs/refs/threads").mkdir(parents=True, exist_ok=True)
    os.symlink(outside, proj / ".convgit/logs/refs/threads/team")
    assert_error(_commit(cli, "team/x"), "unsafe_symlink")
    assert list(outside.iterdir()) == []
    assert not (proj / ".convgit/refs/threads/team/x").exists()


def test_a_store_reached_through_symlinked_parents_works(cli, proj, tmp_path):
    """Only symlinks inside the store are refused: a symlinked home, project or .convgit is fine."""
    link = tmp_path / "proj-link"
    os.symlink(proj, link)
    ok(cli("-C", str(link), "commit", "-", "--thread", "a", input=dumps(conv("q", "a"))))
    ok(cli("commit", "-", "--thread", "b", input=dumps(conv("q", "b")), cwd=link))
    elsewhere = tmp_path / "real-store-home"
    elsewhere.mkdir()
    os.rename(proj / ".convgit", elsewhere / ".convgit")
    os.symlink(elsewhere / ".convgit", proj / ".convgit")
    ok(cli("commit", "-", "--thread", "c", input=dumps(conv("q", "c"))))
    ok(cli("gc", "--prune=now", "--json"))
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"
    assert {t["name"] for t in ok(cli("threads", "--json")).json()} >= {"a", "b", "c"}
    ok(cli("threads", "--json", env_extra={"CONVGIT_DIR": str(link / ".convgit")}))
