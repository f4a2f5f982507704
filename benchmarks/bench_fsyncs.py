"""fsyncs per call: how many fsync/fdatasync/syncfs one commit makes, and what it costs.

    .venv/bin/python benchmarks/bench_fsyncs.py                  # counts and wall times
    .venv/bin/python benchmarks/bench_fsyncs.py --before DIR     # also a checkout to compare
    .venv/bin/python benchmarks/bench_fsyncs.py --counts-only

Paths measured (each on a fresh store with a few threads, fsync on):
- ``api continuation``: ``convgit.commit`` of a thread's history + a user and an assistant
  message (a stateless call: 2 new messages and a turn), HEAD already on that thread;
- ``api new thread``: ``convgit.commit`` of a new 2-message conversation (HEAD moves);
- ``cli continuation`` / ``cli new thread``: the same through ``convgit commit -``.

Counts come from ``strace -f -y`` on one call in a child process (the derived index's own
syncs, SQLite's, are listed apart). Wall times: per-call medians of ``--calls`` calls in a
child process, the code under test and ``--before`` (a checkout of an older convgit)
interleaved round by round on the same disk. Needs strace (``apt-get install strace``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
os.environ.pop("CONVGIT_FSYNC", None)

# A child: open the store at argv[1], run ``mode`` argv[3] times; print per-call seconds.
CHILD = r"""
import json, os, subprocess, sys, time
import convgit
from convgit.repository import Repository
store, mode, n, cli = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def msgs(repo, thread):
    from convgit import graph
    from convgit.api import message_text
    tip = repo.refs.read(thread)
    out = [{"role": m.role, "content": message_text(repo, m)} for _, m in graph.iter_ancestry(repo.objects, tip)]
    return out[::-1]

times = []
for i in range(n):
    tag = f"{os.getpid()}.{i}.{time.monotonic_ns()}"
    repo = Repository.open(store)
    if mode.endswith("continuation"):
        payload = {"messages": msgs(repo, "main") + [{"role": "user", "content": f"q {tag}"},
                                                     {"role": "assistant", "content": f"a {tag}"}]}
        thread = "main"
    else:
        payload = {"messages": [{"role": "user", "content": f"new q {tag}"},
                                {"role": "assistant", "content": f"new a {tag}"}]}
        thread = None
    if mode.startswith("cli"):
        repo.close()
        args = [cli, "commit", "-"]
        if thread:
            args += ["--thread", thread]
        data = json.dumps(payload).encode()
        t = time.perf_counter()
        subprocess.run(args, input=data, check=True, stdout=subprocess.DEVNULL, cwd=os.path.dirname(store))
        times.append(time.perf_counter() - t)
        continue
    t = time.perf_counter()
    convgit.commit(repo, payload, thread=thread)
    times.append(time.perf_counter() - t)
    repo.close()
print(json.dumps(times))
"""

# --noise: another writer on the same file system dirtying pages without syncing them, which
# a syncfs must flush too (the worst case for syncfs on a shared disk).
NOISE = r"""
import os, sys, time
path, rate = sys.argv[1], float(sys.argv[2])
buf = os.urandom(1 << 20)
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
n = 0
while True:
    t = time.monotonic()
    os.pwrite(fd, buf, (n % 256) << 20)
    n += 1
    time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - t)))
"""

MODES = ("api continuation", "api new thread", "cli continuation", "cli new thread")


def make_store(parent: Path, src: Path) -> Path:
    """A store with thread ``main`` (4 messages) and 3 other threads; HEAD on main."""
    code = r"""
import sys, convgit
from pathlib import Path
repo = convgit.init(Path(sys.argv[1]) / ".convgit")
for j in range(3):
    convgit.commit(repo, {"messages": [{"role": "user", "content": f"other {j}"}]}, thread=f"t{j}")
convgit.commit(repo, {"messages": [{"role": "user", "content": f"m{i}"} for i in range(4)]}, thread="main")
print(repo.path)
"""
    out = subprocess.run([PY, "-c", code, str(parent)], check=True, capture_output=True, text=True,
                         env=_env(src), cwd=parent).stdout.strip()
    return Path(out)


def _env(src: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    env.pop("CONVGIT_FSYNC", None)
    return env


def _cli(src: Path) -> str:
    """A command running convgit's CLI from ``src``."""
    launcher = Path(tempfile.gettempdir()) / f"convgit-cli-{abs(hash(str(src)))}"
    launcher.write_text(f"#!{PY}\nimport sys\nsys.path.insert(0, {str(src)!r})\nfrom convgit.cli.entry import main\n"
                        f"sys.exit(main())\n")
    launcher.chmod(0o755)
    return str(launcher)


