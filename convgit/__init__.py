"""convgit: git for LLM conversations.

    import convgit
    repo = convgit.open_repo()
    convgit.commit(repo, {"messages": [...]})

The names here are exactly ``convgit.api.__all__`` (plus ``__version__``): one surface.
"""

__version__ = "0.1.0"

import sys as _sys  # noqa: E402
import types as _types  # noqa: E402

from . import api as _api  # noqa: E402
from .api import *  # noqa: E402,F401,F403

__all__ = ["__version__", *_api.__all__]


class _Package(_types.ModuleType):
    """The ``convgit`` package object. Python binds a submodule to its package's attribute of
    the same name when it is first imported, so the lazy ``from .gc import gc`` inside
    ``api.gc`` would turn ``convgit.gc`` from the function into the module; here the functions
    (commit, gc, fsck, merge, export) keep their names. Reach a submodule with
    ``from convgit.gc import ...`` or ``importlib.import_module("convgit.gc")``."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, _types.ModuleType) and name in __all__:
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
