"""CPU time of bench_scale's stateless API call, per call, at several store sizes.

    .venv/bin/python benchmarks/bench_call_cpu.py                               # 1,000 and 10,000 threads
    .venv/bin/python benchmarks/bench_call_cpu.py --sizes 1000,10000,100000 --before /tmp/old-convgit
    .venv/bin/python benchmarks/bench_call_cpu.py --sizes 10000 --profile        # cProfile (CPU clock)

The call is bench_scale's: ``convgit.commit`` of a thread's whole history re-sent plus a new
question and its answer (a fast-forward of an existing thread), every call a different
thread. Wall time on a shared machine is mostly the other processes; CPU time
(``time.process_time``) is what the code costs, so that is what this measures.

Stores are built as bench_scale builds them (N conversations of 4 messages in batches of
2,000, fsync off while building) under ``--stores`` and kept there (a 100,000-thread store
takes a few minutes and ~300 MB). Each measurement runs in a child process on a fresh copy
of the store: one untimed call on a first repository object (imports; the index catching
up after the copy), then a new repository object (as bench_scale's: nothing read yet) makes
``--calls`` calls with fsync on, timed together. ``--before DIR``: a tree holding an older
``convgit/`` package (``git archive <commit> convgit | tar -x -C DIR``), measured in the
same rounds, interleaved. Reports per size the median CPU ms per call, and the ratio of each
size to the smallest, per round (its median and range).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

CHILD = r"""
import cProfile, gc, os, pstats, shutil, sys, time
src, n, calls, profile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
sys.path.insert(0, {here!r})
from bench_scale import continuation
os.environ.pop("CONVGIT_FSYNC", None)
import convgit
dst = src + f".run{{os.getpid()}}"
shutil.copytree(src, dst, symlinks=True)
try:
    first = convgit.open_repo(dst + "/.convgit")
    convgit.commit(first, continuation(0, 99))  # untimed: imports, the index's catch-up after the copy
    first.close(); del first; gc.collect()
    repo = convgit.open_repo(dst + "/.convgit")
    picks = [(c + 1) * 7919 % n for c in range(calls)]
    pr = cProfile.Profile(time.process_time) if profile else None
    if pr:
        pr.enable()
    t = time.process_time()
    for i in picks:
        assert convgit.commit(repo, continuation(i, 0)).appended_messages == 2
    t = time.process_time() - t
    if pr:
        pr.disable()
        pstats.Stats(pr, stream=sys.stderr).sort_stats("tottime").print_stats(40)
    repo.close()
    print(convgit.__file__, t * 1000 / calls)
finally:
    shutil.rmtree(dst, ignore_errors=True)
"""


def build(stores: Path, n: int) -> Path:
    path = stores / f"c{n}"
    if not (path / ".convgit").is_dir():
        sys.path.insert(0, str(HERE))
        from bench_scale import build_convgit

        shutil.rmtree(path, ignore_errors=True)
        s = build_convgit(path, n)
        print(f"built {n:,} threads in {s:.0f} s", file=sys.stderr)
    return path


def measure(src: Path, store: Path, n: int, calls: int, profile: bool = False) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    env["PYTHONPATH"] = str(src)
    # (run from the stores' directory: ``-c`` puts the working directory first on sys.path,
    # and a checkout there would be imported whatever PYTHONPATH says)
    out = subprocess.run([sys.executable, "-c", CHILD.format(here=str(HERE)), str(store), str(n), str(calls),
                          "1" if profile else "0"], env=env, check=True, text=True, stdout=subprocess.PIPE,
                         stderr=None if profile else subprocess.PIPE, cwd=store.parent)
    used, ms = out.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    if not Path(used).resolve().is_relative_to(src.resolve()):
        raise SystemExit(f"the child imported {used}, not the convgit of {src}")
    return float(ms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000", help="store sizes in threads (comma-separated)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=30, help="calls per measurement")
    ap.add_argument("--before", type=Path, help="a tree holding an older convgit/ package to compare with")
    ap.add_argument("--stores", type=Path, default=Path(tempfile.gettempdir()) / "convgit-call-cpu",
                    help="where the built stores are kept (reused when there)")
    ap.add_argument("--profile", action="store_true", help="one cProfile run per size (CPU clock) to stderr")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    args.stores.mkdir(parents=True, exist_ok=True)
    stores = {n: build(args.stores, n) for n in sizes}
    variants = {"after": REPO} if args.before is None else {"before": args.before.resolve(), "after": REPO}
    if args.profile:
        for n in sizes:
            print(f"{n:,} threads: {measure(REPO, stores[n], n, args.calls, profile=True):.3f} ms CPU per call "
                  "(profiled)")
        return
    got: dict = {(v, n): [] for v in variants for n in sizes}
    for r in range(args.rounds):
        for n in sizes:
            for v in (variants if r % 2 == 0 else list(reversed(variants))):
                got[(v, n)].append(measure(variants[v], stores[n], n, args.calls))
        load = os.getloadavg()[0]
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{v} {n:,}: {got[(v, n)][-1]:.2f}" for v in variants
                                                           for n in sizes) + f" (load {load:.1f})", file=sys.stderr)
    lo = sizes[0]
    print("\n| threads | " + " | ".join(f"{v}: CPU ms per call" for v in variants) + " | "
          + " | ".join(f"{v}: / {lo:,} threads" for v in variants) + " |")
    print("|---|" + "---|" * (2 * len(variants)))
    for n in sizes:
        cells = [f"{statistics.median(got[(v, n)]):.2f}" for v in variants]
        for v in variants:
            ratios = [b / a for a, b in zip(got[(v, lo)], got[(v, n)])]
            cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        print(f"| {n:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
