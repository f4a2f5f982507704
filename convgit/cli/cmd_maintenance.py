"""gc, fsck, merge, bundle: the repository operations."""

from __future__ import annotations

from typing import Optional

import typer

from .. import api
from ..errors import FsckFailed
from ..ids import short
from . import output, progress
from .app import _Group, app, get_repo
from .params import QUIET_OPT, complete_thread

JSON_OPT = typer.Option(False, "--json", help="Output JSON.")


_size = output.human_size  # (one formatter: cli/output.py)


@app.command("gc")
def gc_cmd(
    prune: Optional[str] = typer.Option(
        None, "--prune", metavar="AGE",
        help="Prune unreachable objects older than AGE (2w, 3d, 12h, seconds, now, never; default "
             "gc.grace_seconds = 2 weeks). --prune=now is unsafe while other processes write.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Report what would be done; change nothing."),
    auto: bool = typer.Option(False, "--auto", help="Do nothing (fast, silent) unless enough loose objects or packs piled up "
                              "(writes start this in the background: gc.auto)."),
    remote: Optional[str] = typer.Option(None, "--remote", metavar="NAME", help="gc remote NAME instead: repack its small "
                                         "packs, delete packs nothing names once past the grace period (fails closed)."),
    quiet: bool = QUIET_OPT,
    json_: bool = JSON_OPT,
) -> None:
    """Pack loose objects, prune unreachable ones past the grace period, expire old reflog
    entries, remove stale temp files, rebuild the index. Safe while others commit."""
    output.set_json(json_)
    repo = get_repo()
    if remote is not None:
        from ..config import parse_age

        grace = None
        if prune is not None:
            grace = parse_age(prune, "--prune")
            grace = float("inf") if grace is None else grace  # --prune=never
        with progress.Transfer(f"gc {remote}", on=progress.enabled(json_=json_, quiet=quiet),
                               after="uploading the new pack, deleting") as tick:
            rep = api.gc_remote(repo, remote, grace_seconds=grace, dry_run=dry_run, progress=tick)
        if json_:
            output.emit_json(rep.to_json())
        elif not quiet:
            if rep.skipped:
                output.info(f"convgit: gc --remote deleted nothing: {rep.skipped}")
            verb = "would delete" if dry_run else "deleted"
            output.line(f"gc {remote}: repacked {rep.repacked} pack(s), {verb} {len(rep.deleted)} unreferenced pack(s) "
                        f"({_size(rep.bytes_deleted)}), kept {rep.kept_young} young; packs {rep.packs_before} -> "
                        f"{rep.packs_after}, generation {rep.generation}")
        return
    with progress.Counter("gc: marking and packing objects", on=progress.enabled(json_=json_, quiet=quiet or auto)) as tick:
        s = api.gc(repo, prune=prune, dry_run=dry_run, auto=auto, progress=tick)
    output.warnings(s.warnings)
    if json_:
        output.emit_json(s.to_json())
        return
    if quiet and s.status != "skipped":
        return
    if s.status == "nothing-to-do":
        return  # --auto below the threshold: silent
    if s.status == "skipped":
        output.info(f"convgit: gc skipped: {s.reason}")
        return
    verb = "would" if dry_run else "did"
    output.line(
        f"gc {verb}: pack {s.packed} object(s), prune {s.pruned} unreachable, keep {s.kept_young} young unreachable, "
        f"expire {s.reflog_expired} reflog entr{'y' if s.reflog_expired == 1 else 'ies'}"
    )
    if not dry_run:
        output.line(
            f"objects {s.objects_before} -> {s.objects_after} (loose {s.loose_before} -> {s.loose_after}, "
            f"packs {s.packs_before} -> {s.packs_after}); {_size(s.bytes_before)} -> {_size(s.bytes_after)} in {s.seconds}s"
        )


@app.command("fsck")
def fsck_cmd(
    repair: bool = typer.Option(False, "--repair", help="Remove unreadable ref files (reflogs kept), rebuild the index, remove stale temp files (never deletes an object)."),
    remote: Optional[str] = typer.Option(None, "--remote", metavar="NAME", help="Check remote NAME instead: its refs "
                                         "document, that every pack it names is there and sound, every tip in a pack."),
    json_: bool = JSON_OPT,
) -> None:
    """Verify every object (hash, encoding, references), every ref and reflog, every pack and the
    index. Exits 35 (fsck_failed) when anything is corrupt."""
    output.set_json(json_)
    repo = get_repo()
    if remote is not None:
        doc = api.fsck_remote(repo, remote)
        err = None if doc["ok"] else FsckFailed(f"remote {remote}: {len(doc['problems'])} problem(s) found")
        if json_:
            output.emit_json({**doc, **(err.to_json() if err else {})})
        else:
            for p in doc["problems"]:
                output.line(f"error: {p}", "red")
            output.line(f"remote {doc['remote']} ({doc['url']}): generation {doc['generation']}, {doc['packs']} pack(s), "
                        f"{doc['threads']} thread(s): {'ok' if doc['ok'] else 'corrupt'}")
        if err:
            if json_:
                raise typer.Exit(err.exit_code)
            raise err
        return
    with progress.Counter("checking objects", on=progress.enabled(json_=json_)) as tick:
        rep = api.fsck(repo, repair=repair, progress=tick)
    err = None if rep.ok else FsckFailed(f"{len(rep.errors)} problem(s) found")
    if json_:
        doc = rep.to_json()
        if err:  # the report, in the shape of every error document
            doc.update(err.to_json())
        output.emit_json(doc)
    else:
        for p in rep.problems:
            output.line(f"{p.severity}: {p.message}", "red" if p.severity == "error" else None)
        for r in rep.repaired:
            output.line(f"repaired: {r}")
        status = "ok" if rep.ok else f"{len(rep.errors)} error(s)"
        for what in rep.not_checked:
            output.line(f"not checked: {what}")
        if rep.objects_from:
            packs = f"{rep.remote_packs} pack(s)" if rep.remote_packs is not None else "packs not listed"
            output.line(f"index-only store (objects on remote {rep.objects_from}, {packs}): checked {rep.threads} "
                        f"thread(s), {rep.on_remote} tip(s) and turn(s) found in the remote's packs, "
                        f"{rep.loose + rep.packed} local object(s): {status}")
        else:
            output.line(f"checked {rep.loose} loose and {rep.packed} packed object(s) in {rep.packs} pack(s), "
                        f"{rep.threads} thread(s): {status}")
    if err:
        if json_:
            raise typer.Exit(err.exit_code)
        raise err


