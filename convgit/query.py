"""Filters shared by ``log`` and ``search``, the time-sortable message key, and the log walk.

The key orders messages by time. It is the key of the message's turn — the turn's start
time and the first 16 hex digits of its id — followed by the message's depth, which orders the
messages one turn brought:

    20241201080000000-65e7270ffe6b934d-0000002
    └─ started_at (UTC, ms) └─ turn id      └─ depth

Keys compare as strings (fixed width), are the same after an index rebuild, and page through
a store exactly: ``--id-gt <the last key seen>`` continues where a page ended. A message no
turn brought (written with plumbing) has time 00000000000000000 and its own id in place of
the turn's.
"""

from __future__ import annotations

import datetime as _dt
import re
import time
from dataclasses import dataclass
from typing import Iterator

from .errors import InvalidInput, NotFound
from .graph import iter_ancestry
from .ids import check_thread_name, is_oid
from .objects import ROLES
from .provenance import ThreadProvenance, choose, earliest

KEY_RE = re.compile(r"^\d{1,17}(-[0-9a-f]{0,16}(-\d{0,7})?)?$")

# The key as SQL over ``messages m LEFT JOIN turns t ON t.id = m.turn_id``.
KEY_SQL = (
    "(strftime('%Y%m%d%H%M%S', max(coalesce(t.started_at, 0), 0) / 1000, 'unixepoch')"
    " || printf('%03d-%s-%07d', max(coalesce(t.started_at, 0), 0) % 1000,"
    " substr(coalesce(t.id, m.id), 1, 16), m.depth))"
)


