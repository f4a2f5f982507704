"""The approximate first pass of vector search: an inverted-file (IVF) coarse quantizer
beside a namespace's matrix (vectors.py), ``ivf-<gen>.bin`` for matrix generation ``gen``.

The vectors are grouped into lists by spherical k-means (about √N centroids, trained on a
deterministic sample with a fixed seed); a list holding more than ``BALANCE`` times the
mean share is split by k-means on its own vectors (``train``), so the lists are about the
same size and a query's cost follows how many lists it probes, not how clustered the data
is. Every vector is in the list of its nearest centroid (ties: the lower list number).

The matrix itself is rewritten in list order (a new generation, as gc's compaction does:
vectors.py), in *segments*: segment s holds rows ``[offsets[s][0], offsets[s][nlist])``
and its list i is the contiguous rows ``[offsets[s][i], offsets[s][i+1])``. A query scores
the centroids, takes the ``nprobe`` best lists, and scores exactly (float32, slices of the
memory-mapped matrix, adjacent slices merged: no copy) those lists in every segment plus
the rows appended since the layout (the *tail* ``[rows, N)``, always scanned). Nothing is
stored twice: the file is the centroids and the offsets (a few bytes a vector). How many
lists a query probes is calibrated at each layout (``calibrate``): the fewest that find
``RECALL_TARGET`` of the exact top 10 of a sample of stored vectors.

    magic  b"CGIVF03\\n"
    u32    header length, then the header (JSON): rows, trained, nlist, segments, dim,
           nprobe (calibrated, ``calibrate``; absent in older files: 0), blake3
    f32    centroids (nlist × dim), then i64 offsets (segments × (nlist + 1)); ``blake3``
           hashes them

Kept fresh by ``VectorStore.ensure_ann`` (after ``convgit embed``): once the tail passes
``TAIL_FRACTION`` of the laid-out rows, its rows are assigned to their nearest centroid
and laid out as a new segment after the others (only the tail is rewritten; the rows
before it are copied unchanged); past ``MAX_SEGMENTS`` segments, every segment after the
first is laid out again as one. k-means is trained again (one segment) once the store has
doubled since training, or when the file is missing, from another generation, or does not
verify. Compaction keeps the order, so it only recounts the offsets (``remap``). A file
that does not verify is never used: the search is exact then (``load`` is None).
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

from blake3 import blake3

from .. import fsio

MAGIC = b"CGIVF03\n"
TAIL_FRACTION = 0.05  # lay the unlisted tail out once it passes this share of the listed rows
MAX_SEGMENTS = 4  # past this, the segments after the first are laid out again as one (1: all)
SAMPLE_PER_LIST = 64  # k-means training sample: this many vectors per list (at most SAMPLE_MAX)
SAMPLE_MAX = 131_072
ITERATIONS = 10
BALANCE = 2.0  # a list holding more than this many times the mean share is split
SLICE_VALUES = 1024 * 384  # values per matrix-vector product (dot_rows)
PROBE_FRACTION = 0.25  # lists probed without a calibrated count (a file written before calibration)
RECALL_TARGET = 0.95  # calibration: the recall@10 against exact search the probed lists must reach
CALIBRATION_QUERIES = 256  # stored vectors used as queries to calibrate (a deterministic sample)
_CACHE: dict[str, tuple[tuple, "Ivf"]] = {}


def _numpy():
    from ..embedders import _numpy as np

    return np()


def path_for(dir_: Path, gen: int) -> Path:
    """Where the lists of matrix generation ``gen`` live."""
    return dir_ / f"ivf-{gen}.bin"


def default_nprobe(nlist: int, calibrated: int = 0) -> int:
    """Lists probed when the setting is 0 (automatic): the count ``calibrate`` chose when the
    lists were laid out, else (a file without one) ``PROBE_FRACTION`` of them, at least 16."""
    if calibrated > 0:
        return min(nlist, calibrated)
    return min(nlist, max(16, math.ceil(nlist * PROBE_FRACTION)))


class Ivf:
    """Loaded lists: ``centroids`` (nlist × dim) and ``offsets`` (segments × (nlist + 1),
    absolute rows) over the first ``rows`` rows of the matrix; ``trained``: how many rows
    k-means was trained on; ``nprobe``: the calibrated count of lists to probe (0: none)."""

    def __init__(self, rows: int, trained: int, centroids, offsets, nprobe: int = 0) -> None:
        np = _numpy()
        self.rows, self.trained = rows, trained
        self.nprobe = nprobe  # calibrated lists to probe (0: none stored, default_nprobe decides)
        self.centroids = centroids
        self.offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, len(centroids) + 1)
        self.nlist = len(centroids)
        self.segments = len(self.offsets)

    def labels(self):
        """The list of each of the first ``rows`` rows."""
        np = _numpy()
        ids = np.arange(self.nlist, dtype=np.int64)
        return np.concatenate([np.repeat(ids, np.diff(o)) for o in self.offsets])

    def list_sizes(self):
        """Rows per list, all segments together."""
        return (self.offsets[:, 1:] - self.offsets[:, :-1]).sum(axis=0)

    def ranges(self, q, nprobe: int, total: int):
        """(starts, stops): the row ranges to score for unit vector ``q`` — the ``nprobe``
        lists whose centroids score best (ties by list number) in every segment, and the
        tail ``[rows, total)`` — ascending, adjacent ranges merged."""
        np = _numpy()
        cs = self.centroids @ q
        best = np.sort(np.lexsort((np.arange(self.nlist), -cs))[: max(1, nprobe)])
        starts = self.offsets[:, best].ravel()
        stops = self.offsets[:, best + 1].ravel()
        if total > self.rows:
            starts = np.append(starts, self.rows)
            stops = np.append(stops, total)
        keep = stops > starts
        starts, stops = starts[keep], stops[keep]
        order = np.argsort(starts, kind="stable")
        starts, stops = starts[order], stops[order]
        if len(starts) == 0:
            return starts, stops
        first = np.ones(len(starts), dtype=bool)
        first[1:] = starts[1:] != stops[:-1]
        idx = np.flatnonzero(first)
        return starts[idx], stops[np.append(idx[1:] - 1, len(stops) - 1)]

    def score(self, matrix, q, nprobe: int):
        """(rows, exact scores) of the rows ``ranges`` picks for ``q``, rows ascending."""
        np = _numpy()
        starts, stops = self.ranges(q, nprobe, matrix.shape[0])
        out = np.empty(int((stops - starts).sum()), dtype=np.float32)
        dot_rows(matrix, q, starts.tolist(), stops.tolist(), out)
        return Candidates(starts, stops), out


def dot_rows(matrix, q, starts, stops, out) -> None:
    """``out`` = the scores against ``q`` of the rows ``[starts[i], stops[i])`` in turn, in
    products of at most ``SLICE_VALUES`` values: OpenBLAS runs those on one thread, where a
    bigger one waits for a second thread (measured: on a loaded machine a 3,000-row product
    took 28 ms threaded, 0.25 ms on one thread; docs/performance.md)."""
    np = _numpy()
    base = np.asarray(matrix)  # a plain view: slicing a memmap object costs more
    step = max(1, SLICE_VALUES // max(1, base.shape[1]))
    pos = 0
    for a, b in zip(starts, stops):
        for i in range(a, b, step):
            j = min(b, i + step)
            np.matmul(base[i:j], q, out=out[pos : pos + j - i])
            pos += j - i


class Candidates:
    """The rows of merged ranges (``starts``/``stops``), by position in their concatenation."""

    def __init__(self, starts, stops) -> None:
        np = _numpy()
        self.starts = starts
        self.cum = np.concatenate([[0], np.cumsum(stops - starts)])

    def __len__(self) -> int:
        return int(self.cum[-1])

    def rows(self, positions):
        """Matrix rows of ``positions`` (an int array)."""
        np = _numpy()
        g = np.searchsorted(self.cum, positions, side="right") - 1
        return self.starts[g] + (positions - self.cum[g])


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
        rows, nlist, trained, segs = int(h["rows"]), int(h["nlist"]), int(h["trained"]), int(h["segments"])
        if int(h["dim"]) != dim or nlist < 1 or rows < 0 or segs < 1:
            return None
        payload = memoryview(data)[start:]
        if len(payload) != nlist * dim * 4 + segs * (nlist + 1) * 8:
            return None
        if blake3(payload).hexdigest() != h["blake3"]:
            return None
        cent = np.frombuffer(payload, dtype="<f4", count=nlist * dim).reshape(nlist, dim)
        offs = np.frombuffer(payload, dtype="<i8", count=segs * (nlist + 1), offset=nlist * dim * 4)
        offs = offs.reshape(segs, nlist + 1)
        flat = offs.ravel()  # segments follow each other: one ascending sequence from 0 to rows
        if flat[0] != 0 or flat[-1] != rows or (np.diff(flat) < 0).any():
            return None
        if (offs[1:, 0] != offs[:-1, -1]).any():
            return None
        nprobe = int(h.get("nprobe", 0))  # absent from a file written before calibration
        return Ivf(rows, trained, cent, offs, max(0, nprobe))
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None


def write(path: Path, ivf: Ivf) -> None:
    """Write ``ivf`` to ``path`` atomically (a reader sees the old file or the new one)."""
    np = _numpy()
    payload = (np.ascontiguousarray(ivf.centroids, dtype="<f4").tobytes()
               + np.ascontiguousarray(ivf.offsets, dtype="<i8").tobytes())
    head = json.dumps({"rows": ivf.rows, "trained": ivf.trained, "nlist": ivf.nlist, "segments": ivf.segments,
                       "nprobe": ivf.nprobe, "dim": int(ivf.centroids.shape[1]), "blake3": blake3(payload).hexdigest()}).encode()
    fsio.replace_file(path, MAGIC + struct.pack("<I", len(head)) + head + payload, fsync=False)


def assign(matrix, centroids, start: int, stop: int, *, scores: bool = False):
    """The nearest centroid of each row in ``[start, stop)`` (ties: the lower list number),
    and with ``scores`` also each row's score against it."""
    np = _numpy()
    out = np.empty(stop - start, dtype=np.int64)
    best = np.empty(stop - start, dtype=np.float32)
    ct = np.ascontiguousarray(centroids.T)
    for i in range(start, stop, 16384):
        j = min(stop, i + 16384)
        s = np.asarray(matrix[i:j]) @ ct
        out[i - start : j - start] = a = np.argmax(s, axis=1)
        best[i - start : j - start] = s[np.arange(len(a)), a]
    return (out, best) if scores else out


