"""Console-script entry point. ``--version`` answers before typer and rich are imported.

When the command is done, the process ends at once (``os._exit``) if Python's own exit has
nothing left to do but free memory: stdout and stderr flushed, no ``atexit`` callback, no
other thread. That teardown (every module cleared and every object freed, one by one) cost
~4 ms of each command (docs/performance.md, "Start-up", session 12). Everything convgit
writes is written, synced and closed before ``main`` returns (the store and its index are
closed by ``app.run``), so nothing on disk depends on it. Otherwise, and for an exit code that
is not a number, the process exits as ``sys.exit`` does.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv in (["--version"], ["-V"], ["version"]):
        from .. import __version__

        sys.stdout.write(f"convgit {__version__}\n")
        return
    from . import pause_gc, resume_gc

    pause_gc()  # (start-up makes no garbage: the collector runs again before the command does)
    try:
        from .app import run

        run(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        resume_gc()
    exit_now(code)


def exit_now(code) -> None:
    """End the process with ``code``: at once when nothing is left for Python's exit to do
    (see the module's docstring), else by raising SystemExit."""
    code = 0 if code is None else code
    if isinstance(code, int) and _nothing_at_exit():
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
        except Exception:  # (a reader gone: Python's exit reports it as it always did)
            raise SystemExit(code) from None
        os._exit(code)
    raise SystemExit(code)


def _nothing_at_exit() -> bool:
    """No atexit callback registered and no thread but this one."""
    import atexit

    count = getattr(atexit, "_ncallbacks", None)  # (CPython's; elsewhere: exit as usual)
    if count is None or count() > 0:
        return False
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() <= 1


if __name__ == "__main__":  # pragma: no cover
    main()
