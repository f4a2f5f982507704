"""Editing a directory remote behind convgit's back (hostile and damaged remotes in tests)."""

from __future__ import annotations

import json
from pathlib import Path


def rewrite_threads(url: Path, edit, *, version: int = 2) -> None:
    """Rewrite a directory remote's threads by ``edit(threads)`` behind convgit's back: as a
    format-1 refs document (threads inline) or as format 2 (one new base segment, named by
    the BLAKE3 of its bytes as a writer would)."""
    from blake3 import blake3
    from convgit.remotes.refsdoc import dump_segment

    root = json.loads((url / "refs.json").read_text())
    threads: dict = {}
    for digest, _ in root.get("segments", []):
        for n, t in json.loads((url / "refs" / f"{digest}.json").read_text())["threads"].items():
            threads.pop(n) if t is None else threads.__setitem__(n, t)
    edit(threads)
    root.pop("segments", None)
    if version == 1:
        root.update({"format": "convgit-remote 1", "threads": threads})
    else:
        data = dump_segment(threads)
        digest = blake3(data).hexdigest()
        (url / "refs" / f"{digest}.json").write_bytes(data)
        root["segments"] = [[digest, len(data)]]
    (url / "refs.json").write_text(json.dumps(root))