def layout(labels, nlist: int, start: int = 0):
    """(rows in their new order: by list, then row; offsets of one segment starting at row
    ``start``) for the rows ``start, start + 1, …`` labelled ``labels``."""
    np = _numpy()
    order = np.argsort(labels, kind="stable") + start
    offsets = np.full(nlist + 1, start, dtype=np.int64)
    offsets[1:] += np.cumsum(np.bincount(labels, minlength=nlist))
    return order, offsets


def _kmeans(sample, k: int, rng, iterations: int = ITERATIONS):
    """Spherical k-means: ``k`` unit centroids for the rows of ``sample``."""
    np = _numpy()
    k = min(k, len(sample))
    cent = sample[rng.choice(len(sample), k, replace=False)].copy()
    for _ in range(iterations):
        a = np.argmax(sample @ cent.T, axis=1)
        sums = np.zeros_like(cent)
        np.add.at(sums, a, sample)
        empty = np.bincount(a, minlength=k) == 0
        if empty.any():  # an empty list restarts at a sample vector
            sums[empty] = sample[rng.choice(len(sample), int(empty.sum()))]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        cent = (sums / np.where(norms == 0, 1, norms)).astype(np.float32)
    return cent


def split_full(sample, cent, rng, balance: float = BALANCE):
    """``cent`` with every list holding more than ``balance`` × the mean share of
    ``sample`` (over the lists of ``cent`` as given) replaced by k-means centroids of its own
    vectors (as many as it holds mean shares). A list whose vectors cannot be told apart
    (identical) stays whole."""
    np = _numpy()
    mean = len(sample) / len(cent)
    for _ in range(3):
        a = np.argmax(sample @ cent.T, axis=1)
        sizes = np.bincount(a, minlength=len(cent))
        full = np.flatnonzero(sizes > balance * mean)
        if len(full) == 0:
            break
        keep = np.ones(len(cent), dtype=bool)
        new = []
        for i in full.tolist():
            members = sample[a == i]
            sub = _kmeans(members, math.ceil(len(members) / mean), rng)
            sub = np.unique(sub, axis=0)
            if len(sub) > 1:
                keep[i] = False
                new.append(sub)
        if not new:
            break
        cent = np.concatenate([cent[keep], *new]).astype(np.float32)
    return cent


