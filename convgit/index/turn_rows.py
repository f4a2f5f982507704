"""Turn rows: what a reflog's turns become in the index (a mixin of the writer, over
``self.db``): the ``turns`` row, the earliest turn of each message it produced (the messages'
``turn_rowid``), the per-message turns an import lists, and the source ids it names (aliases)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .rows import Reader, dump_json

if TYPE_CHECKING:
    from ..objects import Turn


# The keys of a turn's ``meta`` that the index's own queries read (``Lookups.upstream_threads``:
# an import turn's ``branch``; ``Lookups.turn_rows(schema=True)``: an llm call's ``schema_id``).
# Only these are kept in ``turns.meta_json``; the rest of ``meta`` (a source's metadata of each
# imported message: finish details, citations, request ids, about 400 bytes a ChatGPT message;
# an import turn's lists of turns and aliases, which are rows of their own) is read from the
# turn object, where it always is.
INDEXED_META = ("branch", "schema_id")


def _row_meta(t: Turn) -> dict | None:
    """A turn's ``meta`` as its row keeps it: the ``INDEXED_META`` keys it has, or None."""
    meta = t.meta
    if not meta:
        return None
    kept = {k: meta[k] for k in INDEXED_META if k in meta}
    return kept or None


_INSERT_TURN = "INSERT OR REPLACE INTO turns VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"


