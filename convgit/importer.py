"""``import``: many conversations into the store in bulk, one report line per conversation.

Every conversation is decided on its own (DESIGN §5): a bad one is reported and never stops,
or partly writes, the others. Conversations are processed in batches; a batch is planned in
memory, then its objects are written in one pack (or loose with one flush), then its refs
move, then the index catches up — the same order as ``commit_many``.

Thread identity is ``source`` + ``upstream_id`` (the source's conversation id):

- tree formats (ChatGPT, Claude with parent links, Open WebUI, LibreChat): the export's tree
  is the truth. The main thread ``<source>/<id>`` follows the current leaf (even across a
  branch switch: the move is in the reflog); every other leaf gets ``<source>/<id>-alt-<n>``;
- linear formats: the conversation is one history; a thread whose earlier message differs
  is a ``duplicate_conflict`` (reported, nothing written for that conversation).

Per-message provenance (time, model, usage, the source's leftover fields) goes into one
``import`` turn per message; the thread's own ``import`` turn lists them, and maps source
message ids to message ids (``meta.aliases``) — so the index (aliases, dates, models) is
rebuilt from objects and reflogs like everything else.

A conversation without an upstream id is recognised by its content: when every one of its
tips (the main one and each other leaf) is already the tip of, or inside, a thread whose
turns have the same source, it is ``deduplicated`` and nothing is written (the same tree of
messages is the same conversation).

A convgit export (``conv.native``, ingest/native.py) is planned by ``_plan_native``: the
thread comes back under its own name, and its recorded reflog lines are replayed (same
turns, same times, the same moves where both ends are in the exported history) so the
index finds the same provenance as in the store it came from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from . import codec, graph, object_store
from .decide import View, decide
from .config import crash_point
from .errors import ConvgitError, InvalidRefName, Locked, NotFound, RefExists, RefStale, StorageFailed
from .ids import check_thread_name
from .ingest.sources import Rejected
from .ingest.model import Conversation, NativeThread, Payload
from .ingest.tree import Built, build_tree
from .objects import Turn
from .refs import RefMove
from .transaction import thread_exists

BATCH_MESSAGES = 10_000  # bounds memory: a batch is planned whole before it is written
BATCH_CONVERSATIONS = 2_000


@dataclass
class ConvReport:
    """One line of the import report: one conversation, what became of it (imported,
    appended, updated, deduplicated, conflict, skipped), its threads and counts, or its error."""

    label: str
    status: str  # imported | appended | updated | deduplicated | conflict | skipped
    source: str | None = None
    upstream_id: str | None = None
    title: str | None = None
    threads: list[dict] = field(default_factory=list)
    messages: int = 0
    new_messages: int = 0
    appended: int = 0
    error_code: str | None = None
    reason: str | None = None
    warnings: list[str] = field(default_factory=list)
    warning: bool = False  # skipped with nothing to import there: not a failure, unless it is all a file holds

    def to_json(self) -> dict:
        """This conversation's entry of ``import --json``."""
        d = {
            "label": self.label, "status": self.status, "source": self.source,
            "upstream_id": self.upstream_id, "title": self.title, "threads": self.threads,
            "messages": self.messages, "new_messages": self.new_messages, "appended": self.appended,
        }
        if self.error_code:
            d["error_code"] = self.error_code
            d["error_message"] = d["reason"] = self.reason
            if self.warning:
                d["warning"] = True
        if self.warnings:
            d["warnings"] = self.warnings
        return d


STATUSES = ("imported", "appended", "updated", "deduplicated", "conflict", "skipped")


