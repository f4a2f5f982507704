"""``RefMove``: one compare-and-swap of a ref for ``RefStore.update_many`` (convgit.refs),
the move every write hands the ref store. Apart from refs.py so that reading refs (status,
log, threads) creates no dataclass for it (start-up: docs/performance.md); ``from
convgit.refs import RefMove`` still works."""

from __future__ import annotations

from dataclasses import dataclass

from .ids import ANY


@dataclass(frozen=True)
class RefMove:
    """One compare-and-swap for ``RefStore.update_many``."""

    name: str
    new: str
    expected: object = ANY
    message: str = ""
    turn: str | None = None
    time_ms: int | None = None
    extra: tuple[tuple[str, str], ...] = ()  # more (turn, message) lines at the new tip (merge)
    # Moves made before this one in the same compare-and-swap, oldest first: (tip, turn,
    # message) each. ``expected`` → steps[0] → ... → ``new``: a reflog line per step, one
    # rename (a thread committed to several times in one bulk commit).
    steps: tuple[tuple[str, str | None, str], ...] = ()
