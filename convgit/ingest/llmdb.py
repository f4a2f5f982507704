"""``llm`` logs.db → conversations (research/llm-logs-import.md).

Content-addressed generation (llm ≥ 0.32): each ``threads`` row is one linear conversation
(its tip walked back through ``messages.parent_hash``), parts rebuilt with fragments and
attachments resolved, and llm's own ``b2:`` hash of every message re-derived and checked
before anything is converted (a mismatch rejects that thread with ``hash_mismatch``); the
b2 ids are kept as aliases. Each llm turn (model, tokens, duration, time) becomes the turn
of the messages it produced.

Legacy generation (``responses``): rows that no content-addressed turn and no thread covers,
one conversation per ``conversation_id``: [system] then per response [tool results], user,
assistant (reasoning, text, tool calls).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any, Iterator

from ..errors import HashMismatch, InvalidInput, SchemaValidationFailed
from ..fsio import sqlite_readonly_uri
from ..objects import AttachmentPart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .chat import parse_time
from .model import Conversation, Draft, Node
from .parts import PendingAttachment, normalize_role

SOURCE = "llm"
# provider_metadata key under which convgit's llm-db export (export_llm.py) carries what llm's
# shape cannot say: {"convgit": {"meta": ...}} on a message, {"convgit": {"part": ...}} on a
# part. Read back exactly; a real llm database never writes it.
CONVGIT_KEY = "convgit"


def is_llm_db(path) -> bool:
    """True when ``path`` is an llm logs.db (a ``responses`` table, or llm's threads schema)."""
    try:
        db = sqlite3.connect(sqlite_readonly_uri(path), uri=True)
        try:
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return False
    return "responses" in names or {"threads", "messages", "parts"} <= names


def _tables(path) -> set[str]:
    try:
        db = sqlite3.connect(sqlite_readonly_uri(path), uri=True)
        try:
            return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return set()


def is_bundle(path) -> bool:
    """True when the SQLite file at ``path`` is a convgit bundle (its ``bundle_meta`` table)."""
    return "bundle_meta" in _tables(path)


def count_conversations(path) -> int:
    """How many conversations ``iter_conversations`` will yield (for a progress bar): the
    threads of llm's threads schema plus the legacy responses' conversations. 0 when the
    file cannot be read (the import itself then says why)."""
    try:
        db = sqlite3.connect(sqlite_readonly_uri(path), uri=True)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            n = 0
            if {"threads", "messages", "parts"} <= tables:
                n += db.execute("SELECT count(*) FROM threads").fetchone()[0]
            if "responses" in tables:
                skip = " WHERE coalesce(conversation_id, '') NOT IN (SELECT id FROM threads)" if "threads" in tables else ""
                n += db.execute(f"SELECT count(DISTINCT coalesce(conversation_id, id)) FROM responses{skip}").fetchone()[0]
            return n
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return 0


def canonical_json(obj: Any) -> str:
    """llm's canonical JSON: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def b2_hash(message: dict, parent: str | None) -> str:
    """llm's id of a message under ``parent``: ``b2:`` and BLAKE2b-128 of canonical JSON (used
    to check that the database was not altered)."""
    data = canonical_json({"parent": parent, "message": message}).encode("utf-8", "surrogatepass")
    return "b2:" + hashlib.blake2b(data, digest_size=16).hexdigest()


def schema_id(schema: Any) -> str:
    """llm's id of a JSON schema (its ``schemas.id``): BLAKE2b-128 of its compact JSON."""
    return hashlib.blake2b(json.dumps(schema, separators=(",", ":")).encode(), digest_size=16).hexdigest()


def iter_conversations(path, label: str) -> Iterator[Conversation | tuple[str, Exception]]:
    """Each thread of the llm database at ``path`` as a Conversation, or ``(label, error)``
    for one that cannot be read."""
    try:
        db = sqlite3.connect(sqlite_readonly_uri(path), uri=True)
        db.row_factory = sqlite3.Row
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as e:
        raise InvalidInput(f"{label}: unreadable SQLite file: {e}") from e
    try:
        r = _Reader(db, tables)
        if {"threads", "messages", "parts"} <= tables:
            for t in db.execute("SELECT * FROM threads ORDER BY datetime_utc, id").fetchall():
                lab = f"{label}:thread {t['id']}"
                try:
                    yield r.thread(t, lab)
                except (SchemaValidationFailed, HashMismatch, InvalidInput) as e:
                    yield (lab, e)
        if "responses" in tables:
            yield from r.legacy(label)
    finally:
        db.close()


