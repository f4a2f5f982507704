"""Packs, format version 2: objects compressed together in chunks (docs/format.md §9)."""

from __future__ import annotations

import importlib
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import convgit
from convgit import api, errors
from convgit.codec import hash_bytes
from convgit.pack import CHUNK_TARGET, Pack, write_pack

from helpers.cli import cli_env, run_process


def _pack(tmp_path, blobs: list[bytes], **kw) -> tuple[Pack, list[str]]:
    ids = [hash_bytes(b) for b in blobs]
    data = dict(zip(ids, blobs))
    idx = write_pack(tmp_path / "pack", ids, data.__getitem__, fsync=False, **kw)
    return Pack(idx), ids


def _chunks(p: Pack) -> set[int]:
    return {p._where(i)[0] for i in range(p.count)}


# (chunk-sized blobs are the point: hypothesis's "data too large" check, which fails a run
# when too many of its draws are that big, is off here)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.data_too_large])
@given(st.lists(st.one_of(st.binary(max_size=300), st.binary(min_size=CHUNK_TARGET - 10, max_size=CHUNK_TARGET + 10),
                          st.text(max_size=5000).map(str.encode)), max_size=40),
       st.booleans())
def test_every_object_reads_back_whatever_the_sizes(tmp_path_factory, blobs, compress):
    if not blobs:
        return
    p, ids = _pack(tmp_path_factory.mktemp("p"), blobs, compress=compress)
    assert p.version == 3 and p.count == len(set(ids))
    for oid, b in zip(ids, blobs):
        assert p.read(oid) == b and p.size(oid) == len(b)
    assert p.verify() == []
    assert sorted(p.ids_in_pack_order()) == sorted(set(ids))
    # in pack order, the objects come in the order they were given (duplicates once)
    assert p.ids_in_pack_order() == list(dict.fromkeys(ids))


def test_small_objects_share_chunks_and_big_ones_have_their_own(tmp_path):
    small = [f"message {i}: the model answered with a careful list of steps".encode() * 20 for i in range(200)]
    big = os.urandom(CHUNK_TARGET + 1)
    p, ids = _pack(tmp_path, small[:100] + [big] + small[100:])
    offsets = [p._where(i) for i in range(p.count)]
    assert len(_chunks(p)) < 10  # 200 objects of ~1.2 KB in 64 KiB chunks
    big_at = [w for w in offsets if w[2] == len(big)][0]
    assert big_at[1] == 0 and sum(1 for w in offsets if w[0] == big_at[0]) == 1
    # compressed together, they take far less than each compressed on its own
    import zstandard

    alone = sum(len(zstandard.ZstdCompressor(level=3).compress(b)) for b in small)
    assert p.pack_path.stat().st_size - len(big) < alone / 3


def test_a_damaged_chunk_loses_its_objects_only(tmp_path):
    blobs = [(f"{i} " * 3000).encode() for i in range(40)]  # ~6-12 KB each: several chunks
    p, ids = _pack(tmp_path, blobs)
    first = p._where(p._find(bytes.fromhex(ids[0])))[0]
    data = bytearray(p.pack_path.read_bytes())
    data[first + 20] ^= 0x40
    os.chmod(p.pack_path, 0o644)
    p.pack_path.write_bytes(bytes(data))
    p = Pack(p.idx_path)
    in_chunk = {oid for oid in ids if p._where(p._find(bytes.fromhex(oid)))[0] == first}
    assert 1 < len(in_chunk) < len(ids)
    bad = set()
    for oid, blob in zip(ids, blobs):
        try:
            assert p.read(oid) == blob  # never wrong data
        except errors.ObjectCorrupt as e:
            assert oid in e.message
            bad.add(oid)
    assert bad and bad <= in_chunk  # the damage stays inside its chunk
    problems = p.verify()
    assert all(any(oid in m for m in problems) for oid in bad)


def test_a_frame_claiming_a_huge_size_is_refused_before_allocating(tmp_path):
    """A hostile or damaged pack whose zstd frame header claims 4 GiB: ObjectCorrupt, no
    4 GiB allocation (the frame's content size is checked against what the chunk can hold)."""
    blob = b"x" * 1000
    p, [oid] = _pack(tmp_path, [blob])
    off = p._where(0)[0]
    data = bytearray(p.pack_path.read_bytes())
    enc, n = struct.unpack_from(">BI", data, off)
    assert enc == 1
    frame = bytes(data[off + 5: off + 5 + n])
    # rewrite the frame header: single-segment flag with an 8-byte content size of 4 GiB
    import zstandard

    params = zstandard.get_frame_parameters(frame)
    assert params.content_size == 1000
    fhd = frame[4]
    assert fhd & 0x20  # single segment, content size field present
    fcs_len = {0: 1, 1: 2, 2: 4, 3: 8}[fhd >> 6]
    new_fhd = (fhd & 0x3F) | 0xC0
    header = frame[:4] + bytes([new_fhd]) + frame[5:5]  # no window descriptor in single-segment
    rest = frame[5 + fcs_len:]
    hostile = header + struct.pack("<Q", 4 << 30) + rest
    assert zstandard.frame_content_size(hostile) == 4 << 30
    data[off: off + 5 + n] = struct.pack(">BI", 1, len(hostile)) + hostile
    os.chmod(p.pack_path, 0o644)
    p.pack_path.write_bytes(bytes(data))
    with pytest.raises(errors.ObjectCorrupt, match="claims"):
        Pack(p.idx_path).read(oid)


