"""Filters shared by ``log`` and ``search`` (and their SQL), and the time-sortable message key.

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
import json
import re
import time
from dataclasses import dataclass

from ..errors import InvalidInput, NotFound
from ..ids import check_thread_name, is_oid
from .healing import healing_call

KEY_RE = re.compile(r"^\d{1,17}(-[0-9a-f]{0,16}(-\d{0,7})?)?$")

# The key as SQL over ``messages m LEFT JOIN turns t ON t.rowid = m.turn_rowid``.
KEY_SQL = (
    "(strftime('%Y%m%d%H%M%S', max(coalesce(t.started_at, 0), 0) / 1000, 'unixepoch')"
    " || printf('%03d-%s-%07d', max(coalesce(t.started_at, 0), 0) % 1000,"
    " substr(coalesce(t.id, m.id), 1, 16), m.depth))"
)


def sort_key(started_at: int | None, turn: str | None, oid: str, depth: int) -> str:
    """The key of a message from its turn's start, the turn id (or its own id) and its depth."""
    ms = max(started_at or 0, 0)
    d = _dt.datetime.fromtimestamp(ms // 1000, tz=_dt.timezone.utc)
    return f"{d.strftime('%Y%m%d%H%M%S')}{ms % 1000:03d}-{(turn or oid)[:16]}-{max(depth, 0):07d}"


# -- parsing option values ------------------------------------------------------------------

# (a pattern, not a compiled one: matched once per --since/--until given, through re's own
# cache; a command given neither compiles nothing: start-up, docs/performance.md)
_REL = r"^(\d+)\s*(s|sec|secs|m|min|mins|h|hr|hrs|hours?|d|days?|w|wk|weeks?|y|yr|years?)$"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}