def train(matrix, nlist: int | None = None):
    """Balanced spherical k-means centroids (unit rows) for ``matrix``: deterministic (fixed
    seed and sample), about √N lists before over-full ones are split."""
    np = _numpy()
    n = matrix.shape[0]
    nlist = nlist or max(1, min(n, round(math.sqrt(n))))
    rng = np.random.default_rng(0)
    take = min(n, max(nlist, min(SAMPLE_MAX, nlist * SAMPLE_PER_LIST)))
    idx = np.sort(rng.choice(n, take, replace=False)) if take < n else np.arange(n)
    sample = np.asarray(matrix[idx], dtype=np.float32)
    cent = _kmeans(sample, nlist, rng)
    return split_full(sample, cent, rng)


def remap(ivf: Ivf, keep) -> Ivf:
    """``ivf`` after compaction, which keeps the row order: ``keep[r]`` says whether row r
    (< ``ivf.rows``) survived; the offsets are recounted per segment, the centroids stay."""
    np = _numpy()
    seg = np.repeat(np.arange(ivf.segments, dtype=np.int64), ivf.offsets[:, -1] - ivf.offsets[:, 0])
    slot = (seg * ivf.nlist + ivf.labels())[keep[: ivf.rows]]
    flat = np.concatenate([[0], np.cumsum(np.bincount(slot, minlength=ivf.segments * ivf.nlist))])
    offsets = np.stack([flat[s * ivf.nlist : (s + 1) * ivf.nlist + 1] for s in range(ivf.segments)])
    return Ivf(int(flat[-1]), ivf.trained, ivf.centroids, offsets, ivf.nprobe)


