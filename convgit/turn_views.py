"""The call-level views of the log (``log --turns``, ``-u``, ``--schema``, ``-f``): what ``llm logs`` lists,
over convgit's turns. Re-exported by convgit.api, which the CLI calls."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from .errors import ConvgitError, InvalidInput, NotFound, ObjectCorrupt, ObjectMissing
from .timefmt import iso

if TYPE_CHECKING:  # runtime imports are in the functions: each command loads only what it uses
    from .index.filters import Filters
    from .objects import Turn
    from .repository import Repository


def turn_level(repo: Repository, filters: "Filters | None") -> "Filters | None":
    """``filters`` with its model condition turn-level, as ``llm logs -m`` means it: a message
    passes ``-m MODEL`` when the turn that brought it is of that model (as before), or when any
    recorded call of that model covered it: what the call brought and the message it answered
    (its prompt), also for a call that added no message (a re-sent stateless call). The
    call must pass ``--since``/``--until``/``--source`` too. Without ``-m``: ``filters``."""
    if filters is None or not filters.models:
        return filters
    import dataclasses

    from .index.filters import Filters

    repo.index.refresh_if_changed()
    covered: dict[str, None] = dict.fromkeys(filters.covered)
    # What each call brought, and its prompt: its output's ancestry, walked in the index (one
    # statement), not through the objects (a read per message: seconds for the thousands of
    # calls of a model in a large store). Sorted: the same tuple whatever the backend.
    covered.update(dict.fromkeys(sorted(repo.index.calls_cover(
        Filters(models=filters.models, since=filters.since, until=filters.until, sources=filters.sources)))))
    return dataclasses.replace(filters, covered=tuple(covered))


def summaries(repo: Repository, entries: list, *, filters: "Filters | None" = None,
              newest_first: bool = True) -> list[dict]:
    """``log -s``/``show -s``: one summary per turn of ``entries`` (``views.short``) and one
    for every other recorded call whose output is among them: a call that added no message
    (a re-sent stateless call) is listed as ``llm logs`` lists it, next to the turn that
    first brought its answer. ``filters``' model, time and source conditions pick those calls."""
    from .objects import ToolCallPart

    from . import views
    from .index.filters import Filters, sort_key

    rows = views.short(entries, lambda e: e.key)
    by_id = {e.id: e for e in entries}
    shown = {r["turn"] for r in rows if r["turn"]}
    f = filters or Filters()
    repo.index.refresh_if_changed()
    extra: dict[int, list[dict]] = {}
    where = {oid: i for i, r in enumerate(rows) for oid in r["messages"]}
    for t in repo.index.turn_rows(Filters(models=f.models, since=f.since, until=f.until, sources=f.sources)):
        out = by_id.get(t["output"])
        if out is None or t["turn"] in shown:
            continue
        shown.add(t["turn"])
        prompt = None
        cur = by_id.get(out.parent) if out.parent else None
        while cur is not None and prompt is None:
            prompt = cur.text if cur.role == "user" and cur.text.strip() else None
            cur = by_id.get(cur.parent) if cur.parent else None
        if out.role == "user" and out.text.strip():
            prompt = out.text
        has_usage = t["input_tokens"] is not None or t["output_tokens"] is not None
        extra.setdefault(where[out.id], []).append({
            "key": sort_key(t["started_at"], t["turn"], out.id, out.depth),
            "turn": t["turn"], "started_at": t["started_at"],
            "model": t["resolved_model"] or t["model"], "kind": t["kind"], "thread": t["thread"],
            "messages": [out.id],
            "prompt": views.truncate(prompt) if prompt is not None else None,
            "response": views.truncate(out.text) if out.role == "assistant" and out.text.strip() else None,
            "tool_calls": [p.name for p in out.message.parts if isinstance(p, ToolCallPart)],
            "usage": {"input_tokens": t["input_tokens"], "output_tokens": t["output_tokens"]} if has_usage else None,
        })
    if f.models:  # the messages are those calls of the model covered: show those calls only
        def of_model(r: dict) -> bool:
            t = by_id[r["messages"][0]].turn or {}
            return r["model"] in f.models or t.get("model") in f.models
        keep = [of_model(r) for r in rows]
    else:
        keep = [True] * len(rows)
    out_rows: list[dict] = []
    for i, r in enumerate(rows):
        if not keep[i]:
            out_rows.extend(extra.get(i, ()))
            continue
        more = sorted(extra.get(i, ()), key=lambda x: x["key"], reverse=newest_first)
        out_rows.extend([*more, r] if newest_first else [r, *more])
    return out_rows


