"""The index beside other readers (issue 11): a WAL database, so a reader holding a
transaction never blocks a commit, and a rebuild is copied into the live file (same inode);
and Datasette, started for real on 127.0.0.1 with the configuration docs/index.md gives,
searches messages with ``_search`` as ``convgit search --in all`` does."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from helpers.cli import cli, cli_env, conv, dumps, env, ok, proj  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "index.md"
DATASETTE = Path(sys.executable).with_name("datasette")


def _commit(cli, thread, *texts):
    ok(cli("commit", "-", "--thread", thread, input=dumps({"messages": conv(*texts)})))


def test_index_is_wal_and_a_reader_never_blocks_a_commit(cli, proj):
    _commit(cli, "a", "first pelican", "an answer")
    index = proj / ".convgit" / "index.sqlite"
    reader = sqlite3.connect(index, isolation_level=None)
    try:
        assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] == 2  # a read transaction held
        r = ok(cli("commit", "-", "--thread", "b", input=dumps({"messages": conv("second pelican", "more")})))
        assert "index not updated" not in r.err
        assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] == 2  # its snapshot
        reader.execute("COMMIT")
        assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] == 4
        # a rebuild is copied into the live file: the same inode, and the open reader sees it
        ino = os.stat(index).st_ino
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM threads").fetchone()
        assert ok(cli("reindex", "--json")).json()["messages"] == 4
        reader.execute("COMMIT")
        assert os.stat(index).st_ino == ino
        built = reader.execute("SELECT value FROM meta WHERE key='built_at'").fetchone()[0]
        assert ok(cli("log", "--all", "--json")).json()[0]["text"]  # convgit still reads it
        ok(cli("reindex"))
        assert reader.execute("SELECT value FROM meta WHERE key='built_at'").fetchone()[0] >= built
        assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        reader.close()
    # a garbled index is still replaced (by name) and comes back in WAL
    index.write_bytes(b"not a database at all" * 100)
    assert len(ok(cli("log", "--all", "--json")).json()) == 4
    db = sqlite3.connect(index)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def _start_datasette(db: Path, meta: Path, tmp: Path):
    env = cli_env(tmp)
    p = subprocess.Popen([str(DATASETTE), str(db), "-m", str(meta), "-h", "127.0.0.1", "-p", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            if p.poll() is not None:
                break
            continue
        lines.append(line)
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            return p, int(m.group(1))
    p.kill()
    raise AssertionError("datasette did not start: " + "".join(lines))


def _get(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return json.loads(r.read())


def test_datasette_search_box_finds_what_convgit_search_finds(cli, proj, tmp_path):
    _commit(cli, "a", "Where do pelicans sleep?", "On the water, pelican style.")
    ok(cli("commit", "-", "--thread", "s", input=dumps({"messages": [
        {"role": "system", "content": "You like pelicans."}, {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "No birds here."}]})))
    _commit(cli, "c", "Tell me about cats", "Cats purr.")
    want = {h["id"] for h in ok(cli("search", "pelican*", "--fts", "--in", "all", "-n", "0", "--json")).json()}
    assert len(want) == 3
    meta = tmp_path / "datasette.json"
    block = re.search(r"## Datasette.*?```json\n(.*?)```", DOC.read_text("utf-8"), re.S)
    meta.write_text(block.group(1))
    proc, port = _start_datasette(proj / ".convgit" / "index.sqlite", meta, tmp_path)
    try:
        rows = _get(port, "/index/messages.json?_search=pelican*&_searchmode=raw&_shape=array")
        assert {r["id"] for r in rows} == want
        rows = _get(port, "/index/messages.json?_search=tell+cats&_shape=array")  # Datasette's quoted words
        assert [r["role"] for r in rows] == ["user"]
        assert len(_get(port, "/index/messages.json?_search=cats&_shape=array")) == 2
        text = _get(port, f"/index/message_text.json?id={rows[0]['id']}&_shape=array")
        assert text == [{"id": rows[0]["id"], "text": "Tell me about cats"}]
        # convgit keeps writing while Datasette has the file open
        _commit(cli, "d", "a late pelican", "ok")
        assert len(_get(port, "/index/messages.json?_search=pelican*&_searchmode=raw&_shape=array")) == 4
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()
