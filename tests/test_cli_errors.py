"""Every user mistake: its error_code, its documented exit code (convgit/errors.py), no
traceback, the right shape (JSON on stdout under --json, one line on stderr otherwise), and
nothing written (objects, refs, reflogs, HEAD, and no index row)."""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from helpers.cli import (  # noqa: F401  (fixtures)
    ERRORS,
    assert_error,
    cli,
    cli_env,
    conv,
    dumps,
    env,
    native,
    ok,
    proj,
    run_in_process,
    store_state,
)
from convgit.errors import ALL_ERRORS

OID = "ab" * 32


def index_rows(store: Path) -> dict[str, int]:
    db = sqlite3.connect(f"file:{store / 'index.sqlite'}?mode=ro", uri=True)
    try:
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("messages", "threads", "turns")}
    finally:
        db.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """Built once per module (copying it is far cheaper than committing for every case)."""
    base = tmp_path_factory.mktemp("template")
    env = {k: None for k in os.environ if k.startswith("CONVGIT_")} | cli_env(base)
    d = base / "proj"
    d.mkdir()
    for args, stdin in ((["init"], None),
                        (["commit", "-", "--thread", "main"], dumps(conv("q1", "a1"))),
                        (["commit", "-", "--thread", "side"], dumps(conv("q1", "a1", "s1"))),
                        (["switch", "main"], None),
                        (["threads", "--json"], None)):  # the index is current
        ok(run_in_process(args, cwd=d, env=env, input=stdin))
    return d / ".convgit"


@pytest.fixture
def populated(cli, proj, template):
    """A store with thread main (q1 a1) as HEAD, thread side, and a current index."""
    store = proj / ".convgit"
    shutil.rmtree(store)
    shutil.copytree(template, store)
    return store


def msg(**kw):
    return {"messages": [{"role": "user", "content": "x", **kw}]}


def _setup_limit(store: Path) -> None:
    (store / "config.toml").write_text("[limits]\nmax_messages = 2\n")


def _setup_format_2(store: Path) -> None:
    (store / "format").write_text("convgit-store 4\n")


def _setup_corrupt(store: Path) -> None:
    tip = (store / "refs" / "threads" / "main").read_text().strip()
    f = store / "objects" / tip[:2] / tip[2:]
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x01
    f.chmod(0o644)
    f.write_bytes(bytes(data))


