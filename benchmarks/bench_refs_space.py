"""Refs and reflogs on disk per thread, before and after gc packs the refs and reflogs (issue 10).

    .venv/bin/python benchmarks/bench_refs_space.py                     # 10,000 threads (~1 min)
    .venv/bin/python benchmarks/bench_refs_space.py --threads 100000

N threads of 2 messages each are committed with ``commit_many`` (fsync off: set-up), then
``du`` of ``refs/`` (plus ``packed-refs``) and ``logs/`` (plus ``packed-logs``) is taken
before and after ``gc``: bytes on disk (blocks) and apparent bytes, per thread. "before gc"
is after the writers' own packings (past 1,024 loose refs); ``--loose`` turns those off
(refs.AUTO_PACK_LOOSE set very high), which is what every store was before packed reflogs.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import convgit
from convgit.gc import gc
from convgit.repository import Repository


def du(*paths: Path) -> tuple[int, int]:
    """(bytes on disk, apparent bytes) of ``paths`` together."""
    def total(flag: str) -> int:
        out = subprocess.run(["du", flag, "-c", *map(str, paths)], capture_output=True, text=True, check=True).stdout
        return int(out.splitlines()[-1].split()[0])
    return total("-sk") * 1024, total("-sb")


def report(repo: Repository, n: int, tag: str) -> None:
    """Print the figures of one moment."""
    p = repo.path
    refs = [p / "refs"] + ([p / "packed-refs"] if (p / "packed-refs").exists() else [])
    rb, ra = du(*refs)
    lb, la = du(*([p / "logs"] + ([p / "packed-logs"] if (p / "packed-logs").exists() else [])))
    print(f"{tag}: refs+reflogs {(rb + lb) / n:.0f} B/thread on disk ({(ra + la) / n:.0f} apparent); "
          f"refs {rb / n:.0f} ({ra / n:.0f}); reflogs {lb / n:.0f} ({la / n:.0f})", flush=True)


def main() -> None:
    """Build the store, measure, gc, measure."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=10_000)
    ap.add_argument("--loose", action="store_true", help="no packing by writers (only gc packs)")
    args = ap.parse_args()
    if args.loose:
        from convgit import refs

        refs.AUTO_PACK_LOOSE = 10**9
    n = args.threads
    with tempfile.TemporaryDirectory(prefix="convgit-refs-") as d:
        repo = convgit.init(Path(d) / "s")
        (repo.path / "config.toml").write_text("[core]\nfsync = false\n")
        repo.close()
        repo = Repository.open(repo.path)
        items = [{"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}],
                  "source": "bench", "upstream_thread_id": f"t{i:07d}"} for i in range(n)]
        t = time.perf_counter()
        for k in range(0, n, 500):
            convgit.commit_many(repo, items[k:k + 500])
        print(f"{n} threads built in {time.perf_counter() - t:.1f} s")
        report(repo, n, "before gc")
        t = time.perf_counter()
        stats = gc(repo)
        print(f"gc: {time.perf_counter() - t:.1f} s, {stats.refs_packed} refs packed")
        report(repo, n, "after gc ")
        assert len(repo.refs.read_all()) == n
        repo.close()


if __name__ == "__main__":
    main()
