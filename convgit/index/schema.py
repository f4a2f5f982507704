"""The index's SQLite schema and its version: a cache, so a version change means a rebuild
(no migrations). The full-text table is in fts.py (``FTS_SCHEMA``)."""

from __future__ import annotations

SCHEMA_VERSION = 12  # 3: full-text search and unreachable rows (fts.FTS_SCHEMA); 4: parts is a rowid table;
# 5: turns record what they cover (out_depth, span) and which import listed them (record);
# 6: chunks (semantic search); 7: parts.text_bytes, and the lean mode (``[index] text = false``:
# parts.text is NULL); 8: message_tree names tool calls and results where there is no text;
# 9: running totals (meta 'totals', kept by the writer: TOTALS below); 10: a message row refers to
# its parent, title and turn by row (parent_rowid, title_rowid, turn_rowid: integers, not three
# more 64-hex-digit ids), turns have a rowid of their own, and the view message_ids shows the ids;
# a per-message turn names its import turn by row (record_rowid), aliases name their turn by row
# (turn_rowid) and have no index by message (no query used it); turns.meta_json leaves out an
# import turn's lists of turns and aliases (rows of their own); 11: turn rows only for the moves
# that happened (the chain of reflog lines ending at the tip, docs/format.md §4): an index built
# before indexed the calls of moves a crash cut short, which fsck then reports against a rebuild
# 12: turns.meta_json keeps only the keys of a turn's meta the index queries (turn_rows.INDEXED_META:
# ``branch``, ``schema_id``); an imported message's turn kept the source's metadata, ~400 B each
INDEX_FILE = "index.sqlite"

# What ``status`` reports from the index, as a direct count over the rows. The writer keeps
# each of them as a running total in ``meta`` (key ``totals``, a JSON object), changed in the
# same transaction as the rows it counts, so that ``status`` reads one row instead of these
# O(rows) queries; a rebuild counts them afresh, and fsck compares the two (Index.dump).
TOTALS = {
    "threads": "SELECT count(*) FROM threads",
    # every thread counted root to tip
    "message_refs": "SELECT coalesce(sum(m.depth + 1), 0) FROM threads h JOIN messages m ON m.id = h.tip",
    # stored once, reachable from a thread
    "messages": "SELECT (SELECT count(*) FROM messages) - (SELECT count(*) FROM unreachable)",
    "text_bytes": ("SELECT coalesce(sum(p.text_bytes), 0) FROM parts p WHERE p.text_bytes IS NOT NULL "
                   "AND p.message_rowid NOT IN (SELECT rowid FROM unreachable)"),
    "turns": "SELECT count(*) FROM turns WHERE thread IS NOT NULL",  # on a thread
}


def count_totals(db) -> dict[str, int]:
    """The totals counted from the rows (O(rows)): what the running totals must equal."""
    return {k: int(db.execute(sql).fetchone()[0]) for k, sql in TOTALS.items()}


