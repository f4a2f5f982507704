"""``commit``: store a conversation, deduplicated, and decide which thread moves (DESIGN §5).

Everything that can reject a payload happens before the first write. Messages are always
deduplicated by id; the decision below only chooses the ref. Bulk ingestion (``commit_many``)
plans every payload first, then makes all objects durable with one file-system sync, then
moves every ref and syncs once more, so thousands of conversations cost two flushes.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from . import codec, object_store
from .config import crash_point
from .errors import (
    AmbiguousThread,
    ConvgitError,
    DuplicateConflict,
    NotFound,
    PayloadTooLarge,
    RefExists,
    RefStale,
    ObjectCorrupt,
    SchemaValidationFailed,
    StorageFailed,
)
from .graph import first_missing, read_message
from .ids import check_thread_name, short
from .ingest import Chain, Payload, build_chain
from .objects import Turn
from .refs import ANY, RefMove

ON_CONFLICT = ("reject", "fork")
_MAX_RETRIES = 20


@dataclass
class CommitResult:
    """What one commit did: the status (created, appended, deduplicated, forked), the thread
    and its tip, and how many messages and objects were new."""

    status: str  # created | appended | deduplicated | forked
    thread: str | None
    tip: str | None
    deduplicated: bool
    appended_messages: int
    new_objects: int
    new_messages: int = 0
    turn: str | None = None
    forked_from: dict | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The ``commit --json`` document (docs/json.md)."""
        return {
            "status": self.status,
            "thread": self.thread,
            "tip": self.tip,
            "deduplicated": self.deduplicated,
            "appended_messages": self.appended_messages,
            "new_objects": self.new_objects,
            "new_messages": self.new_messages,
            "turn": self.turn,
            "forked_from": self.forked_from,
            **({"warnings": list(self.warnings)} if self.warnings else {}),
        }


@dataclass
class _Plan:
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


class _View:
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

    def read_ref(self, name: str) -> str | None:
        if name in self.pending_refs:
            return self.pending_refs[name]
        return self.repo.refs.read(name)

    def contains(self, oid: str) -> bool:
        return oid in self.pending_objects or self.repo.objects.contains(oid)

    # The cheap probes graph.first_missing looks for (a loose file's existence, the pack
    # indexes already loaded); an object a batch will write counts as present.
    def is_loose(self, oid: str) -> bool:
        return oid in self.pending_objects or self.repo.objects.is_loose(oid)

    def packs(self, *, reload: bool = False) -> list:
        return self.repo.objects.packs(reload=reload)

    def threads_at(self, tip: str) -> list[str]:
        names = {n for n in self.repo.index.threads_at(tip) if n not in self.pending_refs}
        names.update(n for n, t in self.pending_refs.items() if t == tip)
        return sorted(names)

    def thread_containing(self, oid: str) -> str | None:
        names = [
            n for n in self.repo.index.threads_containing(oid, limit=len(self.pending_refs) + 1)
            if n not in self.pending_refs
        ]
        names += [n for n, ids in self.pending_history.items() if oid in ids]
        return min(names) if names else None

    def thread_for_upstream(self, source: str, upstream: str) -> str | None:
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

    def stored_run(self, ids: list[str]) -> tuple[int, tuple[int, ...]]:
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
        thread's tip.)"""
        n = len(ids)
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if self.contains(ids[mid]):
                lo = mid + 1
            else:
                hi = mid
        if lo < n - 1 and self.contains(ids[-1]):
            lo = n
        return lo, self.holes_before(ids, lo)

    def holes_before(self, ids: list[str], end: int) -> tuple[int, ...]:
        """The indexes of the missing ids among ``ids[:end]``."""
        first = first_missing(self, ids, end)
        if first >= end:
            return ()
        return (first, *(i for i in range(first + 1, end) if not self.contains(ids[i])))

    def read_bytes(self, oid: str) -> bytes:
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


def _decide(view: _View, payload: Payload, chain: Chain, thread: str | None, on_conflict: str, now_ms: int) -> _Plan:
    """The plan for one payload. ``stored`` (where the history leaves the store) decides the
    thread, as if nothing were missing; ``holes`` (messages before it deleted by hand) are
    only written again."""
    ids = chain.ids
    tip = chain.tip
    k, holes = view.stored_run(ids)
    trusted = thread
    src, up = payload.turn.source, payload.turn.upstream_thread_id
    if trusted is None and src and up:
        trusted = view.thread_for_upstream(src, up)
        if trusted is None:
            return _Plan(payload, chain, "created", _upstream_name(view, src, up, tip, now_ms), None, k, None,
                         holes=holes)
    if trusted is not None:
        return _decide_trusted(view, payload, chain, trusted, on_conflict, k, holes, now_ms)
    return _decide_untrusted(view, payload, chain, k, holes, now_ms)


