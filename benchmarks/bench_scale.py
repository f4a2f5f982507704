"""The write path at several store sizes, with `llm` 0.36 as a peer in the same run.

    .venv/bin/python benchmarks/bench_scale.py                      # 1,000 and 10,000 threads
    .venv/bin/python benchmarks/bench_scale.py --sizes 1000,10000,100000
    .venv/bin/python benchmarks/bench_scale.py --no-llm --rounds 5  # quick
    .venv/bin/python benchmarks/bench_scale.py --sizes 1000,100000 --cold --gc  # read from disk, packs merged
    .venv/bin/python benchmarks/bench_scale.py --sizes 1000,10000,100000 --warm  # both tools' files in memory

For each size it builds a store of N conversations (4 messages each; fsync off while
building, as the issue asks) and an llm logs.db of the same N conversations (through llm's
own ``log_to_db``, benchmarks/llm_driver.py). Then, with fsync on, it times in rounds,
interleaved across sizes and tools (A B A B, so the machine's noise falls on all alike):

- ``api``: one stateless call through ``convgit.commit`` (the thread's whole history
  re-sent, plus a new question and its answer: a fast-forward of that thread), per call;
- ``llm``: the same call logged by llm (``model.prompt(messages=...)`` + ``log_to_db``);
- ``cli``: ``convgit commit -`` of the same kind of payload, and ``log -n 1``, ``status``,
  ``search`` (a word one conversation holds) as commands a person runs (whole process:
  start-up included).

Reports medians per size, the ratio of the largest store to the smallest, and convgit/llm
per size. Writes benchmarks/out/scale.json. Nothing is written into the repository else.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
LLM_VENV = HERE / ".venv-llm"
LLM_SPEC = "llm==0.36"


def conv(i: int) -> list[dict]:
    return [
        {"role": "user", "content": f"question {i}: how do I keep a store of {i} threads fast? (ticket t{i}x)"},
        {"role": "assistant", "content": f"answer {i}: read only what changed since you last looked."},
        {"role": "user", "content": f"follow-up {i}: and after a crash?"},
        {"role": "assistant", "content": f"answer {i}b: a journal names what moved; a reboot means read everything once."},
    ]


def build_convgit(path: Path, n: int) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    env["CONVGIT_FSYNC"] = "0"
    code = f"""
import convgit, sys, time
sys.path.insert(0, {str(HERE)!r})
from bench_scale import conv
repo = convgit.init({str(path)!r})
t0 = time.perf_counter()
items = []
for i in range({n}):
    items.append({{"messages": conv(i)[:-1], "response": conv(i)[-1], "model": "m"}})
    if len(items) == 2000:
        convgit.commit_many(repo, items); items = []
if items:
    convgit.commit_many(repo, items)
