"""The thread decision (DESIGN §5): which thread a conversation moves, or creates, and its name.

Used by ``commit`` (one payload or a batch) and by ``import`` (each branch of an imported
tree): both read the store through a ``View``, which also counts what earlier conversations of
the same batch will have written, and get a ``Plan``. Nothing here writes: the plan is carried
out by the caller inside a repository transaction (convgit/transaction.py).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from . import codec
from .errors import AmbiguousThread, ConvgitError, DuplicateConflict, RefExists
from .graph import first_missing, read_message, stored_search
from .ids import check_thread_name, short
from .ingest import Chain, Payload
from .refs import ANY


@dataclass
class Plan:
    """What one payload does: its status (created, appended, deduplicated, forked), the thread
    that moves (or None) and the tip it must be at (``expected``: ANY, None for a new thread,
    or an id), where its history leaves the store, the holes it heals, and its turn."""

    payload: Payload
    chain: Chain
    status: str
    thread: str | None
    expected: object  # ANY | None | oid
    stored: int  # leading messages already stored (where the history meets the store)
    old_tip: str | None
    forked_from: dict | None = None
    turn: tuple[str, bytes] | None = None
    move_ref: bool = True
    holes: tuple[int, ...] = ()  # messages before ``stored`` that are missing (deleted by hand)

    @property
    def new_ids(self) -> list[str]:
        """The messages this commit writes: the holes it heals, then the new tail."""
        ids = self.chain.ids
        return [ids[i] for i in self.holes] + ids[self.stored:]

    @property
    def new_messages(self) -> int:
        """How many messages this commit writes."""
        return len(self.holes) + len(self.chain.ids) - self.stored

    def objects(self) -> list[tuple[str, bytes]]:
        """Every object to write, in dependency order: each hole's blobs and message (their
        parents are stored or come earlier), the tail's, then the turn."""
        c = self.chain
        out: list[tuple[str, bytes]] = []
        for i in self.holes:
            out.extend(c.blobs[i])
            out.append((c.ids[i], c.data[i]))
        out.extend(c.objects_from(self.stored))
        if self.turn:
            out.append(self.turn)
        return out


