"""Space at scale after gc (issue 10): objects, refs + reflogs, and the index in both modes,
against the raw text they hold.

    .venv/bin/python benchmarks/bench_space.py [--messages 100000 300000] [--import-conversations 2000]

For each size: the synthetic store of bench_search.py (families of 10 threads sharing a
4-message prefix; fsync off: a throw-away store), then ``gc --prune now``, then the on-disk
size (allocated blocks) of ``objects/``, of the refs and reflogs (``refs/``, ``logs/``,
``packed-refs``, HEAD), and of ``index.sqlite`` built in the default mode and again with
``[index] text = false``. "raw text" is the UTF-8 text the store holds once (``status``'s
``text_bytes``: text, reasoning, tool calls and results). ``--import-conversations N``: also
a store imported from a synthetic ChatGPT export of N conversations (bench_import.py's
generator: branches, a turn per message, aliases), measured the same way. Each row also gives
the index's bytes per message by table and index (SQLite's ``dbstat``). Results: a markdown
table on stdout and benchmarks/out/space.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ["CONVGIT_FSYNC"] = "0"  # synthetic stores only

import bench_search  # noqa: E402
import convgit  # noqa: E402
from convgit.repository import Repository  # noqa: E402


def disk(path: Path) -> int:
    """Allocated bytes under ``path`` (a file or a directory)."""
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_blocks * 512
    total = 0
    for dp, dns, fns in os.walk(path):
        total += os.stat(dp).st_blocks * 512
        for f in fns:
            try:
                total += os.lstat(os.path.join(dp, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def by_table(index: Path, messages: int) -> dict[str, float]:
    """Bytes per message of each table and index of ``index`` (SQLite's ``dbstat``; the
    FTS5 shadow tables folded into one ``fts``), largest first."""
    import sqlite3

    db = sqlite3.connect(index)
    try:
        rows = db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    finally:
        db.close()
    out: dict[str, float] = {}
    for name, size in rows:
        key = "fts" if name.startswith("message_fts") else name
        out[key] = out.get(key, 0) + size
    return {k: round(v / messages, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def build_imported(store: Path, conversations: int) -> dict:
    """A store made by importing a synthetic ChatGPT export of ``conversations``
    conversations (bench_import.py's generator: branches, per-message turns, aliases)."""
    import bench_import
    from convgit import api

    store.mkdir(parents=True, exist_ok=True)
    export = store.parent / f"export-{conversations}.json"
    bench_import.generate(export, 0, count=conversations)
    repo = convgit.init(store)
    r = api.import_paths(repo, [str(export)])
    threads = len(repo.refs.read_all())
    n = repo.index.db.execute("SELECT count(*) FROM messages").fetchone()[0]
    repo.close()
    export.unlink()
    return {"messages": n, "threads": threads, "conversations": len(r.conversations)}


def measure(messages: int, root: Path, *, imported: bool = False) -> dict:
    store = root / (f"import-{messages}" if imported else f"store-{messages}")
    t0 = time.perf_counter()
    info = build_imported(store, messages) if imported else bench_search.build(store, messages)
    build_s = time.perf_counter() - t0
    repo = Repository.open(store / ".convgit")
    gc = convgit.gc(repo, prune="now")
    status = convgit.status(repo)
    repo.close()
    p = store / ".convgit"
    text = status["text_bytes"]
    objects = disk(p / "objects")
    refs = disk(p / "refs") + disk(p / "logs") + disk(p / "packed-refs") + disk(p / "HEAD")
    index_full = disk(p / "index.sqlite")
    tables_full = by_table(p / "index.sqlite", info["messages"])
    cfg = p / "config.toml"
    conf = cfg.read_text()
    if "\ntext = true" in conf:  # (a store made by convgit.init writes the defaults)
        cfg.write_text(conf.replace("\ntext = true", "\ntext = false", 1))
    else:
        cfg.write_text(conf + "\n[index]\ntext = false\n")
    t1 = time.perf_counter()
    with Repository.open(p) as r:
        r.index  # rebuilt in the lean mode
    lean_s = time.perf_counter() - t1
    index_lean = disk(p / "index.sqlite")
    tables_lean = by_table(p / "index.sqlite", info["messages"])
    threads = info["threads"]
    out = {
        "corpus": "chatgpt import" if imported else "bench_search", "messages": info["messages"], "threads": threads, "build_s": round(build_s, 1), "gc_s": gc.seconds,
        "text_bytes": text, "objects": objects, "refs_and_reflogs": refs, "index_default": index_full,
        "index_lean": index_lean, "lean_rebuild_s": round(lean_s, 1),
        "refs_per_thread": round(refs / threads, 1),
        "store_default_x_text": round((objects + refs + index_full) / text, 3),
        "store_lean_x_text": round((objects + refs + index_lean) / text, 3),
        "objects_x_text": round(objects / text, 3),
        "index_default_x_text": round(index_full / text, 3), "index_lean_x_text": round(index_lean / text, 3),
        "index_default_bytes_per_message": tables_full, "index_lean_bytes_per_message": tables_lean,
    }
    shutil.rmtree(store)
    return out


def table(rows: list[dict]) -> str:
    mb = lambda b: f"{b / 1e6:,.1f} MB"  # noqa: E731
    lines = ["| messages (threads) | raw text | objects | refs + reflogs | index default | index lean "
             "| store / text, default | store / text, lean |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['messages']:,} ({r['threads']:,}){', imported' if r.get('corpus') == 'chatgpt import' else ''} | {mb(r['text_bytes'])} | {mb(r['objects'])} ({r['objects_x_text']}x) "
            f"| {mb(r['refs_and_reflogs'])} ({r['refs_per_thread']:,.0f} B/thread) "
            f"| {mb(r['index_default'])} ({r['index_default_x_text']}x) | {mb(r['index_lean'])} ({r['index_lean_x_text']}x) "
            f"| {r['store_default_x_text']} | {r['store_lean_x_text']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, nargs="*", default=[100_000, 300_000])
    ap.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "convgit-bench-space")
    ap.add_argument("--import-conversations", type=int, nargs="*", default=[],
                    help="also stores imported from a synthetic ChatGPT export of this many conversations")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "space.json")
    a = ap.parse_args()
    a.root.mkdir(parents=True, exist_ok=True)
    rows = []
    for n, imported in [(n, False) for n in a.messages] + [(n, True) for n in a.import_conversations]:
        rows.append(measure(n, a.root, imported=imported))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(rows, indent=2))
    print(table(rows))


if __name__ == "__main__":
    main()
