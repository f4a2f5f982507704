"""Objects on disk: loose files ``objects/ab/cdef…`` and packs in ``objects/pack/``, behind
one interface. Every read re-hashes the bytes, so a flipped bit is an ObjectCorrupt error,
never wrong data.

Readers take no lock: gc may move an object from a loose file into a pack (or delete a pack
after repacking it) while a reader looks for it, so a miss re-reads the pack list and looks
once more before it is reported missing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from . import fsio
from .config import crash_point
from .errors import AmbiguousRevision, ObjectCorrupt, ObjectMissing, StorageFailed
from .ids import is_oid
from .pack import Pack, write_pack
from .pack_filter import PackFilter

if TYPE_CHECKING:
    from .objects import Object

# convgit.codec (and with it msgspec), imported when the first object is hashed or decoded:
# a command that opens a store and reads no object (status, threads) loads neither.
codec = None


def _codec():
    global codec
    from . import codec as module

    codec = module
    return module

# The one pack threshold (docs/format.md §6.1, §6.3): a batch of up to this many objects is
# written loose, each file made durable before the next; a larger one is written as one pack
# (write_many here; commit_many and import decide the same way before calling write_packed).
PACK_THRESHOLD = 16
_READ_SIZE = 256 * 1024
# A Bloom filter answers "in no pack" once a process has probed this many packs this often
# (each miss otherwise reads every pack's index: a batched import adds a pack per batch).
_FILTER_MIN_PACKS, _FILTER_AFTER_PROBES = 4, 2000


class ObjectStore:
    """The objects of one store: loose files and packs behind one interface. Writes are
    write-once and crash-safe (docs/format.md §6.1); reads verify the id."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self._root = str(path)
        self.pack_dir = path / "pack"
        self.fsync = fsync
        self._packs: dict[str, Pack] | None = None
        self._packs_sig: tuple | None = None
        self.bad_packs: dict[str, str] = {}  # pack index that cannot be loaded -> why
        self._filter: PackFilter | None = None  # see _filter_for
        self._filter_of: dict | None = None  # the pack list it was kept in step with
        self._probes = 0
        self._age: dict[str, int] = {}  # pack name -> rank, oldest first (packs_by_age)
        self._by_age: tuple[dict | None, list[Pack]] = (None, [])  # (the pack list it was made from, the order)
        self._hit: Pack | None = None  # the pack that held the last object looked up (tried first)

    def _file(self, oid: str) -> str:
        return f"{self._root}/{oid[:2]}/{oid[2:]}"

    # -- packs ------------------------------------------------------------------------------

    def packs(self, *, reload: bool = False) -> list[Pack]:
        """The packs present (re-read when the pack directory changed or on ``reload``)."""
        try:
            st = os.stat(self.pack_dir)
            sig = (st.st_mtime_ns, st.st_ino)
        except FileNotFoundError:
            sig = None
        if self._packs is None or reload or sig != self._packs_sig:
            old = self._packs or {}
            names = []
            if sig is not None:
                names = sorted(n for n in os.listdir(self.pack_dir) if n.endswith(".idx") and n.startswith("pack-"))
            new: dict[str, Pack] = {}
            bad: dict[str, str] = {}
            for n in names:
                if n in old:
                    new[n] = old.pop(n)
                    continue
                try:
                    new[n] = Pack(self.pack_dir / n)
                except FileNotFoundError:
                    continue  # removed by gc meanwhile
                except ObjectCorrupt as e:
                    bad[n] = e.message  # fsck reports it; gc refuses; reads say "corrupt"
            self.bad_packs = bad
            for p in old.values():
                p.close()
            self._packs, self._packs_sig = new, sig
        return list(self._packs.values())

    def packs_by_age(self) -> list[Pack]:
        """The packs oldest first: by file time for those present when this store first
        looked, then in the order this store saw the others appear (a pack's time is never
        read again, so freshening one does not move it). A chain's messages were written in
        that order, so the pack holding a chain's next message is the pack of the previous
        one or a later one (graph.first_missing walks them so). Any order is correct; this
        one makes a walk along a chain spread over many packs (a server writes one pack per
        batch) cost about one probe per id instead of one per id and pack."""
        packs = self.packs()
        made_from, order = self._by_age
        if made_from is self._packs:
            return order
        new = [p for p in packs if p.name not in self._age]
        if new:
            def mtime(p: Pack) -> int:
                try:
                    return os.stat(p.idx_path).st_mtime_ns
                except OSError:
                    return 0
            for rank, p in enumerate(sorted(new, key=lambda p: (mtime(p), p.name)), start=len(self._age)):
                self._age[p.name] = rank
        order = sorted(packs, key=lambda p: self._age[p.name])
        self._by_age = (self._packs, order)
        return order

    def _pack_with(self, oid: str, packs: list[Pack] | None = None) -> Pack | None:
        if packs is None:
            packs = self.packs()
        if len(packs) >= _FILTER_MIN_PACKS:
            f = self._filter_for(packs)
            if f is not None and not f.may_contain(oid):
                return None
        if not packs:
            return None
        raw = bytes.fromhex(oid)  # (once, not once per pack)
        for p in self._hinted(packs):
            if p.contains_raw(raw):
                self._hit = p
                return p
        return None

    def _hinted(self, packs: list[Pack]) -> Iterator[Pack]:
        """``packs`` with the one that answered the last lookup first (while it is still one
        of them): a walk along a chain (push, fetch, the index) reads pack after pack, so
        with a hundred packs a lookup costs about one probe, not fifty."""
        hit = self._hit
        if hit is None or len(packs) < 2 or (self._packs or {}).get(hit.idx_path.name) is not hit:
            yield from packs
            return
        yield hit
        for p in packs:
            if p is not hit:
                yield p

    def _filter_for(self, packs: list[Pack]) -> PackFilter | None:
        """The Bloom filter over ``packs`` (the current pack list), kept in step with it: new
        packs are added; a removed pack's ids stay in it (a "maybe" more, answered by the
        packs, never a wrong answer), until the ids of packs gone outnumber the live ones:
        then it is built again. (Rebuilt at every removal before: a serve committer merges
        its small packs every few batches, and at 100,000 conversations each rebuild read
        500,000 ids.) Built only once this store has probed them often (a bulk writer): a
        one-shot command never pays for it."""
        f = self._filter
        if f is None:
            self._probes += 1
            if self._probes < _FILTER_AFTER_PROBES:
                return None
        elif self._filter_of is self._packs:  # the pack list has not changed since
            return f
        names = {p.name for p in packs}
        if f is None or f.full(sum(p.count for p in packs if p.name not in f.packs)) or f.stale(sum(p.count for p in packs)):
            f = self._filter = PackFilter(packs)
        elif f.packs != names:
            f.packs &= names
            for p in packs:
                if p.name not in f.packs:
                    f.add(p)
        self._filter_of = self._packs
        return f

    def close(self) -> None:
        """Close every open pack."""
        for p in (self._packs or {}).values():
            p.close()
        self._packs = None

    # -- reading ----------------------------------------------------------------------------

    def contains(self, oid: str, *, packs: list[Pack] | None = None, fanout: set[str] | None = None) -> bool:
        """True when ``oid`` is stored, loose or packed. ``packs``: the pack list to look in
        (``packs()`` taken once by a caller that holds the store lock exclusively, so that
        no pack can come or go meanwhile: a walk need not stat the pack directory per id).
        ``fanout``: the fan-out directories there are (``fanout_dirs``, listed once by such a
        caller): an id in none of them is not loose, with no stat."""
        # packs() re-reads the pack list whenever the pack directory changed. (Writers, the
        # callers that act on a miss, hold the store lock, so gc cannot move objects meanwhile.)
        if fanout is None or oid[:2] in fanout:
            if os.path.exists(self._file(oid)):
                return True
        return self._pack_with(oid, packs) is not None

    def prober(self):
        """``contains`` for a caller that holds the store lock (shared or exclusive) for as long
        as it uses the result, and asks about many ids that are mostly stored (a fetch
        checking every thread's tip and turns): the pack list is taken once, and the packs are
        probed before the loose file (a hit costs no stat). Under the lock no gc moves an
        object from loose to packed meanwhile, so the order cannot miss one; a pack or loose
        object another writer adds after the snapshot may be missed, and a caller that then
        takes that object again stores it twice, which is harmless."""
        packs = self.packs()
        exists = os.path.exists

        def contains(oid: str) -> bool:
            return self._pack_with(oid, packs) is not None or exists(self._file(oid))
        return contains

    def fanout_dirs(self) -> set[str] | None:
        """The fan-out directories (``ab``) of loose objects there are now; None if the
        objects directory cannot be listed. (A loose object written after the listing is not
        seen through it: a caller taking it again stores it twice, which is harmless.)"""
        try:
            return {d for d in os.listdir(self._root) if len(d) == 2}
        except OSError:
            return None

    def stored_size(self, oid: str) -> int | None:
        """The size in bytes of a stored object (without reading it), or None if absent."""
        if not is_oid(oid):
            return None
        try:
            return os.stat(self._file(oid)).st_size
        except FileNotFoundError:
            pass
        for reload in (False, True):
            for p in self.packs(reload=reload):
                n = p.size(oid)
                if n is not None:
                    return n
        return None

    def is_loose(self, oid: str) -> bool:
        """True when ``oid`` is stored as a loose file."""
        return os.path.exists(self._file(oid))

    def read_bytes(self, oid: str) -> bytes:
        """The verified stored bytes of ``oid``."""
        if not is_oid(oid):
            raise ObjectMissing(f"not an object id: {oid!r}", oid=oid)
        data = self._read_loose(oid)
        if data is None:
            data = self._read_packed(oid, reload=False)
            if data is None:  # gc may have just packed or repacked it: look once more
                data = self._read_loose(oid)
                if data is None:
                    data = self._read_packed(oid, reload=True)
                    if data is None:
                        damaged = self.damaged_packs()
                        if damaged:  # it may be in a pack whose index cannot be trusted
                            raise ObjectCorrupt(
                                f"object {oid} is not readable: damaged pack index {', '.join(damaged)}", oid=oid)
                        raise ObjectMissing(f"object {oid} is missing", oid=oid)
                    return data
            else:
                return data  # packs verify what they return
        if (codec or _codec()).hash_bytes(data) != oid:
            packed = self._read_packed(oid, reload=False)  # a good packed copy wins
            if packed is not None:
                return packed
            raise ObjectCorrupt(f"object {oid} is corrupt: its bytes hash to another id", oid=oid)
        return data

    def damaged_packs(self) -> list[str]:
        """Pack indexes that do not load or fail their checksum (checked once per pack)."""
        packs = self.packs()
        return sorted(self.bad_packs) + [p.idx_path.name for p in packs if not p.idx_ok()]

    def _read_packed(self, oid: str, *, reload: bool, verify: bool = True) -> bytes | None:
        for p in self._hinted(self.packs(reload=reload)):
            try:
                data = p.read(oid, verify=verify)  # (one lookup: None when this pack lacks it)
            except (OSError, ValueError):
                return None  # the pack went away under us
            if data is not None:
                self._hit = p
                return data
        return None

    def read_unverified(self, oid: str) -> bytes | None:
        """The stored bytes of ``oid`` NOT checked against the id, or None if absent: for a
        caller that re-hashes them itself (merge: each object it takes is hashed once). When
        they do not hash to ``oid``, ``read_bytes`` is the fallback (a good packed copy wins)."""
        if not is_oid(oid):
            return None
        data = self._read_loose(oid)
        if data is None:
            data = self._read_packed(oid, reload=False, verify=False)
        if data is None:  # gc may have just packed or repacked it: look once more
            data = self._read_loose(oid)
            if data is None:
                data = self._read_packed(oid, reload=True, verify=False)
        return data

    def _read_loose(self, oid: str) -> bytes | None:
        # os.open/os.read rather than open(): half the cost per object (gc and fsck read
        # every loose object).
        try:
            fd = os.open(self._file(oid), os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageFailed(f"cannot read object {oid}: {e.strerror}", oid=oid) from e
        try:
            first = os.read(fd, _READ_SIZE)
            if len(first) < _READ_SIZE:
                return first
            rest = [first]
            while True:
                more = os.read(fd, _READ_SIZE)
                if not more:
                    return b"".join(rest)
                rest.append(more)
        except OSError as e:
            raise StorageFailed(f"cannot read object {oid}: {e.strerror}", oid=oid) from e
        finally:
            os.close(fd)

    def read(self, oid: str) -> Object:
        """The decoded object ``oid`` (verified against its id)."""
        return (codec or _codec()).decode(self.read_bytes(oid), oid)

    def iter_loose(self) -> Iterator[str]:
        """The id of every loose object, fan-out directory by directory."""
        try:
            fan = sorted(os.listdir(self.path))
        except FileNotFoundError:
            return
        for d in fan:
            if len(d) != 2:
                continue
            try:
                names = sorted(os.listdir(self.path / d))
            except (NotADirectoryError, FileNotFoundError):
                continue
            for n in names:
                oid = d + n
                if is_oid(oid):
                    yield oid

    def iter_oids(self) -> Iterator[str]:
        """Every stored id once (loose first, then packed)."""
        seen: set[str] = set()
        for oid in self.iter_loose():
            seen.add(oid)
            yield oid
        for p in self.packs(reload=True):
            for oid in p.ids():
                if oid not in seen:
                    seen.add(oid)
                    yield oid

    def find_prefix(self, prefix: str) -> list[str]:
        """Every stored id starting with ``prefix`` (at least 2 hex chars)."""
        found: set[str] = set()
        d = self.path / prefix[:2]
        try:
            names = os.listdir(d)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        rest = prefix[2:]
        found.update(prefix[:2] + n for n in names if n.startswith(rest) and is_oid(prefix[:2] + n))
        for p in self.packs(reload=True):
            found.update(p.find_prefix(prefix))
        return sorted(found)

    def resolve_prefix(self, prefix: str) -> str | None:
        """The one id starting with ``prefix``, None if none does (AmbiguousRevision if several)."""
        found = self.find_prefix(prefix)
        if len(found) > 1:
            raise AmbiguousRevision(
                f"short id {prefix} is ambiguous: {', '.join(f[:12] for f in found[:5])}",
                candidates=found[:20],
            )
        return found[0] if found else None

    def fragment(self, prefix: str) -> bytes | None:
        """The bytes of a text a pack stores once for its spliced chunks (docs/format.md §9),
        named by its fragment id (the id it would have as a blob: ``hash-object FILE``) or a
        unique prefix of it; None when no pack has it (AmbiguousRevision if several)."""
        prefix = prefix.lower()
        found: dict[str, Pack] = {}
        for p in self.packs(reload=True):
            if len(prefix) == 64:
                if p.fragments and p.fragment_location(prefix) is not None:
                    found.setdefault(prefix, p)
            else:
                for fid in p.fragment_ids():
                    if fid.startswith(prefix):
                        found.setdefault(fid, p)
        if len(found) > 1:
            raise AmbiguousRevision(f"short id {prefix} is ambiguous: {', '.join(f[:12] for f in sorted(found)[:5])}",
                                    candidates=sorted(found)[:20])
        for fid, p in found.items():
            return p.fragment(fid)
        return None

    # -- writing ----------------------------------------------------------------------------

    def write_raw(self, oid: str, data: bytes) -> bool:
        """Store already-encoded bytes (verified against ``oid``). True if newly written."""
        return self.write_many([(oid, data)]) == 1

    def write(self, obj: Object) -> tuple[str, bool]:
        """Store ``obj``; ``(id, True if it was new)``."""
        oid, data = (codec or _codec()).encode_and_hash(obj)
        return oid, self.write_raw(oid, data)

    def _freshen_packed(self, oid: str, packs: list[Pack] | None = None) -> bool:
        """An object already in a pack: refresh the pack's mtime (gc's grace) and say so.
        ``packs``: the pack list to look in (default: read again)."""
        p = self._pack_with(oid, packs)
        if p is None:
            return False
        fsio.freshen(p.pack_path)
        return True

    def write_many(self, items: Iterable[tuple[str, bytes]], *, missing: frozenset[str] | set[str] = frozenset(),
                   defer_entries: bool = False) -> int:
        """Write objects, durable before returning (with ``fsync``). Returns how many were new.

        Small batches are loose files, staged and made durable with two syncs in all
        (``_write_staged``, docs/format.md §6.1); larger ones are one pack. ``defer_entries``
        (a repository transaction, which moves a ref next): the second sync, of the loose
        files' new entries, is owed instead (``fsio.owe_sync``): the ref move's own syncfs
        pays it, and the transaction pays it when it ends without one. Without ``fsync``
        (throw-away stores, or a caller that flushes the file system itself): loose files,
        nothing synced.
        ``missing``: ids the caller has just seen absent (their existence probe is skipped).

        ``items`` come in dependency order (a message after its parent and blobs, a turn after
        its messages), and a power loss never leaves a stored object whose references are
        lost: stored messages stay closed under "parent of", which
        graph.longest_stored_prefix relies on.
        """
        items = list(items)
        hash_bytes = (codec or _codec()).hash_bytes
        for oid, data in items:
            if hash_bytes(data) != oid:
                raise ObjectCorrupt(f"refusing to store bytes under the wrong id {oid}", oid=oid)
        if self.fsync and len(items) > PACK_THRESHOLD:
            # Many objects: one pack, not loose files and a syncfs. A power loss before a
            # syncfs could keep any subset of the loose files' entries (a message without its
            # parent); a pack's objects become visible together, when its idx is renamed in.
            return len(self.write_packed(items, missing=missing))
        has_packs = bool(self.packs())
        if self.fsync:
            return self._write_staged(items, missing, has_packs, defer_entries=defer_entries)
        new = 0
        for oid, data in items:
            if oid not in missing and has_packs and not os.path.exists(self._file(oid)) and self._freshen_packed(oid):
                continue
            if fsio.write_object_file(self._file(oid), data, fsync=False, probe=oid not in missing):
                new += 1
        return new

    def _write_staged(self, items: list[tuple[str, bytes]], missing, has_packs: bool, *,
                      defer_entries: bool = False) -> int:
        """A few objects, durable with two syncs (docs/format.md §6.1): each new object's
        bytes go to a temp file ``objects/tmp_*`` (one directory for all of them); one
        syncfs makes the bytes durable; the temp files are renamed into their fan-out
        directories in dependency order; one more syncfs makes the entries durable (or,
        ``defer_entries``, is owed: the next syncfs of the file system pays it).

        Every rename leaves the same directory, whose entries a power loss keeps only as a
        prefix (and a rename between directories lands in both or neither): an object's
        entry never survives without those of the objects renamed before it, so stored
        messages stay closed under "parent of" without a sync per object."""
        staged: list[tuple[str, str]] = []  # (temp, final)
        try:
            for i, (oid, data) in enumerate(items):
                f = self._file(oid)
                if oid not in missing:
                    try:
                        size = os.stat(f).st_size
                    except FileNotFoundError:
                        size = None
                    if size == len(data) and fsio.freshen(f):
                        continue
                    if size is None and has_packs and self._freshen_packed(oid):
                        continue
                tmp = f"{self._root}/{fsio.TMP_PREFIX}{os.getpid()}_{time.monotonic_ns()}_{i}"
                fsio.write_new_file(tmp, data, mode=0o444)
                staged.append((tmp, f))
            new = len(staged)
            if not new:
                return 0
            crash_point("object_after_write")
            fsio.sync_filesystem(self._root)  # the objects' bytes
            crash_point("object_after_fsync")
            while staged:
                tmp, f = staged[0]
                d = os.path.dirname(f)
                if not os.path.isdir(d):
                    fsio.makedirs(d)  # a new fan-out directory (made durable by the syncfs below)
                fsio.rename(tmp, f)
                staged.pop(0)
                crash_point("object_after_rename")
            if defer_entries:
                fsio.owe_sync(self._root)  # their entries: paid by the ref move's syncfs
            else:
                fsio.sync_filesystem(self._root)  # their entries
        except BaseException:
            for tmp, _ in staged:
                fsio.unlink_quiet(tmp)
            raise
        return new

    def write_packed(self, items: Iterable[tuple[str, bytes]], *, missing: frozenset[str] | set[str] = frozenset()) -> set[str]:
        """Write objects into one new pack (bulk import). Objects already stored are freshened
        instead. Durable on return. Returns the ids newly written."""
        data: dict[str, bytes] = {}
        # The fan-out directories there are now: an object in none of them is not loose (one
        # listing instead of a stat per object; one stored loose after it is stored twice, harmless).
        # Likewise the pack list, looked at once (not a stat of the pack directory per object).
        fanout = self.fanout_dirs()
        packs = self.packs()
        for oid, b in items:
            if oid in data:
                continue
            if oid not in missing and (((fanout is None or oid[:2] in fanout) and self._freshen_loose(oid, len(b)))
                                       or self._freshen_packed(oid, packs)):
                continue
            data[oid] = b
        if not data:
            return set()
        write_pack(self.pack_dir, list(data), data.__getitem__, fsync=self.fsync)
        self.packs(reload=True)
        return set(data)

    def _freshen_loose(self, oid: str, size: int) -> bool:
        """A loose copy of the right size exists: refresh its mtime (a wrong-sized one, such as
        the empty file a power loss can leave, does not count)."""
        try:
            if os.stat(self._file(oid)).st_size != size:
                return False
        except FileNotFoundError:
            return False
        return fsio.freshen(self._file(oid))
