"""merge at scale: a store of N conversations x 10 messages merged into an empty store and into
a store that already holds its first half, wall and CPU seconds, code before and after.

    .venv/bin/python benchmarks/bench_merge.py --conversations 5000 --keep /tmp/merge50k
    .venv/bin/python benchmarks/bench_merge.py --conversations 50000 --keep /tmp/merge500k \\
        --before /tmp/merge-before --reps 3          # git archive main | tar -x -C /tmp/merge-before

The stores are built once under ``--keep`` (reused when there: ``src`` with every object loose,
as bench_maintenance.py builds them, and ``half``, its first N/2 conversations gc'd into one
pack) with fsync off; each merge runs with the default settings (fsync on) in a process of its
own, on a fresh copy of the target, with ``PYTHONPATH`` naming the code under test. Rounds
alternate the codes (before, after, before, after, ...); medians are printed. Each merge is
followed by the same merge again (it must add no object and no byte), and ``--check``
compares ``convgit log --all --json`` of the merged stores across the codes (it must be equal).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(base: Path, n: int) -> None:
    """``base/src`` (n conversations, loose) and ``base/half`` (the first n/2, one pack)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_maintenance as bm
    import convgit
    from convgit import api

    if not (base / "src").exists():
        bm.build(str(base / "src"), [(n, 7)])
    if not (base / "half").exists():
        bm.build(str(base / "half"), [(n // 2, 7)])
        os.environ["CONVGIT_FSYNC"] = "0"
        try:
            r = convgit.open_repo(str(base / "half"))
            api.gc(r, prune="now")
            api.status(r)
            r.close()
        finally:
            del os.environ["CONVGIT_FSYNC"]
        os.sync()


def du(path) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path) for f in fs)


def one(base: Path, mode: str, log_out: str | None) -> dict:
    """One merge of ``base/src`` into a fresh target (run in a child process)."""
    import resource

    import convgit
    from convgit import api

    dst = base / f"dst-{os.getpid()}"
    if mode == "empty":
        convgit.init(str(dst)).close()
    else:
        shutil.copytree(base / "half", dst, symlinks=True)
    os.sync()
    try:
        repo = convgit.open_repo(str(dst))
        api.status(repo)
        c0, w0 = time.process_time(), time.perf_counter()
        m = api.merge(repo, str(base / "src"))
        c1, w1 = time.process_time(), time.perf_counter()
        api.status(repo)
        size = du(dst)
        again = api.merge(repo, str(base / "src"))
        added = du(dst) - size
        repo.close()
        if log_out:
            with open(log_out, "wb") as f:
                subprocess.run([sys.executable, "-m", "convgit", "-C", str(dst), "log", "--all", "--json"],
                               stdout=f, check=True)
        return {"code": os.path.dirname(convgit.__file__), "mode": mode, "new_objects": m.new_objects,
                "wall_s": round(w1 - w0, 2), "cpu_s": round(c1 - c0, 2), "again_new_objects": again.new_objects,
                "again_bytes_added": added, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}
    finally:
        shutil.rmtree(dst, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=5000)
    ap.add_argument("--keep", required=True, help="directory for the source and half stores (built once, reused)")
    ap.add_argument("--modes", default="empty,half")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--before", help="another convgit source tree, run in alternation with this one")
    ap.add_argument("--check", action="store_true", help="compare log --all --json of the merged stores across codes")
    ap.add_argument("--one", nargs=2, metavar=("MODE", "LOG_OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    base = Path(args.keep)
    if args.one:
        print(json.dumps(one(base, args.one[0], args.one[1] or None)))
        return
    base.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    build(base, args.conversations)
    print(f"stores ready under {base} ({time.perf_counter() - t:.0f} s)", flush=True)
    codes = ([("before", Path(args.before).resolve())] if args.before else []) + [("after", ROOT)]
    results: list[dict] = []
    for mode in args.modes.split(","):
        for rep in range(args.reps):
            for label, tree in codes:
                log_out = str(base / f"log-{label}-{mode}.json") if args.check and rep == 0 else ""
                env = dict(os.environ, PYTHONPATH=str(tree))
                out = subprocess.run([sys.executable, __file__, "--keep", str(base), "--one", mode, log_out],
                                     env=env, capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                r.update(label=label, rep=rep, load=os.getloadavg()[0], at=time.strftime("%H:%M:%S", time.gmtime()))
                results.append(r)
                print(json.dumps(r), flush=True)
        if args.check and len(codes) > 1:
            logs = [(base / f"log-{label}-{mode}.json").read_bytes() for label, _ in codes]
            print(f"{mode}: log --all --json {'identical' if logs[0] == logs[1] else 'DIFFERS'} "
                  f"({len(logs[0]):,} bytes)", flush=True)
    print("\n| merge | code | wall s (median) | CPU s (median) | runs (wall / CPU) |\n|---|---|---|---|---|")
    for mode in args.modes.split(","):
        for label, _ in codes:
            rs = [r for r in results if r["mode"] == mode and r["label"] == label]
            print(f"| {mode} ({rs[0]['new_objects']:,} new objects) | {label} | {statistics.median(r['wall_s'] for r in rs):.1f} | "
                  f"{statistics.median(r['cpu_s'] for r in rs):.1f} | "
                  f"{', '.join(str(r['wall_s']) for r in rs)} / {', '.join(str(r['cpu_s']) for r in rs)} |")
    out_dir = ROOT / "benchmarks" / "out"
    out_dir.mkdir(exist_ok=True)
    (out_dir / f"bench_merge-{args.conversations}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
