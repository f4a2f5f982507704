"""The approximate first pass of vector search: an inverted-file (IVF) coarse quantizer
beside a namespace's matrix (vectors.py), ``ivf-<gen>.bin`` for matrix generation ``gen``.

The vectors are grouped into about √N lists by k-means (spherical, on a deterministic
sample, fixed seed): a query scores the list centroids, takes the ``nprobe`` best lists,
and scores exactly (float32, the matrix itself) only the rows of those lists plus the rows
appended since the lists were written (the *tail*, always scanned). The lists hold row
numbers only (4 bytes a vector), never a second copy of the vectors.

    magic  b"CGIVF01\\n"
    u32    header length, then the header (JSON): rows, trained, nlist, dim, blake3
    f32    centroids (nlist × dim), i64 offsets (nlist + 1), i32 rows (``rows`` of them,
           sorted by list then row); ``blake3`` is the hash of these bytes

Kept fresh by ``ensure`` (after ``convgit embed`` and gc compaction): rows appended since
are assigned to their nearest centroid and the lists rewritten once the tail passes
``TAIL_FRACTION`` of the indexed rows; k-means is trained again once the store has doubled
since training, or when the file is missing, from another generation, or does not verify.
A file that does not verify is never used: the search is exact then (``load`` is None).
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

from blake3 import blake3

from .. import fsio

MAGIC = b"CGIVF01\n"
TAIL_FRACTION = 0.05  # rewrite the lists once the unindexed tail passes this share of the rows
SAMPLE_PER_LIST = 40  # k-means training sample: this many vectors per list (at most 64k)
ITERATIONS = 8
_CACHE: dict[str, tuple[tuple, "Ivf"]] = {}


def _numpy():
    from ..embedders import _numpy as np

    return np()


def path_for(dir_: Path, gen: int) -> Path:
    """Where the lists of matrix generation ``gen`` live."""
    return dir_ / f"ivf-{gen}.bin"


def default_nprobe(nlist: int) -> int:
    """Lists probed when the setting is 0 (automatic): 1/24 of them, at least 16 (measured
    in benchmarks/bench_semantic.py for recall@10 ≥ 0.95 on clustered data)."""
    return min(nlist, max(16, math.ceil(nlist / 24)))


class Ivf:
    """Loaded lists: ``centroids`` (nlist × dim), ``offsets`` (nlist + 1), ``ids`` (rows)."""

    def __init__(self, rows: int, trained: int, centroids, offsets, ids) -> None:
        self.rows, self.trained = rows, trained
        self.centroids, self.offsets, self.ids = centroids, offsets, ids
        self.nlist = len(centroids)

    def candidates(self, q, nprobe: int, total: int):
        """Sorted matrix rows to score for query ``q``: the rows of the ``nprobe`` lists whose
        centroids score best (ties by list number) and the tail ``[rows, total)``."""
        np = _numpy()
        cs = self.centroids @ q
        best = np.lexsort((np.arange(self.nlist), -cs))[: max(1, nprobe)]
        parts = [self.ids[self.offsets[i] : self.offsets[i + 1]] for i in best]
        if total > self.rows:
            parts.append(np.arange(self.rows, total, dtype=np.int32))
        out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
        out.sort()
        return out


def load(path: Path, dim: int, total: int) -> Ivf | None:
    """The lists in ``path`` when they verify (magic, sizes, checksum, rows < ``total``),
    else None. Cached by the file's identity (inode, size, mtime)."""
    np = _numpy()
    try:
        st = os.stat(path)
    except OSError:
        return None
    ident = (st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _CACHE.get(str(path))
    if hit is not None and hit[0] == ident:
        ivf = hit[1]
    else:
        ivf = _read(path, dim)
        if ivf is None:
            return None
        _CACHE[str(path)] = (ident, ivf)
    if ivf.rows > total or ivf.centroids.shape[1] != dim:
        return None
    return ivf


def _read(path: Path, dim: int) -> Ivf | None:
    np = _numpy()
    try:
        data = path.read_bytes()
        if not data.startswith(MAGIC):
            return None
        (hlen,) = struct.unpack_from("<I", data, len(MAGIC))
        start = len(MAGIC) + 4 + hlen
        h = json.loads(data[len(MAGIC) + 4 : start])
        rows, nlist, trained = int(h["rows"]), int(h["nlist"]), int(h["trained"])
        if int(h["dim"]) != dim or nlist < 1 or rows < 0:
            return None
        payload = memoryview(data)[start:]
        if len(payload) != nlist * dim * 4 + (nlist + 1) * 8 + rows * 4:
            return None
        if blake3(payload).hexdigest() != h["blake3"]:
            return None
        cent = np.frombuffer(payload, dtype="<f4", count=nlist * dim).reshape(nlist, dim)
        offs = np.frombuffer(payload, dtype="<i8", count=nlist + 1, offset=nlist * dim * 4)
        ids = np.frombuffer(payload, dtype="<i4", count=rows, offset=nlist * dim * 4 + (nlist + 1) * 8)
        if offs[0] != 0 or offs[-1] != rows or (np.diff(offs) < 0).any():
            return None
        if rows and (ids.min() < 0 or ids.max() >= rows):
            return None
        return Ivf(rows, trained, cent, offs, ids)
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None


def write(path: Path, ivf: Ivf) -> None:
    """Write ``ivf`` to ``path`` atomically (a reader sees the old file or the new one)."""
    np = _numpy()
    payload = (np.ascontiguousarray(ivf.centroids, dtype="<f4").tobytes()
               + np.ascontiguousarray(ivf.offsets, dtype="<i8").tobytes()
               + np.ascontiguousarray(ivf.ids, dtype="<i4").tobytes())
    head = json.dumps({"rows": ivf.rows, "trained": ivf.trained, "nlist": ivf.nlist,
                       "dim": int(ivf.centroids.shape[1]), "blake3": blake3(payload).hexdigest()}).encode()
    fsio.replace_file(path, MAGIC + struct.pack("<I", len(head)) + head + payload, fsync=False)


def _assign(matrix, centroids, start: int, stop: int):
    np = _numpy()
    out = np.empty(stop - start, dtype=np.int32)
    for i in range(start, stop, 32768):
        j = min(stop, i + 32768)
        out[i - start : j - start] = np.argmax(np.asarray(matrix[i:j]) @ centroids.T, axis=1)
    return out


def _lists(assign, nlist: int):
    np = _numpy()
    order = np.argsort(assign, kind="stable").astype(np.int32)  # stable: rows ascending in a list
    offsets = np.zeros(nlist + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(np.bincount(assign, minlength=nlist))
    return offsets, order


def train(matrix, nlist: int | None = None):
    """Spherical k-means centroids (unit rows) for ``matrix``: deterministic (fixed seed and
    sample), about √N lists."""
    np = _numpy()
    n = matrix.shape[0]
    nlist = nlist or max(1, min(n, round(math.sqrt(n))))
    rng = np.random.default_rng(0)
    take = min(n, max(nlist, min(65536, nlist * SAMPLE_PER_LIST)))
    idx = np.sort(rng.choice(n, take, replace=False)) if take < n else np.arange(n)
    sample = np.asarray(matrix[idx], dtype=np.float32)
    cent = sample[rng.choice(len(sample), nlist, replace=False)].copy()
    for _ in range(ITERATIONS):
        a = np.argmax(sample @ cent.T, axis=1)
        sums = np.zeros_like(cent)
        np.add.at(sums, a, sample)
        empty = np.bincount(a, minlength=nlist) == 0
        if empty.any():  # an empty list restarts at a sample vector
            sums[empty] = sample[rng.choice(len(sample), int(empty.sum()))]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        cent = (sums / np.where(norms == 0, 1, norms)).astype(np.float32)
    return cent


def build(matrix, nlist: int | None = None) -> Ivf:
    """Train centroids on ``matrix`` and list every row."""
    cent = train(matrix, nlist)
    n = matrix.shape[0]
    offsets, ids = _lists(_assign(matrix, cent, 0, n), len(cent))
    return Ivf(n, n, cent, offsets, ids)


def extend(ivf: Ivf, matrix) -> Ivf:
    """``ivf`` with the tail rows of ``matrix`` assigned to their nearest centroid."""
    np = _numpy()
    n = matrix.shape[0]
    old = np.empty(ivf.rows, dtype=np.int32)
    for i in range(ivf.nlist):
        old[ivf.ids[ivf.offsets[i] : ivf.offsets[i + 1]]] = i
    assign = np.concatenate([old, _assign(matrix, ivf.centroids, ivf.rows, n)])
    offsets, ids = _lists(assign, ivf.nlist)
    return Ivf(n, ivf.trained, ivf.centroids, offsets, ids)


def remap(ivf: Ivf, new_row) -> Ivf:
    """``ivf`` after compaction: ``new_row[old row]`` is the row's new number, -1 when dropped
    (the centroids stay; the lists keep their order)."""
    np = _numpy()
    assign = np.full(ivf.rows, -1, dtype=np.int64)
    for i in range(ivf.nlist):
        assign[ivf.ids[ivf.offsets[i] : ivf.offsets[i + 1]]] = i
    keep = new_row[: ivf.rows] >= 0
    n = int(keep.sum())
    new_assign = np.empty(n, dtype=np.int64)
    new_assign[new_row[: ivf.rows][keep]] = assign[keep]
    offsets, ids = _lists(new_assign, ivf.nlist)
    return Ivf(n, ivf.trained, ivf.centroids, offsets, ids)


def ensure(path: Path, matrix, *, force: bool = False) -> str:
    """Bring the lists at ``path`` up to date with ``matrix`` (the caller holds the store's
    lock). Returns what was done: "fresh", "extended" or "built"."""
    n = matrix.shape[0]
    cur = None if force else load(path, matrix.shape[1], n)
    if cur is not None and n <= 2 * cur.trained:
        if n - cur.rows <= TAIL_FRACTION * max(1, cur.rows):
            return "fresh"
        write(path, extend(cur, matrix))
        return "extended"
    write(path, build(matrix))
    return "built"