class View:
    """What the decision reads: refs, the tip→threads map, stored objects — plus, in a
    batch, what earlier payloads of the same batch will have done."""

    def __init__(self, repo) -> None:
        self.repo = repo
        self.pending_refs: dict[str, str] = {}
        self.pending_objects: set[str] = set()
        self.pending_upstream: dict[tuple[str, str], str] = {}
        self.pending_history: dict[str, set[str]] = {}  # thread -> every id up to its pending tip
        self.pending_parent: dict[str, str | None] = {}  # message -> parent, for what the batch will write
        self.pending_data: dict[str, bytes] = {}  # ... and its bytes
        # Ids this view found absent: not probed again (a probe that misses reads every pack's
        # index; stored_run asks for a chain's last id in its search and again after it).
        # Another writer storing one meanwhile is the race a probe a moment earlier loses.
        self._absent: set[str] = set()

    def add_pending(self, plan: Plan) -> None:
        """Count what ``plan`` will write and move as done, for the payloads after it in the
        same batch (commit_many)."""
        c, p = plan.chain, plan.payload
        self.pending_objects.update(plan.new_ids)
        if plan.thread and plan.move_ref:
            self.pending_refs[plan.thread] = c.tip
            self.pending_history[plan.thread] = set(c.ids)  # a chain always starts at its root
        self.pending_parent.update(zip(c.ids, [None, *c.ids[:-1]]))
        new = set(plan.new_ids)
        self.pending_data.update((oid, c.data[i]) for i, oid in enumerate(c.ids) if oid in new)
        if plan.thread and p.turn.source and p.turn.upstream_thread_id:
            self.pending_upstream[(p.turn.source, p.turn.upstream_thread_id)] = plan.thread

    def read_ref(self, name: str) -> str | None:
        """The tip of thread ``name`` (as a batch will have moved it), or None."""
        if name in self.pending_refs:
            return self.pending_refs[name]
        return self.repo.refs.read(name)

    def contains(self, oid: str) -> bool:
        """Whether ``oid`` is stored (or will be, by the batch)."""
        if oid in self.pending_objects:
            return True
        if oid in self._absent or not self.repo.objects.contains(oid):
            self._absent.add(oid)
            return False
        return True

    # The cheap probes graph.first_missing looks for (a loose file's existence, the pack
    # indexes already loaded); an object a batch will write counts as present.
    def is_loose(self, oid: str) -> bool:
        """Whether ``oid`` is a loose file (or will be written by the batch)."""
        return oid in self.pending_objects or self.repo.objects.is_loose(oid)

    def packs(self, *, reload: bool = False) -> list:
        """The store's packs (ObjectStore.packs)."""
        return self.repo.objects.packs(reload=reload)

    def packs_by_age(self) -> list:
        """The store's packs, oldest first (ObjectStore.packs_by_age)."""
        return self.repo.objects.packs_by_age()

    def threads_at(self, tip: str) -> list[str]:
        """The threads whose tip is ``tip``, sorted."""
        names = {n for n in self.repo.index.threads_at(tip) if n not in self.pending_refs}
        names.update(n for n, t in self.pending_refs.items() if t == tip)
        return sorted(names)

    def thread_containing(self, oid: str) -> str | None:
        """The first thread (by name) whose history holds ``oid``, or None."""
        names = [
            n for n in self.repo.index.threads_containing(oid, limit=len(self.pending_refs) + 1)
            if n not in self.pending_refs
        ]
        names += [n for n, ids in self.pending_history.items() if oid in ids]
        return min(names) if names else None

    def thread_for_upstream(self, source: str, upstream: str) -> str | None:
        """The thread recorded for ``source`` + ``upstream_thread_id``, or None."""
        key = (source, upstream)
        if key in self.pending_upstream:
            return self.pending_upstream[key]
        return self.repo.index.thread_for_upstream(source, upstream)

    def stored_prefix(self, ids: list[str]) -> int:
        """How many leading ids of a chain are stored with nothing missing before them
        (graph.longest_stored_prefix, with what the batch will write counted as stored):
        ``ids[k:]`` is what a commit of this chain must write."""
        end, holes = self.stored_run(ids)
        return holes[0] if holes else end

    def stored_run(self, ids: list[str], known: int = 0) -> tuple[int, tuple[int, ...]]:
        """``(end, holes)``: where the chain leaves the store (``ids[end - 1]`` stored,
        ``ids[end]`` not), found by binary search as in graph.longest_stored_prefix (stored
        messages are closed under "parent of", so log2(n) probes), and the indexes before it
        that are missing all the same: messages whose files were deleted by hand. The thread
        decision uses ``end`` (the history still ends where it did); the commit writes the
        holes again, healing the store. The hole check is graph.first_missing: one existence
        probe per id, no read.

        A search that probes a hole stops there; if the chain's last message is stored, so
        was all of it (the holes apart): ``end`` is the whole chain. (A search that stopped
        at a hole with new messages after it is caught by the decision, which knows the
        thread's tip.)

        ``known``: the caller stored ``ids[:known]`` itself (``Chain.known_stored``, the serve
        committer's hint): if ``ids[known - 1]`` is still stored (one probe: a gc that pruned
        it sends the chain down the full path), they are taken as stored, without their hole
        check, and only the ids after them are searched and checked."""
        n = len(ids)
        hinted = 0 < known <= n and self.contains(ids[known - 1])
        lo = stored_search(self, ids, known if hinted else 0)
        if lo < n - 1 and self.contains(ids[-1]):
            lo = n
        if not hinted:  # (ids[lo - 1], if any, was just found stored: not probed again)
            return lo, self.holes_before(ids, lo, last_stored=lo > 0)
        first = known + first_missing(self, ids[known:lo])
        if first >= lo:
            return lo, ()
        return lo, (first, *(i for i in range(first + 1, lo) if not self.contains(ids[i])))

    def holes_before(self, ids: list[str], end: int, *, last_stored: bool = False) -> tuple[int, ...]:
        """The indexes of the missing ids among ``ids[:end]``; ``last_stored``: the caller has
        just found ``ids[end - 1]`` stored (only those before it are looked for)."""
        stop = end - 1 if last_stored else end
        first = first_missing(self, ids, stop)
        if first >= stop:
            return ()
        return (first, *(i for i in range(first + 1, stop) if not self.contains(ids[i])))

    def read_bytes(self, oid: str) -> bytes:
        """The stored (or pending) bytes of ``oid``."""
        data = self.pending_data.get(oid)
        return data if data is not None else self.repo.objects.read_bytes(oid)

    def iter_history(self, tip: str):
        """Ids from ``tip`` back to the root, each yielded before it is read (a walk that
        stops at an id never needs that object)."""
        oid: str | None = tip
        while oid is not None:
            yield oid
            if oid in self.pending_parent:  # an earlier payload of the batch writes it
                oid = self.pending_parent[oid]
            else:
                oid = read_message(self.repo.objects, oid).parent