class _Reader:
    def __init__(self, db: sqlite3.Connection, tables: set[str]) -> None:
        self.db = db
        self.tables = tables

    def _one(self, sql: str, *args):
        return self.db.execute(sql, args).fetchone()

    def attachment(self, aid: str) -> dict:
        row = self._one("SELECT * FROM attachments WHERE id=?", aid) if "attachments" in self.tables else None
        if row is None:
            raise SchemaValidationFailed(f"attachment {aid} is not in the database")
        return dict(row)

    def fragment(self, fid) -> str:
        row = self._one("SELECT content FROM fragments WHERE id=?", fid)
        if row is None:
            raise SchemaValidationFailed(f"fragment {fid} is not in the database")
        return row[0]

    # -- content-addressed generation -----------------------------------------------------

    def message(self, h: str) -> tuple[dict, dict, Draft]:
        row = self._one("SELECT * FROM messages WHERE hash=?", h)
        if row is None:
            raise SchemaValidationFailed(f"message {h} is missing from the database")
        llm_parts, hash_parts, parts = [], [], []
        for p in self.db.execute("SELECT * FROM parts WHERE message_hash=? ORDER BY position", (h,)):
            d = json.loads(p["payload"]) if p["payload"] else {}
            d["type"] = p["type"]
            if p["text"] is not None:
                d["text"] = p["text"]
            if "text_ref" in d:
                d["text"] = "".join(self.fragment(x["fragment"]) if "fragment" in x else x.get("literal", "")
                                    for x in d.pop("text_ref"))
            hd = dict(d)
            if isinstance(d.get("attachment"), dict) and "id" in d["attachment"]:
                a = self.attachment(d["attachment"]["id"])
                hd["attachment"] = {"id": a["id"], "type": a["type"]}
                d["attachment"] = a
            if isinstance(d.get("attachments"), list):
                atts = [self.attachment(x["id"]) if isinstance(x, dict) and "id" in x else x for x in d["attachments"]]
                hd["attachments"] = [{"id": a["id"], "type": a["type"]} for a in atts]
                d["attachments"] = atts
            llm_parts.append(d)
            hash_parts.append(hd)
            parts.append(_part(d))
        msg = {"role": row["role"], "parts": hash_parts}
        pm = json.loads(row["provider_metadata"]) if row["provider_metadata"] else None
        if pm:
            msg["provider_metadata"] = pm
        carried = _carried(pm, "meta")
        meta = carried if isinstance(carried, dict) else ({"provider_metadata": pm} if pm else None)
        draft = Draft(role=normalize_role(row["role"], h), parts=tuple(parts), meta=meta or None)
        return dict(row), msg, draft

    def thread(self, t: sqlite3.Row, label: str) -> Conversation:
        chain = []
        h = t["tip_message_hash"]
        while h is not None:
            row, msg, draft = self.message(h)
            chain.append((h, row["parent_hash"], msg, draft))
            h = row["parent_hash"]
            if len(chain) > 1_000_000:
                raise SchemaValidationFailed("message chain too long (a cycle?)")
        chain.reverse()
        for h, parent, msg, _ in chain:
            got = b2_hash(msg, parent)
            if got != h:
                raise HashMismatch(f"llm message {h} hashes to {got}: the database was altered", claimed=h, computed=got)
        # The turn of a message is the earliest call that ended at it (the one that brought
        # it); later ones on the same tip (a re-sent identical request: llm logs each call
        # as its own turn) are kept in that turn's meta as ``other_calls``.
        turns: dict[str, Any] = {}
        later: dict[str, list] = {}
        for r in self.db.execute(
                "SELECT * FROM turns WHERE thread_id=? OR tip_message_hash IN (%s) ORDER BY datetime_utc, id"
                % ",".join("?" * len(chain)), (t["id"], *[c[0] for c in chain])):
            if r["tip_message_hash"] in turns:
                later.setdefault(r["tip_message_hash"], []).append(r)
            else:
                turns[r["tip_message_hash"]] = r
        # Each response's time and model: its turn, or (history from before llm 0.32 that a
        # newer llm continued) its legacy ``responses`` row, matched by position and text.
        rows: dict[int, Any] = {i: turns[c[0]] for i, c in enumerate(chain) if c[0] in turns}
        rows.update(self._legacy_rows(t["id"], chain, rows))
        nodes = []
        prev_tip = -1
        for i, (h, parent, _, draft) in enumerate(chain):
            tr = rows.get(i)
            kw: dict = {}
            if tr is not None:
                # A call covers what it sent and what came back: every message after the
                # previous call's response (the prompt, a system prompt, tool results).
                extra = self.turn_extra(tr, legacy="prompt" in tr.keys())
                others = [_call_record(o, self.turn_extra(o, legacy=False)) for o in later.get(h, ())]
                if others:
                    extra["other_calls"] = others
                kw = _turn_fields(tr, span=i - prev_tip, extra=extra)
                prev_tip = i
            nodes.append(Node(key=h, parent=parent, draft=draft, **kw))
        meta = {k: t[k] for k in ("name", "forked_from", "datetime_utc") if t[k] is not None}
        return Conversation(source=SOURCE, nodes=nodes, upstream_id=t["id"], title=t["name"], meta=meta or None, label=label)

    def _legacy_rows(self, cid: str, chain: list, taken: dict) -> dict[int, Any]:
        """chain position → legacy ``responses`` row, for the responses of conversation
        ``cid`` that no turn covers (a conversation begun before llm 0.32 and continued
        after it: the thread holds that history, the rows hold its times and models). Rows
        are matched in order to the assistant messages no turn names, and only where the
        text is the same: a row that does not match is not guessed."""
        if "responses" not in self.tables:
            return {}
        have = {r["id"] for r in taken.values()}
        legacy = [r for r in self.db.execute("SELECT * FROM responses WHERE conversation_id=? ORDER BY id", (cid,))
                  if r["id"] not in have and ("turns" not in self.tables or self.db.execute(
                      "SELECT 1 FROM turns WHERE id=?", (r["id"],)).fetchone() is None)]
        out: dict[int, Any] = {}
        k = 0
        for i, (_, _, _, draft) in enumerate(chain):
            if k >= len(legacy):
                break
            if i in taken or draft.role != "assistant":
                continue
            text = "".join(p.text for p in draft.parts if isinstance(p, TextPart))
            if text == (legacy[k]["response"] or ""):
                out[i] = legacy[k]
                k += 1
        return out

    # -- legacy generation ----------------------------------------------------------------

    def legacy(self, label: str) -> Iterator[Conversation]:
        covered_threads = set()
        covered_turns = set()
        if "threads" in self.tables:
            covered_threads = {r[0] for r in self.db.execute("SELECT id FROM threads")}
        if "turns" in self.tables:
            covered_turns = {r[0] for r in self.db.execute("SELECT id FROM turns")}
        rows = [r for r in self.db.execute("SELECT * FROM responses ORDER BY conversation_id, id")
                if r["id"] not in covered_turns and r["conversation_id"] not in covered_threads]
        convs: dict[str, list] = {}
        for r in rows:
            convs.setdefault(r["conversation_id"] or r["id"], []).append(r)
        for cid, rs in convs.items():
            lab = f"{label}:conversation {cid}"
            try:
                yield self._legacy_conv(cid, rs, lab)
            except (SchemaValidationFailed, InvalidInput) as e:
                yield (lab, e)

    def _legacy_conv(self, cid: str, rs: list, label: str) -> Conversation:
        nodes: list[Node] = []
        parent = None

        def add(key, draft, **kw):
            nonlocal parent
            nodes.append(Node(key=key, parent=parent, draft=draft, **kw))
            parent = key

        for i, r in enumerate(rs):
            rid = r["id"]
            span = 2
            if i == 0:
                sys = self._fragments("system_fragments", rid, strip=True)
                system = "\n\n".join(sys + ([r["system"]] if r["system"] else []))
                if system:
                    add(f"{rid}#system", Draft(role="system", parts=(TextPart(text=system),)), alias=False)
            results = [dict(x) for x in self.db.execute("SELECT * FROM tool_results WHERE response_id=? ORDER BY id", (rid,))] \
                if "tool_results" in self.tables else []
            if results:
                add(f"{rid}#tools", Draft(role="tool", parts=tuple(
                    ToolResultPart(tool_call_id=x["tool_call_id"], name=x["name"], output=x["output"],
                                   is_error=x["exception"] is not None, meta=self._result_meta(x)) for x in results)),
                    alias=False)
                span = 3
            prompt = "\n".join(self._fragments("prompt_fragments", rid) + [r["prompt"] or ""])
            uparts: list = [TextPart(text=prompt)] if prompt or not self._has_attachments(rid) else []
            for a in self._prompt_attachments(rid):
                uparts.append(_attachment(a))
            add(f"{rid}#prompt", Draft(role="user", parts=tuple(uparts)), alias=False)
            aparts: list = []
            if r["reasoning"]:
                aparts.append(ReasoningPart(text=r["reasoning"]))
            if r["response"] or not aparts:
                aparts.append(TextPart(text=r["response"] or ""))
            if "tool_calls" in self.tables:
                for c in self.db.execute("SELECT * FROM tool_calls WHERE response_id=? ORDER BY tool_call_id, id", (rid,)):
                    raw = args = c["arguments"]
                    cmeta = None
                    try:
                        args = json.loads(args) if isinstance(args, str) else args
                    except ValueError:
                        pass
                    else:  # decoded: the string itself is kept when llm's encoding does not give it back
                        if isinstance(raw, str) and json.dumps(args) != raw:
                            cmeta = {"arguments": raw}
                    aparts.append(ToolCallPart(name=c["name"], id=c["tool_call_id"], arguments=args, meta=cmeta))
            add(rid, Draft(role="assistant", parts=tuple(aparts)), **_turn_fields(r, span=span, extra=self.turn_extra(r, legacy=True)))
        title, meta = None, None
        if "conversations" in self.tables:
            c = self._one("SELECT * FROM conversations WHERE id=?", cid)
            if c is not None:
                title = c["name"] if isinstance(c["name"], str) else None
                meta = {k: c[k] for k in c.keys() if k not in ("id", "name") and c[k] is not None} or None
        return Conversation(source=SOURCE, nodes=nodes, upstream_id=cid, title=title, meta=meta, label=label)

    def turn_extra(self, r, legacy: bool) -> dict:
        """What llm recorded about a call beside its row (turn meta): the tools it offered
        (``turn_tools`` / legacy ``tool_responses``, with their definitions), the fragments its
        prompt and system prompt were made of (hash, source, aliases: their text is in the
        messages), its JSON schema's content, and a legacy row's ``prompt_json``."""
        out: dict = {}
        rid = r["id"]
        link = ("tool_responses", "response_id") if legacy else ("turn_tools", "turn_id")
        if {link[0], "tools"} <= self.tables:
            inst = ", x.instance_id AS instance_id" if link[0] == "turn_tools" else ""
            tools = []
            for t in self.db.execute(f"SELECT t.*{inst} FROM {link[0]} x JOIN tools t ON t.id = x.tool_id "
                                     f"WHERE x.{link[1]}=? ORDER BY t.name, t.id", (rid,)):
                d = {k: t[k] for k in t.keys() if k != "id" and t[k] is not None}
                tools.append(d)
            if tools:
                out["tools"] = tools
        frags = []
        if legacy:
            sources = [(f"SELECT ? AS kind, x.\"order\" AS ord, x.fragment_id AS fid FROM {t} x WHERE x.response_id=?",
                        (kind, rid), t) for t, kind in (("system_fragments", "system"), ("prompt_fragments", "prompt"))]
        else:
            sources = [("SELECT x.kind AS kind, x.\"order\" AS ord, x.fragment_id AS fid FROM turn_fragments x "
                        "WHERE x.turn_id=?", (rid,), "turn_fragments")]
        for sql, args, table in sources:
            if {table, "fragments"} <= self.tables:
                for x in self.db.execute(sql + " ORDER BY kind, ord", args).fetchall():
                    f = self._one("SELECT hash, source, datetime_utc FROM fragments WHERE id=?", x["fid"])
                    d = {"kind": x["kind"], "order": x["ord"], **(dict(f) if f is not None else {"missing": x["fid"]})}
                    if "fragment_aliases" in self.tables:
                        aliases = [a[0] for a in self.db.execute(
                            "SELECT alias FROM fragment_aliases WHERE fragment_id=? ORDER BY alias", (x["fid"],))]
                        if aliases:
                            d["aliases"] = aliases
                    frags.append({k: v for k, v in d.items() if v is not None})
        if frags:
            out["fragments"] = frags
        sid = r["schema_id"] if "schema_id" in r.keys() else None
        if sid and "schemas" in self.tables:
            row = self._one("SELECT content FROM schemas WHERE id=?", sid)
            if row is not None and row[0] is not None:
                out["schema"] = row[0]
        if legacy and "prompt_json" in r.keys() and r["prompt_json"]:
            out["prompt_json"] = r["prompt_json"]
        return out

    def _result_meta(self, x: dict) -> dict | None:
        """A legacy tool result's exception text, tool instance and attachments (what
        ``is_error`` alone does not say)."""
        meta = {k: x[k] for k in ("exception", "instance_id") if x.get(k) is not None}
        if "tool_results_attachments" in self.tables:
            atts = [dict(a) for a in self.db.execute(
                "SELECT a.id, a.type, a.path, a.url FROM tool_results_attachments t JOIN attachments a "
                "ON a.id = t.attachment_id WHERE t.tool_result_id=? ORDER BY t.\"order\"", (x["id"],))]
            if atts:
                meta["attachments"] = [{k: v for k, v in a.items() if v is not None} for a in atts]
        return meta or None

    def _fragments(self, table: str, rid: str, strip: bool = False) -> list[str]:
        if table not in self.tables:
            return []
        out = [row[0] for row in self.db.execute(
            f"SELECT f.content FROM {table} x JOIN fragments f ON f.id = x.fragment_id WHERE x.response_id=? ORDER BY x.\"order\"", (rid,))]
        return [s.strip() for s in out] if strip else out

    def _has_attachments(self, rid: str) -> bool:
        return bool(self._prompt_attachments(rid))

    def _prompt_attachments(self, rid: str) -> list[dict]:
        if "prompt_attachments" not in self.tables:
            return []
        return [dict(a) for a in self.db.execute(
            "SELECT a.* FROM prompt_attachments p JOIN attachments a ON a.id = p.attachment_id WHERE p.response_id=? ORDER BY p.\"order\"", (rid,))]


