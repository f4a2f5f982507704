"""log, show."""

from typing import List, Optional

import typer

from .. import api, views
from ..errors import InvalidInput, ObjectMissing
from ..ids import short
from ..objects import AttachmentPart, OpaquePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from . import output
from . import views as V
from .app import app, get_repo
from .params import complete_rev

JSON_OPT = typer.Option(False, "--json", help="Output JSON.")


def _when(iso: str | None) -> str:
    return iso[:19].replace("T", " ") + " UTC" if iso else ""


def _first_line(text: str, width: int = 72) -> str:
    s = text.strip().splitlines()[0] if text.strip() else ""
    return s if len(s) <= width else s[: width - 1] + "…"


def _summary(e: api.LogEntry) -> str:
    if e.text.strip():
        return _first_line(e.text)
    # What the message does beats the reasoning that led to it (reasoning usually comes first).
    tools = views.tool_summary(e.message.parts)
    if tools:
        return tools
    for p in e.message.parts:
        if isinstance(p, AttachmentPart):
            return f"[attachment] {p.name or p.mime_type or p.url or ''}"
    if any(isinstance(p, ReasoningPart) for p in e.message.parts):
        return "[reasoning]"
    return ""


@app.command("log")
def log_cmd(
    rev: Optional[str] = typer.Argument(None, metavar="REV", help="Where to start (default HEAD).", autocompletion=complete_rev),
    count: int = typer.Option(0, "-n", "--count", metavar="N", help="At most N messages (0 = all)."),
    oneline: bool = typer.Option(False, "--oneline", help="One line per message."),
    reverse: bool = typer.Option(False, "--reverse", help="Oldest first."),
    all_: bool = typer.Option(False, "--all", help="Every message reachable from any thread, once."),
    graph: bool = typer.Option(False, "--graph", help="Draw the fork tree (of every thread with --all)."),
    turns: bool = typer.Option(False, "--turns", help="One entry per recorded call, newest first, as llm logs lists them "
                                                      "(also calls that added no new message)."),
    schema: Optional[str] = typer.Option(None, "--schema", metavar="X",
                                         help="With --turns: only calls that asked for this structured output: a schema "
                                              "id (or a prefix), a schema name, a JSON schema or a file holding one; "
                                              "'any' for every call with a JSON schema (as llm logs --schema)."),
    data: bool = typer.Option(False, "--data", help="With --turns: the JSON each call returned, one object per line "
                                                    "(implies --schema any), as llm logs --data."),
    model: List[str] = V.MODEL_OPT,
    thread: List[str] = V.THREAD_OPT,
    since: Optional[str] = V.SINCE_OPT,
    until: Optional[str] = V.UNTIL_OPT,
    role: List[str] = V.ROLE_OPT,
    tools: bool = V.TOOLS_OPT,
    tool: List[str] = V.TOOL_OPT,
    fragment: List[str] = V.FRAGMENT_OPT,
    current: bool = V.CURRENT_OPT,
    cid: Optional[str] = V.CID_OPT,
    source: List[str] = V.SOURCE_OPT,
    id_gt: Optional[str] = V.ID_GT_OPT,
    id_gte: Optional[str] = V.ID_GTE_OPT,
    response: bool = V.RESPONSE_OPT,
    extract: bool = V.EXTRACT_OPT,
    extract_last: bool = V.EXTRACT_LAST_OPT,
    usage: bool = V.USAGE_OPT,
    short_: bool = V.SHORT_OPT,
    truncate: bool = V.TRUNCATE_OPT,
    json_: bool = JSON_OPT,
) -> None:
    """Messages from the tip back to the root, newest first (like git log)."""
    output.set_json(json_)
    repo = get_repo()
    conv = V.conversation_thread(repo, current, cid)
    if conv is not None:
        if rev is not None or all_:
            raise InvalidInput("-c/--cid name the conversation to show: not with REV or --all")
        rev = conv
    if (schema or data) and not turns:
        raise InvalidInput("--schema and --data apply to --turns (the calls)")
    if turns:
        _turns(repo, rev, count=count, json_=json_, usage=usage, truncate=truncate, schema=schema or data, data=data,
               filters_args=(model, thread, since, until, role, tools, source, id_gt, id_gte, tool),
               fragments=fragment,
               refused={"--graph": graph, "--all": all_, "--reverse": reverse, "--oneline": oneline, "--role": role,
                        "--tools": tools, "-T": tool, "--id-gt": id_gt, "--id-gte": id_gte, "-r": response,
                        "-x": extract, "--xl": extract_last, "-s": short_})
        return
    if graph:
        _graph(repo, rev, all_=all_, count=count, reverse=reverse, json_=json_,
               refused={"-m": model, "--thread": thread, "--since": since, "--until": until, "--role": role,
                        "--tools": tools, "-T": tool, "--source": source, "--id-gt": id_gt, "--id-gte": id_gte,
                        "-r": response, "-x": extract, "--xl": extract_last, "-u": usage, "-s": short_,
                        "--oneline": oneline, "-f": fragment})
        return
    with output.paged():
        _log_text(repo, rev, count, all_, reverse, oneline,
                  (model, thread, since, until, role, tools, source, id_gt, id_gte, tool, fragment),
                  response, extract, extract_last, usage, short_, truncate, json_, role)