# (id, args, stdin, error_code, setup)
CASES = [
    ("malformed-json", ["commit", "-"], '{"messages": [', "invalid_input", None),
    ("not-utf8", ["commit", "-"], b'{"messages": [{"role": "user", "content": "\xff"}]}', "invalid_input", None),
    ("bom", ["commit", "-"], b"\xef\xbb\xbf" + dumps(native("x")).encode(), "invalid_input", None),
    ("not-a-conversation", ["commit", "-"], "42", "schema_validation_failed", None),
    ("no-messages", ["commit", "-"], '{"messages": []}', "schema_validation_failed", None),
    ("unknown-role", ["commit", "-"], dumps({"messages": [{"role": "wizard", "content": "x"}]}), "schema_validation_failed", None),
    ("missing-role", ["commit", "-"], dumps({"messages": [{"content": "x"}]}), "schema_validation_failed", None),
    ("empty-message", ["commit", "-"], dumps(msg(content="")), "schema_validation_failed", None),
    ("empty-parts", ["commit", "-"], dumps(msg(content=[])), "schema_validation_failed", None),
    ("empty-in-the-middle", ["commit", "-"], dumps({"messages": [*conv("q1", "a1"), {"role": "user", "content": ""}]}),
     "schema_validation_failed", None),
    ("bad-on-conflict", ["commit", "-", "--thread", "main", "--on-conflict", "merge"], dumps(native("n")),
     "schema_validation_failed", None),  # the library's one check (convgit.commit.check_on_conflict)
    ("claimed-id-mismatch", ["commit", "-"], dumps(msg(id=OID)), "hash_mismatch", None),
    ("claimed-parent-unknown", ["commit", "-"], dumps(msg(parent=OID)), "not_found", None),
    ("too-many-messages", ["commit", "-"], dumps(native("a", "b", "c")), "payload_too_large", _setup_limit),
    ("missing-file", ["commit", "no-such-file.json"], None, "invalid_input", None),
    ("file-is-a-dir", ["commit", "."], None, "invalid_input", None),
    ("thread-name-dotdot", ["commit", "-", "--thread", "a..b"], dumps(native("n")), "invalid_ref_name", None),
    ("thread-name-space", ["commit", "-", "--thread", "has space"], dumps(native("n")), "invalid_ref_name", None),
    ("thread-name-lock", ["commit", "-", "--thread", "x.lock"], dumps(native("n")), "invalid_ref_name", None),
    ("thread-name-HEAD", ["commit", "-", "--thread", "HEAD"], dumps(native("n")), "invalid_ref_name", None),
    ("fork-bad-name", ["fork", "main", "bad~name"], None, "invalid_ref_name", None),
    ("rename-bad-name", ["threads", "rename", "main", "a:b"], None, "invalid_ref_name", None),
    ("switch-bad-name", ["switch", "/x"], None, "invalid_ref_name", None),
    ("update-ref-bad-name", ["update-ref", "a//b", "main"], None, "invalid_ref_name", None),
    ("log-unknown", ["log", "nope"], None, "not_found", None),
    ("log-beyond-root", ["log", "main~5"], None, "not_found", None),
    ("show-unknown", ["show", "nope"], None, "not_found", None),
    ("rev-parse-unknown", ["rev-parse", "nope"], None, "not_found", None),
    ("rev-parse-unknown-id", ["rev-parse", OID], None, "not_found", None),
    ("rev-parse-short", ["rev-parse", "abc"], None, "not_found", None),
    ("cat-object-unknown", ["cat-object", "-t", "nope"], None, "not_found", None),
    ("fork-unknown", ["fork", "nope", "x"], None, "not_found", None),
    ("switch-unknown", ["switch", "nope"], None, "not_found", None),
    ("rename-unknown", ["threads", "rename", "nope", "x"], None, "not_found", None),
    ("delete-unknown", ["threads", "delete", "nope"], None, "not_found", None),
    ("log-bad-count", ["log", "--count=-1"], None, "invalid_input", None),
    ("cat-object-no-mode", ["cat-object", "main"], None, "invalid_input", None),
    ("hash-object-bad-type", ["hash-object", "-t", "tree", "-"], "x", "invalid_input", None),
    ("hash-object-orphan", ["hash-object", "-w", "-t", "message", "-"],
     dumps({"parent": OID, "role": "user", "parts": [{"type": "text", "text": "x"}]}), "object_missing", None),
    ("diverged-thread", ["commit", "-", "--thread", "main"], dumps(conv("q1", "other")), "duplicate_conflict", None),
    ("reordered-thread", ["commit", "-", "--thread", "side"],
     dumps([{"role": "user", "content": "q1"}, {"role": "user", "content": "s1"}, {"role": "assistant", "content": "a1"}]),
     "ambiguous_thread", None),
    ("update-ref-stale", ["update-ref", "main", "side", "side"], None, "ref_stale", None),
    ("update-ref-exists", ["update-ref", "--create", "main", "side"], None, "ref_exists", None),
    ("fork-exists", ["fork", "main", "side"], None, "ref_exists", None),
    ("rename-onto-existing", ["threads", "rename", "main", "side"], None, "ref_exists", None),
    ("corrupt-object", ["cat-object", "-p", "main"], None, "object_corrupt", _setup_corrupt),
    ("corrupt-object-log", ["log", "main"], None, "object_corrupt", _setup_corrupt),
    ("format-2-log", ["log"], None, "not_a_store", _setup_format_2),
    ("format-2-commit", ["commit", "-"], dumps(native("new")), "not_a_store", _setup_format_2),
    ("format-2-init", ["init"], None, "not_a_store", _setup_format_2),
    ("format-2-threads", ["threads"], None, "not_a_store", _setup_format_2),
    ("format-2-path", ["path"], None, "not_a_store", _setup_format_2),
]


# Known bugs in the core, not the CLI: the test turns green (and strict xfail red) once fixed.
XFAIL: dict[str, str] = {}
TEXT_ONLY = {"cat-object-no-mode"}  # with --json, cat-object has a mode


def _params():
    for c in CASES:
        for json_ in (False, True):
            if json_ and c[0] in TEXT_ONLY:
                continue
            marks = [pytest.mark.xfail(strict=True, reason=XFAIL[c[0]])] if c[0] in XFAIL else []
            yield pytest.param(*c[1:], json_, id=f"{c[0]}-{'json' if json_ else 'text'}", marks=marks)


@pytest.mark.parametrize("args,stdin,code,setup,json_", list(_params()))
def test_error(cli, populated, args, stdin, code, setup, json_):
    store = populated
    if setup:
        setup(store)
    rows = index_rows(store)
    before = store_state(store)
    r = cli(*args, *(["--json"] if json_ else []), input=stdin)
    assert_error(r, code)
    assert store_state(store) == before
    assert index_rows(store) == rows