def _turn_fields(r, span: int, extra: dict | None = None) -> dict:
    usage = {k: r[k] for k in ("input_tokens", "output_tokens") if r[k] is not None}
    if r["token_details"]:
        try:
            usage["token_details"] = json.loads(r["token_details"])
        except ValueError:
            usage["token_details"] = r["token_details"]
    opts = None
    if r["options_json"]:
        try:
            opts = json.loads(r["options_json"]) or None
        except ValueError:
            opts = {"raw": r["options_json"]}
    meta = {"llm_id": r["id"]}
    if "response_json" in r.keys() and r["response_json"]:
        meta["response_json"] = r["response_json"]
    if "schema_id" in r.keys() and r["schema_id"]:
        meta["schema_id"] = r["schema_id"]
    meta.update(extra or {})
    try:
        t = parse_time(r["datetime_utc"].replace(" ", "T") if isinstance(r["datetime_utc"], str) else None, "datetime_utc")
    except SchemaValidationFailed:
        t = None
    return {"time_ms": t, "model": r["model"], "resolved_model": r["resolved_model"], "usage": usage or None,
            "duration_ms": r["duration_ms"], "options": opts, "meta": meta, "span": span}


def _call_record(r, extra: dict) -> dict:
    """Another llm turn on a message's tip, as a record for the message's turn meta (its id,
    time, models, options, tokens, duration, parent) — a call that added no message."""
    f = _turn_fields(r, span=1, extra=extra)
    rec = {"llm_id": r["id"], "datetime_utc": r["datetime_utc"], "model": f["model"], "resolved_model": f["resolved_model"],
           "usage": f["usage"], "duration_ms": f["duration_ms"], "options": f["options"],
           "parent_message_hash": r["parent_message_hash"] if "parent_message_hash" in r.keys() else None,
           **{k: v for k, v in f["meta"].items() if k != "llm_id"}}
    return {k: v for k, v in rec.items() if v is not None}