@app.command("merge")
def merge_cmd(
    source: str = typer.Argument(..., metavar="SRC", help="Another store (directory), a bundle (.db) or an llm logs.db."),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Report what would happen; change nothing."),
    quiet: bool = QUIET_OPT,
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Every conversation of an llm logs.db, also on a terminal."),
    json_: bool = JSON_OPT,
) -> None:
    """Merge another store, a bundle or an llm logs.db into this one: every object
    re-verified; new threads created, behind ones fast-forwarded, diverged ones kept under
    NAME-merged-<tip>. An llm logs.db goes through the llm importer (the report of import;
    merging it again changes nothing). Says "Already up to date." when nothing changes."""
    output.set_json(json_)
    repo = get_repo()
    on = progress.enabled(json_=json_, quiet=quiet)
    if api.is_llm_db(source):
        from .cmd_import import finish_import, total_bytes

        with progress.Bar("merging", total_bytes([source]), on=on) as advance:
            rep = api.merge(repo, source, dry_run=dry_run, progress=advance)
        finish_import(rep, json_=json_, quiet=quiet, verbose=verbose, source=source)
        return
    before = api.show_refs(repo)
    with progress.Counter("merging objects", on=on) as tick:
        rep = api.merge(repo, source, dry_run=dry_run, objects_progress=tick)
    if not output.report(rep, json_=json_, quiet=quiet):
        return
    # (a diverged thread merged before is already there under its -merged- name)
    changed = [r for r in rep.refs if r["action"] not in ("same", "kept") and before.get(r["as"]) != r["incoming"]]
    if not changed and not rep.new_objects:
        output.line("Already up to date.")
        return
    for r in changed:
        extra = f" as {r['as']}" if r["as"] != r["thread"] else ""
        output.line(f"{r['action']:<12} {r['thread']}{extra} {short(r['local']) or '-'} -> {short(r['incoming'])}")
    same = len(rep.refs) - len(changed)
    tail = f"; {same} thread(s) already up to date" if same else ""
    output.line(f"{'would take' if dry_run else 'took'} {rep.new_objects} new object(s), {_size(rep.new_bytes)}{tail}")


bundle_app = typer.Typer(cls=_Group, help="Single-file bundles of threads (SQLite) to carry between machines.",
                         rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(bundle_app, name="bundle")


@bundle_app.command("create")
def bundle_create_cmd(
    file: str = typer.Argument(..., metavar="FILE.db"),
    threads: Optional[list[str]] = typer.Argument(None, metavar="THREAD", help="Threads to include (default: all).",
                                                  autocompletion=complete_thread),
    json_: bool = JSON_OPT,
) -> None:
    """Write FILE.db with the threads and every object they reach (merge it elsewhere)."""
    output.set_json(json_)
    repo = get_repo()
    with progress.Counter(f"writing {file}", on=progress.enabled(json_=json_)) as tick:
        info = api.bundle_create(repo, file, threads or None, progress=tick)
    if json_:
        output.emit_json(info.to_json())
    else:
        output.line(f"Wrote {file}: {len(info.threads)} thread(s), {info.objects} object(s), {_size(info.bytes)}")


@bundle_app.command("verify")
def bundle_verify_cmd(file: str = typer.Argument(..., metavar="FILE.db"), json_: bool = JSON_OPT) -> None:
    """Check a bundle: every object's hash and encoding, that it is complete, its thread names."""
    output.set_json(json_)
    with progress.Counter(f"verifying {file}", on=progress.enabled(json_=json_)) as tick:
        info = api.bundle_verify(file, progress=tick)
    err = FsckFailed(f"{file}: {len(info.problems)} problem(s) found") if info.problems else None
    if json_:
        doc = info.to_json()
        if err:
            doc.update(err.to_json())
        output.emit_json(doc)
    else:
        for p in info.problems:
            output.line(f"error: {p}")
        output.line(f"{file}: {len(info.threads)} thread(s), {info.objects} object(s): {'ok' if not info.problems else 'corrupt'}")
    if err:
        if json_:
            raise typer.Exit(err.exit_code)
        raise err
