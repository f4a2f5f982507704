"""Issue 9, defect 15, through the CLI.

15: bundles and llm logs.db files are opened read-only by a properly encoded ``file:`` URI, so
names with ``#``, ``?``, ``%`` or a space open that very file and create nothing else.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli_helpers import assert_error, cli, conv, dumps, env, ok, proj  # noqa: F401

LOGS_DB = Path("/work/shared/fixtures/llm/sample-logs.db")
NAMES = ["we#ird.db", "a?b.db", "50%.db", "with space.db", "team#2.db", "%23x.db"]


def _in(store_parent: Path) -> dict:
    """Run against that store from another cwd (``-C`` would move the cwd: relative names)."""
    return {"env_extra": {"CONVGIT_DIR": str(store_parent / ".convgit")}}


def _listing(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


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
    err = assert_error(cli("merge", name, "--json", cwd=d, **_in(proj)), "invalid_input")
    assert "llm logs.db" in err["error_message"]  # the file itself was read, not a stray `we`
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
