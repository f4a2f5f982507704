"""Remote format 2: the threads live in ref segments (docs/format.md §13.3), so a push of a few
threads sends a few hundred bytes of refs however many threads the remote has; a format-1
remote is still read and is written as format 2; a damaged or missing segment is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

import convgit
from convgit.errors import RemoteCorrupt
from convgit.remotes import CasLost
from convgit.remotes.refsdoc import RefsDoc, parse
from convgit.remotes.refsegments import MAX_SEGMENTS, Segments
from helpers.cli import env, ok, run  # noqa: F401 (fixtures)
from helpers.remote import rewrite_threads

H = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]


def _store_with(tmp_path, n: int, name: str = "a"):
    repo = convgit.init(tmp_path / name)
    convgit.commit_many(repo, [{"messages": [{"role": "user", "content": f"question {i}"}], "thread": f"t{i:04d}"}
                               for i in range(n)])
    return repo


def _root(url: Path) -> dict:
    return json.loads((url / "refs.json").read_text())


def test_a_push_of_one_thread_sends_refs_bytes_independent_of_the_remote_s_threads(tmp_path):
    url = tmp_path / "remote"
    a = _store_with(tmp_path, 600)
    convgit.add_remote(a, "origin", str(url))
    first = convgit.push(a)
    assert first.moved == 600 and _root(url)["format"] == "convgit-remote 2"
    base = _root(url)["segments"][0][1]
    assert base > 600 * 70  # one line per thread, in the base
    sizes = []
    for i in range(5):
        convgit.commit(a, {"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": "a"}]},
                       thread=f"t{i:04d}")
        rep = convgit.push(a)
        assert rep.moved == 1
        sizes.append(rep.refs_bytes)
        assert rep.to_json()["refs_bytes"] == rep.refs_bytes
    # a delta of one thread and the small document: not the 600 threads again
    assert max(sizes) < 3000 < base, sizes
    assert len(_root(url)["segments"]) == 6
    # another machine sees exactly the threads, laid from the base and the deltas
    b = convgit.clone(str(url), tmp_path / "b")[0]
    assert convgit.show_refs(b) == convgit.show_refs(a)
    # ... and its next fetch reads only the new delta, the base being cached
    convgit.commit(a, {"messages": [{"role": "user", "content": "question 9"}, {"role": "assistant", "content": "b"}]},
                   thread="t0009")
    convgit.push(a)
    got = convgit.fetch(b)
    assert got.moved == 1 and got.refs_bytes < 3000


def test_many_pushes_keep_the_segments_bounded_and_the_answers_the_same(tmp_path, monkeypatch):
    from convgit.remotes import refsegments

    monkeypatch.setattr(refsegments, "MAX_SEGMENTS", 4)  # (the bound by count, reached in a few pushes)
    url = tmp_path / "remote"
    a = _store_with(tmp_path, 40)
    convgit.add_remote(a, "origin", str(url))
    convgit.push(a)
    histories = {f"t{i:04d}": [{"role": "user", "content": f"question {i}"}] for i in range(40)}
    for i in range(4 * refsegments.MAX_SEGMENTS):
        h = histories[f"t{i % 40:04d}"]
        h.append({"role": "assistant", "content": f"answer {i}"})
        convgit.commit(a, {"messages": h}, thread=f"t{i % 40:04d}")
        convgit.push(a)
        assert 1 <= len(_root(url)["segments"]) <= refsegments.MAX_SEGMENTS
    root = _root(url)
    named = {d for d, _ in root["segments"]}
    on_disk = {p.stem for p in (url / "refs").glob("*.json")}
    assert named <= on_disk and set(root.get("retired_segments", {})) == on_disk - named  # every replaced one retired
    b = convgit.clone(str(url), tmp_path / "b")[0]
    assert convgit.show_refs(b) == convgit.show_refs(a)
    gone = convgit.gc_remote(a, grace_seconds=0)
    assert gone.segments_deleted == len(on_disk - named) > 0
    assert {p.stem for p in (url / "refs").glob("*.json")} == named and "retired_segments" not in _root(url)
    assert convgit.fsck_remote(a)["ok"]
    assert convgit.show_refs(convgit.clone(str(url), tmp_path / "c")[0]) == convgit.show_refs(a)
    # the cache keeps only the segments the last document named
    cached = {p.stem for p in (b.path / "remotes" / "origin" / "refs").glob("*.json")}
    assert cached <= on_disk


def test_a_format_1_remote_is_read_and_written_as_format_2(tmp_path):
    url = tmp_path / "remote"
    a = _store_with(tmp_path, 5)
    convgit.add_remote(a, "origin", str(url))
    convgit.push(a)
    rewrite_threads(url, lambda threads: None, version=1)  # the same threads, as a convgit before format 2 wrote them
    assert _root(url)["format"] == "convgit-remote 1"
    b = convgit.clone(str(url), tmp_path / "b")[0]
    assert convgit.show_refs(b) == convgit.show_refs(a)
    convgit.commit(b, {"messages": [{"role": "user", "content": "question 1"}, {"role": "assistant", "content": "x"}]},
                   thread="t0001")
    assert convgit.push(b).moved == 1
    assert _root(url)["format"] == "convgit-remote 2" and "threads" not in _root(url)
    assert convgit.pull(a).moved == 1 and convgit.show_refs(a) == convgit.show_refs(b)


def test_a_push_killed_after_its_segment_moves_nothing_and_the_next_push_lands(tmp_path, run):
    url = tmp_path / "remote"
    ok(run("init"))
    for i in range(3):
        ok(run("commit", "-t", f"t{i}", input=json.dumps({"messages": [{"role": "user", "content": f"q{i}"}]})))
    ok(run("remote", "add", "origin", str(url)))
    ok(run("push"))
    before = (url / "refs.json").read_bytes()
    ok(run("commit", "-t", "t1", input=json.dumps({"messages": [{"role": "user", "content": "q1"},
                                                                 {"role": "assistant", "content": "a1"}]})))
    killed = run("push", env_extra={"CONVGIT_CRASH_AT": "push_refs_after_segments"})
    assert killed.rc == 137
    assert (url / "refs.json").read_bytes() == before  # the segment it wrote is named by nothing
    assert len(list((url / "refs").glob("*.json"))) == len(_root(url)["segments"]) + 1
    again = ok(run("push", "--json")).json()
    assert [t["thread"] for t in again["threads"] if t["action"] != "up-to-date"] == ["t1"]
    b = convgit.clone(str(url), tmp_path / "b")[0]
    assert convgit.show_refs(b)["t1"] == ok(run("rev-parse", "t1")).out.strip() and len(convgit.show_refs(b)) == 3


def _damage(url: Path, how: str) -> None:
    digest = _root(url)["segments"][-1][0]
    seg = url / "refs" / f"{digest}.json"
    if how == "missing":
        seg.unlink()
    else:  # other bytes under its name (still valid JSON: only the hash tells)
        seg.write_bytes(seg.read_bytes().replace(b"\n}", b', "t9999": null\n}', 1))


@pytest.mark.parametrize("how", ["missing", "other bytes"])
def test_a_damaged_or_missing_segment_is_refused_and_nothing_is_taken(tmp_path, how):
    url = tmp_path / "remote"
    a = _store_with(tmp_path, 3)
    convgit.add_remote(a, "origin", str(url))
    convgit.push(a)
    _damage(url, how)
    b = convgit.init(tmp_path / "b")
    convgit.add_remote(b, "origin", str(url))
    with pytest.raises(RemoteCorrupt) as e:
        convgit.pull(b)
    assert ("lacks" if how == "missing" else "does not hash to its name") in e.value.message
    assert convgit.show_refs(b) == {} and convgit.tracking_refs(b) == [] and list(b.objects.iter_oids()) == []
    report = convgit.fsck_remote(a)
    assert not report["ok"] and "segment" in report["problems"][0]
    with pytest.raises(RemoteCorrupt):
        convgit.clone(str(url), tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_a_damaged_cached_segment_is_read_again_from_the_remote(tmp_path):
    url = tmp_path / "remote"
    a = _store_with(tmp_path, 3)
    convgit.add_remote(a, "origin", str(url))
    convgit.push(a)
    b = convgit.clone(str(url), tmp_path / "b")[0]
    for p in (b.path / "remotes" / "origin" / "refs").glob("*.json"):
        p.write_bytes(b'{"format": "convgit-remote 2 refs", "threads": {}}\n')  # not the bytes of its name
    convgit.commit(a, {"messages": [{"role": "user", "content": "question 2"}, {"role": "assistant", "content": "y"}]},
                   thread="t0002")
    convgit.push(a)
    assert convgit.pull(b).moved == 1 and convgit.show_refs(b) == convgit.show_refs(a)


# -- the laying of segments, as a property ----------------------------------------------------


class _Memory:
    """A remote in memory: the store contract's create-only and compare-and-swap."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    def get(self, key):
        return (self.keys[key], blake3(self.keys[key]).hexdigest()) if key in self.keys else None

    def put_new(self, key, data):
        if key in self.keys:
            assert self.keys[key] == data  # a key named by its hash never holds other bytes
            return False
        self.keys[key] = data
        return True

    def put_if_match(self, key, data, tag):
        if (self.get(key) or (None, None))[1] != tag:
            raise CasLost()
        self.keys[key] = data
        return blake3(data).hexdigest()


