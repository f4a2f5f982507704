"""Full-text search: an FTS5 table in the derived index, the query language, and snippets.

The index keeps text once, in ``parts.text``. ``message_fts`` is a *contentless* FTS5 table
(``content=''``): it holds only the inverted index (tokens → message rowids), never a second
copy of the text; snippets are cut from ``parts.text``. One FTS row per message, keyed by
``messages.rowid``, with one column per kind of text, so that ranking can weigh them and a
search can choose which to look in:

    user       text parts of user messages           (weight 5: what you typed ranks first)
    assistant  text parts of assistant messages      (weight 1)
    system     text parts of system / developer messages
    tool       tool calls (name + arguments), tool results, text of tool messages
    reasoning  reasoning parts of any message

Tokenizer: ``unicode61 remove_diacritics 2`` (case-folded; "cafe" finds "café", "uber" finds
"Über"), with the symbol category (So: emoji, ©, °) added to the token characters. Scripts
written without spaces (Han, Kana, Hangul, Thai…) and symbols would otherwise index a whole
run of characters as one token; convgit puts every such character into a token of its own
before indexing, and turns a query word written in them into a phrase of those characters, so
``東京`` finds "東京タワーに行く" (an exact substring match at any length, ranked by bm25 like
everything else). The same rules cut snippets, so highlights land on what matched.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field

from ..errors import InvalidInput

FTS_TABLE = "message_fts"
COLUMNS = ("user", "assistant", "system", "tool", "reasoning")
DEFAULT_IN = ("user", "assistant")
WEIGHTS = {"user": 5.0, "assistant": 1.0, "system": 1.0, "tool": 0.5, "reasoning": 0.5}
TOKENIZE = "unicode61 remove_diacritics 2 categories 'L* N* Co So'"

FTS_SCHEMA = f"""
CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(
  {", ".join(COLUMNS)}, content='', tokenize="{TOKENIZE}"
);
CREATE TABLE unreachable (rowid INTEGER PRIMARY KEY);
CREATE INDEX parts_tools ON parts(message_rowid) WHERE type IN ('tool_call', 'tool_result');
"""

_TEXT_COLUMN = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system", "tool": "tool"}


# -- characters that are tokens on their own ------------------------------------------------

_CJK_RANGES = (
    (0x1100, 0x11FF), (0x2E80, 0x2FDF), (0x3040, 0x30FF), (0x3100, 0x312F), (0x3130, 0x318F),
    (0x31A0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA960, 0xA97F), (0xAC00, 0xD7FF),
    (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0x20000, 0x3FFFF),
    (0x0E00, 0x0E7F), (0x0E80, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF),  # Thai, Lao, Myanmar, Khmer
)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


@functools.lru_cache(maxsize=8192)
def _isolated(c: str) -> bool:
    o = ord(c)
    for lo, hi in _CJK_RANGES:
        if lo <= o <= hi:
            cat = unicodedata.category(c)
            return cat[0] in "LN" or cat in ("So", "Co")
    return unicodedata.category(c) in ("So", "Co")


def _space(m: re.Match) -> str:
    c = m.group(0)
    return f" {c} " if _isolated(c) else c


def prepare(text: str) -> str:
    """The text as the FTS index sees it: each isolated character a token of its own."""
    if text.isascii() or not _NON_ASCII.search(text):  # (str.isascii: one pass in C, far cheaper than the search)
        return text
    return _NON_ASCII.sub(_space, text)


# -- what is indexed ------------------------------------------------------------------------


def fts_values(role: str, parts: list[tuple]) -> tuple[str | None, ...] | None:
    """One FTS row (a value per column) from a message's role and its ``parts`` rows
    (``(rid, position, type, text, name, ...)`` as writer.py stores them). None: nothing to index."""
    cols: dict[str, list[str]] = {}
    text_col = _TEXT_COLUMN.get(role, "system")
    for p in parts:
        type_, text, name = p[2], p[3], p[4]
        if type_ == "text":
            col = text_col
        elif type_ == "reasoning":
            col = "reasoning"
        elif type_ in ("tool_call", "tool_result"):
            col = "tool"
            if name:
                text = f"{name} {text or ''}"
        else:
            continue
        if text:
            cols.setdefault(col, []).append(text)
    if not cols:
        return None
    return tuple(prepare("\n".join(cols[c])) if c in cols else None for c in COLUMNS)


def index_messages(db, messages: list, parts: list[tuple]) -> None:
    """Add FTS rows for newly indexed messages (rows ``[rowid, id, parent, role, ...]``)."""
    by_rid: dict[int, list[tuple]] = {}
    for p in parts:
        by_rid.setdefault(p[0], []).append(p)
    rows = []
    for m in messages:
        vals = fts_values(m[3], by_rid.get(m[0], ()))
        if vals is not None:
            rows.append((m[0], *vals))
    if rows and getattr(db, "fts_insert", None) is not None:  # a backend with its own full-text table
        db.fts_insert(rows)
    elif rows:
        db.executemany(f"INSERT INTO {FTS_TABLE} (rowid, {', '.join(COLUMNS)}) VALUES (?,?,?,?,?,?)", rows)


def _values_from_db(db, rowid: int) -> tuple | None:
    row = db.execute("SELECT role, id FROM messages WHERE rowid=?", (rowid,)).fetchone()
    if row is None:
        return None
    parts = db.execute(
        "SELECT message_rowid, position, type, coalesce(text, convgit_text(?, position)), name FROM parts "
        "WHERE message_rowid=? ORDER BY position", (row[1], rowid)
    ).fetchall()
    return fts_values(row[0], parts)


def fts_remove(db, rowid: int) -> None:
    """Take a message out of the FTS index (a contentless table needs the values it indexed,
    which are recomputed from ``parts``), so that ranking statistics match a rebuilt index."""
    vals = _values_from_db(db, rowid)
    if vals is not None and getattr(db, "fts_delete", None) is not None:
        db.fts_delete(rowid)
    elif vals is not None:
        db.execute(f"INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, {', '.join(COLUMNS)}) VALUES ('delete',?,?,?,?,?,?)",
                   (rowid, *vals))


def fts_add(db, rowid: int) -> None:
    """Add message ``rowid`` of the index to the full-text table."""
    vals = _values_from_db(db, rowid)
    if vals is not None and getattr(db, "fts_insert", None) is not None:
        db.fts_insert([(rowid, *vals)])
    elif vals is not None:
        db.execute(f"INSERT INTO {FTS_TABLE} (rowid, {', '.join(COLUMNS)}) VALUES (?,?,?,?,?,?)", (rowid, *vals))


# -- the query language ---------------------------------------------------------------------


class QuerySyntax(InvalidInput):
    """A query the full-text engine refused, in its own words (``detail``: "fts5: syntax error
    near …", "no such column: …"); search.py words the error for the user."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass
class Term:
    """A query word or phrase, as normalised tokens (``prefix``: the last one is a prefix)."""

    tokens: list[str]
    prefix: bool = False


@dataclass
class Query:
    """A parsed search: the FTS5 expression handed to MATCH and the terms, for snippets."""

    fts: str  # what is handed to MATCH
    terms: list[Term] = field(default_factory=list)


_OPERATORS = {"AND", "OR", "NOT", "NEAR"}
_GLUE = set("-./@'#&%=~$!?|\\;<>[]")


def _bare(c: str) -> bool:
    return c.isalnum() or c == "_" or c == "\x1a" or ord(c) > 127 and not c.isspace()


def _col_filter_follows(q: str, j: int) -> bool:
    """``-user: x`` / ``-{user tool}: x``: a column filter that excludes columns."""
    k = j
    if k < len(q) and q[k] == "{":
        return True
    while k < len(q) and _bare(q[k]):
        k += 1
    return k > j and q[j:k] in COLUMNS and q[k:].lstrip().startswith(":")


def parse(query: str, columns: tuple[str, ...] = DEFAULT_IN) -> Query:
    """Turn a user's FTS5 query into the MATCH expression, restricted to ``columns``.

    Full FTS5 syntax passes through (phrases, ``prefix*``, AND/OR/NOT, NEAR, ``^``, column
    filters). Two conveniences: a word glued with punctuation (``gpt-4o``, ``file.py``,
    ``http://x``) is taken as the phrase it spells, where FTS5 alone would report a syntax
    error; and words in space-less scripts become phrases of their characters (see above).
    """
    if not query.strip():
        raise InvalidInput("empty search query")
    for c in columns:
        if c not in COLUMNS:
            raise InvalidInput(f"unknown text kind {c!r} for --in (one of {', '.join(COLUMNS)})")
    out: list[str] = []
    terms: list[Term] = []
    q, n, i = query, len(query), 0

    def next_char(j: int) -> str:
        while j < n and q[j].isspace():
            j += 1
        return q[j] if j < n else ""

    while i < n:
        c = q[i]
        if c == '"':
            j, buf = i + 1, []
            while j < n:
                if q[j] == '"':
                    if j + 1 < n and q[j + 1] == '"':
                        buf.append('"')
                        j += 2
                        continue
                    break
                buf.append(q[j])
                j += 1
            else:
                raise InvalidInput(f"malformed search query: unterminated string in {query!r}")
            s = "".join(buf)
            out.append('"' + prepare(s).replace('"', '""') + '"')
            terms.append(Term(query_tokens(s), next_char(j + 1) == "*"))
            i = j + 1
        elif _bare(c) or (c in _GLUE and not (c == "-" and _col_filter_follows(q, i + 1))):
            j = i
            glued = False
            while j < n:
                ch = q[j]
                if _bare(ch):
                    j += 1
                elif ch in _GLUE or (ch == ":" and q[j + 1 : j + 2] == "/") or (
                    ch == ":" and j + 1 < n and _bare(q[j + 1]) and q[i:j] not in COLUMNS
                ):
                    glued = True
                    j += 1
                else:
                    break
            w = q[i:j]
            if not glued and (w in _OPERATORS or next_char(j) == ":"):
                out.append(w)  # an operator, or a column name
            else:
                toks = query_tokens(w)
                p = prepare(w)
                if not toks:
                    out.append(" ")  # punctuation alone: nothing to look for
                elif glued or p != w:
                    out.append('"' + p.replace('"', '""') + '"')
                else:
                    out.append(w)
                if toks and not (w.isdigit() and "".join(out[:-1]).rstrip().endswith(",")):  # NEAR(…, 5)
                    terms.append(Term(toks, next_char(j) == "*"))
            i = j
        else:
            out.append(c)
            i += 1
    expr = "".join(out)
    if not expr.strip():
        raise InvalidInput(f"nothing to search for in {query!r}")
    return Query("{" + " ".join(columns) + "} : (" + expr + ")", [t for t in terms if t.tokens])


# -- tokens and snippets --------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+|[^\s\w]")


@functools.lru_cache(maxsize=4096)
def _fold(ch: str) -> str:
    """unicode61's ``remove_diacritics 2``: only Latin letters lose their marks ("é" → "e";
    Greek "ά", "ø" and "ł" are kept, as SQLite keeps them)."""
    o = ord(ch)
    if 0xC0 <= o <= 0x24F or 0x1E00 <= o <= 0x1EFF:
        base = unicodedata.normalize("NFD", ch)[0]
        if base.isascii():
            return base
    return ch


def _norm(tok: str) -> str:
    if tok.isascii():
        return tok.lower()
    return "".join(_fold(ch) for ch in tok).lower()


def iter_tokens(text: str):
    """(start, end, normalised token) as the FTS tokenizer cuts ``text``."""
    for m in _WORD.finditer(text):
        s, e = m.span()
        w = m.group(0)
        if len(w) == 1 and not (w.isalnum()):
            if _isolated(w):
                yield s, e, w
            continue
        if w.isascii() or not any(_isolated(ch) for ch in w):
            yield s, e, _norm(w)
            continue
        k = s
        for idx, ch in enumerate(w):
            if _isolated(ch):
                if s + idx > k:
                    yield k, s + idx, _norm(text[k : s + idx])
                yield s + idx, s + idx + 1, ch
                k = s + idx + 1
        if k < e:
            yield k, e, _norm(text[k:e])


def query_tokens(s: str) -> list[str]:
    """The tokens of ``s`` as the FTS tokenizer splits them."""
    return [t for _, _, t in iter_tokens(s)]


def find_matches(text: str, terms: list[Term]) -> list[tuple[int, int]]:
    """Character spans of ``text`` that the query's terms match (merged, in order)."""
    toks = list(iter_tokens(text))
    spans: list[tuple[int, int]] = []
    for term in terms:
        k = len(term.tokens)
        for i in range(len(toks) - k + 1):
            ok = True
            for j, want in enumerate(term.tokens):
                got = toks[i + j][2]
                if not (got == want or (term.prefix and j == k - 1 and got.startswith(want))):
                    ok = False
                    break
            if ok:
                spans.append((toks[i][0], toks[i + k - 1][1]))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        else:
            merged.append((s, e))
    return merged


_WS = re.compile(r"\s+")


def snippet(text: str, terms: list[Term], width: int = 160) -> tuple[str, list[tuple[int, int]]]:
    """About ``width`` characters of ``text`` around its first match, whitespace collapsed,
    with "…" where it was cut, and the spans of the matches inside the snippet."""
    spans = find_matches(text, terms)
    if spans:
        first = spans[0][0]
        start = max(0, first - width // 3)
        if start:
            sp = text.rfind(" ", 0, start + 1)
            start = sp + 1 if sp >= 0 and start - sp < 20 else start
    else:
        start = 0
    end = min(len(text), start + width)
    if end < len(text):
        sp = text.find(" ", end)
        end = sp if 0 <= sp - end < 20 else end
    pieces: list[tuple[str, bool]] = []
    k = start
    for s, e in spans:
        if e <= start or s >= end:
            continue
        s, e = max(s, start), min(e, end)
        if s > k:
            pieces.append((text[k:s], False))
        pieces.append((text[s:e], True))
        k = e
    if k < end:
        pieces.append((text[k:end], False))
    out, hl = [], []
    pos = 0
    if start > 0:
        out.append("…")
        pos = 1
    for i, (s, marked) in enumerate(pieces):
        s = _WS.sub(" ", s)
        if i == 0 and not marked and start == 0:
            s = s.lstrip()
        if marked:
            hl.append((pos, pos + len(s)))
        out.append(s)
        pos += len(s)
    res = "".join(out).rstrip()
    if end < len(text):
        res += "…"
    return res, hl