def test_every_error_class_has_a_distinct_documented_exit_code():
    codes = [c.exit_code for c in ALL_ERRORS]
    assert len(set(codes)) == len(codes)
    assert all(0 < c < 126 for c in codes)  # clear of shell's 126/127/128+N and click's 2
    assert 2 not in codes
    assert len({c.code for c in ALL_ERRORS}) == len(ALL_ERRORS)


def test_every_exit_code_is_exercised():
    """Each error a user can cause from the command line is tested (left out: the root class,
    and storage_failed, which needs a failing disk)."""
    covered = {c[3] for c in CASES} | {"ambiguous_revision", "locked"}  # test_cli…_ambiguous_prefix, test_locked
    covered |= {"gc_refused", "source_corrupt", "fsck_failed"}  # tests/test_maintenance_cli.py
    covered |= {"unsafe_symlink"}  # tests/test_symlinks.py
    covered |= {"embedding_failed", "embedding_unavailable"}  # tests/test_semantic.py (test_cli_embed…)
    # tests/test_mcp.py: `convgit mcp` without the SDK (exit 50); unauthorized_update is what the
    # MCP tools answer (an error document, not an exit code)
    covered |= {"missing_dependency", "unauthorized_update"}
    covered |= {"non_fast_forward", "remote_corrupt", "remote_failed"}  # tests/test_remote.py
    covered |= {"index_unavailable"}  # tests/test_pg_index.py: an unreachable PostgreSQL index
    missing = set(ERRORS) - covered - {"error", "storage_failed"}
    assert not missing


def test_error_details_in_json(cli, populated):
    doc = assert_error(cli("commit", "-", "--json", input=dumps(msg(id=OID))), "hash_mismatch")
    assert doc["details"]["claimed"] == OID and len(doc["details"]["computed"]) == 64
    doc = assert_error(cli("commit", "-", "--thread", "main", "--json", input=dumps(conv("q1", "zz"))),
                       "duplicate_conflict")
    assert doc["details"]["thread"] == "main"


def test_usage_errors_are_click_errors(cli, populated):
    """Wrong usage (an unknown option, a missing argument) is click's exit 2, before any work."""
    for args in (["log", "--nope"], ["fork"], ["switch"], ["nosuchcommand"]):
        r = cli(*args)
        assert r.rc == 2 and "Traceback" not in r.err and r.out == ""
        assert "Usage: convgit" in r.err


def test_bad_dash_C(cli, tmp_path):
    assert_error(cli("-C", tmp_path / "missing", "path"), "invalid_input")
    doc = assert_error(cli("-C", tmp_path / "missing", "path", "--json"), "invalid_input")
    assert "cannot change to" in doc["error_message"]


def test_locked(cli, populated):
    """A writer waits for the store lock (held exclusively, as gc holds it), then gives up."""
    store = populated
    fd = os.open(store / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        before = store_state(store)
        for extra in ([], ["--json"]):
            r = cli("commit", "-", *extra, input=dumps(native("new")), env_extra={"CONVGIT_LOCK_TIMEOUT": "0.2"})
            assert_error(r, "locked")
        assert store_state(store) == before
    finally:
        os.close(fd)
    ok(cli("commit", "-", input=dumps(native("new"))))


def test_multiple_files_error_reports_what_was_committed(cli, populated, tmp_path):
    """commit A B: B is rejected after A was stored; the one JSON document says so."""
    a = tmp_path / "a.json"
    a.write_text(dumps(native("fresh", "start")))
    b = tmp_path / "b.json"
    b.write_text(dumps(native("fresh", "diverged")))
    doc = assert_error(cli("commit", "--thread", "t", a, b, "--json"), "duplicate_conflict")
    assert doc["error_message"].startswith(f"{b}: ")
    [done] = doc["details"]["committed"]
    assert done["action"] == "created" and done["thread"] == "t"
    assert ok(cli("rev-parse", "t")).out.strip() == done["tip"]


# -- once core bugs, now fixed -----------------------------------------------------------------


def test_rename_a_thread_onto_itself(cli, populated):
    r = cli("threads", "rename", "main", "main", "--json", env_extra={"CONVGIT_LOCK_TIMEOUT": "0.3"})
    assert r.rc == 0 or r.json()["error_code"] == "ref_exists", r


def test_convgit_dir_naming_a_file(cli, tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    assert_error(cli("path", "--json", env_extra={"CONVGIT_DIR": str(f)}), "not_a_store")
