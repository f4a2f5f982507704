"""What the rest of convgit asks the index: the lookups of commit, import, revparse, the
porcelain and status. Every one is healed (healing.py): a damaged page rebuilds the index."""

from __future__ import annotations

import json
from typing import Iterable

from .healing import healing


# The rowids of every message a thread reaches (the tips and their ancestors), as ``r(rid)``.
_REACHED = ("WITH RECURSIVE r(rid) AS (SELECT m.rowid FROM threads h JOIN messages m ON m.id = h.tip "
            "UNION SELECT m.parent_rowid FROM messages m JOIN r ON m.rowid = r.rid WHERE m.parent_rowid IS NOT NULL)")


class IndexLookups:
    """The read side of ``Index`` (over ``self.db``, kept by ``IndexWriter``)."""

    # -- queries used by commit -------------------------------------------------------------

    @healing
    def threads_at(self, tip: str) -> list[str]:
        """The threads whose tip is ``tip``, by name."""
        return [r[0] for r in self.db.execute("SELECT name FROM threads WHERE tip=? ORDER BY name", (tip,))]

    @healing
    def threads_containing(self, oid: str, limit: int = 1) -> list[str]:
        """Threads whose history holds message ``oid`` (a descendant of it is their tip)."""
        return [r[0] for r in self.db.execute(
            """WITH RECURSIVE d(rid) AS (SELECT rowid FROM messages WHERE id = ?
                 UNION SELECT m.rowid FROM messages m JOIN d ON m.parent_rowid = d.rid)
               SELECT name FROM threads WHERE tip IN (SELECT id FROM messages WHERE rowid IN (SELECT rid FROM d))
               UNION SELECT name FROM threads WHERE tip = ? ORDER BY name LIMIT ?""",
            (oid, oid, limit),
        )]

    @healing
    def thread_for_upstream(self, source: str, upstream: str) -> str | None:
        """The thread an import of this upstream conversation moved last (newest turn), or None."""
        row = self.db.execute(
            "SELECT t.thread FROM turns t JOIN threads h ON h.name = t.thread "
            "WHERE t.source=? AND t.upstream_thread_id=? ORDER BY t.started_at DESC, t.id LIMIT 1",
            (source, upstream),
        ).fetchone()
        return row[0] if row else None

    @healing
    def upstream_threads(self, source: str, upstream: str) -> list[tuple[str, str | None]]:
        """(thread, branch) of every existing thread an import of this upstream conversation
        moved, newest first; branch is "main", a source leaf id, or None (a plain commit)."""
        out: dict[str, str | None] = {}
        for thread, meta in self.db.execute(
            "SELECT t.thread, t.meta_json FROM turns t JOIN threads h ON h.name = t.thread "
            "WHERE t.source=? AND t.upstream_thread_id=? ORDER BY t.started_at DESC, t.id",
            (source, upstream),
        ):
            if thread not in out:
                try:
                    branch = json.loads(meta).get("branch") if meta else None
                except (ValueError, AttributeError):
                    branch = None
                out[thread] = branch if isinstance(branch, str) else None
        return list(out.items())

    @healing
    def known_aliases(self, source: str, pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which (source id, message id) pairs are recorded already."""
        found: set[tuple[str, str]] = set()
        keys = sorted({k for k, _ in pairs})
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = ",".join("?" * len(chunk))
            found.update(self.db.execute(
                f"SELECT source_id, message_id FROM aliases WHERE source=? AND source_id IN ({q})", [source, *chunk]
            ))
        return found

    @healing
    def find_alias(self, source: str, source_id: str) -> list[str]:
        """Message ids a source id names: exact, else as a unique prefix (4+ characters)."""
        rows = self.db.execute(
            "SELECT DISTINCT message_id FROM aliases WHERE source=? AND source_id=?", (source, source_id)
        ).fetchall()
        if not rows and len(source_id) >= 4:
            esc = source_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            rows = self.db.execute(
                "SELECT DISTINCT message_id FROM aliases WHERE source=? AND source_id LIKE ? ESCAPE '\\' LIMIT 20",
                (source, esc + "%"),
            ).fetchall()
        return sorted(r[0] for r in rows)

    # -- queries used by porcelain ----------------------------------------------------------

    @healing
    def thread_rows(self) -> list[dict]:
        """Every thread (name order): tip, message count, times, fork source (by its current name), title id."""
        cur = self.db.execute(
            """SELECT h.name, h.tip, m.depth + 1, h.created_ms, h.updated_ms, h.forked_from_thread,
                      h.forked_from_message, tm.id
               FROM threads h LEFT JOIN messages m ON m.id = h.tip LEFT JOIN messages tm ON tm.rowid = m.title_rowid
               ORDER BY h.name"""
        )
        out = []
        renames = self._renames()
        for name, tip, count, created, updated, fthread, fmsg, title_id in cur:
            out.append({
                "name": name, "tip": tip, "messages": count, "created_ms": created, "updated_ms": updated,
                "forked_from_thread": self._current_name(fthread, created, renames),
                "forked_from_message": fmsg, "title_id": title_id,
            })
        return out

    @healing
    def message_text(self, oid: str) -> str:
        """The text parts of message ``oid``, joined by newlines (empty when it has none)."""
        rows = self.db.execute(
            "SELECT coalesce(p.text, convgit_text(m.id, p.position)) FROM parts p JOIN messages m ON m.rowid = p.message_rowid "
            "WHERE m.id=? AND p.type='text' ORDER BY p.position", (oid,),
        ).fetchall()
        return "\n".join(r[0] for r in rows if r[0] is not None)

    @healing
    def turn_info(self, oids: Iterable[str]) -> dict[str, dict]:
        """message id → its turn's time/model, for the given messages."""
        out: dict[str, dict] = {}
        ids = list(oids)
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            q = ",".join("?" * len(chunk))
            for mid, tid, started, model, rmodel, kind in self.db.execute(
                f"SELECT m.id, t.id, t.started_at, t.model, t.resolved_model, t.kind FROM messages m "
                f"JOIN turns t ON t.rowid = m.turn_rowid WHERE m.id IN ({q})", chunk,
            ):
                out[mid] = {"turn": tid, "started_at": started, "model": model, "resolved_model": rmodel, "kind": kind}
        return out

    @healing
    def calls_cover(self, filters) -> set[str]:
        """The ids of the messages that the recorded calls passing ``filters``' turn conditions
        (models, since/until, sources; ``turn_rows``' calls) covered: each call's output and
        its ancestors, ``max(1, span) + 1`` messages in all (what it brought, and its prompt;
        fewer at a root), as ``graph.iter_ancestry`` would read them from the objects, here in
        one recursive statement over the index's rows. Each step reads a row by primary key in
        a scalar subquery: a join there is PostgreSQL's to plan, and it read every message per
        step."""
        from .filters import turn_conditions

        conds = ["(t.kind = 'call' OR t.record_rowid IS NOT NULL)", "t.output IS NOT NULL"]
        params: list = []
        turn_conditions(filters, conds, params)
        return {r[0] for r in self.db.execute(
            "WITH RECURSIVE w(rid, n) AS (SELECT (SELECT m.rowid FROM messages m WHERE m.id = t.output), "
            "CASE WHEN coalesce(t.span, 0) > 1 THEN t.span ELSE 1 END + 1 FROM turns t "
            f"WHERE {' AND '.join(conds)} "
            "UNION SELECT (SELECT m.parent_rowid FROM messages m WHERE m.rowid = w.rid), w.n - 1 FROM w "
            "WHERE w.n > 1 AND w.rid IS NOT NULL) "
            "SELECT DISTINCT (SELECT m.id FROM messages m WHERE m.rowid = w.rid) FROM w WHERE w.rid IS NOT NULL",
            params)}

    _TURN_COLS = ("id, started_at, model, resolved_model, kind, source, input_tokens, output_tokens, "
                  "usage_json, output, duration_ms, thread, (SELECT r.id FROM turns r WHERE r.rowid = turns.record_rowid), "
                  "out_depth, span")
    _TURN_KEYS = ("id", "started_at", "model", "resolved_model", "kind", "source", "input_tokens", "output_tokens",
                  "usage_json", "output", "duration_ms", "thread", "record", "out_depth", "span")

    @healing
    def thread_turns(self, thread: str) -> list[dict]:
        """The turns of ``thread``'s own history (what log shows a message's time, model and
        source from, before the earliest turn anywhere): those recorded on it, and the
        per-message turns listed by its import turns or by the import turns of the same
        upstream conversation (the other branches of one imported tree). Each dict has the
        keys of query.details' turn info, plus ``record`` (the listing import turn, for a
        per-message turn), ``out_depth`` and ``span`` (it covers the ``span`` messages of its
        output's history up to the output, at depth ``out_depth``)."""
        cols = self._TURN_COLS
        rows = self.db.execute(
            f"""WITH mine AS (SELECT rowid AS rid, kind, source, upstream_thread_id FROM turns WHERE thread = :t),
                     recs AS (SELECT rid FROM mine WHERE kind IN ('import', 'call')
                              UNION SELECT r.rowid FROM turns r JOIN (SELECT DISTINCT source, upstream_thread_id FROM mine
                                WHERE upstream_thread_id IS NOT NULL) c
                                ON r.source = c.source AND r.upstream_thread_id = c.upstream_thread_id)
                SELECT {cols} FROM turns WHERE thread = :t
                UNION SELECT {cols} FROM turns WHERE record_rowid IN (SELECT rid FROM recs)""",
            {"t": thread},
        ).fetchall()
        keys = self._TURN_KEYS
        out = []
        for r in rows:
            d = dict(zip(keys, r))
            d["turn"] = d.pop("id")
            out.append(d)
        return out

    @healing
    def turn_rows(self, filters=None, count: int = 0, *, schema: bool = False) -> list[dict]:
        """Recorded calls, newest first, one per turn as ``llm logs`` lists responses: turns of
        kind ``call`` and the per-message turns of imports (each source message's own time,
        model and tokens), also those that added no message (a re-sent call). ``filters``
        (index.filters.Filters): its models, since/until, sources and threads apply. Each dict:
        turn, thread, kind, model, resolved_model, started_at, duration_ms, input_tokens,
        output_tokens, usage_json, source, output, span, error. ``schema``: only calls that
        asked for structured output (an OpenAI ``response_format`` of type ``json_schema`` or
        ``json_object`` in their options, or an llm ``schema_id``)."""
        conds = ["(t.kind = 'call' OR t.record_rowid IS NOT NULL)"]
        params: list = []
        if schema:
            conds.append("(json_extract(t.options_json, '$.response_format.type') IN ('json_schema', 'json_object') "
                         "OR json_extract(t.meta_json, '$.schema_id') IS NOT NULL)")
        f = filters
        if f is not None:
            from .filters import turn_conditions

            turn_conditions(f, conds, params)
            if f.threads:
                conds.append(f"coalesce(t.thread, r.thread) IN ({','.join('?' * len(f.threads))})")
                params.extend(f.threads)
        sql = (f"""SELECT t.id, coalesce(t.thread, r.thread), t.kind, t.model, t.resolved_model, t.started_at,
                          t.duration_ms, t.input_tokens, t.output_tokens, t.usage_json, t.source, t.output,
                          t.span, t.error
                   FROM turns t LEFT JOIN turns r ON r.rowid = t.record_rowid
                   WHERE {' AND '.join(conds)}
                   ORDER BY coalesce(t.started_at, 0) DESC, t.id DESC""" + (" LIMIT ?" if count else ""))
        if count:
            params.append(count)
        keys = ("turn", "thread", "kind", "model", "resolved_model", "started_at", "duration_ms", "input_tokens",
                "output_tokens", "usage_json", "source", "output", "span", "error")
        return [dict(zip(keys, r)) for r in self.db.execute(sql, params)]

    @healing
    def depth(self, oid: str) -> int | None:
        """The depth of message ``oid`` (a root is 0), None when it is not indexed."""
        row = self.db.execute("SELECT depth FROM messages WHERE id=?", (oid,)).fetchone()
        return row[0] if row else None

    @healing
    def dump(self) -> dict:
        """A canonical dump of every derived row (tests compare an incremental index with a rebuild)."""
        q = {
            "threads": "SELECT name, tip, created_ms, updated_ms, forked_from_thread, forked_from_message FROM threads ORDER BY name",
            "turns": "SELECT id, thread, kind, input, output, model, started_at FROM turns WHERE thread IS NOT NULL ORDER BY id",
        }
        out = {k: [list(r) for r in self.db.execute(v)] for k, v in q.items()}
        # Each message a thread reaches, and whether the index holds it as unreachable (never,
        # in a rebuild: one that does is left out of status's counts and of search).
        reach = self.db.execute(
            f"""{_REACHED}
               SELECT m.id, m.parent, m.role, m.depth, m.title_id, m.turn_id, m.n_parts,
                 CASE WHEN m.rowid IN (SELECT rowid FROM unreachable) THEN 1 ELSE 0 END
               FROM message_ids m JOIN r ON r.rid = m.rowid ORDER BY m.id"""
        )
        out["messages"] = [list(r) for r in reach]
        out["renames"] = [list(r) for r in self._renames()]
        # The running totals status reads (a fresh index counts them from its rows).
        from .schema import read_totals

        out["totals"] = read_totals(self.db)
        # The text and fields of every part too: search, log and show read them from here, so
        # a part that differs from its message object (fsck) is a wrong answer.
        out["parts"] = [list(r) for r in self.db.execute(
            f"""{_REACHED}
               SELECT m.id, p.position, p.type, p.text, p.name, p.tool_call_id, p.blob, p.mime_type, p.data_json, p.text_bytes
               FROM parts p JOIN messages m ON m.rowid = p.message_rowid JOIN r ON r.rid = m.rowid
               ORDER BY m.id, p.position""")]
        return out


    # -- queries used by status and fsck (not healed here: status heals around the whole,
    #    and fsck reports an unreadable index instead of curing it) ----------------------------

    def thread_tips(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """name → tip the index recorded, for every thread or just ``names`` (a name it does
        not hold is left out)."""
        if names is None:
            return {n: t for n, t in self.db.execute("SELECT name, tip FROM threads")}
        out = {}
        for n in names:
            row = self.db.execute("SELECT tip FROM threads WHERE name=?", (n,)).fetchone()
            if row is not None:
                out[n] = row[0]
        return out

    def counts(self) -> dict:
        """What ``status`` reports from the index: reachable ``messages``, ``message_refs``
        (every thread counted root to tip), ``text_bytes`` of reachable text parts,
        ``threads``, ``turns`` (on a thread) and ``built_at`` (ms, or None)."""
        from .schema import count_totals, read_totals

        db = self.db
        totals = read_totals(db)  # the writer's running totals: one row, whatever the store's size
        if totals is None:  # (an index written without them: count)
            totals = count_totals(db)
        built = db.execute("SELECT value FROM meta WHERE key='built_at'").fetchone()
        return {**totals, "built_at": int(built[0]) if built else None}

    def totals_problems(self, name: str) -> list[str]:
        """fsck: the running totals status reads, against a count of this index's own rows
        (O(rows)); one line naming each total that differs, or none."""
        from .schema import count_totals, read_totals

        kept, counted = read_totals(self.db), count_totals(self.db)
        if kept is None:
            return [f"{name}: its running totals (totals) are missing or unreadable; "
                    "convgit reindex or fsck --repair rebuilds it"]
        wrong = [f"{k} {kept[k]} (its rows count {counted[k]})" for k in counted if kept[k] != counted[k]]
        if not wrong:
            return []
        return [f"{name}: its running totals (totals) differ from its rows: {', '.join(wrong)}; "
                "convgit reindex or fsck --repair rebuilds it"]

    def quick_check(self) -> str | None:
        """SQLite's ``PRAGMA quick_check`` verdict ("ok" when the file is sound); raises
        sqlite3.DatabaseError when the index cannot even be read."""
        row = self.db.execute("PRAGMA quick_check").fetchone()
        return row[0] if row else None

    def check(self) -> list[str]:
        """What is wrong with this index (fsck): SQLite's quick_check, then whether it holds
        what a rebuild from the objects holds (built beside it in a temp directory). Empty
        when nothing is; never heals (a damaged index is the answer, not something to cure)."""
        import sqlite3
        import tempfile
        from pathlib import Path

        from .. import fsio

        out = []
        try:
            verdict = self.quick_check()
            if verdict and verdict != "ok":
                out.append(f"index.sqlite: quick_check says {verdict}")
        except sqlite3.DatabaseError as e:
            return [f"index.sqlite is unreadable: {e}"]
        repo = self.repo
        with tempfile.TemporaryDirectory(dir=repo.path, prefix=fsio.TMP_PREFIX) as td:  # a crash leaves a tmp_ gc removes
            fresh = type(self)(repo, path=Path(td) / "index.sqlite", autorefresh=False)
            try:
                want = fresh.dump()
            finally:
                fresh.close()
        try:
            self.refresh()
            # One snapshot for the dump and the totals (WAL: a read transaction sees the
            # database as of its first read): a writer committing between two of their
            # queries must not make the index look inconsistent with itself.
            self.db.execute("BEGIN")
            try:
                have = self.dump()
                out += self.totals_problems("index.sqlite")
            finally:
                self.db.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            return out + [f"index.sqlite: {e}"]
        for k in want:
            if want[k] != have.get(k):
                out.append(f"index.sqlite disagrees with the objects ({k}); convgit reindex or fsck --repair rebuilds it")
        return out

    # -- the log and search (over this index's repository) -----------------------------------

    def key_of(self, oid: str) -> str | None:
        """The time-sortable key of message ``oid`` (filters.py), None when no thread holds it."""
        from .filters import key_of

        return key_of(self.repo, oid)

    def iter_messages(self, rev: str | None = None, *, all_threads: bool = False, filters=None):
        """(id, message, depth, turn info) in log order, filtered (log.iter_messages)."""
        from .log import iter_messages

        return iter_messages(self.repo, rev, all_threads=all_threads, filters=filters)

    def search(self, text: str, **options) -> list:
        """The best matches of a full-text query (search.search: ``count``, ``latest``,
        ``columns``, ``filters``)."""
        from .search import search

        return search(self.repo, text, **options)
