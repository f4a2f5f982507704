"""Bundles: one SQLite file carrying threads and every object they reach, for moving history
between machines (``convgit bundle create``, ``convgit merge FILE.db``).

Schema (format ``convgit-bundle`` version 1)::

    bundle_meta(key TEXT PRIMARY KEY, value TEXT)        -- format, version, created_at
    refs(name TEXT PRIMARY KEY, tip TEXT NOT NULL)
    turns(thread TEXT, seq INTEGER, turn TEXT, PRIMARY KEY (thread, seq))
    objects(id TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID
    archived(log TEXT, seq INTEGER, line TEXT, PRIMARY KEY (log, seq))  -- may be absent

``archived`` holds reflog lines of deleted threads (``logs/deleted/<log>``) whose turns
record a message the bundled threads reach: the provenance rule (docs/format.md §10) carried
across machines. A reader that does not know the table ignores it (older bundles lack it).

A bundle is never trusted: merge re-hashes every object it takes from one.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import codec, fsio
from .errors import InvalidInput, NotFound, ObjectCorrupt, ObjectMissing, SourceCorrupt
from .graph import deleted_provenance, mark_reachable, typed_references
from .ids import check_thread_name, is_oid
from .refformat import applied_entries
from .refs import format_reflog_line, parse_reflog_line

BUNDLE_FORMAT = "convgit-bundle"
BUNDLE_VERSION = "1"
SCHEMA = """
CREATE TABLE bundle_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE refs (name TEXT PRIMARY KEY, tip TEXT NOT NULL);
CREATE TABLE turns (thread TEXT NOT NULL, seq INTEGER NOT NULL, turn TEXT NOT NULL, PRIMARY KEY (thread, seq));
CREATE TABLE objects (id TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE archived (log TEXT NOT NULL, seq INTEGER NOT NULL, line TEXT NOT NULL, PRIMARY KEY (log, seq));
"""


@dataclass
class BundleInfo:
    """What a bundle holds (threads, object count, bytes) and, after a verify, what is wrong."""

    path: str
    threads: dict[str, str] = field(default_factory=dict)
    objects: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The ``bundle --json`` document: ``ok`` or ``corrupt`` with the problems."""
        return {"status": "ok" if not self.problems else "corrupt", "path": self.path, "threads": self.threads,
                "objects": self.objects, "bytes": self.bytes, "problems": self.problems}


def create_bundle(repo, path: str | Path, threads: list[str] | None = None, progress=None) -> BundleInfo:
    """Write ``path`` holding ``threads`` (default: all) and everything they reach.
    ``progress(done, total)``: objects written so far."""
    path = Path(path)
    all_refs = repo.refs.read_all()
    if threads:
        missing = [t for t in threads if t not in all_refs]
        if missing:
            raise NotFound(f"no such thread: {', '.join(missing)}", threads=missing)
        refs = {t: all_refs[t] for t in threads}
    else:
        refs = all_refs
    turns: dict[str, list[str]] = {}
    roots = list(refs.values())
    for name in refs:
        # the moves that happened (a line a crash cut short names a call not on the thread)
        ts = [e.turn for e in applied_entries(repo.refs.read_log(name), refs[name])
              if e.turn and repo.objects.contains(e.turn)]
        turns[name] = list(dict.fromkeys(ts))
        roots.extend(turns[name])
    def read(oid: str):
        try:
            return repo.objects.read(oid)
        except (ObjectMissing, ObjectCorrupt):
            return None

    carried = deleted_provenance(repo.refs.archived_entries(), list(refs.values()), read)
    roots.extend(e.turn for _, es in carried for e in es)
    ids = sorted(mark_reachable(repo.objects, roots))
    tmp = path.with_name(f"{fsio.TMP_PREFIX}{path.name}.{os.getpid()}")
    fsio._unlink_quiet(tmp)
    info = BundleInfo(str(path), dict(refs))
    db = sqlite3.connect(tmp)
    try:
        db.executescript(SCHEMA)
        db.executemany("INSERT INTO bundle_meta VALUES (?, ?)", [
            ("format", BUNDLE_FORMAT), ("version", BUNDLE_VERSION), ("created_at", str(int(time.time() * 1000))),
        ])
        db.executemany("INSERT INTO refs VALUES (?, ?)", sorted(refs.items()))
        db.executemany("INSERT INTO turns VALUES (?, ?, ?)", [(n, i, t) for n, ts in turns.items() for i, t in enumerate(ts)])
        db.executemany("INSERT INTO archived VALUES (?, ?, ?)", [
            (log, i, format_reflog_line(e.old, e.new, e.time_ms, e.turn, e.message)) for log, es in carried
            for i, e in enumerate(es)])
        for i in range(0, len(ids), 1000):
            rows = [(oid, repo.objects.read_bytes(oid)) for oid in ids[i : i + 1000]]
            info.bytes += sum(len(d) for _, d in rows)
            db.executemany("INSERT INTO objects VALUES (?, ?)", rows)
            if progress is not None:
                progress(min(i + 1000, len(ids)), len(ids))
        db.commit()
    except BaseException:
        db.close()
        fsio._unlink_quiet(tmp)
        raise
    db.close()
    with open(tmp, "rb+") as f:
        fsio.fsync_fd(f.fileno(), tmp)
    fsio.rename(tmp, path)
    info.objects = len(ids)
    return info


class BundleSource:
    """A bundle opened read-only as a merge source."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.label = self.path.stem
        if not self.path.is_file():
            raise InvalidInput(f"{path}: no such file")
        try:
            self.db = sqlite3.connect(fsio.sqlite_readonly_uri(self.path), uri=True)
            meta = dict(self.db.execute("SELECT key, value FROM bundle_meta"))
        except sqlite3.DatabaseError as e:
            raise InvalidInput(f"{path} is not a convgit bundle: {e}") from e
        if meta.get("format") != BUNDLE_FORMAT:
            raise InvalidInput(f"{path} is not a convgit bundle")
        if meta.get("version") != BUNDLE_VERSION:
            raise InvalidInput(f"{path} is a bundle of version {meta.get('version')}; this convgit reads {BUNDLE_VERSION}")

    def count(self) -> int:
        """How many objects the bundle holds (for a progress bar)."""
        return self.db.execute("SELECT count(*) FROM objects").fetchone()[0]

    def refs(self) -> dict[str, str]:
        """Every thread of the bundle and its tip (SourceCorrupt if unreadable)."""
        try:
            return {str(n): t for n, t in self.db.execute("SELECT name, tip FROM refs ORDER BY name")}
        except sqlite3.DatabaseError as e:
            raise SourceCorrupt(f"{self.path}: refs unreadable: {e}") from e

    def turns(self, name: str) -> list[str]:
        """The turns recorded for thread ``name``, oldest first."""
        try:
            return [t for (t,) in self.db.execute("SELECT turn FROM turns WHERE thread=? ORDER BY seq", (name,))]
        except sqlite3.DatabaseError as e:
            raise SourceCorrupt(f"{self.path}: turns unreadable: {e}") from e

    def archived(self) -> list[tuple[str, list]]:
        """The deleted threads' reflog lines the bundle carries (none in an older bundle)."""
        try:
            if self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='archived'").fetchone() is None:
                return []
            out: dict[str, list] = {}
            for log, line in self.db.execute("SELECT log, line FROM archived ORDER BY log, seq"):
                e = parse_reflog_line(str(line)) if isinstance(line, str) else None
                if e is None or not e.turn or not isinstance(log, str):
                    raise SourceCorrupt(f"{self.path}: an archived reflog line is unreadable")
                out.setdefault(log, []).append(e)
            return list(out.items())
        except sqlite3.DatabaseError as e:
            raise SourceCorrupt(f"{self.path}: archived reflogs unreadable: {e}") from e

    def size(self, oid: str) -> int | None:
        """The stored size of object ``oid``, or None if the bundle does not hold it."""
        row = self.db.execute("SELECT length(data) FROM objects WHERE id=?", (oid,)).fetchone()
        return None if row is None else row[0]

    def read_raw(self, oid: str) -> bytes | None:
        """The bytes of object ``oid`` as stored (not yet verified), or None if absent."""
        row = self.db.execute("SELECT data FROM objects WHERE id=?", (oid,)).fetchone()
        if row is None:
            return None
        if not isinstance(row[0], bytes):
            raise SourceCorrupt(f"{self.path}: object {oid} is not a blob of bytes", oid=oid)
        return row[0]

    def same_store(self, repo) -> bool:
        """Always False: a bundle is never the store it is merged into."""
        return False

    def close(self) -> None:
        """Close the bundle's database."""
        self.db.close()


def _lenient_text(raw: bytes):
    """SQLite TEXT as str, or the raw bytes when they are not UTF-8 (verify reports them
    instead of failing the whole read)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _show(value) -> str:
    """A value read from a bundle, for a problem's text."""
    if isinstance(value, str):
        return value
    return f"{value!r} ({'not UTF-8' if isinstance(value, bytes) else 'not'} text)"


def verify_bundle(path: str | Path, progress=None) -> BundleInfo:
    """Check a bundle: format, every object's hash, encoding and storage class, closure, the
    type of every reference (a tip and a parent are messages, a blob reference a blob, a
    reflog's turn a turn: what ``merge`` requires, checked with its own rules), ref names.

    Anything wrong is a problem in the result, never an exception: a row that is not UTF-8
    text, an object stored as TEXT, or a table SQLite cannot read. (The size limits are the
    destination's, so only ``merge`` checks them.) ``progress(done, total)``: objects checked."""
    src = BundleSource(path)
    src.db.text_factory = _lenient_text
    info = BundleInfo(str(path))
    try:
        _verify(src, info, progress)
    except (sqlite3.Error, OSError) as e:  # a missing table, a damaged page
        info.problems.append(f"the bundle cannot be read: {e}")
    finally:
        src.close()
    return info


def _verify(src: BundleSource, info: BundleInfo, progress=None) -> None:
    total = src.db.execute("SELECT count(*) FROM objects").fetchone()[0] if progress is not None else 0
    types: dict[str, str] = {}
    bad: set[str] = set()  # present, but failed a check (reported once, not again by referrers)
    refs_needed: list[tuple[str, str, str]] = []  # (id, wanted type, referrer)
    for oid, kind, data in src.db.execute("SELECT id, typeof(data), data FROM objects"):
        info.objects += 1
        if progress is not None and info.objects % 256 == 0:
            progress(info.objects, total)
        if not isinstance(oid, str) or not is_oid(oid):
            info.problems.append(f"object {_show(oid)}: not an object id")
            continue
        if kind != "blob" or not isinstance(data, bytes):
            info.problems.append(f"object {oid}: stored as {kind}, not as a blob of bytes")
            bad.add(oid)
            continue
        if codec.hash_bytes(data) != oid:
            info.problems.append(f"object {oid}: bytes do not hash to its id")
            bad.add(oid)
            continue
        info.bytes += len(data)
        try:
            obj = codec.decode(data, oid)
        except ObjectCorrupt as e:
            info.problems.append(e.message)
            bad.add(oid)
            continue
        if not codec.is_canonical(data, obj):
            info.problems.append(f"object {oid}: not in canonical encoding")
        types[oid] = codec.type_name(obj)
        refs_needed.extend((r, want, oid) for r, want in typed_references(obj))

    def check(oid, want: str, by: str) -> None:
        if oid in bad:
            return
        have = types.get(oid)
        if have is None:
            info.problems.append(f"{by} names {_show(oid)}, which the bundle lacks")
        elif have != want:
            info.problems.append(f"{by} names {oid} as a {want}; it is a {have}")

    for r, want, by in refs_needed:
        check(r, want, f"object {by}")
    for name, tip in src.db.execute("SELECT name, tip FROM refs ORDER BY name"):
        if not isinstance(name, str):
            info.problems.append(f"ref {_show(name)}: a thread name must be text")
            continue
        try:
            check_thread_name(name)
        except InvalidInput as e:
            info.problems.append(f"ref {name!r}: {e.message}")
            continue
        if not isinstance(tip, str):
            info.problems.append(f"thread {name!r} points at {_show(tip)}, not an object id")
            continue
        info.threads[name] = tip
        check(tip, "message", f"thread {name!r}")
    for name in info.threads:
        for (t,) in src.db.execute("SELECT turn FROM turns WHERE thread=? ORDER BY seq", (name,)):
            check(t, "turn", f"the turn list of thread {name!r}")
