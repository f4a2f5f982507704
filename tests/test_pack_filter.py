"""The packs' Bloom filter (``ObjectStore._filter_for``, ``pack_filter.PackFilter``): a bulk writer's
"in no pack" answer. It is kept in step with the pack list as packs come (added) and go (a
merge of small packs, a gc): a removed pack's ids stay in it, so it may say "maybe" for an id
no pack holds, which the packs then answer. Whatever the packs do, ``contains`` answers what
a look in every pack answers, and the filter is not built again for a merge of small packs."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

import convgit
from convgit import codec, object_store
from convgit.objects import Blob
from convgit.pack_merge import merge_packs


def _blobs(seed: int, n: int) -> list[tuple[str, bytes]]:
    return [codec.encode_and_hash(Blob(data=f"blob {seed} {i}".encode())) for i in range(n)]


def _truth(objects, oid: str) -> bool:
    return any(p.contains(oid) for p in objects.packs())


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["write", "merge", "drop"]), min_size=1, max_size=12), st.integers(0, 10**6))
def test_contains_answers_as_every_pack_whatever_the_packs_do(tmp_path_factory, steps, seed):
    repo = convgit.init(tmp_path_factory.mktemp("pf"))
    objects = repo.objects
    old = object_store._FILTER_MIN_PACKS, object_store._FILTER_AFTER_PROBES
    object_store._FILTER_MIN_PACKS, object_store._FILTER_AFTER_PROBES = 1, 1  # the filter from the first probe
    try:
        rng = random.Random(seed)
        written: list[str] = []
        gone: list[str] = []
        k = 0
        for step in ["write", "write"] + steps:
            if step == "write":
                k += 1
                items = _blobs(seed * 100 + k, rng.randint(1, 40))
                objects.write_packed(items)
                written += [oid for oid, _ in items]
            elif step == "merge":
                merge_packs(objects, min_loose=None)
            elif step == "drop" and len(objects.packs()) > 1:  # a pack deleted (a gc that pruned it)
                p = rng.choice(objects.packs(reload=True))
                gone += list(p.ids())
                p.close()
                p.idx_path.unlink()
                p.pack_path.unlink()
            objects.packs(reload=True)
            for oid in rng.sample(written, min(len(written), 30)) + gone[-10:] + [_blobs(-1, 1)[0][0]]:
                assert objects.contains(oid) == _truth(objects, oid), (step, oid)
    finally:
        object_store._FILTER_MIN_PACKS, object_store._FILTER_AFTER_PROBES = old
        repo.close()


def test_a_merge_of_small_packs_does_not_build_the_filter_again(tmp_path, monkeypatch):
    monkeypatch.setattr(object_store, "_FILTER_MIN_PACKS", 1)
    monkeypatch.setattr(object_store, "_FILTER_AFTER_PROBES", 1)
    repo = convgit.init(tmp_path / "s")
    objects = repo.objects
    big = _blobs(0, 3000)
    objects.write_packed(big)
    for k in range(1, 6):
        objects.write_packed(_blobs(k, 20))
    assert objects.contains(big[0][0])
    built = objects._filter
    merge_packs(objects, min_loose=None)  # the five small packs into one
    objects.packs(reload=True)
    assert len(objects.packs()) == 2
    assert all(objects.contains(oid) for oid, _ in big[:50] + _blobs(3, 20))
    assert not objects.contains(_blobs(99, 1)[0][0])
    assert objects._filter is built  # kept, the merged pack added: not 3,100 ids read again
    repo.close()


def test_the_filter_is_the_same_with_numpy_and_without(tmp_path, monkeypatch):
    import pytest

    numpy = pytest.importorskip("numpy")
    from convgit import pack_filter
    from convgit.pack_filter import PackFilter

    repo = convgit.init(tmp_path / "s")
    for k in range(3):
        repo.objects.write_packed(_blobs(k, 500))
    packs = repo.objects.packs(reload=True)
    monkeypatch.setattr(pack_filter, "_NUMPY", [numpy])
    fast = PackFilter(packs)
    monkeypatch.setattr(pack_filter, "_NUMPY", [None])  # (as when numpy is not installed)
    slow = PackFilter(packs)
    assert fast._bits == slow._bits and fast._n == slow._n == 1500
    assert all(fast.may_contain(oid) for p in packs for oid in p.ids())
    repo.close()
