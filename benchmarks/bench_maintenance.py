"""gc, fsck and merge on the 1,000 x 10 corpus (quick; the 1M-message run is not automated yet).

    .venv/bin/python benchmarks/bench_maintenance.py
"""

from __future__ import annotations

import os
import random
import tempfile
import time

import convgit
from convgit import api

WORDS = ("the model answered with a careful list of steps and a short code block that "
         "explains how to parse json stream tokens cache index query thread fork merge").split()


def corpus(n_conv: int, seed: int):
    rng = random.Random(seed)
    out = []
    for c in range(n_conv):
        msgs = []
        for i in range(10):
            n = rng.randint(200, 2000)
            words, size = [], 0
            while size < n:
                w = rng.choice(WORDS)
                words.append(w)
                size += len(w) + 1
            msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"c{c} m{i} " + " ".join(words)[:n]})
        out.append({"messages": msgs})
    return out


def du(path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main() -> None:
    convs = corpus(1000, 7)
    text = sum(len(m["content"].encode()) for c in convs for m in c["messages"])
    base = tempfile.mkdtemp(dir=os.environ.get("TMPDIR", "/tmp"))
    a = convgit.init(os.path.join(base, "a"))
    for i in range(0, 1000, 100):  # loose objects, as everyday commits leave them
        for c in convs[i:i + 100]:
            api.commit(a, c)
    before = du(a.path / "objects")
    t = time.perf_counter()
    s = api.gc(a, prune="now")
    gc_s = time.perf_counter() - t
    after = du(a.path / "objects")
    t = time.perf_counter()
    rep = api.fsck(a)
    fsck_s = time.perf_counter() - t
    # b shares half of a's history
    b = convgit.init(os.path.join(base, "b"))
    api.commit_many(b, convs[:500] + corpus(500, 8))
    t = time.perf_counter()
    m = api.merge(a, b.path)
    merge_s = time.perf_counter() - t
    size_before_again = du(a.path)
    t = time.perf_counter()
    m2 = api.merge(a, b.path)
    merge2_s = time.perf_counter() - t
    print("| measure | result |\n|---|---|")
    print(f"| corpus text | {text / 1e6:.1f} MB (10,000 messages) |")
    print(f"| gc (pack {s.packed} loose objects) | {gc_s:.2f} s |")
    print(f"| objects/ before gc (loose) | {before / 1e6:.1f} MB = {before / text:.2f} x text |")
    print(f"| objects/ after gc (one pack) | {after / 1e6:.1f} MB = {after / text:.2f} x text |")
    print(f"| fsck ({rep.packed} packed objects, index check included) | {fsck_s:.2f} s, {'ok' if rep.ok else 'errors'} |")
    print(f"| merge of a store sharing half (5,000 new messages) | {merge_s:.2f} s, {m.new_objects} new objects |")
    print(f"| merge again | {merge2_s:.2f} s, {m2.new_objects} new objects, {du(a.path) - size_before_again} bytes added |")


if __name__ == "__main__":
    main()