def test_gc_packs_a_thread_together_and_the_store_shrinks(tmp_path):
    repo = convgit.init(tmp_path / ".convgit")
    words = "the model answered with a careful list of steps and a short code block".split()
    text = 0
    for c in range(30):
        msgs = [{"role": "user" if i % 2 == 0 else "assistant",
                 "content": f"c{c} m{i} " + " ".join(words[(i + j) % len(words)] for j in range(150))} for i in range(10)]
        text += sum(len(m["content"]) for m in msgs)
        api.commit(repo, {"messages": msgs}, thread=f"t{c}")
    stats = api.gc(repo, prune="now")
    assert stats.packed == 30 * 11
    [p] = repo.objects.packs(reload=True)
    size = p.pack_path.stat().st_size + p.idx_path.stat().st_size
    assert size < 0.35 * text
    # a thread's messages lie side by side: a 10-message thread spans at most 2 chunks
    chunk_of = {oid: p._where(p._find(bytes.fromhex(oid)))[0] for oid in p.ids()}
    for c in range(30):
        ids = [e.id for e in api.log(repo, f"t{c}")]
        assert len({chunk_of[i] for i in ids}) <= 2
    assert api.fsck(repo).ok


def test_gc_rewrites_a_version_1_pack(tmp_path):
    """The checked-in format-1 store has a version-1 pack: gc repacks it into version 2 and
    every answer stays the same."""
    import shutil
    from pathlib import Path

    src = Path(__file__).parent / "data" / "store-v1" / ".convgit"
    shutil.copytree(src, tmp_path / ".convgit")
    env = cli_env(tmp_path)
    before = run_process(["log", "--all", "--json"], cwd=tmp_path, env=env)
    with convgit.Repository.open(tmp_path / ".convgit") as repo:
        assert {p.version for p in repo.objects.packs()} == {1}
        api.gc(repo, prune="never")
        assert {p.version for p in repo.objects.packs(reload=True)} == {3}
        assert not list(repo.objects.iter_loose())
    after = run_process(["log", "--all", "--json"], cwd=tmp_path, env=env)
    assert before.rc == 0 and after.rc == 0 and after.json() == before.json()
    assert run_process(["fsck"], cwd=tmp_path, env=env).rc == 0


def test_gc_sweeps_with_threads_and_leaves_no_loose_copy(tmp_path, monkeypatch):
    """Above a threshold the sweep unlinks from several threads (the file system's per-unlink
    latency dominates a 1,000,000-object gc): every loose copy still goes, nothing else."""
    gc_mod = importlib.import_module("convgit.gc")  # (convgit.gc is also a function)

    monkeypatch.setattr(gc_mod, "_UNLINK_PARALLEL_ABOVE", 5)
    repo = convgit.init(tmp_path / ".convgit")
    for c in range(12):
        api.commit(repo, {"messages": [{"role": "user", "content": f"c{c} m{i}"} for i in range(4)]}, thread=f"t{c}")
    loose = set(repo.objects.iter_loose())
    assert len(loose) == 12 * 5
    stats = api.gc(repo, prune="now")
    assert stats.packed == len(loose) and stats.loose_after == 0
    assert not list(repo.objects.iter_loose())
    assert all(repo.objects.contains(o) for o in loose)
    assert api.fsck(repo).ok


def test_the_count_is_in_the_trailer_and_checked(tmp_path):
    blobs = [f"object {i}".encode() * 10 for i in range(30)]
    p, ids = _pack(tmp_path, blobs)
    data = bytearray(p.pack_path.read_bytes())
    assert struct.unpack_from(">I", data, len(data) - 36)[0] == 30
    assert p.verify() == []
    # a writer that is aborted leaves nothing behind
    from convgit.pack import PackWriter

    w = PackWriter(tmp_path / "pack", fsync=False)
    w.add(ids[0], blobs[0])
    w.abort()
    assert not [f for f in (tmp_path / "pack").iterdir() if f.name.startswith("tmp_")]
    # an empty writer writes no pack
    w = PackWriter(tmp_path / "pack", fsync=False)
    assert w.finish() is None
    assert len(list((tmp_path / "pack").glob("*.pack"))) == 1


def _many_threads(repo, n=12, k=4):
    for c in range(n):
        api.commit(repo, {"messages": [{"role": "user", "content": f"c{c} m{i}"} for i in range(k)]}, thread=f"t{c}")


