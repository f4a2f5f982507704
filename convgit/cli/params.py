"""Command-line values converted without pydantic, for the parameter types convgit uses.

typer (0.2x) converts every parameter that is not a bool flag through a pydantic
``TypeAdapter``, built when the parameter is first processed, even when the option was not
given: importing pydantic and building the adapters cost ~45 ms of every command's start
(docs/performance.md, "Start-up"). convgit's parameters are str, int, bool, list[str] and
Path, whose conversion of a command-line string is exact and simple, so each such parameter
gets a converter that does it directly. Anything else (a value of another shape, an int
that is not plain decimal digits, a type added later) falls back to typer's own converter,
so behaviour and error messages stay typer's. tests/test_startup.py checks that both give
the same result.

This uses two typer internals: ``_TyperParameter._runtime_param`` (the lazily built
converter) and ``typer._coercion.RuntimeParam``. If a typer release renames them, ``lean``
does nothing and typer converts as it always did (slower, never wrong).
"""

import re
from pathlib import Path
from typing import Any, get_args, get_origin

import typer

QUIET_OPT = typer.Option(False, "-q", "--quiet", help="Print nothing but warnings and errors.")

try:
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_path, routes_to_path
except ImportError:  # pragma: no cover - another typer: keep its own conversion
    RuntimeParam = None

try:
    from typer._click.parser import _normalize_opt, _OptionParser
except ImportError:  # pragma: no cover - another typer: its own parser as it is
    _OptionParser = None

_MISS = object()
_DECIMAL = re.compile(r"-?[0-9]{1,18}")  # what int() and pydantic read alike, within int64


def lean(command) -> None:
    """Give each parameter of ``command`` whose type convgit knows a pydantic-free converter."""
    for param in getattr(command, "params", ()):
        if hasattr(param, "_usage_display_name") and not getattr(param, "_convgit_usage", False):
            param._usage_display_name = _usage_name.__get__(param)  # git's style: REV, [REV], PATH...
            param.display_type_rich = _no_type  # "PATH  Export files", not "PATH <list[str]>  ..."
            param._convgit_usage = True
    if _Parser is not None and not getattr(command, "_convgit_parser", False):
        made_parser = command.make_parser

        def make_parser(ctx):
            parser = made_parser(ctx)
            if type(parser) is _OptionParser:
                parser.__class__ = _Parser
            return parser

        command.make_parser = make_parser
        command._convgit_parser = True
    if RuntimeParam is None:
        return
    for param in getattr(command, "params", ()):
        _lean_param(param)
    # The -h/--help flag is made per command on first use (typer caches it): lean it then.
    made = getattr(command, "get_help_option", None)
    if made is not None and not getattr(made, "_convgit_lean", False):
        def get_help_option(ctx):
            opt = made(ctx)
            if opt is not None:
                _lean_param(opt)
            return opt

        get_help_option._convgit_lean = True
        command.get_help_option = get_help_option


def _usage_name(param) -> str:
    """An argument in the usage line as git writes it: ``REV``, ``[REV]``, ``PATH...``,
    ``[THREAD...]`` (typer writes ``{REV}`` and ``[[THREAD]...]...``)."""
    name = param.metavar or (param.name or "").upper()
    if param.nargs != 1:
        name += "..."
    return name if param.required else f"[{name}]"


def _no_type(ctx=None) -> str:
    return ""


def _lean_param(param) -> None:
    if getattr(param, "_runtime_param", _MISS) is not None:
        return  # not a typer parameter, or already converted
    desc = getattr(param, "type_descriptor", None)
    kind = _kind(desc) if desc is not None else None
    if kind is not None:
        param._runtime_param = _Lean(parameter_info=desc.parameter_info, annotation=desc.annotation, kind=kind)


def _kind(desc) -> str | None:
    info, ann = desc.parameter_info, desc.annotation
    if desc.file_annotation is not None or getattr(info, "parser", None) is not None:
        return None
    if ann is str or ann is bool:
        return ann.__name__
    if ann is int:
        if info.min is None and info.max is None and not info.clamp:
            return "int"
        return None
    if get_origin(ann) is list and get_args(ann) == (str,):
        return "list"
    if ann is Path and info.path_type is None and routes_to_path(ann, info):
        return "path"
    return None


if RuntimeParam is not None:

    class _Lean(RuntimeParam):
        """typer's runtime parameter with a direct converter for ``kind`` (str, int, bool,
        list, path). Not a dataclass of its own: making one costs ~0.7 ms of every start-up,
        and nothing compares or copies these; ``kind`` is set as the frozen fields are."""

        def __init__(self, *, kind: str = "str", **fields: Any) -> None:
            super().__init__(**fields)
            object.__setattr__(self, "kind", kind)

        def _coerce_value(self, value: Any, param, ctx) -> Any:
            out = self._fast(value, param, ctx)
            if out is _MISS:  # typer's own conversion (pydantic), errors included
                return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)
            return out

        def _fast(self, value: Any, param, ctx) -> Any:
            kind = self.kind
            if kind == "str":
                return value if type(value) is str else _MISS
            if kind == "bool":
                return value if type(value) is bool else _MISS
            if kind == "int":
                if type(value) is int:
                    return value
                if type(value) is str and _DECIMAL.fullmatch(value):
                    return int(value)
                return _MISS
            if kind == "list":
                items = list(value) if isinstance(value, (list, tuple)) else [value]
                return items if all(type(v) is str for v in items) else _MISS
            if kind == "path":
                if type(value) is str:
                    value = Path(value)  # what pydantic's Path validator makes of a str
                elif not isinstance(value, Path):
                    return _MISS
                return coerce_cli_path(value, self.parameter_info, path_type=Path, param=param, ctx=ctx)
            return _MISS  # pragma: no cover


_Parser = None
if _OptionParser is not None:

    class _Parser(_OptionParser):
        """typer's option parser, which tries a short option (``-C``, ``-n``) as a long one first
        and, when that fails, computes "did you mean" suggestions (importing difflib) that it
        then throws away to match it as a short option. This goes to the short match directly
        when that is where typer's would end; every other argument is typer's path."""

        def _process_opts(self, arg: str, state) -> None:
            if "=" not in arg and arg[:2] not in self._opt_prefixes \
                    and _normalize_opt(arg, self.ctx) not in self._long_opt:
                self._match_short_opt(arg, state)
                return
            super()._process_opts(arg, state)


# -- completion (the work is in cli/completion.py, imported only when a shell asks) ------------


def complete_thread(ctx: "typer.Context", incomplete: str) -> list[str]:
    """Thread names for shell completion."""
    from .completion import threads

    return threads(ctx, incomplete)


def complete_rev(ctx: "typer.Context", incomplete: str) -> list[str]:
    """Revisions (HEAD, thread names) for shell completion."""
    from .completion import revisions

    return revisions(ctx, incomplete)
