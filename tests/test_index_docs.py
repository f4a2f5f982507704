"""docs/index.md: every SQL example runs against a real index and returns rows."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from convgit.index import SCHEMA_VERSION
from convgit.repository import Repository

from test_index import build_rich_store

DOC = Path(__file__).resolve().parent.parent / "docs" / "index.md"
QUERIES = re.findall(r"```sql\n(.*?)```", DOC.read_text("utf-8"), re.S)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    import convgit

    repo = convgit.init(tmp_path_factory.mktemp("docs") / "s")
    build_rich_store(repo)
    path = repo.path / "index.sqlite"
    repo.close()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)  # as a browser would open it
    yield db
    db.close()


def test_the_doc_has_examples_and_the_right_schema_version():
    assert len(QUERIES) >= 8
    assert f"Schema version {SCHEMA_VERSION} " in DOC.read_text("utf-8")


@pytest.mark.parametrize("sql", QUERIES, ids=[f"q{i}" for i in range(len(QUERIES))])
def test_documented_query_runs(index, sql):
    rows = index.execute(sql).fetchall()
    assert rows, sql


def test_documented_tables_exist(index):
    names = {r[0] for r in index.execute("SELECT name FROM sqlite_master")}
    for t in re.findall(r"^\| `(\w+)` \|", DOC.read_text("utf-8"), re.M):
        assert t in names, t
    assert {"message_text", "message_tree"} <= names


def test_documented_key_matches_the_api(index):
    import convgit

    sql = [q for q in QUERIES if "AS key" in q][0]
    rows = dict(index.execute(sql.replace("LIMIT 10", "")).fetchall())
    path = Path(index.execute("PRAGMA database_list").fetchone()[2]).parent
    with Repository.open(path) as repo:
        for e in convgit.log(repo, all_threads=True):
            assert rows[e.id] == e.key