@dataclass
class ImportReport:
    """The whole import: one ConvReport per conversation, new objects, time, warnings."""

    conversations: list[ConvReport] = field(default_factory=list)
    dry_run: bool = False
    new_objects: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)  # after the import stood (HEAD not moved)
    embedded_chunks: int = 0  # chunks embedded after the commit point (``embed.on_commit``)

    def counts(self) -> dict[str, int]:
        """How many conversations ended in each status."""
        out = {s: 0 for s in STATUSES}
        for c in self.conversations:
            out[c.status] += 1
        return out

    @property
    def failures(self) -> list[ConvReport]:
        """The conversations that failed (warnings excluded)."""
        return [c for c in self.conversations if c.error_code is not None and not c.warning]

    def to_json(self) -> dict:
        """The ``import --json`` document: ``ok``, ``partial`` or ``failed``, counts and lines."""
        ok = len(self.conversations) - len(self.failures)
        status = "ok" if not self.failures else ("partial" if ok else "failed")
        return {
            "status": status, "dry_run": self.dry_run, "counts": self.counts(),
            "new_messages": sum(c.new_messages for c in self.conversations),
            "new_objects": self.new_objects, "embedded_chunks": self.embedded_chunks,
            "seconds": round(self.seconds, 3),
            "conversations": [c.to_json() for c in self.conversations],
            **({"warnings": list(self.warnings)} if self.warnings else {}),
        }


@dataclass
class _Move:
    thread: str
    tip: str
    old: str | None
    expected: object
    status: str  # created | appended | moved | deduplicated | recorded
    branch: str
    move: bool
    forked_from: str | None = None
    forked_at: str | None = None
    turn: tuple[str, bytes] | None = None
    # A convgit export: the reflog lines to write, in order (new tip, turn, time, message).
    replay: list[tuple[str, str | None, int, str]] = field(default_factory=list)


@dataclass
class _Plan:
    built: Built
    report: ConvReport
    moves: list[_Move]
    new_ids: list[str]
    subturns: list[tuple[str, bytes]] = field(default_factory=list)
    turns: dict[str, Turn] = field(default_factory=dict)  # every turn encoded, by id (the index needs no decode)


class _State:
    """What a batch has decided so far, on top of the store (refs, objects, identities)."""

    def __init__(self, repo) -> None:
        self.repo = repo
        self.view = View(repo)
        self.upstream: dict[tuple[str, str], dict[str, str | None]] = {}
        self.aliases: set[tuple[str, str, str]] = set()
        self.pending_dirs: set[str] = set()  # directories that pending thread names need
        self.sources: dict[str, set[str]] = {}  # thread -> sources of its turns (read once)
        self.named: dict[str, set[str]] = {}  # thread -> turns its reflog names (read once)

    def add_ref(self, name: str, tip: str) -> None:
        self.view.pending_refs[name] = tip
        self.pending_dirs.update(_dirs(name))

    def threads_of(self, source: str, upstream: str) -> dict[str, str | None]:
        key = (source, upstream)
        if key not in self.upstream:
            self.upstream[key] = dict(self.repo.index.upstream_threads(source, upstream))
        return self.upstream[key]

    def free_name(self, name: str) -> str:
        for n in range(1, 1000):
            cand = name if n == 1 else f"{name}-{n}"
            try:
                check_thread_name(cand)
            except InvalidRefName:
                break
            if cand in self.view.pending_refs or self.view.read_ref(cand) is not None:
                continue
            try:
                self.repo.refs.check_free(cand)
            except RefExists:
                continue
            if cand in self.pending_dirs or any(d in self.view.pending_refs for d in _dirs(cand)):
                continue
            return cand
        raise RefExists(f"no free thread name like {name!r}")


def _dirs(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _safe(s: str, n: int) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in s).strip("-.")[:n].rstrip("-.")


def base_name(conv: Conversation, tip: str) -> str:
    """The thread name an imported conversation gets: ``<source>/<upstream id>`` (or the
    first 12 hex of its tip), made safe as a ref name."""
    src = _safe(conv.source, 40) or "import"
    up = _safe(conv.upstream_id or "", 100)
    name = f"{src}/{up or tip[:12]}"
    try:
        return check_thread_name(name)
    except InvalidRefName:
        return f"{src}/{tip[:12]}"


# -- planning -------------------------------------------------------------------------------


