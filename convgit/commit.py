"""``commit``: store a conversation, deduplicated, and decide which thread moves (DESIGN §5).

Everything that can reject a payload happens before the first write. Messages are always
deduplicated by id; the decision (convgit/decide.py) only chooses the ref. Each commit is one
repository transaction (convgit/transaction.py): objects, the ref's compare-and-swap, then the
index from what moved and the HEAD rule. Bulk ingestion (``commit_many``) plans every payload
first, then makes all objects durable at once (one pack, or staged loose files), then moves
every ref in durable batches, so thousands of conversations cost a few flushes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from . import codec, object_store
from .config import crash_point
from .decide import Plan, View, decide
from .errors import NotFound, ObjectCorrupt, PayloadTooLarge, RefExists, RefStale, SchemaValidationFailed
from .ids import check_thread_name
from .ingest import Chain, Payload, build_chain
from .objects import Message, Turn

if TYPE_CHECKING:
    from .ref_move import RefMove

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
    embedded_chunks: int = 0  # chunks embedded after the commit point (``embed.on_commit``)

    def to_json(self) -> dict:
        """The ``commit --json`` document (docs/json.md): the memory-hub contract's fields
        (``status`` ``ok``, ``id``, ``deduplicated``, ``appended_messages``,
        ``embedded_chunks``), and convgit's own detail (``action``, ``thread``, ``tip``…)."""
        return {
            "status": "ok",
            "action": self.status,
            "id": self.thread,
            "thread": self.thread,
            "tip": self.tip,
            "deduplicated": self.deduplicated,
            "appended_messages": self.appended_messages,
            "new_objects": self.new_objects,
            "new_messages": self.new_messages,
            "turn": self.turn,
            "forked_from": self.forked_from,
            "embedded_chunks": self.embedded_chunks,
            **({"warnings": list(self.warnings)} if self.warnings else {}),
        }


# -- the turn -------------------------------------------------------------------------------


def _make_turn(plan: Plan, now_ms: int) -> None:
    p, chain = plan.payload, plan.chain
    info = p.turn
    is_call = info.is_call() or p.has_response
    new_msgs = len(chain.ids) - plan.stored
    if not is_call and (not plan.move_ref or plan.thread is None):
        return
    # input: for a call with a response, the request's last message (stable, so recording
    # the same call again writes the same turn); otherwise where the new messages start.
    off = len(chain.ids) - len(p.all_messages)  # the stored history a continuation starts below
    if is_call and p.response and (p.messages or off):
        inp = chain.ids[off + len(p.messages) - 1]
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


def _drop_recorded_turn(repo, plan: Plan, pending: set[str] | None = None) -> None:
    """The same call recorded again (same turn id) with nothing new: nothing to write."""
    if plan.turn and not plan.move_ref:
        tid = plan.turn[0]
        if (pending is not None and tid in pending) or repo.objects.contains(tid):
            plan.turn = None


def _reflog_message(plan: Plan) -> str:
    n = plan.new_messages
    if plan.status == "created":
        return f"commit (new thread): {n} new message(s)"
    if plan.status == "forked":
        return f"commit (fork of {plan.forked_from['thread']}): {n} new message(s)"
    if plan.status == "appended":
        return f"commit: {n} new message(s)"
    return "commit: recorded call, nothing new"


# -- entry points ---------------------------------------------------------------------------


