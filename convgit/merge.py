"""``merge SRC``: take another store's (or a bundle's) threads and objects, nothing lost.

Order (restic's, then git's fetch --atomic): read the source's refs first, then walk the
objects they reach, re-hashing and decoding every one that is new here (one bad object and
nothing is taken) and staging it, as it is read (each object is read once), in a pack in a
quarantine directory; once the walk has passed, move the pack in,
then update every ref from a journal, all or nothing. A crash after the journal is written
is rolled forward by the next writer; before it, nothing is visible.

Refs: new → created; same tip → nothing; local tip an ancestor of the incoming one →
fast-forward; incoming an ancestor of local → kept; diverged → both kept, the incoming one
as ``<name>-merged-<first 10 hex of its tip>`` (predictable: merging again changes nothing).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import codec, fsio
from .bundle import BundleSource
from .config import crash_point
from .errors import ConvgitError, InvalidInput, NotAStore, ObjectCorrupt, ObjectMissing, SourceCorrupt, UnsafeSymlink
from .graph import deleted_provenance, typed_references
from .ids import check_thread_name, is_oid
from .merge_journal import JOURNAL, recover, write_journal
from .objects import Message
from .pack import PackWriter
from .refformat import applied_entries
from .refs import ANY, NOT_APPLIED, RefMove, format_reflog_line, read_log_file
from .repository import STORE_DIRS

SOURCE_FILES = ("format", "config.toml", "HEAD", JOURNAL)  # read from a source store at open
# Bytes of new objects whose decoded form the walk keeps for the index (about twice that in
# memory); a bigger merge's index reads the rest back from the new pack.
INDEX_CACHE_BYTES = 1 << 30


@dataclass
class MergeReport:
    """What a merge took: new objects and bytes, carried provenance, and one entry per ref
    (created, fast-forwarded, kept, diverged)."""

    source: str
    dry_run: bool = False
    new_objects: int = 0
    new_bytes: int = 0
    provenance_turns: int = 0  # turns of the source's deleted threads that its messages still need
    archived: int = 0  # reflog entries of deleted threads written here (they name those turns)
    refs: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The ``merge --json`` document."""
        out = {"status": "dry-run" if self.dry_run else "merged", "source": self.source, "new_objects": self.new_objects,
               "new_bytes": self.new_bytes, "provenance_turns": self.provenance_turns, "refs": self.refs, "seconds": self.seconds}
        if self.warnings:
            out["warnings"] = self.warnings
        return out


