"""The library surface: what the CLI calls and what users import. Returns values, never prints.

    import convgit
    repo = convgit.open_repo()                # discovered like git; default store otherwise
    r = convgit.commit(repo, {"messages": [...]})
    for m in convgit.log(repo, "HEAD"): ...
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from .errors import ConvgitError, InvalidInput, NotFound, ObjectMissing, RefExists, SchemaValidationFailed  # noqa: F401
from .timefmt import iso

if TYPE_CHECKING:  # runtime imports are in the functions: each command loads only what it uses
    from .commit import CommitResult
    from .index.filters import Filters
    from .ingest import Payload
    from .log_entry import LogEntry
    from .repository import Repository
    from .stats import StatusReport

# The kinds of text a search looks in, and the default (index/fts.py's COLUMNS and DEFAULT_IN;
# tests/test_search.py checks they agree): here so that `convgit --help` names them without
# loading the index (and sqlite3).
SEARCH_COLUMNS = ("user", "assistant", "system", "tool", "reasoning")
SEARCH_DEFAULT_IN = ("user", "assistant")

# Names re-exported from modules that reading commands never need (commit, the input parsers):
# imported on first use (PEP 562), so `convgit log` does not load them.
_REEXPORTS = {"CommitResult": "commit", "check_on_conflict": "commit", "Payload": "ingest", "TurnInfo": "ingest"}
# Remotes (push, fetch, pull, clone; docs/remotes.md): convgit.sync, loaded by the commands that sync.
_REEXPORTS.update({n: "sync" for n in ("SyncReport", "clone", "fetch", "pull", "tracking_refs")})
_REEXPORTS.update({n: "remote_config" for n in ("add_remote", "list_remotes", "remove_remote", "rename_remote")})
_REEXPORTS["push"] = _REEXPORTS["fsck_remote"] = "sync_push"
_REEXPORTS["gc_remote"] = "remote_gc"
_REEXPORTS.update({"index_sync": "index_sync", "IndexSyncReport": "index_sync"})
_REEXPORTS["StatusReport"] = "stats"
# The rest of the surface, and what a command needs to reach a store at all: imported on first
# use too, so that `import convgit.api` (every command module does) costs next to nothing and
# `status` loads neither msgspec nor the ref operations (start-up: docs/performance.md).
_REEXPORTS["Repository"] = "repository"
_REEXPORTS["LogEntry"] = "log_entry"
_REEXPORTS.update({n: "results" for n in ("DeleteResult", "RenameResult", "RestoreResult", "SwitchResult",
                                          "UpdateRefResult")})
_REEXPORTS.update({n: "thread_ops" for n in (
    "ForkResult", "delete_thread", "deleted_threads", "find_conversation", "fork", "reflog", "rename_thread",
    "restore_thread", "switch", "threads", "update_ref")})
_REEXPORTS["_require_message"] = "thread_ops:require_message"
_REEXPORTS.update({"message_text": "texts", "part_json": "texts", "_resolve_text": "texts:resolve_text"})
_REEXPORTS.update({"nest_tree": "tree_view", "tree": "tree_view"})
_REEXPORTS.update({n: "turn_views" for n in (
    "_eager_first", "_schema_matches", "_turn_holds", "fragment_text", "make_filters", "schema_of", "summaries",
    "turn_level", "turns")})


def __getattr__(name: str):
    module = _REEXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import sys

    module, _, attr = module.partition(":")
    __import__(f"{__package__}.{module}")
    value = getattr(sys.modules[f"{__package__}.{module}"], attr or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_REEXPORTS) | set(__all__))

# -- stores ---------------------------------------------------------------------------------


def init(path: str | Path = ".convgit") -> Repository:
    """Create a store (``path`` is the ``.convgit`` directory; a parent dir gets one inside)."""
    from .repository import Repository

    p = Path(path)
    if p.name != ".convgit" and not (p / "format").exists():
        p = p / ".convgit"
    return Repository.init(p)


def open_repo(start: str | Path | None = None) -> Repository:
    """The store for ``start`` (default: the current directory), discovered as git does:
    CONVGIT_DIR, a ``.convgit/`` here or above, else the per-user default store."""
    from .repository import Repository

    return Repository.discover(start)


# -- commit ---------------------------------------------------------------------------------


def to_payload(repo: Repository, data: Any, *, model: str | None = None) -> Payload:
    """Bytes/str (JSON), a decoded dict/list, or a Payload → a validated Payload."""
    import msgspec

    from .ingest import Payload, parse_payload

    if isinstance(data, Payload):
        payload = data
    elif isinstance(data, (bytes, str)):
        payload = parse_payload(data, repo.config)
    else:
        try:
            size = len(msgspec.json.encode(data))
        except (UnicodeEncodeError, TypeError, OverflowError, ValueError, msgspec.EncodeError):
            size = 0  # not JSON-encodable: validation below names the exact problem
        if size > repo.config.max_payload_bytes:
            from .errors import PayloadTooLarge

            raise PayloadTooLarge(
                f"input is {size} bytes as JSON; the limit is {repo.config.max_payload_bytes} (limits.max_payload_bytes)"
            )
        # (imported here: the parsers of a dozen input formats cost ~20-40 ms of every start)
        from .ingest.sources import payload_from_document

        payload = payload_from_document(data)
    if model is not None:
        payload = msgspec.structs.replace(payload, turn=msgspec.structs.replace(payload.turn, model=model))
    return payload


def commit(
    repo: Repository,
    data: Any,
    *,
    thread: str | None = None,
    on_conflict: str = "reject",
    model: str | None = None,
    now_ms: int | None = None,
    continue_: bool = False,
    after: str | None = None,
    move_head: bool = True,
) -> CommitResult:
    """Store one conversation (see DESIGN §5 for which thread moves). HEAD then names the
    thread committed to (the HEAD rule of the repository transaction, which the CLI follows too).

    ``continue_`` (``commit --continue``, like ``llm -c``): ``data`` holds only the new
    messages, appended after the tip of ``thread`` (default: the thread HEAD names).
    ``after``: a revision (a message id or prefix, ``THREAD~N``) whose message the new messages
    follow; the thread decision then runs on the whole history (``--thread`` still trusted).
    ``move_head`` False: HEAD stays (a server writing for others leaves the user's HEAD alone)."""
    from .commit import check_on_conflict, commit_payload

    check_on_conflict(on_conflict)
    payload = to_payload(repo, data, model=model)
    base = None
    if continue_:
        if after is not None:
            raise InvalidInput("give --continue or a revision to continue after, not both")
        from .ids import check_thread_name

        thread = thread if thread is not None else repo.refs.read_head()
        check_thread_name(thread)
        base = repo.refs.read(thread)
        if base is None:
            raise NotFound(f"thread {thread!r} does not exist: nothing to continue", thread=thread)
    elif after is not None:
        from . import revparse
        from .thread_ops import require_message as _require_message

        base = revparse.resolve(repo, after)
        _require_message(repo, base, after)
    result = commit_payload(repo, payload, thread=thread, on_conflict=on_conflict, now_ms=now_ms, move_head=move_head,
                            after=base)
    if result.new_messages and repo.config.embed_on_commit:
        result.embedded_chunks = _embed_written(repo, result.warnings)
    return result


def _embed_written(repo: Repository, warnings: list[str]) -> int:
    """``embed.on_commit``: embed what a write added, after its commit point; problems become
    warnings (the write stands). How many chunks were embedded."""
    from . import semantic

    res = semantic.embed_written(repo, warnings=warnings)
    return res.embedded if res is not None else 0


def commit_many(repo: Repository, items: list[Any], *, now_ms: int | None = None) -> list[CommitResult]:
    """Bulk ingestion: same decisions as ``commit`` without ``thread``, far fewer flushes.
    HEAD then names the last thread committed to, as after ``commit``."""
    from .commit import commit_many as _commit_many

    results = _commit_many(repo, [to_payload(repo, d) for d in items], now_ms=now_ms, move_head=True)
    if repo.config.embed_on_commit and any(r.new_messages for r in results):
        _embed_written(repo, results[-1].warnings)  # once for the batch (per-result counts: 0)
    return results


# -- reading --------------------------------------------------------------------------------


def log(
    repo: Repository,
    rev: str | None = None,
    *,
    count: int = 0,
    all_threads: bool = False,
    reverse: bool = False,
    filters: "Filters | None" = None,
) -> list[LogEntry]:
    """Messages from the tip back to the root (newest first), like ``git log``.

    ``count`` 0 means all. ``all_threads``: every message reachable from any thread, once,
    thread by thread in name order. ``filters`` (``make_filters``) keep some of them; with an
    ``id_gt``/``id_gte`` bound the order is by key, oldest first (paging).
    """
    return list(iter_log(repo, rev, count=count, all_threads=all_threads, reverse=reverse, filters=filters))


def iter_log(
    repo: Repository,
    rev: str | None = None,
    *,
    count: int = 0,
    all_threads: bool = False,
    reverse: bool = False,
    filters: "Filters | None" = None,
) -> Iterator[LogEntry]:
    """``log`` as a stream: the first entry comes before the last is read, in memory that
    grows with threads and forks, not messages (except with ``reverse``, which must hold the
    ``count`` entries it turns around)."""
    from .log_entry import LogEntry
    from .texts import message_text
    from .turn_views import _eager_first, turn_level

    if count < 0:
        raise InvalidInput("-n must be 0 (all) or more")
    filters = turn_level(repo, filters)
    it = _eager_first(repo.index.iter_messages(rev, all_threads=all_threads, filters=filters))  # errors raise now
    entries = (LogEntry(oid, msg.parent, msg.role, msg, message_text(repo, msg), depth, turn)
               for oid, msg, depth, turn in it)
    if count:
        entries = itertools.islice(entries, count)
    if reverse:
        return iter(list(entries)[::-1])
    return entries


def search(repo: Repository, query: str, *, mode: str = "auto", count: int = 20, latest: bool = False,
           columns: tuple[str, ...] = SEARCH_DEFAULT_IN, filters: "Filters | None" = None) -> list:
    """Search message text (docs/search.md). ``mode``: ``fts`` (FTS5 syntax, every word
    required), ``semantic`` (nearest chunks by meaning), ``hybrid`` (reciprocal-rank fusion of
    both) or ``auto`` (default: plain words are hybrid when the store has vectors, else
    full-text that falls back to any of the words; FTS5 syntax is ``fts``). A model in
    ``filters`` is turn-level (``turn_level``)."""
    from .turn_views import turn_level

    filters = turn_level(repo, filters)
    if mode == "fts":
        return repo.index.search(query, count=count, latest=latest, columns=columns, filters=filters)
    from .semantic import search as _search

    return _search(repo, query, mode=mode, count=count, latest=latest, columns=columns, filters=filters)


def embed(repo: Repository, *, retry: bool = True, batch_size: int | None = None, progress=None, switch: bool = False,
          **overrides):
    """Embed every pending chunk (and retry failed ones) into the active namespace
    (config.toml ``[embed]``; ``overrides`` such as ``provider="hash"`` replace its values).
    ``switch`` (with overrides): once that namespace is complete (nothing pending or failed),
    config.toml's ``[embed]`` names it, so searches use it; ``switched`` says whether it did.
    Returns EmbedResult; see docs/search.md."""
    from .config_edit import switch_embed
    from .semantic import embed as _embed

    res = _embed(repo, retry=retry, batch_size=batch_size, progress=progress, **overrides)
    if switch and any(v is not None for v in overrides.values()) and not res.pending and not res.failed:
        switch_embed(repo.path / "config.toml", overrides, fsync=repo.config.fsync)
        res.switched = True
    return res


def embed_status(repo: Repository, **overrides) -> dict:
    """Chunks per state (indexed, pending, failed) in the active namespace, and every namespace."""
    from .semantic import embed_status as _status

    return _status(repo, **overrides)


def status(repo: Repository) -> "StatusReport":
    """Counts, sizes, dedup ratio, index freshness and last gc (a ``StatusReport``, which
    reads as its JSON document too; see ``convgit.stats``)."""
    from .stats import status as _status

    return _status(repo)


def conversation(repo: Repository, rev: str | None = None) -> list[LogEntry]:
    """The conversation up to ``rev`` in reading order (root first)."""
    return log(repo, rev, reverse=True)


# -- import / export --------------------------------------------------------------------------


def import_paths(repo: Repository, paths: list[str | Path], *, fmt: str = "auto", dry_run: bool = False,
                 progress=None, now_ms: int | None = None):
    """Import every conversation in ``paths`` (see convgit/importer.py). Returns an
    ImportReport; one bad conversation is reported, never raised."""
    from .importer import import_conversations
    from .ingest.files import expand_paths, progress_sizes
    from .ingest.sources import Rejected, iter_path

    if not dry_run:
        repo.refs.read_head()  # unreadable: fail before reading any file
    paths = expand_paths(paths, fmt)
    owner: list[int] = []  # the path each reported conversation came from (one per item, in order)

    carry = [0]  # progress: what a file's items did not account for, given with the next item

    def items():
        for i, p in enumerate(paths):
            n = len(owner)
            fsize, done, per = progress_sizes(p, fmt) if progress is not None else (0, 0, 0)
            try:
                for item in iter_path(p, fmt, repo.config):
                    owner.append(i)
                    if progress is not None:
                        step = min(item.size or per, fsize - done)
                        done += step
                        item.size, carry[0] = step + carry[0], 0
                    yield item
            except InvalidInput as e:  # the whole file is unreadable: one line in the report
                owner.append(i)
                yield Rejected(str(p), e)
            if len(owner) == n:  # e.g. a JSONL file of blank lines
                owner.append(i)
                yield Rejected(str(p), SchemaValidationFailed("no conversations in this file"))
            carry[0] += max(0, fsize - done)

    # HEAD naming no thread (a new store): the first conversation imported becomes current.
    report = import_conversations(repo, items(), dry_run=dry_run, progress=progress, now_ms=now_ms, move_head=True)
    if progress is not None and carry[0]:
        progress(carry[0])
    if not dry_run and repo.config.embed_on_commit and any(c.new_messages for c in report.conversations):
        report.embedded_chunks = _embed_written(repo, report.warnings)
    # A file of which nothing was imported (every entry skipped, even those that were only
    # warnings, such as ChatGPT entries without "mapping") is a failure, never a silent exit 0.
    good = {i for i, c in zip(owner, report.conversations) if c.error_code is None}
    for i, c in zip(owner, report.conversations):
        if i not in good:
            c.warning = False
    return report


def export(repo: Repository, revs: list[str], *, fmt: str = "native", progress=None) -> str:
    """A thread (or several, as jsonl) as text: native, openai, anthropic, markdown, jsonl.
    ``progress(done, total)``: threads written."""
    from .export import export as _export

    return _export(repo, revs, fmt, progress=progress)


def export_llm_db(repo: Repository, revs: list[str], out: str | Path, *, progress=None):
    """Write the threads ``revs`` name (``HEAD`` or thread names) to a new llm logs.db at
    ``out`` (``llm logs`` reads it; ``import`` gives back the same messages): an
    ``LlmExportResult``. ``progress(done, total)`` after each thread."""
    from . import revparse
    from .export_llm import write_llm_db

    names: list[str] = []
    for rev in revs:
        _, thread = revparse.resolve_with_thread(repo, rev)
        if thread is None:
            raise InvalidInput(f"{rev}: --format llm-db exports whole threads; give a thread name (or --all)")
        if thread not in names:
            names.append(thread)
    return write_llm_db(repo, names, out, progress=progress)


# -- plumbing -------------------------------------------------------------------------------


def rev_parse(repo: Repository, rev: str) -> str:
    """The id a revision names (see convgit.revparse for the syntax)."""
    from . import revparse

    return revparse.resolve(repo, rev)


def cat_object(repo: Repository, rev: str) -> tuple[str, bytes, Any]:
    """(id, stored bytes, decoded object) for any object (message, turn or blob)."""
    from . import codec, revparse

    oid = revparse.resolve(repo, rev)
    data = repo.objects.read_bytes(oid)
    return oid, data, codec.decode(data, oid)


def object_json(obj) -> Any:
    """A stored object as JSON builtins (``cat-object --json``)."""
    import msgspec

    return msgspec.to_builtins(obj)


def hash_object(repo: Repository, data: bytes, *, type_: str = "blob", write: bool = False) -> str:
    """The id ``data`` would have: raw bytes as a blob, or a JSON message/turn made canonical."""
    import msgspec

    from . import codec
    from .objects import Blob, Message, Turn

    if type_ == "blob":
        obj: Any = Blob(data=data)
    elif type_ in ("message", "turn"):
        from .ingest import decode_json

        doc = decode_json(data)
        if not isinstance(doc, dict):
            raise SchemaValidationFailed(f"a {type_} must be a JSON object")
        doc = {**doc, "type": type_}
        try:
            obj = msgspec.convert(doc, Message if type_ == "message" else Turn)
        except msgspec.ValidationError as e:
            raise SchemaValidationFailed(f"not a valid {type_}: {e}") from e
    else:
        raise InvalidInput(f"unknown object type {type_!r} (blob, message, turn)")
    try:
        oid, enc = codec.encode_and_hash(obj)
    except codec.EncodeError as e:
        raise SchemaValidationFailed(str(e)) from e
    if write:
        if isinstance(obj, Message) and obj.parent is not None and not repo.objects.contains(obj.parent):
            raise ObjectMissing(f"parent {obj.parent} is not stored", oid=obj.parent)
        with repo.write_lock():
            repo.objects.write_raw(oid, enc)
    return oid


def reindex(repo: Repository, *, progress=None) -> dict:
    """Rebuild the derived index from the objects and refs; returns its counts.
    ``progress(done, total)``: as the threads are indexed."""
    return repo.index.rebuild(progress=progress) if progress is not None else repo.index.rebuild()


def gc(repo: Repository, *, prune: str | None = None, dry_run: bool = False, auto: bool = False, progress=None):
    """Pack, prune and expire (see convgit.gc). Returns GcStats. ``progress(done, total)``:
    objects marked and packed, of every object stored."""
    from .gc import gc as _gc

    return _gc(repo, prune=prune, dry_run=dry_run, auto=auto, progress=progress)


def gc_due(repo: Repository):
    """Whether ``gc(repo, auto=True)`` would act now: a cheap estimate of the loose objects
    (a few fan-out directories) and the packs, against ``[gc] auto_threshold`` and
    ``auto_pack_limit`` (a ``GcDue``, true when due). The library never starts a gc by itself:
    a long-running writer calls this now and then, and ``gc(repo, auto=True)`` when it is."""
    from .gc_auto import gc_due as _due

    return _due(repo)


def fsck(repo: Repository, *, repair: bool = False, progress=None):
    """Check every object, ref, reflog, pack and the index. Returns FsckReport.
    ``progress(done, total)``: objects checked so far, of how many."""
    from .fsck import fsck as _fsck

    return _fsck(repo, repair=repair, progress=progress)


def merge(repo: Repository, src: str | Path, *, dry_run: bool = False, progress=None, objects_progress=None):
    """Merge another store, a bundle or an ``llm`` logs.db into ``repo``.

    A store or a bundle returns a MergeReport. An llm logs.db is merged through the llm
    importer (``import_paths(..., fmt="llm")``): it returns that ImportReport, one line per
    conversation, and merging it again changes nothing. ``progress`` (llm logs.db only, as
    for ``import_paths``) is called with bytes done; ``objects_progress(done, total)`` (a
    store or a bundle) with the source's objects walked."""
    if is_llm_db(src):
        return import_paths(repo, [src], fmt="llm", dry_run=dry_run, progress=progress)
    from .merge import merge as _merge

    return _merge(repo, src, dry_run=dry_run, progress=objects_progress)


def is_llm_db(path: str | Path) -> bool:
    """Is ``path`` a file holding an ``llm`` logs.db (not a convgit bundle)?"""
    from .ingest.files import is_llm_db as _is_llm_db

    return _is_llm_db(path)


def bundle_create(repo: Repository, path: str | Path, threads: list[str] | None = None, *, progress=None):
    """Write ``threads`` (default: all) and every object they reach to the bundle ``path``.
    Returns BundleInfo. ``progress(done, total)``: objects written."""
    from .bundle import create_bundle

    return create_bundle(repo, path, threads, progress=progress)


def bundle_verify(path: str | Path, *, progress=None):
    """Check the bundle at ``path`` without a store: every object re-hashed and typed.
    Returns BundleInfo (``problems`` empty when it is sound). ``progress(done, total)``."""
    from .bundle import verify_bundle

    return verify_bundle(path, progress=progress)


def store_path(start: str | Path | None = None) -> dict:
    """Which store commands run from ``start`` (default: the current directory) use, found
    as ``open_repo`` finds it, without creating one: ``{"path", "exists"}`` (``exists``
    false: the default store or CONVGIT_DIR's, created on first use, is not there yet)."""
    from .repository import locate_store

    p, exists = locate_store(start)
    return {"path": str(p), "exists": exists}


def show_refs(repo: Repository) -> dict[str, str]:
    """Every thread and its tip (``show-ref``)."""
    return repo.refs.read_all()


# The library surface; ``convgit.__all__`` is this list plus ``__version__`` (tests/test_api_surface.py).
__all__ = [
    # types
    "CommitResult", "ConvgitError", "DeleteResult", "ForkResult", "LogEntry", "Payload", "RefExists",
    "RenameResult", "Repository", "RestoreResult", "StatusReport", "SwitchResult", "TurnInfo", "UpdateRefResult",
    # stores
    "init", "open_repo",
    # writing
    "check_on_conflict", "commit", "commit_many", "delete_thread", "fork", "hash_object", "import_paths",
    "rename_thread", "restore_thread", "switch", "to_payload", "update_ref",
    # reading
    "cat_object", "conversation", "deleted_threads", "export", "export_llm_db", "find_conversation", "fragment_text", "schema_of", "summaries", "turn_level", "iso", "iter_log", "log", "make_filters", "message_text",
    "nest_tree", "object_json", "part_json", "reflog", "rev_parse", "search", "show_refs", "status", "store_path", "threads",
    "tree", "turns",
    # embeddings
    "embed", "embed_status",
    # maintenance
    "bundle_create", "bundle_verify", "fsck", "gc", "gc_due", "is_llm_db", "merge", "reindex",
    # remotes
    "SyncReport", "add_remote", "clone", "fetch", "fsck_remote", "list_remotes", "pull", "push", "remove_remote",
    "rename_remote", "tracking_refs", "gc_remote", "index_sync", "IndexSyncReport",
]
