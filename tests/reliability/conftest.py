"""Fixtures for the reliability tests: stores, the real CLI, seeds printed on failure."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: timing-sensitive (processes racing); never run in parallel workers")


@pytest.fixture
def fast_env(monkeypatch):
    """CONVGIT_FSYNC=0 for tests where durability is not what is tested (concurrency, index)."""
    monkeypatch.setenv("CONVGIT_FSYNC", "0")
    monkeypatch.setenv("CONVGIT_LOCK_TIMEOUT", "60")


@pytest.fixture
def shm_tmp(tmp_path):
    """A scratch directory on tmpfs when there is one (the crash simulator writes thousands of
    small stores), else under tmp_path."""
    import shutil
    import tempfile

    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else str(tmp_path)
    d = tempfile.mkdtemp(prefix="convgit-rel-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)
