"""docs/architecture.md, enforced: every module on one layer, imports only downward (lazy ones
too), no import cycles, and the forbidden imports and environment reads (as dulwich's
tests/test_source.py does for its ladder).

The page is parsed, not copied here: change the architecture by editing the page."""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "convgit"
DOC = ROOT / "docs" / "architecture.md"


# -- the page ---------------------------------------------------------------------------------


def _doc() -> str:
    return DOC.read_text("utf-8")


def doc_layers() -> dict[str, int]:
    """module → layer, from the table rows ``| N | module | holds |``."""
    out: dict[str, int] = {}
    for line in _doc().splitlines():
        m = re.match(r"^\|\s*(\d+)\s*\|\s*([\w.]+)\s*\|", line)
        if m:
            assert m.group(2) not in out, f"{m.group(2)} is listed twice in docs/architecture.md"
            out[m.group(2)] = int(m.group(1))
    return out


def _block(name: str) -> list[str]:
    m = re.search(rf"^```{re.escape(name)}\n(.*?)^```", _doc(), re.S | re.M)
    assert m, f"docs/architecture.md has no ```{name} block"
    return [ln.strip() for ln in m.group(1).splitlines() if ln.strip() and not ln.strip().startswith("#")]


def doc_exceptions() -> dict[tuple[str, str], str]:
    """(importer, imported) → reason, from ```upward-exceptions: ``a -> b: reason``."""
    out = {}
    for ln in _block("upward-exceptions"):
        m = re.match(r"^([\w.]+)\s*->\s*([\w.]+)\s*:\s*(.+)$", ln)
        assert m, f"bad upward-exceptions line: {ln!r}"
        out[(m.group(1), m.group(2))] = m.group(3)
    return out


def doc_forbidden() -> dict[str, list[str]]:
    """what → the modules (or ``pkg.*``) that alone may use it, from ```forbidden."""
    out = {}
    for ln in _block("forbidden"):
        what, _, who = ln.partition(":")
        out[what.strip()] = [w.strip() for w in who.split(",") if w.strip()]
    return out


def _allowed(mod: str, patterns: list[str]) -> bool:
    """``mod`` matches one of ``patterns`` (fnmatch; ``pkg.*`` also matches ``pkg`` itself)."""
    return any(mod == p or fnmatch(mod, p) or (p.endswith(".*") and mod == p[:-2]) for p in patterns)


# -- the code ---------------------------------------------------------------------------------


def _modname(p: Path) -> str:
    parts = list(p.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_modname(p): p for p in sorted(PKG.rglob("*.py"))}
TREES: dict[str, ast.Module] = {m: ast.parse(p.read_text("utf-8"), str(p)) for m, p in MODULES.items()}


def _walk(node: ast.AST, lazy: bool = False):
    """Every node with whether it runs only when a function is called (a lazy import)."""
    for child in ast.iter_child_nodes(node):
        yield child, lazy
        inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _walk(child, inner)


def imports(mod: str):
    """(imported name, line, lazy) for each import in ``mod``: convgit modules resolved to the
    module imported (``from . import codec`` is convgit.codec), others by their full name."""
    is_pkg = MODULES[mod].name == "__init__.py"
    for node, lazy in _walk(TREES[mod]):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno, lazy
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                yield (sub if sub in MODULES else target), node.lineno, lazy


def edges() -> list[tuple[str, str, int, bool]]:
    """(importer, imported convgit module, line, lazy), self-imports left out."""
    out = []
    for mod in MODULES:
        for name, line, lazy in imports(mod):
            if name in MODULES and name != mod:
                out.append((mod, name, line, lazy))
    return out


# -- the rules --------------------------------------------------------------------------------


def test_every_module_is_on_a_layer_and_every_entry_is_a_module():
    layers = doc_layers()
    missing = sorted(set(MODULES) - set(layers))
    stale = sorted(set(layers) - set(MODULES))
    assert missing == [], f"modules missing from docs/architecture.md: {missing}"
    assert stale == [], f"docs/architecture.md lists modules that do not exist: {stale}"


