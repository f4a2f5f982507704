"""convgit: git for LLM conversations.

    import convgit
    repo = convgit.open_repo()
    convgit.commit(repo, {"messages": [...]})

The names here are exactly ``convgit.api.__all__`` (plus ``__version__``): one surface
(tests/test_api_surface.py). They are imported on first use (PEP 562 ``__getattr__``), not
when the package is: every CLI command imports ``convgit`` first, and most of them need only
a small part of the library (start-up: docs/performance.md). ``from convgit import commit``
and ``convgit.commit(...)`` work as before.
"""

from __future__ import annotations

import sys
import types

__version__ = "0.1.0"

from .errors import ConvgitError  # noqa: E402, F401 (in _API: the one name loaded eagerly)

_API = (
    # types
    "CommitResult", "ConvgitError", "DeleteResult", "ForkResult", "LogEntry", "Payload", "RefExists",
    "RenameResult", "Repository", "RestoreResult", "StatusReport", "SwitchResult", "TurnInfo", "UpdateRefResult",
    # stores
    "init", "open_repo",
    # writing
    "check_on_conflict", "commit", "commit_many", "delete_thread", "fork", "hash_object", "import_paths",
    "rename_thread", "switch", "to_payload", "update_ref",
    # reading
    "cat_object", "conversation", "export", "export_llm_db", "iso", "iter_log", "log", "make_filters", "message_text", "object_json",
    "part_json", "rev_parse", "search", "show_refs", "status", "threads", "tree",
    # embeddings
    "embed", "embed_status",
    # maintenance
    "bundle_create", "bundle_verify", "fsck", "gc", "gc_due", "merge", "reindex",
    # the everyday CLI (issue 11): reflog, restoring deleted threads, merging llm logs.db, the tree as JSON
    "deleted_threads", "find_conversation", "is_llm_db", "nest_tree", "reflog", "restore_thread", "store_path",
    "fragment_text", "schema_of", "summaries", "turn_level", "turns",
    # remotes (issue 15): docs/remotes.md
    "SyncReport", "add_remote", "clone", "fetch", "fsck_remote", "list_remotes", "pull", "push", "remove_remote",
    "rename_remote", "tracking_refs", "gc_remote", "index_sync", "IndexSyncReport",
)
# name -> the module that defines it (each imported when the name is first used)
_LAZY = {name: "api" for name in _API if name != "ConvgitError"}
_LAZY["Repository"] = "repository"

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name == "api":  # `import convgit; convgit.api.x` worked when api was imported eagerly
        __import__(f"{__name__}.api")
        return sys.modules[f"{__name__}.api"]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'convgit' has no attribute {name!r}")
    __import__(f"{__name__}.{module}")  # (not importlib.import_module: -X importtime sees this one)
    value = getattr(sys.modules[f"{__name__}.{module}"], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The ``convgit`` package object. Python binds a submodule to its package's attribute of
    the same name when it is first imported (``convgit.commit``, ``convgit.gc``, ...): here
    the public names stay the functions. Reach a submodule with ``from convgit.gc import ...``
    or ``importlib.import_module("convgit.gc")``."""

    def __setattr__(self, name: str, value) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
