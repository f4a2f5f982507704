"""convgit: git for LLM conversations."""

__version__ = "0.1.0"

from .api import (  # noqa: E402
    cat_object,
    commit,
    commit_many,
    conversation,
    delete_thread,
    fork,
    hash_object,
    init,
    iter_log,
    log,
    make_filters,
    open_repo,
    reindex,
    rename_thread,
    rev_parse,
    search,
    status,
    switch,
    threads,
    tree,
)
from .errors import ConvgitError  # noqa: E402
from .repository import Repository  # noqa: E402

__all__ = [
    "ConvgitError", "Repository", "__version__", "cat_object", "commit", "commit_many",
    "conversation", "delete_thread", "fork", "hash_object", "init", "iter_log", "log", "make_filters", "open_repo",
    "reindex", "rename_thread", "rev_parse", "search", "status", "switch", "threads", "tree",
]
