"""The PostgreSQL connection the shared index code runs on, and the few SQLite forms it rewrites.

The writer (catch-up, reflogs, turns), the lookups, the log walk and the description of search
hits are one code for both backends: their statements are written in the subset of SQL both
engines read alike, and ``translate`` rewrites the few SQLite forms among them: ``?``, ``?1``
and ``:name`` placeholders; ``INSERT OR REPLACE`` / ``OR IGNORE`` (upserts, from the tables'
keys in schema.py); SQLite's ``IS NOT 0`` on a truth value; the time-sortable key
(filters.KEY_SQL, here with ``to_char``); ``json_extract``; descending orders with NULLs
last, as SQLite sorts them; and whole statements that have no common form (``OVERRIDES``).

``PgConnection`` is what ``index.db`` is on this backend: ``execute``/``executemany`` return a
cursor (``fetchone``, ``fetchall``, iteration, ``rowcount``), ``in_transaction``, ``close``.
Errors are told apart as the index's healing needs: the server cannot be reached →
``IndexUnavailable`` (its error code, nothing written); a table or the schema is missing →
``IndexDamaged`` (a rebuild cures it).
"""

from __future__ import annotations

import functools
import re

import psycopg
from psycopg import errors as pg_errors

from ...errors import ConvgitError, IndexUnavailable
from ..filters import KEY_SQL
from ..healing import IndexDamaged
from ..reach import THREADS_REACHING_SQL
from .schema import TABLES

# The message key (filters.KEY_SQL) in PostgreSQL: the same string, byte for byte.
PG_KEY_SQL = (
    "(to_char(to_timestamp(greatest(coalesce(t.started_at, 0), 0) / 1000) AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS')"
    " || lpad((greatest(coalesce(t.started_at, 0), 0) % 1000)::text, 3, '0') || '-'"
    " || substr(coalesce(t.id, m.id), 1, 16) || '-' || lpad(m.depth::text, 7, '0')) COLLATE \"C\""
)

OVERRIDES = {
    THREADS_REACHING_SQL: """WITH RECURSIVE d(rid) AS (SELECT rowid FROM messages WHERE id = ? UNION ALL
             SELECT m.rowid FROM messages m JOIN d ON m.parent_rowid = d.rid),
           w AS (SELECT rid FROM d LIMIT ?)
           SELECT count(DISTINCT w.rid), (json_agg(h.name ORDER BY h.name) FILTER (WHERE h.name IS NOT NULL))::text
           FROM w JOIN messages wm ON wm.rowid = w.rid LEFT JOIN threads h ON h.tip = wm.id""",
    "SELECT 1 FROM message_fts_docsize LIMIT 1": "SELECT 1 FROM message_fts LIMIT 1",
    "PRAGMA quick_check": "SELECT 'ok'",
}
# filters.FRAGMENT_SQL and Filters.covered (issue 11): the text is always in parts here (no
# lean mode), and a JSON array of ids is read with json_array_elements_text.
_REWRITES = (
    ("instr(coalesce(pf.text, convgit_text(m.id, pf.position)), ?) > 0", "strpos(pf.text, ?) > 0"),
    ("m.id IN (SELECT value FROM json_each(?))", "m.id IN (SELECT json_array_elements_text(?::json))"),
)
_DELETE_ALL_FTS = "INSERT INTO message_fts (message_fts) VALUES ('delete-all')"

_UPSERT = re.compile(r"^\s*INSERT OR (REPLACE|IGNORE) INTO (\w+)", re.S)
_JSON_EXTRACT = re.compile(r"json_extract\(([\w.]+), '\$\.([\w.]+)'\)")
_DESC_NULLABLE = re.compile(r"\bORDER BY t\.started_at DESC\b")
_SEED = re.compile(r"\(SELECT \?( UNION)")  # a recursive walk's first id: typed, in the columns' collation


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> tuple[str, str]:
    """(PostgreSQL text, placeholder style: "none", "pos", "num" or "named") for a statement."""
    sql = OVERRIDES.get(sql, sql)
    sql = sql.replace(KEY_SQL, PG_KEY_SQL)
    for old, new in _REWRITES:
        sql = sql.replace(old, new)
    m = _UPSERT.match(sql)
    if m:
        kind, table = m.groups()
        sql = sql[: m.start()] + f"INSERT INTO {table}" + sql[m.end():]
        if kind == "IGNORE":
            sql += " ON CONFLICT DO NOTHING"
        else:
            key, cols = TABLES[table]
            keys = {k.strip() for k in key.split(",")}
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in keys)
            sql += f" ON CONFLICT ({key}) DO UPDATE SET {sets}"
    sql = sql.replace(") IS NOT 0)", ") IS NOT FALSE)")
    sql = _JSON_EXTRACT.sub(lambda j: f"({j.group(1)}::jsonb #>> '{{{j.group(2).replace('.', ',')}}}')", sql)
    sql = _DESC_NULLABLE.sub("ORDER BY t.started_at DESC NULLS LAST", sql)
    sql = _SEED.sub(r'(SELECT ?::text COLLATE "C"\1', sql)
    return _placeholders(sql)


