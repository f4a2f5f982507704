"""Chunks: what is embedded. A message's *chunk text* is cut into fixed, overlapping windows;
each window is a chunk with the id ``<message id>:<window index>``.

The chunk text of a message is its text parts (user, assistant, system and developer
messages; tool messages only with ``include_tools``), then its reasoning parts with
``include_reasoning`` and its tool calls and results with ``include_tools``, each part's
text in part order, joined by a blank line ("\\n\\n").

Windows are counted in characters (Unicode code points): a text of at most ``WINDOW``
characters is one chunk (window 0); a longer one gives windows ``[k*STEP, k*STEP + WINDOW)``
for k = 0, 1, ... (``STEP = WINDOW - OVERLAP``), the last one ending at the end of the text.
An empty or blank text gives no chunk. So the same message gives the same chunks in every
store, whatever thread or position reaches it, and a chunk id never depends on the time or
the model: a message reached by a hundred threads is one chunk, and a fork, a re-send, a
merge or a re-import has nothing new to embed.

The ``chunks`` table (schema.py) is derived and rebuilt with the index; it is filled lazily
(``sync``), in message rowid order, up to a high-water mark kept in ``meta``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from .. import fsio
from .healing import healing_call

WINDOW = 1000  # characters: about 250 English tokens, well inside e5's 512
OVERLAP = 200
STEP = WINDOW - OVERLAP
CHUNK_SCHEME = "chunk-v1"


@dataclass(frozen=True)
class ChunkRules:
    """What goes into a message's chunk text (config ``[embed]``)."""

    include_reasoning: bool = False
    include_tools: bool = False

    @property
    def key(self) -> str:
        """The rules as a string: part of every namespace's fingerprint, so vectors of chunks
        cut by other rules are never reused."""
        return f"{CHUNK_SCHEME} w{WINDOW} o{OVERLAP} r{int(self.include_reasoning)} t{int(self.include_tools)}"


def windows(length: int) -> list[tuple[int, int]]:
    """The (start, end) character windows of a text of ``length`` characters."""
    if length <= 0:
        return []
    if length <= WINDOW:
        return [(0, length)]
    out = []
    start = 0
    while True:
        end = min(start + WINDOW, length)
        out.append((start, end))
        if end >= length:
            return out
        start += STEP


def chunk_id(oid: str, win: int) -> str:
    """``<message id>:<window index>``."""
    return f"{oid}:{win}"


def split_chunk_id(cid: str) -> tuple[str, int]:
    """(message id, window) of a chunk id."""
    oid, _, win = cid.rpartition(":")
    return oid, int(win)


def chunk_text(role: str, parts: list[tuple[str, str | None]], rules: ChunkRules) -> str:
    """The chunk text of a message from its role and its (type, text) parts in order."""
    texts = []
    for type_, text in parts:
        if not text:
            continue
        if type_ == "text":
            ok = role != "tool" or rules.include_tools
        elif type_ == "reasoning":
            ok = rules.include_reasoning
        elif type_ in ("tool_call", "tool_result"):
            ok = rules.include_tools
        else:
            ok = False
        if ok:
            texts.append(text)
    return "\n\n".join(texts)


def _mark_key(rules: ChunkRules) -> str:
    return f"chunked {rules.key}"


def sync(repo, rules: ChunkRules) -> int:
    """Cut the messages indexed since the last call into chunks (rules changed: all of them
    again). Returns how many chunks were added. Safe against a concurrent ``sync``."""
    index = repo.index
    index.refresh_if_changed()

    def run() -> int:
        db = index.db
        top = db.execute("SELECT coalesce(max(rowid), 0) FROM messages").fetchone()[0]
        row = db.execute("SELECT value FROM meta WHERE key=?", (_mark_key(rules),)).fetchone()
        if row is not None and int(row[0]) >= top:
            return 0
        with fsio.flock(index.lock_path, shared=False, timeout=60):
            index._follow_swap()
            db = index.db
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT value FROM meta WHERE key=?", (_mark_key(rules),)).fetchone()
                if row is None:  # first sync, or other rules: cut everything again
                    db.execute("DELETE FROM chunks")
                    db.execute("DELETE FROM meta WHERE key LIKE 'chunked %' OR key LIKE 'embedded %'")
                mark = int(row[0]) if row else 0
                # ``top`` again, under the lock: the one read before it may be another file's (a
                # rebuilt index swapped in) or older than what another process has cut meanwhile
                top = db.execute("SELECT coalesce(max(rowid), 0) FROM messages").fetchone()[0]
                added = 0
                for rids, texts in _texts_after(db, mark, top, rules):
                    rows = [(rid, w, s, e) for rid, t in zip(rids, texts) for w, (s, e) in enumerate(windows(len(t)))
                            if t.strip()]
                    db.executemany("INSERT OR IGNORE INTO chunks VALUES (?,?,?,?)", rows)
                    added += len(rows)
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_mark_key(rules), str(top)))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return added

    return healing_call(repo, run)


