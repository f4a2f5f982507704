"""The approximate first pass of vector search: an inverted-file (IVF) coarse quantizer
beside a namespace's matrix (vectors.py), ``ivf-<gen>.bin`` for matrix generation ``gen``.

The vectors are grouped into about √N lists by k-means (spherical, on a deterministic
sample, fixed seed), and the matrix itself is rewritten in list order (a new generation,
as gc's compaction does: vectors.py), so list i is the contiguous rows
``[offsets[i], offsets[i+1])``. A query scores the centroids, takes the ``nprobe`` best
lists, and scores exactly (float32, slices of the memory-mapped matrix: no copy) only those
rows plus the rows appended since the layout (the *tail* ``[rows, N)``, always scanned).
Nothing is stored twice: the file is the centroids and the offsets (a few bytes a vector).

    magic  b"CGIVF02\\n"
    u32    header length, then the header (JSON): rows, trained, nlist, dim, blake3
    f32    centroids (nlist × dim), then i64 offsets (nlist + 1); ``blake3`` hashes them

Kept fresh by ``VectorStore.ensure_ann`` (after ``convgit embed``): once the tail passes
``TAIL_FRACTION`` of the laid-out rows, its rows are assigned to their nearest centroid and
the matrix laid out again; k-means is trained again once the store has doubled since
training, or when the file is missing, from another generation, or does not verify.
Compaction keeps the order, so it only recounts the offsets (``remap``). A file that does
not verify is never used: the search is exact then (``load`` is None).
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

from blake3 import blake3

from .. import fsio

MAGIC = b"CGIVF02\n"
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
    """Lists probed when the setting is 0 (automatic): a quarter of them, at least 16.
    Measured in benchmarks/bench_semantic.py on real text (docstring paragraphs, wordllama,
    100k): a fifth of the lists gave recall@10 0.948 against exact search."""
    return min(nlist, max(16, math.ceil(nlist / 4)))


class Ivf:
    """Loaded lists: ``centroids`` (nlist × dim) and ``offsets`` (nlist + 1) over the first
    ``rows`` rows of the matrix; ``trained``: how many rows k-means was trained on."""

    def __init__(self, rows: int, trained: int, centroids, offsets) -> None:
        self.rows, self.trained = rows, trained
        self.centroids, self.offsets = centroids, offsets
        self.nlist = len(centroids)

    def labels(self):
        """The list of each of the first ``rows`` rows."""
        np = _numpy()
        return np.repeat(np.arange(self.nlist, dtype=np.int64), np.diff(self.offsets))

    def score(self, matrix, q, nprobe: int):
        """(rows, exact scores) of the rows of the ``nprobe`` lists whose centroids score best
        for ``q`` (ties by list number) and of the tail, rows ascending."""
        np = _numpy()
        total = matrix.shape[0]
        cs = self.centroids @ q
        best = np.sort(np.lexsort((np.arange(self.nlist), -cs))[: max(1, nprobe)])
        rows, scores = [], []
        for i in best:
            a, b = int(self.offsets[i]), int(self.offsets[i + 1])
            if b > a:
                rows.append(np.arange(a, b))
                scores.append(matrix[a:b] @ q)
        if total > self.rows:
            rows.append(np.arange(self.rows, total))
            scores.append(matrix[self.rows : total] @ q)
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return np.concatenate(rows), np.concatenate(scores)


def load(path: Path, dim: int, total: int) -> Ivf | None:
    """The lists in ``path`` when they verify (magic, sizes, checksum, rows ≤ ``total``),
    else None. Cached by the file's identity (inode, size, mtime)."""
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
        if len(payload) != nlist * dim * 4 + (nlist + 1) * 8:
            return None
        if blake3(payload).hexdigest() != h["blake3"]:
            return None
        cent = np.frombuffer(payload, dtype="<f4", count=nlist * dim).reshape(nlist, dim)
        offs = np.frombuffer(payload, dtype="<i8", count=nlist + 1, offset=nlist * dim * 4)
        if offs[0] != 0 or offs[-1] != rows or (np.diff(offs) < 0).any():
            return None
        return Ivf(rows, trained, cent, offs)
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None


def write(path: Path, ivf: Ivf) -> None:
    """Write ``ivf`` to ``path`` atomically (a reader sees the old file or the new one)."""
    np = _numpy()
    payload = (np.ascontiguousarray(ivf.centroids, dtype="<f4").tobytes()
               + np.ascontiguousarray(ivf.offsets, dtype="<i8").tobytes())
    head = json.dumps({"rows": ivf.rows, "trained": ivf.trained, "nlist": ivf.nlist,
                       "dim": int(ivf.centroids.shape[1]), "blake3": blake3(payload).hexdigest()}).encode()
    fsio.replace_file(path, MAGIC + struct.pack("<I", len(head)) + head + payload, fsync=False)


def assign(matrix, centroids, start: int, stop: int):
    """The nearest centroid of each row in ``[start, stop)``."""
    np = _numpy()
    out = np.empty(stop - start, dtype=np.int64)
    for i in range(start, stop, 32768):
        j = min(stop, i + 32768)
        out[i - start : j - start] = np.argmax(np.asarray(matrix[i:j]) @ centroids.T, axis=1)
    return out


def layout(labels, nlist: int):
    """(old rows in their new order: by list, then row; offsets) for rows labelled ``labels``."""
    np = _numpy()
    order = np.argsort(labels, kind="stable")
    offsets = np.zeros(nlist + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(np.bincount(labels, minlength=nlist))
    return order, offsets


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


def remap(ivf: Ivf, keep) -> Ivf:
    """``ivf`` after compaction, which keeps the row order: ``keep[r]`` says whether row r
    (< ``ivf.rows``) survived; the offsets are recounted, the centroids stay."""
    np = _numpy()
    counts = np.bincount(ivf.labels()[keep[: ivf.rows]], minlength=ivf.nlist)
    offsets = np.zeros(ivf.nlist + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(counts)
    return Ivf(int(offsets[-1]), ivf.trained, ivf.centroids, offsets)


def plan(cur: Ivf | None, matrix, *, force: bool = False):
    """What to do for ``matrix`` given the current lists ``cur``: None (fresh) or
    (what, centroids, labels of every row, trained)."""
    n = matrix.shape[0]
    if cur is not None and not force and n <= 2 * cur.trained:
        if n - cur.rows <= TAIL_FRACTION * max(1, cur.rows):
            return None
        np = _numpy()
        labels = np.concatenate([cur.labels(), assign(matrix, cur.centroids, cur.rows, n)])
        return "extended", cur.centroids, labels, cur.trained
    cent = train(matrix)
    return "built", cent, assign(matrix, cent, 0, n), n
