"""``convgit index sync --from REMOTE``: an index-only store (no local objects) kept current
from a remote's refs document, objects read from its packs by byte range, answering log and
search exactly as a full clone of the same remote does; against a directory remote and a
real S3 server (SeaweedFS, the session's ``weed``), and into PostgreSQL (``pg_dsn``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import convgit
from convgit.remotes import open_remote
from helpers.cli import assert_error, cli, env, ok  # noqa: F401 (fixtures)


def _noise(seed: str, n: int = 12) -> str:
    """Words that do not compress away (so pack sizes mean something)."""
    return " ".join(hashlib.sha256(f"{seed}/{j}".encode()).hexdigest()[:10] for j in range(n))


def _conv(i: int, extra: int = 0) -> dict:
    msgs = [{"role": "user", "content": f"question {i}: tell me about zebra number {i} " + _noise(f"q{i}")}]
    for k in range(1 + extra):
        msgs.append({"role": "assistant", "content": f"answer {i}.{k}: zebras have stripes " + _noise(f"a{i}.{k}", 40)})
        msgs.append({"role": "user", "content": f"follow-up {i}.{k} about okapi"})
    return {"messages": msgs}


def _pushed_one_and_index_only(tmp_path: Path, cli) -> tuple[Path, Path]:
    """A store that pushed one thread to a directory remote, and a new store ``ix`` that has
    that remote as ``origin`` (not synced yet). Returns (the remote's path, ix)."""
    url = tmp_path / "remote"
    a = convgit.init(tmp_path / "a")
    convgit.commit(a, _conv(1), thread="t1")
    convgit.add_remote(a, "origin", str(url))
    convgit.push(a)
    ix = tmp_path / "ix"
    ok(cli("init", cwd=ix))
    ok(cli("remote", "add", "origin", str(url), cwd=ix))
    return url, ix


def _stored_objects(store: Path) -> list[Path]:
    return [p for p in (store / ".convgit" / "objects").rglob("*") if p.is_file()]


QUERIES = [("log", "--all", "--json"), ("search", "--json", "zebra"), ("search", "--json", "okapi", "-n", "3"),
           ("log", "t1", "--json"), ("show", "t2", "--json"), ("search", "--json", "stripes", "--in", "all")]


def _answers(cli, cwd: Path) -> list:
    return [ok(cli(*q, cwd=cwd)).json() for q in QUERIES]


def _sync(cli, cwd: Path, *args) -> dict:
    return ok(cli("index", "sync", "--from", "origin", "--json", *args, cwd=cwd)).json()


def _pushed_in_packs(tmp_path, remote_url, monkeypatch, threads: int):
    """A store of ``threads`` conversations pushed to ``remote_url`` in several packs: (store, packs)."""
    monkeypatch.setenv("CONVGIT_PUSH_PACK_BYTES", "6000")  # several packs
    a = convgit.init(tmp_path / "a")
    for i in range(1, threads + 1):
        convgit.commit(a, _conv(i), thread=f"t{i}")
    convgit.add_remote(a, "origin", remote_url)
    return a, convgit.push(a).packs


def test_index_sync_answers_as_a_full_clone_reading_by_range(tmp_path, remote_url, cli, monkeypatch):
    a, packs = _pushed_in_packs(tmp_path, remote_url, monkeypatch, 12)
    assert packs >= 2

    ix = tmp_path / "ix"
    ok(cli("init", cwd=ix))
    ok(cli("remote", "add", "origin", remote_url, cwd=ix))
    first = _sync(cli, ix)
    assert first["operation"] == "index-sync" and first["moved"] == 12 and first["packs"] >= 2
    assert 0 < first["bytes_read"] <= first["pack_bytes"] and first["idx_bytes"] > 0 and first["requests"] > 0
    assert _stored_objects(ix) == []  # nothing read by range is stored
    assert 'objects_from = "origin"' in (ix / ".convgit" / "config.toml").read_text()

    c, _ = convgit.clone(remote_url, tmp_path / "c")
    c.close()
    assert _answers(cli, ix) == _answers(cli, tmp_path / "c")

    again = _sync(cli, ix)  # idempotent: nothing moved, no pack byte read
    assert (again["moved"], again["bytes_read"], again["requests"], again["idx_bytes"]) == (0, 0, 0, 0)

    # The remote moves on: one thread fast-forwards, one is new. The sync reads only a part.
    convgit.commit(a, _conv(1, extra=2), thread="t1")
    convgit.commit(a, _conv(13), thread="t13")
    convgit.push(a)
    third = _sync(cli, ix)
    assert third["moved"] == 2 and third["pack_bytes"] > first["pack_bytes"]
    # Less than the packs (new and old) and less than a first sync: the new chunks, and the
    # chunk of t1's earlier turn (pull records a thread's turns again when it moves).
    assert 0 < third["bytes_read"] < min(third["pack_bytes"], first["bytes_read"]), (third, first)
    assert {t["thread"]: t["action"] for t in third["threads"]}["t13"] == "created"
    ok(cli("pull", cwd=tmp_path / "c"))
    assert _answers(cli, ix) == _answers(cli, tmp_path / "c")
    assert _stored_objects(ix) == []
    assert "answer 1.2" in ok(cli("log", "t1", cwd=ix)).out


def test_index_sync_into_postgres_answers_as_a_sqlite_clone(tmp_path, pg_dsn, cli):
    url = str(tmp_path / "remote")
    a = convgit.init(tmp_path / "a")
    for i in range(1, 4):
        convgit.commit(a, _conv(i), thread=f"t{i}")
    convgit.add_remote(a, "origin", url)
    convgit.push(a)
    ix = tmp_path / "ix"
    ok(cli("init", cwd=ix))
    cfg = ix / ".convgit" / "config.toml"
    cfg.write_text(f'[core]\nfsync = false\n[index]\nbackend = "postgres"\ndsn = "{pg_dsn}"\nnamespace = "team_sync"\n')
    ok(cli("remote", "add", "origin", url, cwd=ix))
    first = _sync(cli, ix)
    assert first["index"] == "postgres" and first["moved"] == 3 and first["bytes_read"] > 0
    c, _ = convgit.clone(url, tmp_path / "c")
    c.close()
    assert _answers(cli, ix) == _answers(cli, tmp_path / "c")
    assert _sync(cli, ix)["bytes_read"] == 0
    import psycopg

    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM team_sync.threads").fetchone()[0] == 3
    assert _stored_objects(ix) == []


def test_a_corrupt_pack_refuses_the_sync_and_moves_nothing(tmp_path, cli):
    url, ix = _pushed_one_and_index_only(tmp_path, cli)
    (pack,) = (url / "packs").glob("*.pack")
    data = bytearray(pack.read_bytes())
    data[40] ^= 0xFF  # inside the first chunk's stored bytes
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    r = cli("index", "sync", "--from", "origin", "--json", cwd=ix)
    assert_error(r, "remote_corrupt", json_=True)
    assert ok(cli("threads", "--json", cwd=ix)).json() == []  # no thread moved
    assert ok(cli("threads", "--remotes", "--json", cwd=ix)).json() == []  # nor a tracking ref
    assert _stored_objects(ix) == []


def test_index_sync_refuses_a_second_remote_and_an_unknown_one(tmp_path, cli):
    url, ix = _pushed_one_and_index_only(tmp_path, cli)
    ok(cli("remote", "add", "other", str(tmp_path / "r2"), cwd=ix))
    assert_error(cli("index", "sync", "--from", "nope", "--json", cwd=ix), "not_found", json_=True)
    _sync(cli, ix)
    before = (ix / ".convgit" / "config.toml").read_text()
    assert_error(cli("index", "sync", "--from", "other", "--json", cwd=ix), "invalid_input", json_=True)
    assert (ix / ".convgit" / "config.toml").read_text() == before
    assert json.loads(ok(cli("log", "--all", "--json", cwd=ix)).out)


def test_an_index_only_store_takes_no_new_objects(tmp_path, cli):
    url, ix = _pushed_one_and_index_only(tmp_path, cli)
    _sync(cli, ix)
    before = ok(cli("threads", "--json", cwd=ix)).json()
    new = json.dumps({"messages": [{"role": "user", "content": "a new conversation"}]})
    assert_error(cli("commit", "-t", "fresh", "--json", input=new, cwd=ix), "invalid_input", json_=True)
    assert_error(cli("fork", "t1", "t1-copy", "--json", cwd=ix), "invalid_input", json_=True)
    assert ok(cli("threads", "--json", cwd=ix)).json() == before
    assert _stored_objects(ix) == []



def test_fsck_of_an_index_only_store_checks_what_it_can_and_says_what_not(tmp_path, remote_url, cli, monkeypatch):
    a, packs = _pushed_in_packs(tmp_path, remote_url, monkeypatch, 6)
    ix = tmp_path / "ix"
    ok(cli("init", cwd=ix))
    ok(cli("remote", "add", "origin", remote_url, cwd=ix))
    _sync(cli, ix)

    doc = ok(cli("fsck", "--json", cwd=ix)).json()  # no object is stored here, and that is no problem
    assert doc["status"] == "ok" and doc["errors"] == 0 and doc["objects"] == 0 and doc["threads"] == 6, doc
    only = doc["index_only"]
    assert only["remote"] == "origin" and only["remote_packs"] == packs and only["on_remote"] >= 12  # 6 tips, 6+ turns
    assert any("objects" in n for n in only["not_checked"]) and any("rebuild" in n for n in only["not_checked"])
    out = ok(cli("fsck", cwd=ix)).out
    assert "not checked: the objects" in out and "index-only store" in out and ": ok" in out

    # The remote moved on: still sound here, and fsck says the sync is behind.
    convgit.commit(a, _conv(99), thread="t99")
    convgit.push(a)
    doc = ok(cli("fsck", "--json", cwd=ix)).json()
    assert doc["errors"] == 0 and any("not synced here yet" in p["message"] for p in doc["problems"])
    assert any("moved since the last sync" in p["message"] for p in doc["problems"])

    # A thread pointing at an object no pack of the remote holds is reported, as is the
    # remote losing the pack a thread's tip is in.
    (ix / ".convgit" / "refs" / "threads" / "ghost").write_text("ab" * 32 + "\n")
    doc = assert_error(cli("fsck", "--json", cwd=ix), "fsck_failed")
    assert [p["kind"] for p in doc["problems"] if p["severity"] == "error"] == ["bad_ref"]
    assert "ghost" in next(p["message"] for p in doc["problems"] if p["severity"] == "error")
    (ix / ".convgit" / "refs" / "threads" / "ghost").unlink()
    store = open_remote(remote_url)
    tip = convgit.show_refs(a)["t3"]
    lost = next(k for k in store.list("packs") if k.endswith(".pack") and _holds(tmp_path / "a", k, tip))
    store.delete(lost)
    doc = assert_error(cli("fsck", "--json", cwd=ix), "fsck_failed")
    errors = [p["message"] for p in doc["problems"] if p["severity"] == "error"]
    stem = lost.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    assert any(stem in m and "lacks" in m for m in errors), errors
    assert any("thread 't3'" in m and stem in m for m in errors), errors


def _holds(store: Path, key: str, oid: str) -> bool:
    """Does the pack ``key`` of the remote (its index cached in ``store``) hold ``oid``?"""
    from convgit.pack import Pack

    stem = key.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    p = Pack(store / ".convgit" / "remotes" / "origin" / "packs" / f"{stem}.idx")
    try:
        return p.contains(oid)
    finally:
        p.close()