def upward_imports() -> list[str]:
    layers, exceptions = doc_layers(), doc_exceptions()
    bad = []
    for a, b, line, lazy in edges():
        if a in layers and b in layers and layers[b] > layers[a]:
            if lazy and (a, b) in exceptions:
                continue
            how = "lazily " if lazy else ""
            bad.append(f"{MODULES[a].relative_to(ROOT)}:{line} (layer {layers[a]}) {how}imports {b} (layer {layers[b]})")
    return bad


def test_no_upward_imports():
    assert upward_imports() == []


def test_documented_exceptions_are_real():
    """An exception stays on the page only while the lazy upward import it excuses exists."""
    layers = doc_layers()
    used = {(a, b) for a, b, _, lazy in edges() if lazy and layers.get(b, 0) > layers.get(a, 0)}
    assert sorted(set(doc_exceptions()) - used) == []


def import_cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), over every import:
    module level, lazy and ``TYPE_CHECKING`` alike."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for a, b, _, _ in edges():
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def doc_cycle_exceptions() -> list[list[str]]:
    """The module patterns of each line of ```cycle-exceptions (``a, b.*: reason``)."""
    out = []
    for ln in _block("cycle-exceptions"):
        who, sep, why = ln.partition(":")
        assert sep and why.strip(), f"a cycle exception needs a reason: {ln!r}"
        out.append([w.strip() for w in who.split(",") if w.strip()])
    return out


def test_no_import_cycles():
    excused = doc_cycle_exceptions()
    bad = [c for c in import_cycles() if not any(all(_allowed(m, pats) for m in c) for pats in excused)]
    assert bad == []


def test_documented_cycles_are_real():
    cycles = import_cycles()
    assert [pats for pats in doc_cycle_exceptions() if not any(all(_allowed(m, pats) for m in c) for c in cycles)] == []


@pytest.mark.parametrize("package", ["typer", "rich", "click", "platformdirs", "psycopg"])
def test_forbidden_imports(package):
    allowed = doc_forbidden()[f"import {package}"]
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {name}"
           for m in MODULES if not _allowed(m, allowed)
           for name, line, _ in imports(m) if name.split(".")[0] == package]
    assert bad == []


_ENV_ATTRS = {"environ", "environb", "getenv", "putenv", "unsetenv", "expanduser", "home", "gettempdir"}
_TEMP_MAKERS = {"mkstemp", "mkdtemp", "TemporaryFile", "NamedTemporaryFile", "SpooledTemporaryFile",
                "TemporaryDirectory"}


def environment_reads(mod: str) -> list[str]:
    """Where ``mod`` reads the environment: os.environ/getenv, ~ expansion, the home directory,
    the system temporary directory (gettempdir, or a tempfile made without ``dir=``)."""
    out = []
    for node, _ in _walk(TREES[mod]):
        if isinstance(node, ast.Attribute) and node.attr in _ENV_ATTRS:
            out.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "os.path", "tempfile"):
            out += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if a.name in _ENV_ATTRS]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _TEMP_MAKERS
              and not any(k.arg == "dir" for k in node.keywords)):
            out.append(f"{node.lineno}: {node.func.attr}() without dir=")
    return out


def test_only_the_listed_modules_read_the_environment():
    allowed = doc_forbidden()["environment"]
    bad = {m: environment_reads(m) for m in MODULES if not _allowed(m, allowed) and environment_reads(m)}
    assert bad == {}


def test_library_code_never_prints():
    bad = [f"{MODULES[m].relative_to(ROOT)}:{node.lineno}"
           for m in MODULES if not _allowed(m, ["convgit.cli.*", "convgit.__main__"])
           for node, _ in _walk(TREES[m])
           if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "exit")]
    assert bad == []


def test_the_checks_see_what_they_look_for():
    """The parsers are not vacuous: the page lists every layer, and known edges are found."""
    layers = doc_layers()
    assert set(layers.values()) == set(range(1, 12))
    found = {(a, b) for a, b, _, _ in edges()}
    assert ("convgit.repository", "convgit.index") in found  # a lazy import
    assert ("convgit.ingest.sources", "convgit.ingest.chatgpt") in found  # ``from . import chatgpt``
    assert ("convgit.api", "convgit.index.filters") in found  # under ``if TYPE_CHECKING:``
    assert environment_reads("convgit.config")
