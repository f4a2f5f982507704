"""Start-up structure (not timing): each command imports only what it needs.

A command imports its own CLI module and the library modules it uses, never pydantic (typer
converts parameters with it unless convgit/cli/params.py does), never the input parsers
unless it reads input, and `--version` / `--help` never open a store. The figures are in
docs/performance.md ("Start-up"), from benchmarks/bench_startup.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import PY, cli, cli_env, env, ok, proj, run  # noqa: F401  (fixtures)

# Run convgit as `python -m convgit ARGS` would, then write the names of the loaded modules.
PROBE = """
import atexit, json, runpy, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["convgit", *sys.argv[2:]]
runpy.run_module("convgit", run_name="__main__", alter_sys=True)
"""

HEAVY = ("pydantic", "pydantic_core", "typer._adapters", "zstandard", "rich", "sqlite3", "convgit.index",
         "convgit.ingest", "convgit.importer", "convgit.api", "mcp", "convgit.memory")


def loaded(args, *, cwd: Path, env: dict, tmp_path: Path, input: bytes = b"") -> set[str]:
    out = tmp_path / "modules.json"
    p = subprocess.run([PY, "-c", PROBE, str(out), *args], cwd=cwd, env=env, input=input, capture_output=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return set(json.loads(out.read_text()))


def present(modules: set[str], prefixes) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.fixture
def store(tmp_path, run) -> Path:
    """A project store with two loose conversations (no pack: reading needs no zstandard)."""
    d = tmp_path / "proj"
    ok(run("init"))
    for i in range(2):
        ok(run("commit", "-", input=json.dumps({"messages": [
            {"role": "user", "content": f"foo question {i}"}, {"role": "assistant", "content": f"answer {i}"}]})))
    return d


@pytest.mark.parametrize("args", [["--version"], ["-V"]])
def test_version_loads_no_library_and_no_typer(args, store, env, tmp_path):
    mods = loaded(args, cwd=store, env=env, tmp_path=tmp_path)
    assert present(mods, HEAVY + ("convgit.repository", "convgit.refs", "typer", "convgit.cli.app")) == []


@pytest.mark.parametrize("args", [["--help"], ["log", "--help"], ["threads", "--help"], ["import", "--help"],
                                  ["mcp", "--help"]])
def test_help_opens_no_store_and_loads_no_parsers(args, store, env, tmp_path):
    mods = loaded(args, cwd=store, env=env, tmp_path=tmp_path)
    # (--help lists every command, so every command module and convgit.api are loaded)
    assert present(mods, [h for h in HEAVY if h != "convgit.api"]) == []


@pytest.mark.parametrize("args", [
    ["log", "-n", "1"], ["log", "--json"], ["status"], ["search", "foo"], ["threads"], ["show"], ["show", "--json"],
])
def test_reading_commands_load_no_parsers_and_no_pydantic(args, store, env, tmp_path):
    mods = loaded(args, cwd=store, env=env, tmp_path=tmp_path)
    assert present(mods, ("pydantic", "pydantic_core", "typer._adapters", "zstandard", "convgit.ingest",
                          "convgit.importer", "convgit.commit", "convgit.merge", "convgit.gc", "convgit.fsck",
                          "mcp", "convgit.memory")) == []
    # only the module of the command itself (and what it imports) is loaded from cli/
    assert "convgit.cli.cmd_import" not in mods and "convgit.cli.cmd_plumbing" not in mods


def test_commit_loads_no_pydantic_and_no_importer(store, env, tmp_path):
    doc = {"messages": [{"role": "user", "content": "foo question 0"}, {"role": "assistant", "content": "answer 0"},
                        {"role": "user", "content": "and then?"}]}
    mods = loaded(["commit", "-", "-t", "t1"], cwd=store, env=env, tmp_path=tmp_path, input=json.dumps(doc).encode())
    assert present(mods, ("pydantic", "pydantic_core", "typer._adapters", "convgit.importer",
                          "convgit.cli.cmd_log", "convgit.cli.cmd_search")) == []
    assert "convgit.commit" in mods


def test_a_bad_value_is_still_typers_error(run, store):
    """A value the lean converters do not take falls back to typer's (pydantic) conversion."""
    r = run("log", "-n", "many")
    assert r.rc == 2 and "Input should be a valid integer" in r.err, r