def _log_text(repo, rev, count, all_, reverse, oneline, filters_args, response, extract, extract_last, usage,
              short_, truncate, json_, role) -> None:
    """The message log (every form but --graph and --turns), inside the pager."""
    filters = V.make_filters(repo, *filters_args)
    entries = api.iter_log(repo, rev, count=count, all_threads=all_, reverse=reverse, filters=filters)
    if response or extract or extract_last:
        entries = list(entries)
        if response:
            entries = [V.response_entry(entries, by_key=True)]
        elif not role:
            entries = [e for e in entries if e.role == "assistant"]
        if extract or extract_last:
            V.print_extract(entries, last=extract_last, json_=json_)
        else:
            V.print_response(repo, entries[0], json_)
        return
    if short_:
        V.print_short(repo, list(entries), json_=json_, usage=usage, filters=filters, newest_first=not reverse)
        return
    if json_:
        V.print_entries_json(repo, entries, usage=usage, truncate=truncate)
        return
    seen: list = []
    for i, e in enumerate(entries):
        if usage:
            seen.append(e)
        names = repo.index.threads_at(e.id)  # the index (caught up by the walk), not every ref file
        deco = f" ({', '.join(names)})" if names else ""
        model_ = V.model_of(e)
        if oneline:
            output.styled([(short(e.id), "yellow"), (deco, "cyan"), (f" {e.role:<9} ", "bold"), (_summary(e), None)])
            continue
        if i:
            output.line()
        output.styled([("message ", "yellow"), (e.id, "yellow"), (deco, "cyan")])
        output.line(f"Role:   {e.role}")
        when = _when(api.iso((e.turn or {}).get("started_at")))
        if when:
            output.line(f"Date:   {when}")
        if model_:
            output.line(f"Model:  {model_}")
        if usage and V.usage_line(e):
            output.line(V.usage_line(e))
        if filters.paging:
            output.line(f"Key:    {e.key}")
        output.line()
        body = e.text if e.text.strip() else _summary(e)
        if truncate:
            body = truncate_text(body)
        for ln in body.splitlines() or [""]:
            output.line("    " + ln)
    if usage:
        output.line()
        output.line(V.totals_line(seen), "bold")


def _turns(repo, rev, *, count: int, json_: bool, usage: bool, truncate: bool, filters_args, refused: dict,
           schema: "bool | str" = False, data: bool = False, fragments=()) -> None:
    """``log --turns``: the turn-level view (api.turns); REV, when given, is the thread."""
    bad = [k for k, v in refused.items() if v]
    if bad:
        raise InvalidInput(f"--turns lists recorded calls: {', '.join(bad)} cannot be combined with it")
    model, thread, since, until, *_ = filters_args
    if rev is not None:
        from ..ids import check_thread_name

        name = repo.refs.read_head() if rev in ("HEAD", "@") else rev
        check_thread_name(name)
        thread = [*thread, name]
    filters = V.make_filters(repo, model, thread, since, until, [], False, filters_args[6], None, None)
    texts = tuple(api.fragment_text(repo, f) for f in fragments)
    rows = api.turns(repo, count=count, filters=filters, schema=schema, fragments=texts)
    if data:
        docs = []
        for r in rows:
            try:
                docs.append(output.json.loads(r["response"] or ""))
            except ValueError:
                continue  # an answer that is not JSON (a refusal, an error): not data
        if json_:
            output.emit_json(docs)
        else:
            for d in docs:
                output.line(output.json.dumps(d, ensure_ascii=False))
        return
    if json_:
        if truncate:
            rows = [{**r, "prompt": views.truncate(r["prompt"]) if r["prompt"] else r["prompt"],
                     "response": views.truncate(r["response"]) if r["response"] else r["response"]} for r in rows]
        output.emit_json(rows if not usage else {"turns": rows, "usage": _turn_totals(rows)})
        return
    with output.paged():
        for r in rows:
            head = [V.when(r["started_at"]) or "(no time)", r["model"] or "", r["thread"] or "", r["kind"]]
            output.styled([(short(r["turn"]), "yellow"), ("  " + "  ".join(h for h in head if h), "dim")])
            for mark, text in (("> ", r["prompt"]), ("< ", r["response"])):
                if text is not None:
                    body = views.truncate(text) if truncate else _first_line(text, 100)
                    output.line("  " + mark + body)
            if usage and r["usage"]:
                output.line(f"  usage: {r['usage']['input_tokens']} input, {r['usage']['output_tokens']} output", "dim")
        if usage:
            t = _turn_totals(rows)
            output.line(f"Total:  {t['input_tokens']} input, {t['output_tokens']} output tokens over {t['turns']} turn(s)",
                        "bold")