def _texts_after(db, lo: int, hi: int, rules: ChunkRules, batch: int = 2000) -> Iterator[tuple[list[int], list[str]]]:
    """(message rowids, their chunk texts) for rowids in (lo, hi], in batches."""
    while lo < hi:
        msgs = db.execute("SELECT rowid, role FROM messages WHERE rowid > ? AND rowid <= ? ORDER BY rowid LIMIT ?",
                          (lo, hi, batch)).fetchall()
        if not msgs:
            return
        first, last = msgs[0][0], msgs[-1][0]
        parts: dict[int, list[tuple[str, str | None]]] = {}
        for rid, type_, text in db.execute(
            "SELECT p.message_rowid, p.type, coalesce(p.text, convgit_text(m.id, p.position)) FROM parts p "
            "JOIN messages m ON m.rowid = p.message_rowid "
            "WHERE p.message_rowid BETWEEN ? AND ? ORDER BY p.message_rowid, p.position",
            (first, last),
        ):
            parts.setdefault(rid, []).append((type_, text))
        yield [m[0] for m in msgs], [chunk_text(m[1], parts.get(m[0], []), rules) for m in msgs]
        lo = last


def texts_of(db, rows: list[tuple[int, int, int, int]], rules: ChunkRules) -> list[str]:
    """The text of each chunk row (message rowid, window, start, end)."""
    by_rid: dict[int, str] = {}
    need = sorted({r[0] for r in rows})
    for i in range(0, len(need), 500):
        part = need[i : i + 500]
        roles = dict(db.execute(f"SELECT rowid, role FROM messages WHERE rowid IN ({','.join('?' * len(part))})", part))
        acc: dict[int, list] = {}
        for rid, type_, text in db.execute(
            "SELECT p.message_rowid, p.type, coalesce(p.text, convgit_text(m.id, p.position)) FROM parts p "
            f"JOIN messages m ON m.rowid = p.message_rowid WHERE p.message_rowid IN ({','.join('?' * len(part))}) "
            "ORDER BY p.message_rowid, p.position", part):
            acc.setdefault(rid, []).append((type_, text))
        for rid in part:
            by_rid[rid] = chunk_text(roles.get(rid, "user"), acc.get(rid, []), rules)
    return [by_rid[r[0]][r[2] : r[3]] for r in rows]


def iter_chunks_after(db, mark: int, batch: int = 512) -> Iterator[list[tuple[str, int, int, int, int]]]:
    """Batches of (message id, message rowid, window, start, end) for messages above rowid
    ``mark``, in rowid order (a batch never splits a message)."""
    while True:
        rids = [r[0] for r in db.execute(
            "SELECT DISTINCT message_rowid FROM chunks WHERE message_rowid > ? ORDER BY message_rowid LIMIT ?",
            (mark, batch))]
        if not rids:
            return
        rows = db.execute(
            "SELECT m.id, c.message_rowid, c.win, c.start_char, c.end_char FROM chunks c "
            "JOIN messages m ON m.rowid = c.message_rowid WHERE c.message_rowid BETWEEN ? AND ? "
            "ORDER BY c.message_rowid, c.win", (rids[0], rids[-1])).fetchall()
        yield rows
        mark = rids[-1]


def rows_for(db, cids: list[str]) -> dict[str, tuple[int, int, int, int]]:
    """chunk id → (message rowid, window, start, end), for the chunks the index holds."""
    out = {}
    for cid in cids:
        oid, win = split_chunk_id(cid)
        r = db.execute("SELECT c.message_rowid, c.win, c.start_char, c.end_char FROM chunks c JOIN messages m "
                       "ON m.rowid = c.message_rowid WHERE m.id=? AND c.win=?", (oid, win)).fetchone()
        if r is not None:
            out[cid] = tuple(r)
    return out


def embedded_mark(db, ns_key: str) -> int:
    """The message rowid up to which every chunk has a vector (or failed) in namespace ``ns_key``."""
    row = db.execute("SELECT value FROM meta WHERE key=?", (f"embedded {ns_key}",)).fetchone()
    return int(row[0]) if row else 0


def set_embedded_mark(repo, ns_key: str, rowid: int) -> None:
    """Record that every chunk up to message rowid ``rowid`` is done in ``ns_key``."""
    index = repo.index
    with fsio.flock(index.lock_path, shared=False, timeout=60):
        index._follow_swap()
        index.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"embedded {ns_key}", str(rowid)))


def counts(db) -> dict:
    """Chunks in the index, and of how many (reachable) messages."""
    n, msgs = db.execute(
        "SELECT count(*), count(DISTINCT message_rowid) FROM chunks WHERE message_rowid NOT IN (SELECT rowid FROM unreachable)"
    ).fetchone()
    return {"chunks": n, "messages": msgs}


def live_chunk_ids(db) -> Iterator[tuple[str, int]]:
    """(message id, window) of every chunk of a reachable message."""
    yield from db.execute("SELECT m.id, c.win FROM chunks c JOIN messages m ON m.rowid = c.message_rowid "
                          "WHERE c.message_rowid NOT IN (SELECT rowid FROM unreachable)")