def sort_key(started_at: int | None, turn: str | None, oid: str, depth: int) -> str:
    ms = max(started_at or 0, 0)
    d = _dt.datetime.fromtimestamp(ms // 1000, tz=_dt.timezone.utc)
    return f"{d.strftime('%Y%m%d%H%M%S')}{ms % 1000:03d}-{(turn or oid)[:16]}-{max(depth, 0):07d}"


# -- parsing option values ------------------------------------------------------------------

_REL = re.compile(r"^(\d+)\s*(s|sec|secs|m|min|mins|h|hr|hrs|hours?|d|days?|w|wk|weeks?|y|yr|years?)$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}


def parse_time(value: str, *, now_ms: int | None = None, what: str = "--since") -> int:
    """UTC epoch ms for a date (``2024-06-01``), a date and time (``2024-06-01T12:00``,
    ``2024-06-01 12:00:30Z``, with an offset), or a time ago (``30m``, ``12h``, ``3d``, ``2w``,
    ``1y``; ``today``, ``yesterday``)."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    v = value.strip().lower()
    m = _REL.match(v)
    if m:
        unit = m.group(2)
        unit = "m" if unit.startswith("mi") or unit == "m" else unit[0]
        return now - int(m.group(1)) * _UNIT_MS[unit]
    if v in ("now",):
        return now
    if v in ("today", "yesterday"):
        day = now - now % 86_400_000
        return day - (86_400_000 if v == "yesterday" else 0)
    try:
        d = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{what} {value!r}: not a date (2024-06-01, 2024-06-01T12:00Z) or a time ago (30m, 12h, 3d, 2w, 1y)"
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.timezone.utc)
    return int(d.timestamp() * 1000)


def _split(values) -> tuple[str, ...]:
    out: list[str] = []
    for v in values or ():
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return tuple(out)


@dataclass(frozen=True)
class Filters:
    """What ``log`` and ``search`` keep. Empty tuples / None mean "no condition"."""

    models: tuple[str, ...] = ()
    threads: tuple[str, ...] = ()
    since: int | None = None  # started_at >= since (UTC ms)
    until: int | None = None  # started_at < until
    roles: tuple[str, ...] = ()
    tools: bool = False  # only messages of turns that used tools
    sources: tuple[str, ...] = ()
    id_gt: str | None = None
    id_gte: str | None = None

    @property
    def paging(self) -> bool:
        return self.id_gt is not None or self.id_gte is not None

    def any(self) -> bool:
        return bool(self.models or self.threads or self.since is not None or self.until is not None
                    or self.roles or self.tools or self.sources or self.paging)


def make_filters(repo, *, model=(), thread=(), since: str | None = None, until: str | None = None, role=(),
                 tools: bool = False, source=(), id_gt: str | None = None, id_gte: str | None = None,
                 now_ms: int | None = None) -> Filters:
    """Filters from option values: validated, aliases resolved (config ``[aliases]``)."""
    from .config import load_aliases

    aliases = load_aliases(repo.path / "config.toml")
    models = tuple(dict.fromkeys(aliases.get(m, m) for m in _split(model)))
    threads = _split(thread)
    for name in threads:
        check_thread_name(name)
        if repo.refs.read(name) is None:
            raise NotFound(f"thread {name!r} does not exist", thread=name)
    roles = _split(role)
    for r in roles:
        if r not in ROLES:
            raise InvalidInput(f"--role {r!r}: not a role ({', '.join(ROLES)})")
    s = parse_time(since, now_ms=now_ms, what="--since") if since else None
    u = parse_time(until, now_ms=now_ms, what="--until") if until else None
    return Filters(models, threads, s, u, roles, tools, _split(source),
                   _bound(repo, id_gt, "--id-gt"), _bound(repo, id_gte, "--id-gte"))


def _bound(repo, value: str | None, what: str) -> str | None:
    if value is None:
        return None
    v = value.strip().lower()
    if is_oid(v):
        key = key_of(repo, v)
        if key is None:
            raise NotFound(f"{what}: message {v} is not in any thread", oid=v)
        return key
    if not KEY_RE.match(v):
        raise InvalidInput(f"{what} {value!r}: not a key (YYYYMMDDHHMMSSmmm-<turn>-<depth>, or a prefix of one) "
                           "or a full message id")
    return v


def key_of(repo, oid: str) -> str | None:
    def q():
        return repo.index.db.execute(
            f"SELECT {KEY_SQL} FROM messages m LEFT JOIN turns t ON t.id = m.turn_id WHERE m.id = ? "
            "AND m.rowid NOT IN (SELECT rowid FROM unreachable)", (oid,)
        ).fetchone()

    row = healing_call(repo, q)
    return row[0] if row else None


# -- filters as SQL -------------------------------------------------------------------------

TOOL_TURNS_SQL = (
    "SELECT m2.turn_id FROM parts p JOIN messages m2 ON m2.rowid = p.message_rowid "
    "WHERE p.type IN ('tool_call', 'tool_result') AND m2.turn_id IS NOT NULL"
)


def sql(f: Filters) -> tuple[str, list, list[str], list]:
    """(WITH clause or "", its parameters, WHERE conditions, their parameters) over
    ``messages m LEFT JOIN turns t ON t.id = m.turn_id``."""
    conds: list[str] = ["m.rowid NOT IN (SELECT rowid FROM unreachable)"]
    params: list = []
    with_, with_params = "", []
    if f.threads:
        q = ",".join("?" * len(f.threads))
        with_ = (f"WITH RECURSIVE anc(id) AS (SELECT tip FROM threads WHERE name IN ({q}) UNION "
                 "SELECT m0.parent FROM messages m0 JOIN anc ON m0.id = anc.id WHERE m0.parent IS NOT NULL) ")
        with_params = list(f.threads)
        conds.append("m.id IN (SELECT id FROM anc)")
    if f.models:
        q = ",".join("?" * len(f.models))
        conds.append(f"(t.model IN ({q}) OR t.resolved_model IN ({q}))")
        params.extend(f.models * 2)
    if f.since is not None:
        conds.append("t.started_at >= ?")
        params.append(f.since)
    if f.until is not None:
        conds.append("t.started_at < ?")
        params.append(f.until)
    if f.roles:
        conds.append(f"m.role IN ({','.join('?' * len(f.roles))})")
        params.extend(f.roles)
    if f.sources:
        conds.append(f"t.source IN ({','.join('?' * len(f.sources))})")
        params.extend(f.sources)
    if f.tools:
        conds.append(f"m.turn_id IN ({TOOL_TURNS_SQL})")
    if f.id_gt is not None:
        conds.append(f"{KEY_SQL} > ?")
        params.append(f.id_gt)
    if f.id_gte is not None:
        conds.append(f"{KEY_SQL} >= ?")
        params.append(f.id_gte)
    return with_, with_params, conds, params


# -- turn details for a batch of messages ---------------------------------------------------

_DETAILS = (
    "SELECT m.id, m.depth, t.id, t.started_at, t.model, t.resolved_model, t.kind, t.source, "
    "t.input_tokens, t.output_tokens, t.usage_json, t.output, t.duration_ms, t.thread, t.record "
    "FROM messages m LEFT JOIN turns t ON t.id = m.turn_id WHERE m.id IN ({})"
)


def details(db, oids: list[str]) -> dict[str, tuple[int, dict | None]]:
    """message id → (depth, turn info or None) for messages in the index."""
    out: dict[str, tuple[int, dict | None]] = {}
    for i in range(0, len(oids), 500):
        chunk = oids[i : i + 500]
        for mid, depth, tid, started, model, rmodel, kind, source, itok, otok, usage, output, dur, thread, record in db.execute(
            _DETAILS.format(",".join("?" * len(chunk))), chunk
        ):
            info = None
            if tid is not None:
                info = {"turn": tid, "started_at": started, "model": model, "resolved_model": rmodel, "kind": kind,
                        "source": source, "input_tokens": itok, "output_tokens": otok, "usage_json": usage,
                        "output": output, "duration_ms": dur, "thread": thread, "record": record}
            out[mid] = (depth, info)
    return out


class _Match:
    """The filters as a predicate over walked messages (the log's own order is kept)."""

    def __init__(self, db, f: Filters) -> None:
        self.f = f
        self.in_threads: set[str] | None = None
        if f.threads:
            with_, params, _, _ = sql(Filters(threads=f.threads))
            self.in_threads = {r[0] for r in db.execute(with_ + "SELECT id FROM anc", params)}
        self.tool_turns = {r[0] for r in db.execute(TOOL_TURNS_SQL)} if f.tools else None

    def __call__(self, oid: str, role: str, depth: int, info: dict | None) -> bool:
        f = self.f
        if f.roles and role not in f.roles:
            return False
        if self.in_threads is not None and oid not in self.in_threads:
            return False
        t = info or {}
        if f.models and t.get("model") not in f.models and t.get("resolved_model") not in f.models:
            return False
        started = t.get("started_at")
        if f.since is not None and (started is None or started < f.since):
            return False
        if f.until is not None and (started is None or started >= f.until):
            return False
        if f.sources and t.get("source") not in f.sources:
            return False
        if self.tool_turns is not None and t.get("turn") not in self.tool_turns:
            return False
        return True


# -- a damaged index heals ------------------------------------------------------------------


def healing_call(repo, fn, *args, **kwargs):
    """``fn(*args)``; if it meets a damaged index page, rebuild the index and run it again
    (the index is a cache: a page can be damaged deep inside and pass every check on open)."""
    import sqlite3

    try:
        return fn(*args, **kwargs)
    except sqlite3.DatabaseError as e:
        if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
            raise
        repo.index.rebuild()
        return fn(*args, **kwargs)


def healing_iter(repo, make: "callable") -> Iterator:
    """Items of ``make()``; on a damaged page, rebuild and go on from the same place (the
    order is the same after a rebuild, so the items already given are skipped)."""
    import sqlite3

    done = 0
    for attempt in (0, 1):
        it = make()
        skip = done
        try:
            for item in it:
                if skip:
                    skip -= 1
                    continue
                done += 1
                yield item
            return
        except sqlite3.DatabaseError as e:
            if attempt or (isinstance(e, sqlite3.OperationalError) and "locked" in str(e)):
                raise
            repo.index.rebuild()


# -- walking --------------------------------------------------------------------------------


def _walk_all(repo, stops: set[str] | None = None) -> Iterator[tuple[str, object]]:
    """(thread, id, message) for every message reachable from a thread, once: thread by
    thread in name order, each from its tip back to where it joins a thread already walked.

    Only thread tips and fork points (messages with two or more children) are remembered: a
    walk that reaches a message already listed must reach it at one of those (else it would
    have come down the same child). Memory grows with threads and forks, not messages. The
    threads come from the index (just caught up), so the first message comes at once; the
    refs are read at the end, and a thread the index left out (a damaged history) or that
    moved meanwhile is walked then.
    """
    db = repo.index.db
    stops = set() if stops is None else stops
    stop_q = ("SELECT EXISTS (SELECT 1 FROM threads WHERE tip = ?1) OR "
              "(SELECT count(*) FROM (SELECT 1 FROM messages WHERE parent = ?1 LIMIT 2)) > 1")

    def walk(tip: str):
        for oid, msg in iter_ancestry(repo.objects, tip, stop=stops):
            yield oid, msg
            if db.execute(stop_q, (oid,)).fetchone()[0]:
                stops.add(oid)

    walked = dict(db.execute("SELECT name, tip FROM threads ORDER BY name").fetchall())
    for name, tip in walked.items():
        for oid, msg in walk(tip):
            yield name, oid, msg
    for name, tip in repo.refs.read_all().items():
        if walked.get(name) != tip:
            for oid, msg in walk(tip):
                yield name, oid, msg


def iter_messages(repo, rev: str | None = None, *, all_threads: bool = False,
                  filters: Filters | None = None) -> Iterator[tuple[str, object, int, dict | None]]:
    """(id, message, depth, turn info) in log order (newest first from ``rev``, or every
    thread with ``all_threads``), filtered. Streams: objects are read in growing batches."""
    return healing_iter(repo, lambda: _iter_messages(repo, rev, all_threads, filters))


def _iter_messages(repo, rev, all_threads, filters):
    repo.index.refresh_if_changed()
    db = repo.index.db
    f = filters or Filters()
    if f.paging:
        yield from _paged(repo, rev, all_threads, f)
        return
    if all_threads:
        walk: Iterator = _walk_all(repo)
    else:
        tip, thread, skipped = _start(repo, "HEAD" if rev is None else rev)
        walk = ((thread, oid, msg) for oid, msg in iter_ancestry(repo.objects, tip))
    local: dict[str, ThreadProvenance] = {}

    def resolver(thread: str | None) -> ThreadProvenance | None:
        if thread is None:
            return None
        if thread not in local:
            local.clear()  # threads are walked one after the other
            local[thread] = ThreadProvenance(repo.index.thread_turns(thread))
        return local[thread]

    if not all_threads and skipped:  # thread~N: the turns above the start cover it too
        r = resolver(thread)
        for oid, depth in skipped:
            r.at(oid, depth)
    match = _Match(db, f) if f.any() else None
    size = 1  # grows to 512: `log -n 1` reads one object, not a batch
    while True:
        chunk = []
        for item in walk:
            chunk.append(item)
            if len(chunk) >= size:
                break
        if not chunk:
            return
        size = min(size * 2, 512)
        info = details(db, [oid for _, oid, _ in chunk])
        for thread, oid, msg in chunk:
            depth, turn = info.get(oid, (-1, None))
            r = resolver(thread) if depth >= 0 else None
            turn = choose(r.at(oid, depth) if r is not None else None, turn)
            if match is None or match(oid, msg.role, depth, turn):
                yield oid, msg, depth, turn


def _start(repo, rev: str) -> tuple[str, str | None, list[tuple[str, int]]]:
    """Where a walk of ``rev`` starts: (its id, the thread it names or None, the (id, depth)
    of the messages between that thread's tip and the start, tip first)."""
    from . import revparse

    base, n = revparse.split_rev(rev)
    top, thread = revparse.resolve_base(repo, base)
    tip = revparse.resolve(repo, rev)
    skipped: list[tuple[str, int]] = []
    if thread is not None and n:
        for oid, _ in iter_ancestry(repo.objects, top, stop={tip}):
            depth = repo.index.depth(oid)
            if depth is None:
                return tip, None, []
            skipped.append((oid, depth))
    return tip, thread, skipped


def _paged(repo, rev, all_threads: bool, f: Filters) -> Iterator[tuple[str, object, int, dict | None]]:
    """Messages with a key above the bound, oldest first (the index drives; 1,000 a batch)."""
    import dataclasses

    from . import revparse
    from .graph import read_message

    db = repo.index.db
    with_, with_params, conds, params = sql(dataclasses.replace(f, id_gt=None, id_gte=None))
    if not all_threads:
        tip = revparse.resolve(repo, "HEAD" if rev is None else rev)
        anc = ("anc2(id) AS (SELECT ? UNION SELECT m0.parent FROM messages m0 JOIN anc2 ON m0.id = anc2.id "
               "WHERE m0.parent IS NOT NULL) ")
        with_ = (with_.rstrip() + ", " + anc) if with_ else "WITH RECURSIVE " + anc
        with_params = [*with_params, tip]
        conds.append("m.id IN (SELECT id FROM anc2)")
    params = [*with_params, *params]
    strict = f.id_gt is not None and (f.id_gte is None or f.id_gt >= f.id_gte)
    after = f.id_gt if strict else f.id_gte
    while True:
        q = (f"{with_}SELECT m.id, {KEY_SQL} AS k FROM messages m LEFT JOIN turns t ON t.id = m.turn_id "
             f"WHERE {' AND '.join(conds)} AND k {'>' if strict else '>='} ? ORDER BY k LIMIT 1000")
        rows = db.execute(q, [*params, after]).fetchall()
        if not rows:
            return
        info = details(db, [r[0] for r in rows])
        for oid, _key in rows:
            depth, turn = info.get(oid, (-1, None))
            yield oid, read_message(repo.objects, oid), depth, earliest(turn)
        after, strict = rows[-1][1], True