def _eager_first(it: Iterator) -> Iterator:
    try:
        first = next(it)
    except StopIteration:
        return iter(())
    return itertools.chain([first], it)


def make_filters(repo: Repository, *, fragment=(), **options) -> "Filters":
    """Filters for ``log``/``search`` from option values (see ``index.filters.make_filters``):
    ``model``, ``thread``, ``since``, ``until``, ``role``, ``tools``, ``tool`` (tool names
    called), ``source``, ``id_gt``, ``id_gte``, ``fragment`` (``fragment_text``)."""
    from .index.filters import make_filters as _make

    return _make(repo, fragments=tuple(fragment_text(repo, f) for f in fragment), **options)


def fragment_text(repo: Repository, name: str) -> str:
    """The text ``-f/--fragment NAME`` stands for, as llm's fragments: an alias from
    config.toml ``[fragments]`` (its value is then read the same way), a file, or the id of a
    stored text (a blob: what ``hash-object FILE`` prints for a file's bytes, and what a
    text over the blob threshold is stored as; a unique prefix of 4+ hex digits works)."""
    from . import revparse
    from .objects import Blob

    from .config import load_fragment_aliases

    seen = set()
    value = name
    aliases = load_fragment_aliases(repo.path / "config.toml")
    while value in aliases and value not in seen:
        seen.add(value)
        value = aliases[value]
    p = Path(value)  # (the shell expands ~; a path from config.toml is relative to the cwd)
    if p.is_file():
        try:
            text = p.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidInput(f"--fragment {name}: {p} cannot be read as UTF-8 text ({e})") from None
    else:
        oid = None
        v = value.strip().lower()
        if 4 <= len(v) <= 64 and all(c in "0123456789abcdef" for c in v):
            try:
                oid = revparse.resolve(repo, v)
            except ConvgitError:
                oid = None
        obj = repo.objects.read(oid) if oid else None
        data = obj.data if isinstance(obj, Blob) else None
        if data is None and oid is None and 4 <= len(v) <= 64:
            # a text stored once by reference in a pack (a fragment: format.md §9)
            fragment = getattr(repo.objects, "fragment", None)
            data = fragment(v) if fragment is not None and all(c in "0123456789abcdef" for c in v) else None
        if data is None:
            raise NotFound(f"--fragment {name}: not a [fragments] alias, a file, or the id of a stored text", fragment=name)
        text = data.decode("utf-8", "surrogatepass")
    if not text:
        raise InvalidInput(f"--fragment {name}: the text is empty")
    return text


def schema_of(t: Turn) -> dict:
    """The structured output a recorded call asked for: ``{"id", "name", "schema"}`` (``id``
    llm's id of the JSON schema, ``llmdb.schema_id``, or the llm ``schema_id`` an imported
    call kept; ``name`` the OpenAI ``json_schema.name``), any of them None."""
    from .export_llm import response_schema
    from .ingest.llmdb import schema_id

    schema = response_schema(t.options)
    rf = (t.options or {}).get("response_format")
    js = rf.get("json_schema") if isinstance(rf, dict) else None
    sid = (t.meta or {}).get("schema_id")
    return {"id": sid if isinstance(sid, str) else (schema_id(schema) if schema is not None else None),
            "name": js.get("name") if isinstance(js, dict) and isinstance(js.get("name"), str) else None,
            "schema": schema}


def _schema_matches(repo: Repository, want: str):
    """A predicate over turns for ``--schema X``: X is a schema id (or a unique 4+ character
    prefix of one), a schema name, a JSON schema, or a file holding one."""
    from .ingest.llmdb import schema_id

    target = None
    text = want
    p = Path(want)
    if len(want) < 4096 and p.is_file():
        text = p.read_text("utf-8")
    if text.lstrip().startswith("{"):
        import json as _json

        try:
            given = _json.loads(text)
        except ValueError as e:
            raise InvalidInput(f"--schema {want!r}: not JSON ({e})") from None
        # llm's id depends on key order; convgit stores a schema with its keys sorted
        target = {schema_id(given), schema_id(_json.loads(_json.dumps(given, sort_keys=True)))}
    low = want.lower()

    def match(t: Turn) -> bool:
        s = schema_of(t)
        if target is not None:
            return s["id"] in target
        return (s["name"] == want) or (s["id"] is not None and len(low) >= 4 and s["id"].startswith(low))

    return match