def _decide_untrusted(view, payload, chain, k, holes, now_ms) -> _Plan:
    ids = chain.ids
    tip = chain.tip
    if k == len(ids):
        names = view.threads_at(tip)
        if names:
            return _Plan(payload, chain, "deduplicated", names[0], tip, k, tip, move_ref=False, holes=holes)
        if payload.turn.is_call() or payload.has_response:
            # A call whose every message is old, ending mid-thread: the turn is still new and
            # needs a thread to hang on.
            return _Plan(payload, chain, "created", _auto_name(view, tip, now_ms), None, k, None,
                         forked_from={"thread": view.thread_containing(tip), "message": tip, "threads": []},
                         holes=holes)
        # Reported only: no ref moves and no turn is written.
        return _Plan(payload, chain, "deduplicated", view.thread_containing(tip), ANY, k, tip, move_ref=False,
                     holes=holes)
    prefix_tip = ids[k - 1] if k else None
    if prefix_tip is not None:
        names = view.threads_at(prefix_tip)
        if len(names) == 1:
            return _Plan(payload, chain, "appended", names[0], prefix_tip, k, prefix_tip, holes=holes)
        holder = names[0] if names else view.thread_containing(prefix_tip)
        if not names and holder is not None:
            end = _end_past_a_hole(view, ids, k, holder)
            if end is not None:  # decide from there, as if nothing were missing
                return _decide_untrusted(view, payload, chain, end, view.holes_before(ids, end), now_ms)
        forked = {"thread": holder, "message": prefix_tip, "threads": names}
    else:
        forked = None
    return _Plan(payload, chain, "created", _auto_name(view, tip, now_ms), None, k, None, forked_from=forked,
                 holes=holes)


def _end_past_a_hole(view: _View, ids: list[str], k: int, holder: str) -> int | None:
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