class StoreSource:
    """Another convgit store, read without writing to it."""

    def __init__(self, path: Path) -> None:
        from .repository import Repository

        p = path / ".convgit" if (path / ".convgit").is_dir() else path
        p = Path(os.path.abspath(p))
        self._real = os.path.realpath(p)
        self.path = p
        self._open: tuple[str, int] | None = None  # (id, fd) of the loose object size() opened
        # Nothing is read through a symlink that leads out of the source (a ref file linked to
        # a local secret, a symlinked refs/): checked before the first read.
        self._check_links(p, SOURCE_FILES + STORE_DIRS)
        try:
            self.repo = Repository.open(p)
        except UnsafeSymlink as e:
            raise SourceCorrupt(f"merge source: {e.message}") from e
        except NotAStore as e:
            raise InvalidInput(f"merge source {path}: {e.message}") from e
        self.path = self.repo.path
        self.label = self.path.parent.name or "store"
        for sub in ("refs", "logs", "objects"):
            for dirpath, dirnames, filenames in os.walk(self.path / sub):
                self._check_links(Path(dirpath), dirnames + filenames)
                if sub == "objects":  # loose objects are checked as they are read; packs here
                    dirnames[:] = [d for d in dirnames if Path(dirpath, d) == self.repo.objects.pack_dir]

    def _check_links(self, base: Path, names) -> None:
        for n in fsio.find_symlinks(base, names):
            p = base / n
            real = os.path.realpath(p)
            if not real.startswith(self._real + os.sep):
                rel = os.path.relpath(p, self.path)
                raise SourceCorrupt(f"merge source: {rel} is a symlink that leads out of the source; nothing was taken from it",
                                    path=rel)

    def count(self) -> int:
        """How many objects the source holds (loose and packed; for a progress bar)."""
        objs = self.repo.objects
        return sum(1 for _ in objs.iter_loose()) + sum(sum(1 for _ in p.ids()) for p in objs.packs())

    def refs(self) -> dict[str, str]:
        """Every thread of the source store and its tip."""
        try:
            return self.repo.refs.read_all()
        except (ObjectCorrupt, UnsafeSymlink) as e:
            raise SourceCorrupt(f"merge source: {e.message}") from e

    def turns(self, name: str) -> list[str]:
        """The turns the source's reflog records for ``name``, oldest first, each once: of
        the moves that happened (refformat.applied_entries; a line a crash cut short names a
        call that is not on the thread, which this store must not record as one)."""
        try:
            log = applied_entries(self.repo.refs.read_log(name), self.repo.refs.read(name))
            return list(dict.fromkeys(e.turn for e in log if e.turn))
        except UnsafeSymlink as e:
            raise SourceCorrupt(f"merge source: {e.message}") from e

    def archived(self) -> list[tuple[str, list]]:
        """(path under logs/deleted, entries naming a turn) for each deleted thread's reflog."""
        return self.repo.refs.archived_entries()

    def size(self, oid: str) -> int | None:
        """The stored size of ``oid`` in the source, or None. A loose object is opened here
        (never through a symlink that leads out of the source) and its bytes are read by the
        ``read_raw`` of the same id that follows: one open and one fstat per object."""
        self._drop_open()
        f = self.repo.objects._file(oid)
        try:
            fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            self._open = (oid, None, None)  # not loose (nor a symlink): read_raw need not look again
            return self.repo.objects.stored_size(oid)  # packed (or absent)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            p = Path(f)  # a symlink: read only if it stays inside the source
            self._check_links(p.parent, [p.name])
            return self.repo.objects.stored_size(oid)
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        self._open = (oid, fd, size)  # (read_raw reads it)
        return size

    def _drop_open(self) -> None:
        if self._open is not None:
            fd, self._open = self._open[1], None
            if fd is not None:
                os.close(fd)

    def read_raw(self, oid: str) -> bytes | None:
        """The bytes of ``oid`` in the source, or None if absent. NOT verified: the caller
        re-hashes them (merge hashes each object it takes once; ``read_verified`` is the
        fallback when they do not match)."""
        opened = self._open is not None and self._open[0] == oid
        if opened and self._open[1] is not None:
            fd, size = self._open[1], self._open[2]
            try:
                # One read of the size ``size`` saw, and one byte more: a regular file reads
                # short only at its end, so a shorter answer is the whole file (the common
                # case: one system call, not a second one to see the end).
                b = os.read(fd, size + 1)
                if len(b) <= size:
                    return b
                chunks = [b]
                while True:
                    b = os.read(fd, 1 << 20)
                    if not b:
                        return b"".join(chunks)
                    chunks.append(b)
            finally:
                self._drop_open()
        self._drop_open()
        p = Path(self.repo.objects._file(oid))
        if not opened and p.is_symlink():
            self._check_links(p.parent, [p.name])
        try:
            return self.repo.objects.read_unverified(oid)
        except ObjectCorrupt as e:
            raise SourceCorrupt(f"merge source: {e.message}", oid=oid) from e

    def read_verified(self, oid: str) -> bytes | None:
        """The bytes of ``oid`` checked against the id (a good packed copy wins over a
        damaged loose one), or None if absent."""
        self._drop_open()
        try:
            return self.repo.objects.read_bytes(oid)
        except ObjectMissing:
            return None
        except ObjectCorrupt as e:
            raise SourceCorrupt(f"merge source: {e.message}", oid=oid) from e

    def same_store(self, repo) -> bool:
        """True when the source is ``repo`` itself (same real path)."""
        return os.path.realpath(self.path) == os.path.realpath(repo.path)

    def close(self) -> None:
        """Close the source store."""
        self._drop_open()
        self.repo.close()