def _attachment(a: dict) -> Any:
    meta = {k: a[k] for k in ("id", "path") if a.get(k)}
    if a.get("content"):
        return PendingAttachment(data=a["content"], size=len(a["content"]), mime_type=a.get("type"),
                                 name=a.get("path"), url=a.get("url"), meta=meta or None)
    url = a.get("url") or (f"file:{a['path']}" if a.get("path") else f"llm-attachment:{a.get('id')}")
    return AttachmentPart(mime_type=a.get("type"), name=a.get("path"), url=url, meta=meta or None)


def _carried(pm: Any, key: str) -> Any:
    """What convgit's export put under ``provider_metadata["convgit"][key]``, else None."""
    if isinstance(pm, dict) and set(pm) == {CONVGIT_KEY} and isinstance(pm[CONVGIT_KEY], dict):
        return pm[CONVGIT_KEY].get(key)
    return None


def part_from_llm(d: dict) -> Any:
    """The convgit part for llm's part dict ``d`` (text and attachments already resolved)."""
    return _part(d)


# The keys of each llm part type that ``_part`` maps (the others are kept in ``meta.llm``).
_LLM_PART_KEYS = {
    "text": ("type", "text"),
    "reasoning": ("type", "text", "redacted"),
    "tool_call": ("type", "name", "tool_call_id", "arguments", "server_executed"),
    "tool_result": ("type", "name", "output", "tool_call_id", "exception", "attachments", "server_executed"),
    "attachment": ("type", "attachment"),
}


