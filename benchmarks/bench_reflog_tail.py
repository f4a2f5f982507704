"""What a commit to a thread costs as the thread's reflog grows (issue 12: an agent thread
recorded by ``convgit serve`` gets a reflog line per call).

    .venv/bin/python benchmarks/bench_reflog_tail.py --lengths 10,1000,10000 --before /tmp/main

For each length L: a store (fsync on) whose thread ``long`` has a reflog of L lines
(``RefStore.update`` at the same tip with a turn: what a retried call records; ~170 bytes a
line, as a serve call's), indexed; optionally packed (``--packed``: gc's pack_refs,
the reflog in ``packed-logs``). Then ``--commits`` commits continue the thread by 2 messages
each (the history stays small: only the reflog is long), timed one by one: wall and CPU
milliseconds per commit (``time.process_time``: the figure a loaded machine disturbs least),
the CPU of the index's update in it (``IndexWriter.record_moves``), and the bytes the process read (``/proc/self/io`` rchar). ``--before DIR`` runs another
convgit source tree (``git archive main | tar -x -C DIR``) on its own copy of the same store,
in alternation with this one (A B A B), ``--rounds`` times; medians.
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
ROOT = HERE.parent

WORKER = r"""
import json, os, sys, time
import convgit
from convgit.repository import Repository
store, commits = sys.argv[1], int(sys.argv[2])
def rchar():
    for ln in open("/proc/self/io"):
        if ln.startswith("rchar:"):
            return int(ln.split()[1])
def conv(n):
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"long message {i}"} for i in range(n)]
repo = Repository.open(store)
W = type(repo.index)
real = W.record_moves
spent = [0.0]
def timed(*a, **k):  # the index's update after the move: its CPU time
    c = time.process_time()
    try:
        return real(*a, **k)
    finally:
        spent[0] += time.process_time() - c
W.record_moves = timed
wall, cpu, read, index = [], [], [], []
for k in range(commits):
    spent[0] = 0.0
    r0, w0, c0 = rchar(), time.perf_counter(), time.process_time()
    r = convgit.commit(repo, {"messages": conv(6 + 2 * k)}, thread="long")
    wall.append((time.perf_counter() - w0) * 1e3); cpu.append((time.process_time() - c0) * 1e3); read.append(rchar() - r0)
    index.append(spent[0] * 1e3)
    assert r.thread == "long" and r.appended_messages == 2, r
print(json.dumps({"wall": wall, "cpu": cpu, "read": read, "index": index, "convgit": convgit.__file__}))
"""


def build(path: Path, length: int, packed: bool) -> Path:
    """A store whose thread ``long`` has ``length`` reflog lines, indexed (and packed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = r"""
import sys, convgit
from convgit.repository import Repository
path, n, packed = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
repo = convgit.init(path)
(repo.path / "config.toml").write_text("[core]\nfsync = false\n"); repo.close()
repo = Repository.open(repo.path)
def conv(k):
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"long message {i}"} for i in range(k)]
t1 = convgit.commit(repo, {"messages": conv(2)}, thread="long").tip
t2 = convgit.commit(repo, {"messages": conv(4)}, thread="long").tip
turn = repo.refs.read_log("long")[-1].turn
for i in range(max(0, n - 2)):  # a retried call's move: the tip stays, its turn is recorded
    repo.refs.update("long", t2, expected=t2, turn=turn, message=f"serve: call {i:08d}")
repo.index.refresh_if_changed()
if packed:
    with repo.exclusive_lock():
        repo.pack_refs()
(repo.path / "config.toml").write_text("[core]\nfsync = true\n")
print(len(repo.refs.log_bytes("long")))
"""
    out = subprocess.run([sys.executable, "-c", code, str(path), str(length), "1" if packed else "0"], env=env,
                         check=True, capture_output=True, text=True)
    return path / ".convgit", int(out.stdout.strip())


def run(code: Path, store: Path, commits: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    env["PYTHONPATH"] = str(code)
    env["CONVGIT_GC_AUTO"] = "0"
    out = subprocess.run([sys.executable, "-c", WORKER, str(store), str(commits)], env=env, check=True, cwd=store.parent,
                         capture_output=True, text=True)
    got = json.loads(out.stdout)
    assert got["convgit"].startswith(str(code)), got["convgit"]
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="10,1000,10000")
    ap.add_argument("--commits", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--packed", action="store_true", help="the reflog packed (packed-logs) before the commits")
    ap.add_argument("--before", default=None, help="another convgit source tree, run in alternation")
    a = ap.parse_args()
    codes = {"after": ROOT}
    if a.before:
        codes = {"before": Path(a.before).resolve(), "after": ROOT}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for length in [int(x) for x in a.lengths.split(",")]:
            base, size = build(tmp / f"base{length}", length, a.packed)
            got: dict[str, list] = {name: [] for name in codes}
            for rnd in range(a.rounds):
                for name, code in codes.items():
                    work = tmp / f"w-{name}-{rnd}"
                    shutil.copytree(base.parent, work, symlinks=True)
                    got[name].append(run(code, work / ".convgit", a.commits))
                    shutil.rmtree(work)
            for name in codes:
                med = lambda key: statistics.median([statistics.median(r[key]) for r in got[name]])  # noqa: E731
                rows.append({"length": length, "reflog_bytes": size, "code": name, "wall_ms": round(med("wall"), 2),
                             "cpu_ms": round(med("cpu"), 2), "index_cpu_ms": round(med("index"), 3),
                             "read_bytes": int(med("read"))})
                print(json.dumps(rows[-1]), flush=True)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / f"reflog_tail-{int(time.time())}.json").write_text(json.dumps(rows, indent=1))
    print("\n| reflog lines | reflog bytes | code | wall ms/commit | CPU ms/commit | of it the index's update | bytes read/commit |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['length']:,} | {r['reflog_bytes']:,} | {r['code']} | {r['wall_ms']} | {r['cpu_ms']} | {r['index_cpu_ms']} | {r['read_bytes']:,} |")


if __name__ == "__main__":
    main()
