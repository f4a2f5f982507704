"""Reachability in the derived index: which threads reach a message, and which indexed
messages no thread reaches any more.

The index never deletes a message row (a message's earliest turn is learned once, from the
reflog entry that brought it; a row deleted and re-indexed later would lose it). A thread that
is deleted, or moved to a message that is not a descendant of its old tip, can leave messages
behind that no thread reaches; a rebuilt index would not hold them. Their rowids are kept in
the ``unreachable`` table (and taken out of the full-text index, so that ranking statistics are
a rebuilt index's), and every query that lists messages from the index (status, paging) leaves
them out, so that each answers the same before and after a rebuild. A
message that becomes reachable again (a fork of an old id, ``update-ref`` back) leaves the
table. Both walks stop at the first message whose state does not change, so they cost the
number of messages that changed state (and the messages the catch-up added), not the size
of the store. They rely on the table being closed downwards (a message in it has no thread
tip at or below it) and its complement upwards (a reachable message's parent is reachable):
so a walk up from a new tip passes through the messages this catch-up added, which were
never in the table although their parent may be, before it stops.
"""

from __future__ import annotations

import json



def after_catch_up(db, known: dict[str, tuple], refs: dict[str, str], gone: set[str], *,
                   commit: bool = False, new_from: int | None = None) -> tuple[list[int], list[int]]:
    """Keep ``unreachable`` right after the threads in ``refs`` were caught up.

    ``known``: name → (tip, reflog size) before; ``refs``: the caught-up name → tip;
    ``gone``: the threads the catch-up removed; ``commit``: the catch-up was a commit's,
    which never leaves a message behind (it only creates threads or fast-forwards them);
    ``new_from``: the first rowid this catch-up added (its rows are reachable but were never
    in the table, so a walk up from a new tip goes on through them to the older rows).
    Returns the rowids that left the table (reachable again) and those that entered it, in
    that order: what the index's running totals (writer.py) change by.
    """
    back: list[int] = []
    left: list[int] = []
    moved_from = [old[0] for name, old in known.items()
                  if (name in refs and refs[name] != old[0]) or name in gone]
    if db.execute("SELECT 1 FROM unreachable LIMIT 1").fetchone() is not None:
        for name, tip in refs.items():
            old = known.get(name)
            if old is None or old[0] != tip:
                _mark_reachable(db, tip, back, new_from)
    if moved_from and not commit:
        tips = _Tips(db)
        for old in moved_from:
            if old not in tips:
                _mark_unreachable_from(db, old, tips, left)
    return back, left


class _Tips:
    """``oid in tips``: is ``oid`` some thread's tip (one indexed lookup, not a set of every tip)."""

    def __init__(self, db) -> None:
        self.db = db

    def __contains__(self, oid: str) -> bool:
        return self.db.execute("SELECT 1 FROM threads WHERE tip=? LIMIT 1", (oid,)).fetchone() is not None


def reset(db) -> None:
    """Empty what is derived from message rows (before the first rows are added)."""
    if db.execute("SELECT 1 FROM unreachable LIMIT 1").fetchone() is not None:
        db.execute("DELETE FROM unreachable")
    if db.execute("SELECT 1 FROM message_fts_docsize LIMIT 1").fetchone() is not None:
        db.execute("INSERT INTO message_fts (message_fts) VALUES ('delete-all')")


def _mark_reachable(db, oid: str | None, out: list[int], new_from: int | None = None) -> None:
    """Take ``oid`` and its ancestors out of ``unreachable``, up to the first older row that
    is not in it (reachable already, and so is everything above it). Rows this catch-up added
    (rowid >= ``new_from``) were never in the table, and their parent may be: a thread moved
    back (or a stateless commit) continuing a history no thread reached. The walk goes on
    through them; stopping at the new tip left that history unreachable for good (and a later
    move skipped it as a subtree "known to hold no tip", marking a live history unreachable)."""
    from .fts import fts_add  # (fts and its query language: loaded by the commands that write or search)

    row = db.execute("SELECT rowid, parent_rowid FROM messages WHERE id=?", (oid,)).fetchone()
    while row is not None:
        if db.execute("DELETE FROM unreachable WHERE rowid=?", (row[0],)).rowcount == 0:
            if new_from is None or row[0] < new_from:
                return  # reachable already, and so is everything above it
        else:
            out.append(row[0])
            fts_add(db, row[0])
        row = None if row[1] is None else db.execute(
            "SELECT rowid, parent_rowid FROM messages WHERE rowid=?", (row[1],)).fetchone()


def _reaches_tip(db, rid: int, oid: str, tips: set[str]) -> bool:
    """Does any thread tip lie in the subtree below ``oid`` (itself included)?"""
    todo = [(rid, oid)]
    while todo:
        r, o = todo.pop()
        if o in tips:
            return True
        if db.execute("SELECT 1 FROM unreachable WHERE rowid=?", (r,)).fetchone() is not None and r != rid:
            continue  # a subtree known to hold no tip
        todo.extend(db.execute("SELECT rowid, id FROM messages WHERE parent_rowid=?", (r,)).fetchall())
    return False


def _mark_unreachable_from(db, oid: str | None, tips: set[str], out: list[int]) -> None:
    from .fts import fts_remove

    row = db.execute("SELECT rowid, parent_rowid, id FROM messages WHERE id=?", (oid,)).fetchone()
    while row is not None:
        if _reaches_tip(db, row[0], row[2], tips):
            return
        if db.execute("INSERT OR IGNORE INTO unreachable VALUES (?)", (row[0],)).rowcount:
            out.append(row[0])
            fts_remove(db, row[0])
        row = None if row[1] is None else db.execute(
            "SELECT rowid, parent_rowid, id FROM messages WHERE rowid=?", (row[1],)).fetchone()


THREADS_REACHING_SQL = """WITH RECURSIVE d(rid) AS (SELECT rowid FROM messages WHERE id = ? UNION ALL
             SELECT m.rowid FROM messages m JOIN d ON m.parent_rowid = d.rid LIMIT ?)
           SELECT count(DISTINCT d.rid), json_group_array(h.name) FILTER (WHERE h.name IS NOT NULL)
           FROM d JOIN messages dm ON dm.rowid = d.rid LEFT JOIN threads h ON h.tip = dm.id"""


def threads_reaching(db, oid: str, *, limit: int = 20, max_walk: int = 50_000) -> tuple[list[str], int, bool]:
    """(first ``limit`` thread names by name, how many threads, whether the count is a lower
    bound) for the threads whose history holds ``oid``: those whose tip is ``oid`` or below it.
    The walk down the subtree stops after ``max_walk`` messages."""
    walked, names = db.execute(THREADS_REACHING_SQL, (oid, max_walk)).fetchone()
    found = sorted(json.loads(names)) if names else []
    return found[:limit], len(found), walked >= max_walk
