"""gc, fsck and merge: time, and bytes on disk per message before and after gc.

    .venv/bin/python benchmarks/bench_maintenance.py                       # 1,000 x 10 (~1 min)
    .venv/bin/python benchmarks/bench_maintenance.py --conversations 100000  # 1,000,000 messages

Store A gets N conversations of 10 messages, committed in batches of 1,000 conversations
with the packing threshold lifted so every object stays loose (as a store of everyday
one-at-a-time commits is before its first gc). Building the stores runs with fsync off (it is
set-up, not measured); gc, fsck and merge run with the default settings (fsync on). Store B
holds the first half of A's conversations and as many new ones; merging B into A is the
"two stores sharing half their history" case, merging it again the "already has everything"
case. The index is caught up before each timed step, so gc and merge are not charged for
indexing the set-up's commits.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import convgit
from convgit import object_store
from convgit import api
from convgit.fsck import fsck

WORDS = ("the model answered with a careful list of steps and a short code block that "
         "explains how to parse json stream tokens cache index query thread fork merge").split()
BATCH = 1000


def corpus(n_conv: int, seed: int, first: int = 0, messages: int = 10):
    """``n_conv`` conversations of ``messages`` (10) messages of 200-2,000 characters drawn from WORDS."""
    rng = random.Random(seed)
    out = []
    for c in range(first, first + n_conv):
        msgs = []
        for i in range(messages):
            n = rng.randint(200, 2000)
            text = " ".join(rng.choices(WORDS, k=n // 4))[:n]
            msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"c{c} m{i} {text}"})
        out.append({"messages": msgs})
    return out


def stdlib_corpus(n_conv: int, seed: int, first: int = 0):
    """Real text instead: each conversation walks through one file of Python's standard
    library (code, comments and docstrings), 10 messages of 200-2,000 characters in a row."""
    import sysconfig

    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    rng = random.Random(seed)
    out = []
    for c in range(first, first + n_conv):
        src = files[(c * 7919) % len(files)].read_text("utf-8", "replace")
        at = rng.randrange(max(1, len(src) - 12_000))
        msgs = []
        for i in range(10):
            n = rng.randint(200, 2000)
            msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"c{c} m{i} {src[at:at + n]}"})
            at += n
        out.append({"messages": msgs})
    return out


CORPORA = {"words": corpus, "stdlib": stdlib_corpus}
CORPUS = corpus


def batches(n_conv: int, seed: int):
    for b in range(0, n_conv, BATCH):
        yield CORPUS(min(BATCH, n_conv - b), seed * 1_000_003 + b, first=b)


def text_bytes(n_conv: int, seed: int) -> int:
    return sum(len(m["content"].encode()) for convs in batches(n_conv, seed) for c in convs for m in c["messages"])


def du(path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) under ``path``."""
    apparent = allocated = 0
    for d, _, fs in os.walk(path):
        for f in fs:
            st = os.lstat(os.path.join(d, f))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def build(path: str, parts: list[tuple[int, int]]) -> None:
    """A store at ``path`` holding the conversations of each (count, seed), every object loose."""
    os.environ["CONVGIT_FSYNC"] = "0"
    saved, object_store.PACK_THRESHOLD = object_store.PACK_THRESHOLD, 10**12
    try:
        repo = convgit.init(path)
        for n, seed in parts:
            for convs in batches(n, seed):
                api.commit_many(repo, convs)
        api.status(repo)  # the index, caught up (not part of any measured step)
        repo.close()
        os.sync()  # the set-up's unsynced writes flushed now, not by gc's syncfs
    finally:
        object_store.PACK_THRESHOLD = saved
        del os.environ["CONVGIT_FSYNC"]


