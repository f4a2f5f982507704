"""Stored times (UTC epoch milliseconds, ints) rendered as text: the one ISO 8601 form that
JSON output and the CLI show. Pure; the lowest layer, so any module may use it."""

from __future__ import annotations

import datetime as _dt


def iso(ms: int | None) -> str | None:
    """``ms`` (UTC epoch milliseconds) as ``YYYY-MM-DDTHH:MM:SS.mmmZ``; None stays None."""
    if ms is None:
        return None
    d = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
