"""Search, log and status at scale, with Simon Willison's `llm` 0.36 as a peer on a small corpus.

    .venv/bin/python benchmarks/bench_search.py build  [--messages 1000000] [--store DIR]
    .venv/bin/python benchmarks/bench_search.py run    [--store DIR] [--no-llm]
    .venv/bin/python benchmarks/bench_search.py all    (build, then run)

``build`` makes a synthetic store (default: 1,000,000 messages in 100,000 threads; families of
10 threads share a 4-message prefix, so 1,360,000 message references are stored as 1,000,000
messages) with fsync off (a throw-away store), plus one 1,000-message thread ``deep``. It is
kept (default /tmp/convgit-bench-search/store-<N>) so ``run`` can be repeated.

``run`` measures, on that store: the index rebuild (time, size, bytes per message), search
top-20 for several query shapes (in-process and as a process), ``log --json`` of the
1,000-message thread, ``log --all -n 0 --json`` streaming (time to first row, rows/s, peak
RSS), ``status``; then the 1,000 x 10 corpus side by side with ``llm`` (list everything as
JSON, search, start-up). Results: a markdown table on stdout and benchmarks/out/search.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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
LLM_VENV = HERE / ".venv-llm"
CONVGIT = [sys.executable, "-m", "convgit"]
T0 = 1_650_000_000_000  # 2022-04-15: turns are spread over the two years after it

os.environ["CONVGIT_FSYNC"] = "0"  # synthetic stores only; never a user's store

import convgit  # noqa: E402
from convgit.repository import Repository  # noqa: E402

# -- the synthetic corpus -------------------------------------------------------------------

_SYL = ("ka ri to na me lo su vi de pa ne ro mi ta ze bu fo gi ha jo ku la mo ni pe ra se "
        "ti vo wa ya zu an el in on ul ar er ir or ur").split()
MODELS = ["gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet", "o3-mini", "llama3.2", "gemini-2.0-flash"]
SOURCES = ["chatgpt", "claude", "llm", "api"]
# Planted terms with known frequencies, so search figures are for known result-set sizes.
RARE = "zyzzyva"          # in 20 user messages
MEDIUM = "quokka"         # in ~0.2% of messages
PHRASE = ("velvet", "thunder")  # the phrase in ~0.05% of messages (the words also apart)


def vocabulary(n: int = 40_000, seed: int = 7) -> tuple[list[str], list[float]]:
    rng = random.Random(seed)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        w = "".join(rng.choice(_SYL) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    cum, acc = [], 0.0
    for i in range(n):
        acc += 1.0 / (i + 10)  # Zipf-like: a few very common words, a long tail
        cum.append(acc)
    return words, cum


class Corpus:
    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.words, self.cum = vocabulary()
        self.rare_left = 20

    def text(self, n: int, role: str) -> str:
        rng = self.rng
        ws = rng.choices(self.words, cum_weights=self.cum, k=n)
        r = rng.random()
        if r < 0.002:
            ws[rng.randrange(n)] = MEDIUM
        elif r < 0.0025:
            i = rng.randrange(max(1, n - 1))
            ws[i:i + 2] = list(PHRASE)
        elif r < 0.003:
            ws[rng.randrange(n)] = PHRASE[rng.randrange(2)]
        if role == "user" and self.rare_left and rng.random() < 0.0001:
            ws[rng.randrange(n)] = RARE
            self.rare_left -= 1
        if r > 0.995:  # a little non-ASCII: accents, CJK, emoji
            ws.append(rng.choice(["café crème", "東京タワー", "naïve façade", "🎉 fiesta", "Überprüfung", "데이터베이스"]))
        s = " ".join(ws)
        if role == "assistant" and rng.random() < 0.15:
            s += "\n\n```python\nprint(%r)\n```\n" % ws[0]
        return s

    def message(self, role: str) -> dict:
        n = self.rng.randint(8, 30) if role == "user" else self.rng.randint(20, 90)
        return {"role": role, "content": self.text(n, role)}

    def family(self, f: int, threads: int = 10) -> list[dict]:
        """``threads`` conversations sharing a 4-message prefix: 100 stored messages."""
        rng = self.rng
        prefix = [self.message("user"), self.message("assistant"), self.message("user"), self.message("assistant")]
        out = []
        for k in range(threads):
            extra = [self.message("user" if i % 2 == 0 else "assistant") for i in range(10 if k < 8 else 8)]
            if rng.random() < 0.05:  # a turn that used a tool
                call = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call{f}_{k}", "type": "function",
                     "function": {"name": "search_web", "arguments": json.dumps({"q": extra[0]["content"][:30]})}}]}
                extra = [extra[0], call, {"role": "tool", "tool_call_id": f"call{f}_{k}", "content": "3 results"}] + extra[1:-2]
            msgs = prefix + extra
            started = T0 + (f * 10 + k) * 630_720  # ~2 years over 100,000 threads
            out.append({
                "messages": msgs[:-1], "response": msgs[-1],
                "model": MODELS[(f + k) % len(MODELS)], "source": SOURCES[f % len(SOURCES)],
                "started_at": started, "duration_ms": 1000 + (f % 7) * 100,
                "usage": {"input_tokens": 10 * len(msgs), "output_tokens": 50 + k},
            })
        return out


def build(store: Path, messages: int, chunk_threads: int = 25_000) -> dict:
    """A store of about ``messages`` messages (families of 10 threads, 100 messages each)."""
    if store.exists():
        shutil.rmtree(store)
    store.mkdir(parents=True)
    repo = convgit.init(store)
    (repo.path / "config.toml").write_text("[core]\nfsync = false\n")
    repo.close()
    repo = Repository.open(repo.path)
    corpus = Corpus()
    families = max(1, messages // 100)
    t0 = time.perf_counter()
    done = 0
    for start in range(0, families, chunk_threads // 10):
        items = []
        for f in range(start, min(families, start + chunk_threads // 10)):
            items.extend(corpus.family(f))
        convgit.commit_many(repo, items, now_ms=T0)
        done += len(items)
        print(f"  {done} threads, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    deep = [corpus.message("user" if i % 2 == 0 else "assistant") for i in range(1000)]
    convgit.commit(repo, {"messages": deep, "model": "gpt-4o", "started_at": T0 + 10**11}, thread="deep")
    secs = time.perf_counter() - t0
    n = repo.index.db.execute("SELECT count(*) FROM messages").fetchone()[0]
    repo.close()
    info = {"messages": n, "threads": done + 1, "build_s": round(secs, 1), "rare_planted": 20 - corpus.rare_left}
    (store / "bench-store.json").write_text(json.dumps(info))
    return info


def default_store(messages: int) -> Path:
    return Path(tempfile.gettempdir()) / "convgit-bench-search" / f"store-{messages}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["build", "run", "all"])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--store", type=Path)
    ap.add_argument("--no-llm", action="store_true")
    ap.add_argument("--skip-rebuild", action="store_true", help="measure the index as it is")
    args = ap.parse_args()
    store = args.store or default_store(args.messages)
    if args.step in ("build", "all"):
        print(json.dumps(build(store, args.messages)))
    if args.step in ("run", "all"):
        run(store, llm=not args.no_llm, skip_rebuild=args.skip_rebuild)


# -- measuring ------------------------------------------------------------------------------


def proc(args, *, cwd: Path, env=None, stdout=subprocess.DEVNULL) -> float:
    t = time.perf_counter()
    subprocess.run(args, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE, check=True)
    return time.perf_counter() - t


def median_proc(args, n: int, **kw) -> float:
    return statistics.median(proc(args, **kw) for _ in range(n))


def median_call(fn, n: int = 5) -> float:
    fn()  # warm
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def _status_kb(pid: int) -> dict:
    out = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "VmHWM"):
                out[k] = int(v.split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return out


def stream(args, *, cwd: Path) -> dict:
    """Time to the first row, total time, rows, and anonymous memory (heap) as it streams."""
    t0 = time.perf_counter()
    p = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"[\n"
    p.stdout.readline()
    first = time.perf_counter() - t0
    rows, samples, nbytes = 1, [], 0
    next_sample = time.perf_counter()
    for line in p.stdout:
        rows += 1
        nbytes += len(line)
        if time.perf_counter() >= next_sample:
            st = _status_kb(p.pid)
            if st:
                samples.append((rows, st.get("RssAnon", 0), st.get("VmRSS", 0)))
            next_sample += 0.5
    p.wait()
    total = time.perf_counter() - t0
    rows -= 1  # the closing "]"
    anon = [a for _, a, _ in samples]
    return {"first_row_s": round(first, 3), "total_s": round(total, 1), "rows": rows,
            "rows_per_s": round(rows / total), "bytes": nbytes,
            "heap_kb_at": {f"{r // 1000}k rows": a for r, a, _ in samples[:: max(1, len(samples) // 6)]},
            "heap_kb_max": max(anon) if anon else None, "heap_kb_first": anon[0] if anon else None,
            "rss_kb_max": max((v for _, _, v in samples), default=None)}


QUERIES = [
    ("rare word (20 matches)", RARE, {}),
    ("medium word (~2,000)", MEDIUM, {}),
    ("phrase", '"velvet thunder"', {}),
    ("prefix", "velv*", {}),
    ("OR", f"{MEDIUM} OR {RARE}", {}),
    ("common word (~4,000)", None, {}),  # filled with a vocabulary word of that frequency
    ("with -m and --since", MEDIUM, {"model": ["gpt-4o"], "since": "2023-01-01"}),
    ("--latest", MEDIUM, {"latest": True}),
    ("very common (40% of messages)", "ka*", {}),
]


def pick_word(db, lo: int, hi: int) -> str:
    words, _ = vocabulary()
    for w in words[200:3000]:
        n = db.execute("SELECT count(*) FROM message_fts WHERE message_fts MATCH ?", ("{user assistant}: " + w,)).fetchone()[0]
        if lo <= n <= hi:
            return w
    return words[500]


def run(store: Path, *, llm: bool = True, skip_rebuild: bool = False) -> dict:
    res: dict = {"store": str(store)}
    info = json.loads((store / "bench-store.json").read_text())
    res["corpus"] = info
    cwd = store
    env = {**os.environ, "CONVGIT_FSYNC": "0"}
    # 1. Rebuild: a fresh process, as `convgit reindex` runs.
    if not skip_rebuild:
        t = time.perf_counter()
        out = subprocess.run([*CONVGIT, "reindex", "--json"], cwd=cwd, env=env, capture_output=True, check=True)
        res["rebuild_s"] = round(time.perf_counter() - t, 1)
        res["rebuild"] = json.loads(out.stdout)
    idx = store / ".convgit" / "index.sqlite"
    import sqlite3

    db = sqlite3.connect(idx)
    n = db.execute("SELECT count(*) FROM messages").fetchone()[0]
    sizes = dict(db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
    fts = sum(v for k, v in sizes.items() if k.startswith("message_fts"))
    text = db.execute("SELECT sum(length(CAST(text AS BLOB))) FROM parts").fetchone()[0]
    res["index"] = {"bytes": idx.stat().st_size, "messages": n, "bytes_per_message": round(idx.stat().st_size / n),
                    "fts_bytes_per_message": round(fts / n), "text_bytes_per_message": round(text / n),
                    "largest": {k: round(v / n) for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:6]}}
    # 2. Search, in-process (the library) and as a process (the CLI).
    common = pick_word(db, 3000, 6000)
    db.close()
    repo = Repository.open(store / ".convgit")
    repo.index
    rows = []
    for label, q, opts in QUERIES:
        q = q or common
        opts = dict(opts)
        latest = opts.pop("latest", False)
        f = convgit.make_filters(repo, **opts) if opts else None
        hits = convgit.search(repo, q, count=20, latest=latest, filters=f)
        matches = repo.index.db.execute("SELECT count(*) FROM message_fts WHERE message_fts MATCH ?",
                                        ("{user assistant}: (" + q + ")",)).fetchone()[0]
        api_s = median_call(lambda: convgit.search(repo, q, count=20, latest=latest, filters=f))
        argv = [*CONVGIT, "search", q, "-n", "20", "--json"] + (["--latest"] if latest else [])
        for k, v in opts.items():
            for x in (v if isinstance(v, list) else [v]):
                argv += [f"--{k}", x]
        cli_s = median_proc(argv, 5, cwd=cwd)
        rows.append({"query": label, "q": q, "matches": matches, "results": len(hits),
                     "api_ms": round(api_s * 1000, 1), "cli_ms": round(cli_s * 1000)})
        print(f"  search {label}: {rows[-1]}", file=sys.stderr, flush=True)
    res["search"] = rows
    # 3. log --json of the 1,000-message thread.
    res["log_deep"] = {
        "api_ms": round(median_call(lambda: [e.to_json(repo) for e in convgit.log(repo, "deep")]) * 1000, 1),
        "cli_ms": round(median_proc([*CONVGIT, "log", "deep", "--json"], 5, cwd=cwd) * 1000),
    }
    repo.close()
    res["startup"] = {
        "convgit_version_ms": round(median_proc([*CONVGIT, "--version"], 20, cwd=cwd) * 1000),
        "python_ms": round(median_proc([sys.executable, "-c", "pass"], 20, cwd=cwd) * 1000),
        "convgit_status_s": round(median_proc([*CONVGIT, "status", "--json"], 3, cwd=cwd), 2),
    }
    print(f"  {res['log_deep']} {res['startup']}", file=sys.stderr, flush=True)
    # 4. log --all -n 0 --json, streamed.
    res["log_all"] = stream([*CONVGIT, "log", "--all", "-n", "0", "--json"], cwd=cwd)
    print(f"  log --all: {res['log_all']}", file=sys.stderr, flush=True)
    if llm:
        res["vs_llm"] = versus_llm()
    OUT.mkdir(exist_ok=True)
    (OUT / "search.json").write_text(json.dumps(res, indent=2))
    print(table(res))
    return res


# -- side by side with llm on 1,000 conversations x 10 messages -----------------------------


def versus_llm() -> dict:
    llm_py = LLM_VENV / "bin" / "python"
    llm_bin = LLM_VENV / "bin" / "llm"
    if not llm_bin.exists():
        return {"error": f"no llm at {llm_bin}: create it with `python -m venv {LLM_VENV} && "
                         f"{LLM_VENV}/bin/pip install llm==0.36`"}
    version = subprocess.run([str(llm_bin), "--version"], capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="convgit-bench-llm-"))
    try:
        corpus = Corpus(seed=3)
        convs = [[corpus.message("user" if i % 2 == 0 else "assistant") for i in range(10)] for _ in range(1000)]
        (work / "corpus.json").write_text(json.dumps(convs))
        # llm: what `llm chat` writes, through llm's own Response.log_to_db (benchmarks/llm_driver.py).
        llm_env = {**os.environ, "LLM_USER_PATH": str(work / "llm-home")}
        (work / "llm-home").mkdir()
        db = work / "llm-home" / "logs.db"
        subprocess.run([str(llm_py), str(HERE / "llm_driver.py"), "chat", str(work / "corpus.json"), str(db)],
                       env=llm_env, check=True, capture_output=True)
        # convgit: the same conversations.
        repo = convgit.init(work / "cg")
        (repo.path / "config.toml").write_text("[core]\nfsync = false\n")
        repo.close()
        repo = Repository.open(repo.path)
        convgit.commit_many(repo, [{"messages": c} for c in convs])
        repo.close()
        cg = work / "cg"
        word = "velvet"  # planted in ~0.1% of messages, as in the big store
        out = {"llm_version": version, "conversations": len(convs), "messages": sum(len(c) for c in convs)}
        llm_list = [str(llm_bin), "logs", "list", "-n", "0", "--json", "-d", str(db)]
        llm_search = [str(llm_bin), "logs", "list", "-q", word, "-n", "20", "--json", "-d", str(db)]
        cg_list = [*CONVGIT, "log", "--all", "-n", "0", "--json"]
        cg_search = [*CONVGIT, "search", word, "-n", "20", "--json"]
        lists = {"llm": subprocess.run(llm_list, env=llm_env, capture_output=True, check=True).stdout,
                 "convgit": subprocess.run(cg_list, cwd=cg, capture_output=True, check=True).stdout}
        out["rows"] = {"llm_responses": len(json.loads(lists["llm"])), "convgit_messages": len(json.loads(lists["convgit"]))}
        out["list_json_s"] = {"llm": median_proc(llm_list, 5, cwd=work, env=llm_env), "convgit": median_proc(cg_list, 5, cwd=cg)}
        out["search_s"] = {"llm": median_proc(llm_search, 5, cwd=work, env=llm_env), "convgit": median_proc(cg_search, 5, cwd=cg)}
        out["search_word"] = word
        out["search_results"] = {
            "llm": len(json.loads(subprocess.run(llm_search, env=llm_env, capture_output=True, check=True).stdout)),
            "convgit": len(json.loads(subprocess.run(cg_search, cwd=cg, capture_output=True, check=True).stdout))}
        out["startup_s"] = {"llm": median_proc([str(llm_bin), "--version"], 10, cwd=work, env=llm_env),
                            "convgit": median_proc([*CONVGIT, "--version"], 10, cwd=cg),
                            "convgit_real_command": median_proc([*CONVGIT, "status", "--json"], 5, cwd=cg)}
        out["db_bytes"] = {"llm_logs_db": db.stat().st_size, "convgit_index": (cg / ".convgit" / "index.sqlite").stat().st_size}
        for k in ("list_json_s", "search_s", "startup_s"):
            d = out[k]
            d["llm_over_convgit"] = round(d["llm"] / d["convgit"], 2)
            for kk in ("llm", "convgit", "convgit_real_command"):
                if kk in d:
                    d[kk] = round(d[kk], 3)
        print(f"  vs llm: {out}", file=sys.stderr, flush=True)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def table(r: dict) -> str:
    lines = ["| figure | value |", "|---|---|"]
    c = r["corpus"]
    lines.append(f"| store | {c['messages']:,} messages in {c['threads']:,} threads (built in {c['build_s']:.0f} s, fsync off) |")
    if "rebuild_s" in r:
        lines.append(f"| index rebuild (`convgit reindex`) | {r['rebuild_s']:.0f} s |")
    ix = r["index"]
    lines.append(f"| index size | {ix['bytes'] / 1e6:,.0f} MB = {ix['bytes_per_message']} bytes/message "
                 f"(full-text part {ix['fts_bytes_per_message']} bytes/message; raw text {ix['text_bytes_per_message']}) |")
    for s in r["search"]:
        lines.append(f"| search top-20: {s['query']} (`{s['q']}`, {s['matches']:,} matches) | "
                     f"{s['api_ms']} ms in-process, {s['cli_ms']} ms as a command |")
    lines.append(f"| `log deep --json` (1,000 messages) | {r['log_deep']['api_ms']} ms in-process, {r['log_deep']['cli_ms']} ms as a command |")
    la = r["log_all"]
    lines.append(f"| `log --all -n 0 --json` | first row after {la['first_row_s']} s; {la['rows']:,} rows in {la['total_s']:.0f} s "
                 f"({la['rows_per_s']:,}/s); heap {la['heap_kb_first']} KB at the start, {la['heap_kb_max']} KB at most |")
    st = r["startup"]
    lines.append(f"| start-up | `convgit --version` {st['convgit_version_ms']} ms (python alone {st['python_ms']} ms); "
                 f"`status --json` {st['convgit_status_s']} s |")
    v = r.get("vs_llm")
    if v and "error" not in v:
        for k, label in (("list_json_s", "list everything as JSON"), ("search_s", "search (top 20)"), ("startup_s", "start-up (--version)")):
            lines.append(f"| vs {v['llm_version']}: {label} | llm {v[k]['llm']} s, convgit {v[k]['convgit']} s: "
                         f"llm/convgit = {v[k]['llm_over_convgit']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
