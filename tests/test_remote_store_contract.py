"""The remote backend contract (convgit.remotes.base.RemoteStore), run against every backend:
a directory and S3 (a real SeaweedFS). As the object-store contract suite does for local
stores: a new backend joins by adding a factory to the ``backend`` fixture.

A remote's objects are packs, not single objects, so it is not an ObjectStore and does not
join tests/test_object_store_contract.py: its contract is create-only puts and a
compare-and-swap on one key, which is what this suite holds each backend to.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from convgit.remotes import CasLost, open_remote


@pytest.fixture(params=["dir", "s3"])
def backend(request, tmp_path, monkeypatch):
    if request.param == "dir":
        return open_remote(str(tmp_path / "remote"))
    w = request.getfixturevalue("weed")
    for k, v in w.env().items():
        monkeypatch.setenv(k, v)
    return open_remote(f"s3://convgit-test/contract-{uuid.uuid4().hex}")


def test_a_missing_key_reads_as_none(backend):
    assert backend.get("packs/nothing.idx") is None
    assert backend.size("packs/nothing.idx") is None


def test_create_only_writes_once_and_never_overwrites(backend):
    assert backend.put_new("packs/a.pack", b"first") is True
    assert backend.put_new("packs/a.pack", b"second") is False
    data, _ = backend.get("packs/a.pack")
    assert data == b"first" and backend.size("packs/a.pack") == 5


def test_of_racing_creators_exactly_one_wins(backend):
    results, barrier = [], threading.Barrier(6)

    def create(i):
        barrier.wait()
        results.append((i, backend.put_new("packs/race.pack", f"writer {i}".encode())))

    ts = [threading.Thread(target=create, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    winners = [i for i, won in results if won]
    assert len(winners) == 1
    assert backend.get("packs/race.pack")[0] == f"writer {winners[0]}".encode()


def test_compare_and_swap_moves_only_from_the_version_read(backend):
    tag = backend.put_if_match("refs.json", b"v1", None)
    with pytest.raises(CasLost):
        backend.put_if_match("refs.json", b"again", None)  # create-only: it exists
    data, read_tag = backend.get("refs.json")
    assert data == b"v1" and read_tag == tag
    tag2 = backend.put_if_match("refs.json", b"v2", read_tag)
    assert tag2 != tag
    with pytest.raises(CasLost):
        backend.put_if_match("refs.json", b"stale", tag)  # a writer that read v1 loses
    assert backend.get("refs.json")[0] == b"v2"
    with pytest.raises(CasLost):
        backend.put_if_match("other.json", b"x", tag2)  # a tag for a key that does not exist


def test_of_racing_swaps_from_one_version_exactly_one_wins(backend):
    backend.put_if_match("refs.json", b"base", None)
    _, tag = backend.get("refs.json")
    won, barrier = [], threading.Barrier(5)

    def swap(i):
        barrier.wait()
        try:
            backend.put_if_match("refs.json", f"w{i}".encode(), tag)
            won.append(i)
        except CasLost:
            pass

    ts = [threading.Thread(target=swap, args=(i,)) for i in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(won) == 1 and backend.get("refs.json")[0] == f"w{won[0]}".encode()


def test_delete_and_list(backend):
    backend.put_new("packs/x.pack", b"1")
    backend.put_new("packs/y.idx", b"2")
    listed = backend.list("packs")
    assert list(listed) == ["packs/x.pack", "packs/y.idx"]
    assert all(abs(t - time.time()) < 600 for t in listed.values())  # last-modified times, in epoch seconds
    backend.delete("packs/x.pack")
    backend.delete("packs/x.pack")  # absent: nothing to do
    assert list(backend.list("packs")) == ["packs/y.idx"] and backend.get("packs/x.pack") is None


def test_a_read_unless_the_tag_is_the_same_sends_no_bytes_for_an_unchanged_key(backend):
    tag = backend.put_if_match("refs.json", b'{"generation": 1}', None)
    assert backend.get_unless("refs.json", tag) == (None, tag)  # unchanged: no bytes
    assert backend.get_unless("refs.json", "not-its-tag") == (b'{"generation": 1}', tag)
    tag2 = backend.put_if_match("refs.json", b'{"generation": 2}', tag)
    assert backend.get_unless("refs.json", tag) == (b'{"generation": 2}', tag2)  # changed: the new bytes and tag
    assert backend.get_unless("refs.json", tag2) == (None, tag2)
    assert backend.get_unless("packs/nothing.idx", tag) is None