def prepare(repo, payload: Payload, after: str | None = None, *, chain: Chain | None = None) -> Chain:
    """Hash a payload. Raises the input errors before anything is written.

    ``chain``: the payload's messages hashed already (``build_chain(payload.all_messages,
    None, repo.config)``, e.g. by a caller that needed the tip first): used as it is.

    ``after``: the id of a stored message the payload continues (``commit --continue``): its
    messages are appended below it. A first message naming a stored ``"parent"`` id means the
    same. The chain returned then starts at the root, with that message's stored history
    first (read from the store), so the thread decision sees the whole conversation."""
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
    drafts = payload.all_messages
    if after is None and drafts and drafts[0].claimed_parent is not None:
        after = drafts[0].claimed_parent
        if not repo.objects.contains(after):
            raise NotFound(f"message 0 claims parent {after}, which is not in this store "
                           "(a first message's parent must be a stored message id)", claimed=after)
    if not drafts:
        raise SchemaValidationFailed("the conversation has no messages")
    chain = chain if chain is not None and after is None else build_chain(drafts, after, repo.config)
    if after is None:
        return chain
    full = _history(repo, after)
    for name in ("ids", "data", "messages", "blobs"):
        getattr(full, name).extend(getattr(chain, name))
    return full


def _history(repo, tip: str) -> Chain:
    """The stored chain from the root down to ``tip`` (a message), as a Chain."""
    rev: list[tuple[str, bytes, object]] = []
    oid: str | None = tip
    while oid is not None:
        data = repo.objects.read_bytes(oid)  # read once: bytes and message (was read twice)
        msg = codec.decode(data, oid)
        if not isinstance(msg, Message):
            raise ObjectCorrupt(f"{oid} is a {type(msg).__name__.lower()}, not a message", oid=oid)
        rev.append((oid, data, msg))
        oid = msg.parent
    out = Chain()
    for oid, data, msg in reversed(rev):
        out.ids.append(oid)
        out.data.append(data)
        out.messages.append(msg)
        out.blobs.append([])  # stored already, with its blobs
    return out


def check_on_conflict(on_conflict: object) -> str:
    """The one check of an ``on_conflict`` value (``--on-conflict``): reject or fork, else
    schema_validation_failed (docs/cli.md)."""
    if on_conflict not in ON_CONFLICT:
        raise SchemaValidationFailed(
            f"--on-conflict must be {' or '.join(ON_CONFLICT)}, not {on_conflict!r}", on_conflict=str(on_conflict)
        )
    return on_conflict  # type: ignore[return-value]


def commit_payload(
    repo,
    payload: Payload,
    *,
    thread: str | None = None,
    on_conflict: str = "reject",
    now_ms: int | None = None,
    move_head: bool = False,
    after: str | None = None,
) -> CommitResult:
    """Store one conversation and move (at most) one thread, in one repository transaction.
    See DESIGN §5.

    ``move_head``: HEAD follows the thread committed to (the HEAD rule of the transaction);
    HEAD is then read before anything is written, so an unreadable HEAD fails the commit with
    nothing stored. ``after``: a stored message id the payload's messages continue
    (``prepare``)."""
    if thread is not None:
        check_thread_name(thread)
    check_on_conflict(on_conflict)
    chain = prepare(repo, payload, after)
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    with repo.transaction(fast_forward=True) as tx:
        if move_head:
            tx.read_head()
            tx.head_follows_moves = True  # (HEAD's new content staged before the move's syncfs)
        result = _commit_one(tx, payload, chain, thread, on_conflict, now)
        if move_head:
            tx.follow(result.thread)
    result.warnings.extend(tx.warnings)
    return result


def _commit_one(tx, payload: Payload, chain: Chain, thread: str | None, on_conflict: str, now: int) -> CommitResult:
    """Decide, write the objects, move the ref; decide again after a lost compare-and-swap."""
    repo = tx.repo
    for _ in range(_MAX_RETRIES):
        plan = decide(View(repo), payload, chain, thread, on_conflict, now)
        if plan.thread and plan.expected is None:
            # ``a/b`` beside a thread ``a``: refuse before writing (a retry would not help)
            repo.refs.check_free(plan.thread)
        _make_turn(plan, now)
        _drop_recorded_turn(repo, plan)
        # The plan's messages were just seen absent (decide): written without probing for
        # them again (each probe of a miss reads every pack's index), as commit_many does.
        new = tx.write_objects(plan.objects(), missing=set(plan.new_ids), decoded=_decoded(plan))
        crash_point("commit_after_objects")
        try:
            if plan.thread is not None and (plan.move_ref or plan.turn):
                m = _ref_move(plan, now)
                tx.move(m.name, m.new, expected=m.expected, message=m.message, turn=m.turn, time_ms=m.time_ms)
        except (RefStale, RefExists, NotFound):
            tx.catch_up()  # the journal names what the other writer moved
            continue  # someone else moved the thread: decide again
        crash_point("commit_after_ref")
        return _result(plan, new)
    raise RefStale("the thread kept moving under concurrent writers; try again")


