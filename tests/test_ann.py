"""Approximate vector search (issue 13): the IVF lists beside a namespace's matrix are used
from ``ann_threshold`` vectors on, agree with exact search on clustered data, follow appends
and gc compaction (new matrix generations), and a missing or corrupt file means exact."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

import convgit
from convgit import errors
from convgit.embedders import Namespace
from convgit.index import ivf as IVF
from convgit.index.vectors import VectorStore

from helpers.store import NOW, conv, fast_repo, set_config

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


def assert_nearest_centroid(st: VectorStore, lists) -> None:
    """Every listed row lies in its segment's range of the list of its nearest centroid."""
    m = np.asarray(st.matrix())[: lists.rows]
    want = np.argmax(m @ lists.centroids.T, axis=1)
    assert np.array_equal(lists.labels(), want)
    assert lists.offsets[0, 0] == 0 and (np.diff(lists.offsets.ravel()) >= 0).all()


def test_approximate_search_agrees_with_exact_on_clustered_vectors(tmp_path):
    x = clustered(12_000)
    st = store_with(tmp_path, x)
    assert st.nearest(x[0], 10)[0][0] == 0 and st.last_method == "exact"  # no lists yet: exact
    assert st.ensure_ann() == "built" and st.ensure_ann() == "fresh"
    # the matrix was laid out list by list as generation 1: every vector kept, once
    assert not (st.dir / "matrix-0.f32").exists() and st.count() == len(x)
    lists = IVF.load(IVF.path_for(st.dir, 1), DIM, len(x))
    assert lists.rows == lists.offsets[-1, -1] == len(x) and lists.segments == 1
    assert lists.nlist >= round(len(x) ** 0.5)  # √N lists, and more where a full one was split
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
    assert lists.rows == 8000 and lists.trained == 6000 and lists.segments == 2
    assert lists.offsets[1, 0] == 6100 - 100 and lists.offsets[0, -1] == 6000  # the first 6000 rows stayed
    assert_nearest_centroid(st, lists)
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
    assert lists.rows == lists.offsets[-1, -1] == 6000
    assert_nearest_centroid(st, lists)
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


def skewed(n: int, dim: int = 128, seed: int = 4):
    """Embedding-like vectors: a shared direction, 6 themes, 60 topics under them, wide
    noise. In 128 dimensions k-means alone leaves some lists several times the mean size."""
    g = np.random.default_rng(seed)
    mean = g.standard_normal(dim, dtype=np.float32) * 1.2
    top = g.standard_normal((6, dim), dtype=np.float32)
    c = mean + top[g.integers(0, 6, 60)] + g.standard_normal((60, dim), dtype=np.float32) * 0.8
    x = c[g.integers(0, 60, n)] + g.standard_normal((n, dim), dtype=np.float32) * 1.2
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_lists_are_balanced_on_skewed_data_and_keep_recall(tmp_path):
    x = skewed(8000)
    st = VectorStore(tmp_path, Namespace("test", "skewed", 128, "0" * 64), ann_threshold=1000)
    st.add([cid(i) for i in range(len(x))], x)
    st.ensure_ann()
    lists = IVF.load(IVF.path_for(st.dir, 1), 128, len(x))
    assert_nearest_centroid(st, lists)
    k = round(len(x) ** 0.5)
    share = len(x) / k
    sizes = lists.list_sizes()
    assert sizes.sum() == len(x) and sizes.max() <= IVF.BALANCE * share  # no list past the cap
    rng = np.random.default_rng(0)  # k-means alone, on the same kind of sample: far past it
    plain = IVF._kmeans(x[np.sort(rng.choice(len(x), IVF.SAMPLE_PER_LIST * k, replace=False))], k, rng)
    assert np.bincount(IVF.assign(x, plain, 0, len(x))).max() > 1.5 * IVF.BALANCE * share
    g = np.random.default_rng(9)
    qs = x[g.choice(len(x), 40, replace=False)] + g.standard_normal((40, 128), dtype=np.float32) * 0.05
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    nprobe = IVF.default_nprobe(lists.nlist)
    for q in qs[:10]:  # the rows scored are the probed lists' share, whatever the clustering
        a, b = lists.ranges(q, nprobe, len(x))
        assert (b - a).sum() <= nprobe * IVF.BALANCE * share
    assert recall(st, qs) >= 0.95


