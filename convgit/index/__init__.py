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
"""

from __future__ import annotations

from .backend import IndexBackend
from .lookups import IndexLookups
from .schema import INDEX_FILE, SCHEMA, SCHEMA_VERSION
from .rows import part_text
from .writer import IndexWriter, invalidate


class Index(IndexLookups, IndexWriter):
    """The SQLite index of a repository (``IndexBackend``): opened, validated (else rebuilt)
    and, with ``autorefresh``, caught up with the refs on construction."""


__all__ = ["INDEX_FILE", "SCHEMA", "SCHEMA_VERSION", "Index", "IndexBackend", "invalidate", "part_text"]
