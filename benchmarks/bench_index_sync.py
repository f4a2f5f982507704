"""``index sync --from REMOTE`` against ``clone``: bytes read by range vs the packs' size, time,
a no-op sync, and an incremental sync after 1,000 new messages (docs/remotes.md,
docs/performance.md).

    .venv/bin/python benchmarks/bench_index_sync.py                        # 2,000 x 10 messages, dir + S3
    .venv/bin/python benchmarks/bench_index_sync.py --conversations 20000  # 200,000 messages
    .venv/bin/python benchmarks/bench_index_sync.py --no-s3

The store (bench_maintenance's corpus, gc'd) is pushed to an empty remote (a directory, and a
real SeaweedFS started here as the tests start it). Then: a full clone (the baseline: whole
packs downloaded, verified, repacked, indexed), an index-only store's first sync, a second
sync with nothing new, 100 new conversations pushed, and an incremental sync (and, for
comparison, the clone's pull of the same). SQLite index. Writes benchmarks/out/index_sync.json.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from bench_maintenance import corpus  # noqa: E402
from bench_remote import build, timed  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


def run(kind: str, url: str, repo, tmp: Path, n_conv: int, endpoint: str | None) -> dict:
    name = f"r{uuid.uuid4().hex[:6]}"
    convgit.add_remote(repo, name, url, endpoint=endpoint)
    convgit.push(repo, name)
    (clone, crep), t_clone = timed(convgit.clone, url, tmp / f"clone-{kind}", endpoint=endpoint)
    ix = convgit.init(tmp / f"ix-{kind}")
    convgit.add_remote(ix, "origin", url, endpoint=endpoint)
    first, t_first = timed(convgit.index_sync, ix, "origin")
    ix.close()
    ix = convgit.open_repo(tmp / f"ix-{kind}")
    noop, t_noop = timed(convgit.index_sync, ix, "origin")
    off = 10**6 * (1 + ["dir", "s3"].index(kind))
    convgit.commit_many(repo, corpus(100, seed=off, first=n_conv + off))
    convgit.push(repo, name)
    ix.close()
    ix = convgit.open_repo(tmp / f"ix-{kind}")
    inc, t_inc = timed(convgit.index_sync, ix, "origin")
    pull, t_pull = timed(convgit.pull, clone, "origin")
    same = convgit.search(ix, "the", count=20) == convgit.search(clone, "the", count=20)
    stored = sum(1 for p in (ix.path / "objects").rglob("*") if p.is_file())
    clone.close()
    ix.close()
    return {
        "remote": kind, "messages": n_conv * 10, "packs": first.packs, "pack_bytes": first.pack_bytes,
        "clone_s": round(t_clone, 2), "clone_bytes": crep.bytes,
        "first_sync_s": round(t_first, 2), "first_bytes_read": first.bytes_read, "first_requests": first.requests,
        "first_idx_bytes": first.idx_bytes,
        "noop_sync_s": round(t_noop, 3), "noop_bytes_read": noop.bytes_read, "noop_requests": noop.requests,
        "incremental_s": round(t_inc, 3), "incremental_bytes_read": inc.bytes_read,
        "incremental_requests": inc.requests, "incremental_pack_bytes_new": inc.pack_bytes - first.pack_bytes,
        "incremental_pull_s": round(t_pull, 3), "incremental_pull_bytes": pull.bytes,
        "search_same_as_clone": same, "objects_stored_in_index_only_store": stored,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=2000)
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT / "index_sync.json")
    args = ap.parse_args()
    os.environ["CONVGIT_FSYNC"] = "0"  # throw-away stores (the remote writes are not what is measured)
    results = []
    with tempfile.TemporaryDirectory(prefix="convgit-ixsync-") as td:
        tmp = Path(td)
        repo = build(tmp / "store", args.conversations)
        os.environ["CONVGIT_FSYNC"] = "0"
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
