"""convgit: git for LLM conversations.

The library names below are imported on first use (PEP 562 ``__getattr__``), not when the
package is: every CLI command imports ``convgit`` first, and most of them need only a small
part of the library (start-up: docs/performance.md). ``from convgit import commit`` and
``convgit.commit(...)`` work as before.
"""

from __future__ import annotations

import sys
import types

__version__ = "0.1.0"

from .errors import ConvgitError  # noqa: E402

# name -> the module that defines it (each imported when the name is first used)
_LAZY = {name: "api" for name in (
    "cat_object", "commit", "commit_many", "conversation", "delete_thread", "fork", "hash_object", "init",
    "iter_log", "log", "make_filters", "open_repo", "reindex", "rename_thread", "rev_parse", "search", "status",
    "switch", "threads", "tree",
)}
_LAZY["Repository"] = "repository"

__all__ = [
    "ConvgitError", "Repository", "__version__", "cat_object", "commit", "commit_many",
    "conversation", "delete_thread", "fork", "hash_object", "init", "iter_log", "log", "make_filters", "open_repo",
    "reindex", "rename_thread", "rev_parse", "search", "status", "switch", "threads", "tree",
]


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
    """Importing the submodule ``convgit.commit`` binds it as the package attribute ``commit``;
    the public name ``convgit.commit`` is the function (as when api was imported eagerly)."""

    def __setattr__(self, name: str, value) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
