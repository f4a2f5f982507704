"""Commands on a store whose pages are not in the page cache: time, and bytes read from disk.

    .venv/bin/python benchmarks/bench_cold.py --sizes 1000,100000 --reps 9
    git archive HEAD~1 convgit | tar -x -C /tmp/before
    .venv/bin/python benchmarks/bench_cold.py --sizes 100000 --before /tmp/before --reps 15

A store used now and then is read from disk: this machine's page cache shrinks by itself
(hundreds of MB a minute with no memory pressure), and a laptop's is taken by everything
else. What a command costs then depends on how many bytes it makes the kernel read, not
only on its CPU. For each size the script builds bench_scale's store (N conversations of 4
messages, fsync off while building; ``--gc``: then ``gc --auto``, as the command line would
have run it, which merges the build's packs into one), and runs each command as a whole
process, ``--reps`` times, every run on a store whose pages were dropped first
(``posix_fadvise(DONTNEED)`` on each of its files, after a sync) and, with ``--warm``, also
right after a run of the same command (its pages cached). With ``--before DIR`` (a convgit
source tree) the two codes alternate, run by run (A B B A ...), on the same store.

Reported per command: the median wall time and the median bytes the process read from
storage (the child's ``ru_inblock``: page faults on mapped files and their read-ahead
included). Writes benchmarks/out/cold.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_scale import build_convgit, continuation, evict_file  # noqa: E402

OUT = HERE / "out"
COMMANDS = {
    "commit -": ["commit", "-"],
    "log -n 1": ["log", "-n", "1"],
    "status": ["status"],
    "search": ["search", "t77x"],
}


def evict(store: Path) -> None:
    """Drop the page-cache pages of every file of ``store`` (written back first)."""
    os.sync()
    for root, _, files in os.walk(store):
        for f in files:
            evict_file(Path(root) / f, sync=False)


def run(argv: list[str], env: dict, stdin: str | None) -> tuple[float, int]:
    """(wall ms, bytes read from storage) of one command, as a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "convgit", *argv], env=env, cwd="/", input=stdin,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ms = (time.perf_counter() - t0) * 1000
    if p.returncode:
        raise SystemExit(f"{argv}: exit {p.returncode}: {p.stderr}")
    return ms, (resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock - before) * 512


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,100000", help="store sizes in threads (comma-separated)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--gc", action="store_true", help="gc --auto each store after building it (its packs merged)")
    ap.add_argument("--warm", action="store_true", help="also time each command with its pages cached")
    ap.add_argument("--before", type=Path, help="a convgit source tree run in alternation with this one")
    ap.add_argument("--commands", default=",".join(COMMANDS), help="which commands (comma-separated)")
    ap.add_argument("--out", type=Path, default=OUT / "cold.json")
    args = ap.parse_args()
    codes = {"this": str(HERE.parent)}
    if args.before:
        codes = {"before": str(args.before.resolve()), "after": str(HERE.parent)}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {"CONVGIT_GC_AUTO": "0"}
    for path in codes.values():  # (bytecode cached: PYTHONDONTWRITEBYTECODE=1 would time compiling)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(path) / "convgit")], check=False,
                       stdout=subprocess.DEVNULL)
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="convgit-cold-") as td:
        for n in (int(x) for x in args.sizes.split(",")):
            store = Path(td) / f"c{n}"
            build_convgit(store, n)
            if args.gc:
                subprocess.run([sys.executable, "-m", "convgit", "gc", "--auto", "-q"], cwd="/", check=True,
                               env=base_env | {"CONVGIT_DIR": str(store / ".convgit"), "PYTHONPATH": codes[list(codes)[-1]]})
            k = 0
            for cname in args.commands.split(","):
                argv = COMMANDS[cname]
                cells: dict = {}
                for r in range(args.reps):
                    order = list(codes.items()) if r % 2 == 0 else list(codes.items())[::-1]
                    for code, path in order:
                        for mode in ("cold", "warm") if args.warm else ("cold",):
                            k += 1
                            stdin = json.dumps(continuation((k * 7919 + 11) % n, 5000 + k)) if cname == "commit -" else None
                            env = base_env | {"CONVGIT_DIR": str(store / ".convgit"), "PYTHONPATH": path}
                            if mode == "cold":
                                evict(store)
                            cells.setdefault((code, mode), []).append(run(argv, env, stdin))
                for (code, mode), xs in cells.items():
                    ms = statistics.median(x[0] for x in xs)
                    kb = statistics.median(x[1] for x in xs) / 1024
                    results.setdefault(str(n), {}).setdefault(cname, {})[f"{code} {mode}"] = {"ms": round(ms, 1), "read_kb": round(kb)}
                    print(f"| {n:,} | {cname} | {code} | {mode} | {ms:.1f} | {kb:,.0f} |", flush=True)
            shutil.rmtree(store)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"sizes": args.sizes, "reps": args.reps, "gc": args.gc, "results": results}, indent=2))


if __name__ == "__main__":
    main()
