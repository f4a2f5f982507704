"""The object store's contract, run against every way objects are stored (issue 10): loose
files, packs, a mix of both, each with fsync on and off. As dulwich's ``ObjectStoreTests``: a
new store implementation (a remote, later) joins by adding a factory to ``KINDS``.

Each kind is a function ``put(store, items)`` that stores ``(oid, bytes)`` pairs its way; the
tests then hold the store to the same answers whatever the kind.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from convgit import codec
from convgit.errors import ObjectCorrupt, ObjectMissing
from convgit.object_store import ObjectStore
from convgit.objects import Blob, Message, TextPart


def _loose(store: ObjectStore, items):
    store.write_many(items[:10])  # (staged loose files below the pack threshold)
    for i in range(10, len(items), 10):
        store.write_many(items[i:i + 10])


def _packed(store: ObjectStore, items):
    store.write_packed(items)


def _mixed(store: ObjectStore, items):
    half = len(items) // 2
    store.write_packed(items[:half])
    for i in range(half, len(items), 10):
        store.write_many(items[i:i + 10])


KINDS = {"loose": _loose, "packed": _packed, "mixed": _mixed}


def chain(n: int = 30, seed: str = "x") -> list[tuple[str, bytes]]:
    """``n`` messages, each the parent of the next, with a large blob every tenth."""
    out, parent = [], None
    for i in range(n):
        if i % 10 == 9:
            oid, data = codec.encode_and_hash(Blob(data=(f"{seed} blob {i} " * 2000).encode()))
            out.append((oid, data))
        m = Message(parent=parent, role="user" if i % 2 == 0 else "assistant", parts=(TextPart(text=f"{seed} {i}"),))
        oid, data = codec.encode_and_hash(m)
        out.append((oid, data))
        parent = oid
    return out


@pytest.fixture(params=[(k, f) for k in KINDS for f in (False, True)], ids=lambda p: f"{p[0]}-fsync{int(p[1])}")
def kind(request, tmp_path):
    name, fsync = request.param
    store = ObjectStore(tmp_path / "objects", fsync=fsync)
    (tmp_path / "objects").mkdir(exist_ok=True)
    items = chain()
    KINDS[name](store, items)
    yield name, store, items
    store.close()


def test_every_object_reads_back_as_written(kind):
    _, store, items = kind
    for oid, data in items:
        assert store.contains(oid)
        assert store.read_bytes(oid) == data
        assert store.read(oid) == codec.decode(data)
        assert store.stored_size(oid) is not None


def test_an_absent_object_is_missing(kind):
    _, store, _ = kind
    absent = codec.encode_and_hash(Message(parent=None, role="user", parts=(TextPart(text="never stored"),)))[0]
    assert not store.contains(absent) and store.stored_size(absent) is None
    with pytest.raises(ObjectMissing):
        store.read_bytes(absent)
    with pytest.raises(ObjectMissing):
        store.read_bytes("not-an-id")


def test_the_prober_answers_as_contains(kind):
    _, store, items = kind
    contains = store.prober()
    absent = codec.encode_and_hash(Message(parent=None, role="user", parts=(TextPart(text="never stored"),)))[0]
    assert all(contains(oid) for oid, _ in items) and not contains(absent)
    assert [contains(oid) for oid, _ in items] == [store.contains(oid) for oid, _ in items]


def test_bytes_under_the_wrong_id_are_refused_and_nothing_is_written(kind):
    _, store, items = kind
    before = sorted(store.iter_oids())
    good_oid, _ = items[0]
    other = codec.encode(Message(parent=None, role="user", parts=(TextPart(text="forged"),)))
    with pytest.raises(ObjectCorrupt):
        store.write_many([(good_oid[:-1] + ("0" if good_oid[-1] != "0" else "1"), other)])
    assert sorted(store.iter_oids()) == before


def test_writing_again_stores_nothing_new(kind):
    _, store, items = kind
    assert store.write_many(items[:5]) == 0
    assert store.write_packed(items[5:25]) == set()
    assert sorted(store.iter_oids()) == sorted({oid for oid, _ in items})


def test_iteration_and_prefixes_name_exactly_what_is_stored(kind):
    _, store, items = kind
    ids = {oid for oid, _ in items}
    assert sorted(store.iter_oids()) == sorted(ids)
    for oid in list(ids)[:5]:
        assert store.find_prefix(oid[:12]) == [oid]
        assert store.resolve_prefix(oid[:12]) == oid


def test_loose_means_a_file(kind):
    name, store, items = kind
    loose = {oid for oid in store.iter_loose()}
    for oid, _ in items:
        assert store.is_loose(oid) == (oid in loose)
    if name == "packed":
        assert loose == set()
    if name == "loose":
        assert loose == {oid for oid, _ in items}


def _damage(store: ObjectStore, oid: str) -> None:
    """Flip one byte of ``oid``'s stored form (its loose file, else its pack)."""
    f = Path(store._file(oid))
    if f.exists():
        os.chmod(f, 0o644)
        raw = bytearray(f.read_bytes())
        raw[len(raw) // 2] ^= 0x55
        f.write_bytes(bytes(raw))
        return
    for p in store.packs():
        if p.contains(oid):
            path = Path(p.pack_path)
            os.chmod(path, 0o644)
            raw = bytearray(path.read_bytes())
            raw[len(raw) // 2] ^= 0x55
            path.write_bytes(bytes(raw))
            store.close()
            return
    raise AssertionError(f"{oid} is not stored")


def test_damaged_bytes_are_never_returned(kind):
    name, store, items = kind
    oid, data = items[len(items) // 2]
    _damage(store, oid)
    refused = 0
    for o, d in items:  # every read is the right bytes or an error: never wrong bytes
        try:
            got = store.read_bytes(o)
        except (ObjectCorrupt, ObjectMissing):
            refused += 1
            continue
        assert got == d
    assert refused >= 1  # the damage was noticed
    if store.is_loose(oid):
        with pytest.raises(ObjectCorrupt):
            store.read_bytes(oid)