def plan(cur: Ivf | None, matrix, *, force: bool = False):
    """What to do for ``matrix`` given the current lists ``cur``: None (fresh) or (what,
    centroids, trained, segments kept, start, labels of the rows ``[start, N)``, calibrated
    nprobe): the segments before ``start`` stay as they are, the rows from ``start`` on are
    laid out as one new segment; the lists to probe are calibrated on every row's list."""
    np = _numpy()
    n = matrix.shape[0]
    if cur is not None and not force and n <= 2 * cur.trained:
        if n - cur.rows <= TAIL_FRACTION * max(1, cur.rows):
            return None
        keep = cur.segments if cur.segments < MAX_SEGMENTS else min(1, MAX_SEGMENTS - 1)
        start = int(cur.offsets[keep - 1, -1]) if keep else 0
        every = np.concatenate([cur.labels(), assign(matrix, cur.centroids, cur.rows, n)])
        nprobe = calibrate(matrix, cur.centroids, every)
        return "extended", cur.centroids, cur.trained, cur.offsets[:keep], start, every[start:], nprobe
    cent, labels = build(matrix)
    nprobe = calibrate(matrix, cent, labels)
    return "built", cent, n, np.zeros((0, len(cent) + 1), dtype=np.int64), 0, labels, nprobe


