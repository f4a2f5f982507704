"""The one healing policy of the index: what a query does when SQLite raises.

The index is a cache, so damage is cured the same way everywhere: rebuild it and run the
query once more (a page can be damaged deep inside and pass every check on open; a
connection left on a file another process swapped away, or left "locked" by it, is cured the
same way: the rebuilt index is a fresh connection). A full (or read-only) file system is no
damage: a rebuild would need space too and hide the real error, so that is StorageFailed at
once.

One decision (``recover``) in three shapes: ``healing`` for an ``Index`` method,
``healing_call`` for a function over ``repo.index``, ``healing_iter`` for a stream of rows
(it goes on after the rebuild from where it was: the order is the same after a rebuild).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Callable, Iterator

from ..errors import storage_failure
from .schema import INDEX_FILE


class IndexDamaged(Exception):
    """An index backend other than SQLite found its tables damaged or missing (a PostgreSQL
    schema dropped by hand): cured as SQLite damage is, by a rebuild."""


DAMAGE = (sqlite3.DatabaseError, IndexDamaged)  # what a rebuild cures


def index_storage_failure(e: BaseException, where: Path):
    """The StorageFailed that an index error stands for, or None when it is damage a rebuild
    cures. SQLITE_FULL is always storage. SQLITE_IOERR is storage only when the file system
    is full (or read-only) too: under concurrent rebuilds an index file swapped away beneath
    a connection also reports "disk I/O error", and that is healed (rebuild, retry)."""
    failed = storage_failure(e, INDEX_FILE)
    if failed is None or not isinstance(e, sqlite3.Error):
        return failed
    name = (getattr(e, "sqlite_errorname", "") or "").upper()
    if name.startswith("SQLITE_FULL") or "disk is full" in str(e).lower():
        return failed
    try:
        st = os.statvfs(where)
    except OSError:
        return failed
    if st.f_bavail * st.f_frsize < 8 << 20 or st.f_flag & os.ST_RDONLY:
        return failed
    return None


def recover(index, e: Exception) -> None:
    """Called while handling ``e``, raised by a query on ``index``: raise StorageFailed (a
    full disk), else rebuild ``index`` so the query can run again."""
    failed = index_storage_failure(e, index.repo.path)
    if failed is not None:
        raise failed from e
    index.rebuild()


def healing(fn):
    """An ``Index`` method that meets a damaged index rebuilds it and runs once more."""

    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except DAMAGE as e:
            recover(self, e)
            return fn(self, *args, **kwargs)

    wrapper.__name__ = fn.__name__
    wrapper.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
    wrapper.__doc__ = fn.__doc__
    return wrapper


def healing_call(repo, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` (a function that queries ``repo.index``), healed as ``healing``."""
    try:
        return fn(*args, **kwargs)
    except DAMAGE as e:
        recover(repo.index, e)
        return fn(*args, **kwargs)


def healing_iter(repo, make: Callable[[], Iterator]) -> Iterator:
    """Items of ``make()``; on a damaged page, rebuild and go on from the same place (the
    order is the same after a rebuild, so the items already given are skipped)."""
    done = 0
    for attempt in (0, 1):
        it = make()
        skip = done
        try:
            for item in it:
                if skip:
                    skip -= 1
                    continue
                done += 1
                yield item
            return
        except DAMAGE as e:
            if attempt:
                raise
            recover(repo.index, e)
