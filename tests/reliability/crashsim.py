"""Simulated power loss (ALICE / CrashMonkey style) over convgit.fsio.

Every file-system mutation convgit makes is an ``os.*`` call made through ``convgit.fsio``'s
``os`` name (SQLite's writes to the derived index excepted). ``Recorder`` stands in for that
name: it performs each call and logs it against a model of the tree (inodes, directory
entries), and skips the real fsyncs (the run is a recording; durability is simulated).

``crash_states`` then rebuilds what a power loss could leave at each persistence point:

- file data not fsynced is lost: a file holds what it held at its last fsync (an empty file
  if it never was), or, in the "kept" variant, everything written (pages written back early);
- a directory entry (create, rename, unlink, mkdir, rmdir) is durable once its directory is
  fsynced; of the entries not yet durable, each directory keeps a prefix of its own operations
  (a suffix is lost), chosen independently per directory; a rename between directories happens
  in both or neither;
- ``syncfs`` makes everything durable.

States are enumerated per cut (just before each fsync, and at the end): every combination of
per-directory prefixes when there are at most ``cap`` of them, else ``cap`` of them (always
including "all kept" and "all lost") drawn with a seeded generator; times the two data
variants when they differ. The derived index (``index.sqlite*``) is outside the model: a
crash state has none, so opening it rebuilds one.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from convgit import fsio

SYNC_OPS = ("fsync", "fsyncdir", "syncfs")


def _excluded(name: str) -> bool:
    return name.startswith("index.sqlite") or name.startswith("tmp_index.sqlite")


class Recorder:
    """Stands in for ``fsio.os``; install with ``install(monkeypatch)``."""

    def __init__(self, root: str | Path) -> None:
        self.real = os
        self.root = os.path.abspath(root)
        self.ops: list[tuple] = []
        self.errors: list[str] = []
        self.kind: dict[int, str] = {}  # inode -> "f" | "d"
        self.data: dict[int, bytes] = {}  # inode -> current bytes (files)
        self.names: dict[int, dict[str, int]] = {}  # dir inode -> name -> inode
        self.fds: dict[int, list | None] = {}  # fd -> [inode, pos, append] | ["d", inode] | None (untracked)
        self._next = 0
        self.root_ino = self._new("d")
        self._scan(self.root, self.root_ino)
        self.base_names = {d: dict(m) for d, m in self.names.items()}
        self.base_data = dict(self.data)
        self.base_kind = dict(self.kind)

    # -- the model --------------------------------------------------------------------------

    def _new(self, kind: str) -> int:
        ino = self._next
        self._next += 1
        self.kind[ino] = kind
        if kind == "d":
            self.names[ino] = {}
        else:
            self.data[ino] = b""
        return ino

    def _scan(self, path: str, ino: int) -> None:
        for n in sorted(os.listdir(path)):
            if _excluded(n):
                continue
            p = os.path.join(path, n)
            if os.path.isdir(p):
                c = self._new("d")
                self.names[ino][n] = c
                self._scan(p, c)
            else:
                c = self._new("f")
                self.names[ino][n] = c
                with open(p, "rb") as f:
                    self.data[c] = f.read()

    def _split(self, path) -> tuple[int, str] | None:
        """(parent dir inode, name) of a path under the root; None outside it or excluded.
        An unknown parent is an error: something changed the tree without going through fsio."""
        p = os.path.abspath(os.fspath(path))
        if p == self.root or not p.startswith(self.root + os.sep):
            return None
        parts = p[len(self.root) + 1:].split(os.sep)
        if _excluded(parts[-1]):
            return None
        d = self.root_ino
        for c in parts[:-1]:
            nxt = self.names.get(d, {}).get(c)
            if nxt is None or self.kind[nxt] != "d":
                self.errors.append(f"unknown directory {c!r} in {p}: changed outside fsio?")
                return None
            d = nxt
        return d, parts[-1]

    def _lookup(self, path) -> int | None:
        p = os.path.abspath(os.fspath(path))
        if p == self.root:
            return self.root_ino
        s = self._split(p)
        if s is None:
            return None
        return self.names[s[0]].get(s[1])

    def mark(self, label: str, info=None) -> None:
        """An application-level event in the log (an acknowledgement)."""
        self.ops.append(("ack", label, info))

    # -- os stand-ins -----------------------------------------------------------------------

    def __getattr__(self, name):
        if name.startswith("__") or name == "real":
            raise AttributeError(name)
        return getattr(os, name)

    def fork(self, new_root: str | Path) -> "Recorder":
        """A copy continuing this recording on a copy of the tree at ``new_root``."""
        new = object.__new__(Recorder)
        new.__dict__.update(self.__dict__)
        new.root = os.path.abspath(new_root)
        new.ops = list(self.ops)
        new.names = {d: dict(m) for d, m in self.names.items()}
        new.kind, new.data = dict(self.kind), dict(self.data)
        new.fds, new.errors = {}, []
        return new

    def open(self, path, flags, mode=0o777, *, dir_fd=None):
        existed = os.path.lexists(path)
        fd = self.real.open(path, flags, mode)
        s = self._split(path) if os.path.abspath(os.fspath(path)) != self.root else None
        if os.path.abspath(os.fspath(path)) == self.root:
            self.fds[fd] = ["d", self.root_ino]
            return fd
        if s is None:
            self.fds[fd] = None
            return fd
        d, n = s
        ino = self.names[d].get(n)
        if ino is None:
            if existed:
                self.errors.append(f"open of {path}: exists on disk but not in the model (written outside fsio?)")
                self.fds[fd] = None
                return fd
            ino = self._new("f")
            self.names[d][n] = ino
            self.ops.append(("link", d, n, ino))
        if self.kind[ino] == "d":
            self.fds[fd] = ["d", ino]
            return fd
        if flags & os.O_TRUNC and self.data[ino]:
            self.data[ino] = b""
            self.ops.append(("data", ino, b""))
        self.fds[fd] = [ino, 0, bool(flags & os.O_APPEND)]
        return fd

    def write(self, fd, data):
        n = self.real.write(fd, data)
        st = self.fds.get(fd)
        if st and st[0] != "d":
            ino, pos, append = st
            cur = self.data[ino]
            chunk = bytes(data[:n])
            if append:
                pos = len(cur)
            new = cur[:pos] + chunk + cur[pos + len(chunk):]
            st[1] = pos + len(chunk)
            self.data[ino] = new
            self.ops.append(("data", ino, new))
        return n

    def ftruncate(self, fd, size):
        self.real.ftruncate(fd, size)
        st = self.fds.get(fd)
        if st and st[0] != "d":
            ino = st[0]
            cur = self.data[ino]
            new = cur[:size] + b"\0" * max(0, size - len(cur))
            self.data[ino] = new
            self.ops.append(("data", ino, new))

    def fsync(self, fd):
        st = self.fds.get(fd)
        if st is None:
            return  # outside the model (a merge source, an untracked file): nothing to simulate
        if st[0] == "d":
            self.ops.append(("fsyncdir", st[1]))
        else:
            self.ops.append(("fsync", st[0]))

    def close(self, fd):
        self.fds.pop(fd, None)
        self.real.close(fd)

    def rename(self, src, dst):
        self.real.rename(src, dst)
        s, t = self._split(src), self._split(dst)
        if s is None and t is None:
            return
        if s is None or t is None:
            self.errors.append(f"rename {src} -> {dst} crosses the model's edge")
            return
        ino = self.names[s[0]].pop(s[1], None)
        if ino is None:
            self.errors.append(f"rename of {src}: not in the model (written outside fsio?)")
            return
        self.names[t[0]][t[1]] = ino
        self.ops.append(("rename", s[0], s[1], t[0], t[1], ino))

    def unlink(self, path, *, dir_fd=None):
        self.real.unlink(path)
        s = self._split(path)
        if s is None:
            return
        ino = self.names[s[0]].pop(s[1], None)
        if ino is None:
            self.errors.append(f"unlink of {path}: not in the model (written outside fsio?)")
            return
        self.ops.append(("unlink", s[0], s[1], ino))

    remove = unlink

    def mkdir(self, path, mode=0o777, *, dir_fd=None):
        self.real.mkdir(path, mode)
        s = self._split(path)
        if s is None:
            return
        ino = self._new("d")
        self.names[s[0]][s[1]] = ino
        self.ops.append(("mkdir", s[0], s[1], ino))

    def rmdir(self, path, *, dir_fd=None):
        self.real.rmdir(path)
        s = self._split(path)
        if s is None:
            return
        ino = self.names[s[0]].pop(s[1], None)
        if ino is None:
            self.errors.append(f"rmdir of {path}: not in the model (made outside fsio?)")
            return
        self.ops.append(("rmdir", s[0], s[1], ino))

    def utime(self, path, *a, **k):
        return self.real.utime(path, *a, **k)  # mtimes are not modelled

    # -- installing ---------------------------------------------------------------------------

    def install(self, mp) -> None:
        mp.setattr(fsio, "os", self)
        mp.setattr(fsio, "_syncfs", self._syncfs)  # (sync_filesystem keeps its bookkeeping of owed syncs)

    def _syncfs(self, path) -> None:
        self.ops.append(("syncfs",))

    # -- checking the model against the disk ----------------------------------------------

    def model_tree(self, *, current: bool = True) -> dict[str, bytes | None]:
        return _materialize(self.root_ino, self.names, self.kind, self.data)

    def audit(self) -> list[str]:
        """Differences between the model and the real tree: a mutation that bypassed fsio."""
        real = disk_tree(self.root)
        model = self.model_tree()
        out = list(self.errors)
        for p in sorted(set(real) | set(model)):
            if real.get(p, "<absent>") != model.get(p, "<absent>"):
                out.append(f"{p}: on disk {_short(real.get(p, '<absent>'))}, in the model {_short(model.get(p, '<absent>'))}")
        return out


def _short(v) -> str:
    if v is None:
        return "a directory"
    if isinstance(v, str):
        return v
    return f"{len(v)} bytes"


def disk_tree(root: str | Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    root = str(root)
    for dp, dns, fns in os.walk(root):
        for n in dns:
            if not _excluded(n):
                out[os.path.relpath(os.path.join(dp, n), root)] = None
        for n in fns:
            if _excluded(n):
                continue
            with open(os.path.join(dp, n), "rb") as f:
                out[os.path.relpath(os.path.join(dp, n), root)] = f.read()
    return out


def _materialize(root_ino, names, kind, data) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    stack = [(root_ino, "")]
    seen = set()
    while stack:
        d, prefix = stack.pop()
        if d in seen:  # (a directory cannot be reached twice; guard against a bad model)
            continue
        seen.add(d)
        for n, ino in names.get(d, {}).items():
            p = f"{prefix}{n}"
            if kind[ino] == "d":
                out[p] = None
                stack.append((ino, p + "/"))
            else:
                out[p] = data.get(ino, b"")
    return out


# -- crash states ---------------------------------------------------------------------------


@dataclass
class CrashState:
    cut: int  # ops[:cut] happened
    acked: int  # acknowledgements in ops[:cut]
    keep_data: bool
    kept_dirs: tuple  # per directory with pending entries: how many of them were kept
    tree: dict = field(repr=False)

    def key(self) -> str:
        """Identity for deduplication: empty kernel-lock files and the informational gc.log
        (timestamps) do not make two states different."""
        h = hashlib.blake2b(digest_size=16)
        for p in sorted(self.tree):
            if _irrelevant(p):
                continue
            v = self.tree[p]
            h.update(p.encode() + b"\0" + (b"D" if v is None else b"F" + _digest(v)))
        return h.hexdigest()


_DIGESTS: dict[int, tuple[bytes, bytes]] = {}


def _digest(v: bytes) -> bytes:
    hit = _DIGESTS.get(id(v))
    if hit is not None and hit[0] is v:
        return hit[1]
    d = hashlib.blake2b(v, digest_size=16).digest()
    if len(_DIGESTS) > 200_000:
        _DIGESTS.clear()
    _DIGESTS[id(v)] = (v, d)
    return d


def _irrelevant(p: str) -> bool:
    name = p.rsplit("/", 1)[-1]
    return name.endswith(".lock") or name == "lock" or p == "gc.log"


def _lock_op(op) -> bool:
    """Creating or removing an empty kernel-lock file: no crash state depends on it."""
    return op[0] in ("link", "unlink") and (op[2].endswith(".lock") or op[2] == "lock")


def _entry_dirs(op) -> tuple:
    if op[0] in ("link", "unlink", "mkdir", "rmdir"):
        return (op[1],)
    if op[0] == "rename":
        return (op[1],) if op[1] == op[3] else (op[1], op[3])
    return ()


def cut_points(ops) -> list[int]:
    """Just before each persistence point, and the end."""
    return [i for i, op in enumerate(ops) if op[0] in SYNC_OPS] + [len(ops)]


def crash_states(rec: Recorder, *, cap: int = 64, seed: int = 0):
    """Every crash state (see the module docstring), in cut order. Yields CrashState."""
    ops = rec.ops
    for cut in cut_points(ops):
        durable_entries: set[int] = set()
        pending: dict[int, list[int]] = {}
        synced = dict(rec.base_data)  # inode -> data at its last fsync
        current = dict(rec.base_data)
        acked = 0
        for i in range(cut):
            op = ops[i]
            k = op[0]
            if k == "ack":
                acked += 1
            elif k == "data":
                current[op[1]] = op[2]
            elif k == "fsync":
                synced[op[1]] = current.get(op[1], b"")
            elif k == "fsyncdir":
                for j in pending.pop(op[1], []):
                    durable_entries.add(j)
                    for d in _entry_dirs(ops[j]):  # a cross-directory rename: durable in both
                        if d in pending and j in pending[d]:
                            pending[d].remove(j)
            elif k == "syncfs":
                for lst in pending.values():
                    durable_entries.update(lst)
                pending.clear()
                synced.update(current)
            elif not _lock_op(op):
                for d in _entry_dirs(op):
                    pending.setdefault(d, []).append(i)
        pending = {d: lst for d, lst in pending.items() if lst}
        dirs = sorted(pending)
        data_variants = [True] if all(synced.get(ino, b"") == v for ino, v in current.items()) else [True, False]
        rnd = random.Random(hash((seed, cut)) & 0xFFFFFFFF)
        for choice in _choices([len(pending[d]) for d in dirs], cap, rnd):
            kept = _consistent(ops, dirs, pending, choice)
            keep = set(durable_entries)
            for d, n in zip(dirs, kept):
                keep.update(pending[d][:n])
            names = {d: dict(m) for d, m in rec.base_names.items()}
            kind = rec.kind  # (an inode never changes kind)
            for j in sorted(keep):
                _apply(ops[j], names, kind)
            for keep_data in data_variants:
                data = current if keep_data else synced
                tree = _materialize(rec.root_ino, names, kind, data)
                yield CrashState(cut, acked, keep_data, tuple(kept), tree)


def _choices(lengths: list[int], cap: int, rnd: random.Random):
    total = 1
    for n in lengths:
        total *= n + 1
    if total <= cap:
        yield from itertools.product(*[range(n + 1) for n in lengths])
        return
    seen = set()
    for c in (tuple(lengths), tuple(0 for _ in lengths)):
        seen.add(c)
        yield c
    for i in range(len(lengths)):  # each directory alone losing everything pending
        c = tuple(0 if j == i else n for j, n in enumerate(lengths))
        if c not in seen and len(seen) < cap:
            seen.add(c)
            yield c
    while len(seen) < cap:
        c = tuple(rnd.randint(0, n) for n in lengths)
        if c not in seen:
            seen.add(c)
            yield c


def _consistent(ops, dirs, pending, choice) -> list[int]:
    """Shrink per-directory prefixes until each cross-directory rename is kept in both of its
    directories or in neither."""
    kept = dict(zip(dirs, choice))
    changed = True
    while changed:
        changed = False
        for d in dirs:
            for idx in range(kept[d]):
                j = pending[d][idx]
                for other in _entry_dirs(ops[j]):
                    if other != d and other in pending and j in pending[other]:
                        if pending[other].index(j) >= kept[other]:
                            kept[d] = idx
                            changed = True
                            break
                if changed:
                    break
    return [kept[d] for d in dirs]


def _apply(op, names, kind) -> None:
    k = op[0]
    if k == "link" or k == "mkdir":
        _, d, n, ino = op
        names.setdefault(d, {})[n] = ino
        if k == "mkdir":
            names.setdefault(ino, {})
    elif k == "rename":
        _, sd, sn, td, tn, ino = op
        if names.get(sd, {}).get(sn) == ino:
            del names[sd][sn]
        names.setdefault(td, {})[tn] = ino
    elif k in ("unlink", "rmdir"):
        _, d, n, ino = op
        if names.get(d, {}).get(n) == ino:
            del names[d][n]


class TreeWriter:
    """Lays crash states out in one directory, writing only what differs from the last one.
    Call ``dirty()`` after anything else wrote there (a recovery)."""

    def __init__(self, dest: str | Path) -> None:
        self.dest = str(dest)
        self.on_disk: dict | None = None

    def dirty(self) -> None:
        self.on_disk = None

    def write(self, tree: dict) -> None:
        tree = {p: v for p, v in tree.items() if not _irrelevant(p) or p == "gc.log"}
        old = self.on_disk
        if old is None:
            if os.path.exists(self.dest):
                shutil.rmtree(self.dest)
            os.makedirs(self.dest)
            old = {}
        else:  # remove what went: files, then directories deepest first
            for p in sorted((p for p in old if p not in tree or (old[p] is None) != (tree[p] is None)),
                            key=lambda p: -p.count("/")):
                full = os.path.join(self.dest, p)
                if old[p] is None:
                    shutil.rmtree(full, ignore_errors=True)
                elif os.path.lexists(full):
                    os.unlink(full)
            old = {p: v for p, v in old.items() if p in tree and (v is None) == (tree[p] is None)}
        for p in sorted((p for p, v in tree.items() if v is None and p not in old), key=lambda p: p.count("/")):
            os.makedirs(os.path.join(self.dest, p), exist_ok=True)
        for p, v in tree.items():
            if v is not None and old.get(p) != v:
                with open(os.path.join(self.dest, p), "wb") as f:
                    f.write(v)
        self.on_disk = tree


def write_tree(tree: dict, dest: str | Path) -> None:
    """Lay one crash state out on disk."""
    TreeWriter(dest).write(tree)


# -- fsync failure injection ----------------------------------------------------------------


class FailingFsync:
    """Stands in for ``fsio.os``: the ``fail_at``-th fsync (files and directories alike;
    ``syncfs`` counts too) raises EIO; the others succeed without touching the disk.
    ``fail_at=0`` only counts."""

    def __init__(self, fail_at: int = 0) -> None:
        self.fail_at = fail_at
        self.count = 0
        self.failed_on: str | None = None
        self.paths: dict[int, str] = {}

    def __getattr__(self, name):
        return getattr(os, name)

    def open(self, path, flags, mode=0o777, *, dir_fd=None):
        fd = os.open(path, flags, mode)
        self.paths[fd] = os.fspath(path)
        return fd

    def fsync(self, fd):
        self._tick(self.paths.get(fd, "?"))

    def _tick(self, what: str) -> None:
        self.count += 1
        if self.count == self.fail_at:
            self.failed_on = what
            raise OSError(errno.EIO, "Input/output error (injected)")

    def _syncfs(self, path) -> None:
        from convgit.errors import StorageFailed

        try:
            self._tick(f"syncfs {path}")
        except OSError as e:
            raise StorageFailed(f"syncfs {path}: {e.strerror}", errno=e.errno) from e

    def install(self, mp) -> None:
        mp.setattr(fsio, "os", self)
        mp.setattr(fsio, "_syncfs", self._syncfs)  # (sync_filesystem keeps its bookkeeping of owed syncs)