def _decide_trusted(view, payload, chain, thread, on_conflict, k, holes, now_ms) -> _Plan:
    ids = chain.ids
    tip = chain.tip
    old = view.read_ref(thread)
    if old is None:
        return _Plan(payload, chain, "created", thread, None, k, None, holes=holes)
    at = _index_after(ids, old, k)
    if at is not None:  # the search stopped at a hole before the thread's tip (or at the tip itself)
        k = at + 1
        holes = view.holes_before(ids, k)
    if old == tip:
        return _Plan(payload, chain, "deduplicated", thread, old, k, old, move_ref=False, holes=holes)
    pos = {oid: i for i, oid in enumerate(ids)}
    if old in pos:
        return _Plan(payload, chain, "appended", thread, old, k, old, holes=holes)
    history: list[str] = []  # tip .. root
    for oid in view.iter_history(old):
        if oid == tip:
            # A prefix of the thread. Walked no further than needed: a hole deeper down
            # (which this payload may be healing) does not stop it.
            if k < len(ids):
                k, holes = len(ids), view.holes_before(ids, len(ids))
            return _Plan(payload, chain, "deduplicated", thread, old, k, old, move_ref=False, holes=holes)
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
        name = _fork_name(view, thread, tip)
        return _Plan(
            payload, chain, "forked", name, None, k, None,
            forked_from={"thread": thread, "message": at}, holes=holes,
        )
    at = f"after message {short(ids[common - 1])}" if common else "at the first message"
    raise DuplicateConflict(
        f"thread {thread!r} has a different history: the payload diverges {at} "
        f"(use --on-conflict fork to keep both)",
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


def _auto_name(view: _View, tip: str, now_ms: int) -> str:
    """Unique, time-sortable: ``YYYYMMDD-HHMMSS-<tip prefix>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now_ms / 1000))
    for n in (6, 10, 16, 64):
        name = f"{stamp}-{tip[:n]}"
        if view.read_ref(name) is None:
            return name
    return f"{stamp}-{tip}-{now_ms}"


def _fork_name(view: _View, thread: str, tip: str) -> str:
    for n in (6, 10, 16, 64):
        name = f"{thread}-fork-{tip[:n]}"
        if view.read_ref(name) is None:
            return check_thread_name(name)
    raise RefExists(f"cannot find a free name to fork {thread!r}")


def _upstream_name(view: _View, source: str, upstream: str, tip: str, now_ms: int) -> str:
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
    return _auto_name(view, tip, now_ms)


# -- the turn -------------------------------------------------------------------------------


def _make_turn(plan: _Plan, now_ms: int) -> None:
    p, chain = plan.payload, plan.chain
    info = p.turn
    is_call = info.is_call() or p.has_response
    new_msgs = len(chain.ids) - plan.stored
    if not is_call and (not plan.move_ref or plan.thread is None):
        return
    # input: for a call with a response, the request's last message (stable, so recording
    # the same call again writes the same turn); otherwise where the new messages start.
    if is_call and p.response and p.messages:
        inp = chain.ids[len(p.messages) - 1]
    elif new_msgs:
        inp = chain.ids[plan.stored - 1] if plan.stored else None
    else:
        inp = chain.tip
    if is_call:
        kind = "call"
    else:
        kind = "fork" if plan.status == "forked" else "append"
    if plan.status == "forked" and plan.forked_from.get("message") is not None:
        inp = plan.forked_from["message"]
    turn = Turn(
        kind=kind,
        thread=plan.thread or "",
        input=inp,
        output=chain.tip,
        model=info.model,
        resolved_model=info.resolved_model,
        options=info.options,
        usage=info.usage,
        started_at=info.started_at if info.started_at is not None else now_ms,
        duration_ms=info.duration_ms,
        error=info.error,
        source=info.source,
        upstream_thread_id=info.upstream_thread_id,
        forked_from=(plan.forked_from or {}).get("thread"),
        forked_at=(plan.forked_from or {}).get("message") if plan.status in ("created", "forked") else None,
        meta=info.meta,
    )
    try:
        plan.turn = codec.encode_and_hash(turn)
    except codec.EncodeError as e:
        raise SchemaValidationFailed(f"turn metadata: {e}") from e


def _drop_recorded_turn(repo, plan: _Plan, pending: set[str] | None = None) -> None:
    """The same call recorded again (same turn id) with nothing new: nothing to write."""
    if plan.turn and not plan.move_ref:
        tid = plan.turn[0]
        if (pending is not None and tid in pending) or repo.objects.contains(tid):
            plan.turn = None


def _reflog_message(plan: _Plan) -> str:
    n = plan.new_messages
    if plan.status == "created":
        return f"commit (new thread): {n} new message(s)"
    if plan.status == "forked":
        return f"commit (fork of {plan.forked_from['thread']}): {n} new message(s)"
    if plan.status == "appended":
        return f"commit: {n} new message(s)"
    return "commit: recorded call, nothing new"


# -- entry points ---------------------------------------------------------------------------


def prepare(repo, payload: Payload) -> Chain:
    """Hash a payload (no I/O). Raises the input errors before anything is written."""
    n = len(payload.all_messages)
    if n > repo.config.max_messages:  # parse_payload checks JSON input; this covers the rest
        raise PayloadTooLarge(
            f"{n} messages in one payload; the limit is {repo.config.max_messages} (limits.max_messages)"
        )
    info = payload.turn
    try:  # turn metadata must be storable before anything is decided or written
        codec.encode(Turn(kind="call", thread="", output="", options=info.options, usage=info.usage, meta=info.meta))
    except codec.EncodeError as e:
        raise SchemaValidationFailed(f"turn metadata: {e}") from e
    return build_chain(payload.all_messages, None, repo.config)


def check_on_conflict(on_conflict: object) -> str:
    """The one check of an ``on_conflict`` value (``--on-conflict``): reject or fork, else
    schema_validation_failed (docs/cli.md)."""
    if on_conflict not in ON_CONFLICT:
        raise SchemaValidationFailed(
            f"--on-conflict must be {' or '.join(ON_CONFLICT)}, not {on_conflict!r}", on_conflict=str(on_conflict)
        )
    return on_conflict  # type: ignore[return-value]


def read_head_before_commit(repo) -> str:
    """HEAD, read (and so validated) before anything is written: an unreadable HEAD stops a
    commit before its commit point, never after it."""
    return repo.refs.read_head()


def follow_head(repo, results: Sequence[CommitResult], head: str) -> None:
    """The one HEAD rule, for the library and the CLI alike: after a commit, HEAD names the
    (last) thread committed to, if that thread exists. ``head`` is HEAD as read before the
    commit point (``read_head_before_commit``).

    Writing HEAD comes after the commit point: if it fails (a full disk), the commit stands
    and the failure becomes a warning on the result, never an error."""
    target = None
    for r in results:
        if r.thread and thread_exists(repo, r.thread):
            target = r
    if target is not None:
        warning = move_head(repo, target.thread, head)
        if warning:
            target.warnings.append(warning)


def move_head(repo, thread: str, head: str) -> str | None:
    """Point HEAD (``head`` as read before the write) at ``thread`` after a write that
    stands. Returns a warning instead of raising when HEAD cannot be written."""
    if thread == head:
        return None
    try:
        repo.refs.write_head(thread)
    except (StorageFailed, OSError) as e:
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


def commit_payload(
    repo,
    payload: Payload,
    *,
    thread: str | None = None,
    on_conflict: str = "reject",
    now_ms: int | None = None,
    move_head: bool = False,
) -> CommitResult:
    """Store one conversation and move (at most) one thread. See DESIGN §5.

    ``move_head``: HEAD follows the thread committed to (``follow_head``); HEAD is then read
    before anything is written, so an unreadable HEAD fails the commit with nothing stored."""
    if thread is not None:
        check_thread_name(thread)
    check_on_conflict(on_conflict)
    head = read_head_before_commit(repo) if move_head else None
    result = _commit_payload(repo, payload, thread=thread, on_conflict=on_conflict, now_ms=now_ms)
    if head is not None:
        follow_head(repo, [result], head)
    return result


def _commit_payload(repo, payload: Payload, *, thread: str | None, on_conflict: str, now_ms: int | None) -> CommitResult:
    chain = prepare(repo, payload)
    if not chain.ids:
        raise SchemaValidationFailed("the conversation has no messages")
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    repo.index  # open (and if needed rebuild) the index before anything is written
    with repo.write_lock():
        repo.index.refresh_if_changed()  # refs moved by other processes since we opened
        for _ in range(_MAX_RETRIES):
            view = _View(repo)
            plan = _decide(view, payload, chain, thread, on_conflict, now)
            if plan.thread and plan.expected is None:
                # ``a/b`` beside a thread ``a``: refuse before writing (a retry would not help)
                repo.refs.check_free(plan.thread)
            _make_turn(plan, now)
            _drop_recorded_turn(repo, plan)
            objs = plan.objects()
            new = repo.objects.write_many(objs) if objs else 0
            crash_point("commit_after_objects")
            try:
                if plan.move_ref or plan.turn:
                    _move_ref(repo, plan, now)
            except (RefStale, RefExists, NotFound):
                repo.index.refresh_if_changed()  # the journal names what the other writer moved
                continue  # someone else moved the thread: decide again
            crash_point("commit_after_ref")
            return _finish(repo, [plan], [new])[0]
        raise RefStale("the thread kept moving under concurrent writers; try again")


def _ref_move(plan: _Plan, now_ms: int) -> RefMove:
    return RefMove(plan.thread, plan.chain.tip if plan.move_ref else plan.old_tip, expected=plan.expected,
                   message=_reflog_message(plan), turn=plan.turn[0] if plan.turn else None, time_ms=now_ms)


def _move_ref(repo, plan: _Plan, now_ms: int, *, fsync: bool | None = None) -> None:
    if plan.thread is None:
        return
    turn = plan.turn[0] if plan.turn else None
    new = plan.chain.tip if plan.move_ref else plan.old_tip
    repo.refs.update(
        plan.thread,
        new,
        expected=plan.expected,
        message=_reflog_message(plan),
        turn=turn,
        exists=repo.objects.contains,
        time_ms=now_ms,
    )


def _finish(repo, plans: Sequence[_Plan], news: Sequence[int]) -> list[CommitResult]:
    results = []
    for plan, new in zip(plans, news):
        moved = plan.move_ref
        appended = 0
        if moved:
            if plan.status == "appended" and isinstance(plan.expected, str):
                appended = len(plan.chain.ids) - plan.chain.ids.index(plan.expected) - 1
            else:
                appended = len(plan.chain.ids)
        results.append(
            CommitResult(
                status=plan.status,
                thread=plan.thread,
                tip=plan.chain.tip,
                deduplicated=(plan.status == "deduplicated"),
                appended_messages=appended,
                new_objects=new,
                new_messages=plan.new_messages,
                turn=plan.turn[0] if plan.turn else None,
                forked_from=plan.forked_from,
            )
        )
    crash_point("commit_before_index")
    try:
        repo.index.record_commits(plans)
    except Exception as e:  # the commit stands; the next command catches the index up
        for r in results:
            r.warnings.append(f"index not updated ({e}); it will catch up on the next command")
    return results


def commit_many(repo, payloads: Iterable[Payload], *, now_ms: int | None = None,
                move_head: bool = False) -> list[CommitResult]:
    """Bulk ingestion with the same decisions as ``commit_payload`` (no trusted thread name;
    ``source`` + ``upstream_thread_id`` in a payload still name its thread). ``move_head``:
    HEAD follows the last thread committed to, as for ``commit_payload``.

    All objects are written, then made durable with one sync; then every ref moves, then
    one more sync; then the index is updated in one transaction. Returns when all of it is
    durable. A ref that moved under us meanwhile is retried through ``commit_payload``.
    """
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    payloads = list(payloads)
    head = read_head_before_commit(repo) if move_head else None
    results = _commit_many(repo, payloads, now)
    if head is not None:
        follow_head(repo, results, head)
    return results


def _commit_many(repo, payloads: list[Payload], now: int) -> list[CommitResult]:
    chains = [prepare(repo, p) for p in payloads]
    for i, c in enumerate(chains):
        if not c.ids:
            raise SchemaValidationFailed(f"conversation {i} has no messages")
    fsync = repo.config.fsync
    repo.index  # open (and if needed rebuild) the index before anything is written
    with repo.write_lock():
        repo.index.refresh_if_changed()
        view = _View(repo)
        plans: list[_Plan] = []
        pending_turns: set[str] = set()
        for p, c in zip(payloads, chains):
            plan = _decide(view, p, c, None, "reject", now)
            if plan.thread and plan.expected is None and plan.thread not in view.pending_refs:
                repo.refs.check_free(plan.thread)
            _make_turn(plan, now)
            _drop_recorded_turn(repo, plan, pending_turns)
            if plan.turn:
                pending_turns.add(plan.turn[0])
            plans.append(plan)
            view.pending_objects.update(plan.new_ids)
            if plan.thread and plan.move_ref:
                view.pending_refs[plan.thread] = c.tip
                view.pending_history[plan.thread] = set(c.ids)  # a chain always starts at its root
            view.pending_parent.update(zip(c.ids, [None, *c.ids[:-1]]))
            new = set(plan.new_ids)
            view.pending_data.update((oid, c.data[i]) for i, oid in enumerate(c.ids) if oid in new)
            if plan.thread and p.turn.source and p.turn.upstream_thread_id:
                view.pending_upstream[(p.turn.source, p.turn.upstream_thread_id)] = plan.thread
        # Phase 1: every object, made durable at once: one pack for a large batch, else
        # loose files and one file-system flush.
        per_plan = []
        missing: set[str] = set()
        for plan in plans:
            per_plan.append(plan.objects())
            missing.update(plan.new_ids)
        total = sum(len(o) for o in per_plan)
        if total > object_store.PACK_THRESHOLD:  # one pack (read at call time: benchmarks patch it)
            written = repo.objects.write_packed((x for objs in per_plan for x in objs), missing=missing)
            news = []
            for objs in per_plan:
                mine = {oid for oid, _ in objs} & written
                written -= mine
                news.append(len(mine))
        else:  # a few objects: loose, each file and directory fsynced (parents first)
            news = [repo.objects.write_many(objs, missing=missing) if objs else 0 for objs in per_plan]
        crash_point("commit_after_objects")
        # Phase 2: refs, each a durable compare-and-swap: a power loss may leave some of the
        # batch's threads moved and others not (each conversation is its own commit), never
        # a torn ref file.
        # (Moved in batches: each batch's temp refs and reflog lines made durable with one
        # syncfs, renamed, then one more syncfs; see RefStore.update_many.)
        retry: list[int] = []
        movers = [i for i, plan in enumerate(plans) if plan.thread is not None and (plan.move_ref or plan.turn)]
        outcomes = repo.refs.update_many([_ref_move(plans[i], now) for i in movers], exists=repo.objects.contains)
        for i, out in zip(movers, outcomes):
            if isinstance(out, (RefStale, RefExists, NotFound)):
                retry.append(i)
            elif isinstance(out, Exception):
                raise out
        crash_point("commit_after_ref")
        ok = [i for i in range(len(plans)) if i not in set(retry)]
        results: list[CommitResult | None] = [None] * len(plans)
        for i, r in zip(ok, _finish(repo, [plans[i] for i in ok], [news[i] for i in ok])):
            results[i] = r
    for i in retry:
        repo.index.refresh_if_changed()
        results[i] = commit_payload(repo, payloads[i], now_ms=now)
    return results  # type: ignore[return-value]