def _decoded(plan: Plan) -> dict[str, object]:
    """The messages the plan writes, as already decoded (the index uses them instead of
    decoding). Only those: the index walks a chain down to its first indexed message, so the
    stored ones are never read, and handing them over would make a long re-sent history look
    like a bulk of new messages (looked up by id, every one, in ``Writer._not_indexed``)."""
    c = plan.chain
    return {c.ids[i]: c.messages[i] for i in (*plan.holes, *range(plan.stored, len(c.ids)))}


def _ref_move(plan: Plan, now_ms: int) -> RefMove:
    from .ref_move import RefMove  # (here: a re-send that moves nothing never makes one)

    return RefMove(plan.thread, plan.chain.tip if plan.move_ref else plan.old_tip, expected=plan.expected,
                   message=_reflog_message(plan), turn=plan.turn[0] if plan.turn else None, time_ms=now_ms)


def _result(plan: Plan, new: int) -> CommitResult:
    appended = 0
    if plan.move_ref:
        if plan.status == "appended" and isinstance(plan.expected, str):
            appended = len(plan.chain.ids) - plan.chain.ids.index(plan.expected) - 1
        else:
            appended = len(plan.chain.ids)
    return CommitResult(
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


def commit_many(repo, payloads: Iterable[Payload], *, now_ms: int | None = None,
                move_head: bool = False, threads: list[str | None] | None = None, on_conflict: str = "reject",
                chains: list[Chain | None] | None = None,
                blobs: list[tuple[str, bytes]] = ()) -> list[CommitResult]:
    """Bulk ingestion with the same decisions as ``commit_payload``, in one repository
    transaction. ``threads``: a trusted thread name per payload (None: decided, as without
    it; ``source`` + ``upstream_thread_id`` in a payload still name its thread), with
    ``on_conflict`` as for ``commit_payload``. ``chains``: payloads hashed already
    (``prepare``'s ``chain``), None for those to hash here. ``move_head``: HEAD follows the
    last thread committed to, as for ``commit_payload``. ``blobs``: more objects (encoded,
    with their ids) written with the batch's, before them: blobs its turns' metadata names.

    All objects are written and made durable at once; then every ref moves, in durable
    batches, a thread committed to several times moved once (its reflog has a line per
    commit); then the index is updated from what moved. Returns when all of it is durable. A
    ref that moved under us meanwhile is decided again, in the same transaction.
    """
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    payloads = list(payloads)
    check_on_conflict(on_conflict)
    threads = list(threads) if threads is not None else [None] * len(payloads)
    given = list(chains) if chains is not None else [None] * len(payloads)
    if len(threads) != len(payloads) or len(given) != len(payloads):
        raise ValueError("threads and chains must have one entry per payload")
    for t in threads:
        if t is not None:
            check_thread_name(t)
    chains = []
    for i, p in enumerate(payloads):
        try:
            chains.append(prepare(repo, p, chain=given[i]))
        except SchemaValidationFailed as e:
            if e.message == "the conversation has no messages":
                raise SchemaValidationFailed(f"conversation {i} has no messages") from None
            raise
    with repo.transaction(fast_forward=True) as tx:
        if move_head:
            tx.read_head()
        results = _commit_batch(tx, payloads, chains, now, threads, on_conflict, list(blobs))
        if move_head:
            for r in results:
                tx.follow(r.thread)
    for r in results:
        if tx.index_warning:
            r.warnings.append(tx.index_warning)
    if tx.head_warning:  # on the result HEAD was to follow
        next(r for r in reversed(results) if r.thread).warnings.append(tx.head_warning)
    return results


def _commit_batch(tx, payloads: list[Payload], chains: list[Chain], now: int, threads: list[str | None],
                  on_conflict: str, blobs: list[tuple[str, bytes]]) -> list[CommitResult]:
    repo = tx.repo
    view = View(repo)
    plans: list[Plan] = []
    pending_turns: set[str] = set()
    for p, c, t in zip(payloads, chains, threads):
        plan = decide(view, p, c, t, on_conflict, now)
        if plan.thread and plan.expected is None and plan.thread not in view.pending_refs:
            repo.refs.check_free(plan.thread)
        _make_turn(plan, now)
        _drop_recorded_turn(repo, plan, pending_turns)
        if plan.turn:
            pending_turns.add(plan.turn[0])
        plans.append(plan)
        view.add_pending(plan)
    # Phase 1: every object, made durable at once: one pack for a large batch, else loose
    # files staged and flushed together.
    per_plan = [blobs] + [plan.objects() for plan in plans]  # (the blobs first: turns name them)
    missing = {oid for plan in plans for oid in plan.new_ids}
    decoded = {oid: m for plan in plans for oid, m in _decoded(plan).items()}
    if sum(len(o) for o in per_plan) > object_store.PACK_THRESHOLD:  # (read at call time: benchmarks patch it)
        written = tx.write_pack((x for objs in per_plan for x in objs), missing=missing, decoded=decoded)
        news = []
        for objs in per_plan:
            mine = {oid for oid, _ in objs} & written
            written -= mine
            news.append(len(mine))
    else:
        news = [tx.write_objects(objs, missing=missing, decoded=decoded) for objs in per_plan]
    news = news[1:]
    crash_point("commit_after_objects")
    # Phase 2: refs, each a durable compare-and-swap: a power loss may leave some of the
    # batch's threads moved and others not (each conversation is its own commit), never a
    # torn ref file (RefStore.update_many: one syncfs before the renames, one after).
    movers = [i for i, plan in enumerate(plans) if plan.thread is not None and (plan.move_ref or plan.turn)]
    groups = _coalesce(plans, movers, now)
    outcomes = tx.move_many([m for m, _ in groups])
    retry: set[int] = set()
    for (_, members), out in zip(groups, outcomes):
        if isinstance(out, (RefStale, RefExists, NotFound)):
            retry.update(members)
        elif isinstance(out, Exception):
            raise out
    crash_point("commit_after_ref")
    results = [None if i in retry else _result(plans[i], news[i]) for i in range(len(plans))]
    for i in sorted(retry):  # another writer moved the thread: decide this one again
        tx.catch_up()
        results[i] = _commit_one(tx, payloads[i], chains[i], threads[i], on_conflict, now)
    return results  # type: ignore[return-value]


def _coalesce(plans: list[Plan], movers: list[int], now: int) -> list[tuple[RefMove, list[int]]]:
    """The ref moves of a batch, a thread's successive moves made one (its earlier ones as
    ``steps``: a reflog line each, one rename): on ext4 replacing a ref costs far more than
    anything else a commit does. Returns (move, the plans it carries)."""
    from .ref_move import RefMove

    groups: list[tuple[RefMove, list[int]]] = []
    last: dict[str, int] = {}  # thread -> its group
    for i in movers:
        m = _ref_move(plans[i], now)
        g = last.get(m.name)
        if g is not None and m.expected == groups[g][0].new:
            prev, members = groups[g]
            steps = (*prev.steps, (prev.new, prev.turn, prev.message))
            groups[g] = (RefMove(m.name, m.new, expected=prev.expected, message=m.message, turn=m.turn,
                                 time_ms=m.time_ms, steps=steps), [*members, i])
            continue
        last[m.name] = len(groups)
        groups.append((m, [i]))
    return groups
