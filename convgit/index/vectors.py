"""The vector store of one namespace: ``.convgit/vectors/<namespace key>/``.

Vectors cost CPU time or money, so they are not in ``index.sqlite`` (which ``reindex``
throws away): each namespace (provider, model, dimension, fingerprint: embedders.py) has a
directory of its own, kept across index rebuilds and reused by chunk id.

    namespace.json     what the namespace is (provider, model, dimension, fingerprint)
    vectors.sqlite     chunk id → matrix row; chunks whose embedding failed, with the error
    matrix-<gen>.f32   the vectors: row r is bytes [r*d*4, (r+1)*d*4), float32, unit length

Writes happen under ``lock`` (a kernel lock: ``kill -9`` leaves none): the vectors are
written at the end of the matrix first, then their rows are committed in SQLite. A process
killed between the two leaves bytes past the last committed row, which the next writer
overwrites: nothing is duplicated and nothing half-written is ever read. A chunk id is the
primary key, so a vector is stored once per namespace.

Search is exact below ``ann_threshold`` vectors (or with ``search = "exact"``): the matrix
is memory-mapped and every row is scored against the query (one matrix-vector product).
From the threshold on, an IVF coarse quantizer (ivf.py, ``ivf-<gen>.bin``: centroids and
offsets; the matrix is laid out list by list) picks the rows to score, then those are
scored exactly in float32; without valid lists the search stays exact. Compaction (``compact``, run by ``gc``) rewrites the matrix
without the vectors of messages that are gone, under a new generation number, and swaps
the SQLite file in: readers keep the generation they opened.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable

from .. import fsio
from ..errors import EmbeddingFailed

VECTORS_DIR = "vectors"
ANN_THRESHOLD = 200_000  # from this many vectors on, search uses the IVF lists (docs/search.md)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS rows (row INTEGER PRIMARY KEY, mid BLOB NOT NULL, win INTEGER NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS rows_chunk ON rows(mid, win);
CREATE TABLE IF NOT EXISTS failed (mid BLOB NOT NULL, win INTEGER NOT NULL, error TEXT, attempts INTEGER NOT NULL,
  failed_ms INTEGER, PRIMARY KEY (mid, win)) WITHOUT ROWID;
"""


def _key(cid: str) -> tuple[bytes, int]:
    oid, _, win = cid.rpartition(":")
    return bytes.fromhex(oid), int(win)


def _cid(mid: bytes, win: int) -> str:
    return f"{mid.hex()}:{win}"


def _numpy():
    from ..embedders import _numpy as np

    return np()


def _copy_prefix(src, dst, size: int) -> None:
    """Copy the first ``size`` bytes of file ``src`` to ``dst`` (in the kernel when it can)."""
    done = 0
    try:
        while done < size:
            n = os.copy_file_range(src.fileno(), dst.fileno(), size - done, done, done)
            if n == 0:
                break
            done += n
    except (AttributeError, OSError):
        pass
    if done < size:
        src.seek(done)
        dst.seek(done)
        while done < size:
            chunk = src.read(min(1 << 24, size - done))
            if not chunk:
                raise EmbeddingFailed(f"{src.name}: shorter than its {size // 4} committed values")
            dst.write(chunk)
            done += len(chunk)
    dst.seek(size)


def namespaces(store_path: Path) -> list[dict]:
    """Every namespace directory under ``.convgit/vectors/`` (its namespace.json, plus ``key``)."""
    root = store_path / VECTORS_DIR
    out = []
    if root.is_dir():
        for d in sorted(root.iterdir()):
            try:
                info = json.loads((d / "namespace.json").read_text("utf-8"))
            except (OSError, ValueError):
                continue
            info["key"] = d.name
            out.append(info)
    return out


