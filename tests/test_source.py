"""The layers of STYLE.md, enforced: the library never imports the CLI framework, and only
convgit/config.py reads the environment."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "convgit"


def _modules():
    for p in sorted(PKG.rglob("*.py")):
        yield p, ast.parse(p.read_text("utf-8"), str(p))


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_only_cli_imports_typer_and_rich():
    offenders = []
    for p, tree in _modules():
        if "cli" in p.relative_to(PKG).parts:
            continue
        for name in _imports(tree):
            if name.split(".")[0] in ("typer", "rich", "click"):
                offenders.append(f"{p.relative_to(PKG)} imports {name}")
    assert offenders == []


def test_library_does_not_import_cli():
    offenders = []
    for p, tree in _modules():
        if "cli" in p.relative_to(PKG).parts or p.name == "__main__.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "cli" in node.module.split("."):
                offenders.append(str(p.relative_to(PKG)))
    assert offenders == []


def test_only_config_reads_the_environment():
    offenders = []
    for p, tree in _modules():
        if p.name == "config.py":
            continue
        src = p.read_text("utf-8")
        if "os.environ" in src or "os.getenv" in src:
            rel = p.relative_to(PKG)
            # The CLI may read terminal conventions (NO_COLOR); nothing else may.
            if rel.parts[0] == "cli" and "NO_COLOR" in src and src.count("os.environ") == src.count('os.environ.get("NO_COLOR")'):
                continue
            offenders.append(str(rel))
    assert offenders == []


def test_library_code_never_prints():
    offenders = []
    for p, tree in _modules():
        if "cli" in p.relative_to(PKG).parts:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "exit"):
                offenders.append(f"{p.relative_to(PKG)}:{node.lineno}")
    assert offenders == []