def _plan(st: _State, b: Built, now: int) -> _Plan:
    conv = b.conv
    if conv.native is not None:
        return _plan_native(st, b, now)
    moves = _plan_tree(st, b, now) if conv.tree else _plan_linear(st, b, now)
    rep = ConvReport(conv.label, "deduplicated", conv.source, conv.upstream_id, conv.title,
                     messages=len(b.data), warnings=list(conv.warnings))
    view = st.view
    heads = {m.tip for m in moves} | {b.main, *b.heads}
    new: dict[str, None] = {}
    for h in heads:
        path = b.path(h)
        k = view.stored_prefix(path)
        for oid in path[k:]:
            new.setdefault(oid)
    plan = _Plan(b, rep, moves, list(new))
    _provenance(st, plan, now)
    if not any(m.turn for m in plan.moves):  # no move names them: they would be unreachable
        plan.subturns = []
    return plan


def _recognised(st: _State, b: Built) -> bool:
    """A conversation without an upstream id, already here: each of its tips is the tip of,
    or inside, a thread that a conversation of the same source made or moved."""
    source = b.conv.source
    view = st.view
    for tip in {b.main, *b.heads}:
        if not view.contains(tip):
            return False
        names = set(view.threads_at(tip))
        names.update(st.repo.index.threads_containing(tip, limit=64))
        names.update(n for n, ids in view.pending_history.items() if tip in ids)
        if not any(source in _thread_sources(st, n) for n in names if view.read_ref(n) is not None):
            return False
    return True


def _thread_sources(st: _State, name: str) -> set[str]:
    if name not in st.sources:
        out: set[str] = set()
        for tid in _named_turns(st, name):
            t = graph.find_turn(st.repo.objects, tid)
            if t is not None and t.source:
                out.add(t.source)
        st.sources[name] = out
    return st.sources[name]


def _named_turns(st: _State, name: str) -> set[str]:
    """The turns the reflog of thread ``name`` names (plus what this batch will add)."""
    if name not in st.named:
        st.named[name] = {e.turn for e in st.repo.refs.read_log(name) if e.turn}
    return st.named[name]



def _plan_linear(st: _State, b: Built, now: int) -> list[_Move]:
    conv = b.conv
    chain = b.chain(b.main)
    payload = Payload(messages=tuple(n.draft for n in b.order))
    thread = None
    if conv.upstream_id:
        known = st.threads_of(conv.source, conv.upstream_id)
        thread = next((t for t, br in known.items() if br in (None, "main")), None)
        if thread is None:
            thread = st.free_name(base_name(conv, chain.tip))
    p = decide(st.view, payload, chain, thread, "reject", now)  # raises duplicate_conflict
    name = p.thread
    if p.status == "created" and thread is None:
        name = st.free_name(base_name(conv, chain.tip))
    if name is None:
        return []
    if not p.move_ref:  # already there: the thread stays where it is (maybe further on)
        old = st.view.read_ref(name)
        return [_Move(name, old, old, old, "deduplicated", "main", False)] if old else []
    status = {"created": "created", "appended": "appended"}.get(p.status, "deduplicated")
    return [_Move(name, chain.tip, p.old_tip, p.expected, status, "main", p.move_ref)]


def _plan_tree(st: _State, b: Built, now: int) -> list[_Move]:
    conv = b.conv
    view = st.view
    if not conv.upstream_id and _recognised(st, b):
        return []
    known = st.threads_of(conv.source, conv.upstream_id) if conv.upstream_id else {}
    main_thread = next((t for t, br in known.items() if br in (None, "main")), None)
    moves: list[_Move] = []
    leaves = list(b.heads)
    main_path = b.path(b.main)
    if main_thread is not None:
        old = view.read_ref(main_thread)
        if old is None or old not in b.data:
            # The thread holds messages the export does not have: keep it, and give the
            # export's current path a thread of its own.
            conv.warnings.append(f"thread {main_thread} has messages not in this export: left as it is")
            leaves.insert(0, b.main)
            main_thread = None
        else:
            moves.append(_move(main_thread, b.main, old, "main", set(main_path)))
    else:
        moves.append(_Move(st.free_name(base_name(conv, b.main)), b.main, None, None, "created", "main", True))
    main_name = moves[0].thread if moves else None
    alts = {t: br for t, br in known.items() if br not in (None, "main")}
    tips = {t: view.read_ref(t) for t in alts}
    base = base_name(conv, b.main)
    n = 0
    main_set = set(main_path)
    for leaf in leaves:
        path = b.path(leaf)
        pset = set(path)
        cands = [t for t in alts if tips[t] in pset]
        if cands:
            key = b.head_key.get(leaf)
            t = next((c for c in cands if alts[c] == key), cands[0])
            del alts[t]
            moves.append(_move(t, leaf, tips[t], key or leaf, pset))
            continue
        while True:
            n += 1
            name = f"{base}-alt-{n}"
            if name not in known and name not in view.pending_refs and view.read_ref(name) is None:
                break
        fork_at = next((o for o in reversed(path) if o in main_set), None)
        moves.append(_Move(st.free_name(name), leaf, None, None, "created", b.head_key.get(leaf, leaf), True,
                           forked_from=main_name, forked_at=fork_at))
    return moves


