"""Start-up of the hot commands through installed ``convgit`` console scripts, A against B.

    python benchmarks/bench_startup_ab.py --store DIR [--rounds 15] [--valgrind] LABEL=BIN [LABEL=BIN ...]

Each BIN is a ``convgit`` console script (e.g. ``/tmp/venv-main/bin/convgit`` of a plain
``pip install`` of main, and one of this branch), run with ``-C DIR`` on a store built by
``bench_scale.build_convgit`` (docs/performance.md, "Start-up"). After one warm-up run each,
every command runs ``--rounds`` times, the scripts alternating (A B, then B A, ...), so load
from other processes hits both alike; the table gives the median wall time and the median
CPU time (user + sys, from ``wait4``) of each. ``commit -`` re-sends bench_startup's two
messages (already stored after the warm-up: nothing is written). ``--valgrind`` instead
counts the instructions each command executes once (callgrind's "I refs",
``PYTHONHASHSEED=0``): ~50x slower, but the same on a loaded machine.
``CONVGIT_GC_AUTO=0``, fsync on, HOME under the store's parent.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_startup import COMMIT_PAYLOAD  # noqa: E402

COMMANDS = {
    "-C DIR --version": ["--version"],
    "log -n 1": ["log", "-n", "1"],
    "status": ["status"],
    "search t5x": ["search", "t5x"],
    "commit -": ["commit", "-"],
    "show": ["show"],
}


def run(bin_: str, args: list[str], store: str, env: dict, wrap: list[str] = ()) -> tuple[float, float, str]:
    """(wall ms, CPU ms of the process, its stderr) of one run."""
    argv = [*wrap, bin_, "-C", store, *args]
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    p.stdin.write(COMMIT_PAYLOAD if args[:2] == ["commit", "-"] else b"")
    p.stdin.close()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)  # (not p.wait(): wait4 gives the child's CPU time)
    wall = (time.perf_counter() - t0) * 1000
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}): {err.decode()[-2000:]}")
    return wall, (ru.ru_utime + ru.ru_stime) * 1000, err.decode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="a store directory (bench_scale's)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--valgrind", action="store_true", help="count instructions (one run per command) instead")
    ap.add_argument("bins", nargs="+", metavar="LABEL=BIN")
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.bins]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    home = str(Path(args.store).resolve().parent / "bench-home")
    env.update(HOME=home, XDG_DATA_HOME=home + "/data", XDG_CONFIG_HOME=home + "/config", NO_COLOR="1",
               CONVGIT_GC_AUTO="0", PYTHONHASHSEED="0")
    for _, b in bins:
        for cmd in COMMANDS.values():
            run(b, cmd, args.store, env)
    if args.valgrind:
        wrap = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        print("| command | " + " | ".join(f"{lab}: M instructions" for lab, _ in bins) + " |")
        print("|---|" + "---|" * len(bins))
        for name, cmd in COMMANDS.items():
            counts = []
            for _, b in bins:
                err = run(b, cmd, args.store, env, wrap)[2]
                counts += [int(line.split()[-1].replace(",", "")) for line in err.splitlines() if "Collected" in line]
            print(f"| `{name}` | " + " | ".join(f"{c / 1e6:.1f}" for c in counts) + " |")
        return
    wall = {(lab, n): [] for lab, _ in bins for n in COMMANDS}
    cpu = {k: [] for k in wall}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds):
        for name, cmd in COMMANDS.items():
            for lab, b in (bins if r % 2 == 0 else bins[::-1]):
                w, c, _ = run(b, cmd, args.store, env)
                wall[lab, name].append(w)
                cpu[lab, name].append(c)
    print(f"{args.store}: {args.rounds} rounds, load average {load0:.2f} -> {os.getloadavg()[0]:.2f}\n")
    print("| command | " + " | ".join(f"{lab}: wall ms | {lab}: CPU ms" for lab, _ in bins) + " |")
    print("|---|" + "---|---|" * len(bins))
    for name in COMMANDS:
        cells = [f"{statistics.median(wall[lab, name]):.1f} | {statistics.median(cpu[lab, name]):.1f}" for lab, _ in bins]
        print(f"| `{name}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
