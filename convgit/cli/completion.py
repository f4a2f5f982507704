"""Shell completion: typer's scripts and protocol (``--install-completion``,
``--show-completion``, the ``_CONVGIT_COMPLETE`` variable), and what convgit adds to it:
thread names and revisions completed from the store in use.

Loaded only when a shell asks for completions or a completion option is given, so that no
other command pays for it. Completing never creates a store and never fails loudly: a
shell gets no candidates rather than an error.
"""

from __future__ import annotations

def install_or_show(ctx, *, install: bool) -> None:
    """``--install-completion`` / ``--show-completion``, as typer's own options do them, for
    the shell running convgit (detected as typer does)."""
    from typer import completion as tc
    from typer._completion_classes import completion_init

    completion_init()
    from typer._completion_shared import _get_shell_name

    shell = _get_shell_name()
    if shell is None:
        from ..errors import InvalidInput
        from . import output

        err = InvalidInput("cannot tell which shell is running convgit: run it from bash, zsh, fish or powershell")
        output.report_error(err)
        ctx.exit(err.exit_code)
    param = next(p for p in ctx.command.params if p.name == ("install_completion" if install else "show_completion"))
    (tc.install_callback if install else tc.show_callback)(ctx, param, shell)


def _names(ctx) -> list[str]:
    """Thread names of the store this command would use (none when there is no store)."""
    import os

    from ..repository import Repository

    root = ctx.find_root() if ctx is not None else None
    start = (root.params.get("directory") if root is not None else None) or None
    try:
        repo = Repository.discover(os.path.abspath(start) if start else None, create_default=False)
    except Exception:  # no store, an unreadable one: nothing to offer
        return []
    try:
        return sorted(repo.refs.read_all())
    except Exception:
        return []
    finally:
        repo.close()


def threads(ctx, incomplete: str) -> list[str]:
    """Completion of a thread name."""
    return [n for n in _names(ctx) if n.startswith(incomplete)]


def revisions(ctx, incomplete: str) -> list[str]:
    """Completion of a revision: HEAD, thread names, and NAME~ once a name is typed whole."""
    names = _names(ctx)
    out = [c for c in ["HEAD", *names] if c.startswith(incomplete)]
    if incomplete in names or incomplete == "HEAD":
        out.append(incomplete + "~1")
    return out
