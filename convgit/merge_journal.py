"""The merge journal (``merge-journal.json``): the ref moves of a merge, written before the
first one is made, and rolled forward by the next writer if the merge dies mid-way.

It lives in the ref layer, beside ``refs``, because recovery is a ref operation that every
writer runs when it takes the store lock (``Repository.write_lock``) and gc runs before it
marks: it needs the refs and an existence check for objects, nothing of merge itself. merge
writes the journal after all objects are in; this module replays it.
"""

from __future__ import annotations

import json

from . import fsio
from .errors import ConvgitError

JOURNAL = "merge-journal.json"


def write_journal(repo, plan: list[dict]) -> None:
    """Make ``plan`` (one entry per thread: ``thread``, ``old``, ``new``, ``turns``,
    ``action``) durable as the journal, before any ref of it moves."""
    fsio.replace_file(repo.path / JOURNAL, json.dumps(plan).encode(), fsync=repo.config.fsync)


def _apply_one(repo, e) -> None:
    name, old, new, turns = e["thread"], e["old"], e["new"], e["turns"]
    cur = repo.refs.read(name)
    if new is not None and cur != new:
        first = turns[0] if turns else None
        repo.refs.update(name, new, expected=old, turn=first, exists=repo.objects.contains,
                         message=f"merge: {e['action']}")
        turns = turns[1:]
    tip = repo.refs.read(name)
    logged = {x.turn for x in repo.refs.read_log(name) if x.turn}
    for t in turns:
        if t not in logged and tip is not None:
            repo.refs.update(name, tip, expected=tip, turn=t, message="merge: recorded turn")


def recover(repo) -> bool:
    """Roll an interrupted merge forward (objects are all in; finish moving the refs).
    True when there was a journal to replay."""
    path = repo.path / JOURNAL
    if not path.exists():
        return False
    try:
        plan = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        fsio.unlink(path)
        return False
    for e in plan:
        cur = repo.refs.read(e["thread"])
        if cur == e["new"] or cur == e["old"]:
            e = dict(e, old=cur)
            try:
                _apply_one(repo, e)
            except ConvgitError:
                pass
    fsio.unlink(path)
    return True


__all__ = ["JOURNAL", "recover", "write_journal"]
