"""What moving a batch of refs costs on this file system, and what the alternatives would.

    .venv/bin/python benchmarks/bench_ref_moves.py [--refs 32] [--rounds 30] [--dir DIR]

Each round (interleaved, medians and p90 over the rounds; ms per batch of ``--refs`` moves):

- ``update_many, loose refs``: the real ``RefStore.update_many`` (fsync on) moving
  ``--refs`` existing threads once each with a rename per ref (a store that may not make
  ``packed-refs``: locks, reflog lines, temp refs, syncfs, renames, an fsync of the refs
  directory);
- ``update_many, packed-refs``: the same through ``packed-refs`` (docs/format.md §6.3: locks,
  reflog lines, one new ``packed-refs``, syncfs, one rename, the directories' fsyncs), what a
  committer batch of 32 calls does once its threads were moved there;
- ``..., second syncfs (before)``: both again with the renames made durable by a second
  ``syncfs``, as before the directories' fsyncs replaced it (issue 12, session 8);
- ``rename-over``: its file-system steps alone: a new temp file per ref, syncfs, a rename
  over each ref file, syncfs;
- ``rename + fsync dir``: the same with an fsync of the refs directory in place of the
  second syncfs;
- ``exchange``: a spare file per ref overwritten in place, syncfs, ``renameat2(RENAME_EXCHANGE)``
  with the ref, syncfs: no inode freed or allocated. (Not usable as is: the ref's old inode,
  which a reader may still be reading, becomes the spare that the next move overwrites.)
- ``packed-refs N``: one ``packed-refs`` file of N threads written (temp, fsync, rename, fsync
  dir), as a batch move through packed-refs would have to for every batch, and a reader's
  lookup of one thread in it (every reader opens it again when it changes).

The directory defaults to one under the checkout (the disk the stores live on, not a tmpfs).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from convgit import fsio  # noqa: E402
from convgit.refformat import format_packed_refs, open_packed_refs  # noqa: E402
from convgit.refs import RefMove, RefStore  # noqa: E402

_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: str, b: str) -> None:
    """renameat2(a, b, RENAME_EXCHANGE)."""
    if _libc.renameat2(-100, a.encode(), -100, b.encode(), 2) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def oid(i: int, r: int) -> str:
    return f"{i:08x}{r:08x}".ljust(64, "a")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--refs", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--dir", default=str(HERE.parent / ".bench-ref-moves"))
    ap.add_argument("--packed", default="1000,10000,100000", help="thread counts of the packed-refs rows")
    args = ap.parse_args()
    base = Path(args.dir)
    shutil.rmtree(base, ignore_errors=True)
    n = args.refs
    try:
        raw = base / "raw"
        raw.mkdir(parents=True)
        for i in range(n):
            (raw / f"r{i}").write_text(oid(i, 0) + "\n")
            (raw / f".spare{i}").write_text(oid(i, 0) + "\n")
        root = base / "store"
        (root / "refs" / "threads").mkdir(parents=True)
        (root / "logs" / "threads").mkdir(parents=True)
        refs = RefStore(root, fsync=True)  # (declare_packed None: it never makes packed-refs)
        names = [f"conv-{i:04d}" for i in range(n)]
        refs.update_many([RefMove(name, oid(i, 0), expected=None) for i, name in enumerate(names)])
        root2 = base / "store2"
        (root2 / "refs" / "threads").mkdir(parents=True)
        (root2 / "logs" / "threads").mkdir(parents=True)
        prefs = RefStore(root2, fsync=True)
        prefs.declare_packed = lambda: None  # (no format file here to declare in)
        prefs.update_many([RefMove(name, oid(i, 0), expected=None) for i, name in enumerate(names)])
        sizes = [int(x) for x in args.packed.split(",") if x]
        packed = {k: format_packed_refs({f"thread-{i:06d}": oid(i, 1) for i in range(k)}) for k in sizes}
        fsio.sync_filesystem(base)
        res: dict[str, list[float]] = {}

        def cell(name, fn):
            t = time.perf_counter()
            fn()
            res.setdefault(name, []).append((time.perf_counter() - t) * 1000)

        for r in range(1, args.rounds + 1):
            def real(store=refs):
                store.update_many([RefMove(name, oid(i, r), expected=oid(i, r - 1), message="bench")
                                   for i, name in enumerate(names)])

            def rename_over(dir_sync=False):
                for i in range(n):
                    fsio.write_new_file(raw / f".t{i}", (oid(i, r) + "\n").encode())
                fsio.sync_filesystem(raw)
                for i in range(n):
                    os.rename(raw / f".t{i}", raw / f"r{i}")
                if dir_sync:
                    fsio.fsync_dir(raw)
                else:
                    fsio.sync_filesystem(raw)

            def exch():
                for i in range(n):
                    fd = os.open(raw / f".spare{i}", os.O_WRONLY)
                    os.pwrite(fd, (oid(i, r) + "\n").encode(), 0)
                    os.close(fd)
                fsio.sync_filesystem(raw)
                for i in range(n):
                    exchange(str(raw / f".spare{i}"), str(raw / f"r{i}"))
                fsio.sync_filesystem(raw)

            def second_syncfs(store):  # the batch's renames made durable as before: a second syncfs
                store._renames_durable = lambda staged, repacked: fsio.sync_filesystem(store.root)
                try:
                    real(store)
                finally:
                    del store._renames_durable

            cells = [("update_many, loose refs", real), ("update_many, packed-refs", lambda: real(prefs)),
                     ("update_many, loose refs, second syncfs (before)", lambda: second_syncfs(refs)),
                     ("update_many, packed-refs, second syncfs (before)", lambda: second_syncfs(prefs)),
                     ("rename-over", rename_over),
                     ("rename + fsync dir", lambda: rename_over(True)), ("exchange", exch)]
            for k in sizes:
                cells.append((f"packed-refs {k:,} (write)",
                              lambda k=k: fsio.replace_file(base / "packed-refs", packed[k], fsync=True)))
                cells.append((f"packed-refs {k:,} (a reader's lookup)",
                              lambda k=k: open_packed_refs(packed[k]).get(f"thread-{k // 2:06d}")))
            for name, fn in (cells if r % 2 else cells[::-1]):
                cell(name, fn)
        print(f"\nms per batch of {n} ref moves (or per packed-refs file), {args.rounds} rounds, interleaved; "
              f"load average {os.getloadavg()[0]:.1f}\n")
        print("| what | median | p90 |")
        print("|---|---|---|")
        for name, xs in res.items():
            xs = sorted(xs)
            print(f"| {name} | {statistics.median(xs):.2f} | {xs[int(len(xs) * 0.9)]:.2f} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
