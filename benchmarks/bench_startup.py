"""Start-up cost of each CLI command: wall time and what it imports.

    .venv/bin/python benchmarks/bench_startup.py [--runs 15] [--json] [--top 10] [--keep]

Builds a small store in a temp directory (init, 20 committed conversations, one small
`messages` JSONL file to import), then runs every command below ``--runs`` times,
interleaved (run 1 of every command, then run 2 of every command, ...), so a burst of load
from other processes on the machine hits all commands alike. Each command is run once before
timing (the first read after a commit may refresh the index; that is not start-up).

For every command it reports the median wall time of ``python -m convgit <args>`` (min and
max beside it), and one ``python -X importtime -m convgit <args>`` run summarised: the total
import time (sum of "self"), the number of modules imported, and the top ``--top`` modules
by cumulative time, with a flag for the known heavy ones (pydantic, rich, sqlite3,
zstandard, convgit.api, convgit.index, convgit.ingest). ``python -c pass`` is the floor.

Results: a markdown table on stdout (or one JSON document with ``--json``) and
benchmarks/out/startup.json. The store is removed afterwards unless ``--keep``.
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
REPO = HERE.parent
OUT = HERE / "out"
PY = sys.executable

# Modules whose presence on a path is worth flagging (prefix match on the dotted name).
HEAVY = ("pydantic", "pydantic_core", "rich", "sqlite3", "zstandard", "convgit.api", "convgit.index",
         "convgit.ingest", "convgit.importer", "typer._adapters")

COMMIT_PAYLOAD = json.dumps({"messages": [
    {"role": "user", "content": "What does foo mean in examples?"},
    {"role": "assistant", "content": "A placeholder name, like bar and baz."},
]}).encode()


def commands() -> dict[str, tuple[list[str], bytes | None]]:
    """name -> (arguments after `convgit`, stdin bytes or None)."""
    return {
        "--version": (["--version"], None),
        "--help": (["--help"], None),
        "log -n 1": (["log", "-n", "1"], None),
        "status": (["status"], None),
        "search foo": (["search", "foo"], None),
        "commit -": (["commit", "-"], COMMIT_PAYLOAD),
        "threads": (["threads"], None),
        "show": (["show"], None),
        "import FILE": (["import", "small.jsonl"], None),
    }


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"),
               NO_COLOR="1", PYTHONDONTWRITEBYTECODE="")
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    return env


def build_store(root: Path, env: dict[str, str]) -> Path:
    store = root / "store"
    store.mkdir()
    subprocess.run([PY, "-m", "convgit", "init"], cwd=store, env=env, check=True, capture_output=True)
    files = []
    for i in range(20):
        f = root / f"conv{i}.json"
        f.write_text(json.dumps({"messages": [
            {"role": "user", "content": f"Question {i}: explain foo number {i} in a sentence."},
            {"role": "assistant", "content": f"Foo {i} is a placeholder; bar {i} follows it."},
            {"role": "user", "content": f"And baz {i}?"},
            {"role": "assistant", "content": f"Baz {i} comes third, after foo and bar."},
        ]}))
        files.append(str(f))
    subprocess.run([PY, "-m", "convgit", "commit", *files], cwd=store, env=env, check=True, capture_output=True)
    with open(store / "small.jsonl", "w") as f:
        for i in range(3):
            f.write(json.dumps({"messages": [
                {"role": "user", "content": f"imported question {i} about foo"},
                {"role": "assistant", "content": f"imported answer {i}"},
            ]}) + "\n")
    return store


def _run(argv: list[str], stdin: bytes | None, cwd: Path, env: dict[str, str], extra: list[str] = ()) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run([PY, *extra, "-m", "convgit", *argv], cwd=cwd, env=env, input=stdin or b"",
                       capture_output=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"convgit {' '.join(argv)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    return dt * 1000, p.stderr.decode()


def _bare(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([PY, "-c", "pass"], env=env, check=True)
    return (time.perf_counter() - t0) * 1000


def parse_importtime(stderr: str, top: int) -> dict:
    """Summarise `-X importtime` lines: total self time, module count, top-N by cumulative."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        try:  # "import time:       123 |        456 |   package.module"
            self_us, cum_us, name = line.split(":", 1)[1].split("|")
            rows.append((name.strip(), int(self_us), int(cum_us)))
        except ValueError:
            continue
    names = [r[0] for r in rows]
    heavy = sorted({h for h in HEAVY for n in names if n == h or n.startswith(h + ".")})
    best = sorted(rows, key=lambda r: -r[2])[:top]
    return {
        "total_self_ms": round(sum(r[1] for r in rows) / 1000, 1),
        "modules": len(rows),
        "heavy": heavy,
        "top": [{"module": n, "cumulative_us": c, "self_us": s} for n, s, c in best],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="timed runs per command (default 15)")
    ap.add_argument("--top", type=int, default=10, help="modules listed per command by cumulative import time")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of markdown")
    ap.add_argument("--only", action="append", help="run only this command (repeatable), e.g. --only status")
    ap.add_argument("--keep", action="store_true", help="keep the temp store")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="convgit-bench-startup-"))
    try:
        env = _env(root / "home")
        store = build_store(root, env)
        cmds = {k: v for k, v in commands().items() if not args.only or k in args.only}
        for argv, stdin in cmds.values():  # warm-up: index refresh, bytecode caches
            _run(argv, stdin, store, env)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        times["python -c pass"] = []
        for _ in range(args.runs):
            times["python -c pass"].append(_bare(env))
            for name, (argv, stdin) in cmds.items():
                times[name].append(_run(argv, stdin, store, env)[0])
        imports = {name: parse_importtime(_run(argv, stdin, store, env, ["-X", "importtime"])[1], args.top)
                   for name, (argv, stdin) in cmds.items()}
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "convgit"], cwd=REPO,
                                    capture_output=True, text=True).stdout.strip())
        src = subprocess.run([PY, "-c", "import convgit; print(convgit.__file__)"], cwd=store, env=env, capture_output=True,
                             text=True).stdout.strip()
        if not Path(src).resolve().is_relative_to(REPO):  # e.g. PYTHONPATH=an older checkout
            rev, dirty = f"loaded from {Path(src).parent}", False
        doc = {
            "revision": rev + ("+changes" if dirty else ""),
            "python": sys.version.split()[0],
            "runs": args.runs,
            "loadavg_1m": os.getloadavg()[0],
            "commands": {
                name: {"median_ms": round(statistics.median(ts), 1), "min_ms": round(min(ts), 1),
                       "max_ms": round(max(ts), 1), **({"imports": imports[name]} if name in imports else {})}
                for name, ts in times.items()
            },
        }
    finally:
        if args.keep:
            print(f"store kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "startup.json").write_text(json.dumps(doc, indent=2) + "\n")
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"convgit {doc['revision']}, Python {doc['python']}, {args.runs} interleaved runs, "
          f"load average {doc['loadavg_1m']:.2f}\n")
    print("| command | median ms | min-max ms | import ms (self sum) | modules | heavy modules imported |")
    print("|---|---|---|---|---|---|")
    for name, r in doc["commands"].items():
        im = r.get("imports")
        cols = [f"{im['total_self_ms']}", str(im["modules"]), ", ".join(im["heavy"]) or "-"] if im else ["", "", ""]
        print(f"| `{name}` | {r['median_ms']} | {r['min_ms']}-{r['max_ms']} | " + " | ".join(cols) + " |")
    for name, r in doc["commands"].items():
        if "imports" not in r:
            continue
        print(f"\n`python -X importtime -m convgit {name}`: top {args.top} by cumulative us")
        for t in r["imports"]["top"]:
            print(f"  {t['cumulative_us']:>8}  {t['module']}")


if __name__ == "__main__":
    main()