# -- deciding -------------------------------------------------------------------------------


def decide(view: View, payload: Payload, chain: Chain, thread: str | None, on_conflict: str, now_ms: int) -> Plan:
    """The plan for one payload. ``stored`` (where the history leaves the store) decides the
    thread, as if nothing were missing; ``holes`` (messages before it deleted by hand) are
    only written again."""
    ids = chain.ids
    tip = chain.tip
    k, holes = view.stored_run(ids, chain.known_stored)
    trusted = thread
    src, up = payload.turn.source, payload.turn.upstream_thread_id
    if trusted is None and src and up:
        trusted = view.thread_for_upstream(src, up)
        if trusted is None:
            return Plan(payload, chain, "created", upstream_name(view, src, up, tip, now_ms), None, k, None,
                         holes=holes)
    if trusted is not None:
        return _trusted(view, payload, chain, trusted, on_conflict, k, holes, now_ms)
    return _untrusted(view, payload, chain, k, holes, now_ms)


def _untrusted(view, payload, chain, k, holes, now_ms) -> Plan:
    ids = chain.ids
    tip = chain.tip
    if k == len(ids):
        names = view.threads_at(tip)
        if names:
            return Plan(payload, chain, "deduplicated", names[0], tip, k, tip, move_ref=False, holes=holes)
        if payload.turn.is_call() or payload.has_response:
            # A call whose every message is old, ending mid-thread: the turn is still new and
            # needs a thread to hang on.
            return Plan(payload, chain, "created", auto_name(view, tip, now_ms), None, k, None,
                         forked_from={"thread": view.thread_containing(tip), "message": tip, "threads": []},
                         holes=holes)
        # Reported only: no ref moves and no turn is written.
        return Plan(payload, chain, "deduplicated", view.thread_containing(tip), ANY, k, tip, move_ref=False,
                     holes=holes)
    prefix_tip = ids[k - 1] if k else None
    if prefix_tip is not None:
        names = view.threads_at(prefix_tip)
        if len(names) == 1:
            return Plan(payload, chain, "appended", names[0], prefix_tip, k, prefix_tip, holes=holes)
        holder = names[0] if names else view.thread_containing(prefix_tip)
        if not names and holder is not None:
            end = _end_past_a_hole(view, ids, k, holder)
            if end is not None:  # decide from there, as if nothing were missing
                return _untrusted(view, payload, chain, end, view.holes_before(ids, end), now_ms)
        forked = {"thread": holder, "message": prefix_tip, "threads": names}
    else:
        forked = None
    return Plan(payload, chain, "created", auto_name(view, tip, now_ms), None, k, None, forked_from=forked,
                 holes=holes)


def _end_past_a_hole(view: View, ids: list[str], k: int, holder: str) -> int | None:
    """Where the history really leaves the store when the binary search stopped at a hole
    (``ids[k]`` deleted by hand, maybe a thread's tip), or None. Asked only when the history
    would fork mid-thread: the thread holding the prefix has its tip further on in this
    history, or a thread holds the history's last message (the index still knows it)."""
    at = _index_after(ids, view.read_ref(holder), k)
    if at is not None:
        return at + 1
    if view.thread_containing(ids[-1]) is not None:
        return len(ids)
    return None


def _index_after(ids: list[str], oid: str | None, start: int) -> int | None:
    """The index of ``oid`` in ``ids[start:]``, or None."""
    if oid is None:
        return None
    try:
        return ids.index(oid, start)
    except ValueError:
        return None


