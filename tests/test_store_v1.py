"""A small store written by format version 1 (checked in under tests/data/store-v1, packed
and loose objects, a fork, a long text in a blob) must open, log, show and fsck in every
later release, with the same answers (pinned by snapshots)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import convgit
from convgit import api

DATA = Path(__file__).parent / "data" / "store-v1" / ".convgit"


@pytest.fixture
def old_store(tmp_path) -> convgit.Repository:
    dst = tmp_path / ".convgit"
    shutil.copytree(DATA, dst)
    repo = convgit.Repository.open(dst)
    yield repo
    repo.close()


def test_it_has_loose_and_packed_objects(old_store):
    assert list(old_store.objects.iter_loose()) and old_store.objects.packs()


def test_refs_and_logs_are_unchanged(old_store, snapshot):
    refs = api.show_refs(old_store)
    assert refs == snapshot
    logs = {name: [e.to_json(old_store) for e in api.log(old_store, name)] for name in refs}
    assert logs == snapshot


def test_threads_and_show(old_store, snapshot):
    rows = api.threads(old_store)
    assert [(r["name"], r["tip"], r["messages"], r["title"], r["forked_from"], r["created_at"]) for r in rows] == snapshot
    conv = api.conversation(old_store, "ex1-alt")
    assert conv[-1].text.startswith("Long text ") and len(conv[-1].text) == 10 + 40000


def test_fsck_is_clean(old_store):
    rep = api.fsck(old_store)
    assert rep.ok, [p.message for p in rep.errors]
    assert rep.loose > 0 and rep.packed > 0


def test_it_accepts_new_commits_and_gc(old_store):
    r = convgit.commit(old_store, {"messages": [{"role": "user", "content": "still works"}]}, thread="new")
    assert r.status == "created"
    assert api.gc(old_store, prune="never").status == "done"
    assert api.fsck(old_store).ok