def _move(thread: str, tip: str, old: str, branch: str, path: set[str]) -> _Move:
    if old == tip:
        return _Move(thread, tip, old, old, "deduplicated", branch, False)
    return _Move(thread, tip, old, old, "appended" if old in path else "moved", branch, True)


def _provenance(st: _State, plan: _Plan, now: int) -> None:
    """Per-message turns and aliases for the source ids not recorded yet."""
    b = plan.built
    conv = b.conv
    new_set = set(plan.new_ids)
    pairs = [(n.key, b.oid[n.key]) for n in b.order if n.alias]
    known = st.repo.index.known_aliases(conv.source, pairs) if pairs else set()
    aliases: dict[str, str] = {}
    subturns: list[tuple[str, bytes]] = []
    base = base_name(conv, b.main)
    for n in b.order:
        oid = b.oid[n.key]
        pair = (n.key, oid)
        if n.alias:
            if pair in known or (conv.source, *pair) in st.aliases:
                continue
            aliases[n.key] = oid
        elif oid not in new_set:
            continue
        if n.time_ms is None and n.model is None and not n.meta and n.usage is None and n.duration_ms is None:
            continue
        inp = b.parent[oid]
        for _ in range(n.span - 1):
            inp = b.parent[inp] if inp is not None else None
        meta = dict(n.meta or {})
        if n.alias:
            meta["source_id"] = n.key
        t = b.time.get(n.key)
        turn = Turn(kind="import", thread=base, input=inp, output=oid, model=n.model, resolved_model=n.resolved_model,
                    options=n.options, usage=n.usage, started_at=t if t is not None else now,
                    duration_ms=n.duration_ms, source=conv.source, meta=meta or None)
        subturns.append(_encode(turn))
        plan.turns[subturns[-1][0]] = turn
    plan.subturns = subturns
    moving = [m for m in plan.moves if m.move]
    if (aliases or subturns) and not moving and plan.moves:
        m = plan.moves[0]
        m.status = "recorded" if m.status == "deduplicated" else m.status
        moving = [m]
    for i, m in enumerate(moving):
        info = conv.turn
        meta: dict = {"branch": m.branch}
        if i == 0:
            if aliases:
                meta["aliases"] = aliases
            if subturns:
                meta["turns"] = [tid for tid, _ in subturns]
        if m.branch == "main":
            if conv.title:
                meta["title"] = conv.title
            if conv.meta:
                meta["conversation"] = conv.meta
        if info.meta:
            meta["call"] = info.meta
        turn = Turn(kind="call" if info.is_call() else "import", thread=m.thread,
                    input=m.old if m.old is not None else m.forked_at, output=m.tip, model=info.model,
                    resolved_model=info.resolved_model, options=info.options, usage=info.usage,
                    started_at=info.started_at if info.started_at is not None else now,
                    duration_ms=info.duration_ms, error=info.error, source=conv.source,
                    upstream_thread_id=conv.upstream_id, forked_from=m.forked_from, forked_at=m.forked_at, meta=meta)
        m.turn = _encode(turn)
        plan.turns[m.turn[0]] = turn
    for k, oid in aliases.items():
        st.aliases.add((conv.source, k, oid))


