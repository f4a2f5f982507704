"""The PostgreSQL index's tables: those of the SQLite index (index/schema.py), column for
column, in a schema of their own per store (the namespace), plus the full-text table.

Every text column is ``COLLATE "C"`` (byte order, as SQLite compares), whatever the database's
locale, so that orderings and key comparisons are the SQLite index's. The full-text table
holds, per message, the tokens of each column as convgit's tokenizer cuts them (fts.py: the
SQLite tokenizer's rules) and a ``tsvector`` of them (column letter + token) for the GIN index
that finds candidates; ``fts_stats`` keeps the row and token totals that bm25 needs.
"""

from __future__ import annotations

from ..schema import SCHEMA_VERSION

PG_LAYOUT = 2  # this package's own layout; a change means a rebuild, as a schema version does (2: chunks)
# (schema 10, rows referring to rows by rowid, changes VERSION through SCHEMA_VERSION)
VERSION = f"{SCHEMA_VERSION}.pg{PG_LAYOUT}"

C = 'TEXT COLLATE "C"'

# table → (primary key, columns in order): the upserts of dialect.py are built from it.
TABLES = {
    "meta": ("key", ("key", "value")),
    "threads": ("name", ("name", "tip", "created_ms", "updated_ms", "forked_from_thread", "forked_from_message",
                         "reflog_size")),
    "turns": ("id", ("rowid", "id", "thread", "kind", "input", "output", "model", "resolved_model", "started_at",
                     "duration_ms", "input_tokens", "output_tokens", "usage_json", "options_json", "source",
                     "upstream_thread_id", "forked_from", "error", "meta_json", "record_rowid", "out_depth", "span")),
    "unreachable": ("rowid", ("rowid",)),
    "aliases": ("source, source_id, message_id", ("source", "source_id", "message_id", "turn_rowid")),
}

DDL = f"""
CREATE TABLE meta (key {C} PRIMARY KEY, value {C});
CREATE TABLE threads (
  name {C} PRIMARY KEY,
  tip {C} NOT NULL,
  created_ms BIGINT,
  updated_ms BIGINT,
  forked_from_thread {C},
  forked_from_message {C},
  reflog_size BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX threads_tip ON threads(tip);
CREATE TABLE messages (
  rowid BIGINT PRIMARY KEY,
  id {C} NOT NULL UNIQUE,
  parent_rowid BIGINT,
  role {C} NOT NULL,
  depth BIGINT NOT NULL,
  title_rowid BIGINT,
  turn_rowid BIGINT,
  n_parts BIGINT NOT NULL,
  meta_json {C}
);
CREATE INDEX messages_parent ON messages(parent_rowid);
CREATE INDEX messages_turn ON messages(turn_rowid);
CREATE TABLE parts (
  message_rowid BIGINT NOT NULL,
  position BIGINT NOT NULL,
  type {C} NOT NULL,
  text {C},
  name {C},
  tool_call_id {C},
  blob {C},
  mime_type {C},
  data_json {C},
  text_bytes BIGINT,
  PRIMARY KEY (message_rowid, position)
);
CREATE INDEX parts_tools ON parts(message_rowid) WHERE type IN ('tool_call', 'tool_result');
CREATE TABLE turns (
  rowid BIGINT NOT NULL UNIQUE,
  id {C} PRIMARY KEY,
  thread {C},
  kind {C} NOT NULL,
  input {C},
  output {C} NOT NULL,
  model {C},
  resolved_model {C},
  started_at BIGINT,
  duration_ms BIGINT,
  input_tokens BIGINT,
  output_tokens BIGINT,
  usage_json {C},
  options_json {C},
  source {C},
  upstream_thread_id {C},
  forked_from {C},
  error {C},
  meta_json {C},
  record_rowid BIGINT,
  out_depth BIGINT,
  span BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX turns_upstream ON turns(source, upstream_thread_id);
CREATE INDEX turns_thread ON turns(thread);
CREATE INDEX turns_record ON turns(record_rowid) WHERE record_rowid IS NOT NULL;
CREATE TABLE aliases (
  source {C} NOT NULL,
  source_id {C} NOT NULL,
  message_id {C} NOT NULL,
  turn_rowid BIGINT NOT NULL,
  PRIMARY KEY (source, source_id, message_id)
);
CREATE TABLE unreachable (rowid BIGINT PRIMARY KEY);
CREATE TABLE chunks (
  message_rowid BIGINT NOT NULL,
  win BIGINT NOT NULL,
  start_char BIGINT NOT NULL,
  end_char BIGINT NOT NULL,
  PRIMARY KEY (message_rowid, win)
);
CREATE TABLE message_fts (
  rowid BIGINT PRIMARY KEY,
  ntok BIGINT NOT NULL,
  lex TSVECTOR NOT NULL,
  u TEXT[], a TEXT[], s TEXT[], t TEXT[], r TEXT[]
);
CREATE VIEW message_ids AS
  SELECT m.rowid AS rowid, m.id AS id, p.id AS parent, m.role AS role, m.depth AS depth,
    tm.id AS title_id, t.id AS turn_id, m.n_parts AS n_parts, m.meta_json AS meta_json
  FROM messages m LEFT JOIN messages p ON p.rowid = m.parent_rowid
    LEFT JOIN messages tm ON tm.rowid = m.title_rowid LEFT JOIN turns t ON t.rowid = m.turn_rowid;
CREATE TABLE fts_stats (one INT PRIMARY KEY CHECK (one = 1), rows BIGINT NOT NULL, tokens BIGINT NOT NULL);
INSERT INTO fts_stats VALUES (1, 0, 0);
-- The SQLite index's lean-mode function, which the shared queries name: the PostgreSQL index
-- always keeps the text (other machines may not have the objects), so it is never needed.
CREATE FUNCTION convgit_text(TEXT, BIGINT) RETURNS TEXT LANGUAGE sql IMMUTABLE AS 'SELECT NULL::text';
"""

# Made after a rebuild's bulk load (faster than kept up row by row while loading).
LATE_DDL = "CREATE INDEX message_fts_lex ON message_fts USING gin (lex);"