def open_source(src: str | Path):
    """A merge source for ``src``: a store directory or a bundle file (InvalidInput for
    anything else, such as an llm logs.db)."""
    p = Path(src)
    if p.is_dir():
        return StoreSource(p)
    if p.is_file():
        with open(p, "rb") as f:
            head = f.read(16)
        if head.startswith(b"SQLite format 3"):
            import sqlite3

            db = sqlite3.connect(fsio.sqlite_readonly_uri(p), uri=True)
            try:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            except sqlite3.DatabaseError as e:
                raise InvalidInput(f"{src}: unreadable SQLite file: {e}") from e
            finally:
                db.close()
            if "bundle_meta" in tables:
                return BundleSource(p)
            if "responses" in tables or "conversations" in tables:
                raise InvalidInput(f"{src} is an llm logs.db: use `convgit import {src}` (merge reads convgit stores and bundles)")
        raise InvalidInput(f"{src} is neither a convgit store nor a bundle")
    raise NotAStore(f"merge source {src} does not exist")


def merge(repo, src: str | Path, *, dry_run: bool = False, progress=None) -> MergeReport:
    """Merge the store or bundle ``src`` into ``repo`` (see the module docstring for the
    order and the ref rules). Returns MergeReport. ``progress(done, total)``: objects walked
    so far, out of every object the source holds."""
    t0 = time.perf_counter()
    source = open_source(src)
    report = MergeReport(str(src), dry_run=dry_run)
    try:
        if source.same_store(repo):
            raise InvalidInput("cannot merge a store into itself")
        # One transaction, the store lock held exclusively (an interrupted merge is rolled
        # forward first); the index follows the threads it moved once the lock is released.
        with no_cyclic_gc(), repo.transaction(exclusive=True, index="none" if dry_run else "moves",
                                               index_after_unlock=True) as tx:
            _merge(tx, _Guarded(source), report, dry_run, progress)
            if report.archived and not dry_run:
                tx.index_mode = "rebuild"  # archived reflogs are read by a rebuild (rare: a merge that carried some)
    finally:
        source.close()
    report.warnings.extend(tx.warnings)
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


