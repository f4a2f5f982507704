"""``export --format llm-db``: threads written as an ``llm`` logs.db (llm 0.36's schema).

The file is what ``llm`` itself writes (research/llm-logs-import.md): ``messages`` with
llm's own ``b2:`` hashes (``ingest.llmdb.b2_hash``, parent inside), ``parts``,
``attachments``, ``threads`` (one per convgit thread) and ``turns``, with ``turn_search``
and its FTS index for ``llm logs -q``. ``_llm_migrations`` records every migration of llm
0.36 but ``m026_message_tree_view``: llm creates that view itself the first time it opens
the file, so none of its SQL is copied here.

Turns: consecutive messages of a thread that convgit gives the same turn (``log --json``'s
``turn``: the call, the append or the imported record that brought them) become one llm
turn, from the message before them (``parent_message_hash``) to the last of them (tip),
with the turn's model, options, tokens, duration and start time. A fork's shared history is
written once (the turn is keyed by convgit turn and tip).

The inverse of ``ingest/llmdb.py``: ``convgit import`` of the file gives back the same
messages (same ids, parts, meta) with the same times and models. What llm's shape cannot
say (a meta key llm has no field for, an opaque part) travels in ``provider_metadata``
under the key ``"convgit"``, which the importer reads back; attachments come back with
llm's attachment id (the SHA-256 of their bytes) in their ``meta``.

The database is built in a temporary file beside ``out`` and renamed over nothing: an
existing ``out`` is refused, and a failure leaves no file.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import blake3
import msgspec

from . import graph
from .errors import InvalidInput, StorageFailed
from .ingest import llmdb
from .objects import AttachmentPart, Blob, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

LLM_VERSION = "0.36"

# llm 0.36's migrations, recorded as applied (m026 left for llm: it creates a view only).
_MIGRATIONS = (
    "m001_initial m002_id_primary_key m003_chat_id_foreign_key m004_column_order m004_drop_provider m005_debug "
    "m006_new_logs_table m007_finish_logs_table m008_reply_to_id_foreign_key m008_fix_column_order_in_logs "
    "m009_delete_logs_table_if_empty m010_create_new_log_tables m011_fts_for_responses m012_attachments_tables "
    "m013_usage m014_schemas m015_fragments_tables m016_fragments_table_pks m017_tools_tables m017_tools_plugin "
    "m018_tool_instances m019_resolved_model m020_tool_results_attachments m021_tool_results_exception "
    "m022_response_reasoning m023_message_store m024_tool_instance_references m025_turn_tools_instance_backfill "
    "m027_turns_response_json"
).split()

# (table, columns): llm's tables and their columns in llm's order. Types follow llm's
# (sqlite-utils) choices; keys and references are llm's.
_TABLES: tuple[tuple[str, str], ...] = (
    ("_llm_migrations", '"name" TEXT PRIMARY KEY, "applied_at" TEXT'),
    ("conversations", '"id" TEXT PRIMARY KEY, "name" TEXT, "model" TEXT'),
    ("attachments", '"id" TEXT PRIMARY KEY, "type" TEXT, "path" TEXT, "url" TEXT, "content" BLOB'),
    ("schemas", '"id" TEXT PRIMARY KEY, "content" TEXT'),
    ("responses", '"id" TEXT PRIMARY KEY, "model" TEXT, "prompt" TEXT, "system" TEXT, "prompt_json" TEXT, '
                  '"options_json" TEXT, "response" TEXT, "response_json" TEXT, '
                  '"conversation_id" TEXT REFERENCES "conversations"("id"), "duration_ms" INTEGER, '
                  '"datetime_utc" TEXT, "input_tokens" INTEGER, "output_tokens" INTEGER, "token_details" TEXT, '
                  '"schema_id" TEXT REFERENCES "schemas"("id"), "resolved_model" TEXT, "reasoning" TEXT'),
    ("prompt_attachments", '"response_id" TEXT REFERENCES "responses"("id"), '
                           '"attachment_id" TEXT REFERENCES "attachments"("id"), "order" INTEGER, '
                           'PRIMARY KEY ("response_id", "attachment_id")'),
    ("fragments", '"id" INTEGER PRIMARY KEY, "hash" TEXT, "content" TEXT, "datetime_utc" TEXT, "source" TEXT'),
    ("fragment_aliases", '"alias" TEXT PRIMARY KEY, "fragment_id" INTEGER REFERENCES "fragments"("id")'),
    ("prompt_fragments", '"response_id" TEXT REFERENCES "responses"("id"), '
                         '"fragment_id" INTEGER REFERENCES "fragments"("id"), "order" INTEGER, '
                         'PRIMARY KEY ("response_id", "fragment_id", "order")'),
    ("system_fragments", '"response_id" TEXT REFERENCES "responses"("id"), '
                         '"fragment_id" INTEGER REFERENCES "fragments"("id"), "order" INTEGER, '
                         'PRIMARY KEY ("response_id", "fragment_id", "order")'),
    ("tools", '"id" INTEGER PRIMARY KEY, "hash" TEXT, "name" TEXT, "description" TEXT, "input_schema" TEXT, '
              '"plugin" TEXT'),
    ("tool_responses", '"tool_id" INTEGER REFERENCES "tools"("id"), "response_id" TEXT REFERENCES "responses"("id"), '
                       'PRIMARY KEY ("tool_id", "response_id")'),
    ("tool_calls", '"id" INTEGER PRIMARY KEY, "response_id" TEXT REFERENCES "responses"("id"), '
                   '"tool_id" INTEGER REFERENCES "tools"("id"), "name" TEXT, "arguments" TEXT, "tool_call_id" TEXT'),
    ("tool_instances", '"id" INTEGER PRIMARY KEY, "plugin" TEXT, "name" TEXT, "arguments" TEXT'),
    ("tool_results", '"id" INTEGER PRIMARY KEY, "response_id" TEXT REFERENCES "responses"("id"), '
                     '"tool_id" INTEGER REFERENCES "tools"("id"), "name" TEXT, "output" TEXT, "tool_call_id" TEXT, '
                     '"instance_id" INTEGER REFERENCES "tool_instances"("id"), "exception" TEXT'),
    ("tool_results_attachments", '"tool_result_id" INTEGER REFERENCES "tool_results"("id"), '
                                 '"attachment_id" TEXT REFERENCES "attachments"("id"), "order" INTEGER, '
                                 'PRIMARY KEY ("tool_result_id", "attachment_id")'),
    ("messages", '"hash" TEXT PRIMARY KEY, "parent_hash" TEXT REFERENCES "messages"("hash"), "role" TEXT, '
                 '"provider_metadata" TEXT'),
    ("parts", '"id" INTEGER PRIMARY KEY, "message_hash" TEXT REFERENCES "messages"("hash"), "position" INTEGER, '
              '"type" TEXT, "tool_name" TEXT, "text" TEXT, "payload" TEXT'),
    ("part_attachments", '"part_id" INTEGER REFERENCES "parts"("id"), '
                         '"attachment_id" TEXT REFERENCES "attachments"("id"), "order" INTEGER, '
                         'PRIMARY KEY ("part_id", "attachment_id", "order")'),
    ("part_fragments", '"part_id" INTEGER REFERENCES "parts"("id"), "fragment_id" INTEGER REFERENCES "fragments"("id"), '
                       '"order" INTEGER, PRIMARY KEY ("part_id", "fragment_id", "order")'),
    ("threads", '"id" TEXT PRIMARY KEY, "name" TEXT, "tip_message_hash" TEXT REFERENCES "messages"("hash"), '
                '"forked_from" TEXT REFERENCES "threads"("id"), "datetime_utc" TEXT'),
    ("turns", '"id" TEXT PRIMARY KEY, "thread_id" TEXT REFERENCES "threads"("id"), '
              '"parent_message_hash" TEXT REFERENCES "messages"("hash"), '
              '"tip_message_hash" TEXT REFERENCES "messages"("hash"), "model" TEXT, "resolved_model" TEXT, '
              '"options_json" TEXT, "schema_id" TEXT REFERENCES "schemas"("id"), "input_tokens" INTEGER, '
              '"output_tokens" INTEGER, "token_details" TEXT, "duration_ms" INTEGER, "datetime_utc" TEXT, '
              '"response_json" TEXT'),
    ("turn_fragments", '"turn_id" TEXT REFERENCES "turns"("id"), "fragment_id" INTEGER REFERENCES "fragments"("id"), '
                       '"order" INTEGER, "kind" TEXT, PRIMARY KEY ("turn_id", "fragment_id", "kind", "order")'),
    ("turn_search", '"id" INTEGER PRIMARY KEY, "turn_id" TEXT REFERENCES "turns"("id"), "prompt" TEXT, '
                    '"response" TEXT'),
    ("turn_tools", '"turn_id" TEXT REFERENCES "turns"("id"), "tool_id" INTEGER REFERENCES "tools"("id"), '
                   '"instance_id" INTEGER REFERENCES "tool_instances"("id"), PRIMARY KEY ("turn_id", "tool_id")'),
    ("tool_instantiations", '"turn_id" TEXT REFERENCES "turns"("id"), "tool_call_id" TEXT, '
                            '"instance_id" INTEGER REFERENCES "tool_instances"("id"), '
                            'PRIMARY KEY ("turn_id", "tool_call_id")'),
)

_INDEXES = (
    'CREATE UNIQUE INDEX "idx_fragments_hash" ON "fragments" ("hash")',
    'CREATE UNIQUE INDEX "idx_tools_hash" ON "tools" ("hash")',
    'CREATE INDEX "idx_messages_parent_hash" ON "messages" ("parent_hash")',
    'CREATE UNIQUE INDEX "idx_parts_message_hash_position" ON "parts" ("message_hash", "position")',
    'CREATE INDEX "idx_part_fragments_fragment_id" ON "part_fragments" ("fragment_id")',
    'CREATE INDEX "idx_turns_thread_id" ON "turns" ("thread_id")',
    'CREATE INDEX "idx_turn_fragments_fragment_id" ON "turn_fragments" ("fragment_id")',
    'CREATE UNIQUE INDEX "idx_turn_search_turn_id" ON "turn_search" ("turn_id")',
)


def _fts(table: str) -> list[str]:
    """An external-content FTS5 index over ``table``'s prompt and response, kept by triggers
    (the shape sqlite-utils' ``enable_fts(create_triggers=True)`` gives llm)."""
    fts = f"{table}_fts"
    new = f'INSERT INTO "{fts}" (rowid, "prompt", "response") VALUES (new.rowid, new."prompt", new."response");'
    old = (f'INSERT INTO "{fts}" ("{fts}", rowid, "prompt", "response") '
           f"VALUES('delete', old.rowid, old.\"prompt\", old.\"response\");")
    return [
        f'CREATE VIRTUAL TABLE "{fts}" USING FTS5 ("prompt", "response", content="{table}")',
        f'CREATE TRIGGER "{table}_ai" AFTER INSERT ON "{table}" BEGIN {new} END',
        f'CREATE TRIGGER "{table}_ad" AFTER DELETE ON "{table}" BEGIN {old} END',
        f'CREATE TRIGGER "{table}_au" AFTER UPDATE ON "{table}" BEGIN {old} {new} END',
    ]


def schema_sql() -> list[str]:
    """The statements that create an empty llm 0.36 logs.db (tables, indexes, FTS)."""
    out = [f'CREATE TABLE "{name}" ({cols})' for name, cols in _TABLES]
    out.extend(_INDEXES)
    out.extend(_fts("responses"))
    out.extend(_fts("turn_search"))
    return out


@dataclass
class LlmExportResult:
    """What ``export --format llm-db`` wrote: the file and how many of each row."""

    path: str
    threads: int = 0
    messages: int = 0
    turns: int = 0
    attachments: int = 0
    skipped: list[str] = field(default_factory=list)  # threads with no message

    def to_json(self) -> dict:
        """docs/json.md §9."""
        return {"status": "ok", "format": "llm-db", "path": self.path, "llm_version": LLM_VERSION,
                "threads": self.threads, "messages": self.messages, "turns": self.turns,
                "attachments": self.attachments}


def write_llm_db(repo, threads: list[str], out: str | Path,
                 progress: Callable[[int, int], None] | None = None) -> LlmExportResult:
    """Write ``threads`` (names) of ``repo`` to a new llm logs.db at ``out``.

    ``progress(done, total)`` is called after each thread. Refuses an existing ``out``
    (``invalid_input``); writes nothing on any error."""
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise InvalidInput(f"{out} exists: export --format llm-db writes a new file (remove it or choose another name)")
    if not out.parent.is_dir():
        raise InvalidInput(f"{out.parent} is not a directory")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    result = LlmExportResult(path=str(out))
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.execute("BEGIN")
            for stmt in schema_sql():
                db.execute(stmt)
            now = _llm_time(None)
            db.executemany('INSERT INTO "_llm_migrations" (name, applied_at) VALUES (?, ?)',
                           [(n, now) for n in _MIGRATIONS])
            _Writer(repo, db, result).threads(threads, progress)
            db.execute("COMMIT")
        finally:
            db.close()
        os.replace(tmp, out)
    except sqlite3.Error as e:
        _unlink(tmp)
        raise StorageFailed(f"{out}: {e}") from e
    except BaseException:
        _unlink(tmp)
        raise
    return result


def _unlink(p: Path) -> None:
    for q in (p, Path(f"{p}-journal")):
        try:
            q.unlink()
        except FileNotFoundError:
            pass


def _llm_time(ms: int | None) -> str:
    """A time as llm writes ``datetime_utc`` (``str(datetime)`` of an aware UTC time)."""
    d = _dt.datetime.now(_dt.timezone.utc) if ms is None else _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc)
    return d.strftime("%Y-%m-%d %H:%M:%S.%f+00:00")


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _ulid(ms: int | None, seed: str) -> str:
    """A ULID (llm's id format: sortable by time) whose random part is derived from ``seed``,
    so the same export gives the same ids."""
    n = ((ms or 0) & ((1 << 48) - 1)) << 80 | int.from_bytes(blake3.blake3(seed.encode()).digest()[:10], "big")
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


