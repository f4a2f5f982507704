"""Index query latencies in-process, to compare two versions of the index in one run.

    .venv/bin/python benchmarks/bench_index_queries.py --store DIR [--repeat 7] [--label NAME]

On a store built by ``bench_search.py build`` (its index built already, or built here first,
untimed): the median of ``--repeat`` calls of each query through the library, so process
start-up is not counted (wall and CPU time): search (the shapes of bench_search.py), ``log`` of the 1,000-message
thread ``deep`` and of a filtered page by key, ``log --all -n 200``, the thread list, the
threads reaching a shared message (``threads_containing``), and ``status``. One JSON line on
stdout. To compare two codes, run it alternately with each on a copy of the same store
(``PYTHONPATH=<other checkout>``), as docs/performance.md "A lean index" did.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ["CONVGIT_FSYNC"] = "0"  # synthetic stores only

import convgit  # noqa: E402
from convgit.repository import Repository  # noqa: E402


def median_ms(fn, repeat: int) -> tuple[float, float]:
    """(wall, CPU) milliseconds of ``fn``, medians of ``repeat`` calls after a warm one. The
    CPU time (this process's) is the figure to compare on a loaded machine: a query here is
    CPU-bound once the pages are cached, and other processes stretch its wall time."""
    fn()  # warm (page cache, statement cache)
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
    return round(statistics.median(wall) * 1000, 2), round(statistics.median(cpu) * 1000, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    repo = Repository.open(a.store / ".convgit")
    repo.index  # built or caught up here, untimed
    shared = repo.index.db.execute("SELECT id FROM messages WHERE depth = 0 LIMIT 1").fetchone()[0]
    f = convgit.make_filters(repo, model=["gpt-4o"], since="2023-01-01")
    page = convgit.make_filters(repo, id_gt="2023")
    cases = {
        "search rare": lambda: convgit.search(repo, "zyzzyva", count=20),
        "search medium": lambda: convgit.search(repo, "quokka", count=20),
        "search phrase": lambda: convgit.search(repo, '"velvet thunder"', count=20),
        "search -m --since": lambda: convgit.search(repo, "quokka", count=20, filters=f),
        "search --latest": lambda: convgit.search(repo, "quokka", count=20, latest=True),
        "log deep (1,000)": lambda: convgit.log(repo, "deep"),
        "log --id-gt page of 100": lambda: convgit.log(repo, "deep", count=100, filters=page),
        "log --all -n 200": lambda: convgit.log(repo, all_threads=True, count=200),
        "threads (list)": lambda: repo.index.thread_rows(),
        "threads containing a root": lambda: repo.index.threads_containing(shared, limit=20),
        "status": lambda: convgit.status(repo),
    }
    timed = {k: median_ms(fn, a.repeat) for k, fn in cases.items()}
    res = {"label": a.label, "wall_ms": {k: v[0] for k, v in timed.items()}, "cpu_ms": {k: v[1] for k, v in timed.items()}}
    repo.close()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