def turns(repo: Repository, *, count: int = 0, filters: "Filters | None" = None, schema: bool | str = False,
          fragments: tuple[str, ...] | list[str] = ()) -> list[dict]:
    """The turn-level view (``log --turns``), as ``llm logs`` lists calls: one entry per
    recorded call, newest first, including calls that added no new message (a re-sent
    stateless call, a re-committed conversation with call metadata). Each entry: turn,
    thread, kind, model, started_at (ISO), duration_ms, usage (input/output tokens, details),
    source, error, the output message id, its ``response`` text (when it is an assistant
    message) and the ``prompt`` (the last user message the turn covers or answers).
    ``schema``: only calls that asked for structured output (a JSON schema); a string: only
    those of that schema (an id, a name, a JSON schema or a file holding one, see
    ``_schema_matches``), and each entry gets its ``schema`` (``schema_of``). ``fragments``
    (``log --turns -f``, texts from ``fragment_text``): only calls that sent or brought back
    each text: in the answer or the messages the call covers since the previous answer (its
    prompt, a system prompt, a pasted document), as ``-f`` is for messages."""
    from . import graph
    from .objects import Message
    from .texts import message_text

    if count < 0:
        raise InvalidInput("-n must be 0 (all) or more")
    repo.index.refresh_if_changed()
    match = _schema_matches(repo, schema) if isinstance(schema, str) and schema != "any" else None
    rows = repo.index.turn_rows(filters, 0 if match or fragments else count, schema=bool(schema))
    if fragments:
        rows = [r for r in rows if _turn_holds(repo, r, fragments)]
        if not match:
            rows = rows[:count] if count else rows
    schemas: dict[str, dict] = {}
    if isinstance(schema, str):
        kept = []
        for r in rows:
            t = graph.find_turn(repo.objects, r["turn"])
            if t is None or (match is not None and not match(t)):
                continue
            schemas[r["turn"]] = schema_of(t)
            kept.append(r)
        rows = kept[:count] if count else kept
    out = []
    for r in rows:
        response = prompt = None
        try:
            msg = repo.objects.read(r["output"])
            if isinstance(msg, Message):
                if msg.role == "assistant":
                    response = message_text(repo, msg)
                cur, steps = msg, max(1, r["span"] or 1) + 1
                while cur is not None and steps > 0:
                    if cur.role == "user":
                        prompt = message_text(repo, cur)
                        break
                    cur = repo.objects.read(cur.parent) if cur.parent else None
                    steps -= 1
        except (ObjectMissing, ObjectCorrupt):
            pass  # the output is gone (a pruned history): the call is still listed
        details = None
        if r["usage_json"]:
            import json as _json

            try:
                details = _json.loads(r["usage_json"])
            except ValueError:
                details = None
        out.append({
            "turn": r["turn"], "thread": r["thread"], "kind": r["kind"],
            "model": r["resolved_model"] or r["model"], "requested_model": r["model"],
            "started_at": iso(r["started_at"]), "duration_ms": r["duration_ms"],
            "usage": ({"input_tokens": r["input_tokens"], "output_tokens": r["output_tokens"], "details": details}
                      if r["input_tokens"] is not None or r["output_tokens"] is not None or details else None),
            "source": r["source"], "error": r["error"], "output": r["output"],
            "prompt": prompt, "response": response,
        })
        if r["turn"] in schemas:
            out[-1]["schema"] = {k: v for k, v in schemas[r["turn"]].items() if k != "schema"}
    return out


def _turn_holds(repo: Repository, row: dict, fragments) -> bool:
    """Does the call ``row`` (a ``turn_rows`` entry) send or bring back every text of
    ``fragments``: in one part (text, reasoning, a tool call's arguments, a tool's output) of
    its output message or of the messages it covers before it (at least its prompt)."""
    import msgspec
    from .objects import Message
    from .texts import resolve_text as _resolve_text

    texts: list[str] = []
    try:
        cur = repo.objects.read(row["output"])
        steps = max(1, row["span"] or 1) + 1
        while isinstance(cur, Message) and steps > 0:
            for p in cur.parts:
                v = _resolve_text(repo, p) if hasattr(p, "text") else getattr(p, "arguments", getattr(p, "output", None))
                if v is not None:
                    texts.append(v if isinstance(v, str) else msgspec.json.encode(v).decode())
            cur = repo.objects.read(cur.parent) if cur.parent else None
            steps -= 1
    except (ObjectMissing, ObjectCorrupt):
        pass  # the output is gone (a pruned history): only what was read counts
    return all(any(f in t for t in texts) for f in fragments)