@contextlib.contextmanager
def no_cyclic_gc():
    """Python's cycle collector paused for the duration (as it was before, after). A merge
    allocates a few objects per object it takes and keeps the new ones decoded for the index
    (INDEX_CACHE_BYTES): each full collection walks all of them, about a fifth of a merge's
    CPU at 50,000 messages and growing with the size. Nothing a merge allocates depends on
    the collector to be freed (reference counting frees it); the memory is bounded by then."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Guarded:
    """A merge source whose every read failure is a SourceCorrupt (a bundle is a file anyone
    can hand us: an unreadable row or a bad page must be a clear error, never a crash)."""

    def __init__(self, source) -> None:
        self._s = source

    def __getattr__(self, name):
        fn = getattr(self._s, name)
        if name not in ("refs", "turns", "archived", "size", "read_raw", "read_verified", "count"):
            return fn

        def call(*args):
            try:
                return fn(*args)
            except ConvgitError:
                raise
            except (sqlite3.Error, OSError, ValueError, TypeError) as e:
                raise SourceCorrupt(f"merge source cannot be read: {e}") from e

        setattr(self, name, call)  # (made once: size and read_raw are called per object)
        return call


def _limit(repo) -> int:
    return max(repo.config.max_payload_bytes, repo.config.max_message_bytes)


def _merge(tx, source, report: MergeReport, dry_run: bool, progress=None) -> None:
    repo = tx.repo
    # 1. Refs first, validated.
    incoming = source.refs()
    for name, tip in incoming.items():
        try:
            check_thread_name(name)
        except ConvgitError as e:
            raise SourceCorrupt(f"merge source has an invalid thread name {name!r}: {e.message}") from e
        if not is_oid(tip):
            raise SourceCorrupt(f"merge source thread {name!r} holds {tip!r}, not an object id")
    turns = {name: source.turns(name) for name in incoming}
    # The provenance the source keeps for the messages it brings although no thread of it
    # names it any more (a deleted thread's turns that a fork's messages still need): the
    # same rule as gc's (format.md §10), applied to what this merge makes reachable.
    carried = _provenance_to_carry(repo, source, incoming)
    seen = take_objects(tx, source, incoming, turns, report, dry_run, carried=carried, progress=progress)
    apply_refs(tx, source, incoming, turns, seen, report, dry_run, carried=carried)


def take_objects(tx, source, incoming: dict[str, str], turns: dict[str, list[str]], report, dry_run: bool, *,
                 carried: list = (), limit: int | None = None, progress=None) -> set[str]:
    """Every object the ``incoming`` tips and ``turns`` reach that is new here, read from
    ``source`` (``size``/``read_raw``), verified (re-hashed, decoded, canonical, of the type it
    is named as, within the size limit) and staged in a quarantine pack that is moved in only
    once the whole walk has passed; one bad object and nothing is taken (SourceCorrupt).
    Returns the ids taken. (merge, and fetch from a remote: docs/remotes.md.)
    ``progress(done, total)``: objects walked, of those the source holds."""
    repo = tx.repo
    # 2. Every object new here, re-hashed and decoded; one bad object and nothing is taken.
    # Each is read once: the bytes just verified go straight into a pack staged in a
    # quarantine directory (streamed, so memory stays bounded at any size), which is moved in
    # only once the whole walk has passed; any failure removes the quarantine.
    quarantine = repo.objects.path / f"incoming-{os.getpid()}-{time.monotonic_ns()}"
    writer: PackWriter | None = None
    try:
        new_ids: list[str] = []
        # Every id walked, new or already stored here, with its type (None: a damaged local
        # object, fsck's business). An id is walked once but may be named many times, each
        # time as some type: every naming is checked against the type found, so a blob
        # reference to a thread's tip is refused whichever of the two the walk meets first.
        walked: dict[str, str | None] = {}
        # (id, who names it, the type it must have): a thread's tip is a message, a reflog's
        # turn a turn; each object's references are typed by graph.typed_references.
        todo = [(t, "thread", "message") for t in incoming.values()] + [(t, "turn", "turn") for ts in turns.values() for t in ts]
        todo += [(e.turn, "a deleted thread's reflog", "turn") for _, es in carried for e in es]
        limit = limit if limit is not None else _limit(repo)
        total = source.count() if progress is not None else 0
        # The exclusive store lock is held: no pack comes or goes here until this walk's own
        # is moved in, so the pack list is read once (not a stat of objects/pack per id).
        packs = repo.objects.packs()
        fanout = repo.objects.fanout_dirs()  # (likewise: an id in no fan-out directory is not loose, no stat)
        # The new objects as decoded here, handed to the index (which would otherwise read
        # each back from the new pack, re-hash and decode it again), up to a bound on memory.
        decoded: dict[str, object] = {}
        budget = INDEX_CACHE_BYTES if not dry_run and tx.index_mode == "moves" else 0
        contains, size_of, read_raw = repo.objects.contains, source.size, source.read_raw  # (per object: bound once)
        hash_bytes, decode, is_canonical, type_name = codec.hash_bytes, codec.decode, codec.is_canonical, codec.type_name
        new_bytes = 0
        while todo:
            if progress is not None and len(walked) % 256 == 0:
                progress(len(walked), total)
            oid, by, want = todo.pop()
            if not is_oid(oid):
                raise SourceCorrupt(f"merge source: {by} names {oid!r}, not an object id")
            if oid in walked:
                _check_type(oid, want, walked[oid], by)
                continue
            if contains(oid, packs=packs, fanout=fanout):
                walked[oid] = _local_type(repo, oid)
                _check_type(oid, want, walked[oid], by)
                continue
            size = size_of(oid)
            if size is not None and size > limit:
                raise SourceCorrupt(f"merge source: object {oid} is {size} bytes, over the limit of {limit}", oid=oid)
            data = read_raw(oid)
            if data is None:
                raise SourceCorrupt(f"merge source lacks object {oid} (referenced by {by})", oid=oid)
            if hash_bytes(data) != oid:  # (the one re-hash of each object taken)
                data = _read_verified(source, oid)  # a damaged loose copy may have a good packed one
                if data is None or len(data) > limit:
                    raise SourceCorrupt(f"merge source: object {oid} does not hash to its id", oid=oid)
            try:
                obj = decode(data, oid)
            except ObjectCorrupt as e:
                raise SourceCorrupt(f"merge source: {e.message}", oid=oid) from e
            if not is_canonical(data, obj):
                raise SourceCorrupt(f"merge source: object {oid} is not canonically encoded", oid=oid)
            _check_type(oid, want, type_name(obj), by)
            walked[oid] = want
            new_ids.append(oid)
            new_bytes += len(data)
            if budget > 0:
                decoded[oid] = obj
                budget -= len(data)
            if not dry_run:
                if writer is None:
                    writer = PackWriter(quarantine, fsync=repo.config.fsync)
                writer.add(oid, data, verified=True)
            todo.extend((r, oid, t) for r, t in typed_references(obj))
        report.new_objects = len(new_ids)
        report.new_bytes += new_bytes
        seen = set(new_ids)
        for name, tip in incoming.items():
            if tip not in seen and not repo.objects.contains(tip):
                raise SourceCorrupt(f"merge source thread {name!r} points at a missing object", thread=name)

        if progress is not None:
            progress(total, total)
        # 3. Objects: the staged pack finished in quarantine (durable), then moved in.
        if writer is not None:
            idx = writer.finish()
            writer = None
            crash_point("merge_after_quarantine")
            fsio.makedirs(repo.objects.pack_dir, fsync=repo.config.fsync)
            fsio.rename(idx.with_suffix(".pack"), repo.objects.pack_dir / idx.with_suffix(".pack").name)
            crash_point("merge_mid_migrate")
            fsio.rename(idx, repo.objects.pack_dir / idx.name)
            if repo.config.fsync:
                fsio.fsync_dir(repo.objects.pack_dir)
            repo.objects.packs(reload=True)
            tx.keep_decoded(decoded)
    finally:
        if writer is not None:
            writer.abort()
        fsio.rmtree(quarantine)
    return seen


def apply_refs(tx, source, incoming: dict[str, str], turns: dict[str, list[str]], seen: set[str], report,
               dry_run: bool, *, carried: list = ()) -> None:
    """The ref rules of merge for ``incoming`` (thread → tip, every tip stored here by now):
    new → created, same → nothing, behind → fast-forward, ahead → kept, diverged → kept as
    ``NAME-merged-<tip>``; each entry reported in ``report.refs``; all or nothing (a journal,
    rolled forward after a crash). ``seen``: the objects just taken, whose ``turns`` are
    recorded in the reflogs."""
    repo = tx.repo
    crash_point("merge_before_refs")

    # 4. The ref plan.
    plan = []
    local = repo.refs.read_all()
    for name, tip in sorted(incoming.items()):
        mine = local.get(name)
        action, target = _classify(repo, name, mine, tip, source, dry_run)
        entry = {"thread": name, "action": action, "local": mine, "incoming": tip, "as": target}
        report.refs.append(entry)
        new_turns = [t for t in turns[name] if t in seen]
        old = local.get(target) if action != "diverged" else repo.refs.read(target)
        new = tip if action in ("created", "fast-forward", "diverged") else old
        if new != old or new_turns:
            plan.append({"thread": target, "old": old, "new": new, "turns": new_turns, "action": action})
    if dry_run:
        return
    report.provenance_turns = len({e.turn for _, es in carried for e in es if e.turn in seen})
    if not plan:
        report.archived = _write_archived(repo, carried)
        return
    # A merge that fails (an error, not a crash) leaves nothing behind: the refs it moved are
    # put back and its journal goes, so no later writer rolls it forward. A crash leaves the
    # journal and the next writer finishes the merge; so does a failure whose own rollback
    # failed (finishing it is then the only all-or-nothing outcome).
    try:
        write_journal(repo, plan)
        _apply(tx, plan)
    except _RollbackFailed as e:
        raise e.original from None
    except BaseException:
        try:
            fsio.unlink(repo.path / JOURNAL)
        except ConvgitError:
            pass
        raise
    fsio.unlink(repo.path / JOURNAL)
    report.archived = _write_archived(repo, carried)


def _provenance_to_carry(repo, source, incoming: dict[str, str]) -> list[tuple[str, list]]:
    """The source's deleted-thread reflog entries whose turn records a message that an
    incoming thread reaches (graph.deleted_provenance), by archived log."""
    archived = source.archived()
    if not archived:
        return []

    def read(oid: str):
        data = repo.objects.read_bytes(oid) if repo.objects.contains(oid) else source.read_raw(oid)
        if data is None or codec.hash_bytes(data) != oid:
            return None  # not ours to judge here: the walk re-checks what it takes
        try:
            return codec.decode(data, oid)
        except ObjectCorrupt:
            return None

    return deleted_provenance(archived, incoming.values(), read)


def _write_archived(repo, carried: list[tuple[str, list]]) -> int:
    """Append the carried entries to this store's archived reflogs of the same name (those
    it has already are not written again: a merge is idempotent). Returns how many."""
    n = 0
    base = repo.refs.deleted_logs_dir
    for rel, entries in carried:
        path = base / rel
        if not str(path.resolve()).startswith(str(base.resolve()) + os.sep) or ".." in rel.split("/"):
            continue  # never outside logs/deleted
        have = {(e.old, e.new, e.time_ms, e.turn) for e in read_log_file(path)}
        lines = [format_reflog_line(e.old, e.new, e.time_ms, e.turn, e.message) for e in entries
                 if (e.old, e.new, e.time_ms, e.turn) not in have and repo.objects.contains(e.turn)]
        if lines:
            fsio.check_real_dirs(repo.refs.deleted_logs_dir, path.parent)
            fsio.append_line(path, "".join(lines), fsync=repo.config.fsync)
            n += len(lines)
    return n


def _read_verified(source, oid: str) -> bytes | None:
    """``oid`` read again from a source that can check it against the id (a store: a good
    packed copy wins over a damaged loose one); None when it cannot."""
    read = getattr(source, "read_verified", None)
    if read is None:
        return None
    data = read(oid)
    return data if data is not None and codec.hash_bytes(data) == oid else None


def _local_type(repo, oid: str) -> str | None:
    """The type of an object already stored here (None if it cannot be read: a damaged local
    object is fsck's business, not the source's)."""
    try:
        return codec.type_name(repo.objects.read(oid))
    except ConvgitError:
        return None


def _check_type(oid: str, want: str, have: str | None, by: str) -> None:
    """An id the source names must be of the type it is named as."""
    if have is not None and have != want:
        raise SourceCorrupt(f"merge source: {by} names {oid} as a {want}; it is a {have}", oid=oid)


def _classify(repo, name: str, mine: str | None, tip: str, source, dry_run: bool) -> tuple[str, str]:
    if mine is None:
        try:
            repo.refs.check_free(name)
            return "created", name
        except ConvgitError:
            return "diverged", _diverged_name(name, tip)
    if mine == tip:
        return "same", name
    if dry_run and not repo.objects.contains(tip):
        return ("fast-forward" if _source_has_ancestor(source, tip, mine) else "diverged"), name
    if _is_ancestor(repo, mine, tip):
        return "fast-forward", name
    if _is_ancestor(repo, tip, mine):
        return "kept", name
    return "diverged", _diverged_name(name, tip)


def _diverged_name(name: str, tip: str) -> str:
    cand = f"{name}-merged-{tip[:10]}"
    try:
        return check_thread_name(cand)
    except ConvgitError:
        return f"merged-{tip[:10]}"


def _is_ancestor(repo, a: str, b: str) -> bool:
    """Is message ``a`` in the history of ``b`` (or equal)?"""
    oid: str | None = b
    while oid is not None:
        if oid == a:
            return True
        obj = repo.objects.read(oid)
        oid = obj.parent if isinstance(obj, Message) else None
    return False


def _source_has_ancestor(source, tip: str, a: str) -> bool:
    oid: str | None = tip
    while oid is not None:
        if oid == a:
            return True
        data = source.read_raw(oid)
        if data is None:
            return False
        if codec.hash_bytes(data) != oid:
            data = _read_verified(source, oid)
            if data is None:
                return False
        obj = codec.decode(data, oid)
        oid = obj.parent if isinstance(obj, Message) else None
    return False


class _RollbackFailed(Exception):
    def __init__(self, original: BaseException) -> None:
        self.original = original


def _apply(tx, plan) -> None:
    """Move every ref of the plan, in batches (RefStore.update_many: a syncfs and the directories' fsyncs per 256
    threads, not four fsyncs per move); on failure, put back the ones already moved."""
    moves = [m for m in (_move_for(tx.repo, e) for e in plan) if m is not None]
    first, rest = [NOT_APPLIED] * len(moves[:1]), [NOT_APPLIED] * len(moves[1:])
    try:
        for part, results in ((moves[:1], first), (moves[1:], rest)):  # the first thread alone, then the rest
            if results is rest:
                crash_point("merge_mid_refs")
            tx.move_many(part, results=results)
            for r in results:
                if isinstance(r, Exception):
                    raise r
    except BaseException as err:
        ok = True
        for m, r in reversed(list(zip(moves, first + rest))):
            if r is NOT_APPLIED or isinstance(r, Exception) or r == m.new:
                continue
            try:  # (r None: the created thread is deleted again)
                tx.move(m.name, r, expected=m.new, message="merge: rolled back")
            except ConvgitError:
                ok = False
        if not ok:
            raise _RollbackFailed(err) from err
        raise


def _move_for(repo, e) -> RefMove | None:
    """The ref move of one plan entry: to the incoming tip with its first turn, plus a reflog
    line for each other incoming turn not recorded yet; None when there is nothing to do."""
    name, old, new, turns = e["thread"], e["old"], e["new"], list(e["turns"])
    cur = repo.refs.read(name)
    first = None
    if new is not None and cur != new:
        first = turns.pop(0) if turns else None
        tip = new
    else:
        tip = cur
    if tip is None:
        return None
    if turns:
        logged = {x.turn for x in repo.refs.read_log(name) if x.turn}
        turns = [t for t in turns if t not in logged]
    extra = tuple((t, "merge: recorded turn") for t in turns)
    if tip == cur:  # nothing moves: only turns to record
        if not extra:
            return None
        return RefMove(name, tip, expected=tip, message=extra[0][1], turn=extra[0][0], extra=extra[1:])
    return RefMove(name, new, expected=old, message=f"merge: {e['action']}", turn=first, extra=extra)


__all__ = ["JOURNAL", "MergeReport", "apply_refs", "merge", "open_source", "recover", "take_objects", "ANY"]
