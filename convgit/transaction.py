"""The repository transaction: the one path of every write after its objects are hashed.

``with repo.transaction() as tx:`` takes the store lock (shared, as writers do; exclusive for
gc and merge), brings the index up to what other writers moved (the refs journal says what:
O(moves), docs/format.md §8), and then lets its body write objects and move refs:

- ``tx.write_objects`` / ``tx.write_pack``: objects, durable on return (docs/format.md §6.1);
  their bytes are kept in memory so that the index need not read them back;
- ``tx.move`` / ``tx.move_many`` / ``tx.rename`` / ``tx.delete``: compare-and-swaps of refs,
  each durable on return, with its reflog line and its refs-journal line (docs/format.md §6);
- ``tx.follow(thread)``: the HEAD rule: HEAD names ``thread`` once the transaction is done.

When the body returns, the transaction updates the index from exactly what it moved (the
threads it moved, plus whatever the journal says other writers moved meanwhile; never a rescan
of every ref), then applies the HEAD rule, then releases the lock. Both come after the commit
point (the ref moves): if either fails (a full disk), the writes stand and the failure is a
warning (``tx.warnings``), never an error; the next command's catch-up reads the journal.
When the body raises, nothing more is done: what it moved is in the journal, and the next
command catches the index up from there.

Once the lock is released, a transaction whose moves took the refs journal past another
AUTO_PACK_STEP bytes (a cheap sign that loose refs may have piled up: one ``stat``) counts the
loose refs, and past ``refs.AUTO_PACK_LOOSE`` packs them (Repository.auto_pack, under the
exclusive store lock if it is free at once): hot threads stay loose, the rest live in
``packed-refs`` and ``packed-logs`` (docs/format.md §6.4).

Every operation that writes (commit, commit_many, import, merge, fork, rename, delete,
update-ref, gc) runs in one, so the library and the CLI behave identically.
tests/test_transaction.py checks that no other module moves a ref or writes HEAD.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import TYPE_CHECKING, Iterable

from . import codec, fsio
from .config import crash_point
from .errors import ConvgitError, ObjectCorrupt, StorageFailed
from .refs import ANY

if TYPE_CHECKING:
    from .ref_move import RefMove

# What the index does when the transaction ends: catch up the threads it moved (and the
# journal's), read every ref, or rebuild from the objects; or nothing (a dry run).
INDEX_MODES = ("moves", "refresh", "rebuild", "none")
AUTO_PACK_STEP = 16 * 1024  # journal bytes between two counts of the loose refs (~500 moves)


class Transaction:
    """One write: the store lock, objects, compare-and-swap ref moves, then the index and HEAD.

    ``exclusive``: hold the store lock exclusively (gc, merge: no writer runs meanwhile).
    ``index``: what the index does at the end (``INDEX_MODES``). ``index_after_unlock``: do it
    after releasing the store lock (gc: writers need not wait for a rebuild). ``fast_forward``:
    the caller's moves only create threads or move them to descendants of their tips (commit,
    import), so no message can be left unreachable and the index need not look for any.
    ``recover``: with ``exclusive``, roll an interrupted merge or rename forward first (not for
    a dry run).
    """

    def __init__(self, repo, *, exclusive: bool = False, index: str = "moves", index_after_unlock: bool = False,
                 fast_forward: bool = False, recover: bool = True) -> None:
        if index not in INDEX_MODES:
            raise ValueError(f"index must be one of {INDEX_MODES}, not {index!r}")
        self.repo = repo
        self.exclusive = exclusive
        self.index_mode = index
        self.index_after_unlock = index_after_unlock
        self.fast_forward = fast_forward
        self.recover = recover
        self.moved: set[str] = set()  # the threads this transaction moved, created or deleted
        self.index_warning: str | None = None  # the index could not follow (the writes stand)
        self.head_warning: str | None = None  # HEAD could not be moved (the writes stand)
        self.head: str | None = None  # HEAD as read when the transaction began (None: not read)
        self.head_moved = False
        self._objects: dict[str, bytes] = {}  # bytes written, for the index (no read back)
        self._decoded: dict[str, object] = {}  # ... of which already decoded by the caller
        self._follow: str | None = None
        self._head_after_delete = False
        self._stack: ExitStack | None = None
        self._journal_at = 0  # the refs journal's size when the transaction began
        self._journal_own = 0  # ... and how much of it is this transaction's (RefStore.journal_bytes)
        self._written: dict[str, tuple[str, bytes]] = {}  # threads created: name -> (tip, reflog), for the index
        self.head_follows_moves = False  # HEAD is to follow the thread moved (commit): staged before the move
        self._staged_head = None  # HEAD's next content, written before the move's syncfs (RefStore.stage_head)

    @property
    def warnings(self) -> list[str]:
        """What went wrong after the commit point (the writes stand): the index, HEAD."""
        return [w for w in (self.index_warning, self.head_warning) if w]

    # -- the lock ---------------------------------------------------------------------------

    def __enter__(self) -> "Transaction":
        repo = self.repo
        if self.index_mode == "moves" or repo.config.index_backend != "sqlite":
            # Open (and if needed rebuild) the index before anything is written: an index
            # server that cannot be reached fails the write here, with nothing written.
            repo.index
        stack = ExitStack()
        stack.enter_context(repo.exclusive_lock() if self.exclusive else repo.write_lock())
        self._stack = stack
        self._journal_at = _size(repo.refs.journal_path)
        self._journal_own = repo.refs.journal_bytes
        try:
            if self.exclusive and self.recover:
                repo.recover_interrupted()  # a merge or a rename cut short: finish it first
            if self.index_mode == "moves":
                repo.index.refresh_if_changed()  # what other writers moved: the journal names it
        except BaseException:
            stack.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        stack, self._stack = self._stack, None
        try:
            self._exit(stack, exc_type)
        finally:
            if self._staged_head is not None:  # (not used: HEAD did not move to it)
                self._staged_head.discard()
                self._staged_head = None

    def _exit(self, stack: ExitStack, exc_type) -> None:
        try:
            if exc_type is None:
                # Objects written and no ref move made them durable (a sync owed): now, before
                # the index or the caller is told of them.
                fsio.settle(self.repo.objects.path)
            if exc_type is None and not self.index_after_unlock:
                self._finish()
        finally:
            stack.close()
        if exc_type is None and self.index_after_unlock:
            self._finish()
        if exc_type is None and self.moved and not self.exclusive:
            now = _size(self.repo.refs.journal_path)
            from . import refs

            if (now // AUTO_PACK_STEP != self._journal_at // AUTO_PACK_STEP or now < self._journal_at
                    or len(self.moved) > refs.AUTO_PACK_LOOSE):
                self.repo.auto_pack()

    def _finish(self) -> None:
        crash_point("commit_before_index")
        self._update_index()
        self._apply_head()

    def catch_up(self) -> None:
        """Bring the index up to what other writers moved (after a lost compare-and-swap,
        before deciding again)."""
        self.repo.index.refresh_if_changed()

    # -- objects ----------------------------------------------------------------------------

    def write_objects(self, objs: Iterable[tuple[str, bytes]], *, missing: frozenset[str] | set[str] = frozenset(),
                      decoded: dict[str, object] | None = None) -> int:
        """Write objects (dependency order: a message after its parent and blobs), durable on
        return; a few as loose files, many as one pack (ObjectStore.write_many). Returns how
        many were new. ``decoded``: the same objects already decoded (oid → object), which
        the index then uses as they are. ``missing``: ids just seen absent."""
        objs = list(objs)
        if not objs:
            return 0
        # The new entries' sync is owed to the ref move that follows (its syncfs comes before
        # its commit point), or paid when the transaction ends (docs/format.md §6.1-6.2).
        n = self.repo.objects.write_many(objs, missing=missing, defer_entries=True)
        self._keep(objs, decoded)
        return n

    def write_pack(self, objs: Iterable[tuple[str, bytes]], *, missing: frozenset[str] | set[str] = frozenset(),
                   decoded: dict[str, object] | None = None) -> set[str]:
        """Write objects into one new pack (a bulk write, whatever ``fsync``), durable on
        return. Returns the ids newly written."""
        objs = list(objs)
        if not objs:
            return set()
        written = self.repo.objects.write_packed(objs, missing=missing)
        self._keep(objs, decoded)
        return written

    def keep_decoded(self, decoded: dict[str, object]) -> None:
        """Objects this transaction stored by other means (merge's streamed pack), durable
        by now, as decoded and verified by the caller (oid → object): the index uses them
        instead of reading them back."""
        if self.index_mode == "moves" and decoded:
            self._decoded.update(decoded)

    def _keep(self, objs: list[tuple[str, bytes]], decoded: dict[str, object] | None) -> None:
        if self.index_mode != "moves":
            return
        self._objects.update(objs)
        if decoded:
            self._decoded.update(decoded)

    # -- refs -------------------------------------------------------------------------------

    def move(self, name: str, new: str | None, *, expected: object = ANY, message: str = "", turn: str | None = None,
             time_ms: int | None = None, check_exists: bool = True) -> str | None:
        """Compare-and-swap thread ``name`` from ``expected`` to ``new`` (None deletes it; see
        RefStore.update). Durable on return. Returns the old tip. ``check_exists``: ``new``
        must name a stored object."""
        exists = self.repo.objects.contains if check_exists else None
        self._written.pop(name, None)
        if self.head_follows_moves and new is not None and self.head is not None and name != self.head:
            self._stage_head(name)
        try:
            return self.repo.refs.update(name, new, expected=expected, message=message, turn=turn, exists=exists,
                                         time_ms=time_ms)
        finally:
            self.moved.add(name)  # even a failed move may be half-seen: the index checks it

    def move_many(self, moves: list[RefMove], *, results: list | None = None) -> list:
        """Several compare-and-swaps made durable together (RefStore.update_many): one result
        per move, the old tip or the error it met, in order. A storage error is raised."""
        for m in moves:
            self._written.pop(m.name, None)
        try:
            return self.repo.refs.update_many(moves, exists=self.repo.objects.contains, results=results,
                                              written=self._written if self.index_mode == "moves" else None)
        finally:
            self.moved.update(m.name for m in moves)

    def restore(self, name: str, tip: str, archive, *, message: str, time_ms: int | None = None) -> None:
        """Bring back a deleted thread at ``tip`` with its archived reflog (RefStore.restore)."""
        self._written.pop(name, None)
        try:
            self.repo.refs.restore(name, tip, archive, message=message, time_ms=time_ms,
                                   exists=self.repo.objects.contains)
        finally:
            self.moved.add(name)

    def rename(self, old: str, new: str) -> str:
        """Rename thread ``old`` to ``new`` (RefStore.rename); HEAD follows it when it named
        ``old``. Returns the tip."""
        self._written.pop(old, None)
        self._written.pop(new, None)
        try:
            tip = self.repo.refs.rename(old, new)
        finally:
            self.moved.update((old, new))
        if self.head is None:
            self.head = self._read_head_quietly()
        if self.head == old:
            self._follow = new
        return tip

    def delete(self, name: str, *, message: str = "delete") -> str | None:
        """Delete thread ``name`` (its reflog is archived). If HEAD named it, HEAD moves to the
        most recently updated thread left once the index has caught up (``tx.head``,
        ``tx.head_moved``). Returns the old tip (None for an unreadable ref file)."""
        if self.head is None:
            self.head = self.repo.refs.read_head()  # unreadable: refuse before deleting
        tip = self.move(name, None, message=message, check_exists=False)
        if self.head == name:
            self._head_after_delete = True
        return tip

    # -- remote-tracking refs -----------------------------------------------------------------

    def tracking(self, remote: str):
        """The remote-tracking refs of ``remote`` (refs/remotes/REMOTE/, remotes/tracking.py)."""
        from .remotes.tracking import TrackingRefs

        cfg = self.repo.config
        return TrackingRefs(self.repo.path, remote, fsync=cfg.fsync, lock_timeout=cfg.lock_timeout)

    def move_tracking(self, remote: str, moves: list[RefMove], deletes: Iterable[str] = (), *,
                      declare_packed=None) -> list:
        """Move remote-tracking refs (fetch, push): ``moves`` as RefStore.update_many (each
        durable, reflogged, its tip a stored object), then ``deletes`` (threads the remote no
        longer has). They are not threads: the index does not follow them. In an exclusive
        transaction, with ``declare_packed`` (declares the format version that reads packed
        reflogs), many creations are written packed at once (remotes/bulkrefs.py)."""
        refs = self.tracking(remote)
        exists = self.repo.objects.contains
        done: set[int] = set()
        if self.exclusive and moves and declare_packed is not None:  # thousands of new ones: packed at once
            from .remotes.bulkrefs import create_many

            done = create_many(refs, moves, exists=exists, declare=declare_packed)
        rest = [i for i in range(len(moves)) if i not in done]
        out: list = [None] * len(moves)  # (None: created)
        if rest:
            for i, r in zip(rest, refs.update_many([moves[i] for i in rest], exists=exists)):
                out[i] = r
        for name in deletes:
            refs.update(name, None, message="fetch: gone from the remote")
        return out

    def create_packed(self, moves: list[RefMove]) -> None:
        """Create threads at once, straight into ``packed-refs`` / ``packed-logs`` (a clone's
        pull, under the exclusive store lock; each a candidate of remotes/bulkrefs.py)."""
        from .remotes.bulkrefs import create_packed

        try:
            create_packed(self.repo.refs, moves)
        finally:
            self.moved.update(m.name for m in moves)

    def drop_tracking(self, remote: str, rename_to: str | None = None) -> None:
        """Remove every tracking ref (and reflog) of ``remote``, or move them to ``rename_to``
        (``remote remove`` / ``remote rename``)."""
        from . import fsio
        from .remotes.tracking import REMOTES

        root = self.repo.path
        pairs = [(root / REMOTES / remote, root / REMOTES / (rename_to or "")),
                 (root / "logs" / REMOTES / remote, root / "logs" / REMOTES / (rename_to or ""))]
        # (and the files beside them: the journal and the packed file, remotes/tracking.py)
        files = [(root / "logs" / "remotes" / f"{remote}.{ext}", root / "logs" / "remotes" / f"{rename_to}.{ext}")
                 for ext in ("journal", "packed-logs")]
        files.append((root / REMOTES / f"{remote}.packed", root / REMOTES / f"{rename_to}.packed"))
        for (src, dst), remove in [*((p, fsio.rmtree) for p in pairs), *((f, fsio.unlink) for f in files)]:
            if not src.exists():
                continue
            if rename_to is None:
                remove(src)
            else:
                fsio.makedirs(dst.parent)
                fsio.rename(src, dst)

    # -- HEAD -------------------------------------------------------------------------------

    def read_head(self) -> str:
        """HEAD, read (and so validated) before anything is written: an unreadable HEAD stops
        the write before its commit point, never after it."""
        self.head = self.repo.refs.read_head()
        return self.head

    def write_head(self, name: str) -> None:
        """Point HEAD at thread ``name`` now (``switch``); a failure is an error."""
        self.repo.refs.write_head(name)
        self.head, self.head_moved = name, True

    def follow(self, thread: str | None) -> None:
        """The HEAD rule: once the transaction is done, HEAD names ``thread`` if that thread
        exists (the last call wins). ``read_head`` must have been called first."""
        if thread is not None:
            self._follow = thread

    def _stage_head(self, name: str) -> None:
        """Write HEAD's content for ``name`` before the move's syncfs makes it durable, so that
        moving HEAD after the commit point costs a rename and one directory fsync."""
        staged = self._staged_head
        if staged is not None:
            if staged.name == name:
                return
            staged.discard()
            self._staged_head = None
        try:
            self._staged_head = self.repo.refs.stage_head(name)
        except ConvgitError:  # (a full disk: StorageFailed) HEAD is then written whole after the commit point
            self._staged_head = None

    def _read_head_quietly(self) -> str | None:
        try:
            return self.repo.refs.read_head()
        except ConvgitError:
            return None

    def _apply_head(self) -> None:
        repo = self.repo
        target = self._follow
        if self._head_after_delete:
            left = [r for r in repo.index.thread_rows() if r["name"] != self.head]
            if left:
                target = max(left, key=lambda r: (r["updated_ms"] or 0, r["name"]))["name"]
        if target is None or self.head is None or not thread_exists(repo, target):
            return
        staged, self._staged_head = self._staged_head, None
        warning = move_head(repo, target, self.head, staged)
        if warning:
            self.head_warning = warning
        elif target != self.head:
            self.head, self.head_moved = target, True

    # -- the index --------------------------------------------------------------------------

    def _update_index(self) -> None:
        repo = self.repo
        archived = repo.refs.take_archived()  # (taken whatever the mode: never left for another transaction)
        try:
            if self.index_mode == "moves" and (self.moved or self._objects):
                # What it created is handed over as written (no read back), to be trusted while
                # the journal ends where this transaction's own lines did.
                own = self.repo.refs.journal_bytes - self._journal_own
                repo.index.record_moves(self.moved, self._cache(), fast_forward=self.fast_forward,
                                        written=self._written, journal_end=self._journal_at + own,
                                        archived=archived)
            elif self.index_mode == "refresh":
                repo.index.refresh()
            elif self.index_mode == "rebuild":
                repo.index.rebuild()
        except StorageFailed as e:  # the writes stand; the next command catches the index up
            if self.index_mode != "moves":  # a half-done rebuild: the next command rebuilds it
                from .index import invalidate

                invalidate(repo)
                self.index_warning = f"index not updated ({e.message}); the next command rebuilds it"
            else:
                self.index_warning = f"index not updated ({e.message}); it will catch up on the next command"
        except Exception as e:  # noqa: BLE001  (the same: an index is a cache, never the truth)
            self.index_warning = f"index not updated ({e}); it will catch up on the next command"

    def _cache(self) -> dict[str, object]:
        """The objects written, decoded (those the caller decoded as they are)."""
        out = dict(self._decoded)
        for oid, data in self._objects.items():
            if oid not in out:
                try:
                    out[oid] = codec.decode(data, oid)
                except ObjectCorrupt:
                    pass  # the index reads it from the store (and reports it) instead
        return out


def _size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def move_head(repo, thread: str, head: str, staged=None) -> str | None:
    """Point HEAD (``head`` as read before the write) at ``thread`` after a write that
    stands (``staged``: its content written before the move, RefStore.stage_head). Returns a
    warning instead of raising when HEAD cannot be written."""
    if thread == head:
        if staged is not None:
            staged.discard()
        return None
    try:
        repo.refs.write_head(thread, staged)
    except (StorageFailed, OSError) as e:
        if staged is not None:
            staged.discard()
        why = e.message if isinstance(e, StorageFailed) else (e.strerror or str(e))
        try:
            now = repo.refs.read_head()
        except ConvgitError:
            now = None
        if now == thread:  # renamed in, then the directory's fsync failed
            return (f"the write stands and HEAD names {thread}, but writing HEAD failed ({why}): "
                    f"it may name {head} again after a power loss (convgit switch {thread} writes it again)")
        return (f"the write stands, but HEAD could not be moved to {thread} ({why}); "
                f"HEAD still names {head} (convgit switch {thread} moves it)")
    return None


def thread_exists(repo, name: str) -> bool:
    """Whether thread ``name`` exists (an unreadable ref counts as absent)."""
    try:
        return repo.refs.read(name) is not None
    except ObjectCorrupt:
        return False

