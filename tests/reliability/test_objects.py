"""T1.4: a corrupt object, loose or packed, is a specific error on read and in fsck (exit 35
through the CLI, naming the object), and every other thread stays readable.

(T1.1 same-object race, T1.2 freshen, T2.x CAS and names are in tests/test_refs.py.)
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

import convgit
from convgit import errors
from convgit.gc import gc
from convgit.pack import Pack
from convgit.repository import Repository

from .helpers import NOW, chain, cli_json, new_store, user


def _commit(repo, thread, texts, t):
    return convgit.commit(repo, {"messages": [user(x) for x in texts]}, thread=thread, now_ms=NOW + t)


@pytest.fixture
def loose_store(tmp_path):
    """Threads a (4 messages), b and c (2 each), every object loose."""
    repo = new_store(tmp_path / "s")
    _commit(repo, "a", ["a1", "a2", "a3", "a4"], 1)
    _commit(repo, "b", ["b1", "b2"], 2)
    _commit(repo, "c", ["c1", "c2"], 3)
    path = repo.path
    repo.close()
    return path


@pytest.fixture
def packed_store(tmp_path):
    """a in pack 1, c in pack 2, b loose."""
    repo = new_store(tmp_path / "s")
    _commit(repo, "a", ["a1", "a2", "a3", "a4"], 1)
    gc(repo)
    _commit(repo, "c", ["c1", "c2"], 3)
    gc(repo)
    _commit(repo, "b", ["b1", "b2"], 2)
    assert len(repo.objects.packs(reload=True)) == 2
    path = repo.path
    repo.close()
    return path


def _error_doc(out: str) -> dict:
    """stdout under --json: one valid document whose error is the document itself or, when
    ``log --json`` met the damage mid-walk after printing rows, the array's last element
    (docs/json.md §4)."""
    doc = json.loads(out)
    if isinstance(doc, list):
        doc = doc[-1]
    assert doc["status"] == "error", out
    return doc


def _file(store: Path, oid: str) -> Path:
    return store / "objects" / oid[:2] / oid[2:]


def _rewrite(p: Path, data: bytes) -> None:
    os.chmod(p, 0o644)
    p.write_bytes(data)


def _flip(data: bytes, i: int) -> bytes:
    return data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1:]


def _pack_of(store: Path, oid: str) -> Pack:
    with Repository.open(store) as r:
        for p in r.objects.packs(reload=True):
            if p.contains(oid):
                return Pack(p.idx_path)
    raise AssertionError(f"{oid} is not packed")


def _entry(pack: Pack, oid: str) -> tuple[int, int]:
    """(offset, length) of an object's entry (header + stored bytes) in its pack."""
    i = pack._find(bytes.fromhex(oid))
    (off,) = struct.unpack_from(">Q", pack._idx, pack._off_at + 8 * i)
    data = pack.pack_path.read_bytes()
    _, n = struct.unpack_from(">BI", data, off)
    return off, 5 + n


# Each damage: (store, victim, other) -> None. ``victim`` is a~1 (a message in the middle of
# thread a), ``other`` another object of thread a.

