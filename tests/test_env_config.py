"""Settings from the environment and config.toml (issue 9, defect 14): a bad value is
``invalid_input`` (10) naming the variable or key, with no traceback and nothing written; a
good value works, durations as ``--prune`` takes them (``CONVGIT_GC_GRACE=2w``)."""

from __future__ import annotations

import os

import pytest

from helpers.cli import (  # noqa: F401  (fixtures)
    assert_error,
    cli,
    dumps,
    env,
    native,
    ok,
    proj,
    run,
    store_state,
)
from convgit import config as config_mod

BAD_ENV = [
    ("CONVGIT_LOCK_TIMEOUT", "abc"),
    ("CONVGIT_LOCK_TIMEOUT", "-1"),
    ("CONVGIT_LOCK_TIMEOUT", "nan"),
    ("CONVGIT_LOCK_TIMEOUT", "inf"),
    ("CONVGIT_LOCK_TIMEOUT", "-inf"),
    ("CONVGIT_LOCK_TIMEOUT", "1e999"),
    ("CONVGIT_GC_GRACE", "abc"),
    ("CONVGIT_GC_GRACE", "nan"),
    ("CONVGIT_GC_GRACE", "1e999"),
    ("CONVGIT_GC_GRACE", "-5"),
    ("CONVGIT_GC_GRACE", "2x"),
    ("CONVGIT_GC_GRACE", "1.5"),
    ("CONVGIT_FSYNC", "maybe"),
]


@pytest.mark.parametrize("var,value", BAD_ENV)
@pytest.mark.parametrize("args", [("status",), ("status", "--json"), ("gc", "--json"), ("log",)])
def test_bad_environment_value_is_invalid_input(cli, proj, var, value, args):
    before = store_state(proj / ".convgit")
    r = cli(*args, env_extra={var: value})
    doc = assert_error(r, "invalid_input")
    message = doc["error_message"] if doc else r.err
    assert var in message and repr(value) in message, r
    assert store_state(proj / ".convgit") == before


@pytest.mark.parametrize("var,value", [("CONVGIT_LOCK_TIMEOUT", "abc"), ("CONVGIT_GC_GRACE", "2w3"),
                                       ("CONVGIT_GC_GRACE", "nan")])
def test_bad_environment_value_in_a_real_process(run, proj, var, value):
    """The reported crash: a ValueError traceback from every command."""
    r = run("status", env_extra={var: value})
    assert_error(r, "invalid_input")
    assert var in r.err


def test_bad_environment_value_fails_init_before_writing(cli, tmp_path):
    d = tmp_path / "fresh"
    r = cli("init", "--json", cwd=d, env_extra={"CONVGIT_LOCK_TIMEOUT": "nan"})
    assert_error(r, "invalid_input")
    assert not (d / ".convgit").exists()


@pytest.mark.parametrize("var,value", [
    ("CONVGIT_LOCK_TIMEOUT", "0"), ("CONVGIT_LOCK_TIMEOUT", "0.5"), ("CONVGIT_LOCK_TIMEOUT", " 30 "),
    ("CONVGIT_GC_GRACE", "2w"), ("CONVGIT_GC_GRACE", "3d"), ("CONVGIT_GC_GRACE", "12h"),
    ("CONVGIT_GC_GRACE", "90m"), ("CONVGIT_GC_GRACE", "3600"), ("CONVGIT_GC_GRACE", "now"),
    ("CONVGIT_GC_GRACE", "never"), ("CONVGIT_GC_GRACE", "2.weeks.ago"),
    ("CONVGIT_FSYNC", "0"), ("CONVGIT_FSYNC", "false"), ("CONVGIT_FSYNC", "YES"), ("CONVGIT_FSYNC", ""),
])
def test_good_environment_values_work(cli, proj, var, value):
    ok(cli("commit", "-", "-t", "t", input=dumps(native("q", "a")), env_extra={var: value}))
    ok(cli("status", "--json", env_extra={var: value}))
    ok(cli("gc", "--json", env_extra={var: value}))


@pytest.mark.parametrize("grace,pruned", [("2w", 0), ("now", 1), ("never", 0), ("0", 1), ("1d", 0)])
def test_gc_grace_from_the_environment_is_the_default_prune_age(cli, proj, grace, pruned):
    ok(cli("commit", "-", "-t", "keep", input=dumps(native("q", "a"))))
    ok(cli("hash-object", "-w", "-", input="an unreachable blob"))
    want = ok(cli("gc", "--json", "--dry-run", f"--prune={grace}")).json()
    got = ok(cli("gc", "--json", "--dry-run", env_extra={"CONVGIT_GC_GRACE": grace})).json()
    assert got["pruned"] == want["pruned"] == pruned, (got, want)
    assert ok(cli("gc", "--json", env_extra={"CONVGIT_GC_GRACE": grace})).json()["pruned"] == pruned


BAD_TOML = [
    ("[core]\nlock_timeout = nan\n", "lock_timeout"),
    ("[core]\nlock_timeout = inf\n", "lock_timeout"),
    ("[core]\nlock_timeout = -1.0\n", "lock_timeout"),
    ("[core]\nlock_timeout = -3\n", "lock_timeout"),
    ("[core]\nlock_timeout = 'soon'\n", "lock_timeout"),
    ("[gc]\ngrace_seconds = -1\n", "grace_seconds"),
    ("[gc]\nreflog_expire_days = -90\n", "reflog_expire_days"),
    ("[limits]\nmax_messages = 0\n", "max_messages"),
    ("[limits]\nmax_payload_bytes = -1\n", "max_payload_bytes"),
]


@pytest.mark.parametrize("toml,key", BAD_TOML)
def test_bad_config_toml_value_is_invalid_input(cli, proj, toml, key):
    (proj / ".convgit" / "config.toml").write_text(toml)
    before = store_state(proj / ".convgit")
    r = cli("commit", "-", "--json", input=dumps(native("q", "a")))
    doc = assert_error(r, "invalid_input")
    assert key in doc["error_message"] and "config.toml" in doc["error_message"]
    assert store_state(proj / ".convgit") == before


def test_only_config_reads_convgit_variables():
    """Every CONVGIT_* read lives in convgit/config.py (so each one is validated there)."""
    root = os.path.dirname(config_mod.__file__)
    offenders = []
    for dp, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py") and os.path.join(dp, f) != config_mod.__file__:
                text = open(os.path.join(dp, f), encoding="utf-8").read()
                if "environ" in text.replace('os.environ.get("NO_COLOR")', "") or "getenv" in text:
                    offenders.append(f)
    assert offenders == []