def _encode(turn: Turn) -> tuple[str, bytes]:
    try:
        return codec.encode_and_hash(turn)
    except codec.EncodeError as e:
        from .errors import SchemaValidationFailed

        raise SchemaValidationFailed(f"metadata cannot be stored: {e}") from e


def _register(st: _State, plan: _Plan) -> None:
    b = plan.built
    st.view.pending_objects.update(plan.new_ids)
    conv = b.conv
    for m in plan.moves:
        if m.move:
            st.add_ref(m.thread, m.tip)
            path = b.path(m.tip)
            st.view.pending_history[m.thread] = set(path)
            st.view.pending_parent.update(zip(path, [None, *path[:-1]]))
            new = set(plan.new_ids)
            st.view.pending_data.update((oid, b.data[oid]) for oid in path if oid in new)
        if conv.upstream_id:
            st.threads_of(conv.source, conv.upstream_id)[m.thread] = m.branch
        if m.move:
            st.sources.setdefault(m.thread, set()).add(conv.source)


def _finish_report(plan: _Plan) -> None:
    rep = plan.report
    rep.new_messages = len(plan.new_ids)
    rep.threads = [
        {"thread": m.thread, "status": m.status, "tip": m.tip, "old": m.old, "branch": m.branch}
        for m in plan.moves
    ]
    if any(m.status == "created" and m.branch == "main" for m in plan.moves):
        rep.status = "imported"
    elif rep.new_messages:
        rep.status = "appended"
    elif any(m.status != "deduplicated" for m in plan.moves):
        rep.status = "updated"
    else:
        rep.status = "deduplicated"
    rep.appended = rep.new_messages


# -- a convgit export -----------------------------------------------------------------------

REPLAY_MESSAGE = "import native: replay"


def _plan_native(st: _State, b: Built, now: int) -> _Plan:
    """A thread convgit exported: the same thread again is deduplicated (turns it lacks are
    recorded at its tip); otherwise a new thread under the exported name (a free-name
    suffix only if that name is taken) whose reflog replays the exported one."""
    conv = b.conv
    nat: NativeThread = conv.native
    tip = b.main
    view = st.view
    name = _native_name(nat, conv, tip)
    rep = ConvReport(conv.label, "deduplicated", conv.source, None, conv.title, messages=len(b.data),
                     warnings=list(conv.warnings))
    path = b.path(tip)
    k = view.stored_prefix(path)
    new_ids = list(path[k:])
    moves: list[_Move] = []
    # No thread and no recorded history (the export of a message id): like commit, a stored
    # tip is already here.
    nameless = nat.name is None and not nat.reflog and view.contains(tip)
    cands = [] if nameless else [name] + [t for t in view.threads_at(tip) if t != name]
    for t in cands:
        cur = view.read_ref(t)
        if cur is None or not (cur == tip or (t == name and _holds(st, t, tip))):
            continue
        have = _named_turns(st, t)
        missing: dict[str, object] = {}
        for e in nat.reflog:
            if e.turn not in have:
                missing.setdefault(e.turn, e)
        if missing and t != name:
            continue  # another thread at this tip, with another history: not this one
        if missing:
            replay = [(cur, e.turn, e.time_ms, e.message) for e in missing.values()]
            moves = [_Move(t, cur, cur, cur, "recorded", "main", False, replay=replay)]
        else:
            moves = [_Move(t, cur, cur, cur, "deduplicated", "main", False)]
        break
    else:
        if not nameless:
            moves = [_Move(st.free_name(name), tip, None, None, "created", "main", True, forked_from=nat.forked_from,
                           forked_at=nat.forked_at, replay=_replay(nat, set(path), tip, now))]
    plan = _Plan(b, rep, moves, new_ids)
    if moves and moves[0].replay:
        plan.subturns = [(tid, data) for tid, data in nat.turns
                         if tid not in view.pending_objects and not st.repo.objects.contains(tid)]
        st.view.pending_objects.update(tid for tid, _ in plan.subturns)
        st.named.setdefault(moves[0].thread, set()).update(e.turn for e in nat.reflog)
    return plan


