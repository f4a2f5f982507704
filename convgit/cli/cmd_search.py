"""search."""

from typing import List, Optional

import typer

from .. import api
from ..api import SEARCH_COLUMNS as COLUMNS
from ..api import SEARCH_DEFAULT_IN as DEFAULT_IN
from ..ids import short
from . import output
from . import views as V
from .app import app, get_repo


@app.command("search")
def search_cmd(
    query: str = typer.Argument(..., metavar="QUERY", help="Words, \"a phrase\", prefix*, AND / OR / NOT, NEAR(a b): FTS5 syntax."),
    count: int = typer.Option(20, "-n", "--count", metavar="N", help="At most N results (0 = all)."),
    latest: bool = typer.Option(False, "--latest", help="Newest first instead of best first."),
    in_: List[str] = typer.Option([], "--in", metavar="KINDS",
                                  help=f"Which text to search: {','.join(COLUMNS)}, or all (default: {','.join(DEFAULT_IN)})."),
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
    mode: Optional[str] = typer.Option(None, "--mode", metavar="MODE",
                                       help="auto (default), fts, semantic or hybrid (see docs/search.md)."),
    semantic: bool = typer.Option(False, "--semantic", help="Same as --mode semantic: nearest chunks by meaning."),
    hybrid: bool = typer.Option(False, "--hybrid", help="Same as --mode hybrid: full-text and semantic, fused by rank."),
    fts: bool = typer.Option(False, "--fts", help="Same as --mode fts: FTS5 only, every word required."),
    json_: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """Search message text: full-text (what you typed ranks above what models answered), by
    meaning (--semantic), or both (--hybrid); plain words are hybrid once vectors exist."""
    output.set_json(json_)
    flags = [m for m, on in (("semantic", semantic), ("hybrid", hybrid), ("fts", fts)) if on]
    if len(flags) + (mode is not None) > 1:
        from ..errors import InvalidInput

        raise InvalidInput("give one of --mode, --semantic, --hybrid, --fts")
    mode = mode or (flags[0] if flags else "auto")
    repo = get_repo()
    columns = tuple(c.strip() for v in in_ for c in v.split(",") if c.strip()) or DEFAULT_IN
    if "all" in columns:
        columns = COLUMNS
    conv = V.conversation_thread(repo, current, cid)
    if conv is not None:
        thread = [*thread, conv]
    filters = V.make_filters(repo, model, thread, since, until, role, tools, source, id_gt, id_gte, tool, fragment)
    hits = api.search(repo, query, mode=mode, count=count, latest=latest, columns=columns, filters=filters)
    if json_:
        output.emit_json([h.to_json() for h in hits])
        return
    if not hits:
        output.info(f"no messages match {query!r}" + ("" if set(columns) == set(COLUMNS) else
                                                      f" in {', '.join(columns)} text (--in all to look everywhere)"))
        return
    for i, h in enumerate(hits):
        d = h.to_json()
        if i:
            output.line()
        names = ", ".join(h.threads) + (f" (+{h.thread_count - len(h.threads)} more)" if h.thread_count > len(h.threads)
                                        else "") + ("+" if h.threads_more else "")
        head = [V.when(d["started_at"]), d["model"] or ""] + ([h.match] if h.match != "fts" else [])
        output.styled([(short(h.id), "yellow"), (f"  {h.role:<9}", "bold"), ("  " + "  ".join(x for x in head if x), "dim"),
                       (f"  {names}" if names else "  (no thread)", "cyan")])
        output.styled(_marked(h.snippet, h.highlights))


def _marked(text: str, spans) -> list[tuple[str, str | None]]:
    """Highlights in reverse video on a colour terminal, between « » otherwise."""
    pieces: list[tuple[str, str | None]] = [("    ", None)]
    k = 0
    color = output.color()
    for s, e in spans:
        pieces.append((text[k:s], None))
        pieces.append((text[s:e], "bold reverse") if color else ("«" + text[s:e] + "»", None))
        k = e
    pieces.append((text[k:], None))
    return pieces