def parse_time(value: str, *, now_ms: int | None = None, what: str = "--since") -> int:
    """UTC epoch ms for a date (``2024-06-01``), a date and time (``2024-06-01T12:00``,
    ``2024-06-01 12:00:30Z``, with an offset), or a time ago (``30m``, ``12h``, ``3d``, ``2w``,
    ``1y``; ``today``, ``yesterday``)."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    v = value.strip().lower()
    m = re.match(_REL, v)
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
    tool_names: tuple[str, ...] = ()  # only messages of turns that called one of these tools
    # Messages that pass the turn conditions (models, since/until, sources) whatever their
    # own turn: a recorded call that passes them covered them (its prompt and what it brought,
    # also a call that added no message). The library fills it in (api.turn_level).
    covered: tuple[str, ...] = ()
    # Only messages whose text (one part's: text, reasoning, a tool call's arguments or a
    # tool's output) holds each of these texts (``-f/--fragment``, resolved by api.make_filters).
    fragments: tuple[str, ...] = ()

    @property
    def paging(self) -> bool:
        """Is there a key bound (``--id-gt``/``--id-gte``): the order is by key, oldest first."""
        return self.id_gt is not None or self.id_gte is not None

    def any(self) -> bool:
        """Is there any condition at all?"""
        return bool(self.models or self.threads or self.since is not None or self.until is not None
                    or self.roles or self.tools or self.sources or self.paging or self.tool_names
                    or bool(self.fragments))


def make_filters(repo, *, model=(), thread=(), since: str | None = None, until: str | None = None, role=(),
                 tools: bool = False, source=(), id_gt: str | None = None, id_gte: str | None = None,
                 tool=(), fragments=(), now_ms: int | None = None) -> Filters:
    """Filters from option values: validated, aliases resolved (config ``[aliases]``)."""
    from ..config import load_aliases

    aliases = load_aliases(repo.path / "config.toml")
    models = tuple(dict.fromkeys(aliases.get(m, m) for m in _split(model)))
    threads = _split(thread)
    for name in threads:
        check_thread_name(name)
        if repo.refs.read(name) is None:
            raise NotFound(f"thread {name!r} does not exist", thread=name)
    roles = _split(role)
    if roles:
        from ..objects import ROLES  # (here: msgspec is not loaded by a search that reads no object)
    for r in roles:
        if r not in ROLES:
            raise InvalidInput(f"--role {r!r}: not a role ({', '.join(ROLES)})")
    s = parse_time(since, now_ms=now_ms, what="--since") if since else None
    u = parse_time(until, now_ms=now_ms, what="--until") if until else None
    return Filters(models, threads, s, u, roles, tools, _split(source),
                   _bound(repo, id_gt, "--id-gt"), _bound(repo, id_gte, "--id-gte"), _split(tool),
                   fragments=tuple(fragments))


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
    """The key (``KEY_SQL``) of message ``oid`` as the index computes it, None when no thread holds it."""
    def q():
        return repo.index.db.execute(
            f"SELECT {KEY_SQL} FROM messages m LEFT JOIN turns t ON t.rowid = m.turn_rowid WHERE m.id = ? "
            "AND m.rowid NOT IN (SELECT rowid FROM unreachable)", (oid,)
        ).fetchone()

    row = healing_call(repo, q)
    return row[0] if row else None


# -- filters as SQL -------------------------------------------------------------------------

# The turns (by rowid) of messages with tool calls or results; of those that called tools named ``{}``.
TOOL_TURNS_SQL = (
    "SELECT m2.turn_rowid FROM parts p JOIN messages m2 ON m2.rowid = p.message_rowid "
    "WHERE p.type IN ('tool_call', 'tool_result') AND m2.turn_rowid IS NOT NULL"
)
NAMED_TOOL_TURNS_SQL = ("SELECT m3.turn_rowid FROM parts p3 JOIN messages m3 ON m3.rowid = p3.message_rowid "
                        "WHERE p3.type = 'tool_call' AND p3.name IN ({}) AND m3.turn_rowid IS NOT NULL")
# The messages (by rowid) a thread named by ``threads`` reaches, as ``anc(rid)``.
THREADS_ANC_SQL = ("WITH RECURSIVE anc(rid) AS (SELECT m.rowid FROM threads h JOIN messages m ON m.id = h.tip "
                   "WHERE h.name IN ({}) UNION SELECT m0.parent_rowid FROM messages m0 JOIN anc ON m0.rowid = anc.rid "
                   "WHERE m0.parent_rowid IS NOT NULL) ")



# A message one of whose parts holds the text ``?`` (lean mode: the text from the object).
FRAGMENT_SQL = ("EXISTS (SELECT 1 FROM parts pf WHERE pf.message_rowid = m.rowid "
                "AND instr(coalesce(pf.text, convgit_text(m.id, pf.position)), ?) > 0)")


def turn_conditions(f: "Filters", conds: list[str], params: list) -> None:
    """Append the filters on the turn ``t`` (model or resolved model, time, source) to
    ``conds`` as SQL, and their values to ``params`` (log, search and the turn list alike)."""
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
    if f.sources:
        conds.append(f"t.source IN ({','.join('?' * len(f.sources))})")
        params.extend(f.sources)


def sql(f: Filters) -> tuple[str, list, list[str], list]:
    """(WITH clause or "", its parameters, WHERE conditions, their parameters) over
    ``messages m LEFT JOIN turns t ON t.rowid = m.turn_rowid``."""
    conds: list[str] = ["m.rowid NOT IN (SELECT rowid FROM unreachable)"]
    params: list = []
    with_, with_params = "", []
    if f.threads:
        q = ",".join("?" * len(f.threads))
        with_ = THREADS_ANC_SQL.format(q)
        with_params = list(f.threads)
        conds.append("m.rowid IN (SELECT rid FROM anc)")
    tconds: list[str] = []
    turn_conditions(f, tconds, params)
    if tconds:
        cond = " AND ".join(tconds)
        if f.covered:
            cond = f"(({cond}) OR m.id IN (SELECT value FROM json_each(?)))"
            params.append(json.dumps(list(f.covered)))
        conds.append(cond)
    if f.roles:
        conds.append(f"m.role IN ({','.join('?' * len(f.roles))})")
        params.extend(f.roles)
    if f.tools:
        conds.append(f"m.turn_rowid IN ({TOOL_TURNS_SQL})")
    if f.tool_names:
        q = ",".join("?" * len(f.tool_names))
        conds.append(f"m.turn_rowid IN ({NAMED_TOOL_TURNS_SQL.format(q)})")
        params.extend(f.tool_names)
    for text in f.fragments:
        conds.append(FRAGMENT_SQL)
        params.append(text)
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
    "t.input_tokens, t.output_tokens, t.usage_json, t.output, t.duration_ms, t.thread, "
    "(SELECT r.id FROM turns r WHERE r.rowid = t.record_rowid) "
    "FROM messages m LEFT JOIN turns t ON t.rowid = m.turn_rowid WHERE m.id IN ({})"
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
            self.in_threads = {r[0] for r in db.execute(
                with_ + "SELECT id FROM messages WHERE rowid IN (SELECT rid FROM anc)", params)}
        self.tool_turns = ({r[0] for r in db.execute(f"SELECT id FROM turns WHERE rowid IN ({TOOL_TURNS_SQL})")}
                           if f.tools else None)
        self.covered = set(f.covered)
        self.with_fragments = None
        if f.fragments:
            q = " AND ".join([FRAGMENT_SQL] * len(f.fragments))
            self.with_fragments = {r[0] for r in db.execute(f"SELECT m.id FROM messages m WHERE {q}", list(f.fragments))}
        self.named_turns = None
        if f.tool_names:
            q = ",".join("?" * len(f.tool_names))
            self.named_turns = {r[0] for r in db.execute(
                f"SELECT id FROM turns WHERE rowid IN ({NAMED_TOOL_TURNS_SQL.format(q)})", list(f.tool_names))}

    def __call__(self, oid: str, role: str, depth: int, info: dict | None) -> bool:
        f = self.f
        if f.roles and role not in f.roles:
            return False
        if self.in_threads is not None and oid not in self.in_threads:
            return False
        if self.with_fragments is not None and oid not in self.with_fragments:
            return False
        t = info or {}
        if oid not in self.covered and not self._turn_passes(t):
            return False
        if self.tool_turns is not None and t.get("turn") not in self.tool_turns:
            return False
        if self.named_turns is not None and t.get("turn") not in self.named_turns:
            return False
        return True

    def _turn_passes(self, t: dict) -> bool:
        f = self.f
        if f.models and t.get("model") not in f.models and t.get("resolved_model") not in f.models:
            return False
        started = t.get("started_at")
        if f.since is not None and (started is None or started < f.since):
            return False
        if f.until is not None and (started is None or started >= f.until):
            return False
        return not (f.sources and t.get("source") not in f.sources)
