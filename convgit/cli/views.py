"""What `log`, `show` and `search` share: the filter options, and the reading views
(-r, -x/--xl, -u, -s, -t) rendered for people and for programs."""

import sys
from typing import List

import typer

from .. import api, views
from ..errors import ConvgitError, NotFound, storage_failure
from ..ids import short
from . import output
from .params import complete_thread

# -- filter options (the same names and meanings in log and search) ------------------------

MODEL_OPT = typer.Option([], "-m", "--model", metavar="NAME",
                         help="Only turns with this model (exact name, or an alias from config.toml [aliases]); repeatable.")
THREAD_OPT = typer.Option([], "--thread", metavar="NAME", help="Only messages in this thread's history; repeatable.",
                          autocompletion=complete_thread)
SINCE_OPT = typer.Option(None, "--since", metavar="WHEN",
                         help="Only turns started at or after WHEN: a date (2024-06-01, 2024-06-01T12:00Z) or a time ago (30m, 12h, 3d, 2w, 1y).")
UNTIL_OPT = typer.Option(None, "--until", metavar="WHEN", help="Only turns started before WHEN (same forms as --since).")
ROLE_OPT = typer.Option([], "--role", metavar="ROLE", help="Only messages with this role (user, assistant, system, developer, tool); repeatable.")
TOOLS_OPT = typer.Option(False, "--tools", help="Only messages of turns that used tools (a tool call or result).")
SOURCE_OPT = typer.Option([], "--source", metavar="NAME", help="Only turns from this source (chatgpt, claude, llm, ...); repeatable.")
ID_GT_OPT = typer.Option(None, "--id-gt", metavar="KEY",
                         help="Only messages whose key is above KEY (a key, a prefix of one, or a message id); sorts by key, oldest first.")
ID_GTE_OPT = typer.Option(None, "--id-gte", metavar="KEY", help="As --id-gt, but KEY itself included.")


FRAGMENT_OPT = typer.Option([], "-f", "--fragment", metavar="FRAGMENT",
                            help="Only messages holding this text (with --turns: calls that sent or brought it back): "
                                 "a file, an alias from config.toml [fragments], "
                                 "or the id of a stored text (hash-object FILE); repeatable (all must match).")
TOOL_OPT = typer.Option([], "-T", "--tool", metavar="NAME", help="Only messages of turns that called the tool NAME; repeatable.")
CURRENT_OPT = typer.Option(False, "-c", "--current", help="The most recent conversation (the thread updated last), as llm logs -c.")
CID_OPT = typer.Option(None, "--cid", metavar="ID",
                       help="The conversation ID: a thread name, or the id an imported thread's name ends with (llm/ID).")


def conversation_thread(repo, current: bool, cid) -> str | None:
    """The thread -c/--cid name (None when neither is given)."""
    if current and cid:
        from ..errors import InvalidInput

        raise InvalidInput("give -c/--current or --cid, not both")
    if not current and cid is None:
        return None
    return api.find_conversation(repo, cid)


def make_filters(repo, model, thread, since, until, role, tools, source, id_gt, id_gte, tool=(), fragment=()):
    return api.make_filters(repo, model=model, thread=thread, since=since, until=until, role=role, tools=tools,
                            source=source, id_gt=id_gt, id_gte=id_gte, tool=tool, fragment=fragment)


# -- view options ---------------------------------------------------------------------------

RESPONSE_OPT = typer.Option(False, "-r", "--response", help="Just the text of the last assistant message.")
EXTRACT_OPT = typer.Option(False, "-x", "--extract", help="The first fenced code block of each assistant message (with -r: of the last).")
EXTRACT_LAST_OPT = typer.Option(False, "--xl", "--extract-last", help="As -x, the last code block instead.")
USAGE_OPT = typer.Option(False, "-u", "--usage", help="Token usage of each turn, and totals.")
SHORT_OPT = typer.Option(False, "-s", "--short", help="One compact entry per turn.")
TRUNCATE_OPT = typer.Option(False, "-t", "--truncate", help=f"Cut long texts to {views.TRUNCATE} characters.")


def when(iso: str | None) -> str:
    return iso[:19].replace("T", " ") + " UTC" if iso else ""


def model_of(e) -> str | None:
    t = e.turn or {}
    return t.get("resolved_model") or t.get("model")


def response_entry(entries: List, *, by_key: bool):
    """The last assistant message: newest by key (log), or last in reading order (show)."""
    cands = [e for e in entries if e.role == "assistant"]
    if not cands:
        raise NotFound("no assistant message in what was selected")
    return max(cands, key=lambda e: e.key) if by_key else cands[-1]


