"""The PostgreSQL index (``[index] backend = "postgres"``): the second ``IndexBackend``.

The same derived rows as the SQLite index (threads, turns, messages, parts and their text,
aliases, unreachable rows, the full-text table), in a PostgreSQL schema of the store's own
(the namespace: ``[index] namespace``, else ``cg_`` + a hash of the store's path), so that
several stores share one database and several people and machines query one index.

It runs the SQLite index's own writer and lookups (writer.py, lookups.py, log.py, reach.py,
the description of search hits) over a connection that speaks their SQL (dialect.py), so both
hold the same rows and give the same answers; what has no common form is its own: the
rebuild (a fresh schema, bulk-loaded with COPY, swapped in by a rename in one transaction),
full-text search (fts.py), and the checks. Writers take a PostgreSQL advisory lock per
namespace, so two machines never interleave a catch-up.

    schema.py   the tables (every text column COLLATE "C"), and this layout's version
    dialect.py  the connection; the SQLite forms of the shared statements, rewritten
    fts.py      tokens and candidates, the FTS5 query language evaluated, bm25 as SQLite ranks

``import psycopg`` happens here only (the ``[postgres]`` extra), when a store uses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from ...errors import InvalidInput, MissingDependency
from ..healing import IndexDamaged
from ..lookups import IndexLookups
from ..writer import IndexWriter
from .schema import DDL, LATE_DDL, VERSION


def default_namespace(store: Path) -> str:
    """The namespace of a store that names none: ``cg_`` + 16 hex digits of its path's hash."""
    return "cg_" + hashlib.blake2b(str(Path(store).resolve()).encode("utf-8", "surrogateescape"),
                                   digest_size=8).hexdigest()


def _lock_key(namespace: str) -> int:
    return int.from_bytes(hashlib.blake2b(namespace.encode(), digest_size=8).digest(), "big", signed=True)


def connect(dsn: str, where: str):
    """A PgConnection to ``dsn`` (autocommit, numbers as Python ints), or IndexUnavailable."""
    try:
        import psycopg
        from psycopg import conninfo
        from psycopg.adapt import Loader
    except ImportError:
        raise MissingDependency("the PostgreSQL index needs psycopg: pip install 'convgit[postgres]'") from None
    from .dialect import PgConnection, unavailable

    class _Number(Loader):
        """numeric (what sum() of integers gives) as int when whole, as SQLite answers."""

        def load(self, data):
            s = bytes(data).decode()
            return int(s) if s.lstrip("-").isdigit() else float(s)

    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        raise InvalidInput(f"index.dsn is not a PostgreSQL connection string: {e}") from None
    extra = {"application_name": "convgit"}
    if "connect_timeout" not in params:
        extra["connect_timeout"] = 10
    try:
        conn = psycopg.connect(dsn, autocommit=True, **extra)
    except psycopg.Error as e:
        raise unavailable(e, where) from None
    conn.adapters.register_loader("numeric", _Number)
    try:
        # No JIT compilation for this session: the index's statements are lookups of
        # milliseconds, and a recursive walk or a ranking over many candidates that the planner
        # over-estimates otherwise spends ~13 ms compiling each (measured at 1M messages).
        conn.execute("SET jit = off")
    except psycopg.Error as e:
        conn.close()
        raise unavailable(e, where) from None
    return PgConnection(conn, where, 0)


def describe_dsn(dsn: str) -> str:
    """Where a DSN points, without user or password: ``postgresql://host:port/db``."""
    try:
        from psycopg import conninfo

        p = conninfo.conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001  (only a label)
        return "postgresql"
    host = p.get("host") or p.get("hostaddr") or "localhost"
    return f"postgresql://{host}:{p.get('port') or 5432}/{p.get('dbname') or ''}"