def _part(d: dict) -> Any:
    t = d.get("type")
    pm = d.get("provider_metadata")
    whole = _carried(pm, "part")
    if whole is not None:
        import msgspec

        from ..objects import Part

        try:
            return msgspec.convert(whole, Part)
        except (msgspec.ValidationError, TypeError) as e:
            raise SchemaValidationFailed(f"a part convgit exported does not read back: {e}") from e
    meta = {"provider_metadata": pm} if pm else None
    rest = {k: v for k, v in d.items() if k not in _LLM_PART_KEYS.get(t, ("type",)) and k != "provider_metadata"}
    if rest and t in _LLM_PART_KEYS:  # keys of llm's part this reader does not map, kept
        meta = {**(meta or {}), "llm": rest}
    if t == "text":
        return TextPart(text=d.get("text") or "", meta=meta)
    if t == "reasoning":
        m = dict(meta or {})
        if d.get("redacted"):
            m["redacted"] = True
        return ReasoningPart(text=d.get("text") or "", meta=m or None)
    if t == "tool_call":
        m = dict(meta or {})
        if d.get("server_executed"):
            m["server_executed"] = True
        return ToolCallPart(name=d.get("name") or "", id=d.get("tool_call_id"), arguments=d.get("arguments"), meta=m or None)
    if t == "tool_result":
        out = d.get("output")
        extra = {k: d[k] for k in ("exception", "attachments", "server_executed", "provider_metadata") if d.get(k)}
        if extra:
            out = {"output": out, **extra}
        return ToolResultPart(tool_call_id=d.get("tool_call_id"), name=d.get("name"), output=out,
                              is_error=d.get("exception") is not None)
    if t == "attachment" and isinstance(d.get("attachment"), dict):
        att = _attachment(d["attachment"])
        carried = _carried(pm, "meta")
        if isinstance(carried, dict):  # convgit's own meta, exported (export_llm.py)
            import msgspec

            att = msgspec.structs.replace(att, meta=carried or None)
        return att
    from ..objects import OpaquePart

    return OpaquePart(data=d, source=SOURCE)


__all__ = ["CONVGIT_KEY", "b2_hash", "is_llm_db", "iter_conversations", "part_from_llm", "schema_id"]
