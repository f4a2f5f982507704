"""Approximate vector search (issue 13): the IVF lists beside a namespace's matrix are used
from ``ann_threshold`` vectors on, agree with exact search on clustered data, follow appends
and gc compaction (new matrix generations), and a missing or corrupt file means exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import convgit
from convgit import errors
from convgit.embedders import Namespace
from convgit.index import ivf as IVF
from convgit.index.vectors import VectorStore

from store_helpers import NOW, conv, fast_repo, set_config

DIM = 32


def clustered(n: int, seed: int = 3, topics: int = 60):
    """Unit vectors around ``topics`` centres (embeddings of real text cluster; random ones do not)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((topics, DIM), dtype=np.float32)
    x = centres[rng.integers(0, topics, n)] + rng.standard_normal((n, DIM), dtype=np.float32) * 0.35
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def cid(i: int) -> str:
    return f"{i:064x}:0"


def store_with(tmp_path: Path, x, **kw) -> VectorStore:
    st = VectorStore(tmp_path, Namespace("test", "clustered", DIM, "0" * 64), ann_threshold=1000, **kw)
    st.add([cid(i) for i in range(len(x))], x)
    return st


def top_cid(st: VectorStore, q) -> str:
    r = st.nearest(q, 1)[0][0]
    return st.chunk_ids([r])[r]


def exact(st: VectorStore, q, k=10):
    mode, st.search = st.search, "exact"
    try:
        return st.nearest(q, k)
    finally:
        st.search = mode


def queries(x, n=25, seed=9):
    rng = np.random.default_rng(seed)
    q = x[rng.choice(len(x), n, replace=False)] + rng.standard_normal((n, DIM), dtype=np.float32) * 0.1
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def recall(st: VectorStore, qs, k=10) -> float:
    got = 0
    for q in qs:
        a = {r for r, _ in st.nearest(q, k)}
        assert st.last_method == "approximate"
        got += len(a & {r for r, _ in exact(st, q, k)})
    return got / (k * len(qs))


def test_approximate_search_agrees_with_exact_on_clustered_vectors(tmp_path):
    x = clustered(12_000)
    st = store_with(tmp_path, x)
    assert st.nearest(x[0], 10)[0][0] == 0 and st.last_method == "exact"  # no lists yet: exact
    assert st.ensure_ann() == "built" and st.ensure_ann() == "fresh"
    # the matrix was laid out list by list as generation 1: every vector kept, once
    assert not (st.dir / "matrix-0.f32").exists() and st.count() == len(x)
    lists = IVF.load(IVF.path_for(st.dir, 1), DIM, len(x))
    assert lists.rows == lists.offsets[-1] == len(x) and lists.nlist == round(len(x) ** 0.5)
    ids = st.chunk_ids(list(range(len(x))))
    assert sorted(ids.values()) == sorted(cid(i) for i in range(len(x)))
    got = st.vectors_of([cid(i) for i in (0, 5, 11_999)])
    assert np.array_equal(got, x[[0, 5, 11_999]])
    qs = queries(x)
    assert recall(st, qs) >= 0.9
    for q in qs[:5]:  # scores are exact (float32 rerank), the top hit is the exact one, answers repeat
        a = st.nearest(q, 10)
        assert a[0] == exact(st, q, 1)[0] and a == st.nearest(q, 10)
        assert all(s1 >= s2 for (_, s1), (_, s2) in zip(a, a[1:]))
    assert (st.dir / "ivf-1.bin").stat().st_size < lists.nlist * (DIM * 4 + 8) + 4096  # centroids and offsets only
    big = st.nearest(qs[0], 5000)  # more than the probed lists hold: exact
    assert st.last_method == "exact" and big == exact(st, qs[0], 5000)
    st.search = "exact"
    st.nearest(qs[0], 10)
    assert st.last_method == "exact"


def test_ties_are_broken_by_row(tmp_path):
    x = clustered(3000)
    x[100:110] = x[7]  # ten rows identical to row 7
    st = store_with(tmp_path, x)
    st.ensure_ann()
    got = st.nearest(x[7], 11)
    assert st.last_method == "approximate"
    assert got == exact(st, x[7], 11) and [r for r, _ in got] == sorted(r for r, _ in got)
    ids = st.chunk_ids([r for r, _ in got])
    assert sorted(ids.values()) == sorted(cid(i) for i in [7, *range(100, 110)])


def test_appended_vectors_are_found_then_listed(tmp_path):
    x = clustered(8000)
    st = store_with(tmp_path, x[:6000])
    st.ensure_ann()
    st.add([cid(i) for i in range(6000, 6100)], x[6000:6100])  # the tail: scanned, not listed yet
    assert top_cid(st, x[6050]) == cid(6050) and st.last_method == "approximate"
    assert IVF.load(IVF.path_for(st.dir, 1), DIM, 6100).rows == 6000
    assert st.ensure_ann() == "fresh"  # under 5 % of the rows: left as a tail
    st.add([cid(i) for i in range(6100, 8000)], x[6100:8000])
    assert st.ensure_ann() == "extended"
    lists = IVF.load(IVF.path_for(st.dir, 2), DIM, 8000)
    assert lists.rows == 8000 and lists.trained == 6000
    assert top_cid(st, x[7777]) == cid(7777) and top_cid(st, x[3]) == cid(3)
    assert recall(st, queries(x)) >= 0.9
    st.add([cid(i) for i in range(8000, 20_000)], clustered(12_000, seed=5))
    assert st.ensure_ann() == "built"  # more than twice the rows it was trained on: trained again
    assert IVF.load(IVF.path_for(st.dir, 3), DIM, 20_000).trained == 20_000
    assert st.count() == 20_000 and top_cid(st, x[42]) == cid(42)


