"""Automatic gc (convgit/gc_auto.py): what a write pays for the check, and what it saves.

    .venv/bin/python benchmarks/bench_gc_auto.py                 # both parts (~2 min)
    .venv/bin/python benchmarks/bench_gc_auto.py --parts check   # the check at 1k and 100k loose objects
    .venv/bin/python benchmarks/bench_gc_auto.py --parts space --commits 2000

check: a store holding N loose objects (real objects, written loose with fsync off: set-up),
the threshold raised above N so the check says "not due" (what nearly every commit sees);
``gc_due(repo)`` timed in-process, per call (median of many calls), and the exact count
gc --auto used before (``gc.count_loose``: every fan-out directory listed) beside it.

space: N single commits (one 2-message conversation each, in-process through the library,
then the CLI's hook ``start_background_gc(repo)`` after each one, exactly what the CLI runs
after ``convgit commit``), once with ``[gc] auto = true`` and once with ``auto = false``; the
background gcs are waited for at the end. fsync is off (it changes no size). Sizes: apparent
bytes and allocated (``st_blocks``) bytes of ``objects/``, of refs and reflogs, and of the store.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import convgit
from convgit import codec, fsio
from convgit.gc import count_loose
from convgit.gc_auto import gc_due, start_background_gc
from convgit.objects import Blob

OUT = Path(__file__).resolve().parent / "out"


def _store(path: Path, gc_toml: str) -> None:
    convgit.init(path).close()
    (path / ".convgit" / "config.toml").write_text(f"[core]\nfsync = false\n\n[gc]\n{gc_toml}")


def _usage(d: Path) -> tuple[int, int, int]:
    """(files, apparent bytes, allocated bytes) under ``d``."""
    files = apparent = alloc = 0
    for dp, _, fs in os.walk(d):
        for f in fs:
            st = os.lstat(os.path.join(dp, f))
            files += 1
            apparent += st.st_size
            alloc += st.st_blocks * 512
    return files, apparent, alloc


def bench_check(base: Path, sizes: list[int]) -> list[dict]:
    rows = []
    for n in sizes:
        root = base / f"check-{n}"
        _store(root, f"auto_threshold = {n * 10}\n")
        with convgit.open_repo(root / ".convgit") as repo:
            items = []
            for i in range(n):
                b = Blob(data=f"object {i} ".encode() + b"x" * 64)
                oid, data = codec.encode_and_hash(b)
                items.append((oid, data))
                if len(items) == 16:
                    repo.objects.write_many(items)
                    items = []
            if items:
                repo.objects.write_many(items)
            assert count_loose(repo.objects) == n
            for thr, label in ((2000, "default threshold (2,000: 5 directories)"), (n * 10, "threshold above N")):
                repo.config = dataclasses.replace(repo.config, gc_auto_threshold=thr)
                calls = 2000 if n <= 10_000 else 500
                t = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    due = gc_due(repo)
                    t.append(time.perf_counter() - t0)
                rows.append({"loose": n, "threshold": thr, "what": label, "due": bool(due),
                             "estimate": due.loose_estimate, "us_per_call": round(statistics.median(t) * 1e6, 1)})
            t = []
            for _ in range(20 if n > 10_000 else 200):
                t0 = time.perf_counter()
                count_loose(repo.objects)
                t.append(time.perf_counter() - t0)
            rows.append({"loose": n, "what": "exact count (gc.count_loose, gc --auto before)",
                         "us_per_call": round(statistics.median(t) * 1e6, 1)})
    return rows


def _wait_gc(store: Path) -> None:
    while True:
        fd = fsio.try_flock(store / "gc.lock", shared=False)
        if fd is not None:
            os.close(fd)
            return
        time.sleep(0.05)


def bench_space(base: Path, commits: int) -> list[dict]:
    rows = []
    for auto in (True, False):
        root = base / f"space-{'on' if auto else 'off'}"
        _store(root, f"auto = {'true' if auto else 'false'}\n")
        store = root / ".convgit"
        hook = []
        t0 = time.perf_counter()
        with convgit.open_repo(store) as repo:
            for i in range(commits):
                convgit.commit(repo, {"messages": [
                    {"role": "user", "content": f"question {i}: how do I parse a JSON stream of tokens?"},
                    {"role": "assistant", "content": f"answer {i}: read it incrementally " + "with a state machine " * 8}]})
                h0 = time.perf_counter()
                start_background_gc(repo)
                hook.append(time.perf_counter() - h0)
        wall = time.perf_counter() - t0
        _wait_gc(store)
        with convgit.open_repo(store) as repo:
            loose, packs = count_loose(repo.objects), len(repo.objects.packs(reload=True))
        gcs = len((store / "gc.log").read_text().splitlines()) if (store / "gc.log").exists() else 0
        o, r, s = _usage(store / "objects"), (_usage(store / "refs"), _usage(store / "logs")), _usage(store)
        idx = s[2] - o[2] - r[0][2] - r[1][2]
        rows.append({"auto": auto, "commits": commits, "seconds": round(wall, 1), "gcs": gcs, "loose_after": loose,
                     "packs_after": packs, "objects_files": o[0], "objects_apparent": o[1], "objects_allocated": o[2],
                     "refs_logs_allocated": r[0][2] + r[1][2], "store_files": s[0], "store_apparent": s[1],
                     "store_allocated": s[2], "rest_allocated (index, small files)": idx,
                     "hook_us_median": round(statistics.median(hook) * 1e6, 1),
                     "hook_ms_max": round(max(hook) * 1e3, 2)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="check,space")
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--commits", type=int, default=2000)
    a = ap.parse_args()
    parts = a.parts.split(",")
    OUT.mkdir(exist_ok=True)
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-gc-auto-") as tmp:
        if "check" in parts:
            res["check"] = bench_check(Path(tmp), [int(x) for x in a.sizes.split(",")])
            for row in res["check"]:
                print(json.dumps(row))
        if "space" in parts:
            res["space"] = bench_space(Path(tmp), a.commits)
            for row in res["space"]:
                print(json.dumps(row))
    (OUT / "gc_auto.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
