"""Tests for the holes a mutation run found (issue 9, defect 17): each test here fails
against the mutant named in its docstring (each mutant survived the suite before).

- same-parent siblings deduplicated by text, ignoring their role (convgit/ingest/tree.py);
- an existing object file trusted whatever its size (fsio.write_object_file);
- fsck's comparison of the live index against a rebuild switched off (fsck._check_index);
- fsck's pack checksum check switched off (pack.Pack.verify).
"""

from __future__ import annotations

import json
import sqlite3
import struct
from pathlib import Path

import pytest

from helpers.cli import assert_error, cli, dumps, env, native, ok, proj, write_json  # noqa: F401


def _chatgpt_node(nid, parent, role, text, t, children=()):
    msg = None if role is None else {
        "id": nid, "author": {"role": role}, "create_time": t, "status": "finished_successfully",
        "content": {"content_type": "text", "parts": [text]}, "weight": 1.0, "recipient": "all", "metadata": {},
    }
    return {"id": nid, "parent": parent, "children": list(children), "message": msg}


def test_same_text_siblings_of_different_roles_stay_two_messages(cli, proj, tmp_path):
    """Mutant killed: siblings (same parent) collapsed by their text alone, role ignored.
    Identical siblings (same role and text) still collapse to one message."""
    nodes = [
        _chatgpt_node("root", None, None, None, None, ["u1"]),
        _chatgpt_node("u1", "root", "user", "Say it twice", 100.0, ["s1", "s2", "s3"]),
        _chatgpt_node("s1", "u1", "assistant", "Same words", 101.0),
        _chatgpt_node("s2", "u1", "user", "Same words", 102.0),
        _chatgpt_node("s3", "u1", "assistant", "Same words", 103.0),  # a regeneration identical to s1
    ]
    doc = [{"id": "conv-r", "conversation_id": "conv-r", "title": "Roles", "create_time": 99.0,
            "current_node": "s3", "mapping": {n["id"]: n for n in nodes}}]
    rep = ok(cli("import", write_json(tmp_path / "roles.json", doc), "--json")).json()
    assert rep["new_messages"] == 3, rep  # u1, one assistant "Same words", one user "Same words"

    def tip(key):
        return ok(cli("show", f"chatgpt:{key}", "--json")).json()["messages"][-1]

    s1, s2, s3 = tip("s1"), tip("s2"), tip("s3")
    assert s1["id"] == s3["id"] and s1["role"] == "assistant"
    assert s2["id"] != s1["id"] and s2["role"] == "user"
    assert s1["text"] == s2["text"] == "Same words"
    assert s1["parent"] == s2["parent"]
    threads = ok(cli("threads", "--json")).json()
    roles = {ok(cli("log", "-t", t["name"], "--json")).json()[0]["role"] for t in threads}
    assert len(threads) == 2 and roles == {"assistant", "user"}, (threads, roles)


def _loose(store: Path, oid: str) -> Path:
    return store / "objects" / oid[:2] / oid[2:]


def test_an_object_file_of_another_size_is_rewritten(cli, proj, tmp_path):
    """Mutant killed: write_object_file trusting an existing file of any size (the empty or
    torn file a power loss can leave must be rewritten, as docs/format.md §6.1 says)."""
    src = tmp_path / "payload.bin"
    src.write_bytes(b"blob bytes that must survive" * 10)
    store = proj / ".convgit"
    oid = ok(cli("hash-object", "-w", src)).out.strip()
    f = _loose(store, oid)
    good = f.read_bytes()
    for damaged in (b"", good[: len(good) // 2], good + b"\0"):  # empty, torn, too long
        f.chmod(0o644)
        f.write_bytes(damaged)
        assert ok(cli("hash-object", "-w", src)).out.strip() == oid
        assert f.read_bytes() == good, damaged
    assert ok(cli("fsck", "--json")).json()["errors"] == 0


@pytest.mark.parametrize("tamper", [
    "UPDATE messages SET role = 'system' WHERE role = 'assistant'",
    "UPDATE turns SET model = 'gpt-tampered' WHERE model = 'gpt-4o'",
    # The text log, show and search answer with (before: not compared, fsck said ok).
    "UPDATE parts SET text = 'tampered' WHERE text = '4'",
])
def test_fsck_finds_an_index_that_disagrees_with_the_objects(cli, proj, tamper):
    """Mutant killed: fsck's index-against-rebuild comparison switched off. The index is
    changed only in content (SQLite's own checks pass, every ref tip still matches)."""
    ok(cli("commit", "-", "-t", "main", input=dumps(native("what is 2+2", "4", model="gpt-4o"))))
    ok(cli("fsck", "--json"))
    db = sqlite3.connect(proj / ".convgit" / "index.sqlite")
    with db:
        n = db.execute(tamper).rowcount
    db.close()
    assert n == 1
    doc = assert_error(cli("fsck", "--json"), "fsck_failed")
    assert any(p["kind"] == "index" and p["severity"] == "error" for p in doc["problems"]), doc
    rep = ok(cli("fsck", "--repair", "--json")).json()
    assert "index rebuilt" in rep["repaired"]
    assert ok(cli("fsck", "--json")).json()["errors"] == 0
    assert ok(cli("log", "-t", "main", "--json")).json()[0]["text"] == "4"


def test_fsck_finds_a_pack_damaged_only_where_its_checksum_notices(cli, proj):
    """Mutant killed: fsck's pack checksum check switched off. Bytes inserted between the
    last chunk and the trailer change no object, no count and no recorded checksum: only
    the checksum over the pack's bytes can tell."""
    ok(cli("commit", "-", "-t", "main", input=dumps(native("q1", "a1", "q2", "a2"))))
    ok(cli("gc", "--prune=now", "--json"))
    packs = sorted((proj / ".convgit" / "objects" / "pack").glob("*.pack"))
    assert len(packs) == 1
    p = packs[0]
    data = p.read_bytes()
    trailer = 4 + 32  # u32 count + BLAKE3 checksum (format version 2)
    (count,) = struct.unpack(">I", data[-trailer:-32])
    assert count >= 5
    p.chmod(0o644)
    p.write_bytes(data[:-trailer] + b"\x00" * 16 + data[-trailer:])
    # Every object still reads and hashes right: reading commands see nothing wrong.
    assert len(ok(cli("log", "-t", "main", "--json")).json()) == 4
    doc = assert_error(cli("fsck", "--json"), "fsck_failed")
    msgs = [q["message"] for q in doc["problems"] if q["severity"] == "error"]
    assert any("checksum" in m for m in msgs), json.dumps(doc, indent=1)