def test_compaction_renumbers_the_lists_for_the_new_generation(tmp_path):
    x = clustered(9000)
    st = store_with(tmp_path, x)
    st.ensure_ann()
    dropped = st.compact(lambda mid: int(mid, 16) % 3 != 0)
    assert dropped == 3000
    assert not (st.dir / "ivf-1.bin").exists() and (st.dir / "ivf-2.bin").exists()
    lists = IVF.load(IVF.path_for(st.dir, 2), DIM, 6000)
    assert lists.rows == lists.offsets[-1] == 6000
    kept = [i for i in range(9000) if i % 3]
    assert sorted(st.chunk_ids(list(range(6000))).values()) == sorted(cid(i) for i in kept)
    for old in (1, 4000, 8999):
        assert top_cid(st, x[old]) == cid(old) and st.last_method == "approximate"
    assert recall(st, queries(x[kept])) >= 0.9


@pytest.mark.parametrize("damage", ["missing", "flipped", "truncated", "garbage", "other_dimension"])
def test_missing_or_corrupt_lists_mean_exact_search(tmp_path, damage):
    x = clustered(4000)
    st = store_with(tmp_path, x)
    st.ensure_ann()
    path = IVF.path_for(st.dir, 1)
    data = bytearray(path.read_bytes())
    if damage == "missing":
        path.unlink()
    elif damage == "flipped":
        data[-20] ^= 0xFF  # an offset: the checksum no longer holds
        path.write_bytes(bytes(data))
    elif damage == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "garbage":
        path.write_bytes(b"not lists at all")
    else:
        st2 = VectorStore(tmp_path / "o", Namespace("test", "other", DIM * 2, "1" * 64), ann_threshold=10)
        st2.add([cid(i) for i in range(100)], np.eye(DIM * 2, dtype=np.float32)[np.arange(100) % (DIM * 2)])
        st2.ensure_ann()
        path.write_bytes(IVF.path_for(st2.dir, 1).read_bytes())
    q = queries(x, 1)[0]
    assert st.nearest(q, 10) == exact(st, q) and st.last_method == "exact"
    assert st.ensure_ann() == "built"  # `convgit embed` repairs it
    st.nearest(q, 10)
    assert st.last_method == "approximate"


def test_search_through_the_api_uses_the_lists_above_the_threshold(tmp_path):
    base = "[core]\nfsync = false\n[embed]\nprovider = \"hash\"\n"
    repo = set_config(fast_repo(tmp_path / "s"), base + "ann_threshold = 50\n")
    topics = ["bread baking sourdough rye flour oven", "gpu graphics card rtx radeon benchmark",
              "garden tomatoes compost watering soil", "python asyncio event loop coroutine"]
    for i in range(240):
        t = topics[i % 4].split()
        words = " ".join(t[(i + j) % len(t)] for j in range(4))
        convgit.commit(repo, {"messages": conv(f"note {i}: {words}")}, thread=f"t{i}", now_ms=NOW)
    res = convgit.embed(repo)
    assert res.embedded == 240 and res.to_json()["ann_index"] == "built"
    key = convgit.embed_status(repo)["namespace"]["key"]
    assert (repo.path / "vectors" / key / "ivf-1.bin").exists()
    approx = [(h.threads, h.id) for h in convgit.search(repo, "sourdough rye oven", mode="semantic", count=5)]
    repo = set_config(repo, base + "ann_threshold = 50\nsearch = \"exact\"\n")
    assert [(h.threads, h.id) for h in convgit.search(repo, "sourdough rye oven", mode="semantic", count=5)] == approx
    convgit.delete_thread(repo, "t0")
    repo = set_config(repo, base + "ann_threshold = 50\n")
    assert convgit.gc(repo, prune="now").vectors_dropped == 1
    assert (repo.path / "vectors" / key / "ivf-2.bin").exists()
    hits = convgit.search(repo, "sourdough rye oven", mode="semantic", count=5)
    assert [(h.threads, h.id) for h in hits] == [a for a in approx if a[0] != ["t0"]][:len(hits)]


@pytest.mark.parametrize("bad", ['search = "fast"', "ann_threshold = 0", "ann_nprobe = -1", 'ann_nprobe = "x"'])
def test_bad_settings_are_refused(tmp_path, bad):
    repo = set_config(fast_repo(tmp_path / "s"), f"[embed]\nprovider = \"hash\"\n{bad}\n")
    convgit.commit(repo, {"messages": conv("hello")}, now_ms=NOW)
    with pytest.raises(errors.InvalidInput):
        convgit.embed(repo)


def test_a_matrix_of_an_older_generation_is_searched_exactly(tmp_path):
    x = clustered(3000)
    st = store_with(tmp_path, x)
    old = st.matrix()  # opened before the layout (a reader that started earlier)
    st.ensure_ann()
    q = queries(x, 1)[0]
    got = st.nearest(q, 10, old)
    assert st.last_method == "exact"
    want = {st.chunk_ids([r])[r] for r, _ in st.nearest(q, 10)}
    assert len(want) == 10 and st.last_method == "approximate"
    # rows of the old generation: same vectors, old numbering (before the layout: i is chunk i)
    assert {cid(r) for r, _ in got} == want
