"""Threads as the library sees them: list, find, fork, rename, delete, switch, update-ref,
the reflog, and deleted threads brought back (re-exported by ``convgit.api``).

Every write here is one repository transaction (convgit/transaction.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import InvalidInput, NotFound, ObjectCorrupt, ObjectMissing, RefExists
from .ids import check_thread_name, is_oid, short
from .timefmt import iso

if TYPE_CHECKING:  # (the rest is imported by the functions that use it: `threads` loads no msgspec)
    from .objects import Turn
    from .repository import Repository
    from .results import DeleteResult, RenameResult, RestoreResult, SwitchResult, UpdateRefResult


# -- threads --------------------------------------------------------------------------------


def find_conversation(repo: Repository, cid: str | None = None) -> str:
    """The thread of a conversation, as ``llm logs -c``/``--cid`` pick one: without ``cid``
    the most recently updated thread; with it, the thread named ``cid``, else the one thread
    whose name ends in ``/<cid>`` (an imported conversation's upstream id, ``llm/<id>``).
    NotFound when none, AmbiguousRevision when several end so."""
    from .errors import AmbiguousRevision

    repo.index.refresh_if_changed()
    rows = repo.index.thread_rows()
    if cid is None:
        if not rows:
            raise NotFound("no conversation yet: the store has no thread")
        return max(rows, key=lambda r: (r["updated_ms"] or 0, r["name"]))["name"]
    names = [r["name"] for r in rows]
    if cid in names:
        return cid
    hits = [n for n in names if n.endswith("/" + cid)]
    if len(hits) > 1:
        raise AmbiguousRevision(f"--cid {cid!r} names {len(hits)} threads: {', '.join(hits[:5])}", cid=cid)
    if not hits:
        raise NotFound(f"no conversation {cid!r} (neither a thread name nor the id at the end of one)", cid=cid)
    return hits[0]



def threads(repo: Repository) -> list[dict]:
    """Every thread (name order): tip, message count, title, where it was forked from (by
    the source's current name), times, whether HEAD names it. A ref file that cannot be read
    is listed too, with ``tip`` None and ``broken`` saying what is wrong (never with a tip
    the index remembers)."""
    repo.index.refresh_if_changed()
    head = repo.refs.read_head()
    broken: dict[str, str] = {}
    refs = repo.refs.read_all(broken=broken)  # the ref files themselves: the index may be behind
    rows = repo.index.thread_rows()
    if {r["name"]: r["tip"] for r in rows} != refs:
        repo.index.refresh()  # a ref file rewritten in place (no directory change to notice)
        rows = repo.index.thread_rows()
    out = []
    for row in rows:
        title = repo.index.message_text(row["title_id"]) if row["title_id"] else ""
        title = title.strip().splitlines()[0][:80] if title.strip() else ""
        out.append({
            "name": row["name"],
            "tip": row["tip"],
            "messages": row["messages"],
            "title": title,
            "forked_from": (
                {"thread": row["forked_from_thread"], "message": row["forked_from_message"]}
                if row["forked_from_thread"] or row["forked_from_message"] else None
            ),
            "created_at": iso(row["created_ms"]),
            "updated_at": iso(row["updated_ms"]),
            "current": row["name"] == head,
            "broken": None,
        })
    for name, why in broken.items():
        out.append({"name": name, "tip": None, "messages": 0, "title": "", "forked_from": None,
                    "created_at": None, "updated_at": None, "current": name == head, "broken": why})
    out.sort(key=lambda r: r["name"])
    return out


@dataclass
class ForkResult:
    """What ``fork`` made: the new thread, its tip, where it forked from, and the fork's turn."""

    thread: str
    tip: str
    forked_from: dict
    turn: str

    def to_json(self) -> dict:
        """The ``fork --json`` document."""
        return {"status": "forked", "thread": self.thread, "tip": self.tip, "forked_from": self.forked_from, "turn": self.turn}


def fork(repo: Repository, rev: str, name: str | None = None, *, now_ms: int | None = None,
         source: str | None = None) -> ForkResult:
    """A new thread whose tip is ``rev``. Writes no message, only a ``fork`` turn (whose
    ``source`` says who forked, e.g. ``mcp:<client>``)."""
    from . import codec, revparse
    from .objects import Turn

    oid, src_thread = revparse.resolve_with_thread(repo, rev)
    base, _ = revparse.split_rev(rev)
    if src_thread is None:
        try:
            check_thread_name(base)
            if repo.refs.read(base) is not None:
                src_thread = base
        except InvalidInput:
            pass
        if base in ("HEAD", "@"):
            src_thread = repo.refs.read_head()
    require_message(repo, oid, rev)
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    if name is None:
        name = _free_fork_name(repo, src_thread, oid)
    check_thread_name(name)
    if repo.refs.read(name) is not None:
        raise RefExists(f"thread {name!r} already exists", thread=name)
    repo.refs.check_free(name)
    turn = Turn(kind="fork", thread=name, input=oid, output=oid, started_at=now, forked_from=src_thread, source=source)
    tid, data = codec.encode_and_hash(turn)
    with repo.transaction(fast_forward=True) as tx:
        tx.write_objects([(tid, data)], decoded={tid: turn})
        tx.move(name, oid, expected=None, turn=tid, time_ms=now,
                message=f"fork: from {src_thread or short(oid)} at {short(oid)}")
    repo.warnings.extend(tx.warnings)
    return ForkResult(name, oid, {"thread": src_thread, "message": oid}, tid)


def require_message(repo: Repository, oid: str, rev: str) -> None:
    """Raise InvalidInput unless ``oid`` (named ``rev`` by the user) is a message."""
    from . import codec
    from .objects import Message

    obj = repo.objects.read(oid)
    if not isinstance(obj, Message):
        raise InvalidInput(f"{rev} names a {codec.type_name(obj)}, not a message", oid=oid)


def _free_fork_name(repo: Repository, src_thread: str | None, oid: str) -> str:
    stem = f"{src_thread}-" if src_thread else ""
    for n in (6, 10, 16, 64):
        name = f"{stem}fork-{oid[:n]}"
        try:
            check_thread_name(name)
        except InvalidInput:
            break  # the source name is too long to extend
        if repo.refs.read(name) is None:
            return name
    for n in (6, 10, 16, 64):
        name = f"fork-{oid[:n]}"
        if repo.refs.read(name) is None:
            return name
    raise RefExists(f"no free name to fork {short(oid)}; give one")


def rename_thread(repo: Repository, old: str, new: str) -> RenameResult:
    """Rename a thread; HEAD follows it, and threads forked from it show the new name.
    HEAD is read before the rename; a failure to write it afterwards is a warning (the
    rename stands), in ``warnings``."""
    from .results import RenameResult

    with repo.transaction() as tx:
        tx.read_head()
        tip = tx.rename(old, new)
    return RenameResult(old, new, tip, list(tx.warnings))


def delete_thread(repo: Repository, name: str) -> DeleteResult:
    """Delete a thread's ref (its reflog is archived; messages stay until gc finds nothing
    reaching them). An unreadable ref file is deleted too (``broken`` says what was wrong).

    Deleting the thread HEAD names switches HEAD to the most recently updated thread left
    (``head``, ``head_moved``), so HEAD never silently names a deleted thread while others
    exist; with none left it keeps naming the deleted one. ``warnings``: what went wrong
    after the delete (it stands)."""
    from .results import DeleteResult

    check_thread_name(name)
    broken = None
    with repo.transaction() as tx:
        head = tx.read_head()  # unreadable: refuse before deleting anything
        try:
            exists = repo.refs.read(name) is not None
        except ObjectCorrupt as e:  # an unreadable ref file, which delete removes
            exists, broken = True, e.message
        if not exists:
            raise NotFound(f"thread {name!r} does not exist", thread=name)
        tip = tx.delete(name)
    return DeleteResult(name, tip, broken, tx.head, tx.head != head, list(tx.warnings))


def switch(repo: Repository, name: str) -> SwitchResult:
    """Point HEAD at the existing thread ``name`` (NotFound if there is none)."""
    from .results import SwitchResult

    check_thread_name(name)
    if repo.refs.read(name) is None:
        raise NotFound(f"thread {name!r} does not exist", thread=name)
    with repo.transaction(index="none") as tx:
        tx.write_head(name)
    return SwitchResult(name, repo.refs.read(name))


def update_ref(repo: Repository, name: str, new: str | None, old: str | None = None, *,
               create: bool = False) -> UpdateRefResult:
    """Plumbing CAS: move ``name`` to ``new`` if it is at ``old`` (``create``: must not exist)."""
    from . import revparse
    from .results import UpdateRefResult

    from .refs import ANY

    if new is not None:
        rev = new
        new = revparse.resolve(repo, new)
        require_message(repo, new, rev)
    expected: object = ANY
    if create:
        expected = None
    elif old is not None:
        expected = revparse.resolve(repo, old) if not is_oid(old) else old
    with repo.transaction() as tx:
        prev = tx.move(name, new, expected=expected, message="update-ref")
    repo.warnings.extend(tx.warnings)
    return UpdateRefResult(name, prev, new)


# -- reflog -----------------------------------------------------------------------------------


def reflog(repo: Repository, thread: str | None = None) -> dict:
    """The moves of ``thread`` (default: the thread HEAD names), newest first, as git's
    reflog shows them: each with its time, old and new tip, message, and the turn it
    recorded (kind, model, source), read from the turn object. A deleted thread's archived
    reflog (``logs/deleted``) is shown when no live thread has that name (``deleted`` true).

    Lines of moves a crash cut short (appended, the ref never moved) are left out and
    counted (``interrupted``; refformat.applied_entries, and applied_archived for an
    archived reflog). Returns ``{"thread", "deleted",
    "entries": [...], "interrupted"}``; NotFound when the thread has no reflog, live or archived."""
    from .refformat import applied_archived, applied_entries

    name = repo.refs.read_head() if thread is None else thread
    check_thread_name(name)
    deleted = False
    unreadable = False
    try:
        tip = repo.refs.read(name)
    except ObjectCorrupt:  # an unreadable ref: its reflog tells where it was (shown whole)
        tip, unreadable = None, True
    if tip is None and not unreadable:
        archives = _archived_logs(repo, name)
        if not archives:
            raise NotFound(f"thread {name!r} has no reflog (no such thread, live or deleted)", thread=name)
        from .refformat import read_log_file

        logged, deleted = read_log_file(archives[-1]), True
    else:
        logged = repo.refs.read_log(name)  # its packed part, then its loose file
    # A move cut short by a crash left its line: not shown (it never happened; the line stays).
    entries = logged if unreadable else applied_archived(logged) if deleted else applied_entries(logged, tip)
    rows = []
    for i, e in enumerate(reversed(entries)):
        turn = _turn_or_none(repo, e.turn)
        rows.append({
            "thread": name, "index": i, "old": e.old, "new": e.new, "time": iso(e.time_ms),
            "time_ms": e.time_ms, "message": e.message, "turn": e.turn,
            "kind": turn.kind if turn else None,
            "model": (turn.resolved_model or turn.model) if turn else None,
            "source": turn.source if turn else None,
        })
    return {"thread": name, "deleted": deleted, "entries": rows, "interrupted": len(logged) - len(entries)}


def _turn_or_none(repo: Repository, oid: str | None) -> Turn | None:
    from .objects import Turn

    if oid is None:
        return None
    try:
        obj = repo.objects.read(oid)
    except (ObjectMissing, ObjectCorrupt):
        return None  # the reflog names a turn this store lacks: show the move anyway
    return obj if isinstance(obj, Turn) else None


def _archived_logs(repo: Repository, name: str) -> list[Path]:
    """The archived reflogs of deleted threads named ``name`` (``logs/deleted/<name>.<ms>``),
    oldest first."""
    base = repo.refs.deleted_logs_dir
    found = []
    parent = (base / name).parent
    stem = (base / name).name
    if parent.is_dir():
        for p in parent.iterdir():
            head, dot, ms = p.name.rpartition(".")
            if dot and head == stem and ms.isdigit() and p.is_file():
                found.append((int(ms), p))
    return [p for _, p in sorted(found)]


def deleted_threads(repo: Repository) -> list[dict]:
    """Every deleted thread whose archived reflog is kept: name, the tip it had, when it was
    deleted, and whether it can be restored (its tip still stored: gc has not pruned it)."""
    base = repo.refs.deleted_logs_dir
    latest: dict[str, tuple[int, Path]] = {}
    if base.is_dir():
        for p in base.rglob("*"):
            head, dot, ms = p.name.rpartition(".")
            if not (dot and ms.isdigit() and p.is_file()):
                continue
            name = str(p.parent.relative_to(base) / head).replace("\\", "/").removeprefix("./")
            if name not in latest or latest[name][0] < int(ms):
                latest[name] = (int(ms), p)
    out = []
    for name, (ms, p) in sorted(latest.items()):
        tip = _deleted_tip(p)
        out.append({"name": name, "tip": tip, "deleted_at": iso(ms), "exists": repo.refs.read(name) is not None,
                    "restorable": tip is not None and repo.objects.contains(tip)})
    return out


def _deleted_tip(path: Path) -> str | None:
    from .refformat import read_log_file

    for e in reversed(read_log_file(path)):
        if e.new is None and e.old is not None:
            return e.old  # the delete line: the tip the thread had
        if e.new is not None:
            return e.new
    return None


def restore_thread(repo: Repository, name: str, *, now_ms: int | None = None) -> RestoreResult:
    """Bring back thread ``name`` deleted earlier, at the tip it had, from its archived
    reflog (the newest one if it was deleted several times); its reflog history comes back
    with it. NotFound when no deleted thread of that name is archived, or when gc has pruned
    its messages since; RefExists when a thread of that name exists again."""
    from .results import RestoreResult

    check_thread_name(name)
    if repo.refs.read(name) is not None:
        raise RefExists(f"thread {name!r} exists: nothing to restore (rename it first to restore the deleted one)",
                        thread=name)
    archives = _archived_logs(repo, name)
    if not archives:
        raise NotFound(f"no deleted thread {name!r} to restore (its reflog is not in logs/deleted)", thread=name)
    archive = archives[-1]
    tip = _deleted_tip(archive)
    if tip is None:
        raise NotFound(f"the archived reflog of {name!r} records no tip to restore", thread=name)
    if not repo.objects.contains(tip):
        raise NotFound(f"cannot restore {name!r}: its tip {short(tip)} is no longer stored (gc pruned it)",
                       thread=name, tip=tip, pruned=True)
    rel = archive.relative_to(repo.refs.root).as_posix()
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    with repo.transaction() as tx:
        tx.restore(name, tip, archive, time_ms=now, message=f"restore: from {rel}")
    repo.warnings.extend(tx.warnings)
    return RestoreResult(name, tip, rel)