def calibrate(matrix, centroids, labels, *, target: float = RECALL_TARGET, k: int = 10,
              queries: int = CALIBRATION_QUERIES) -> int:
    """The fewest lists to probe for recall@``k`` ≥ ``target`` against exact search, measured
    on a deterministic sample of the stored vectors used as queries (each left out of its own
    answers); ``labels``: the list of every row of ``matrix``. A neighbour is found exactly
    when its list is among the probed ones (the probed rows are scored exactly), so one exact
    top-``k`` per query and the rank of each neighbour's list give the recall at every count."""
    np = _numpy()
    n, nlist = matrix.shape[0], len(centroids)
    if n <= k + 1 or nlist <= 1:
        return nlist
    rng = np.random.default_rng(2)
    idx = np.sort(rng.choice(n, min(queries, n), replace=False))
    qs = np.asarray(matrix[idx], dtype=np.float32)
    s = len(idx)
    top_s = np.full((s, k), -np.inf, dtype=np.float32)
    top_r = np.zeros((s, k), dtype=np.int64)
    qt = np.ascontiguousarray(qs.T)
    step = 8192
    for i in range(0, n, step):
        j = min(n, i + step)
        sc = (np.asarray(matrix[i:j]) @ qt).T  # (queries, rows)
        mine = (idx >= i) & (idx < j)
        sc[np.flatnonzero(mine), idx[mine] - i] = -np.inf  # a query is not its own neighbour
        both_s = np.concatenate([top_s, sc], axis=1)
        both_r = np.concatenate([top_r, np.broadcast_to(np.arange(i, j), sc.shape)], axis=1)
        pick = np.argpartition(-both_s, k - 1, axis=1)[:, :k]
        top_s = np.take_along_axis(both_s, pick, axis=1)
        top_r = np.take_along_axis(both_r, pick, axis=1)
    order = np.argsort(-(qs @ centroids.T), axis=1, kind="stable")  # ties: the lower list number
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(nlist), (s, nlist)), axis=1)
    need = np.sort(np.take_along_axis(rank, labels[top_r], axis=1).ravel())  # probed count - 1 to find each
    return int(need[max(0, math.ceil(target * len(need)) - 1)]) + 1


def build(matrix, balance: float = BALANCE):
    """(centroids, the list of every row) for ``matrix``: ``train``, then every row to its
    nearest centroid; lists still holding more than ``balance`` × the mean share of the
    √N lists (the sample misjudged them) are split on their own rows (twice at most), and
    the rows assigned again: those of a split list over every centroid, the others only
    against the new centroids (one pass over the matrix with few centroids)."""
    np = _numpy()
    n = matrix.shape[0]
    rng = np.random.default_rng(1)
    cent = train(matrix)
    mean = n / max(1, min(n, round(math.sqrt(n))))
    labels, best = assign(matrix, cent, 0, n, scores=True)
    for _ in range(2):
        sizes = np.bincount(labels, minlength=len(cent))
        keep = np.ones(len(cent), dtype=bool)
        new = []
        for i in np.flatnonzero(sizes > balance * mean).tolist():
            k = math.ceil(sizes[i] / mean)
            members = np.flatnonzero(labels == i)
            if len(members) > k * SAMPLE_PER_LIST:
                members = np.sort(rng.choice(members, k * SAMPLE_PER_LIST, replace=False))
            sub = np.unique(_kmeans(np.asarray(matrix[members], dtype=np.float32), k, rng), axis=0)
            if len(sub) > 1:
                keep[i] = False
                new.append(sub)
        if not new:
            break
        # the kept centroids keep their order (before the new ones): a row whose list stays
        # only moves to a new centroid that beats its own; a row of a split list is assigned
        # again over every centroid
        renum = np.cumsum(keep) - 1
        added = np.concatenate(new).astype(np.float32)
        cent = np.concatenate([cent[keep], added]).astype(np.float32)
        moved = ~keep[labels]
        labels = renum[labels]
        nl, nb = assign(matrix, added, 0, n, scores=True)
        better = nb > best
        labels[better], best[better] = nl[better] + int(keep.sum()), nb[better]
        rows = np.flatnonzero(moved)
        for i in range(0, len(rows), 16384):
            part = rows[i : i + 16384]
            sc = np.asarray(matrix[part]) @ cent.T
            a = np.argmax(sc, axis=1)
            labels[part], best[part] = a, sc[np.arange(len(a)), a]
    return cent, labels
