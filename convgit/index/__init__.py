"""The derived index (``index.sqlite``): a cache, never the source of truth. All of its SQL
is in this package, behind ``IndexBackend`` (backend.py), which ``Index`` implements.

    schema.py   the tables and views, and the schema version (a change means a rebuild)
    healing.py  the one healing policy: rebuild on damage, StorageFailed on a full disk
    writer.py   opening, rebuilding and catching up (the refs journal, reflogs, turns)
    lookups.py  what commit, import, revparse, the porcelain, status and fsck ask
    fts.py      the FTS5 table, the search query language, snippets
    reach.py    which threads reach a message, which indexed messages none reaches
    filters.py  the filters of log and search as SQL, the message key
    log.py      the log walk
    search.py   running a search: ranking, ties, describing each hit
    postgres/   the second backend: the same rows and answers in a PostgreSQL schema

``open_index`` opens the backend a store's config names (``[index] backend``).
"""

from __future__ import annotations

from .backend import IndexBackend
from .lookups import IndexLookups
from .schema import INDEX_FILE, SCHEMA, SCHEMA_VERSION
from .rows import part_text
from .writer import IndexWriter
from .writer import invalidate as _invalidate_sqlite


class Index(IndexLookups, IndexWriter):
    """The SQLite index of a repository (``IndexBackend``): opened, validated (else rebuilt)
    and, with ``autorefresh``, caught up with the refs on construction."""

    backend = "sqlite"

    def disk_bytes(self) -> int:
        """What ``index.sqlite`` (and its journal) takes on disk."""
        return sum(getattr(p.stat(), "st_blocks", 0) * 512 for p in self.path.parent.glob(INDEX_FILE + "*")
                   if p.is_file())


def open_index(repo, *, autorefresh: bool = True) -> IndexBackend:
    """The index backend the store's config names, opened (rebuilt when unusable) and, with
    ``autorefresh``, caught up with the refs."""
    if getattr(repo.config, "index_backend", "sqlite") == "postgres":
        from .postgres import PgIndex

        return PgIndex(repo, autorefresh=autorefresh)
    return Index(repo, autorefresh=autorefresh)


def invalidate(repo) -> None:
    """Make the next command rebuild the store's index (writer.invalidate; for PostgreSQL,
    postgres.invalidate)."""
    if getattr(repo.config, "index_backend", "sqlite") == "postgres":
        from .postgres import invalidate as _invalidate_pg

        return _invalidate_pg(repo)
    return _invalidate_sqlite(repo)


__all__ = ["INDEX_FILE", "SCHEMA", "SCHEMA_VERSION", "Index", "IndexBackend", "invalidate", "open_index", "part_text"]