class _Writer:
    def __init__(self, repo, db: sqlite3.Connection, result: LlmExportResult) -> None:
        self.repo = repo
        self.db = db
        self.result = result
        self.hashes: dict[str, str] = {}  # convgit message id → llm hash
        self.turns_done: set[tuple[str | None, str]] = set()
        self.attachments: set[str] = set()

    def threads(self, names: list[str], progress) -> None:
        from .export import fork_origins, thread_turns

        forks = fork_origins(self.repo)
        ids: dict[str, str] = {}
        for name in names:
            ids[name] = self._thread_id(name, thread_turns)
        for i, name in enumerate(names):
            self.thread(name, ids[name], ids.get((forks.get(name) or {}).get("thread") or ""))
            if progress is not None:
                progress(i + 1, len(names))

    def _thread_id(self, name: str, thread_turns) -> str:
        """The llm thread id: the upstream id of a thread imported from llm (so a round trip
        names it as before), else the thread's name."""
        _, turns = thread_turns(self.repo, name)
        for t in turns:
            if t.get("kind") == "import" and t.get("source") == llmdb.SOURCE and t.get("upstream_thread_id"):
                return t["upstream_thread_id"]
        return name

    def thread(self, name: str, tid: str, forked_from: str | None) -> None:
        entries = list(self.repo.index.iter_messages(name))
        entries.reverse()  # root first
        if not entries:
            self.result.skipped.append(name)
            return
        parent = None
        for oid, msg, _depth, _turn in entries:
            parent = self.message(oid, msg, parent)
        times = [t["started_at"] for *_, t in entries if t and t.get("started_at") is not None]
        self.db.execute('INSERT INTO "threads" (id, name, tip_message_hash, forked_from, datetime_utc) '
                        "VALUES (?, ?, ?, ?, ?)", (tid, name, parent, forked_from, _llm_time(min(times) if times else None)))
        self.result.threads += 1
        # Runs of messages that share a turn → one llm turn each.
        runs: list[list] = []
        for e in entries:
            key = (e[3] or {}).get("turn")
            if runs and (runs[-1][0][3] or {}).get("turn") == key:
                runs[-1].append(e)
            else:
                runs.append([e])
        before = None
        for run in runs:
            tip = self.hashes[run[-1][0]]
            info = run[0][3] or {}
            # llm's turn is a call: its parent is the prompt (the last message sent), its
            # output what came back. A run [system, user, assistant] sends the first two.
            k = next((i for i, e in enumerate(run) if e[1].role == "assistant"), 0)
            parent = self.hashes[run[k - 1][0]] if k > 0 else before
            done_key = (info.get("turn"), tip)
            if done_key not in self.turns_done:
                self.turns_done.add(done_key)
                self.turn(tid, info, parent, tip, [e for e in run[k:]] if k > 0 else run)
            before = tip
        self.other_calls(name, tid, entries)

    def other_calls(self, name: str, tid: str, entries: list) -> None:
        """The thread's recorded calls that brought no message of their own (a re-sent
        identical request, a conversation committed again with call metadata): each is an
        llm turn of its own on the message it answered, as llm logs such a call as its own
        response row. Its parent is the last message it sent."""
        from .index.filters import Filters

        by_id = {e[0]: e for e in entries}
        for r in self.repo.index.turn_rows(Filters(threads=(name,))):
            if r["kind"] != "call" or r["output"] not in by_id or r["output"] not in self.hashes:
                continue
            tip = self.hashes[r["output"]]
            if (r["turn"], tip) in self.turns_done:
                continue
            t = graph.find_turn(self.repo.objects, r["turn"])
            if t is None:
                continue
            self.turns_done.add((r["turn"], tip))
            out = by_id[r["output"]]
            parent = self.hashes.get(t.input) if t.input else None
            if parent is None and out[1].parent is not None:
                parent = self.hashes.get(out[1].parent)
            info = {"turn": r["turn"], "started_at": t.started_at, "model": t.model, "resolved_model": t.resolved_model}
            self.turn(tid, info, parent, tip, [out])

    def turn(self, tid: str, info: dict, parent: str | None, tip: str, run: list) -> None:
        t = graph.find_turn(self.repo.objects, info["turn"]) if info.get("turn") else None
        started = info.get("started_at")
        usage = dict(t.usage or {}) if t is not None else {}
        tin = _first(usage, "input_tokens", "prompt_tokens")
        tout = _first(usage, "output_tokens", "completion_tokens")
        details = usage.pop("token_details", None)
        if details is None:
            rest = {k: v for k, v in usage.items() if k not in ("input_tokens", "prompt_tokens", "output_tokens",
                                                                "completion_tokens")}
            details = rest or None
        schema_id = None
        if t is not None and isinstance((t.meta or {}).get("schema_id"), str):
            schema_id = t.meta["schema_id"]
        elif t is not None:
            schema_id = self._schema(t.options)
        turn_id = _ulid(started, f"{info.get('turn')}:{tip}")
        self.db.execute(
            'INSERT INTO "turns" (id, thread_id, parent_message_hash, tip_message_hash, model, resolved_model, '
            "options_json, schema_id, input_tokens, output_tokens, token_details, duration_ms, datetime_utc) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (turn_id, tid, parent, tip, t.model if t is not None else info.get("model"),
             t.resolved_model if t is not None else info.get("resolved_model"),
             json.dumps(t.options) if t is not None and t.options else None, schema_id,
             tin if isinstance(tin, int) else None, tout if isinstance(tout, int) else None,
             json.dumps(details) if details else None, t.duration_ms if t is not None else None,
             _llm_time(started) if started is not None else None))
        self.result.turns += 1
        prompt = ""
        if parent is not None:
            row = self.db.execute('SELECT role FROM "messages" WHERE hash=?', (parent,)).fetchone()
            if row and row[0] == "user":
                prompt = self._texts(parent)
        response = "".join(self._texts(self.hashes[e[0]]) for e in run if e[1].role == "assistant")
        if prompt or response:
            self.db.execute('INSERT INTO "turn_search" (turn_id, prompt, response) VALUES (?, ?, ?)',
                            (turn_id, prompt, response))

    def _texts(self, h: str) -> str:
        return "".join(r[0] or "" for r in self.db.execute(
            "SELECT text FROM parts WHERE message_hash=? AND type='text' ORDER BY position", (h,)))

    def _schema(self, options: dict | None) -> str | None:
        """A JSON schema the call asked for (OpenAI ``response_format``) in llm's ``schemas``
        table, under llm's id for it (``llmdb.schema_id``)."""
        schema = response_schema(options)
        if schema is None:
            return None
        sid = llmdb.schema_id(schema)
        self.db.execute('INSERT OR IGNORE INTO "schemas" (id, content) VALUES (?, ?)',
                        (sid, json.dumps(schema, separators=(",", ":"))))
        return sid

    # -- messages ---------------------------------------------------------------------------

    def message(self, oid: str, msg, parent: str | None) -> str:
        if oid in self.hashes:
            return self.hashes[oid]
        rows: list[tuple[str, str | None, str | None, str | None]] = []  # type, tool_name, text, payload
        hash_parts: list[dict] = []
        atts: list[list[str]] = []
        for p in msg.parts:
            d, att = self.part(p)
            hd = dict(d)
            if att is not None:
                hd["attachment"] = {"id": att[0], "type": att[1]}
                d = {**d, "attachment": {"id": att[0]}}
            hash_parts.append(hd)
            payload = {k: v for k, v in d.items() if k != "type"}
            text = payload.pop("text") if d["type"] in ("text", "reasoning") and "text" in payload else None
            rows.append((d["type"], payload.get("name"), text, json.dumps(payload, ensure_ascii=False) if payload else None))
            atts.append([att[0]] if att is not None else [])
        meta = msg.meta
        pm: dict | None
        if not meta:
            pm = None
        elif set(meta) == {"provider_metadata"} and isinstance(meta["provider_metadata"], dict) and meta["provider_metadata"]:
            pm = meta["provider_metadata"]
        else:
            pm = {llmdb.CONVGIT_KEY: {"meta": meta}}
        m: dict[str, Any] = {"role": msg.role, "parts": hash_parts}
        if pm:
            m["provider_metadata"] = pm
        h = llmdb.b2_hash(m, parent)
        self.hashes[oid] = h
        cur = self.db.execute('INSERT OR IGNORE INTO "messages" (hash, parent_hash, role, provider_metadata) '
                              "VALUES (?, ?, ?, ?)", (h, parent, msg.role, json.dumps(pm, ensure_ascii=False) if pm else None))
        if cur.rowcount:
            self.result.messages += 1
            for pos, (row, ids) in enumerate(zip(rows, atts)):
                c = self.db.execute('INSERT INTO "parts" (message_hash, position, type, tool_name, text, payload) '
                                    "VALUES (?, ?, ?, ?, ?, ?)", (h, pos, *row))
                for order, aid in enumerate(ids):
                    self.db.execute('INSERT OR IGNORE INTO "part_attachments" (part_id, attachment_id, "order") '
                                    "VALUES (?, ?, ?)", (c.lastrowid, aid, order))
        return h

    def _text(self, p) -> str:
        if p.blob:
            obj = self.repo.objects.read(p.blob)
            return obj.data.decode("utf-8", "surrogatepass") if isinstance(obj, Blob) else ""
        return p.text

    def part(self, p) -> tuple[dict, tuple[str, str] | None]:
        """llm's dict of part ``p`` and, for an attachment, its (id, type) in ``attachments``."""
        if isinstance(p, AttachmentPart):
            aid, atype, path = self._attachment(p)
            d: dict[str, Any] = {"type": "attachment"}
            if (p.meta or None) != ({k: v for k, v in (("id", aid), ("path", path)) if v} or None):
                # The importer would give llm's id and path as meta: carry convgit's own.
                d["provider_metadata"] = {llmdb.CONVGIT_KEY: {"meta": p.meta or {}}}
            return d, (aid, atype)
        d = self._simple(p)
        if d is not None:
            want = p
            if isinstance(p, (TextPart, ReasoningPart)) and p.blob:
                want = type(p)(text=self._text(p), meta=p.meta)
            if llmdb.part_from_llm(d) == want:
                return d, None
        # Not expressible as llm's own part: llm gets the nearest part of its own (so it shows
        # reasoning as reasoning, a call as a call), and convgit's part travels whole beside
        # it, read back by the importer.
        whole = msgspec.to_builtins(p)
        if isinstance(p, (TextPart, ReasoningPart)) and p.blob:
            whole["text"] = self._text(p)
            whole.pop("blob", None)
        near = self._simple(p, strict=False) or {"type": "text", "text": ""}
        near["provider_metadata"] = {llmdb.CONVGIT_KEY: {"part": whole}}
        return near, None

    def _simple(self, p, strict: bool = True) -> dict | None:
        """llm's own dict for ``p``; None when llm has no field for some of it (``strict``)."""
        meta = dict(getattr(p, "meta", None) or {})
        pm = meta.pop("provider_metadata", None)
        d: dict[str, Any]
        if isinstance(p, TextPart):
            d = {"type": "text", "text": self._text(p)}
        elif isinstance(p, ReasoningPart):
            d = {"type": "reasoning", "text": self._text(p)}
            if meta.pop("redacted", False) is True:
                d["redacted"] = True
        elif isinstance(p, ToolCallPart):
            d = {"type": "tool_call", "name": p.name, "arguments": p.arguments}
            if p.id is not None:
                d["tool_call_id"] = p.id
            if meta.pop("server_executed", False) is True:
                d["server_executed"] = True
        elif isinstance(p, ToolResultPart):
            out = p.output
            d = {"type": "tool_result", "name": p.name}
            extra = {}
            if isinstance(out, dict) and "output" in out and len(out) > 1 and set(out) - {"output"} <= {
                    "exception", "server_executed", "provider_metadata"}:
                extra = {k: v for k, v in out.items() if k != "output"}
                out = out["output"]
            d["output"] = out
            if p.tool_call_id is not None:
                d["tool_call_id"] = p.tool_call_id
            d.update(extra)
            if p.is_error and "exception" not in d:
                d["exception"] = ""  # llm marks a failed call by its exception; convgit kept no text
            return d
        else:  # OpaquePart and anything newer
            return None
        if meta and strict:
            return None
        if pm:
            d["provider_metadata"] = pm
        return d

    def _attachment(self, p: AttachmentPart) -> tuple[str, str, str | None]:
        meta = p.meta or {}
        content = None
        if p.blob:
            obj = self.repo.objects.read(p.blob)
            content = obj.data if isinstance(obj, Blob) else None
        url, path = p.url, meta.get("path")
        if url and url.startswith("file:") and path and url == f"file:{path}":
            url = None
        if content is not None:
            aid = hashlib.sha256(content).hexdigest()
            path = path or p.name
        elif isinstance(meta.get("id"), str):
            aid = meta["id"]
        else:
            aid = hashlib.sha256(json.dumps({"url": url}).encode("utf-8")).hexdigest()
        atype = p.mime_type or "application/octet-stream"
        if aid not in self.attachments:
            self.attachments.add(aid)
            self.db.execute('INSERT OR IGNORE INTO "attachments" (id, type, path, url, content) VALUES (?, ?, ?, ?, ?)',
                            (aid, atype, path, url, content))
            self.result.attachments += 1
        return aid, atype, path


def response_schema(options: dict | None) -> dict | None:
    """The JSON schema of an OpenAI ``response_format`` of type ``json_schema``, else None."""
    rf = (options or {}).get("response_format")
    js = rf.get("json_schema") if isinstance(rf, dict) else None
    schema = js.get("schema") if isinstance(js, dict) else None
    return schema if isinstance(schema, dict) else None


def _first(d: dict, *keys):
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


__all__ = ["LLM_VERSION", "LlmExportResult", "schema_sql", "write_llm_db"]
