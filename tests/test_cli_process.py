"""convgit in real processes: entry points, store discovery, stdin/stdout as pipes, exit
codes as a shell sees them. Kept to a representative set (each process costs ~0.3 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import blake3
import pytest

import convgit
from helpers.cli import (  # noqa: F401  (fixtures)
    PY,
    ancestor_store,
    assert_error,
    cli,
    cli_env,
    conv,
    default_store,
    dumps,
    env,
    native,
    object_ids,
    ok,
    proj,
    run,
    store_state,
    write_json,
)


def test_version(run, tmp_path):
    want = f"convgit {convgit.__version__}\n"
    for args in (["--version"], ["-V"]):
        r = ok(run(*args, cwd=tmp_path))
        assert r.out == want and r.err == ""
    # The console script, if installed next to this interpreter.
    script = Path(PY).parent / "convgit"
    if script.exists():
        p = subprocess.run([str(script), "--version"], capture_output=True, env=cli_env(tmp_path), cwd=tmp_path)
        assert (p.returncode, p.stdout.decode()) == (0, want)
    # And through typer (what -C ... --version reaches).
    r = ok(run("-C", str(tmp_path), "--version", cwd=tmp_path))
    assert r.out == want


def test_version_in_process(cli, tmp_path):
    assert ok(cli("--version", cwd=tmp_path)).out == f"convgit {convgit.__version__}\n"


def test_no_arguments_prints_help(run, tmp_path):
    r = run(cwd=tmp_path)
    assert r.rc == 2 and "Usage: convgit" in r.err and "Commands:" in r.err and "Traceback" not in r.err
    r = ok(run("--help", cwd=tmp_path))
    assert r.out.startswith("Usage: convgit [OPTIONS] COMMAND [ARGS]...")
    assert ok(run("-h", cwd=tmp_path)).out == r.out


def test_default_store_created_on_first_use(run, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if ancestor_store(elsewhere):
        pytest.skip(f"a store above the test dir ({ancestor_store(elsewhere)}) hijacks discovery")
    store = default_store(tmp_path)
    assert not store.exists()
    d = ok(run("commit", "--json", cwd=elsewhere, input=dumps(native("no init needed")))).json()
    assert d["action"] == "created"
    assert (store / "format").read_text() == "convgit-store 1\n"
    assert d["tip"] in object_ids(store)
    assert ok(run("path", cwd=elsewhere)).out == f"{store}\n"
    assert not (elsewhere / ".convgit").exists()
    assert ok(run("show", "--json", cwd=tmp_path / "user" / "home")).json()["tip"] == d["tip"]


def test_discovery_walks_up_from_a_subdirectory(run, proj):
    deep = proj / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert ok(run("path", cwd=deep)).out == f"{proj / '.convgit'}\n"
    d = ok(run("commit", "-", "--json", cwd=deep, input=dumps(native("from below")))).json()
    assert d["tip"] in object_ids(proj / ".convgit")
    # The nearest store wins.
    ok(run("init", cwd=proj / "a"))
    assert ok(run("path", cwd=deep)).out == f"{proj / 'a' / '.convgit'}\n"


def test_dash_C_runs_as_if_in_dir(run, proj, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    write_json(proj / "conv.json", native("relative to -C"))
    # Paths (the store, and FILE arguments) are resolved as if started in DIR, as git -C does.
    d = ok(run("-C", "../proj", "commit", "conv.json", "--json", cwd=outside)).json()
    assert d["tip"] in object_ids(proj / ".convgit")
    assert ok(run("-C", str(proj), "path", cwd=outside)).out == f"{proj / '.convgit'}\n"
    ok(run("-C", str(outside), "init", cwd=proj))
    assert (outside / ".convgit" / "format").exists()
    assert ok(run("-C", str(outside), "path", cwd=proj)).out == f"{outside / '.convgit'}\n"
    assert_error(run("-C", str(tmp_path / "nope"), "path", "--json", cwd=proj), "invalid_input")


def test_convgit_dir(run, proj, tmp_path):
    custom = tmp_path / "custom" / ".convgit"
    e = {"CONVGIT_DIR": str(custom)}
    # It beats the store found by walking up; `path` names it and creates nothing; it is
    # created on first use.
    assert ok(run("path", cwd=proj, env_extra=e)).out == f"{custom}\n"
    assert not (custom / "format").exists()
    d = ok(run("commit", "-", "--json", cwd=proj, env_extra=e, input=dumps(native("to custom")))).json()
    assert (custom / "format").exists()
    assert d["tip"] in object_ids(custom) and d["tip"] not in object_ids(proj / ".convgit")
    # Relative: to the cwd, after -C.
    rel = {"CONVGIT_DIR": "rel/.convgit"}
    assert ok(run("-C", str(tmp_path), "path", cwd=proj, env_extra=rel)).out == f"{tmp_path / 'rel' / '.convgit'}\n"
    # A directory that is neither empty nor a store is refused.
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "x").write_text("x")
    assert_error(run("path", "--json", cwd=proj, env_extra={"CONVGIT_DIR": str(junk)}), "not_a_store")


def test_pipes_stdin_and_plain_stdout(run, proj):
    d = ok(run("commit", "-", "--json", input=dumps(conv("q1", "a1", "q2")))).json()
    ok(run("commit", "-", input=dumps(conv("q1", "a1", "q2", "a2"))))
    for args in (["log"], ["log", "--oneline"], ["log", "--graph"], ["show"], ["threads"], ["show-ref"]):
        r = ok(run(*args))
        assert "\x1b[" not in r.out, args  # no colour when piped
    assert ok(run("log", "--json")).json()[1]["id"] == d["tip"]


def test_raw_object_bytes_hash_to_their_id(run, proj):
    d = ok(run("commit", "-", "--json", input=dumps(conv("q1", "a1")))).json()
    store = proj / ".convgit"
    for oid in object_ids(store):
        f = store / "objects" / oid[:2] / oid[2:]
        assert blake3.blake3(f.read_bytes()).hexdigest() == oid
    raw = ok(run("cat-object", "--raw", d["tip"])).out_bytes
    assert blake3.blake3(raw).hexdigest() == d["tip"]
    pretty = ok(run("cat-object", "-p", d["tip"])).out_bytes
    assert ok(run("hash-object", "-t", "message", "-", input=pretty)).out.strip() == d["tip"]


def test_markup_printed_verbatim(run, proj):
    text = "[bold]x[/bold] [/] [red]not red[/red] :warning:"
    ok(run("commit", "-", "--thread", "m", input=dumps(conv(text, text))))
    for args in (["log"], ["log", "--oneline"], ["show"], ["threads"], ["log", "--graph"]):
        assert text in ok(run(*args)).out, args


def test_errors_in_a_process(run, proj):
    store = proj / ".convgit"
    ok(run("commit", "-", "--thread", "main", input=dumps(conv("q1", "a1"))))
    before = store_state(store)
    assert_error(run("commit", "-", "--json", input='{"messages": [oops'), "invalid_input")
    assert_error(run("commit", "-", input=dumps({"messages": [{"role": "wizard", "content": "x"}]})),
                 "schema_validation_failed")
    assert_error(run("commit", "-", "--json", input=dumps({"messages": [{"role": "user", "content": "x", "id": "0" * 64}]})),
                 "hash_mismatch")
    assert_error(run("commit", "-", "--thread", "no..pe", input=dumps(native("x"))), "invalid_ref_name")
    assert_error(run("rev-parse", "nope", "--json"), "not_found")
    assert store_state(store) == before
    (store / "format").write_text("convgit-store 4\n")
    doc = assert_error(run("log", "--json"), "not_a_store")
    assert "version 4" in doc["error_message"]
    assert_error(run("commit", "-", input=dumps(native("x"))), "not_a_store")


def test_reader_closing_the_pipe_is_not_an_error(run, proj, env):
    ok(run("commit", "-", input=dumps(conv(*[f"message {i} " + "x" * 200 for i in range(400)]))))
    p = subprocess.Popen([PY, "-m", "convgit", "log"], cwd=proj, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline().startswith(b"message ")
    p.stdout.close()  # as `convgit log | head -1` does
    err = p.stderr.read()
    p.wait(timeout=30)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err
    assert p.returncode == 0