def test_ranges_cover_exactly_the_probed_lists_of_every_segment_and_the_tail(tmp_path):
    x = clustered(7000, seed=8)
    st = store_with(tmp_path, x[:5000])
    st.ensure_ann()
    for stop in (5400, 5800):  # two more segments
        st.add([cid(i) for i in range(st.count(), stop)], x[st.count():stop])
        assert st.ensure_ann() == "extended"
    st.add([cid(i) for i in range(5800, 5900)], x[5800:5900])  # and a tail
    m = st.matrix()
    lists = IVF.load(st._ivf_path(), DIM, m.shape[0])
    assert lists.segments == 3 and lists.rows == 5800
    assert_nearest_centroid(st, lists)
    labels = lists.labels()
    rng = np.random.default_rng(2)
    for q in queries(x, 12, seed=3):
        nprobe = int(rng.integers(1, lists.nlist + 1))
        best = np.argsort(-(lists.centroids @ q), kind="stable")[:nprobe]
        want = np.concatenate([np.flatnonzero(np.isin(labels, best)), np.arange(5800, 5900)])
        a, b = lists.ranges(q, nprobe, m.shape[0])
        assert (a[1:] > b[:-1]).all()  # ascending, disjoint, adjacent ones merged
        assert np.array_equal(np.concatenate([np.arange(i, j) for i, j in zip(a, b)]), want)
        cand, scores = lists.score(m, q, nprobe)
        pos = np.arange(len(cand))
        assert np.array_equal(cand.rows(pos), want) and np.allclose(scores, np.asarray(m)[want] @ q, atol=1e-6)


def test_a_new_segment_rewrites_only_the_tail_and_many_merge_back(tmp_path):
    x = clustered(9500, seed=6)
    st = store_with(tmp_path, x[:6000])
    st.ensure_ann()
    before = np.array(st.matrix())
    ids_before = st.chunk_ids(list(range(6000)))
    st.add([cid(i) for i in range(6000, 6500)], x[6000:6500])
    assert st.ensure_ann() == "extended"
    after = np.asarray(st.matrix())
    assert np.array_equal(after[:6000], before) and st.chunk_ids(list(range(6000))) == ids_before
    tail = st.chunk_ids(list(range(6000, 6500)))
    assert sorted(tail.values()) == sorted(cid(i) for i in range(6000, 6500))
    for r, c in tail.items():  # each moved row holds its own chunk's vector
        assert np.array_equal(after[r], x[int(c.split(":")[0], 16)])
    seen = []
    while st.count() < 9500:  # more extensions than MAX_SEGMENTS: the later segments merge into one
        stop = min(9500, st.count() + 600)
        st.add([cid(i) for i in range(st.count(), stop)], x[st.count():stop])
        assert st.ensure_ann() == "extended"
        lists = IVF.load(st._ivf_path(), DIM, stop)
        seen.append(lists.segments)
        assert 2 <= lists.segments <= IVF.MAX_SEGMENTS and lists.rows == stop and lists.trained == 6000
        assert_nearest_centroid(st, lists)
        assert np.array_equal(np.asarray(st.matrix())[:6000], before)  # the first segment never moves
    assert max(seen) == IVF.MAX_SEGMENTS and 2 in seen[seen.index(IVF.MAX_SEGMENTS):]
    got = st.vectors_of([cid(i) for i in range(0, 9500, 97)])
    assert np.array_equal(got, x[list(range(0, 9500, 97))])
    assert recall(st, queries(x)) >= 0.9


def stdlib_paragraphs(limit: int) -> list[str]:
    """Real text that every Python has: docstring paragraphs of the standard library."""
    import re
    import sysconfig

    out: dict[str, None] = {}
    for f in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        for m in re.finditer(r'"""(.*?)"""', f.read_text("utf-8", errors="ignore"), re.S):
            for para in m.group(1).split("\n\n"):
                para = " ".join(para.split())
                if len(para) >= 40:
                    out.setdefault(para)
    return list(out)[:limit]


def test_recall_on_real_text_embeddings_at_the_default_nprobe(tmp_path):
    from convgit.config import EmbedConfig
    from convgit.embedders import make_provider

    texts = stdlib_paragraphs(6100)
    assert len(texts) == 6100
    prov = make_provider(EmbedConfig(provider="hash"))
    vecs = np.concatenate([prov.embed(texts[i : i + 512]) for i in range(100, len(texts), 512)])
    st = VectorStore(tmp_path, Namespace("test", "hash", vecs.shape[1], "0" * 64), ann_threshold=1000)
    st.add([cid(i) for i in range(len(vecs))], vecs)
    assert st.ensure_ann() == "built"
    lists = IVF.load(st._ivf_path(), vecs.shape[1], len(vecs))
    assert_nearest_centroid(st, lists)
    qs = np.stack([prov.embed_query(t) for t in texts[:100]])  # held out: not stored
    assert recall(st, qs) >= 0.85  # measured 0.946 (95 lists, 36 calibrated; a quarter: 0.90); wrong lists: ~0.25


def brute_recall(m, lists, qs, nprobe: int, leave_out=None, k: int = 10) -> float:
    """recall@k against exact search of the rows ``Ivf.ranges`` gives (rows ``leave_out[i]``
    excluded for query i), computed from scratch: the exact top-k, the probed top-k."""
    got = 0
    scores = qs @ m.T
    if leave_out is not None:
        scores[np.arange(len(qs)), leave_out] = -np.inf
    for i, q in enumerate(qs):
        s = scores[i]
        want = set(np.argpartition(-s, k - 1)[:k].tolist())
        a, b = lists.ranges(q, nprobe, len(m))
        rows = np.concatenate([np.arange(x, y) for x, y in zip(a, b)])
        rows = rows[np.isfinite(s[rows])]
        top = rows if len(rows) <= k else rows[np.argpartition(-s[rows], k - 1)[:k]]
        got += len(want & set(top.tolist()))
    return got / (k * len(qs))


