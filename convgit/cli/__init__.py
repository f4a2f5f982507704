"""The command line: parse → call convgit.api → render. The only package importing typer/rich.

Start-up pauses the cyclic garbage collector (``pause_gc``, convgit/cli/entry.py): importing
typer and convgit makes tens of thousands of long-lived objects (modules, classes, functions)
and next to no garbage, and the collector ran ~40 times over them for nothing. It runs again
(``resume_gc``) once the command's module is loaded, before the command parses its arguments
and runs (``app.main_options``), or when the command is done; what start-up made is frozen
first (``gc.freeze``: never scanned again, as a pre-forking server does), so the library
modules a command imports next do not make the collector walk typer's objects over and over.
Together about 5-15 ms of every command (docs/performance.md, "Start-up"). In-process
invocations (typer's CliRunner in the tests) do not pass through ``entry.main``: nothing is
paused or frozen there.
"""

import gc

_paused = False


def pause_gc() -> None:
    """Pause the cyclic garbage collector for start-up (if it is on: a caller's choice stands)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_gc() -> None:
    """The collector on again, if ``pause_gc`` turned it off, with what exists now frozen."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