class PgIndex(IndexLookups, IndexWriter):
    """The index of one store in a PostgreSQL schema (``IndexBackend``)."""

    backend = "postgres"

    def __init__(self, repo, *, namespace: str | None = None, autorefresh: bool = True) -> None:
        cfg = repo.config
        dsn = cfg.index_dsn
        if not dsn:
            raise InvalidInput('index.backend = "postgres" needs index.dsn in config.toml (or CONVGIT_INDEX_DSN)')
        self.repo = repo
        self.namespace = namespace or cfg.index_namespace or default_namespace(repo.path)
        self.path = f"{describe_dsn(dsn)}#{self.namespace}"  # where it is, for status (no secrets)
        self.lock_path = repo.path / "index.lock"
        self.rebuilt = False
        self.keep_text = True  # always: another machine reading this index may lack the objects
        self._text_cache = None
        self.db = connect(dsn, self.path)
        self.db.lock_key = _lock_key(self.namespace)
        from .fts import PgFts

        self.fts = PgFts(self.db)
        self.db.fts_insert = self.fts.insert
        self.db.fts_delete = self.fts.delete
        self._use(self.namespace)
        if not self._valid():
            self.rebuild()
        elif autorefresh:
            self.refresh_if_changed()

    # -- the namespace ---------------------------------------------------------------------

    def _use(self, schema: str) -> None:
        self.db.raw(f'SET search_path TO "{schema}", public')

    def _valid(self) -> bool:
        try:
            rows = dict(self.db.raw("SELECT key, value FROM meta WHERE key IN ('schema_version', 'text')").fetchall())
            self.db.raw("SELECT count(*) FROM threads").fetchone()
        except IndexDamaged:
            return False
        return rows.get("schema_version") == VERSION

    def _follow_swap(self) -> None:
        """(A rebuild elsewhere renames a schema in: names resolve to it on the next statement.)"""

    def _remove_dead_temp_files(self) -> None:
        """(No temp files: a rebuild's schema is dropped when it fails.)"""

    def close(self) -> None:
        """Close the connection."""
        if self.db is not None:
            self.db.close()
            self.db = None  # type: ignore[assignment]

    def disk_bytes(self) -> int:
        """What the namespace's tables and indexes take on the server."""
        row = self.db.raw(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            (self.namespace,)).fetchone()
        return int(row[0])

    # -- rebuilding ------------------------------------------------------------------------

    def rebuild(self, progress=None) -> dict:
        """Build the index afresh in a schema of its own, then swap it in (one transaction:
        readers see the old index or the new one). A failure drops the half-built schema and
        leaves the old one as it was. ``progress(done, total)``: called as threads are indexed."""
        t0 = time.perf_counter()
        db = self.db
        build = f"{self.namespace}__build"
        db.raw("SELECT pg_advisory_lock(%s)", (db.lock_key,))
        try:
            try:
                db.raw(f'DROP SCHEMA IF EXISTS "{build}" CASCADE')
                db.raw(f'CREATE SCHEMA "{build}"')
                self._use(build)
                db.raw("BEGIN")
                db.raw(DDL)
                db.raw("INSERT INTO meta VALUES ('schema_version', %s), ('built_at', %s), ('text', 'full')",
                       (VERSION, str(int(time.time() * 1000))))
                db.raw("COMMIT")
                refs = self.repo.refs.read_all(broken={})
                self._building = True
                self._progress = progress
                self._built_turns = {}
                try:
                    self._catch_up(refs, archived=True)
                finally:
                    self._building = False
                    self._progress = None
                    self._built_turns = {}
                db.raw("SET maintenance_work_mem = '256MB'")  # (this session only) a faster GIN build
                db.raw(LATE_DDL)
                # Planner statistics for the tables the shared queries join (message_fts is
                # reached through its GIN index and rowids, and is the slowest to sample).
                db.raw("ANALYZE messages, parts, threads, turns, aliases")
                db.raw("BEGIN")
                db.raw(f'DROP SCHEMA IF EXISTS "{self.namespace}" CASCADE')
                db.raw(f'ALTER SCHEMA "{build}" RENAME TO "{self.namespace}"')
                db.raw("COMMIT")
            except BaseException:
                db._rollback_quietly()
                try:
                    db.raw(f'DROP SCHEMA IF EXISTS "{build}" CASCADE')
                except Exception:  # noqa: BLE001  (the first error is the one to report)
                    pass
                raise
            finally:
                self._use(self.namespace)
        finally:
            try:
                db.raw("SELECT pg_advisory_unlock(%s)", (db.lock_key,))
            except Exception:  # noqa: BLE001  (a lost connection releases it anyway)
                pass
        self.rebuilt = True
        n = db.raw("SELECT count(*) FROM messages").fetchone()[0]
        return {"messages": n, "threads": len(refs), "seconds": round(time.perf_counter() - t0, 3)}

    def _indexed_row(self, oid: str):
        """(depth, title id) of an indexed message, else None; none while a rebuild fills its
        empty schema (every row is still queued in memory): a round trip per message saved."""
        if getattr(self, "_building", False):
            return None
        return super()._indexed_row(oid)

    def _thread_row(self, name: str):
        """A recorded thread's row; none while a rebuild fills its empty schema (each thread is
        indexed once there), so the threads' statements need no answer and go in one batch."""
        if getattr(self, "_building", False):
            return None
        return super()._thread_row(name)

    def _turn_row(self, tid: str):
        """(rowid, thread) of an indexed turn, else None; while a rebuild fills its empty
        schema, from memory (the turns written so far), so that its statements need no answer."""
        if getattr(self, "_building", False):
            return self._built_turns.get(tid)
        return super()._turn_row(tid)

    def _turn_rows(self, tids: list[str]) -> dict:
        """``_turn_rows`` in bulk; while a rebuild fills its empty schema, from memory."""
        if getattr(self, "_building", False):
            return {t: self._built_turns[t] for t in tids if t in self._built_turns}
        return super()._turn_rows(tids)

    def _turn_indexed(self, tid: str, rowid: int, thread: str | None) -> None:
        """While a rebuild fills its schema: remember the turn's row (``_turn_row``)."""
        if getattr(self, "_building", False):
            self._built_turns[tid] = (rowid, thread)

    def _batched(self):
        """While a rebuild fills its schema: the threads' statements sent without waiting for
        each answer (psycopg's pipeline mode), errors told apart as ever."""
        if not getattr(self, "_building", False):
            return super()._batched()
        return self.db.pipeline()

    def _flush(self) -> None:
        """Queued message and part rows in bulk (COPY), then their full-text rows."""
        from ..fts import index_messages
        from .dialect import clean_row

        rows = [r[:9] for r in self._pending.values()]
        db = self.db
        if rows:
            with db.copy("COPY messages (rowid, id, parent_rowid, role, depth, title_rowid, turn_rowid, n_parts, meta_json) "
                         "FROM STDIN") as cp:
                for r in rows:
                    cp.write_row(clean_row(r))
            with db.copy("COPY parts FROM STDIN") as cp:
                for p in self._pending_parts:
                    cp.write_row(clean_row((*p, None if p[3] is None else len(p[3].encode("utf-8", "surrogatepass")))))
        index_messages(db, rows, self._pending_parts)
        self._pending = {}
        self._pending_parts = []

    def _store_state(self, state: dict) -> None:
        """Record how far the refs journal was read (best effort)."""
        try:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('refs_state', ?)", (json.dumps(state),))
        except IndexDamaged:
            pass

    # -- checks ----------------------------------------------------------------------------

    def quick_check(self) -> str | None:
        """"ok" when the namespace's tables answer (raises IndexDamaged when they do not)."""
        self.db.raw("SELECT count(*) FROM meta").fetchone()
        return "ok"

    def check(self) -> list[str]:
        """What is wrong (fsck): whether this index holds what a rebuild from the objects
        holds (built beside it in a namespace of its own, then dropped). Never heals."""
        try:
            self.quick_check()
        except IndexDamaged as e:
            return [f"the PostgreSQL index is unreadable: {e}"]
        scratch = f"{self.namespace}__check{os.getpid()}"
        fresh = PgIndex(self.repo, namespace=scratch, autorefresh=False)
        try:
            want = fresh.dump()
        finally:
            try:
                fresh.db.raw(f'DROP SCHEMA IF EXISTS "{scratch}" CASCADE')
            finally:
                fresh.close()
        try:
            self.refresh()
            have = self.dump()
            out = self.totals_problems("the PostgreSQL index")
        except IndexDamaged as e:
            return [f"the PostgreSQL index: {e}"]
        return out + [f"the PostgreSQL index disagrees with the objects ({k}); convgit reindex or fsck --repair rebuilds it"
                      for k in want if want[k] != have.get(k)]

    # -- search ----------------------------------------------------------------------------

    def ranked(self, q, f, count: int, latest: bool) -> list[tuple[int, float]]:
        """(message rowid, score) of a parsed query's matches in order (fts.PgFts.ranked)."""
        return self.fts.ranked(q, f, count, latest)


def invalidate(repo) -> None:
    """Mark a store's PostgreSQL index for a rebuild by the next command (its schema version
    row removed), when it can be reached; when it cannot, the next command fails anyway."""
    from ...errors import ConvgitError

    repo.close()
    try:
        idx = connect(repo.config.index_dsn or "", "invalidate")
        try:
            ns = repo.config.index_namespace or default_namespace(repo.path)
            idx.raw(f'DELETE FROM "{ns}".meta WHERE key = %s', ("schema_version",))
        except IndexDamaged:
            pass
        finally:
            idx.close()
    except ConvgitError:
        pass
