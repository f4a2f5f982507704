"""Refs and reflogs per thread, and ``status``, loose (before packed reflogs) and packed (issue 10).

    .venv/bin/python benchmarks/bench_refs_space.py                                  # 1,000 and 10,000 threads
    .venv/bin/python benchmarks/bench_refs_space.py --sizes 1000,10000,100000 --before /work/main

For each size N: a store of N threads of 2 messages (``commit_many``, fsync off: set-up) built
with the writers' own packing turned off (refs.AUTO_PACK_LOOSE very high): a loose ref file
and a loose reflog per thread, format 1, exactly what convgit wrote before packed reflogs. A
copy of it is then packed (``gc --prune never``: ``packed-refs`` + ``packed-logs``), and a
third store is built with the packing on (the writers pack past 1,024 loose refs; no gc).

Figures: ``du`` of the refs and reflogs (``refs/``, ``logs/``, ``packed-refs``,
``packed-logs``) per thread, on disk and apparent; and ``convgit status --json`` as a whole
process (and, in brackets, its own ``seconds``: the work without start-up), timed in interleaved rounds (loose store with ``--before``'s convgit, i.e. the code
before this change, if given; loose store with this code; packed store with this code),
medians. Writes benchmarks/out/refs_space.json.
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
OUT = HERE / "out"


def du(*paths: Path) -> tuple[int, int]:
    """(bytes on disk, apparent bytes) of ``paths`` together."""
    paths = tuple(p for p in paths if p.exists())
    if not paths:
        return 0, 0

    def total(flag: str) -> int:
        out = subprocess.run(["du", flag, "-c", *map(str, paths)], capture_output=True, text=True, check=True).stdout
        return int(out.splitlines()[-1].split()[0])
    return total("-sk") * 1024, total("-sb")


def refs_space(store: Path, n: int) -> dict:
    """Refs and reflogs of the store at ``store``, per thread."""
    rb, ra = du(store / "refs", store / "packed-refs")
    lb, la = du(store / "logs", store / "packed-logs")
    return {"disk_per_thread": round((rb + lb) / n, 1), "apparent_per_thread": round((ra + la) / n, 1),
            "refs_disk": round(rb / n, 1), "reflogs_disk": round(lb / n, 1)}


BUILD = """
import sys, time
import convgit
from convgit import refs
if {loose}:
    refs.AUTO_PACK_LOOSE = 10 ** 9
repo = convgit.init({path!r})
(repo.path / "config.toml").write_text("[core]\\nfsync = false\\n")
repo.close()
repo = convgit.open_repo(repo.path)
n = {n}
t0 = time.perf_counter()
for k in range(0, n, 2000):
    convgit.commit_many(repo, [{{"messages": [{{"role": "user", "content": f"question {{i}} about thread {{i}}"}},
                                            {{"role": "assistant", "content": f"answer {{i}}"}}],
                               "source": "bench", "upstream_thread_id": f"t{{i:07d}}"}} for i in range(k, min(n, k + 2000))])
repo.index.refresh_if_changed()
print(time.perf_counter() - t0)
"""


def build(path: Path, n: int, *, loose: bool) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    out = subprocess.run([sys.executable, "-c", BUILD.format(path=str(path), n=n, loose=loose)], env=env,
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def status_ms(store: Path, pythonpath: str | None) -> tuple[float, float]:
    """(the whole process's ms, status's own ``seconds`` in ms: the work without start-up)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {"CONVGIT_DIR": str(store)}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    t0 = time.perf_counter()
    # (cwd: the store's parent, so that neither checkout's convgit/ is found by accident)
    p = subprocess.run([sys.executable, "-m", "convgit", "status", "--json"], env=env, check=True, capture_output=True,
                       cwd=store.parent)
    return (time.perf_counter() - t0) * 1000, json.loads(p.stdout)["seconds"] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--before", type=Path, help="a checkout of convgit before packed reflogs (its status is timed too)")
    ap.add_argument("--out", type=Path, default=OUT / "refs_space.json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    res: dict = {"sizes": sizes, "rounds": args.rounds, "space": {}, "status_ms": {}, "status_work_ms": {},
                 "build_s": {}}
    with tempfile.TemporaryDirectory(prefix="convgit-refs-") as td:
        tmp = Path(td)
        stores = {}
        for n in sizes:
            loose = tmp / f"loose{n}"
            b1 = build(loose, n, loose=True)
            auto = tmp / f"auto{n}"
            b2 = build(auto, n, loose=False)
            packed = tmp / f"packed{n}"
            shutil.copytree(loose, packed, symlinks=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "convgit", "-C", str(packed), "gc", "--prune", "never", "--json"],
                           env=env, check=True, capture_output=True)
            gc_s = time.perf_counter() - t0
            res["build_s"][n] = {"loose": round(b1, 1), "writers_pack": round(b2, 1), "gc_pack": round(gc_s, 2)}
            res["space"][n] = {"loose": refs_space(loose / ".convgit", n),
                               "writers_pack": refs_space(auto / ".convgit", n),
                               "after_gc": refs_space(packed / ".convgit", n)}
            stores[n] = {"loose": loose / ".convgit", "packed": packed / ".convgit"}
            print(f"built {n}: {res['build_s'][n]} {res['space'][n]}", file=sys.stderr, flush=True)
        kinds = ([("before, loose", "loose", str(args.before))] if args.before else []) + [
            ("this, loose", "loose", None), ("this, packed", "packed", None)]
        times: dict = {n: {k: [] for k, _, _ in kinds} for n in sizes}
        work: dict = {n: {k: [] for k, _, _ in kinds} for n in sizes}
        for n in sizes:  # warm: each store's index built, each code's caches hot
            for _, which, pp in kinds:
                status_ms(stores[n][which], pp)
        for r in range(args.rounds):
            for n in sizes:
                for label, which, pp in kinds:
                    t, w = status_ms(stores[n][which], pp)
                    times[n][label].append(t)
                    work[n][label].append(w)
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        for n in sizes:
            res["status_ms"][n] = {k: round(statistics.median(v), 1) for k, v in times[n].items()}
            res["status_work_ms"][n] = {k: round(statistics.median(v), 1) for k, v in work[n].items()}
    print("\n| threads | refs+reflogs B/thread: loose | writers' packing | after gc | "
          + " | ".join(f"status ms: {k}" for k, _, _ in kinds) + " |")
    print("|---" * (4 + len(kinds)) + "|")
    for n in sizes:
        sp, st = res["space"][n], res["status_ms"][n]
        print(f"| {n:,} | {sp['loose']['disk_per_thread']:.0f} ({sp['loose']['apparent_per_thread']:.0f}) | "
              f"{sp['writers_pack']['disk_per_thread']:.0f} ({sp['writers_pack']['apparent_per_thread']:.0f}) | "
              f"{sp['after_gc']['disk_per_thread']:.0f} ({sp['after_gc']['apparent_per_thread']:.0f}) | "
              + " | ".join(f"{st[k]} ({res['status_work_ms'][n][k]})" for k, _, _ in kinds) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