def _trusted(view, payload, chain, thread, on_conflict, k, holes, now_ms) -> Plan:
    ids = chain.ids
    tip = chain.tip
    old = view.read_ref(thread)
    if old is None:
        return Plan(payload, chain, "created", thread, None, k, None, holes=holes)
    at = _index_after(ids, old, k)
    if at is not None:  # the search stopped at a hole before the thread's tip (or at the tip itself)
        k = at + 1
        holes = view.holes_before(ids, k)
    if old == tip:
        return Plan(payload, chain, "deduplicated", thread, old, k, old, move_ref=False, holes=holes)
    pos = {oid: i for i, oid in enumerate(ids)}
    if old in pos:
        return Plan(payload, chain, "appended", thread, old, k, old, holes=holes)
    history: list[str] = []  # tip .. root
    for oid in view.iter_history(old):
        if oid == tip:
            # A prefix of the thread. Walked no further than needed: a hole deeper down
            # (which this payload may be healing) does not stop it.
            if k < len(ids):
                k, holes = len(ids), view.holes_before(ids, len(ids))
            return Plan(payload, chain, "deduplicated", thread, old, k, old, move_ref=False, holes=holes)
        history.append(oid)
    hist_set = set(history)
    common = 0
    while common < len(ids) and ids[common] in hist_set:
        common += 1
    if _same_messages_reordered(view, chain, history, common):
        raise AmbiguousThread(
            f"thread {thread!r} holds these messages in another order", thread=thread, tip=old
        )
    if on_conflict == "fork":
        at = ids[common - 1] if common else None
        name = fork_name(view, thread, tip)
        return Plan(
            payload, chain, "forked", name, None, k, None,
            forked_from={"thread": thread, "message": at}, holes=holes,
        )
    if common:  # a shared history, then another branch: forking there keeps both
        at, hint = f"after message {short(ids[common - 1])}", "use --on-conflict fork to keep both"
    else:  # not the thread's conversation at all: most likely only the new messages (issue 11)
        import shlex

        at = "at the first message"
        hint = (f"it does not start at the thread's first message; to append it after the thread's tip, "
                f"use convgit commit -c {shlex.quote(thread)} FILE")
    raise DuplicateConflict(
        f"thread {thread!r} has a different history: the payload diverges {at} ({hint})",
        thread=thread, tip=old, diverged_after=ids[common - 1] if common else None,
    )


def _content_key(data: bytes) -> tuple:
    """A message's content without its parent: equal keys = the same message elsewhere."""
    m = codec.decode(data)
    return (m.role, codec.encode(m.__class__(parent=None, role=m.role, parts=m.parts, meta=m.meta)))


def _same_messages_reordered(view, chain: Chain, history: list[str], common: int) -> bool:
    theirs_ids = list(reversed(history))
    if len(theirs_ids) < len(chain.ids) or len(chain.ids) - common < 2:
        return False
    mine = Counter(_content_key(d) for d in chain.data[common:])
    theirs = Counter(
        _content_key(view.read_bytes(oid)) for oid in theirs_ids[common : len(chain.ids)]
    )
    return mine == theirs


def auto_name(view: View, tip: str, now_ms: int) -> str:
    """Unique, time-sortable: ``YYYYMMDD-HHMMSS-<tip prefix>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now_ms / 1000))
    for n in (6, 10, 16, 64):
        name = f"{stamp}-{tip[:n]}"
        if view.read_ref(name) is None:
            return name
    return f"{stamp}-{tip}-{now_ms}"


def fork_name(view: View, thread: str, tip: str) -> str:
    """A free name for a fork of ``thread`` at ``tip``: ``<thread>-fork-<tip prefix>``."""
    for n in (6, 10, 16, 64):
        name = f"{thread}-fork-{tip[:n]}"
        if view.read_ref(name) is None:
            return check_thread_name(name)
    raise RefExists(f"cannot find a free name to fork {thread!r}")


def upstream_name(view: View, source: str, upstream: str, tip: str, now_ms: int) -> str:
    """The name of a new thread for ``source`` + ``upstream`` id: ``<source>/<upstream id>``
    made safe, else a time-sortable ``auto_name``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in upstream).strip("-.")[:100]
    ssafe = "".join(c if c.isalnum() or c in "-_" else "-" for c in source).strip("-")[:40]
    cand = f"{ssafe}/{safe}" if ssafe and safe else ""
    try:
        check_thread_name(cand)
        if view.read_ref(cand) is None:
            view.repo.refs.check_free(cand)  # a thread named like the source: use another name
            return cand
    except ConvgitError:
        pass
    return auto_name(view, tip, now_ms)