def timed(f):
    t = time.perf_counter()
    r = f()
    return r, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=1000)
    ap.add_argument("--corpus", choices=sorted(CORPORA), default="words",
                    help="words: the synthetic corpus (a 30-word vocabulary); stdlib: real text and code")
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--skip-merge", action="store_true", help="gc and fsck only")
    ap.add_argument("--no-index-check", action="store_true", help="fsck without comparing the index to a rebuild")
    args = ap.parse_args()
    global CORPUS
    CORPUS = CORPORA[args.corpus]
    n = args.conversations
    msgs = n * 10
    base = tempfile.mkdtemp(dir=args.dir, prefix="bench_maint_")
    try:
        text = text_bytes(n, 7)
        _, t_build = timed(lambda: build(os.path.join(base, "a"), [(n, 7)]))
        print(f"corpus {args.corpus}: conversations {n:,} x 10 = {msgs:,} messages, {text / 1e6:.1f} MB of text "
              f"(set-up {t_build:.0f} s)\n")
        print("| measure | result |\n|---|---|", flush=True)
        a = convgit.open_repo(os.path.join(base, "a"))
        before, before_alloc = du(a.path / "objects")
        s, gc_s = timed(lambda: api.gc(a, prune="now"))
        after, after_alloc = du(a.path / "objects")
        index_files = [os.lstat(p) for p in a.path.glob("index.sqlite*")]
        index_alloc = sum(st.st_blocks * 512 for st in index_files)
        store_app, store_alloc = du(a.path)
        store_app -= sum(st.st_size for st in index_files)
        store_alloc -= index_alloc
        print(f"| gc: pack {s.packed:,} loose objects | {gc_s:.2f} s |")
        print(f"| objects/ before gc (loose) | {before / 1e6:.1f} MB = {before / text:.2f} x text "
              f"({before_alloc / 1e6:.1f} MB = {before_alloc / text:.2f} x allocated); {before / msgs:,.0f} B/message |")
        print(f"| objects/ after gc (one pack) | {after / 1e6:.1f} MB = {after / text:.2f} x text "
              f"({after_alloc / 1e6:.1f} MB allocated); {after / msgs:,.0f} B/message |")
        print(f"| store after gc without the derived index (objects, refs, reflogs) | "
              f"{store_app / 1e6:.1f} MB = {store_app / text:.2f} x text "
              f"({store_alloc / 1e6:.1f} MB = {store_alloc / text:.2f} x allocated in 4 KiB blocks) |")
        print(f"| the derived index (index.sqlite), allocated | {index_alloc / 1e6:.1f} MB = {index_alloc / text:.2f} x text |",
              flush=True)
        rep, fsck_s = timed(lambda: fsck(a, check_index=False))
        print(f"| fsck of objects, refs and reflogs ({rep.packed:,} packed objects) | {fsck_s:.2f} s, "
              f"{'ok' if rep.ok else 'errors'} |", flush=True)
        if not args.no_index_check:
            rep, fsck_s = timed(lambda: api.fsck(a))
            print(f"| fsck, the index compared to a rebuild too (`convgit fsck`) | {fsck_s:.2f} s, "
                  f"{'ok' if rep.ok else 'errors'} |", flush=True)
        a.close()
        if not args.skip_merge:
            merge_twice(base, n)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def merge_twice(base: str, n: int) -> None:
    half = n // 2
    build(os.path.join(base, "b"), [(half, 7), (n - half, 8)])
    a = convgit.open_repo(os.path.join(base, "a"))
    api.status(a)
    m, merge_s = timed(lambda: api.merge(a, os.path.join(base, "b")))
    print(f"| merge of a store sharing half ({(n - half) * 10:,} new messages) | {merge_s:.2f} s, "
          f"{m.new_objects:,} new objects |", flush=True)
    api.status(a)
    size_before_again = du(a.path)[0]
    m2, merge2_s = timed(lambda: api.merge(a, os.path.join(base, "b")))
    added = du(a.path)[0] - size_before_again
    print(f"| merge again | {merge2_s:.2f} s, {m2.new_objects} new objects, {added} bytes added |")
    a.close()


if __name__ == "__main__":
    main()