def loose_flipped(store, v, o):
    p = _file(store, v)
    _rewrite(p, _flip(p.read_bytes(), len(p.read_bytes()) // 2))


def loose_truncated_zero(store, v, o):
    _rewrite(_file(store, v), b"")


def loose_truncated_half(store, v, o):
    p = _file(store, v)
    _rewrite(p, p.read_bytes()[: len(p.read_bytes()) // 2])


def loose_trailing_garbage(store, v, o):
    p = _file(store, v)
    _rewrite(p, p.read_bytes() + b"\x00garbage garbage")


def loose_swapped(store, v, o):
    """misnamed: each file holds the other's (valid) bytes."""
    pv, po = _file(store, v), _file(store, o)
    dv, do = pv.read_bytes(), po.read_bytes()
    _rewrite(pv, do)
    _rewrite(po, dv)


def loose_missing(store, v, o):
    _file(store, v).unlink()


def packed_flipped(store, v, o):
    pack = _pack_of(store, v)
    off, n = _entry(pack, v)
    _rewrite(pack.pack_path, _flip(pack.pack_path.read_bytes(), off + n - 2))


def packed_truncated_zero(store, v, o):
    _rewrite(_pack_of(store, v).pack_path, b"")


def packed_truncated_half(store, v, o):
    """cut inside the victim's entry (everything after it goes too)."""
    pack = _pack_of(store, v)
    off, n = _entry(pack, v)
    _rewrite(pack.pack_path, pack.pack_path.read_bytes()[: off + n // 2])


def packed_trailing_garbage(store, v, o):
    p = _pack_of(store, v).pack_path
    _rewrite(p, p.read_bytes() + b"\x00garbage garbage")


def packed_swapped(store, v, o):
    """misnamed: pack 1 and pack 2 trade their .pack files (each idx names the other's bytes)."""
    p1 = _pack_of(store, v).pack_path
    others = [p for p in (store / "objects" / "pack").glob("pack-*.pack") if p != p1]
    p2 = others[0]
    d1, d2 = p1.read_bytes(), p2.read_bytes()
    _rewrite(p1, d2)
    _rewrite(p2, d1)


def packed_missing(store, v, o):
    pack = _pack_of(store, v)
    pack.pack_path.unlink()
    pack.idx_path.unlink()


def packed_missing_pack_file(store, v, o):
    """the .pack is gone, its .idx is still there."""
    _pack_of(store, v).pack_path.unlink()


def idx_trailing_garbage(store, v, o):
    p = _pack_of(store, v).idx_path
    _rewrite(p, p.read_bytes() + b"garbage")


def idx_flipped(store, v, o):
    """a bit flipped in the sorted id table: lookups miss or land on the wrong entry."""
    pack = _pack_of(store, v)
    i = pack._find(bytes.fromhex(v))
    at = pack._ids_at + 32 * i + 31
    _rewrite(pack.idx_path, _flip(pack.idx_path.read_bytes(), at))


def idx_truncated_zero(store, v, o):
    _rewrite(_pack_of(store, v).idx_path, b"")


# damage -> (layout, error class on reading the victim or None when the data stays readable)
CASES = {
    "loose_flipped": ("loose", errors.ObjectCorrupt),
    "loose_truncated_zero": ("loose", errors.ObjectCorrupt),
    "loose_truncated_half": ("loose", errors.ObjectCorrupt),
    "loose_trailing_garbage": ("loose", errors.ObjectCorrupt),
    "loose_swapped": ("loose", errors.ObjectCorrupt),
    "loose_missing": ("loose", errors.ObjectMissing),
    "packed_flipped": ("packed", errors.ObjectCorrupt),
    "packed_truncated_zero": ("packed", errors.ObjectCorrupt),
    "packed_truncated_half": ("packed", errors.ObjectCorrupt),
    "packed_trailing_garbage": ("packed", None),  # entries intact (each re-hashed); the pack checksum is not
    "packed_swapped": ("packed", errors.ObjectCorrupt),
    "packed_missing": ("packed", errors.ObjectMissing),
    "packed_missing_pack_file": ("packed", errors.ObjectCorrupt),
    "idx_trailing_garbage": ("packed", errors.ObjectCorrupt),
    "idx_flipped": ("packed", errors.ObjectCorrupt),
    "idx_truncated_zero": ("packed", errors.ObjectCorrupt),
}


@pytest.mark.parametrize("damage", list(CASES))
def test_a_corrupt_object_is_a_specific_error_and_other_threads_still_read(request, damage):
    layout, err = CASES[damage]
    store = request.getfixturevalue(f"{layout}_store")
    with Repository.open(store) as r:
        a = chain(r, r.refs.read("a"))
        victim, other = a[1], a[2]
        b_log_before = [e.to_json(r) for e in convgit.log(r, "b")]
        b_tip = r.refs.read("b")
    globals()[damage](store, victim, other)

    # 1. Reading: the victim is a specific error (never wrong data), or verified data.
    with Repository.open(store) as r:
        if err is None:
            assert r.objects.read(victim) is not None
        else:
            with pytest.raises(err) as e:
                r.objects.read(victim)
            assert e.value.code == err.code
            with pytest.raises(err):
                convgit.log(r, "a")
        # 2. Other threads: unaffected (thread b is in no damaged file).
        assert [e.to_json(r) for e in convgit.log(r, "b")] == b_log_before
        assert {"a", "b", "c"} <= {t["name"] for t in convgit.threads(r)}

    # 3. The CLI: the reading command exits with the error's code; fsck exits 35 and names it.
    if err is not None:
        rc, out = cli_json(["log", "a", "--json"], store=store)
        assert rc == err.exit_code, out
        assert _error_doc(out)["error_code"] == err.code
    rc, out = cli_json(["log", "b", "--json"], store=store)
    assert rc == 0 and [e["id"] for e in json.loads(out)][0] == b_tip
    rc, out = cli_json(["fsck", "--json"], store=store)
    doc = json.loads(out)
    assert rc == errors.FsckFailed.exit_code == 35, out
    assert doc["status"] == "error" and doc["error_code"] == "fsck_failed" and doc["errors"] >= 1
    problems = [p for p in doc["problems"] if p["severity"] == "error"]
    assert problems
    named = {p["oid"] for p in problems} | {w for p in problems for w in p["message"].split() if len(w) >= 60}
    if layout == "loose" or damage in ("packed_flipped", "packed_truncated_half"):
        assert victim in named or any(victim in p["message"] for p in problems), problems
    else:  # a whole pack file is damaged: fsck names the pack (and the objects it lost)
        assert any(p["kind"] in ("pack", "object_corrupt", "object_missing", "bad_ref") for p in problems)
        assert any(".pack" in p["message"] or ".idx" in p["message"] or p["oid"] for p in problems), problems
    # the human form says the same on stderr with the same exit code
    rc, _ = cli_json(["fsck"], store=store)
    assert rc == 35


def test_mutation_a_store_that_trusts_its_files_returns_wrong_data(loose_store):
    """Power check for the catalogue: with the hash check on read removed (a store that trusts
    its files), a byte flipped inside a message's text reads back as different text instead of
    an error, so the catalogue's read assertion would fail."""
    from convgit.object_store import ObjectStore

    store = loose_store
    with Repository.open(store) as r:
        victim = chain(r, r.refs.read("a"))[1]
    p = _file(store, victim)
    data = p.read_bytes()
    i = data.index(b"a2") + 1
    _rewrite(p, data[:i] + b"X" + data[i + 1:])  # still valid msgpack: only the text changed
    with Repository.open(store) as r:
        with pytest.raises(errors.ObjectCorrupt):
            r.objects.read(victim)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(ObjectStore, "read_bytes", lambda self, oid: self._read_loose(oid))
        with Repository.open(store) as r:
            msg = r.objects.read(victim)  # the mutation: no error ...
            assert msg.parts[0].text == "aX"  # ... wrong data instead
    finally:
        mp.undo()
