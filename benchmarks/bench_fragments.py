"""Long texts repeated across conversations, stored once by reference (issue 11's fragments;
docs/format.md §9, spliced chunks), against the same packs without splicing (pack version 2's
writer), in the same run.

    .venv/bin/python benchmarks/bench_fragments.py [--threads 1000 5000] [--reps 3]

Two synthetic stores per size (fsync off: throw-away stores):

- ``pasted``: every conversation pastes one or two of 40 documents (2-20 KB of markdown-like
  lines, a few very popular) into a user message amid its own words, then asks about them;
  what an llm user's ``-f`` fragments or a chat user's pasted files look like.
- ``agent``: coding-agent sessions: tool results return the contents of 60 files (1-12 KB),
  read again and again across sessions, one line edited between some reads (the same file
  in two versions), with short assistant steps between.

Each store is built, then ``gc --prune now``; the switch (splicing on, or off as version 2
wrote) alternates between repetitions (A B A B). For ``pasted`` (alternating user and
assistant messages), the same conversations are also logged by ``llm`` 0.36's own
``log_to_db`` as ``llm chat`` would (benchmarks/llm_driver.py in benchmarks/.venv-llm, when
it exists): its logs.db size beside ours. Reported: the raw text the store holds
(``status``'s ``text_bytes``), ``objects/`` after gc, the pack's fragments, gc's time, and
the time to read every object back (each re-hashed, spliced chunks reassembled): as CPU
seconds of the process (``time.process_time``, every thread), which a loaded machine
disturbs far less than wall time (both are in the JSON). Medians;
markdown table on stdout, benchmarks/out/fragments.json.
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
os.environ["CONVGIT_FSYNC"] = "0"  # synthetic stores only
os.environ["CONVGIT_GC_AUTO"] = "0"

import convgit  # noqa: E402
import convgit.pack as pack  # noqa: E402
from convgit.repository import Repository  # noqa: E402

WORDS = ("the a model answer file test function returns value list error config store thread "
         "message index query search branch merge commit import export token usage time "
         "should would could please check review explain why how what when this that").split()
T0 = 1_790_000_000_000


def _line(rng: random.Random) -> str:
    kind = rng.random()
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
    if kind < 0.15:
        return "## " + words.title()
    if kind < 0.35:
        return "- " + words
    if kind < 0.5:
        return "    " + words.replace(" ", "_")[:60] + f"({rng.randint(0, 999)})"
    return words.capitalize() + "."


def _document(seed: int, size: int) -> str:
    rng = random.Random(seed)
    lines, n = [], 0
    while n < size:
        line = _line(rng)
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines) + "\n"


def _chat(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def pasted(threads: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    docs = [_document(1000 + d, rng.randint(2_000, 20_000)) for d in range(40)]
    weights = [1 / (i + 1) for i in range(len(docs))]
    out = []
    for t in range(threads):
        msgs = [{"role": "user", "content": _chat(rng, rng.randint(5, 30))},
                {"role": "assistant", "content": _chat(rng, rng.randint(20, 120))}]
        for d in rng.choices(range(len(docs)), weights, k=rng.randint(1, 2)):
            msgs.append({"role": "user", "content": f"{_chat(rng, rng.randint(3, 12))}\n\n{docs[d]}\n{_chat(rng, 8)}"})
            msgs.append({"role": "assistant", "content": _chat(rng, rng.randint(30, 200))})
        out.append({"messages": msgs, "model": "gpt-4o", "started_at": T0 + t * 1000})
    return out


def agent(threads: int, seed: int = 2) -> list[dict]:
    rng = random.Random(seed)
    files = [_document(5000 + f, rng.randint(1_000, 12_000)) for f in range(60)]
    edited = [f.replace("\n", "\n" + _chat(rng, 6) + "\n", 1) for f in files]
    out = []
    for t in range(threads):
        msgs = [{"role": "system", "content": "You are a coding agent. " + _chat(rng, 40)},
                {"role": "user", "content": _chat(rng, rng.randint(8, 40))}]
        for step in range(rng.randint(2, 5)):
            f = rng.randrange(len(files))
            call = f"call_{t}_{step}"
            msgs.append({"role": "assistant", "content": _chat(rng, 12), "tool_calls": [
                {"id": call, "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{f}.py"})}}]})
            msgs.append({"role": "tool", "tool_call_id": call, "content": (edited if rng.random() < 0.3 else files)[f]})
        msgs.append({"role": "assistant", "content": _chat(rng, rng.randint(30, 150))})
        out.append({"messages": msgs, "model": "claude-sonnet-4", "started_at": T0 + t * 1000})
    return out


def disk(path: Path) -> int:
    total = 0
    for dp, _dns, fns in os.walk(path):
        for f in fns:
            total += os.lstat(os.path.join(dp, f)).st_size
    return total


def run_once(root: Path, payloads: list[dict], splice: bool) -> dict:
    pack.FRAGMENT_MIN = 1024 if splice else 1 << 40  # off: no string is long enough (version 2's packs)
    store = root / ("on" if splice else "off")
    if store.exists():
        shutil.rmtree(store)
    store.mkdir()
    repo = convgit.init(store)
    (repo.path / "config.toml").write_text("[core]\nfsync = false\n[gc]\nauto = false\n")
    repo.close()
    repo = Repository.open(store / ".convgit")
    for i in range(0, len(payloads), 2000):
        convgit.commit_many(repo, payloads[i : i + 2000], now_ms=T0)
    t, c = time.perf_counter(), time.process_time()
    convgit.gc(repo, prune="now")
    gc_s, gc_cpu = time.perf_counter() - t, time.process_time() - c
    status = convgit.status(repo)
    packs = repo.objects.packs(reload=True)
    t, c = time.perf_counter(), time.process_time()
    n = 0
    for p in packs:
        for oid in p.ids_in_pack_order():
            p.read(oid)
            n += 1
    read_s, read_cpu = time.perf_counter() - t, time.process_time() - c
    out = {"text_bytes": status.to_json()["text_bytes"], "objects_bytes": disk(repo.path / "objects"),
           "fragments": sum(p.fragments for p in packs), "objects": n, "gc_s": gc_s, "read_s": read_s,
           "gc_cpu_s": gc_cpu, "read_cpu_s": read_cpu}
    repo.close()
    return out


def llm_db_bytes(root: Path, payloads: list[dict]) -> int | None:
    """The size of llm 0.36's logs.db after logging ``payloads`` (chat mode), or None
    without the llm venv."""
    py = HERE / ".venv-llm" / "bin" / "python"
    if not py.exists():
        return None
    corpus = root / "llm-corpus.json"
    corpus.write_text(json.dumps([p["messages"] for p in payloads]))
    env = dict(os.environ, LLM_USER_PATH=str(root / "llm-user"))
    db = root / "llm-logs.db"
    db.unlink(missing_ok=True)
    p = subprocess.run([str(py), str(HERE / "llm_driver.py"), "chat", str(corpus), str(db)], env=env,
                       check=True, capture_output=True, text=True)
    return int(json.loads(p.stdout)["db_bytes"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    results = []
    root = Path(tempfile.mkdtemp(prefix="bench-fragments-"))
    try:
        for n in args.threads:
            for name, make in (("pasted", pasted), ("agent", agent)):
                payloads = make(n)
                runs: dict[bool, list[dict]] = {True: [], False: []}
                for _rep in range(args.reps):
                    for splice in (True, False):  # interleaved: A B A B
                        runs[splice].append(run_once(root, payloads, splice))
                row = {"store": name, "threads": n,
                       "llm_db_bytes": llm_db_bytes(root, payloads) if name == "pasted" else None}
                for splice, rs in runs.items():
                    key = "on" if splice else "off"
                    row[key] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                results.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("| store | threads | raw text | objects, spliced | objects, not spliced | spliced / not | "
          "objects / text (spliced, not) | fragments | gc CPU s (spliced, not) | read all CPU s (spliced, not) | llm logs.db |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        on, off = r["on"], r["off"]
        mb = lambda b: f"{b / 1e6:.1f} MB"  # noqa: E731
        print(f"| {r['store']} | {r['threads']:,} | {mb(on['text_bytes'])} | {mb(on['objects_bytes'])} | "
              f"{mb(off['objects_bytes'])} | {on['objects_bytes'] / off['objects_bytes']:.2f} | "
              f"{on['objects_bytes'] / on['text_bytes']:.2f}x, {off['objects_bytes'] / off['text_bytes']:.2f}x | "
              f"{int(on['fragments']):,} | {on['gc_cpu_s']:.2f}, {off['gc_cpu_s']:.2f} | {on['read_cpu_s']:.2f}, {off['read_cpu_s']:.2f} | "
              f"{mb(r['llm_db_bytes']) if r['llm_db_bytes'] else ''} |")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "fragments.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
