"""Search on the PostgreSQL index against the SQLite index, on the same synthetic store.

    .venv/bin/python benchmarks/bench_pg.py [--sizes 10000,100000] [--reps 7]
    .venv/bin/python benchmarks/bench_pg.py --sizes 1000000 --reps 21 --no-reindex   # 1M: the PostgreSQL build once
    .venv/bin/python benchmarks/bench_pg.py --sizes 1000000 --no-reindex --dsn 'host=… dbname=…'   # built once, kept

For each size: the synthetic store of bench_search.py (``build``; kept under the system temp
directory as ``convgit-bench-pg/store-<N>``), a twin of it (the same objects, refs and
reflogs) whose config says ``[index] backend = "postgres"``, a real PostgreSQL server started
for the run (tests/helpers/pg.py: initdb in a temp directory, 127.0.0.1, fsync off). Measured:
``reindex`` of each (in-process), then top-20 searches of bench_search's query shapes,
in-process, SQLite and PostgreSQL interleaved query by query, the median of ``--reps`` runs
each (after one warm-up), and the p90. Every query's hits are checked identical on both before timing.
``--dsn``: a server and database already running instead (the twin's index is kept there
between runs: a later run opens it, caught up, instead of building it again; a 1M build is
most of 15 minutes here). ``--queries``: only the query shapes whose label holds one of these words.
Results: a markdown table on stdout and benchmarks/out/pg.json.
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

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
os.environ["CONVGIT_FSYNC"] = "0"  # synthetic stores only

import convgit  # noqa: E402
from convgit.repository import Repository  # noqa: E402

import bench_search  # noqa: E402
from helpers.pg import PgServer  # noqa: E402

QUERIES = [
    ("rare word", bench_search.RARE, {}),
    ("medium word", bench_search.MEDIUM, {}),
    ("phrase", '"velvet thunder"', {}),
    ("prefix velv*", "velv*", {}),
    ("OR", f"{bench_search.MEDIUM} OR {bench_search.RARE}", {}),
    ("-m gpt-4o --since 2023-01-01", bench_search.MEDIUM, {"model": ["gpt-4o"], "since": "2023-01-01"}),
    ("--latest", bench_search.MEDIUM, {"latest": True}),
    # the corpus's most frequent word (Zipf rank 1: in about 4 messages of 10)
    ("common word", bench_search.vocabulary()[0][0], {}),
]


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _p90(v: list[float]) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, round(0.9 * (len(v) - 1)))]


def one_size(n: int, dsn: str, reps: int, reindex: bool = True, only: list[str] | None = None) -> dict:
    root = Path(tempfile.gettempdir()) / "convgit-bench-pg"
    store = root / f"store-{n}"
    if not (store / "bench-store.json").exists():
        print(f"building {n} messages", file=sys.stderr)
        bench_search.build(store, n)
    info = json.loads((store / "bench-store.json").read_text())
    twin = root / f"twin-{n}"
    if twin.exists():
        shutil.rmtree(twin)
    def link_objects(src, dst):  # (objects never change: linked, not copied; a 1M store has a million files)
        return os.link(src, dst) if f"{os.sep}objects{os.sep}" in src else shutil.copy2(src, dst)

    shutil.copytree(store / ".convgit", twin / ".convgit", ignore=shutil.ignore_patterns("index.sqlite*", "*.lock"),
                    copy_function=link_objects)
    (twin / ".convgit" / "config.toml").write_text(
        f'[core]\nfsync = false\n[index]\nbackend = "postgres"\ndsn = "{dsn}"\n')
    out: dict = {"messages": info["messages"], "threads": info["threads"]}
    repos = {"sqlite": Repository.open(store / ".convgit"), "postgres": Repository.open(twin / ".convgit")}
    for name, repo in repos.items():
        # opened (built) first: what is timed is a reindex of a store in use (--no-reindex: the
        # first build, the twin's from nothing; SQLite's is the store's, built with it)
        out[f"open_{name}_s"] = round(timed(lambda: repo.index), 2)
        print(f"{name} index open/built in {out[f'open_{name}_s']} s", file=sys.stderr, flush=True)
        if reindex:
            out[f"reindex_{name}_s"] = round(timed(lambda: convgit.reindex(repo)), 2)
    out["index_bytes"] = {name: repo.index.disk_bytes() for name, repo in repos.items()}
    rows = []
    for label, q, opts in QUERIES:
        if only and not any(w in label for w in only):
            continue
        opts = dict(opts)
        latest = opts.pop("latest", False)
        calls = {}
        for name, repo in repos.items():
            f = convgit.make_filters(repo, **opts) if opts else None
            calls[name] = (lambda repo=repo, f=f: convgit.search(repo, q, count=20, latest=latest, filters=f))
        answers = {name: [h.to_json() for h in call()] for name, call in calls.items()}
        assert answers["sqlite"] == answers["postgres"], label
        times: dict[str, list[float]] = {"sqlite": [], "postgres": []}
        for _ in range(reps):  # interleaved: the machine's load falls on both alike
            for name, call in calls.items():
                times[name].append(timed(call))
        rows.append({"query": label, "hits": len(answers["sqlite"]),
                     **{f"{k}_ms": round(statistics.median(v) * 1000, 1) for k, v in times.items()},
                     **{f"{k}_p90_ms": round(_p90(v) * 1000, 1) for k, v in times.items()}})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    out["search"] = rows
    for repo in repos.values():
        repo.close()
    return out


def table(results: list[dict]) -> str:
    lines = []
    for r in results:
        rx = (f"reindex SQLite {r['reindex_sqlite_s']} s, PostgreSQL {r['reindex_postgres_s']} s" if "reindex_sqlite_s" in r
              else f"first build: PostgreSQL {r['open_postgres_s']} s")
        lines.append(f"\n{r['messages']:,} messages: {rx}; index {r['index_bytes']['sqlite'] / 1e6:.1f} MB vs "
                     f"{r['index_bytes']['postgres'] / 1e6:.1f} MB\n")
        lines.append("| query (top 20) | hits | SQLite median / p90 ms | PostgreSQL median / p90 ms |")
        lines.append("|---|---|---|---|")
        for s in r["search"]:
            lines.append(f"| {s['query']} | {s['hits']} | {s['sqlite_ms']} / {s['sqlite_p90_ms']} | "
                         f"{s['postgres_ms']} / {s['postgres_p90_ms']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--no-reindex", action="store_true",
                    help="skip the timed reindex of each index (at 1M messages the PostgreSQL one alone takes many minutes); "
                         "the twin's first build is timed instead")
    ap.add_argument("--dsn", help="a running PostgreSQL database to use (and keep the twins' indexes in) "
                                   "instead of a server started for the run")
    ap.add_argument("--queries", help="comma-separated words: only the query shapes whose label holds one")
    a = ap.parse_args()
    only = a.queries.split(",") if a.queries else None
    server = None if a.dsn else PgServer.start()
    try:
        results = [one_size(int(n), a.dsn or server.create_database(), a.reps, not a.no_reindex, only)
                   for n in a.sizes.split(",")]
    finally:
        if server is not None:
            server.stop()
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "pg.json").write_text(json.dumps(results, indent=2))
    print(table(results))


if __name__ == "__main__":
    main()
