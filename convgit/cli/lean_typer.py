"""Import typer without the modules it loads for paths a command never takes.

typer (0.29) imports, when it loads, modules for its own rare paths: ``subprocess`` and
``shutil`` (``typer.launch``, finding bash for completion, the terminal width of a progress
bar), ``traceback`` (its pretty exceptions; off here), ``difflib`` ("did you mean" after an
unknown command), ``gettext`` (translating its messages), ``shellingham`` (detecting the
shell for ``--install-completion``), its own completion module; with them ``locale``,
``signal``, ``selectors``, ``bz2``, ``lzma``, ``heapq``. None is used by a command that parses
and runs, and none by the library on the hot commands' paths: together a sixth of
``import typer`` (docs/performance.md, "Start-up", session 12).

``import_typer()`` puts a stand-in for each of them in ``sys.modules`` while typer loads, and
takes the stand-ins out again after, so any later ``import subprocess`` (convgit's own, or a
library's) loads the real module. Where typer keeps a stand-in (``typer.main.subprocess``,
``typer.core.get_close_matches``, ...), the first use of it loads the real module and hands
over to it: behaviour is unchanged, the import is paid on that rare path instead of by every
command. A module already loaded when typer is imported (a test process, an application that
imports convgit's CLI) is used as it is: nothing is deferred then.
"""

import sys
from types import ModuleType

# Each deferred module, and the names typer takes from it with `from M import name` while it
# loads (each becomes a forwarder; any other attribute is looked up on the real module).
DEFERRED = {
    "subprocess": (),
    "shutil": ("get_terminal_size",),
    "traceback": ("FrameSummary", "StackSummary"),
    "difflib": ("get_close_matches",),
    "gettext": ("gettext",),
    "shellingham": (),
    # typer's own completion module (with its shell classes and scripts), which it imports for
    # the --install-completion options convgit does not let it add (add_completion=False);
    # a completion request loads it as typer does (convgit.cli.app, _main_shell_completion).
    "typer.completion": ("get_completion_inspect_parameters",),
}


def real_module(name: str) -> ModuleType:
    """The real module ``name``, imported now if only its stand-in was loaded."""
    mod = sys.modules.get(name)
    if mod is None or isinstance(mod, _Deferred):
        sys.modules.pop(name, None)
        __import__(name)
        mod = sys.modules[name]
    return mod


class _Deferred(ModuleType):
    """A stand-in module: an attribute it does not have is the real module's."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):  # (import machinery probing: __path__, __spec__, __file__)
            raise AttributeError(attr)
        return getattr(real_module(self.__name__), attr)


class _Forward:
    """A name taken from a deferred module: calls and attributes go to the real object."""

    __slots__ = ("_module", "_name")

    def __init__(self, module: str, name: str):
        self._module, self._name = module, name

    def _real(self):
        return getattr(real_module(self._module), self._name)

    def __call__(self, *args, **kwargs):
        return self._real()(*args, **kwargs)

    def __getattr__(self, attr: str):
        return getattr(self._real(), attr)

    def __repr__(self) -> str:
        return f"<deferred {self._module}.{self._name}>"


def import_typer() -> ModuleType:
    """``import typer``, with the modules of ``DEFERRED`` that are not loaded yet deferred."""
    if "typer" in sys.modules:
        return sys.modules["typer"]
    placed = {}
    for name, names in DEFERRED.items():
        if name not in sys.modules:
            mod = _Deferred(name)
            for attr in names:
                setattr(mod, attr, _Forward(name, attr))
            sys.modules[name] = placed[name] = mod
    try:
        import typer
        import typer.core
        import typer.main
    finally:
        for name, mod in placed.items():
            if sys.modules.get(name) is mod:
                del sys.modules[name]
    return typer