def _native_name(nat: NativeThread, conv: Conversation, tip: str) -> str:
    if nat.name:
        try:
            return check_thread_name(nat.name)
        except InvalidRefName:
            conv.warnings.append(f"thread name {nat.name!r} is not valid here: imported under another name")
    return base_name(conv, tip)


def _holds(st: _State, thread: str, oid: str) -> bool:
    """``oid`` is in the history of ``thread`` (it continued after the export)."""
    if oid in st.view.pending_history.get(thread, ()):
        return True
    return thread in st.repo.index.threads_containing(oid, limit=1_000_000)


def _replay(nat: NativeThread, history: set[str], tip: str, now: int) -> list[tuple[str, str | None, int, str]]:
    """The reflog lines of a new thread that reproduce the exported ones: each recorded move
    whose ends are both in the exported history is made again (so a turn covers the same
    messages); a line whose ends are not (a branch switch away from a message this thread no
    longer holds) names its turn at the thread's current tip. The ref ends at ``tip``."""
    out: list[tuple[str, str | None, int, str]] = []
    cur: str | None = None
    t = now
    for e in nat.reflog:
        t = e.time_ms
        inside = e.new in history and (e.old in history if e.old is not None else cur is None)
        if inside:
            if e.old is not None and cur != e.old:
                out.append((e.old, None, t, REPLAY_MESSAGE))
            out.append((e.new, e.turn, t, e.message))
            cur = e.new
        else:
            cur = cur or tip
            out.append((cur, e.turn, t, e.message))
    if cur != tip:
        out.append((tip, None, t, REPLAY_MESSAGE if cur is not None else "import native: created"))
    return out


# -- running --------------------------------------------------------------------------------


def import_conversations(
    repo,
    items: Iterable[Conversation | Rejected],
    *,
    dry_run: bool = False,
    now_ms: int | None = None,
    progress: Callable[[int], None] | None = None,
    batch_messages: int = BATCH_MESSAGES,
    move_head: bool = False,
) -> ImportReport:
    """Import every conversation ``items`` yields; one ConvReport each, in input order.
    ``move_head``: when HEAD names no thread (a new store), the first conversation imported
    becomes current (HEAD is read, and so validated, before anything is written)."""
    t0 = time.perf_counter()
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    report = ImportReport(dry_run=dry_run)
    head_rule = move_head and not dry_run
    if head_rule:
        repo.refs.read_head()  # unreadable: fail before importing anything
    batch: list[tuple[int, Conversation]] = []
    size = 0
    pending = 0  # input bytes read but not yet imported: reported once their batch has run
    for item in items:
        slot = len(report.conversations)
        if isinstance(item, Rejected):
            report.conversations.append(_rejected(item))
        else:
            report.conversations.append(ConvReport(item.label, "skipped"))
            batch.append((slot, item))
            size += len(item.nodes)
        pending += item.size
        if size >= batch_messages or len(batch) >= BATCH_CONVERSATIONS:
            _run_batch(repo, batch, report, dry_run, now, head_rule=head_rule)
            batch, size = [], 0
        if progress is not None and not batch and pending:
            progress(pending)  # (a progress bar's rate is then the import's real rate)
            pending = 0
    if batch:
        _run_batch(repo, batch, report, dry_run, now, head_rule=head_rule)
    if progress is not None and pending:
        progress(pending)
    report.seconds = time.perf_counter() - t0
    return report


def _rejected(r: Rejected) -> ConvReport:
    if r.error.details.get("skip"):  # nothing to import there: a warning, still with its code
        return ConvReport(r.label, "skipped", r.source, r.upstream_id, error_code=r.error.code,
                          reason=r.error.message, warning=True)
    status = "conflict" if r.error.code in ("duplicate_conflict", "ambiguous_thread") else "skipped"
    return ConvReport(r.label, status, r.source, r.upstream_id, error_code=r.error.code, reason=r.error.message)