class TurnRows:
    """Indexing turns (``_index_turn``), used by ``IndexWriter`` inside a catch-up."""

    def _index_turn(self, reader: "Reader", tid: str, t: Turn, thread: str | None, *, stop: str | None,
                    record: int | None = None, known: dict | None = None) -> None:
        """Index turn ``tid``: its row, and the messages it produced (their ``turn_rowid``).
        ``known``: the turn rows of a batch looked up at once (``_index_import``): the row
        is then queued there (``_queued_turns``) and written with its batch."""
        db = self.db
        u = t.usage or {}
        inp_tok = u.get("input_tokens", u.get("prompt_tokens"))
        out_tok = u.get("output_tokens", u.get("completion_tokens"))
        # A message's turn is the earliest turn that produced it: (input, output].
        start = t.started_at if t.started_at is not None else 0
        key = (start, tid)
        # (rowid, thread): its rowid is kept when the row is replaced
        was = known.get(tid) if known is not None else self._turn_row(tid)
        trid = was[0] if was is not None else self._next_turn_rowid
        self._next_turn_rowid += was is None
        if thread is None and was is not None:
            thread = was[1]  # named again by an archived reflog: a live thread's turn stays its own
        oid: str | None = t.output
        steps = 0
        out_depth = None
        span = None  # what the event brought itself: (input, output] (docs/format.md §8)
        while oid is not None and oid != stop and steps < 1_000_000:
            if oid == t.input and span is None:
                span = steps
            row = self._pending.get(oid)
            if row is not None:  # queued in this transaction: decide in memory
                if row[9] is None or key < row[9]:
                    row[6], row[9] = trid, key
                parent = row[10]
                depth = row[4]
            else:
                self._write_queued_turns()  # (the statement below reads the turn rows)
                db.execute(
                    """UPDATE messages SET turn_rowid = :r WHERE id = :m AND (turn_rowid IS NULL OR turn_rowid = :r OR
                       (SELECT coalesce(started_at, 0) > :s OR (coalesce(started_at, 0) = :s AND id > :t)
                        FROM turns WHERE rowid = messages.turn_rowid) IS NOT 0)""",
                    {"r": trid, "t": tid, "m": oid, "s": start},
                )
                row = db.execute("SELECT p.id, m.depth FROM messages m LEFT JOIN messages p ON p.rowid = m.parent_rowid "
                                 "WHERE m.id=?", (oid,)).fetchone()
                if row is None:  # not indexed (no thread holds it): read it to go on
                    msg = reader.message_or_none(oid)
                    if msg is None:
                        break
                    steps += 1
                    oid = msg.parent
                    continue
                parent, depth = row  # the index knows the parent: no need to read the object again
            if out_depth is None:
                out_depth = depth + steps  # the output is ``steps`` messages above this one
            steps += 1
            oid = parent
        if getattr(self, "_delta", None) is not None:  # the turn's row before it is replaced
            self._delta["turns"] += (thread is not None) - (was is not None and was[1] is not None)
        row = (
            trid, tid, thread, t.kind, t.input, t.output, t.model, t.resolved_model, t.started_at,
            t.duration_ms, inp_tok if isinstance(inp_tok, int) else None,
            out_tok if isinstance(out_tok, int) else None, dump_json(t.usage), dump_json(t.options),
            t.source, t.upstream_thread_id, t.forked_from, t.error, dump_json(_row_meta(t)),
            record, out_depth, steps if span is None else span,
        )
        if known is not None:
            self._queued_turns.append(row)
            known[tid] = (trid, thread)  # (listed twice: the same row again)
        else:
            db.execute(_INSERT_TURN, row)
        self._turn_indexed(tid, trid, thread)
        if t.kind == "import" and t.meta:
            self._index_import(reader, tid, trid, t)
        elif t.meta and t.source:  # a recorded call names its upstream ids too (convgit serve)
            self._index_aliases(trid, t)

    def _index_import(self, reader: "Reader", tid: str, trid: int, t: Turn) -> None:
        """An import turn lists the per-message turns it wrote (each message's own time and
        model) and the source ids of the messages it brought (aliases)."""
        subs = t.meta.get("turns")
        if isinstance(subs, list):
            # One per imported message: their rows looked up in one query and written in
            # one statement (two statements per message were a quarter of an import's index time).
            known = self._turn_rows([sid for sid in subs if isinstance(sid, str)])
            self._queued_turns = []
            try:
                for sid in subs:
                    sub = reader.turn(sid) if isinstance(sid, str) else None
                    if sub is not None and not (sub.meta or {}).get("turns"):  # one level only
                        self._index_turn(reader, sid, sub, None, stop=sub.input, record=trid, known=known)
                self._write_queued_turns()
            finally:
                self._queued_turns = []
        self._index_aliases(trid, t)

    def _write_queued_turns(self) -> None:
        """The turn rows ``_index_import`` queued, written (in order) before anything reads them."""
        rows = getattr(self, "_queued_turns", None)
        if rows:
            self.db.executemany(_INSERT_TURN, rows)
            rows.clear()

    def _turn_rows(self, tids: list[str]) -> dict:
        """tid -> (rowid, thread) of those of ``tids`` the index holds (``_turn_row`` in bulk)."""
        out: dict = {}
        for i in range(0, len(tids), 500):
            part = tids[i:i + 500]
            q = "SELECT id, rowid, thread FROM turns WHERE id IN (%s)" % ",".join("?" * len(part))
            for tid, rowid, thread in self.db.execute(q, part):
                out[tid] = (rowid, thread)
        return out

    def _index_aliases(self, trid: int, t: Turn) -> None:
        """The source ids a turn (row ``trid``) names for its messages (``meta.aliases``:
        source id → message id)."""
        aliases = t.meta.get("aliases") if t.meta else None
        if isinstance(aliases, dict) and t.source:
            self.db.executemany(
                "INSERT OR IGNORE INTO aliases VALUES (?,?,?,?)",
                [(t.source, k, v, trid) for k, v in aliases.items() if isinstance(k, str) and isinstance(v, str)],
            )

    def _turn_row(self, tid: str):
        """(rowid, thread) of turn ``tid`` if the index holds it, else None."""
        return self.db.execute("SELECT rowid, thread FROM turns WHERE id=?", (tid,)).fetchone()

    def _turn_indexed(self, tid: str, rowid: int, thread: str | None) -> None:
        """(Called as turn ``tid``'s row is written: a backend may remember it.)"""
