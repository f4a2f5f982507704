"""gc --auto on a large store with a writer beside it: the full gc (mark under the exclusive
store lock) against the merge beside writers (``gc.auto_mark_limit``, docs/format.md §10.1).

    .venv/bin/python benchmarks/bench_gc_writers.py --store /tmp/s20k --reps 2

``--store``: a store to start from (bench_remote.py --store builds one: 20,000 conversations
of 10 messages, ~220,000 objects in 2 packs), copied for each run; each run then adds
``--batches`` small ``commit_many`` batches (a pack each: past ``gc.auto_pack_limit``, so gc
--auto is due), with fsync off for the set-up. Then a writer process commits one new
conversation after another through the library (fsync on) while ``convgit gc --auto --json``
runs in a process of its own; the writer stops when gc has ended. Reported per mode: gc's
wall seconds, the writer's commits while gc ran, their median and longest latency, and the
commits that failed (``locked`` after ``core.lock_timeout``, 30 s). Modes interleaved, full
then merge, ``--reps`` times. Results: a markdown table and benchmarks/out/gc_writers.json.
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

import convgit

OUT = Path(__file__).resolve().parent / "out"

WRITER = r"""
import json, sys, time, os
import convgit
from convgit.errors import ConvgitError
repo = convgit.open_repo(sys.argv[1])
stop, out = sys.argv[2], sys.argv[3]
lat, failed, i = [], [], 0
while not os.path.exists(stop):
    doc = {"messages": [{"role": "user", "content": f"writer question {i} {time.time()}"},
                        {"role": "assistant", "content": f"writer answer {i}"}]}
    t = time.perf_counter()
    try:
        convgit.commit(repo, doc, thread=f"writer-{i}")
        lat.append(time.perf_counter() - t)
    except ConvgitError as e:
        failed.append([e.code, round(time.perf_counter() - t, 2)])
    i += 1
json.dump({"lat": lat, "failed": failed}, open(out, "w"))
"""


def one(src: Path, tmp: Path, mode: str, batches: int) -> dict:
    store = tmp / f"s-{mode}"
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(src, store, symlinks=True)
    cg = store / ".convgit"
    os.environ["CONVGIT_FSYNC"] = "0"
    try:
        repo = convgit.open_repo(cg)
        for b in range(batches):
            convgit.commit_many(repo, [{"messages": [{"role": "user", "content": f"batch {b} conv {i} {mode}"},
                                                     {"role": "assistant", "content": f"answer {b} {i}"}],
                                        "thread": f"batch-{b}-{i}"} for i in range(50)])
        repo.close()
    finally:
        del os.environ["CONVGIT_FSYNC"]
    limit = 10**9 if mode == "full" else 200_000
    cfg = (cg / "config.toml").read_text()
    (cg / "config.toml").write_text(cfg.replace("[gc]\n", f"[gc]\nauto_mark_limit = {limit}\n", 1) if "[gc]\n" in cfg
                                    else cfg + f"\n[gc]\nauto_mark_limit = {limit}\n")
    os.sync()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {"CONVGIT_GC_AUTO": "0"}
    stop, out = tmp / f"stop-{mode}", tmp / f"writer-{mode}.json"
    stop.unlink(missing_ok=True)
    w = subprocess.Popen([sys.executable, "-c", WRITER, str(cg), str(stop), str(out)], env=env)
    time.sleep(1.0)  # the writer under way
    t0 = time.perf_counter()
    g = subprocess.run([sys.executable, "-m", "convgit", "gc", "--auto", "--json"], env=env | {"CONVGIT_DIR": str(cg)},
                       capture_output=True, text=True)
    gc_s = time.perf_counter() - t0
    stop.touch()
    w.wait(120)
    doc = json.loads(g.stdout) if g.stdout.strip().startswith("{") else {"error": g.stdout + g.stderr}
    wr = json.loads(out.read_text())
    lat = wr["lat"]
    shutil.rmtree(store, ignore_errors=True)
    return {"mode": mode, "gc_s": round(gc_s, 1), "gc_mode": doc.get("mode"), "packs": [doc.get("packs_before"), doc.get("packs_after")],
            "objects": doc.get("objects_before"), "commits": len(lat), "failed": wr["failed"],
            "p50_ms": round(statistics.median(lat) * 1000, 1) if lat else None,
            "max_s": round(max(lat), 2) if lat else None, "load": round(os.getloadavg()[0], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT / "gc_writers.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="convgit-gcw-"))
    rows = []
    try:
        for r in range(args.reps):
            for mode in ("full", "merge"):
                row = one(args.store, tmp, mode, args.batches)
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| mode | gc --auto s | packs before → after | writer commits meanwhile | median ms | longest s | failed |")
    print("|---|---|---|---|---|---|---|")
    for x in rows:
        print(f"| {x['gc_mode']} | {x['gc_s']} | {x['packs'][0]} → {x['packs'][1]} | {x['commits']} | {x['p50_ms']} | "
              f"{x['max_s']} | {len(x['failed'])} {sorted({c for c, _ in x['failed']})} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