def test_a_large_gc_packs_in_pieces_and_deletes_while_it_marks(tmp_path, monkeypatch):
    """Past PACK_SPLIT objects gc finishes a pack and deletes the loose copies it holds while
    it goes on marking: several packs, no loose copy left, every object readable."""
    gc_mod = importlib.import_module("convgit.gc")  # (convgit.gc is also a function)

    monkeypatch.setattr(gc_mod, "PACK_SPLIT", 7)
    monkeypatch.setattr(gc_mod, "_UNLINK_PARALLEL_ABOVE", 3)
    repo = convgit.init(tmp_path / ".convgit")
    _many_threads(repo)
    loose = set(repo.objects.iter_loose())
    before = {t: [e.id for e in api.log(repo, t)] for t in (f"t{c}" for c in range(12))}
    stats = api.gc(repo, prune="now")
    assert stats.packed == len(loose) == 60 and stats.loose_after == 0
    assert len(repo.objects.packs(reload=True)) == -(-60 // 7)
    assert not list(repo.objects.iter_loose())
    assert {t: [e.id for e in api.log(repo, t)] for t in before} == before
    assert api.fsck(repo).ok


def test_a_gc_refused_mid_mark_loses_nothing_it_had_packed(tmp_path, monkeypatch):
    """A missing object met late in the mark: gc refuses (gc_refused), and every object that
    was readable before still is (loose copies already deleted are in durable packs)."""
    gc_mod = importlib.import_module("convgit.gc")  # (convgit.gc is also a function)
    from convgit import errors

    monkeypatch.setattr(gc_mod, "PACK_SPLIT", 5)
    repo = convgit.init(tmp_path / ".convgit")
    _many_threads(repo)
    first = [e.id for e in api.log(repo, "t0")]
    victim = first[-1]  # t0's first message: marked late (roots are popped from the end), after splits
    (repo.path / "objects" / victim[:2] / victim[2:]).unlink()
    readable = [o for o in repo.objects.iter_loose()]
    with pytest.raises(errors.GcRefused):
        api.gc(repo, prune="now")
    assert len(repo.objects.packs(reload=True)) >= 2  # packs were finished before the refusal
    assert len(list(repo.objects.iter_loose())) < len(readable)  # and their loose copies went
    assert all(repo.objects.read_bytes(o) for o in readable)


def test_the_pack_filter_never_hides_a_packed_object(tmp_path, monkeypatch):
    """The Bloom filter over many packs (bulk writers' misses) answers "absent" only for
    objects in no pack, as packs come (a new batch) and go (gc)."""
    from convgit import object_store
    from convgit.object_store import ObjectStore

    monkeypatch.setattr(object_store, "_FILTER_MIN_PACKS", 2)
    monkeypatch.setattr(object_store, "_FILTER_AFTER_PROBES", 0)
    store = ObjectStore(tmp_path / "objects", fsync=False)
    batches = [[f"batch {b} object {i}".encode() for i in range(300)] for b in range(6)]
    ids: list[str] = []
    for blobs in batches:
        store.write_packed([(hash_bytes(x), x) for x in blobs])
        ids += [hash_bytes(x) for x in blobs]
        assert all(store.contains(o) for o in ids)
        assert not any(store.contains(hash_bytes(b"absent %d" % i)) for i in range(200))
    assert store._filter is not None and len(store._filter.packs) == 6
    gone = store.packs()[0]
    lost = set(gone.ids())
    os.unlink(gone.idx_path)
    os.unlink(gone.pack_path)
    store.packs(reload=True)
    assert all(store.contains(o) == (o not in lost) for o in ids)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 300, 9000])
def test_an_id_lookup_answers_as_the_binary_search_did(tmp_path, n):
    """Pack._find bisects to a short run and scans it with bytes.find: for every stored id,
    ids next to them, and the bytes that straddle two neighbouring ids (a match there is not
    an id), it answers as a plain binary search of the sorted ids does."""
    from convgit.pack import _search

    p, ids = _pack(tmp_path, [str(i).encode() for i in range(n)], compress=False)

    def old(raw: bytes) -> int:
        b = raw[0]
        return _search(p._id, p._fan[b - 1] if b else 0, p._fan[b], raw)

    raws = sorted(p._id(i) for i in range(p.count))
    asks = list(raws)
    straddles = [a[k:] + b[:k] for a, b in zip(raws, raws[1:]) for k in range(1, 32) if a[k] == a[0] == b[0]]
    assert straddles or n < 9000  # (in one fan-out range, so a scan of it meets them)
    asks += straddles
    for a, b in zip(raws, raws[1:]):
        asks += [a[:31] + bytes([(a[31] + 1) % 256]), a[16:] + b[:16], a[1:] + b[:1]]
    asks += [b"\x00" * 32, b"\xff" * 32, raws[0][:16], raws[0] + b"\x00"]
    for raw in asks:
        assert p._find(raw) == old(raw), raw.hex()
    assert all(p.contains(i) and p.contains_raw(bytes.fromhex(i)) for i in ids)
    assert not p.contains("ab" * 32) or "ab" * 32 in ids