repo.index.refresh()
print(time.perf_counter() - t0)
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def ensure_llm() -> Path | None:
    py = LLM_VENV / "bin" / "python"
    if py.exists():
        return py
    try:
        subprocess.run([sys.executable, "-m", "venv", str(LLM_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", LLM_SPEC], check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"note: no llm venv ({e}); llm figures skipped", file=sys.stderr)
        return None
    return py


def llm_drive(py: Path, corpus: list, db: Path, tmp: Path, env: dict) -> dict:
    cp = tmp / f"corpus-{time.monotonic_ns()}.json"
    cp.write_text(json.dumps(corpus))
    p = subprocess.run([str(py), str(HERE / "llm_driver.py"), "stateless", str(cp), str(db)], env=env,
                       check=True, capture_output=True, text=True)
    cp.unlink()
    return json.loads(p.stdout)


def evict_file(path: Path, *, sync: bool = True) -> None:
    """Drop one file's pages from the page cache (written back first, with ``sync``)."""
    if sync:
        os.sync()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm_path(path: Path) -> int:
    """Read every regular file under ``path`` (or ``path`` itself) into the page cache; the bytes read."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    total = 0
    for f in files:
        try:
            with open(f, "rb", buffering=0) as fh:
                while True:
                    b = fh.read(1 << 20)
                    if not b:
                        break
                    total += len(b)
        except OSError:
            continue
    return total


def continuation(i: int, r: int) -> dict:
    hist = conv(i)
    return {"messages": hist + [{"role": "user", "content": f"round {r}: one more question for thread {i}"}],
            "response": {"role": "assistant", "content": f"round {r}: one more answer"}, "model": "m"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000", help="store sizes in threads (comma-separated)")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    ap.add_argument("--calls", type=int, default=10, help="API / llm calls per size per round")
    ap.add_argument("--no-llm", action="store_true")
    ap.add_argument("--no-cli", action="store_true")
    ap.add_argument("--cold", action="store_true",
                    help="drop the stores' and logs.dbs' pages from the page cache before each size's calls, every "
                         "round (benchmarks/bench_cold.py's evict): a store read from disk, not whatever the "
                         "machine's cache kept (docs/performance.md, session 13)")
    ap.add_argument("--warm", action="store_true",
                    help="read every file of each size's store and logs.db before its calls, every round: both "
                         "tools timed with their pages in memory (the state of a store in daily use), whatever "
                         "the page cache dropped meanwhile (building the 100,000-conversation logs.db takes minutes)")
    ap.add_argument("--gc", action="store_true",
                    help="gc --auto each built store (its packs merged, as the command line would have left it)")
    ap.add_argument("--out", type=Path, default=OUT / "scale.json")
    args = ap.parse_args()
    if args.cold and args.warm:
        ap.error("--cold and --warm are opposites: give one")
    sizes = [int(s) for s in args.sizes.split(",")]
    os.environ.pop("CONVGIT_FSYNC", None)  # timed with fsync on (the store default)
    import convgit

    res: dict = {"sizes": sizes, "rounds": args.rounds, "calls": args.calls, "cold": args.cold, "warm": args.warm,
                 "gc": args.gc,
                 "build_s": {}, "api_ms": {}, "llm_ms": {}, "cli_ms": {}, "api_round_ms": {}}
    with tempfile.TemporaryDirectory(prefix="convgit-scale-") as td:
        tmp = Path(td)
        py = None if args.no_llm else ensure_llm()
        llm_env = dict(os.environ, LLM_USER_PATH=str(tmp / "llm-user"))
        repos = {}
        for n in sizes:
            res["build_s"][n] = {"convgit": round(build_convgit(tmp / f"c{n}", n), 2)}
            repos[n] = convgit.open_repo(tmp / f"c{n}" / ".convgit")
            if args.gc:
                convgit.gc(repos[n], auto=True)
            if py is not None:
                t0 = time.perf_counter()
                corpus = [conv(i) for i in range(n)]
                llm_drive(py, corpus, tmp / f"llm{n}.db", tmp, llm_env)
                res["build_s"][n]["llm"] = round(time.perf_counter() - t0, 2)
            print(f"built {n}: {res['build_s'][n]}", file=sys.stderr)
        used = {n: 0 for n in sizes}

        def pick(n: int) -> int:
            """The next thread to continue: every call a different one (a coprime stride)."""
            used[n] += 1
            return used[n] * 7919 % n

        api = {n: [] for n in sizes}
        llm_t = {n: [] for n in sizes}
        cli: dict = {n: {k: [] for k in ("commit", "log -n 1", "status", "search")} for n in sizes}
        # No background gc from the timed `commit -`: on the 100,000-thread store (50 packs of the
        # build) the first one would start a gc --auto that holds the store lock for minutes, and
        # every later call would time the wait for it (or fail `locked` after core.lock_timeout).
        # Bytecode cached as an installed package has it (pip compiles it at install): with
        # PYTHONDONTWRITEBYTECODE=1 in the environment (this machine sets it), every command
        # compiled convgit's modules from source again, ~150 ms of each CLI figure before.
        cli_env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {
            "CONVGIT_GC_AUTO": "0", "PYTHONDONTWRITEBYTECODE": ""}
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(convgit.__file__).parent)], check=False)
        for r in range(args.rounds):
            for n in sizes:
                repo = repos[n]
                if args.cold:
                    from bench_cold import evict

                    evict(tmp / f"c{n}")
                    if (tmp / f"llm{n}.db").exists():
                        evict_file(tmp / f"llm{n}.db")
                if args.warm:
                    warm_path(tmp / f"c{n}")
                    if (tmp / f"llm{n}.db").exists():
                        warm_path(tmp / f"llm{n}.db")
                ts = []
                for c in range(args.calls):
                    i = pick(n)
                    t0 = time.perf_counter()
                    out = convgit.commit(repo, continuation(i, r))
                    ts.append((time.perf_counter() - t0) * 1000)
                    assert out.appended_messages == 2, out
                api[n].append(statistics.median(ts))
                if py is not None:
                    corpus = [continuation(pick(n), r) for c in range(args.calls)]
                    corpus = [d["messages"] + [d["response"]] for d in corpus]
                    doc = llm_drive(py, corpus, tmp / f"llm{n}.db", tmp, llm_env)
                    llm_t[n].append(doc["log_to_db_s"] * 1000 / doc["calls"])
                if not args.no_cli:
                    store = str(tmp / f"c{n}" / ".convgit")
                    env = dict(cli_env, CONVGIT_DIR=store)
                    payload = json.dumps(continuation(pick(n), 1000 + r))
                    for key, argv, inp in (("commit", ["commit", "-"], payload), ("log -n 1", ["log", "-n", "1"], None),
                                           ("status", ["status"], None), ("search", ["search", f"t{(r * 7 + 5) % n}x"], None)):
                        t0 = time.perf_counter()
                        subprocess.run([sys.executable, "-m", "convgit", *argv], env=env, input=inp, text=True,
                                       check=True, capture_output=True)
                        cli[n][key].append((time.perf_counter() - t0) * 1000)
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        for repo in repos.values():
            repo.close()
    med = lambda xs: round(statistics.median(xs), 2) if xs else None  # noqa: E731
    for n in sizes:
        res["api_round_ms"][n] = [round(x, 2) for x in api[n]]  # (the rounds' medians: a trend is a cache warming)
        res["api_ms"][n] = med(api[n])
        res["llm_ms"][n] = med(llm_t[n])
        res["cli_ms"][n] = {k: med(v) for k, v in cli[n].items()}
    lo, hi = sizes[0], sizes[-1]
    print(f"\n| threads | convgit API call ms | llm log_to_db ms | convgit/llm | CLI commit - ms | log -n 1 ms | status ms | search ms |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        a, b, c = res["api_ms"][n], res["llm_ms"][n], res["cli_ms"][n]
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"| {n:,} | {a} | {b if b is not None else '-'} | {ratio} | {c['commit']} | {c['log -n 1']} | {c['status']} | {c['search']} |")
    if len(sizes) > 1:
        res["api_ratio_largest_smallest"] = round(res["api_ms"][hi] / res["api_ms"][lo], 2)
        print(f"\nAPI call, {hi:,} / {lo:,} threads: {res['api_ratio_largest_smallest']}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