class VectorStore:
    """The vectors of one namespace (``ns``: embedders.Namespace)."""

    def __init__(self, store_path: Path, ns, *, create: bool = True, search: str = "auto",
                 ann_threshold: int = ANN_THRESHOLD, nprobe: int = 0) -> None:
        self.ns = ns
        self.search = search  # "auto": IVF from ``ann_threshold`` vectors on; "exact": never
        self.ann_threshold = ann_threshold
        self.nprobe = nprobe  # 0: ivf.default_nprobe
        self.last_method = "exact"  # how the last ``nearest`` answered: "exact" or "approximate"
        self.dim = ns.dimension
        self.dir = store_path / VECTORS_DIR / ns.key
        if create:
            fsio.makedirs(self.dir)
            info = self.dir / "namespace.json"
            if not info.exists():
                fsio.replace_file(info, json.dumps(ns.to_json(), indent=2).encode() + b"\n", fsync=False)
        self.lock = self.dir / "lock"
        self.db = self._connect()

    def _connect(self) -> sqlite3.Connection:
        path = self.dir / "vectors.sqlite"
        db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("PRAGMA synchronous=OFF")  # derived: a torn file is rebuilt by embedding again
        db.execute("PRAGMA busy_timeout=30000")
        db.executescript(_SCHEMA)
        if db.execute("SELECT value FROM meta WHERE key='dimension'").fetchone() is None:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('dimension', ?)", (str(self.dim),))
            db.execute("INSERT OR IGNORE INTO meta VALUES ('uid', ?)", (uuid.uuid4().hex,))
            db.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")
        dim = int(db.execute("SELECT value FROM meta WHERE key='dimension'").fetchone()[0])
        if dim != self.dim:
            raise EmbeddingFailed(f"{self.dir}: holds {dim}-d vectors, the namespace says {self.dim}")
        self._ino = os.stat(path).st_ino
        return db

    def _follow_swap(self) -> None:
        try:
            ino = os.stat(self.dir / "vectors.sqlite").st_ino
        except FileNotFoundError:
            ino = None
        if ino != self._ino:
            self.db.close()
            self.db = self._connect()

    def _meta(self, key: str) -> str:
        return self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()[0]

    @property
    def uid(self) -> str:
        """A random id made with the store: a mark that names it is void once it is deleted."""
        return self._meta("uid")

    def _matrix_path(self) -> Path:
        return self.dir / f"matrix-{int(self._meta('generation'))}.f32"

    def close(self) -> None:
        """Release the connection."""
        self.db.close()

    # -- reading ----------------------------------------------------------------------------

    def count(self) -> int:
        """How many vectors are stored."""
        return self.db.execute("SELECT count(*) FROM rows").fetchone()[0]

    def has(self, cids: Iterable[str]) -> set[str]:
        """The chunk ids of ``cids`` that have a vector here."""
        out = set()
        for cid in cids:
            mid, win = _key(cid)
            if self.db.execute("SELECT 1 FROM rows WHERE mid=? AND win=?", (mid, win)).fetchone():
                out.add(cid)
        return out

    def failed(self) -> dict[str, tuple[str, int]]:
        """chunk id → (last error, attempts) of the chunks whose embedding failed."""
        return {_cid(m, w): (e, a) for m, w, e, a in self.db.execute("SELECT mid, win, error, attempts FROM failed")}

    def failed_count(self) -> int:
        """How many chunks are in the failed state."""
        return self.db.execute("SELECT count(*) FROM failed").fetchone()[0]

    def size_bytes(self) -> int:
        """Bytes on disk: matrix and SQLite file."""
        total = 0
        for p in self.dir.iterdir():
            if p.is_file():
                total += p.stat().st_size
        return total

    def matrix(self):
        """The vectors, memory-mapped (rows committed only), or None when there are none."""
        np = _numpy()
        self._follow_swap()
        n = self.db.execute("SELECT coalesce(max(row) + 1, 0) FROM rows").fetchone()[0]
        if n == 0:
            return None
        return np.memmap(self._matrix_path(), dtype="<f4", mode="r", shape=(n, self.dim))

    def _ann_wanted(self, n: int) -> bool:
        return self.search != "exact" and n >= self.ann_threshold

    def _ivf_path(self) -> Path:
        from . import ivf as IVF

        return IVF.path_for(self.dir, int(self._meta("generation")))

    def ensure_ann(self, *, force: bool = False) -> str | None:
        """Build or update the IVF lists when the store is at the threshold (under the lock).
        Returns what was done ("fresh", "extended", "built") or None below the threshold."""
        from . import ivf as IVF

        m = self.matrix()
        if m is None or not (force or self._ann_wanted(m.shape[0])):
            return None
        np = _numpy()  # (the IVF build needs numpy: its clear error before the lock is taken)
        with fsio.flock(self.lock, shared=False, timeout=600):
            self._follow_swap()
            m = self.matrix()
            todo = IVF.plan(IVF.load(self._ivf_path(), self.dim, m.shape[0]), m, force=force)
            if todo is None:
                return "fresh"
            what, cent, trained, kept, start, labels, nprobe = todo
            order, offsets = IVF.layout(labels, len(cent), start)
            lists = IVF.Ivf(m.shape[0], trained, cent, np.concatenate([kept, offsets[None, :]]), nprobe)
            del m
            if start == 0:
                rows = self.db.execute("SELECT row, mid, win FROM rows ORDER BY row").fetchall()
                if len(rows) != lists.rows:
                    raise EmbeddingFailed(f"{self.dir}: rows are not numbered 0..{len(rows) - 1}")
                self._rewrite([rows[i] for i in order.tolist()], [], lists)
            else:
                self._relayout_tail(start, order, lists)
            return what

    def _relayout_tail(self, start: int, order, lists) -> None:
        """Write the next generation (under the lock) with rows ``[start, N)`` in the order
        ``order`` (old row numbers) and the rows before ``start`` unchanged: the matrix's
        first ``start`` rows are copied as bytes, vectors.sqlite is copied and only the moved
        rows renumbered, then it is swapped in and the old generation's files removed."""
        from . import ivf as IVF

        np = _numpy()
        gen = int(self._meta("generation")) + 1
        old_matrix, old_ivf = self._matrix_path(), self._ivf_path()
        new_matrix = self.dir / f"matrix-{gen}.f32"
        moved = self.db.execute("SELECT row, mid, win FROM rows WHERE row >= ? ORDER BY row", (start,)).fetchall()
        if len(moved) != lists.rows - start or (moved and moved[-1][0] != lists.rows - 1):
            raise EmbeddingFailed(f"{self.dir}: rows are not numbered 0..{lists.rows - 1}")
        m = self.matrix()
        with open(old_matrix, "rb") as src, open(new_matrix, "wb") as dst:
            _copy_prefix(src, dst, start * self.dim * 4)
            for i in range(0, len(order), 4096):
                dst.write(np.ascontiguousarray(m[order[i : i + 4096]]).tobytes())
        del m
        tmp = self.dir / f"{fsio.TMP_PREFIX}vectors.sqlite.{os.getpid()}"
        fsio.unlink_quiet(tmp)
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            self.db.backup(db)
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("BEGIN")
            db.execute("DELETE FROM rows WHERE row >= ?", (start,))
            db.executemany("INSERT INTO rows VALUES (?,?,?)",
                           [(start + j, *moved[r - start][1:]) for j, r in enumerate(order.tolist())])
            db.execute("UPDATE meta SET value=? WHERE key='generation'", (str(gen),))
            db.execute("COMMIT")
        finally:
            db.close()
        IVF.write(IVF.path_for(self.dir, gen), lists)
        fsio.rename(tmp, self.dir / "vectors.sqlite")
        self._follow_swap()
        fsio.unlink_quiet(old_matrix)
        fsio.unlink_quiet(old_ivf)

    def nearest(self, qvec, k: int, matrix=None) -> list[tuple[int, float]]:
        """(row, cosine score) of the ``k`` rows nearest to unit vector ``qvec``, best first
        (ties by row). Exact (every row scored) below the threshold or without valid IVF
        lists; else the rows of the best lists and the unlisted tail, scored exactly."""
        from . import ivf as IVF

        np = _numpy()
        m = self.matrix() if matrix is None else matrix
        if m is None or k <= 0:
            return []
        q = np.asarray(qvec, dtype=np.float32)
        self.last_method = "exact"
        n = m.shape[0]
        fname = getattr(m, "filename", None)  # a matrix of another generation: its lists are gone
        if self._ann_wanted(n) and (fname is None or Path(fname) == self._matrix_path().resolve()):
            lists = IVF.load(self._ivf_path(), self.dim, n)
            probe = 0 if lists is None else self.nprobe or IVF.default_nprobe(lists.nlist, lists.nprobe)
            while lists is not None and probe < lists.nlist:
                cand, scores = lists.score(m, q, probe)
                if len(cand) < 4 * k:  # too few candidates: more lists (all of them: exact)
                    probe *= 4
                    continue
                top = np.argpartition(-scores, k - 1)[:k]
                rows = cand.rows(top)
                order = np.lexsort((rows, -scores[top]))
                self.last_method = "approximate"
                return [(int(rows[i]), float(scores[top[i]])) for i in order]
        scores = np.empty(n, dtype=np.float32)
        IVF.dot_rows(m, q, [0], [n], scores)  # one pass, in single-threaded slices
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]
        return [(int(r), float(scores[r])) for r in top]

    def chunk_ids(self, rows: list[int]) -> dict[int, str]:
        """matrix row → chunk id."""
        out = {}
        for i in range(0, len(rows), 500):
            part = rows[i : i + 500]
            for r, m, w in self.db.execute(f"SELECT row, mid, win FROM rows WHERE row IN ({','.join('?' * len(part))})", part):
                out[r] = _cid(m, w)
        return out

    def vectors_of(self, cids: list[str]):
        """The stored vectors of ``cids`` (KeyError for one not stored), as a matrix."""
        np = _numpy()
        m = self.matrix()
        rows = []
        for cid in cids:
            mid, win = _key(cid)
            r = self.db.execute("SELECT row FROM rows WHERE mid=? AND win=?", (mid, win)).fetchone()
            if r is None:
                raise KeyError(cid)
            rows.append(r[0])
        return np.array(m[rows]) if rows else np.zeros((0, self.dim), dtype=np.float32)

    # -- writing ----------------------------------------------------------------------------

    def add(self, cids: list[str], vecs) -> int:
        """Store the vectors of ``cids`` (unit rows of a float32 matrix); those stored already
        are skipped. Returns how many were added."""
        np = _numpy()
        vecs = np.ascontiguousarray(vecs, dtype="<f4")  # little-endian on every machine (format.md §8.1)
        if vecs.shape != (len(cids), self.dim):
            raise EmbeddingFailed(f"vectors of shape {vecs.shape} for {len(cids)} chunks of dimension {self.dim}")
        with fsio.flock(self.lock, shared=False, timeout=60):
            self._follow_swap()
            db = self.db
            keep = [i for i, cid in enumerate(cids) if not db.execute(
                "SELECT 1 FROM rows WHERE mid=? AND win=?", _key(cid)).fetchone()]
            keep = list(dict.fromkeys(keep))
            seen: set[str] = set()
            keep = [i for i in keep if not (cids[i] in seen or seen.add(cids[i]))]
            if not keep:
                return 0
            n = db.execute("SELECT coalesce(max(row) + 1, 0) FROM rows").fetchone()[0]
            path = self._matrix_path()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, n * self.dim * 4)  # bytes past the last committed row: a killed writer's
                data = vecs[keep].tobytes()
                off = n * self.dim * 4
                while data:
                    w = os.pwrite(fd, data, off)
                    data, off = data[w:], off + w
            finally:
                os.close(fd)
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT INTO rows VALUES (?,?,?)", [(n + j, *_key(cids[i])) for j, i in enumerate(keep)])
                db.executemany("DELETE FROM failed WHERE mid=? AND win=?", [_key(cids[i]) for i in keep])
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return len(keep)

    def mark_failed(self, cids: list[str], error: str) -> None:
        """Record that embedding ``cids`` failed (their attempt count goes up)."""
        now = int(time.time() * 1000)
        with fsio.flock(self.lock, shared=False, timeout=60):
            self._follow_swap()
            self.db.executemany(
                "INSERT INTO failed VALUES (?,?,?,1,?) ON CONFLICT(mid, win) DO UPDATE SET error=excluded.error, "
                "attempts=attempts+1, failed_ms=excluded.failed_ms", [(*_key(c), error[:500], now) for c in cids])

    def compact(self, keep: Callable[[str], bool]) -> int:
        """Drop the vectors (and failures) of chunks whose message id ``keep`` rejects; the
        matrix is rewritten as a new generation and swapped in. Returns how many were dropped."""
        from . import ivf as IVF

        np = _numpy()
        with fsio.flock(self.lock, shared=False, timeout=60):
            self._follow_swap()
            rows = self.db.execute("SELECT row, mid, win FROM rows ORDER BY row").fetchall()
            alive = [(r, m, w) for r, m, w in rows if keep(m.hex())]
            dead_failed = [(m, w) for m, w in self.db.execute("SELECT mid, win FROM failed") if not keep(m.hex())]
            if len(alive) == len(rows):
                if dead_failed:
                    self.db.executemany("DELETE FROM failed WHERE mid=? AND win=?", dead_failed)
                return 0
            nrows = rows[-1][0] + 1
            lists = IVF.load(self._ivf_path(), self.dim, nrows)
            if lists is not None:  # compaction keeps the order: the lists stay, recounted
                keep_row = np.zeros(nrows, dtype=bool)
                keep_row[np.array([r for r, _, _ in alive], dtype=np.int64)] = True
                lists = IVF.remap(lists, keep_row)
            self._rewrite(alive, dead_failed, lists)
            return len(rows) - len(alive)

    def _rewrite(self, alive: list[tuple], dead_failed: list[tuple], lists) -> None:
        """Write the next generation (under the lock): matrix rows ``alive`` ((old row, mid,
        win), in their new order), failures without ``dead_failed``, the IVF lists ``lists``
        (or none), then swap the SQLite file in and remove the old generation's files."""
        from . import ivf as IVF

        np = _numpy()
        gen = int(self._meta("generation")) + 1
        old_matrix = self._matrix_path()
        old_ivf = self._ivf_path()
        new_matrix = self.dir / f"matrix-{gen}.f32"
        m = self.matrix()
        with open(new_matrix, "wb") as f:
            for i in range(0, len(alive), 4096):
                f.write(np.ascontiguousarray(m[[r for r, _, _ in alive[i : i + 4096]]]).tobytes())
        del m
        tmp = self.dir / f"{fsio.TMP_PREFIX}vectors.sqlite.{os.getpid()}"
        fsio.unlink_quiet(tmp)
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.executescript(_SCHEMA)
            db.execute("BEGIN")
            db.executemany("INSERT INTO meta VALUES (?, ?)",
                           [(k, v) for k, v in self.db.execute("SELECT key, value FROM meta") if k != "generation"])
            db.execute("INSERT INTO meta VALUES ('generation', ?)", (str(gen),))
            db.executemany("INSERT INTO rows VALUES (?,?,?)", [(j, m_, w) for j, (_, m_, w) in enumerate(alive)])
            dead = set(dead_failed)
            db.executemany("INSERT INTO failed VALUES (?,?,?,?,?)", [
                r for r in self.db.execute("SELECT mid, win, error, attempts, failed_ms FROM failed")
                if (r[0], r[1]) not in dead])
            db.execute("COMMIT")
        finally:
            db.close()
        if lists is not None:
            IVF.write(IVF.path_for(self.dir, gen), lists)
        fsio.rename(tmp, self.dir / "vectors.sqlite")
        self._follow_swap()
        fsio.unlink_quiet(old_matrix)
        fsio.unlink_quiet(old_ivf)

    def message_ids(self) -> set[str]:
        """Every message id that has a vector or a failure here."""
        return {m.hex() for (m,) in self.db.execute("SELECT DISTINCT mid FROM rows UNION SELECT DISTINCT mid FROM failed")}
