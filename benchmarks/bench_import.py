#!/usr/bin/env python3
"""Import benchmark: a synthetic ChatGPT-shaped export (default 100 MB, one line, with
branches: edited prompts and regenerations), imported into an empty store, then again.

    .venv/bin/python benchmarks/bench_import.py [--mb 100] [--keep DIR] [--no-fsync]
    .venv/bin/python benchmarks/bench_import.py --conversations 20000   # a heavy user's export

Reports messages/s, the rate in each tenth of the export (a constant rate from the first
conversation to the last is the target: the last tenth at least 0.8x the first), and the
peak RSS of the importing process (it runs in a child process,
so the generator's memory is not counted). Results: docs/performance.md, "Import".

The peer: ``git fast-import`` of the same text in the same run (each message's text a blob,
each message a commit on its parent's, a branch per leaf: the export's tree as a commit
DAG; the stream is written with the export, so git is not charged for parsing JSON), into a
fresh bare repository, with fsync on as convgit (core.fsync=committed) or off. ``--repeat N``
interleaves N imports of each (each round in another order) and reports medians and the
ratio ``vs_git_fast_import`` (convgit / git wall time). ``--src DIR`` (repeatable) imports
with another convgit source tree too, in the same rounds: a before/after in one run.
``--keep DIR --reuse`` reuses an export generated there by an earlier run. ``--random-ids``:
conversation ids are random uuids, as in a real ChatGPT export (each batch's new threads then
land all over ``packed-refs`` and ``packed-logs``); by default they sort in import order.
CPU seconds (``first_cpu_s``, ``cpu_tenths_s``, ``messages_per_cpu_s``) are the figures to
compare on a shared machine, where wall time is mostly the other processes' load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("the model answer question python graph store thread branch message import export value "
         "deduplicate content address hash parent merkle chain sqlite index fork commit").split()


def text(rnd: random.Random, lo: int, hi: int) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(lo, hi)))


def node(nid, parent, children, role, content, t, model=None, recipient="all", hidden=False):
    md = {"is_visually_hidden_from_conversation": True} if hidden else {
        "request_id": f"req-{nid[:8]}", "message_type": "next", "timestamp_": "absolute",
        "finish_details": {"type": "stop", "stop_tokens": [200002]}, "is_complete": True, "citations": [],
        "content_references": [], "parent_id": parent}
    if model:
        md["model_slug"] = model
        md["default_model_slug"] = model
    return {"id": nid, "message": None if role is None else {
        "id": nid, "author": {"role": role, "name": "python" if role == "tool" else None, "metadata": {}},
        "create_time": t, "update_time": None, "content": content, "status": "finished_successfully",
        "end_turn": role == "assistant", "weight": 0.0 if hidden else 1.0, "metadata": md,
        "recipient": recipient, "channel": None}, "parent": parent, "children": children}


def conversation(rnd: random.Random, i: int, random_ids: bool = False) -> dict:
    cid = f"{i:08x}-0000-4000-8000-{rnd.getrandbits(48):012x}"
    if random_ids:  # as real exports: uuid4s in no order (the same content, from another stream)
        cid = f"{random.Random(f'cid-{i}').getrandbits(32):08x}{cid[8:]}"
    t = 1.7e9 + i * 3600
    mapping: dict = {}
    ids = iter(f"{rnd.getrandbits(128):032x}" for _ in range(10_000))

    def add(parent, role, content, **kw):
        nonlocal t
        nid = next(ids)
        t += rnd.uniform(1, 30)
        mapping[nid] = node(nid, parent, [], role, content, t, **kw)
        if parent is not None:
            mapping[parent]["children"].append(nid)
        return nid

    root = add(None, None, None)
    cur = add(root, "system", {"content_type": "text", "parts": [""]}, hidden=True)
    leaves = []
    for turn in range(rnd.randint(6, 14)):
        u = add(cur, "user", {"content_type": "text", "parts": [text(rnd, 10, 60)]})
        if rnd.random() < 0.04:  # an edited prompt: a sibling branch with its own answer
            e = add(cur, "user", {"content_type": "text", "parts": [text(rnd, 10, 60)]})
            leaves.append(add(e, "assistant", {"content_type": "text", "parts": [text(rnd, 40, 300)]}, model="gpt-4o"))
        if rnd.random() < 0.1:  # a python tool call and its output
            c = add(u, "assistant", {"content_type": "code", "language": "python", "text": text(rnd, 5, 30)},
                    model="gpt-4o", recipient="python")
            u = add(c, "tool", {"content_type": "execution_output", "text": text(rnd, 5, 30)})
        a = add(u, "assistant", {"content_type": "text", "parts": [text(rnd, 40, 300)]}, model="gpt-4o")
        if rnd.random() < 0.04:  # a regeneration
            leaves.append(add(u, "assistant", {"content_type": "text", "parts": [text(rnd, 40, 300)]}, model="gpt-4o"))
        cur = a
    return {"title": text(rnd, 2, 6), "create_time": 1.7e9 + i * 3600, "update_time": t, "mapping": mapping,
            "moderation_results": [], "current_node": cur, "plugin_ids": None, "conversation_id": cid,
            "conversation_template_id": None, "gizmo_id": None, "is_archived": False, "safe_urls": [],
            "default_model_slug": "gpt-4o", "id": cid}


def fast_import_stream(out, c: dict, i: int, mark: list[int]) -> None:
    """The same conversation for ``git fast-import``: each message's text a blob, each message
    a commit whose parent is its parent message's commit (the tree of the export as a commit
    DAG), a branch at the current leaf and one at each other leaf."""
    commit_of: dict[str, int] = {}
    parents = set()
    for nid, x in c["mapping"].items():
        m = x["message"]
        if m is None:
            continue
        content = m["content"]
        body = ("\n".join(content["parts"]) if "parts" in content else content.get("text", "")).encode()
        mark[0] += 1
        blob = mark[0]
        mark[0] += 1
        commit_of[nid] = mark[0]
        role = m["author"]["role"].encode()
        parent = commit_of.get(x["parent"])
        if parent is not None:
            parents.add(x["parent"])
        out.write(b"blob\nmark :%d\ndata %d\n%s\ncommit refs/heads/c%d\nmark :%d\ncommitter b <b@b> %d +0000\ndata %d\n%s\n"
                  % (blob, len(body), body, i, mark[0], int(m["create_time"]), len(role), role))
        if parent is not None:
            out.write(b"from :%d\n" % parent)
        out.write(b"M 100644 :%d m\n\n" % blob)
    leaves = [nid for nid in commit_of if nid not in parents and nid != c["current_node"]]
    out.write(b"reset refs/heads/c%d\nfrom :%d\n\n" % (i, commit_of[c["current_node"]]))
    for k, nid in enumerate(leaves):
        out.write(b"reset refs/heads/c%d-alt-%d\nfrom :%d\n\n" % (i, k + 1, commit_of[nid]))


def generate(path: Path, mb: int, seed: int = 7, count: int | None = None, stream: Path | None = None,
             random_ids: bool = False) -> tuple[int, int]:
    rnd = random.Random(seed)
    target = mb * 1_000_000
    n = nodes = 0
    mark = [0]
    g = open(stream, "wb") if stream is not None else None
    with open(path, "w", encoding="utf-8") as f:
        f.write("[")
        size = 1
        while (n < count) if count is not None else (size < target):
            c = conversation(rnd, n, random_ids)
            s = ("," if n else "") + json.dumps(c)  # ASCII with \\u escapes, as the real export
            f.write(s)
            size += len(s)
            nodes += sum(1 for x in c["mapping"].values() if x["message"] is not None)
            if g is not None:
                fast_import_stream(g, c, n, mark)
            n += 1
        f.write("]")
    if g is not None:
        g.write(b"done\n")
        g.close()
    return n, nodes


def git_fast_import(work: Path, stream: Path, fsync: bool) -> float:
    """Wall seconds of ``git fast-import`` reading ``stream`` into a fresh bare repository
    (with fsync on: core.fsync=committed, as durable as convgit's import)."""
    repo = work / f"git-{time.monotonic_ns()}.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    sync = ["-c", "core.fsync=committed", "-c", "core.fsyncMethod=fsync"] if fsync else ["-c", "core.fsync=none"]
    t = time.perf_counter()
    with open(stream, "rb") as f:
        subprocess.run(["git", *sync, "-C", str(repo), "fast-import", "--quiet", "--done"], stdin=f, check=True)
    s = time.perf_counter() - t
    import shutil

    shutil.rmtree(repo, ignore_errors=True)
    return s


def child(store: str, export: str, src: str | None = None) -> None:
    """Runs in the child: import twice, print one JSON line of figures. ``src``: the convgit
    source tree to import (another checkout, for a before/after in one run)."""
    sys.path.insert(0, src or str(ROOT))
    import convgit
    from convgit import api

    repo = convgit.init(store)
    total = os.path.getsize(export)
    marks: list[float] = []  # the time each tenth of the export's bytes was read
    cpu_marks: list[float] = []  # ... and the process's CPU time then (robust to a busy machine)
    done = [0]

    def progress(n: int) -> None:
        done[0] += n
        while len(marks) < 10 and done[0] >= total * (len(marks) + 1) / 10:
            marks.append(time.perf_counter())
            cpu_marks.append(time.process_time())

    t0, c0, p0 = time.perf_counter(), os.times(), time.process_time()
    r1 = api.import_paths(repo, [export], progress=progress)
    t1, c1, p1 = time.perf_counter(), os.times(), time.process_time()
    while len(marks) < 10:
        marks.append(t1)
        cpu_marks.append(p1)
    tenths = [round(b - a, 2) for a, b in zip([t0] + marks[:-1], marks)]
    cpu_tenths = [round(b - a, 2) for a, b in zip([p0] + cpu_marks[:-1], cpu_marks)]
    r2 = api.import_paths(repo, [export])
    t2 = time.perf_counter()
    msgs = sum(c.messages for c in r1.conversations)
    print(json.dumps({
        "conversations": len(r1.conversations), "counts": r1.counts(), "messages": msgs,
        "new_messages": sum(c.new_messages for c in r1.conversations), "threads": len(repo.refs.read_all()),
        "first_s": round(t1 - t0, 2), "reimport_s": round(t2 - t1, 2),
        "first_cpu_s": round(c1.user + c1.system - c0.user - c0.system, 2),  # (robust to a busy machine)
        "reimport_new_objects": r2.new_objects,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tenths_s": tenths,
        "conversations_per_s_by_tenth": [round(len(r1.conversations) / 10 / t) if t else None for t in tenths],
        "last_tenth_vs_first": round(tenths[0] / tenths[-1], 2) if tenths[-1] else None,
        # CPU seconds per tenth of the export's bytes (each tenth ends when its batch has run,
        # so a small export's tenths are uneven: judge the constant rate at 20,000 conversations)
        "cpu_tenths_s": cpu_tenths,
        "cpu_last_tenth_vs_first": round(cpu_tenths[0] / cpu_tenths[-1], 2) if cpu_tenths[-1] else None,
        "messages_per_cpu_s": round(msgs / (p1 - p0)) if p1 > p0 else None,
    }))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--conversations", type=int, default=None, help="generate this many conversations (instead of --mb)")
    ap.add_argument("--keep", type=Path, default=None, help="work in DIR and keep it")
    ap.add_argument("--no-fsync", action="store_true", help="CONVGIT_FSYNC=0 (throw-away store)")
    ap.add_argument("--repeat", type=int, default=1, help="import this many times, interleaved with git fast-import")
    ap.add_argument("--no-git", action="store_true", help="skip the git fast-import peer")
    ap.add_argument("--src", type=Path, action="append", default=None,
                    help="a convgit source tree to run (repeatable: each imports in turn, interleaved; "
                         "e.g. `git archive main | tar -x -C DIR` for a before/after in one run); default this one")
    ap.add_argument("--reuse", action="store_true", help="with --keep: reuse the export generated there before")
    ap.add_argument("--random-ids", action="store_true",
                    help="conversation ids random uuids, as real exports (default: in import order)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return 0
    work = a.keep or Path(tempfile.mkdtemp(prefix="convgit-bench-import-"))
    work.mkdir(parents=True, exist_ok=True)
    export = work / "conversations.json"
    stream = None if a.no_git else work / "fast-import.stream"
    t = time.perf_counter()
    meta = work / "generated.json"
    if a.reuse and meta.exists() and export.exists() and (stream is None or stream.exists()):
        n, nodes = json.loads(meta.read_text())
    else:
        n, nodes = generate(export, a.mb, count=a.conversations, stream=stream, random_ids=a.random_ids)
        meta.write_text(json.dumps([n, nodes]))
    gen_s = time.perf_counter() - t
    size = export.stat().st_size
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    if a.no_fsync:
        env["CONVGIT_FSYNC"] = "0"
    srcs = [str(x.resolve()) for x in a.src] if a.src else [None]
    label = {src: (src or "this tree") for src in srcs}
    runs: dict = {src: [] for src in srcs}
    git_s: list[float] = []
    import shutil

    for r in range(a.repeat):  # interleaved, each round in another order: convgit(s), git, ...
        order = [*srcs, "git"]
        order = order[r % len(order):] + order[:r % len(order)]
        for who in order:
            if who == "git":
                if stream is not None:
                    git_s.append(round(git_fast_import(work, stream, not a.no_fsync), 2))
                continue
            store = work / f"store-{r}" / ".convgit"
            p = subprocess.run([sys.executable, __file__, "--child", str(store), str(export), *([who] if who else [])],
                               env=env, capture_output=True, text=True, check=True)
            res = json.loads(p.stdout.strip().splitlines()[-1])
            res["store_mb"] = round(sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) / 1e6, 1)
            runs[who].append(res)
            print(json.dumps({"round": r, "src": label[who], "first_s": res["first_s"], "cpu_s": res["first_cpu_s"],
                              "tenths_s": res["tenths_s"], "cpu_tenths_s": res["cpu_tenths_s"],
                              "git_s": git_s}), file=sys.stderr, flush=True)  # (as it goes: a long run cut short keeps these)
            shutil.rmtree(store.parent, ignore_errors=True)
    out = {}
    for src in srcs:
        rs = runs[src]
        firsts = sorted(x["first_s"] for x in rs)
        med = statistics.median(firsts)
        res = min(rs, key=lambda x: abs(x["first_s"] - med))
        tenth_ratios = sorted(x["last_tenth_vs_first"] or 0 for x in rs)
        res.update({"src": label[src], "export_mb": round(size / 1e6, 1), "generated_conversations": n,
                    "generated_nodes": nodes, "generate_s": round(gen_s, 1), "fsync": not a.no_fsync, "runs": len(rs),
                    "first_s_runs": [x["first_s"] for x in rs], "first_s_median": med,
                    "first_cpu_s_runs": [x["first_cpu_s"] for x in rs],
                    "first_cpu_s_median": statistics.median(x["first_cpu_s"] for x in rs),
                    "cpu_last_tenth_vs_first_runs": [x["cpu_last_tenth_vs_first"] for x in rs],
                    "messages_per_cpu_s_median": round(res["messages"] / statistics.median(x["first_cpu_s"] for x in rs)),
                    "last_tenth_vs_first_runs": [x["last_tenth_vs_first"] for x in rs],
                    "last_tenth_vs_first_median": statistics.median(tenth_ratios),
                    "messages_per_s": round(res["messages"] / med),
                    "mb_per_s": round(size / 1e6 / med, 1)})
        if git_s:
            res.update({"git_fast_import_s_runs": git_s, "git_fast_import_s_median": statistics.median(git_s),
                        "vs_git_fast_import": round(med / statistics.median(git_s), 2)})
        out[label[src]] = res
    res = out if len(srcs) > 1 else out[label[srcs[0]]]
    print(json.dumps(res, indent=2))
    if a.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
