"""Writing the derived SQLite index (``index.sqlite``): opening, rebuilding, catching up.

It is rebuilt from objects + refs + reflogs whenever it is missing, unreadable or of another
schema version, and caught up whenever a ref differs from the tip it recorded. There is one
code path for all three — "catch these threads up" — so an incremental index and a rebuilt
one hold the same rows. Text is stored once (in ``parts``), never twice.

Concurrency: WAL (readers never block a writer: Datasette or a ``sqlite3`` shell holding a
read transaction no longer makes ``commit`` say "database is locked"). A rebuild is copied
*into* the live database with SQLite's backup API, never renamed over it, so the file keeps
its inode and its ``-wal``/``-shm`` stay its own (docs/format.md §8 "Journal" says why that
matters). Every write transaction and every swap run under the kernel lock ``index.lock``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import TYPE_CHECKING, Iterable
from pathlib import Path

from .. import fsio
from ..errors import ConvgitError, ObjectCorrupt, ObjectMissing, storage_failure
from ..refs import parse_rename, parse_reflog_line
from ..refformat import applied_archived, applied_entries
from . import reach
from .healing import healing, index_storage_failure
from .rows import Reader, dump_json, part_row
from .schema import INDEX_FILE, SCHEMA, SCHEMA_VERSION, TOTALS
from . import catchup
from .catchup import JournalState, _journal_stat
from .totals import RunningTotals
from .turn_rows import TurnRows

if TYPE_CHECKING:
    from ..objects import Message


def invalidate(repo) -> None:
    """Drop ``index.sqlite`` (which needs no space) so that the next command rebuilds it: for
    an operation that changed the store but could not bring the index up to date (a full
    disk), and whose stale rows no ref change would reveal (gc's pruned objects)."""
    repo.close()  # closes the open index connection, if any
    try:
        with fsio.flock(repo.path / "index.lock", shared=False, timeout=60):
            for suffix in ("", "-journal", "-wal", "-shm"):
                fsio._unlink_quiet(repo.path / (INDEX_FILE + suffix))
    except ConvgitError:
        pass  # no lock (a full disk cannot even create it): the caller already warns


def _wal(db: sqlite3.Connection) -> None:
    """Put the live index in WAL mode. Only the first connection to a new file changes the
    mode, and SQLite may answer that change "database is locked" at once, without waiting,
    while other processes open the same new index (six writers' first commits at once): so
    the mode is read first (no lock needed) and the change retried for up to 30 s."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class IndexWriter(RunningTotals, TurnRows, JournalState):
    """Opening, validating, rebuilding and catching up the index (the write side of ``Index``)."""

    def __init__(self, repo, *, path: Path | None = None, autorefresh: bool = True) -> None:
        self.repo = repo
        self.path = path or repo.path / INDEX_FILE
        self.lock_path = repo.path / "index.lock"
        self.rebuilt = False
        # ``[index] text``: keep each part's text in ``parts.text`` (the default), or only its
        # full-text postings and length, the text being read from the objects (the lean mode).
        self.keep_text = bool(getattr(repo.config, "index_text", True))
        self._text_cache: tuple[str, tuple] | None = None
        self.db = self._open_valid()
        if self.db is None:
            self.rebuild()
        elif autorefresh:
            self.refresh_if_changed()

    # -- opening, validating, rebuilding ----------------------------------------------------

    def _connect(self, path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        # The live index in WAL; a temp index being built in a rollback journal (it has one
        # connection, and is copied into the live file when done).
        if path == self.path:
            _wal(db)
        else:
            db.execute("PRAGMA journal_mode=DELETE")
        db.execute("PRAGMA journal_size_limit=67108864")  # a WAL a rebuild grew is cut back to 64 MB
        # A cache: durability is the objects' and refs' job. After a power loss a torn index is
        # caught (refs differ, constraints fail, a page is unreadable) and rebuilt.
        db.execute("PRAGMA synchronous=OFF")
        db.execute("PRAGMA busy_timeout=30000")
        db.execute("PRAGMA cache_size=-65536")
        db.create_function("convgit_text", 2, self._object_text, deterministic=True)
        if path == self.path:
            self._ino = os.stat(path).st_ino
        return db

    def _text_mode(self) -> str:
        return "full" if self.keep_text else "lean"

    def _object_text(self, oid: str, position: int) -> str | None:
        """``convgit_text(message id, position)``, the SQL function readers use for a part's
        text: in the lean mode, read from the message object (its blob for long text); in the
        default mode NULL (the text is in ``parts.text``). Never raises: an unreadable object
        reads as no text (fsck names it)."""
        if self.keep_text or oid is None:
            return None
        try:
            cached = self._text_cache
            if cached is None or cached[0] != oid:
                reader = Reader(self.repo.objects, {})
                msg = reader.message(oid)
                cached = (oid, tuple(part_row(0, i, p, reader)[3] for i, p in enumerate(msg.parts)))
                self._text_cache = cached
            texts = cached[1]
            return texts[position] if 0 <= position < len(texts) else None
        except Exception:  # noqa: BLE001  (inside SQLite: an exception would abort the query)
            return None

    def _follow_swap(self) -> None:
        """Called under index.lock before a write: if another process swapped in a rebuilt
        index, this connection still points at the replaced file (writes to it would fail as
        "readonly database" or be lost): reconnect to the current one."""
        if getattr(self, "_building", False):
            return
        try:
            ino = os.stat(self.path).st_ino
        except FileNotFoundError:
            raise sqlite3.DatabaseError("index.sqlite vanished") from None
        if ino != getattr(self, "_ino", ino):
            self.db.close()
            db = self._open_valid()
            if db is None:
                raise sqlite3.DatabaseError("the swapped-in index is not usable")
            self.db = db

    def _open_valid(self) -> sqlite3.Connection | None:
        if not self.path.exists():
            return None
        try:
            db = self._connect(self.path)
            if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                db.close()
                return None
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None or row[0] != str(SCHEMA_VERSION):
                db.close()
                return None
            row = db.execute("SELECT value FROM meta WHERE key='text'").fetchone()
            if row is None or row[0] != self._text_mode():  # ``[index] text`` changed: rebuild
                db.close()
                return None
            db.execute("SELECT 1 FROM threads LIMIT 1").fetchone()  # readable (not a count: O(1))
            return db
        except sqlite3.DatabaseError:
            return None

    def _remove_dead_temp_files(self) -> None:
        """Temp indexes (``tmp_index.sqlite.<pid>.<ns>``) of rebuilds whose process is gone
        (killed mid-rebuild): each can be as large as the index, and on a full disk it must
        not wait two weeks for gc. A live pid's file is left alone (another process may be
        rebuilding; a reused pid only delays the removal to gc)."""
        prefix = f"{fsio.TMP_PREFIX}{INDEX_FILE}."
        try:
            names = [n for n in os.listdir(self.path.parent) if n.startswith(prefix)]
        except OSError:
            return
        for name in names:
            pid = name[len(prefix):].split(".", 1)[0].split("-", 1)[0]
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                os.kill(int(pid), 0)
                continue  # alive (or not ours to signal): keep
            except ProcessLookupError:
                fsio._unlink_quiet(self.path.with_name(name))
            except (PermissionError, OverflowError, OSError):
                continue

    def close(self) -> None:
        """Close the connection (a later use needs a new ``Index``)."""
        if self.db is not None:
            self.db.close()
            self.db = None  # type: ignore[assignment]

    def rebuild(self, progress=None) -> dict:
        """Build a fresh index in a temp file and swap it in atomically.

        A failure (a full disk) leaves the old index file as it was and no temp file behind.
        ``progress(done, total)``: called as threads are indexed (each counts twice: its
        messages, then its reflog and turns).
        """
        t0 = time.perf_counter()
        if getattr(self, "db", None) is not None:
            self.db.close()
            self.db = None  # type: ignore[assignment]
        self._remove_dead_temp_files()
        tmp = self.path.with_name(f"{fsio.TMP_PREFIX}{INDEX_FILE}.{os.getpid()}.{time.monotonic_ns()}")
        db = None
        try:
            db = self._connect(tmp)
            from .fts import FTS_SCHEMA  # (fts: loaded by the commands that write or search, not by status)

            db.executescript("BEGIN;" + SCHEMA + FTS_SCHEMA + "COMMIT;")  # one transaction: one sync, not one per table
            db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            db.execute("INSERT INTO meta VALUES ('built_at', ?)", (str(int(time.time() * 1000)),))
            db.execute("INSERT INTO meta VALUES ('text', ?)", (self._text_mode(),))
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self.db = db
            refs = self.repo.refs.read_all(broken={})  # an unreadable ref is left out (fsck names it)
            self._building = True
            self._progress = progress
            try:
                self._catch_up(refs, archived=True)
            finally:
                self._building = False
                self._progress = None
            with fsio.flock(self.lock_path, shared=False, timeout=60):
                if not self._copy_into_live(db):
                    db.close()
                    for suffix in ("-journal", "-wal", "-shm"):
                        fsio.unlink(self.path.with_name(INDEX_FILE + suffix))
                    fsio.rename(tmp, self.path)
                else:
                    db.close()
                    fsio._unlink_quiet(tmp)
        except BaseException as e:
            if db is not None:
                db.close()
            for suffix in ("", "-journal"):
                fsio._unlink_quiet(Path(f"{tmp}{suffix}"))
            self.db = self._open_valid()  # the old index, if it is still usable
            failed = storage_failure(e, f"rebuilding {INDEX_FILE}")
            if failed is not None and failed is not e:
                raise failed from e
            raise
        self.db = self._connect(self.path)
        self.rebuilt = True
        n = self.db.execute("SELECT count(*) FROM messages").fetchone()[0]
        return {"messages": n, "threads": len(refs), "seconds": round(time.perf_counter() - t0, 3)}

    def _copy_into_live(self, src: sqlite3.Connection) -> bool:
        """Under index.lock: copy the built index ``src`` into the live ``index.sqlite`` with
        SQLite's backup API (one write transaction of the live database: its readers see the
        old index or the new one, and the file, its WAL and its shared memory stay the same
        files). False when there is no live database to copy into (missing, or not a SQLite
        database any more): the caller renames the built file into place instead."""
        if not self.path.is_file() or self.path.is_symlink():
            return False
        try:
            dst = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError:
            return False
        try:
            dst.execute("PRAGMA busy_timeout=30000")
            dst.execute("PRAGMA journal_size_limit=67108864")
            if dst.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
                return False
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=WAL")
            # The copy went through the WAL (as large as the index): fold back what no reader
            # still needs, without waiting for readers (PASSIVE); journal_size_limit then
            # truncates the file at a later checkpoint.
            dst.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            return True
        except sqlite3.DatabaseError:
            # Garbled past reading, or no room for the copy (a full disk): replaced by name,
            # as before WAL (its -wal/-shm removed first).
            return False
        finally:
            dst.close()

    # -- catching up ------------------------------------------------------------------------

    def _catch_up_journal(self, state: dict, dirs, *, extra: set[str] = frozenset(), cache: dict | None = None,
                          commit: bool = False, written: dict | None = None, journal_end: int | None = None,
                          archived: Iterable[str] = ()) -> None:
        names, archives, end = self._journal_since(state["size"])
        archives = list(dict.fromkeys([*archives, *archived]))
        commit = commit and names <= set(extra)  # another writer's move may have left messages behind
        names |= set(extra)

        def refs() -> dict[str, str]:  # under index.lock: what it created, taken as it is while
            # the journal ends where its lines did (nothing else moved since: docs/format.md §8)
            ok = written and _journal_stat(self.repo.refs.journal_path) == (state.get("ino"), journal_end)
            self._written = {n: v for n, v in written.items() if n in names} if ok else {}
            return {**self._read_refs(names - set(self._written)), **{n: v[0] for n, v in self._written.items()}}

        try:
            self._catch_up(refs, only=names, cache=cache, commit=commit, state=self._new_state(end, dirs, state.get("ino")),
                           archives=archives)
        finally:
            self._written = {}

    @healing
    def refresh(self) -> None:
        """Bring the index up to the refs on disk (a crash, a copy, another process): reads
        every ref (O(threads)); ``refresh_if_changed`` is the cheap form."""
        state = self._fresh_state()  # (taken before the refs are read: a move made while they are read is seen next time)
        refs = self.repo.refs.read_all(broken={})  # an unreadable ref is left out (fsck names it)
        known = {n: (t, size) for n, t, size in self.db.execute("SELECT name, tip, reflog_size FROM threads")}
        if set(known) != set(refs) or any(
            known[n][0] != tip or known[n][1] != self._log_size(n) for n, tip in refs.items()
        ):
            # The refs are read again under index.lock, not taken from this first read: another
            # process may have moved a thread and indexed the move since, and a catch-up to
            # the older tip would move the thread back in the index (leaving its newest
            # messages unreachable there, and the running totals short of the store's).
            self._catch_up(lambda: self.repo.refs.read_all(broken={}), state=state)
        else:
            self._store_state(state)

    def _store_state(self, state: dict) -> None:
        """Best effort, outside a catch-up: one row, under ``index.lock`` if it is free at once
        (else skipped: the next command reads the refs again). Never without the lock: a
        rebuild swapping the file in removes ``index.sqlite-journal``, and a write whose
        rollback journal vanished leaves its connection failing with "disk I/O error"."""
        try:
            fd = fsio.try_flock(self.lock_path, shared=False)
        except ConvgitError:
            return
        if fd is None:
            return
        try:
            self._follow_swap()
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('refs_state', ?)", (json.dumps(state),))
        except sqlite3.DatabaseError:
            pass
        finally:
            os.close(fd)

    def record_moves(self, names: Iterable[str], cache: dict[str, object] | None = None, *,
                     fast_forward: bool = False, written: dict | None = None, journal_end: int | None = None,
                     archived: Iterable[str] = ()) -> None:
        """After a repository transaction (convgit/transaction.py): index the threads it
        moved (``names``), and whatever else the journal says moved meanwhile (another
        writer), reading no other ref. ``cache``: the objects it wrote, decoded (oid →
        object), used instead of reading them back. ``fast_forward``: its moves only created
        threads or moved them forward, so no message can have become unreachable. ``written``:
        name → (tip, reflog) of threads it created, not read back if the journal ends at ``journal_end``.
        ``archived``: the reflogs it archived (paths under ``logs/deleted``), whose turns are
        indexed as a rebuild indexes them."""
        names = set(names)
        cache = dict(cache or {})
        state = self._load_state()
        ino, _ = _journal_stat(self.repo.refs.journal_path)
        if state is None or state.get("boot") != catchup._boot_id() or state.get("ino") != ino:
            if self.db.execute("SELECT 1 FROM threads LIMIT 1").fetchone() is None:
                # A new index (a clone's first pull, the first writes of a new store): every
                # thread is caught up, as refresh does, so the state can be stored with it and
                # the next write is incremental (it used to refresh every thread).
                state = self._fresh_state()  # (before the refs are read under index.lock)

                def every_ref() -> dict[str, str]:  # under index.lock; what this transaction created
                    # is taken as written (not each reflog read back: a merge creates thousands)
                    # while the journal ends where its lines did and the tip is the one read.
                    refs = self.repo.refs.read_all(broken={})
                    ok = written and _journal_stat(self.repo.refs.journal_path) == (ino, journal_end)
                    self._written = {n: v for n, v in written.items() if refs.get(n) == v[0]} if ok else {}
                    return refs

                try:
                    self._catch_up(every_ref, cache=cache, commit=fast_forward, state=state, archives=list(archived))
                finally:
                    self._written = {}
                return
            self._catch_up(lambda: self._read_refs(names), only=names, cache=cache, commit=fast_forward,
                           archives=list(archived))
            return
        # The directories as they are after this transaction's own moves: they explain the change.
        dirs = self._ref_dirs_signature([d for d, _ in state.get("dirs", [])])
        self._catch_up_journal(state, dirs, extra=names, cache=cache, commit=fast_forward, written=written,
                               journal_end=journal_end, archived=archived)

    def _catch_up(self, refs, *, only: set[str] | None = None, archived: bool = False,
                  cache: dict | None = None, commit: bool = False, state: dict | None = None,
                  archives: list[str] = ()) -> None:
        """Index the threads in ``refs`` (name → tip; or a function giving them, called under
        index.lock). ``only``: just these names (those of them not in ``refs`` are gone);
        ``commit``: the moves were a commit's (created or fast-forwarded threads only);
        ``state``: the journal position this catch-up brings the index to; ``archived``: every
        archived reflog's turns too (a rebuild); ``archives``: just these archived reflogs'
        (paths under ``logs/deleted``: what moves archived, from the journal)."""
        cache = cache or {}
        reader = Reader(self.repo.objects, cache)
        with fsio.flock(self.lock_path, shared=False, timeout=60):
            self._follow_swap()
            if callable(refs):
                refs = refs()
            db = self.db
            db.execute("BEGIN IMMEDIATE")
            # What this transaction changes the running totals by (schema.TOTALS), counted as
            # its rows change; a rebuild (an empty index) counts them once at the end instead.
            self._delta = None if getattr(self, "_building", False) else dict.fromkeys(TOTALS, 0)
            try:
                if only is None:
                    known = {r[0]: (r[1], r[2]) for r in db.execute("SELECT name, tip, reflog_size FROM threads")}
                else:  # just those threads: O(changes), not O(threads)
                    known = {}
                    for n in only:
                        row = db.execute("SELECT tip, reflog_size FROM threads WHERE name=?", (n,)).fetchone()
                        if row is not None:
                            known[n] = tuple(row)
                gone = set(known) - set(refs) if only is None else {n for n in only if n in known and n not in refs}
                self._count_threads(gone, -1)
                for name in gone:
                    db.execute("DELETE FROM threads WHERE name=?", (name,))
                    off = db.execute("UPDATE turns SET thread=NULL WHERE thread=?", (name,)).rowcount
                    self._add("turns", -max(off, 0))
                todo = []
                for name, tip in sorted(refs.items()):
                    old = known.get(name)
                    if old is not None and old[0] == tip and self._log_size(name) == old[1]:
                        continue
                    todo.append((name, tip, old[1] if old else 0))
                self._count_threads([t[0] for t in todo], -1)  # their rows before (replaced below)
                # Pass 1: new messages become pending rows; pass 2 (reflogs and turns) sets
                # their turn before they are inserted in bulk.
                self._pending: dict[str, list] = {}
                self._pending_parts: list[tuple] = []
                self._next_rowid = (db.execute("SELECT max(rowid) FROM messages").fetchone()[0] or 0) + 1
                self._next_turn_rowid = (db.execute("SELECT max(rowid) FROM turns").fetchone()[0] or 0) + 1
                first_new = self._next_rowid  # the rows this catch-up adds start here (reach.after_catch_up)
                if self._next_rowid == 1:
                    reach.reset(db)  # no message rows: nothing derived from them may stay
                    self._delta = None  # nor any total counted from them: counted afresh at the end
                self._unindexed = self._not_indexed(cache, empty=self._next_rowid == 1)
                readable = []
                report = getattr(self, "_progress", None)
                for i, (name, tip, offset) in enumerate(todo):
                    if report is not None:
                        report(i, 2 * len(todo))
                    try:
                        self._index_chain(reader, tip)  # queues nothing unless the walk succeeds
                    except (ObjectCorrupt, ObjectMissing):
                        # A damaged history (fsck names it) must not make every other thread
                        # unreadable: leave this one out; the next refresh tries it again.
                        db.execute("DELETE FROM threads WHERE name=?", (name,))
                        continue
                    readable.append((name, tip, offset))
                with self._batched():
                    for i, (name, tip, offset) in enumerate(readable):
                        self._index_thread(reader, name, tip, offset)
                        if report is not None:
                            report(len(todo) + i + 1, 2 * len(todo))
                if archived:
                    for tname, path in self.repo.refs.iter_log_files():
                        if tname is None:
                            self._note_renames(self._index_log(reader, None, path, 0)[0])
                for rel in archives:
                    path = self.repo.refs.deleted_logs_dir / rel
                    if ".." not in path.parts and not path.is_symlink():  # (a line is a hint: never followed out)
                        self._note_renames(self._index_log(reader, None, path, 0)[0])
                self._add("messages", len(self._pending))
                self._add("text_bytes", sum(len(p[3].encode("utf-8", "surrogatepass"))
                                            for p in self._pending_parts if p[3] is not None))
                self._flush()
                back, left = reach.after_catch_up(db, known, refs, gone, commit=commit, new_from=first_new)
                self._add("messages", len(back) - len(left))
                self._add("text_bytes", self._text_bytes_of(back) - self._text_bytes_of(left))
                self._count_threads([t[0] for t in todo], +1)  # and after
                self._store_totals()
                if state is not None:
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('refs_state', ?)", (json.dumps(state),))
                db.execute("COMMIT")
            except BaseException as e:
                # On SQLITE_FULL or an I/O error SQLite may have rolled back already: a second
                # ROLLBACK would raise "no transaction is active" and hide the real error.
                if db.in_transaction:
                    try:
                        db.execute("ROLLBACK")
                    except sqlite3.DatabaseError:
                        pass  # the journal rolls the file back when it is next opened
                failed = index_storage_failure(e, self.repo.path)
                if failed is not None and failed is not e:
                    raise failed from e
                raise

    def _log_size(self, name: str) -> int:
        if name in getattr(self, "_written", ()):  # just created by this transaction: its whole reflog
            return len(self._written[name][1])
        return self.repo.refs.log_size(name)  # packed part and loose file (docs/format.md §4.2)

    def _index_chain(self, reader: "Reader", tip: str) -> None:
        """Queue every message from ``tip`` back to the first one already indexed."""
        todo: list[tuple[str, Message]] = []
        oid: str | None = tip
        parent, depth, title = None, -1, None  # (rowid, depth, title rowid) of the row above the new ones
        while oid is not None:
            row = self._pending.get(oid)
            if row is not None:
                parent, depth, title = row[0], row[4], row[5]
                break
            row = None if oid in self._unindexed else self._indexed_row(oid)
            if row is not None:
                parent, depth, title = row
                break
            msg = reader.message(oid)
            todo.append((oid, msg))
            oid = msg.parent
        for oid, msg in reversed(todo):
            depth += 1
            rid = self._next_rowid
            self._next_rowid += 1
            if title is None and msg.role == "user":
                title = rid
            # The columns of _flush, then the turn's key and the parent's id (for _index_turn).
            self._pending[oid] = [rid, oid, parent, msg.role, depth, title, None, len(msg.parts), dump_json(msg.meta),
                                  None, msg.parent]
            parent = rid
            for i, p in enumerate(msg.parts):
                self._pending_parts.append(part_row(rid, i, p, reader))

    def _not_indexed(self, cache: dict, *, empty: bool) -> set[str] | frozenset:
        """The messages of ``cache`` (a transaction's new objects) that have no row here,
        found in a few queries (``_index_chain`` would otherwise ask once per message: a
        merge hands over hundreds of thousands). ``empty``: the index has no message rows."""
        from ..objects import Message

        ids = [oid for oid, obj in cache.items() if isinstance(obj, Message)]
        if len(ids) < _BULK_LOOKUP:
            return frozenset()
        absent = set(ids)
        if not empty:
            for i in range(0, len(ids), 500):
                part = ids[i : i + 500]
                q = f"SELECT id FROM messages WHERE id IN ({','.join('?' * len(part))})"
                absent.difference_update(r[0] for r in self.db.execute(q, part))
        return absent

    def _batched(self):
        """A context for the threads' rows of one catch-up (a backend may send them in one go)."""
        import contextlib

        return contextlib.nullcontext()

    def _thread_row(self, name: str):
        """(created_ms, forked_from_thread, forked_from_message) of a recorded thread, else None."""
        return self.db.execute("SELECT created_ms, forked_from_thread, forked_from_message FROM threads WHERE name=?",
                               (name,)).fetchone()

    def _indexed_row(self, oid: str):
        """(rowid, depth, title rowid) of message ``oid`` if the index holds it already, else None."""
        return self.db.execute("SELECT rowid, depth, title_rowid FROM messages WHERE id=?", (oid,)).fetchone()

    def _flush(self) -> None:
        rows = [r[:9] for r in self._pending.values()]
        self.db.executemany(
            "INSERT INTO messages (rowid, id, parent_rowid, role, depth, title_rowid, turn_rowid, n_parts, meta_json) VALUES "
            "(?,?,?,?,?,?,?,?,?)",
            rows,
        )
        keep = self.keep_text
        self.db.executemany("INSERT INTO parts VALUES (?,?,?,?,?,?,?,?,?,?)", [
            (p[0], p[1], p[2], p[3] if keep else None, *p[4:], None if p[3] is None else len(p[3].encode("utf-8", "surrogatepass")))
            for p in self._pending_parts])
        from . import fts

        fts.index_messages(self.db, rows, self._pending_parts)  # (from the text in memory, in both modes)
        self._pending = {}
        self._pending_parts = []

    def _index_thread(self, reader: "Reader", name: str, tip: str, log_offset: int) -> None:
        db = self.db
        written = getattr(self, "_written", {}).get(name)
        if written is not None:  # just created by this transaction: its whole reflog, in memory
            tail, size = written[1][log_offset:], len(written[1])
        else:  # only what was appended since the index last read it (O(new lines), not O(reflog))
            tail, size = self.repo.refs.log_tail(name, log_offset)
        if size < log_offset:  # rewritten (expired) reflog: read it all again
            log_offset = 0
            tail = written[1] if written is not None else self.repo.refs.log_tail(name, 0)[0]
        first_time = None
        if log_offset == 0:
            db.execute("DELETE FROM threads WHERE name=?", (name,))
        entries, consumed = self._index_log(reader, name, None, log_offset, raw=tail, tip=tip)  # (a live reflog)
        self._note_renames(entries)
        size = log_offset + consumed
        row = self._thread_row(name)
        created, f_thread, f_msg = row if row else (None, None, None)
        updated = entries[-1].time_ms if entries else None
        if row is None and entries:
            first_time = entries[0].time_ms
            created = first_time
            t = entries[0].turn
            if t:
                turn = reader.turn(t)
                if turn is not None:
                    f_thread = turn.forked_from
                    f_msg = turn.forked_at or (turn.input if turn.kind == "fork" else None)
        if row is not None and updated is None:
            updated = db.execute("SELECT updated_ms FROM threads WHERE name=?", (name,)).fetchone()[0]
        db.execute(
            "INSERT OR REPLACE INTO threads VALUES (?,?,?,?,?,?,?)",
            (name, tip, created, updated, f_thread, f_msg, size),
        )

    def _note_renames(self, entries) -> None:
        """Remember the renames these reflog entries record (in ``meta``: no schema change),
        so that ``thread_rows`` shows a fork's source by its current name. Kept from live
        and archived reflogs alike, so a rebuild knows the same renames."""
        for e in entries:
            r = parse_rename(e.message)
            if r is not None:
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"rename {e.time_ms} {r[0]}", r[1]))

    def _renames(self) -> list[tuple[int, str, str]]:
        """(time, old name, new name) of every recorded rename, oldest first."""
        out = []
        for key, new in self.db.execute("SELECT key, value FROM meta WHERE key LIKE 'rename %'"):
            _, t, old = key.split(" ", 2)  # thread names hold no spaces
            out.append((int(t), old, new))
        return sorted(out)

    @staticmethod
    def _current_name(name: str | None, since: int | None, renames: list[tuple[int, str, str]]) -> str | None:
        """What thread ``name``, as it was named at time ``since``, is called now: every
        rename of it made at or after that time, in order (a thread created later under the
        old name is another thread)."""
        if name is None:
            return None
        for t, old, new in renames:
            if old == name and (since is None or since <= t):
                name = new
        return name

    def _index_log(self, reader: "Reader", thread: str | None, path: Path, offset: int, *, raw: bytes | None = None,
                   tip: str | None = None):
        """Index the turns of the moves that happened that a reflog names, from byte
        ``offset`` (``raw``: its bytes from there, already read). Returns (those entries,
        bytes used).

        A writer appends its reflog line *before* it renames the ref, so a line may be of a
        move not made yet (a writer still running) or never made (one killed between the
        two: docs/format.md §6.2). The moves that happened are the chain of lines that ends
        at the thread's ``tip`` (refformat.applied_entries, as ``reflog`` and the serve
        drain read it): walked back from the tip, the chain picks the same lines in these
        lines from ``offset`` as in the whole reflog, so a catch-up that reads only the new
        lines and a rebuild that reads them all index the same turns. Lines are used up to
        the last one on the chain: those before it that are not on it never happened (their
        turn, whose objects a power loss may even have lost, is not read); those after it
        wait for the next catch-up (a move still being made, or one that never will be).
        An archived reflog (``thread`` None) is read whole, its moves as
        refformat.applied_archived says.
        """
        if raw is not None:
            pass
        elif thread is not None and thread in getattr(self, "_written", ()):
            raw = self._written[thread][1][offset:]  # just created by this transaction (record_moves)
        elif thread is not None:
            raw = self.repo.refs.log_tail(thread, offset)[0]  # a live reflog: packed part, then loose
        else:
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    raw = f.read()
            except FileNotFoundError:
                return [], 0
        items = []  # (entry or None, end byte)
        pos = 0
        for line in raw.splitlines(keepends=True):
            pos += len(line)
            if not line.endswith(b"\n"):
                break  # a line being written
            items.append((parse_reflog_line(line.decode("utf-8", "replace")), pos))
        if thread is not None:
            chain = applied_entries([e for e, _ in items if e is not None], tip)
            on = {id(e) for e in chain}
            cut = max((i + 1 for i, (e, _) in enumerate(items) if id(e) in on), default=0)
            used = items[:cut]
            entries = chain
        else:
            used = items
            entries = applied_archived([e for e, _ in items if e is not None])
        for e in entries:
            if e.turn:
                turn = reader.turn(e.turn)
                if turn is not None:
                    # What the event brought: everything its ref move added (for a call, the
                    # new request messages too), else just (input, output].
                    moved = e.old != e.new and turn.kind != "fork"
                    self._index_turn(reader, e.turn, turn, thread, stop=e.old if moved else turn.input)
        return entries, (used[-1][1] if used else 0)


_BULK_LOOKUP = 1000  # new messages from which _not_indexed looks them up in bulk
