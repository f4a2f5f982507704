"""Re-import, through the CLI (issue 9, defect 4): a conversation without an upstream id is
recognised by its content on re-import, so every shared fixture imported three times leaves
the same threads and objects as once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli, env, ok  # noqa: F401
from test_import import FIX, needs_fixtures

FIXTURES = sorted(str(p.relative_to(FIX)) for p in FIX.rglob("*") if p.is_file() and p.name != "README.md") \
    if FIX.is_dir() else []


def _store(cli, path: Path) -> Path:
    ok(cli("init", "--json", cwd=path))
    return path


def _objects(cli, d: Path) -> int:
    o = ok(cli("status", "--json", cwd=d)).json()["objects"]
    return o["loose"] + o["packed"]


def _threads(cli, d: Path) -> list[dict]:
    rows = ok(cli("threads", "--json", cwd=d)).json()
    for r in rows:
        r.pop("current")  # HEAD: which thread an import switched to is not the thread's state
    return rows


# -- defect 4: recognised on re-import ----------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("rel", FIXTURES)
def test_reimport_of_every_fixture_three_times_writes_nothing(cli, tmp_path, rel):
    d = _store(cli, tmp_path / "s")
    ok(cli("import", FIX / rel, cwd=d))
    threads, objects = _threads(cli, d), _objects(cli, d)
    for _ in range(2):
        r = ok(cli("import", "--json", FIX / rel, cwd=d)).json()
        assert r["new_objects"] == 0 and r["new_messages"] == 0, r
        assert {c["status"] for c in r["conversations"]} <= {"deduplicated", "skipped"}, r
        assert _threads(cli, d) == threads
        assert _objects(cli, d) == objects


@needs_fixtures
def test_open_webui_chat_without_id_is_one_thread(cli, tmp_path):
    d = _store(cli, tmp_path / "s")
    f = FIX / "openwebui" / "owi-importer-webui-json.json"
    first = ok(cli("import", "--json", f, cwd=d)).json()
    assert first["conversations"][0]["upstream_id"] in (None, "")
    for _ in range(2):
        again = ok(cli("import", "--json", f, cwd=d)).json()
        assert [c["status"] for c in again["conversations"]] == ["deduplicated"]
    assert [t["name"] for t in _threads(cli, d)] == [first["conversations"][0]["threads"][0]["thread"]]


def test_same_content_from_another_source_is_not_taken_for_it(cli, tmp_path):
    """The content rule is per source: a tree without id whose messages another source
    already holds still gets its own thread (its provenance is its own)."""
    d = _store(cli, tmp_path / "s")
    chat = {"id": "", "title": "t", "chat": {"history": {"currentId": "b", "messages": {
        "a": {"id": "a", "parentId": None, "role": "user", "content": "hello", "timestamp": 1700000000},
        "b": {"id": "b", "parentId": "a", "role": "assistant", "content": "hi", "timestamp": 1700000001,
              "model": "m"}}}}}
    f = tmp_path / "owui.json"
    f.write_text(json.dumps([chat]))
    native = tmp_path / "n.json"
    native.write_text(json.dumps({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}))
    ok(cli("import", native, cwd=d))
    r = ok(cli("import", "--json", f, cwd=d)).json()
    assert r["conversations"][0]["status"] == "imported", r
    assert ok(cli("import", "--json", f, cwd=d)).json()["conversations"][0]["status"] == "deduplicated"