def read_totals(db) -> dict[str, int] | None:
    """The running totals the writer keeps (O(1)), or None when this index has none."""
    import json

    row = db.execute("SELECT value FROM meta WHERE key='totals'").fetchone()
    if row is None:
        return None
    try:
        out = json.loads(row[0])
    except (TypeError, ValueError):
        return None
    if not isinstance(out, dict) or any(not isinstance(out.get(k), int) for k in TOTALS):
        return None
    return {k: out[k] for k in TOTALS}

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE threads (
  name TEXT PRIMARY KEY,
  tip TEXT NOT NULL,
  created_ms INTEGER,
  updated_ms INTEGER,
  forked_from_thread TEXT,
  forked_from_message TEXT,
  reflog_size INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX threads_tip ON threads(tip);
-- A message refers to other rows by their rowid (a few bytes), not by their 64-hex-digit id:
-- its parent (parent_rowid: the parent's rowid here, NULL for a root), the thread's first
-- user message (title_rowid) and the earliest turn that produced it (turn_rowid: turns.rowid).
-- A message row is never deleted or renumbered (unreachable ones are listed in unreachable),
-- nor is a turn row, so the references stay right; the view message_ids shows them as ids.
CREATE TABLE messages (
  rowid INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  parent_rowid INTEGER,
  role TEXT NOT NULL,
  depth INTEGER NOT NULL,
  title_rowid INTEGER,
  turn_rowid INTEGER,
  n_parts INTEGER NOT NULL,
  meta_json TEXT
);
CREATE INDEX messages_parent ON messages(parent_rowid);
CREATE TABLE parts (
  message_rowid INTEGER NOT NULL REFERENCES messages(rowid),
  position INTEGER NOT NULL,
  type TEXT NOT NULL,
  text TEXT,
  name TEXT,
  tool_call_id TEXT,
  blob TEXT,
  mime_type TEXT,
  data_json TEXT,
  -- The searchable text's length in UTF-8 bytes, kept in both modes; ``text`` itself is NULL
  -- in the lean mode (``[index] text = false``), where readers take it from the message object
  -- through the SQL function ``convgit_text(message id, position)``.
  text_bytes INTEGER
);
-- A rowid table, not WITHOUT ROWID: there a row over ~1 KB (most messages' text) spills into
-- an overflow page of its own, which made this table 2.7 x the text it holds.
CREATE UNIQUE INDEX parts_message ON parts(message_rowid, position);
CREATE TABLE turns (
  rowid INTEGER PRIMARY KEY,  -- what messages.turn_rowid names (kept when the row is replaced)
  id TEXT NOT NULL UNIQUE,
  thread TEXT,
  kind TEXT NOT NULL,
  input TEXT,
  output TEXT NOT NULL,
  model TEXT,
  resolved_model TEXT,
  started_at INTEGER,
  duration_ms INTEGER,
  input_tokens INTEGER,
  output_tokens INTEGER,
  usage_json TEXT,
  options_json TEXT,
  source TEXT,
  upstream_thread_id TEXT,
  forked_from TEXT,
  error TEXT,
  meta_json TEXT,
  -- What the turn gives provenance for: the ``span`` messages of its output's history up to
  -- the output (at depth ``out_depth``); and, for a per-message turn, the import turn that
  -- lists it (``record_rowid``: its rowid). A thread's own turns are found by these (thread_turns).
  record_rowid INTEGER,
  out_depth INTEGER,
  span INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX turns_upstream ON turns(source, upstream_thread_id);
CREATE INDEX turns_thread ON turns(thread);
CREATE INDEX turns_record ON turns(record_rowid) WHERE record_rowid IS NOT NULL;
-- Source message ids of imported messages (``convgit show chatgpt:<id>``), from import turns.
CREATE TABLE aliases (
  source TEXT NOT NULL,
  source_id TEXT NOT NULL,
  message_id TEXT NOT NULL,
  turn_rowid INTEGER NOT NULL,  -- turns.rowid of the turn that names it
  PRIMARY KEY (source, source_id, message_id)
) WITHOUT ROWID;
-- The windows a message's text is cut into for embeddings (chunks.py): chunk id
-- ``<message id>:<win>``, the text is ``start_char``..``end_char`` of the message's chunk text.
-- Filled lazily (``convgit embed``, a semantic search); the vectors are in .convgit/vectors/.
CREATE TABLE chunks (
  message_rowid INTEGER NOT NULL,
  win INTEGER NOT NULL,
  start_char INTEGER NOT NULL,
  end_char INTEGER NOT NULL,
  PRIMARY KEY (message_rowid, win)
) WITHOUT ROWID;
-- The messages with their references as ids (what the table held before schema 10), for a
-- reader of the file (Datasette, a sqlite3 shell) and for comparing two indexes (Index.dump).
CREATE VIEW message_ids AS
  SELECT m.rowid AS rowid, m.id AS id, p.id AS parent, m.role AS role, m.depth AS depth,
    tm.id AS title_id, t.id AS turn_id, m.n_parts AS n_parts, m.meta_json AS meta_json
  FROM messages m LEFT JOIN messages p ON p.rowid = m.parent_rowid
    LEFT JOIN messages tm ON tm.rowid = m.title_rowid LEFT JOIN turns t ON t.rowid = m.turn_rowid;
CREATE VIEW message_text AS
  SELECT m.id AS id, group_concat(p.text, char(10)) AS text
  FROM messages m JOIN parts p ON p.message_rowid = m.rowid
  WHERE p.type = 'text' GROUP BY m.id;
CREATE VIEW message_tree AS
WITH RECURSIVE tree(rid, id, depth, sort_key) AS (
  SELECT rowid, id, 0, printf('%012d', rowid) FROM messages
  WHERE parent_rowid IS NULL AND rowid NOT IN (SELECT rowid FROM unreachable)
  UNION ALL
  SELECT m.rowid, m.id, t.depth + 1, t.sort_key || '/' || printf('%012d', m.rowid)
  FROM messages m JOIN tree t ON m.parent_rowid = t.rid WHERE m.rowid NOT IN (SELECT rowid FROM unreachable)
)
SELECT t.id AS id, (SELECT pm.id FROM messages pm WHERE pm.rowid = m.parent_rowid) AS parent,
  t.depth AS depth, m.role AS role,
  printf('%.*c', t.depth * 2, ' ') || m.role || ': ' ||
    substr(replace(coalesce(
      nullif((SELECT text FROM message_text x WHERE x.id = t.id), ''),
      (SELECT group_concat(CASE p.type
         WHEN 'tool_call' THEN '[tool call] ' || coalesce(p.name, '') || '(' || coalesce(p.text, '') || ')'
         ELSE '[tool result] ' || coalesce(p.name,
           (SELECT c.name FROM parts c
            WHERE c.message_rowid = m.parent_rowid AND c.type = 'tool_call' AND c.tool_call_id = p.tool_call_id),
           p.tool_call_id, '') || ': ' || coalesce(p.text, '') END, '; ')
       FROM parts p WHERE p.message_rowid = m.rowid AND p.type IN ('tool_call', 'tool_result')),
      ''), char(10), ' '), 1, 80)
    AS tree,
  (SELECT group_concat(name, ', ') FROM threads WHERE tip = t.id) AS tip_of
FROM tree t JOIN messages m ON m.rowid = t.rid
ORDER BY t.sort_key;
"""
