"""Reproduce the running-totals drift of issue 10: forked writers commit to a fresh store at
once (tests/reliability/test_index_recovery.py's workload), then the live index's running
totals (what ``status`` reads) are compared with a count over its own rows and with the
totals of an index rebuilt from the objects. Loops and prints how many runs drifted.

    python scripts/repro_totals_drift.py [--loops 20] [--writers 4] [--commits 40]

Before the fix (docs/index.md "Running totals"), about half the runs ended with the live
totals equal to a count of the live rows but short of a rebuild's: reachable messages held
in the ``unreachable`` table. Exit status 1 when any run drifted.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

os.environ["CONVGIT_FSYNC"] = "0"
os.environ.setdefault("CONVGIT_LOCK_TIMEOUT", "60")

import convgit  # noqa: E402
from convgit import graph  # noqa: E402
from convgit.index import Index  # noqa: E402
from convgit.index.schema import count_totals, read_totals  # noqa: E402
from convgit.repository import Repository  # noqa: E402

CTX = multiprocessing.get_context("fork")


def _history(repo, thread: str) -> list[dict]:
    tip = repo.refs.read(thread)
    if tip is None:
        return []
    out = [{"role": m.role, "content": convgit.message_text(repo, m)} for _, m in graph.iter_ancestry(repo.objects, tip)]
    out.reverse()
    return out


def _writer(root: str, wid: int, n: int, seed: int, go) -> None:
    repo = Repository.open(root)
    rnd = random.Random(seed + wid)
    go.wait()
    for i in range(n):
        t = rnd.choice(["shared", f"own{wid}"])
        for _ in range(100):
            try:
                convgit.commit(repo, {"messages": _history(repo, t) + [{"role": "user", "content": f"w{wid} {i}"}]},
                               thread=t, model=f"model-{wid}")
                break
            except (convgit.errors.DuplicateConflict, convgit.errors.RefStale):
                continue  # another writer moved the shared thread first
    repo.close()


def one_run(writers: int, commits: int, seed: int) -> tuple[dict, dict, dict, int, Path]:
    """(live totals, counted from the live rows, counted in a rebuild, live rows held
    unreachable although a thread reaches them, the store's directory)."""
    tmp = Path(tempfile.mkdtemp(prefix="convgit-totals-"))
    repo = convgit.init(tmp / ".convgit")
    (repo.path / "config.toml").write_text("[core]\nfsync = false\n")
    root = repo.path
    repo.close()
    go = CTX.Event()
    ps = [CTX.Process(target=_writer, args=(str(root), w, commits, seed, go)) for w in range(writers)]
    for p in ps:
        p.start()
    go.set()
    for p in ps:
        p.join(300)
    with Repository.open(root) as repo:
        repo.index.refresh()
        db = repo.index.db
        live, counted = read_totals(db), count_totals(db)
        wrong = db.execute(
            """WITH RECURSIVE r(id) AS (SELECT tip FROM threads UNION SELECT m.parent FROM messages m JOIN r ON m.id = r.id
               WHERE m.parent IS NOT NULL)
               SELECT count(*) FROM messages m JOIN r ON r.id = m.id WHERE m.rowid IN (SELECT rowid FROM unreachable)""",
        ).fetchone()[0]
        fresh = Index(repo, path=tmp / "fresh.sqlite", autorefresh=False)
        rebuilt = count_totals(fresh.db)
        fresh.close()
    return live, counted, rebuilt, wrong, tmp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", type=int, default=20)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--commits", type=int, default=40, help="commits per writer")
    ap.add_argument("--seed", type=int, default=20240515)
    ap.add_argument("--keep", action="store_true", help="keep the stores that drifted")
    a = ap.parse_args()
    bad = 0
    for i in range(a.loops):
        live, counted, rebuilt, wrong, tmp = one_run(a.writers, a.commits, a.seed + 1000 * i)
        ok = live == counted == rebuilt and wrong == 0
        bad += not ok
        if ok:
            print(f"run {i}: ok {live}", flush=True)
        else:
            print(f"run {i}: DRIFT live={live} counted={counted} rebuilt={rebuilt} "
                  f"reachable-but-unreachable={wrong}" + (f" kept {tmp}" if a.keep else ""), flush=True)
        if ok or not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{bad}/{a.loops} runs drifted")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