def _turn_totals(rows: list[dict]) -> dict:
    u = [r["usage"] for r in rows if r["usage"]]
    i = sum(x["input_tokens"] or 0 for x in u)
    o = sum(x["output_tokens"] or 0 for x in u)
    return {"turns": len(rows), "input_tokens": i, "output_tokens": o, "total_tokens": i + o}


def _graph(repo, rev, *, all_: bool, count: int, reverse: bool, json_: bool, refused: dict) -> None:
    """``log --graph``: the fork tree, root first; -n keeps its first N messages; --json
    gives it as a JSON tree. Options that select or reshape messages do not apply to a
    tree: refused by name rather than ignored."""
    if reverse:
        raise InvalidInput("--graph draws each tree root first already: it cannot be combined with --reverse (as in git)")
    bad = [k for k, v in refused.items() if v]
    if bad:
        raise InvalidInput(f"--graph draws the whole fork tree: {', '.join(bad)} cannot be combined with it "
                           "(use log without --graph to filter)")
    if count < 0:
        raise InvalidInput("-n must be 0 (all) or more")
    rows = api.tree(repo, None if all_ else ("HEAD" if rev is None else rev))
    total = len(rows)
    if count:
        rows = rows[:count]
    if json_:
        output.emit_json({"conversations": api.nest_tree(rows), "messages": len(rows), "total": total,
                          "truncated": len(rows) < total})
        return
    with output.paged():
        _draw_tree(rows)
        if len(rows) < total:
            output.line(f"... {total - len(rows)} more message(s) (-n 0 shows all)", "dim")


def _draw_tree(rows: list[dict]) -> None:
    open_levels: dict[int, bool] = {}
    for i, r in enumerate(rows):
        d = r["depth"]
        if i and r["parent"] is None:  # a blank line between separate conversations
            output.line()
            open_levels = {}
        pre = "".join("│ " if open_levels.get(lv) else "  " for lv in range(1, d))
        if r["branch"]:
            pre += "└─" if r["last"] else "├─"
            open_levels[d] = not r["last"]
        elif d:
            pre += "│ " if open_levels.get(d) else "  "
        deco = f"  ({', '.join(r['tips'])})" if r["tips"] else ""
        text = _first_line(r["summary"], 60)
        output.styled([(pre, None), ("● ", "bold"), (short(r["id"]), "yellow"), (f" {r['role']}: ", "bold"), (text, None), (deco, "cyan")])