OID = st.integers(0, 50).map(lambda i: blake3(str(i).encode()).hexdigest())
NAME = st.sampled_from([f"t{i}" for i in range(30)] + ["a/b", "a/c", "x-y"])
STEP = st.dictionaries(NAME, st.one_of(st.none(), OID), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=60))
def test_the_threads_laid_from_segments_are_always_the_threads_written(tmp_path_factory, steps):
    folder = tmp_path_factory.mktemp("segs")
    store = _Memory()
    writer = Segments(store, folder / "w", "mem")
    reader = Segments(store, folder / "r", "mem")  # (its own cache: reads what the remote holds)
    old, want = RefsDoc(), {}
    for step in steps:
        for n, t in step.items():
            want.pop(n, None) if t is None else want.__setitem__(n, t)
        new = RefsDoc(old.generation + 1, dict(want), [], None, [], {}, segments=list(old.segments),
                      retired_segments=dict(old.retired_segments))
        data = writer.lay(old, new, 0).dump()
        new.tag = store.put_if_match("refs.json", data, old.tag)
        got = reader.resolve(parse(store.keys["refs.json"], "mem"))
        assert got.threads == want
        assert 1 <= len(got.segments) <= MAX_SEGMENTS
        assert not {d for d, _ in got.segments} & set(got.retired_segments)
        old = got
        old.tag = new.tag
