"""The running totals the index keeps for ``status`` (schema.TOTALS): what a catch-up
changes them by, counted as it writes rows, stored in the same transaction (a mixin of the
index writer; the rows themselves are written by writer.py)."""

from __future__ import annotations

import json

from .schema import TOTALS, count_totals, read_totals


class RunningTotals:
    """The writer's totals: ``_delta`` (key → change, None when not counting) and its ``db``."""

    _delta: dict | None
    db: object

    def _add(self, key: str, n: int) -> None:
        if self._delta is not None:
            self._delta[key] += n

    def _count_threads(self, names, sign: int) -> None:
        """Add (``sign`` +1) or take away (-1) what the rows of threads ``names`` count:
        one thread each, and its tip's depth + 1 messages (O(len(names)))."""
        if self._delta is None:
            return
        for name in names:
            row = self.db.execute("SELECT m.depth FROM threads h LEFT JOIN messages m ON m.id = h.tip WHERE h.name=?",
                                  (name,)).fetchone()
            if row is not None:
                self._delta["threads"] += sign
                if row[0] is not None:
                    self._delta["message_refs"] += sign * (row[0] + 1)

    def _text_bytes_of(self, rowids: list[int]) -> int:
        if self._delta is None:
            return 0
        q = "SELECT coalesce(sum(text_bytes), 0) FROM parts WHERE message_rowid=? AND text_bytes IS NOT NULL"
        return sum(int(self.db.execute(q, (r,)).fetchone()[0]) for r in rowids)

    def _store_totals(self) -> None:
        """Write the totals, inside the catch-up's transaction: the last ones plus what this
        one changed, or (a rebuild, or an index without them) counted from the rows."""
        have = read_totals(self.db) if self._delta is not None else None
        if have is None:
            totals = count_totals(self.db)
        else:
            totals = {k: have[k] + self._delta[k] for k in TOTALS}
            if min(totals.values()) < 0:  # rows changed behind the writer's back: count them
                totals = count_totals(self.db)
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('totals', ?)", (json.dumps(totals, sort_keys=True),))