@app.command("show")
def show_cmd(
    rev: Optional[str] = typer.Argument(None, metavar="REV", help="A thread, message id or NAME~N (default HEAD).",
                                        autocompletion=complete_rev),
    reasoning: bool = typer.Option(False, "--reasoning", help="Unfold model reasoning."),
    response: bool = V.RESPONSE_OPT,
    extract: bool = V.EXTRACT_OPT,
    extract_last: bool = V.EXTRACT_LAST_OPT,
    usage: bool = V.USAGE_OPT,
    short_: bool = V.SHORT_OPT,
    truncate: bool = V.TRUNCATE_OPT,
    json_: bool = JSON_OPT,
) -> None:
    """The conversation up to REV in reading order, rendered for a person."""
    output.set_json(json_)
    repo = get_repo()
    from ..revparse import resolve_with_thread

    with output.paged():
        tip, thread = resolve_with_thread(repo, "HEAD" if rev is None else rev)
        if rev is None:
            thread = repo.refs.read_head()
        _check_stored(repo, tip, thread)
        entries = api.conversation(repo, tip)
        if response or extract or extract_last:
            chosen = [V.response_entry(entries, by_key=False)] if response else [e for e in entries if e.role == "assistant"]
            if extract or extract_last:
                V.print_extract(chosen, last=extract_last, json_=json_)
            else:
                V.print_response(repo, chosen[0], json_)
            return
        if short_:
            V.print_short(repo, entries, json_=json_, usage=usage, newest_first=False)
            return
        if json_:
            doc = {"thread": thread, "tip": tip,
                   "messages": [V.entry_json(repo, e, usage=usage, truncate=truncate) for e in entries]}
            if usage:
                doc["usage"] = views.usage_totals(entries)
            output.emit_json(doc)
            return
        if thread:
            output.line(f"Thread {thread} · {len(entries)} message(s) · tip {short(tip)}", "bold")
            output.line()
        names: dict = {}
        for e in entries:
            names.update(views.tool_names(e.message.parts))
            _render_message(repo, e, reasoning, truncate=truncate, names=names)
            if usage and V.usage_line(e):
                output.line(V.usage_line(e), "dim")
                output.line()
        if usage:
            output.line(V.totals_line(entries), "bold")


def _check_stored(repo, tip: str, thread: str | None) -> None:
    """A revision that resolved to an id whose object is gone (a thread's tip, or NAME~N) is a
    damaged store, not an unknown revision: object_missing naming the id (resolving the id
    again, as ``api.conversation`` does, would call it not_found)."""
    if repo.objects.contains(tip):
        return
    try:
        repo.objects.read_bytes(tip)  # a damaged pack index says object_corrupt, not missing
    except ObjectMissing:
        where = f"thread {thread!r} points at" if thread else "the revision names"
        raise ObjectMissing(f"{where} object {tip}, which is missing", oid=tip, thread=thread) from None


def truncate_text(text: str) -> str:
    return views.truncate(text)


def _render_message(repo, e: api.LogEntry, unfold: bool, *, truncate: bool = False, names: dict | None = None) -> None:
    names = names or {}
    t = e.turn or {}
    bits = [e.role]
    when = _when(api.iso(t.get("started_at")))
    if when:
        bits.append(when)
    model = t.get("resolved_model") or t.get("model")
    if model and e.role == "assistant":
        bits.append(model)
    bits.append(short(e.id))
    head = "── " + " · ".join(bits) + " "
    output.line(head + "─" * max(3, 72 - len(head)), {"user": "bold green", "assistant": "bold blue"}.get(e.role, "bold"))
    for p in e.message.parts:
        if isinstance(p, TextPart):
            text = api._resolve_text(repo, p)
            if truncate:
                output.line(truncate_text(text))
            elif output.color():
                from rich.markdown import Markdown

                output.console().print(Markdown(text))
            else:
                output.line(text)
        elif isinstance(p, ReasoningPart):
            text = api._resolve_text(repo, p)
            if unfold:
                output.line("[reasoning]", "dim")
                for ln in text.splitlines():
                    output.line("  " + ln, "dim")
            else:
                output.line(f"[reasoning: {len(text)} characters, --reasoning to show]", "dim")
        elif isinstance(p, ToolCallPart):
            args = p.arguments if isinstance(p.arguments, str) else output.json.dumps(p.arguments, ensure_ascii=False)
            output.line(f"→ tool call {p.name}({args or ''})" + (f"  id={p.id}" if p.id else ""), "magenta")
        elif isinstance(p, ToolResultPart):
            o = p.output if isinstance(p.output, str) else output.json.dumps(p.output, ensure_ascii=False)
            label = "← tool error" if p.is_error else "← tool result"
            called = p.name or names.get(p.tool_call_id or "")
            output.line(f"{label}" + (f" of {called}" if called else "") + (f" for {p.tool_call_id}" if p.tool_call_id else "")
                        + ":", "magenta")
            for ln in (o or "").splitlines():
                output.line("  " + ln)
        elif isinstance(p, AttachmentPart):
            desc = p.name or p.url or (p.blob and short(p.blob)) or ""
            output.line(f"[attachment {p.mime_type or ''} {desc} {p.size if p.size is not None else ''}]".replace("  ", " "), "dim")
        elif isinstance(p, OpaquePart):
            output.line(f"[{p.source or 'opaque'} part kept as is]", "dim")
    output.line()