def _placeholders(sql: str) -> tuple[str, str]:
    out: list[str] = []
    style = "none"
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'":  # a string literal: copied (its % doubled), never read for placeholders
            j = sql.index("'", i + 1)
            while j + 1 < n and sql[j + 1] == "'":
                j = sql.index("'", j + 2)
            out.append(sql[i : j + 1].replace("%", "%%"))
            i = j + 1
        elif c == "%":
            out.append("%%")
            i += 1
        elif c == "?":
            j = i + 1
            while j < n and sql[j].isdigit():
                j += 1
            if j > i + 1:
                out.append(f"%(p{sql[i + 1 : j]})s")
                style = "num"
            else:
                out.append("%s")
                style = "pos"
            i = j
        elif c == ":" and i + 1 < n and (sql[i + 1].isalpha() or sql[i + 1] == "_") and (i == 0 or sql[i - 1] != ":"):
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            out.append(f"%({sql[i + 1 : j]})s")
            style = "named"
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out), style


def _params(style: str, params):
    if style == "num":
        return {f"p{k + 1}": v for k, v in enumerate(params)}
    if style == "none":
        return None
    return params


def clean(value):
    """A value as PostgreSQL text can hold it: NUL and lone surrogates (which SQLite keeps)
    become U+FFFD."""
    if isinstance(value, str) and ("\x00" in value or _has_surrogate(value)):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace").replace("\x00", "\ufffd")
    return value


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def clean_row(row) -> tuple:
    """``clean`` applied to every value of a row."""
    return tuple(clean(v) for v in row)


def unavailable(e: Exception, where: str) -> ConvgitError:
    """The error a failed connection or query to the index server stands for."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return IndexUnavailable(f"the PostgreSQL index ({where}) cannot be reached: {msg}", where=where)


_DAMAGE = (pg_errors.UndefinedTable, pg_errors.UndefinedColumn, pg_errors.InvalidSchemaName)


class PgConnection:
    """A psycopg connection (autocommit; explicit BEGIN/COMMIT) speaking the shared SQL."""

    def __init__(self, conn: "psycopg.Connection", where: str, lock_key: int) -> None:
        self.conn = conn
        self.where = where
        self.lock_key = lock_key
        self.fts = None  # the full-text side (fts.PgFts), set by the index

    # -- statements ------------------------------------------------------------------------

    def execute(self, sql: str, params=()):
        """Run one statement (SQLite forms translated); the cursor."""
        if sql == "BEGIN IMMEDIATE":  # a writer: one at a time per namespace, on every machine
            self.raw("BEGIN")
            return self.raw("SELECT pg_advisory_xact_lock(%s)", (self.lock_key,))
        if sql == _DELETE_ALL_FTS:
            self.raw("DELETE FROM message_fts")
            return self.raw("UPDATE fts_stats SET rows = 0, tokens = 0")
        text, style = translate(sql)
        return self.raw(text, _params(style, [clean(p) for p in params] if isinstance(params, (list, tuple)) else
                                      {k: clean(v) for k, v in params.items()} if isinstance(params, dict) else params))

    def executemany(self, sql: str, rows) -> None:
        """Run one statement for each row of parameters."""
        text, style = translate(sql)
        rows = [_params(style, clean_row(r)) for r in rows]
        if not rows:
            return
        with self.conn.cursor() as cur:
            try:
                cur.executemany(text, rows)
            except psycopg.Error as e:
                raise self._error(e) from e

    def pipeline(self):
        """Statements sent without waiting for each answer until the block ends (or a result
        is read): psycopg's pipeline mode, errors mapped as ``execute`` maps them."""
        return _Pipeline(self)

    def copy(self, statement: str):
        """A ``COPY … FROM STDIN`` context (``write_row``), errors told apart as ``execute`` does."""
        return _Copy(self, statement)

    def raw(self, sql: str, params=None):
        """Run PostgreSQL text as it is; the cursor."""
        cur = self.conn.cursor()
        try:
            cur.execute(sql, params)
        except psycopg.Error as e:
            raise self._error(e) from e
        return cur

    def _error(self, e: Exception) -> Exception:
        if isinstance(e, _DAMAGE):
            self._rollback_quietly()
            return IndexDamaged(f"the PostgreSQL index ({self.where}) is damaged: {e}")
        if isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError)) or self.conn.closed:
            return unavailable(e, self.where)
        return e

    def _rollback_quietly(self) -> None:
        try:
            if self.in_transaction:
                self.conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    @property
    def in_transaction(self) -> bool:
        """Is a transaction open (or failed and waiting for ROLLBACK)?"""
        from psycopg.pq import TransactionStatus

        return self.conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    def close(self) -> None:
        """Close the connection."""
        try:
            self.conn.close()
        except psycopg.Error:
            pass


class _Copy:
    """``with db.copy(...) as cp: cp.write_row(row)``, psycopg's COPY with the errors mapped."""

    def __init__(self, db: PgConnection, statement: str) -> None:
        self.db, self.statement = db, statement

    def __enter__(self):
        self.cur = self.db.conn.cursor()
        try:
            self.cm = self.cur.copy(self.statement)
            return self.cm.__enter__()
        except psycopg.Error as e:
            raise self.db._error(e) from e

    def __exit__(self, *exc):
        try:
            return self.cm.__exit__(*exc)
        except psycopg.Error as e:
            raise self.db._error(e) from e


class _Pipeline:
    """``with db.pipeline():`` psycopg's pipeline mode with the errors mapped."""

    def __init__(self, db: PgConnection) -> None:
        self.db = db

    def __enter__(self):
        self.cm = self.db.conn.pipeline()
        return self.cm.__enter__()

    def __exit__(self, *exc):
        try:
            return self.cm.__exit__(*exc)
        except psycopg.Error as e:
            raise self.db._error(e) from e