def print_response(repo, e, json_: bool) -> None:
    if json_:
        output.emit_json({"id": e.id, "text": e.text, "model": model_of(e), "started_at": api.iso((e.turn or {}).get("started_at"))})
    else:
        sys.stdout.write(e.text + ("" if e.text.endswith("\n") else "\n"))


def print_extract(entries: List, *, last: bool, json_: bool) -> None:
    found = []
    for e in entries:
        blocks = views.code_blocks(e.text)
        if blocks:
            found.append({"id": e.id, "code": blocks[-1] if last else blocks[0]})
    if json_:
        output.emit_json(found)
        return
    for b in found:
        sys.stdout.write(b["code"] + "\n")


def usage_line(e) -> str | None:
    u = views.usage(e)
    if u is None:
        return None
    bits = []
    if u["input_tokens"] is not None:
        bits.append(f"{u['input_tokens']} input")
    if u["output_tokens"] is not None:
        bits.append(f"{u['output_tokens']} output")
    if not bits and u["details"]:
        bits.append(", ".join(f"{k} {v}" for k, v in sorted(u["details"].items()) if isinstance(v, (int, float))))
    return "Usage:  " + (", ".join(bits) + " tokens" if bits else "(not recorded)")


def totals_line(entries: List) -> str:
    return _totals_text(views.usage_totals(entries))


def _totals_text(t: dict) -> str:
    return (f"Total:  {t['input_tokens']} input, {t['output_tokens']} output tokens "
            f"({t['total_tokens']} in all) over {t['turns']} turn(s)")


def print_short(repo, entries: List, *, json_: bool, usage: bool, filters=None, newest_first: bool = True) -> None:
    rows = api.summaries(repo, entries, filters=filters, newest_first=newest_first)
    totals = {"turns": 0, "input_tokens": 0, "output_tokens": 0}
    for r in rows:  # each call listed once, also those that added no message
        if r["usage"]:
            totals["turns"] += 1
            totals["input_tokens"] += r["usage"]["input_tokens"] or 0
            totals["output_tokens"] += r["usage"]["output_tokens"] or 0
    totals["total_tokens"] = totals["input_tokens"] + totals["output_tokens"]
    if json_:
        for r in rows:
            r["started_at"] = api.iso(r["started_at"])
            if not usage:
                r.pop("usage")
        doc = {"turns": rows, "usage": totals} if usage else rows
        output.emit_json(doc)
        return
    for r in rows:
        head = [when(api.iso(r["started_at"])) or "(no time)", r["model"] or "", r["thread"] or ""]
        output.styled([(short(r["messages"][-1]), "yellow"), ("  " + "  ".join(h for h in head if h), "dim")])
        if r["prompt"] is not None:
            output.line(f"  > {r['prompt']}")
        if r["response"] is not None:
            output.line(f"  < {r['response']}")
        if r["tool_calls"]:
            output.line(f"  tools: {', '.join(r['tool_calls'])}", "magenta")
        if usage and r["usage"]:
            output.line(f"  usage: {r['usage']['input_tokens']} input, {r['usage']['output_tokens']} output", "dim")
    if usage:
        output.line(_totals_text(totals), "bold")


def entry_json(repo, e, *, usage: bool, truncate: bool) -> dict:
    d = e.to_json(repo)
    if usage:
        d["usage"] = views.usage(e)
    return views.truncate_json(d) if truncate else d


def print_entries_json(repo, entries, *, usage: bool, truncate: bool) -> None:
    """An array of entries (with usage, an object whose ``usage`` totals follow the
    entries), streamed: the first row is printed as soon as it is read.

    A walk can meet a missing or corrupt object after many rows. The array then still ends
    validly: its last element is the error document (``{"status": "error", "error_code",
    ...}``, docs/json.md §4), and the command exits with that error's code. An error before
    the first row prints the error document alone, as every command does."""
    out = sys.stdout
    seen: list = []
    failed: list = []

    def gen():
        try:
            for e in entries:
                if usage and views.usage(e) is not None:
                    seen.append(e)
                yield entry_json(repo, e, usage=usage, truncate=truncate)
        except ConvgitError as err:
            failed.append(err)
            yield err.to_json()
        except Exception as err:  # a full disk, an I/O error: storage_failed, as elsewhere
            mapped = storage_failure(err)
            if mapped is None:
                raise
            failed.append(mapped)
            yield mapped.to_json()

    if usage:
        out.write('{"entries": ')
    output.emit_json_lines_array(gen(), out, flush_every=64)
    if usage:
        out.write(', "usage": ' + output.json.dumps(views.usage_totals(seen)) + "}\n")
    out.flush()
    if failed:
        output.info(f"convgit: error: {failed[0].message} [{failed[0].code}] (the last element of the array)")
        raise typer.Exit(failed[0].exit_code)