# -- the lazy command table and the converters agree with what they replace ---------------------


def _full_group():
    import typer.main

    from convgit.cli import app as app_mod

    # (in the order the lazy table imports them for --help: typer's order is import order)
    for mod in dict.fromkeys(app_mod.COMMANDS.values()):
        __import__(f"convgit.cli.{mod}")
    return app_mod, typer.main.get_command(app_mod.app)


def test_command_table_matches_the_modules():
    """COMMANDS lists every registered command, in typer's own order, with its module. Typer's
    order is import order, so this runs in a fresh interpreter: another test of this worker may
    have imported command modules in another order already."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import test_startup as t\n"
        "app_mod, _ = t._full_group()\n"
        "reg = [(c.name, c.callback.__module__) for c in app_mod.app.registered_commands]\n"
        "reg += [(g.name, t._group_module(g)) for g in app_mod.app.registered_groups]\n"
        "print(json.dumps([reg, list(app_mod.COMMANDS.items())]))\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)], capture_output=True, text=True,
                       timeout=120, cwd=Path(__file__).parent.parent)
    assert p.returncode == 0, p.stderr[-2000:]
    registered, table = json.loads(p.stdout)
    assert [tuple(r) for r in registered] == [(n, f"convgit.cli.{m}") for n, m in table]


def _group_module(info) -> str:
    t = info.typer_instance
    cb = t.registered_callback.callback if t.registered_callback else t.registered_commands[0].callback
    return cb.__module__


def _params(cmd, path=()):
    for p in cmd.params:
        yield path, p
    for name in cmd.list_commands(None) if hasattr(cmd, "list_commands") else ():
        yield from _params(cmd.get_command(None, name), path + (name,))


SAMPLES = {
    str: ["x", "", "ü -- x", "007"],
    int: ["1", "007", "-3", "-0", " 4", "1_0", "+5", "1.0", "x", "", 5, 0],
    bool: [True, False],
    Path: ["a/b", "", ".", "~", "/nonexistent/x"],
    "list": [("a", "b"), (), ("",), ["x"]],
}


def test_lean_converters_give_typers_results():
    """For every parameter of every command, the pydantic-free converter returns what typer's
    own returns (or raises the same error), so convgit/cli/params.py changes no behaviour."""
    from typer._click import Context
    from typer._click.exceptions import BadParameter
    from typer._coercion import build_runtime_param

    from convgit.cli import params

    _, root = _full_group()
    checked = set()
    for path, p in _params(root):
        lean = p._runtime_param
        assert isinstance(lean, params._Lean), (
            f"convgit {' '.join(path)} {p.name}: a parameter type convgit/cli/params.py does not convert "
            "(typer would import pydantic to convert it): add its kind there")
        ours, theirs = lean, build_runtime_param(p.type_descriptor)
        assert not isinstance(theirs, params._Lean)
        ctx = Context(root)
        key = lean.kind
        for value in SAMPLES[{"str": str, "int": int, "bool": bool, "path": Path, "list": "list"}[key]]:
            def conv(rt):
                try:
                    return ("ok", rt.coerce(value, param=p, ctx=ctx))
                except BadParameter as e:
                    return ("error", e.format_message())
            a, b = conv(ours), conv(theirs)
            assert a == b and type(a[1]) is type(b[1]), (path, p.name, value, a, b)
        checked.add(key)
    assert checked == {"str", "int", "bool", "path", "list"}


def test_package_names_resolve_lazily(tmp_path):
    """`convgit.commit` is the function even once the submodule convgit.commit is loaded."""
    code = ("import sys, convgit; assert 'convgit.api' not in sys.modules; import convgit.commit; "
            "from convgit import commit, Repository; import convgit.api as api; "
            "assert commit is api.commit and convgit.commit is api.commit, commit; "
            "assert api.check_on_conflict is sys.modules['convgit.commit'].check_on_conflict; "
            "assert Repository.__name__ == 'Repository'; "
            "ns = {}; exec('from convgit import *', ns); assert ns['commit'] is api.commit; "
            "ns = {}; exec('from convgit.api import *', ns); assert ns['Payload'].__name__ == 'Payload'")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr


def test_default_config_is_what_tomllib_reads():
    """config.toml as `init` writes it is not parsed (tomllib costs ~3 ms of every start-up):
    the tables it stands for are exactly what tomllib reads from it, types included."""
    import tomllib

    from convgit import config

    def typed(v):
        return {k: typed(x) for k, x in v.items()} if isinstance(v, dict) else (type(v), v)

    assert typed(config._default_tables()) == typed(tomllib.loads(config.DEFAULT_CONFIG_TOML))
    assert config._default_tables() is not config._default_tables()  # (a fresh copy each time)


@pytest.mark.parametrize("module", ["app", "params", "views", "cmd_log", "cmd_status", "cmd_search", "cmd_commit",
                                    "cmd_threads"])
def test_command_modules_annotations_are_not_strings(module):
    """typer evaluates a string annotation (PEP 563) twice per parameter when it builds a
    command: the modules of the hot commands keep their annotations evaluated (convgit/cli/app.py)."""
    import importlib

    mod = importlib.import_module(f"convgit.cli.{module}")
    assert not hasattr(mod, "annotations") or mod.annotations.__class__.__name__ != "_Feature", module


def test_the_collector_is_paused_for_start_up_only(store, env, tmp_path):
    """convgit/cli/__init__.py: the cyclic collector is off while typer and the command module
    load, on (with start-up's objects frozen) when the command runs, and on after it."""
    out = tmp_path / "gc.json"
    code = (
        "import atexit, gc, json, runpy, sys\n"
        "import convgit.api as api\n"
        "seen = {}\n"
        "real = api.status\n"
        "def status(repo):\n"
        "    seen['in_command'] = gc.isenabled()\n"
        "    seen['frozen'] = gc.get_freeze_count() > 0\n"
        "    return real(repo)\n"
        "api.status = status\n"
        "sys.argv = ['convgit', 'status']\n"
        "def after():\n"  # (an atexit callback: the process then exits as Python does, entry.exit_now)
        f"    seen['after'] = gc.isenabled(); open({str(out)!r}, 'w').write(json.dumps(seen))\n"
        "atexit.register(after)\n"
        "runpy.run_module('convgit', run_name='__main__', alter_sys=True)\n"
    )
    p = subprocess.run([PY, "-c", code], cwd=store, env=env, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert json.loads(out.read_text()) == {"in_command": True, "frozen": True, "after": True}


# What each hot command no longer loads (issue 10, start-up < 100 ms: docs/performance.md,
# "Start-up", 2026-12-07). A module here is imported where it is used; bringing one back onto
# a command's path costs that command its import time again.
OBJECTS = ("msgspec", "convgit.codec", "convgit.objects")  # ~10 ms: only a command that reads or writes objects
# What typer loads for its own rare paths (convgit/cli/lean_typer.py): no hot command loads them.
TYPER_RARE = ("subprocess", "shutil", "traceback", "difflib", "gettext", "locale", "shellingham", "bz2", "lzma",
              "typer.completion", "typer._completion_classes", "typer._completion_shared")
# ... nor what reads packed reflogs (convgit.packedlogs, loaded where a reflog is read), nor the
# object decoder before an object is read (convgit.codec makes it on first use).
ON_NO_HOT_PATH = TYPER_RARE + ("convgit.packedlogs",)
NOT_LOADED = {
    ("status",): OBJECTS + ("convgit.results", "convgit.thread_ops", "convgit.revparse", "convgit.remotes",
                            "convgit.index.fts", "convgit.config_types", "convgit.ref_move", "convgit.log_entry",
                            "convgit.cli.cmd_maintenance", "tomllib", "ctypes", "random"),
    ("threads",): OBJECTS + ("convgit.results", "convgit.revparse", "convgit.remotes", "convgit.index.fts",
                             "convgit.config_types", "convgit.ref_move", "tomllib", "ctypes", "random"),
    ("search", "foo"): OBJECTS + ("convgit.revparse", "convgit.remotes", "convgit.embedders", "convgit.index.chunks",
                                  "convgit.index.nearest", "convgit.index.ivf", "convgit.config_types",
                                  "convgit.ref_move", "convgit.log_entry", "tomllib", "ctypes", "random"),
    ("log", "-n", "1"): ("convgit.remotes", "convgit.results", "convgit.thread_ops", "convgit.index.fts",
                         "convgit.config_types", "convgit.ref_move", "convgit.semantic", "tomllib", "ctypes", "random"),
    ("show",): ("convgit.remotes", "convgit.results", "convgit.thread_ops", "convgit.index.fts", "convgit.config_types",
                "convgit.ref_move", "convgit.semantic", "tomllib", "ctypes", "random"),
}


@pytest.mark.parametrize("args", list(NOT_LOADED), ids=" ".join)
def test_hot_commands_load_only_their_path(args, store, env, tmp_path):
    mods = loaded(["-C", str(store), *args], cwd=store.parent, env=env, tmp_path=tmp_path)  # (-C: a short option)
    assert present(mods, NOT_LOADED[args] + ON_NO_HOT_PATH) == []


def test_typers_rare_paths_load_the_real_modules(run, store):
    """The modules lean_typer defers still work where typer uses them, in a real process:
    "did you mean" (difflib) for a command and an option, an unknown short option."""
    r = run("lgo", cwd=store)
    assert r.rc == 2 and "No such command 'lgo'. Did you mean 'log'?" in r.err
    r = run("log", "--cnt", "2", cwd=store)
    assert r.rc == 2 and "No such option: --cnt (Possible options: --count" in r.err
    r = run("log", "-Z", cwd=store)
    assert r.rc == 2 and "No such option: -Z" in r.err
    r = run("log", "-n1", "-nZ", cwd=store)
    assert r.rc == 2 and "Invalid value for '-n' / '--count'" in r.err


def test_lean_typer_defers_only_what_is_not_loaded(tmp_path):
    """A stand-in leaves sys.modules once typer is loaded; what typer kept of it forwards to the
    real module on first use; a module loaded before typer is typer's as it is."""
    code = (
        "import sys, json; import shutil\n"
        "from convgit.cli.lean_typer import import_typer, _Deferred\n"
        "typer = import_typer(); import typer.main, typer.core\n"
        "out = {m: m in sys.modules for m in ('subprocess', 'difflib', 'traceback', 'gettext', 'shellingham')}\n"
        "out['kept'] = isinstance(typer.main.subprocess, _Deferred)\n"
        "out['shutil_real'] = typer.main.shutil is sys.modules['shutil']\n"
        "out['close'] = typer.core.get_close_matches('lgo', ['log', 'show'])\n"
        "out['difflib_now'] = 'difflib' in sys.modules and not isinstance(sys.modules['difflib'], _Deferred)\n"
        "out['which'] = typer.main.subprocess.PIPE == __import__('subprocess').PIPE\n"
        "out['same'] = typer.main.subprocess.Popen is sys.modules['subprocess'].Popen\n"
        "out['summary'] = type(typer.main.StackSummary.from_list([])).__name__\n"
        "print(json.dumps(out))\n"
    )
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {
        "subprocess": False, "difflib": False, "traceback": False, "gettext": False, "shellingham": False,
        "kept": True, "shutil_real": True, "close": ["log"], "difflib_now": True, "which": True, "same": True,
        "summary": "StackSummary"}


def test_commit_loads_only_the_single_document_parsers(store, env, tmp_path):
    """commit - reads one document: none of import's readers (llm's logs.db, ZIP, streamed
    arrays, the many-conversation exports, convgit's own, the tree formats, datasets, session
    files: detection asks convgit.ingest.shapes), no ref operation beyond its own, and a re-send
    moves no ref (no RefMove made)."""
    doc = {"messages": [{"role": "user", "content": "foo question 0"}, {"role": "assistant", "content": "answer 0"}]}
    mods = loaded(["commit", "-"], cwd=store, env=env, tmp_path=tmp_path, input=json.dumps(doc).encode())
    assert present(mods, ("convgit.ingest.llmdb", "convgit.ingest.jsonsplit", "convgit.ingest.exports",
                          "convgit.ingest.native", "zipfile", "hashlib", "html", "shlex", "convgit.thread_ops",
                          "convgit.ingest.chatgpt", "convgit.ingest.claude", "convgit.ingest.webui",
                          "convgit.ingest.datasets", "convgit.ingest.sessions", "convgit.ingest.apis", "convgit.ref_move",
                          "convgit.revparse", "convgit.remotes", "convgit.results", "convgit.semantic",
                          "convgit.config_types", "tomllib", "ctypes", "random")) == []


def test_a_chain_of_loose_ids_opens_no_pack():
    """graph.first_missing lists the packs (opening every index: ~0.1 ms a pack, 50 packs at
    100,000 threads) only for an id that is not a loose file: a re-send opens none."""
    from convgit.graph import first_missing

    class Objects:
        listed = 0

        def is_loose(self, oid):
            return oid != "p"

        def packs_by_age(self):
            Objects.listed += 1
            return [type("P", (), {"contains": staticmethod(lambda oid: oid == "p")})()]

        packs = packs_by_age

        def contains(self, oid):
            return False

    objects = Objects()
    assert first_missing(objects, ["a", "b", "c"]) == 3 and Objects.listed == 0
    assert first_missing(objects, ["a", "p", "c", "p", "x"], 4) == 4 and Objects.listed == 1
    assert first_missing(objects, ["p", "q"]) == 2 and Objects.listed == 2


def test_session_formats_are_one_tuple():
    """sources lists the session formats without importing their parser (ingest.shapes)."""
    from convgit.ingest import sessions, shapes, sources

    assert sessions.FILE_FORMATS == shapes.SESSION_FORMATS and set(shapes.SESSION_FORMATS) <= set(sources.FORMATS)


# entry.exit_now: the process ends without Python's teardown when nothing is left for it.
FAST_EXIT = """
import os, sys, threading, time
real = os._exit
def spy(code):
    sys.stderr.write(f"os._exit({code})\\n"); sys.stderr.flush(); real(code)
os._exit = spy
if sys.argv[1] == "thread":
    threading.Thread(target=time.sleep, args=(0.2,)).start()
sys.argv = ["convgit", *sys.argv[2:]]
from convgit.cli.entry import main
main()
"""


@pytest.mark.parametrize("how, args, rc, fast", [
    ("plain", ["status"], 0, True),
    ("plain", ["log", "-n", "1"], 0, True),
    ("plain", ["lgo"], 2, True),
    ("plain", ["show", "nosuchrev"], 15, True),  # (not_found)
    ("thread", ["status"], 0, False),  # another thread running: Python's exit (it waits for it)
])
def test_a_command_ends_without_teardown_when_nothing_is_left(how, args, rc, fast, store, env):
    """The exit code and every byte of output are kept; stdout is complete through a pipe; the
    index's WAL is closed (no -wal file left); a thread still running gets Python's exit."""
    p = subprocess.run([PY, "-c", FAST_EXIT, how, *args], cwd=store, env=env, capture_output=True, timeout=60)
    assert p.returncode == rc, p.stderr.decode()
    assert (f"os._exit({rc})" in p.stderr.decode()) is fast
    if rc == 0:
        q = subprocess.run([PY, "-m", "convgit", *args], cwd=store, env=env, capture_output=True, timeout=60)
        assert p.stdout == q.stdout and p.stdout
    assert not list((store / ".convgit").glob("index.sqlite-*"))


def test_a_long_output_is_complete_through_a_pipe(store, env, run):
    """stdout's buffer is flushed before the process ends at once (a page of JSON, piped)."""
    ok(run("commit", "-", cwd=store, input=json.dumps({"messages": [
        {"role": ("user", "assistant")[i % 2], "content": f"m{i} " + "x" * 500} for i in range(40)]})))
    p = subprocess.run([PY, "-m", "convgit", "log", "-n", "0", "--json"], cwd=store, env=env, capture_output=True,
                       timeout=60)
    assert p.returncode == 0 and len(p.stdout) > 20_000
    json.loads(p.stdout)


def test_the_packed_logs_name_is_one():
    """refs names packed-logs without importing convgit.packedlogs (ref_create's constant)."""
    from convgit.packedlogs import PACKED_LOGS
    from convgit.ref_create import PACKED_LOGS_FILE

    assert PACKED_LOGS == PACKED_LOGS_FILE == "packed-logs"


def test_the_object_decoder_is_made_on_first_use(tmp_path):
    """convgit.codec builds its Decoder (a tagged union of every object type: ~1.3 ms) when the
    first object is decoded; a commit that reads none does not pay for it."""
    code = ("import convgit.codec as c\nassert c._decoder is None\n"
            "oid, data = c.encode_and_hash(c.Blob(data=b'x'))\n"
            "assert c.decode(data) == c.Blob(data=b'x') and c._decoder is not None\n")
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
