"""Progress on stderr, on a terminal only: a bar when the work has a known size, a spinner
with the time spent when it has none. Never with ``--json`` or ``-q``, never when stderr is
piped, so scripts and logs see nothing of it.

The time left is the work left at the average rate since the start (work done / time spent):
an import writes in batches, so the rate over the last few seconds swings between "all done
at once" and "nothing moved"; the average over the whole run is what predicts the end.
"""

from __future__ import annotations

import sys
import time

from . import output

# Work smaller than this is not worth a bar (it would flash and vanish).
MIN_BYTES = 1 << 20


def enabled(*, json_: bool = False, quiet: bool = False) -> bool:
    """Draw progress? Only on a terminal (stderr), never under --json or -q."""
    return not json_ and not quiet and output.stderr_tty()


def eta_seconds(done: float, total: float, elapsed: float) -> float | None:
    """Seconds left at the average rate since the start, or None before any work is done."""
    if done <= 0 or elapsed <= 0 or total <= 0:
        return None
    left = max(0.0, total - done)
    return left * elapsed / done


def format_eta(seconds: float | None) -> str:
    """``-:--:--`` when unknown, else ``H:MM:SS``."""
    if seconds is None:
        return "-:--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Bar:
    """A bar over ``total`` units (bytes or items), as a context manager that gives the
    function to call with each amount of work done (None when no bar is drawn)."""

    def __init__(self, label: str, total: int, *, unit: str = "bytes", on: bool = True) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.on = on and total > 0 and (unit != "bytes" or total >= MIN_BYTES)
        self.bar = None
        self.t0 = time.monotonic()

    def __enter__(self):
        if not self.on:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
        from rich.text import Text

        start = self.t0

        class _Eta(ProgressColumn):
            """Time left at the average rate since the start."""

            def render(self, task) -> Text:
                left = eta_seconds(task.completed, task.total or 0, time.monotonic() - start)
                return Text(format_eta(left) + " left", style="progress.remaining")

        amount = DownloadColumn() if self.unit == "bytes" else MofNCompleteColumn()
        self.bar = Progress(TextColumn(self.label), BarColumn(), amount, _Eta(),
                            console=Console(file=sys.stderr), transient=True)
        self.bar.start()
        task = self.bar.add_task(self.label, total=self.total)
        return lambda n: self.bar.advance(task, n)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


class Spinner:
    """A spinner with the time spent, for work of unknown size (gc, fsck, a store merge)."""

    def __init__(self, label: str, *, on: bool = True) -> None:
        self.label = label
        self.on = on
        self.status = None

    def __enter__(self):
        if self.on:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.status = Progress(SpinnerColumn(), TextColumn(self.label), TimeElapsedColumn(),
                                   console=Console(file=sys.stderr), transient=True)
            self.status.start()
            self.status.add_task(self.label, total=None)
        return self

    def __exit__(self, *exc) -> None:
        if self.status is not None:
            self.status.stop()


# A count of items (objects) smaller than this is not worth a bar either.
MIN_ITEMS = 2000


class Counter:
    """A bar over items whose total the work finds out itself: the function it gives takes
    ``(done, total)``; the bar appears on the first call with a total worth one."""

    def __init__(self, label: str, *, on: bool = True, min_items: int | None = None) -> None:
        self.label = label
        self.on = on
        self.min_items = MIN_ITEMS if min_items is None else min_items
        self.bar = None
        self.advance = None
        self.done = 0

    def __enter__(self):
        if not self.on:
            return None

        def update(done: int, total: int) -> None:
            if self.bar is None:
                if total < self.min_items:
                    return
                self.bar = Bar(self.label, total, unit="items")
                self.advance = self.bar.__enter__()
            if self.advance is not None and done > self.done:
                self.advance(done - self.done)
                self.done = done

        return update

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


class Transfer:
    """Progress of a sync (push, fetch, pull, clone, index sync, gc --remote): a spinner
    while the amount is not known yet (reading the remote's refs, packing), a byte bar once
    the work gives its total (``(done, total)`` calls, as push's uploads and fetch's
    downloads do), then a spinner again for what follows the transfer (verifying, moving
    threads, indexing). As a context manager it gives the function to call, or None when
    nothing is drawn (so the library need not even find the total)."""

    def __init__(self, label: str, *, on: bool = True, after: str = "finishing") -> None:
        self.label, self.on, self.after = label, on, after
        self.spinner: Spinner | None = None
        self.bar: Bar | None = None
        self.advance = None
        self.done = 0
        self.finished = False

    def _spin(self, label: str) -> None:
        self.spinner = Spinner(label)
        self.spinner.__enter__()

    def _stop(self) -> None:
        if self.spinner is not None:
            self.spinner.__exit__(None, None, None)
            self.spinner = None
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None

    def __enter__(self):
        if not self.on:
            return None
        self._spin(self.label)
        return self

    def __call__(self, done: int, total: int) -> None:
        if self.finished:
            return
        if self.bar is None and total >= MIN_BYTES and done < total:
            self._stop()
            self.bar = Bar(self.label, total, unit="bytes")
            self.advance = self.bar.__enter__()
        if self.bar is not None and done > self.done:
            self.advance(min(done, total) - self.done)
            self.done = min(done, total)
        if total and done >= total:
            self.finished = True
            self._stop()
            self._spin(f"{self.label}: {self.after}")

    def __exit__(self, *exc) -> None:
        self._stop()