def _run_batch(repo, batch: list[tuple[int, Conversation]], report: ImportReport, dry_run: bool, now: int,
               attempt: int = 0, head_rule: bool = False) -> None:
    """One batch of conversations in one repository transaction: plan each, write every
    object at once, move every ref in durable batches; the transaction then indexes what moved.
    ``head_rule``: when HEAD names no thread (a new store), the first conversation imported
    becomes current."""
    retry: list[tuple[int, Conversation]] = []
    with repo.transaction(fast_forward=True, index="none" if dry_run else "moves") as tx:
        st = _State(repo)
        plans: list[tuple[int, Conversation, _Plan]] = []
        for slot, conv in batch:
            try:
                b = build_tree(conv, repo.config)
                plan = _plan(st, b, now)
            except (StorageFailed, Locked):
                raise
            except ConvgitError as e:
                report.conversations[slot] = _rejected(Rejected(conv.label, e, 0, conv.source, conv.upstream_id))
                report.conversations[slot].title = conv.title
                report.conversations[slot].warnings = list(conv.warnings)
                continue
            _register(st, plan)
            _finish_report(plan)
            report.conversations[slot] = plan.report
            plans.append((slot, conv, plan))
        if dry_run or not plans:
            return
        report.new_objects += _write_objects(tx, [p for _, _, p in plans])
        crash_point("import_after_objects")
        failed = _move_refs(tx, plans, now)
        crash_point("import_after_refs")
        ok = [p for slot, _, p in plans if slot not in failed]
        if head_rule and not thread_exists(repo, tx.read_head()):
            tx.follow(next((t["thread"] for p in ok for t in p.report.threads
                            if p.report.status == "imported" and t["branch"] == "main"), None))
        retry = [(slot, conv) for slot, conv, _ in plans if slot in failed]
    if tx.index_warning:
        for p in ok:
            p.report.warnings.append(tx.index_warning)
    if tx.head_warning:
        report.warnings.append(tx.head_warning)
    if retry:
        if attempt >= 3:
            for slot, conv in retry:
                report.conversations[slot] = _rejected(Rejected(
                    conv.label, RefStale("its threads kept moving under concurrent writers; import it again"),
                    0, conv.source, conv.upstream_id))
            return
        _run_batch(repo, retry, report, dry_run, now, attempt + 1, head_rule)


def _write_objects(tx, plans: list[_Plan]) -> int:
    objs: list[tuple[str, bytes]] = []
    missing: set[str] = set()
    decoded: dict[str, object] = {}
    for p in plans:
        b = p.built
        for oid in p.new_ids:
            objs.extend(b.blobs[oid])
            objs.append((oid, b.data[oid]))
            decoded[oid] = b.messages[oid]
        missing.update(p.new_ids)
        objs.extend(p.subturns)
        objs.extend(m.turn for m in p.moves if m.turn)
        decoded.update(p.turns)
    if not objs:
        return 0
    if len(objs) > object_store.PACK_THRESHOLD:
        return len(tx.write_pack(objs, missing=missing, decoded=decoded))
    # A few objects: staged loose files made durable together, in dependency order (§6.1).
    return tx.write_objects(objs, missing=missing, decoded=decoded)


def _move_refs(tx, plans, now: int) -> set[int]:
    """Move every planned ref, compare-and-swap each, in durable batches (RefStore.update_many,
    docs/format.md §6.3). Returns the slots whose refs moved under us (they are planned
    again)."""
    moves: list[RefMove] = []
    slots: list[int] = []
    for slot, conv, p in plans:
        for m in p.moves:
            if m.replay:
                expected = m.expected
                for new, turn, t, msg in m.replay:
                    moves.append(RefMove(m.thread, new, expected=expected, message=msg, turn=turn, time_ms=t))
                    slots.append(slot)
                    expected = new
                continue
            if not (m.move or m.turn):
                continue
            n = len(p.new_ids)
            msg = f"import {conv.source}: {m.status}" + (f", {n} new message(s)" if n else "")
            moves.append(RefMove(m.thread, m.tip if m.move else m.old, expected=m.expected, message=msg,
                                 turn=m.turn[0] if m.turn else None, time_ms=now))
            slots.append(slot)
    failed: set[int] = set()
    for slot, out in zip(slots, tx.move_many(moves)):
        if isinstance(out, (RefStale, RefExists, NotFound)):
            failed.add(slot)
        elif isinstance(out, Exception):
            raise out
    return failed
