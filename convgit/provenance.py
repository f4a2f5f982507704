"""Which turn gives a message on a thread its time, model and source.

A message is content: the same message can sit in many threads (a shared system prompt, a
re-sent history, a fork), and each thread may have recorded it at another time. The rule
(docs/format.md §8): a message shown on thread T takes what T's own history recorded,

1. ``thread``: the turns that describe it on T: T's model calls and appends, and the
   per-message turns of T's imports (or of the imports of the same upstream conversation:
   the other branches of one imported tree), earliest first;
2. ``import``: else T's import record (the import event itself: when it was imported),
   unless the earliest turn anywhere is one that describes the message (a model call, or a
   per-message turn of another import: a conversation forked in the tool it came from);
3. ``earliest``: else the earliest turn anywhere in the store that covers it (a fork shows
   the times of the thread it forked from; a message reached by id, not by thread, too).

``log --json`` says which one it used in ``provenance``. Pure: the index supplies the
turns (``Index.thread_turns``), the walk supplies messages from the tip down.
"""

from __future__ import annotations

PROVENANCE = ("thread", "import", "earliest")


class ThreadProvenance:
    """Thread-local provenance along one walk of a thread, tip first (one message at a time,
    in order: a turn becomes a candidate when the walk reaches its output, and stays one for
    the ``span`` messages it covers)."""

    def __init__(self, turns: list[dict]) -> None:
        self._by_output: dict[str, list[tuple]] = {}
        for t in turns:
            if t.get("out_depth") is None or not t.get("span"):
                continue  # covers nothing (a fork turn) or its output is not indexed
            rank = 1 if (t.get("kind") == "import" and t.get("record") is None) else 0
            started = t.get("started_at")
            key = (rank, started if started is not None else 0, t["turn"])
            self._by_output.setdefault(t["output"], []).append((key, t))
        self._active: list[tuple] = []

    def at(self, oid: str, depth: int) -> dict | None:
        """The turn info for message ``oid`` (at ``depth``), the next one down the walk; None
        when the thread recorded nothing about it."""
        new = self._by_output.pop(oid, None)
        if new:
            self._active.extend(new)
        if not self._active:
            return None
        self._active = [a for a in self._active if a[1]["out_depth"] - a[1]["span"] < depth]
        if not self._active:
            return None
        key, t = min(self._active, key=lambda a: a[0])
        info = {k: v for k, v in t.items() if k not in ("record", "out_depth", "span")}
        info["provenance"] = PROVENANCE[key[0]]
        return info


def choose(local: dict | None, anywhere: dict | None) -> dict | None:
    """The turn info a message on a thread shows (the module's rule), from its thread-local
    candidate and its earliest turn anywhere (``query.details``)."""
    if local is not None and local["provenance"] == "import" and anywhere is not None and (
            anywhere.get("kind") != "import" or anywhere.get("record") is not None):
        local = None
    if local is None:
        return earliest(anywhere)
    # The log key (a paging cursor) stays the store-wide one: one key per message.
    return {**local, "key_started_at": anywhere.get("started_at") if anywhere else None,
            "key_turn": anywhere.get("turn") if anywhere else None}


def earliest(info: dict | None) -> dict | None:
    """A message's earliest-anywhere turn info, marked as such."""
    if info is None:
        return None
    return {**info, "provenance": "earliest"}
