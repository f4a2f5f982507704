"""status."""

import typer

from .. import api
from . import output
from .app import app, get_repo

_size = output.human_size  # (one formatter: cli/output.py)


@app.command("status")
def status_cmd(json_: bool = typer.Option(False, "--json", help="Output JSON.")) -> None:
    """What the store holds and what it costs: counts, sizes, deduplication, index, last gc."""
    output.set_json(json_)
    st = api.status(get_repo()).to_json()
    if json_:
        output.emit_json(st)
        return
    b, o, ix = st["bytes"], st["objects"], st["index"]
    remote = str(ix["path"]).startswith("postgresql")  # the PostgreSQL index: on its server, not on this disk
    ratio = f"{st['dedup_ratio']:.2f}x" if st["dedup_ratio"] else "-"
    rows = [
        ("Store", f"{st['store']} (format {st['format_version']})"),
        ("Threads", f"{st['threads']} (HEAD: {st['head']})"),
        ("Turns", str(st["turns"])),
        ("Messages", f"{st['messages']} stored, {st['message_refs']} in threads: dedup {ratio}"),
        ("Text", _size(st["text_bytes"])),
        ("Objects", f"{o['loose']} loose, {o['packed']} packed in {o['packs']} pack(s)"),
        ("On disk", f"{_size(b['total'])}: loose objects {_size(b['objects_loose'])}, packs {_size(b['packs'])}, "
                    + ("" if remote else f"index {_size(b['index'])}, ") + f"refs and logs {_size(b['other'])}"),
        ("Index", ("up to date" if ix["up_to_date"] else
                   "rebuilt now" if ix["rebuilt_now"] else f"caught up now ({ix['stale_threads']} thread(s) had moved)")
         + f", schema {ix['schema_version']}" + (f", {_size(b['index'])} in {ix['path']}" if remote else "")),
        ("Last gc", _time(st["last_gc"]) if st["last_gc"] is not None else "never (no gc.log)"),
        ("Auto gc", _auto_gc(st["gc_auto"])),
    ]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        output.styled([(k.ljust(w) + "  ", "bold"), (v, None)])


def _time(value) -> str:
    """A time from status (UTC epoch ms, or ISO text) as ``2026-12-01 13:28:48 UTC``."""
    iso = api.iso(value) if isinstance(value, (int, float)) else str(value)
    return iso[:19].replace("T", " ") + " UTC" if iso and len(iso) >= 19 else str(value)


def _auto_gc(state: dict | None) -> str:
    """``[gc] auto`` as status shows it: on, off, or stopped by a failed background gc."""
    if not state or not state.get("enabled"):
        return "off ([gc] auto = false or CONVGIT_GC_AUTO=0)"
    failed = state.get("failed")
    if not failed:
        return "on (writes start gc --auto in the background when it would act)"
    return (f"paused until {_time(failed['paused_until'])}: the last background gc failed at {_time(failed['at'])}"
            f" ({failed['log']}: {failed['first_line'] or 'see the log'}); `convgit gc` to run it by hand")