SYNC_RE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(fsync|fdatasync|syncfs)\((\d+)<([^>]*)>")


def count_syncs(src: Path, mode: str, work: Path) -> tuple[int, int, list[str]]:
    """(convgit's syncs, the index's (SQLite) syncs, what each of convgit's was on)."""
    d = Path(tempfile.mkdtemp(dir=work))
    store = make_store(d, src)
    # one call first (first-use effects: the index, fan-out directories), then the measured one
    subprocess.run([PY, "-c", CHILD, str(store), mode, "1", _cli(src)], check=True, env=_env(src),
                   capture_output=True, cwd=d)
    log = d / "strace.log"
    subprocess.run(["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,syncfs", "-o", str(log),
                    PY, "-c", CHILD, str(store), mode, "1", _cli(src)], check=True, env=_env(src),
                   capture_output=True, cwd=d)
    ours, index, what = 0, 0, []
    for line in log.read_text().splitlines():
        m = SYNC_RE.match(line)
        if not m:
            continue
        call, _, path = m.groups()
        if "index.sqlite" in path:
            index += 1
            continue
        ours += 1
        what.append(f"{call} {os.path.relpath(path, store) if path.startswith(str(store)) else path}")
    shutil.rmtree(d, ignore_errors=True)
    return ours, index, what


def time_calls(src: Path, mode: str, store: Path, n: int) -> list[float]:
    out = subprocess.run([PY, "-c", CHILD, str(store), mode, str(n), _cli(src)], check=True, env=_env(src),
                         capture_output=True, text=True, cwd=store.parent).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, help="a checkout of an older convgit to compare with")
    ap.add_argument("--calls", type=int, default=20, help="calls per round (wall times)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--counts-only", action="store_true")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--noise", type=float, default=0, metavar="MBPS",
                    help="while timing, another process dirties MBPS MiB/s on the same file system (unsynced)")
    args = ap.parse_args()
    if shutil.which("strace") is None:
        sys.exit("needs strace (apt-get install strace)")
    variants = {"after": REPO}
    if args.before:
        variants = {"before": args.before.resolve(), "after": REPO}
    modes = [m.strip() for m in args.modes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-fsyncs-", dir=str(REPO.parent) if os.access(REPO.parent, os.W_OK) else None))
    results: dict = collections.defaultdict(dict)
    try:
        for mode in modes:
            for name, src in variants.items():
                ours, index, what = count_syncs(src, mode, work)
                results[mode][name] = {"syncs": ours, "index_syncs": index, "what": what}
                print(f"{mode:18} {name:6} {ours:2} syncs (+{index} by SQLite): {', '.join(what)}", flush=True)
        if not args.counts_only:
            stores = {(mode, name): make_store(Path(tempfile.mkdtemp(dir=work)), src)
                      for mode in modes for name, src in variants.items()}
            samples: dict = collections.defaultdict(list)
            noise = None
            if args.noise:
                noise = subprocess.Popen([PY, "-c", NOISE, str(work / "noise.bin"), str(args.noise)])
            for r in range(args.rounds):
                for mode in modes:
                    names = list(variants) if r % 2 == 0 else list(reversed(variants))
                    for name in names:
                        samples[(mode, name)] += time_calls(variants[name], mode, stores[(mode, name)], args.calls)
            if noise is not None:
                noise.kill()
                noise.wait()
            for (mode, name), ts in samples.items():
                med = statistics.median(ts) * 1000
                results[mode][name]["median_ms"] = round(med, 2)
                results[mode][name]["p90_ms"] = round(sorted(ts)[int(len(ts) * 0.9)] * 1000, 2)
                print(f"{mode:18} {name:6} median {med:7.2f} ms  p90 {results[mode][name]['p90_ms']:7.2f} ms "
                      f"({len(ts)} calls)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("| path | " + " | ".join(f"syncs {n}" for n in variants) + " | "
          + " | ".join(f"median ms {n}" for n in variants) + " |")
    print("|---|" + "---|" * (2 * len(variants)))
    for mode in modes:
        row = results[mode]
        print(f"| {mode} | " + " | ".join(str(row[n]["syncs"]) for n in variants) + " | "
              + " | ".join(str(row[n].get("median_ms", "-")) for n in variants) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