@pytest.mark.parametrize("target", [0.9, 0.97])
def test_calibration_picks_the_fewest_lists_that_reach_the_recall_target(tmp_path, target):
    x = skewed(2000, dim=64, seed=7)
    st = VectorStore(tmp_path, Namespace("test", "skewed", 64, "0" * 64), ann_threshold=1000)
    st.add([cid(i) for i in range(len(x))], x)
    st.ensure_ann()
    m = np.asarray(st.matrix())
    lists = IVF.load(st._ivf_path(), 64, len(m))
    every = np.arange(len(m))  # every stored vector as a query, itself left out
    p = IVF.calibrate(m, lists.centroids, lists.labels(), target=target, queries=len(m))
    assert 1 < p < lists.nlist
    assert brute_recall(m, lists, m, p, every) >= target > brute_recall(m, lists, m, p - 1, every)


def test_the_calibrated_count_is_stored_used_and_kept(tmp_path):
    x = clustered(9000, seed=12)
    st = store_with(tmp_path, x[:6000])
    assert st.ensure_ann() == "built"
    lists = IVF.load(st._ivf_path(), DIM, 6000)
    assert 1 <= lists.nprobe < IVF.default_nprobe(lists.nlist)  # tight clusters: fewer than a quarter
    assert lists.nprobe == IVF.calibrate(np.asarray(st.matrix()), lists.centroids, lists.labels())
    assert IVF.default_nprobe(lists.nlist, lists.nprobe) == lists.nprobe
    qs = queries(x[:6000], 40, seed=5)
    assert recall(st, qs) >= 0.9
    st.add([cid(i) for i in range(6000, 9000)], x[6000:9000])
    assert st.ensure_ann() == "extended"  # calibrated again over every row's list
    ext = IVF.load(st._ivf_path(), DIM, 9000)
    assert ext.nprobe == IVF.calibrate(np.asarray(st.matrix()), ext.centroids, ext.labels())
    st.compact(lambda mid: int(mid, 16) % 2 == 0)
    assert IVF.load(st._ivf_path(), DIM, 4500).nprobe == ext.nprobe  # compaction keeps it
    # a file written before calibration (no "nprobe" in its header) is read: a quarter of the lists
    path = st._ivf_path()
    data = path.read_bytes()
    (hlen,) = struct.unpack_from("<I", data, len(IVF.MAGIC))
    head = json.loads(data[len(IVF.MAGIC) + 4 : len(IVF.MAGIC) + 4 + hlen])
    del head["nprobe"]
    raw = json.dumps(head).encode()
    path.write_bytes(IVF.MAGIC + struct.pack("<I", len(raw)) + raw + data[len(IVF.MAGIC) + 4 + hlen :])
    old = IVF.load(path, DIM, 4500)
    assert old is not None and old.nprobe == 0
    assert IVF.default_nprobe(old.nlist, old.nprobe) == max(16, -(-old.nlist // 4))
    st.nearest(x[2], 10)
    assert st.last_method == "approximate"


def test_weakly_clustered_vectors_get_more_lists_than_clustered_ones(tmp_path):
    tight = store_with(tmp_path / "a", clustered(5000, seed=2))
    rng = np.random.default_rng(4)
    noise = rng.standard_normal((5000, DIM), dtype=np.float32)
    loose = store_with(tmp_path / "b", noise / np.linalg.norm(noise, axis=1, keepdims=True))
    for st in (tight, loose):
        st.ensure_ann()
    a = IVF.load(tight._ivf_path(), DIM, 5000)
    b = IVF.load(loose._ivf_path(), DIM, 5000)
    assert a.nprobe / a.nlist < 0.5 * b.nprobe / b.nlist
    m = np.asarray(loose.matrix())
    qs = rng.standard_normal((30, DIM), dtype=np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    assert brute_recall(m, b, qs, b.nprobe) >= 0.85  # random vectors: the calibration probes what it takes


def test_too_few_candidates_probe_more_lists_before_going_exact(tmp_path):
    x = clustered(6000, seed=12)
    st = store_with(tmp_path, x)
    st.ensure_ann()
    lists = IVF.load(st._ivf_path(), DIM, 6000)
    q = queries(x, 1, seed=8)[0]
    k = 40  # four times that is more than the calibrated lists hold, not more than 4× as many
    probe = lists.nprobe
    held = len(lists.score(np.asarray(st.matrix()), q, probe)[0])
    assert held < 4 * k <= len(lists.score(np.asarray(st.matrix()), q, probe * 4)[0]) and probe * 4 < lists.nlist
    got = st.nearest(q, k)
    assert st.last_method == "approximate" and len(got) == k
    assert len({r for r, _ in got} & {r for r, _ in exact(st, q, k)}) >= 0.9 * k
    st.nearest(q, 6000 // 4)  # nothing short of every list holds 4 × that many: exact
    assert st.last_method == "exact"
