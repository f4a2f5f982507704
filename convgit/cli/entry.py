"""Console-script entry point. ``--version`` answers before typer and rich are imported."""

from __future__ import annotations

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
    finally:
        resume_gc()


if __name__ == "__main__":  # pragma: no cover
    main()
