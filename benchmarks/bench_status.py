"""``convgit status`` at 1k/10k/100k threads: the index's running totals against the aggregate
queries they replace (issue 10, "status under 100 ms at 100,000 threads").

    .venv/bin/python benchmarks/bench_status.py --before DIR                 # 1,000 and 10,000 threads
    .venv/bin/python benchmarks/bench_status.py --before DIR --sizes 1000,10000,100000

``DIR``: a checkout of convgit before the totals (e.g. ``git archive 0eeddf4 | tar -x -C DIR``);
``--after DIR2`` times another checkout instead of this one as "after".
For each size N a store of N two-message threads is built as bench_refs_space.py builds it
(``commit_many``, fsync off, the writers' own packing on), then packed by ``gc --prune never``
(the state a maintained store is in). Each code gets its own copy of the store (their index
schemas differ, and each would rebuild the other's index), and ``convgit status --json`` is
timed as a whole process and by its own ``seconds`` (the work without start-up), in
alternating rounds, medians. Writes benchmarks/out/status.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_refs_space import build, status_ms  # noqa: E402

OUT = HERE / "out"
ROOT = HERE.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--before", type=Path, required=True, help="a checkout of convgit before the running totals")
    ap.add_argument("--after", type=Path, default=ROOT,
                    help="the checkout timed as 'after' (default: this one; a frozen copy lets you edit meanwhile)")
    ap.add_argument("--keep", type=Path, help="build the stores here and keep them (default: a temp directory)")
    ap.add_argument("--out", type=Path, default=OUT / "status.json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    res: dict = {"sizes": sizes, "rounds": args.rounds, "build_s": {}, "status_ms": {}, "status_work_ms": {}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    with tempfile.TemporaryDirectory(prefix="convgit-status-") as td:
        tmp = args.keep or Path(td)
        tmp.mkdir(parents=True, exist_ok=True)
        stores: dict = {}
        for n in sizes:
            base = tmp / f"s{n}"
            if not (base / ".convgit").exists():
                b = build(base, n, loose=False)
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "convgit", "-C", str(base), "gc", "--prune", "never", "--json"],
                               env=env, check=True, capture_output=True)
                res["build_s"][n] = {"build": round(b, 1), "gc": round(time.perf_counter() - t0, 1)}
            stores[n] = {}
            for label in ("before", "after"):
                d = tmp / f"s{n}-{label}"
                if not d.exists():
                    shutil.copytree(base, d, symlinks=True, ignore=shutil.ignore_patterns("index.sqlite*"))
                stores[n][label] = d / ".convgit"
            print(f"built {n}: {res['build_s'].get(n)}", file=sys.stderr, flush=True)
        code = {"before": str(args.before), "after": str(args.after)}
        times = {n: {k: [] for k in code} for n in sizes}
        work = {n: {k: [] for k in code} for n in sizes}
        for n in sizes:  # warm: each copy's index built by its own code, caches hot
            for label, pp in code.items():
                status_ms(stores[n][label], pp)
                status_ms(stores[n][label], pp)
        for r in range(args.rounds):
            for n in sizes:
                for label, pp in code.items():
                    t, w = status_ms(stores[n][label], pp)
                    times[n][label].append(t)
                    work[n][label].append(w)
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        for n in sizes:
            res["status_ms"][n] = {k: round(statistics.median(v), 1) for k, v in times[n].items()}
            res["status_work_ms"][n] = {k: round(statistics.median(v), 1) for k, v in work[n].items()}
    print("\n| threads | status before: process (work) ms | after: process (work) ms |")
    print("|---|---|---|")
    for n in sizes:
        st, w = res["status_ms"][n], res["status_work_ms"][n]
        print(f"| {n:,} | {st['before']} ({w['before']}) | {st['after']} ({w['after']}) |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
