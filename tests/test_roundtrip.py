"""Re-import and export → import round trips, through the CLI (issue 9, defects 4 and 5).

- A conversation without an upstream id is recognised by its content on re-import: every
  shared fixture imported three times leaves the same threads and objects as once.
- ``export --all -f native`` (one document) and ``-f jsonl`` (one thread a line) imported into
  an empty store give the same threads (names, tips, forks, dates) and, on every thread, the
  same messages with the same time, model and usage; the turns come back as the same objects.
  A second import of the same export writes nothing. Bad export documents are refused with
  their code and write nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.cli import assert_error, cli, env, ok, proj  # noqa: F401
from test_import import FIX, chatgpt_conv, needs_fixtures

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


def _answers(cli, d: Path) -> dict:
    """What a user sees of every thread: the thread list, and each thread's log with and
    without usage (ids, roles, text, time, model, usage, turn ids)."""
    threads = _threads(cli, d)
    out: dict = {"threads": threads}
    for t in threads:
        out[t["name"]] = (ok(cli("log", "--json", t["name"], cwd=d)).json(),
                          ok(cli("log", "-u", "--json", t["name"], cwd=d)).json())
    return out


def _turns_of(cli, d: Path, threads) -> set[str]:
    return {e["turn"] for t in threads for e in ok(cli("log", "--json", t, cwd=d)).json() if e.get("turn")}


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


# -- defect 5: export → import --------------------------------------------------------------


@pytest.fixture
def everything(cli, tmp_path) -> Path:
    """A store holding every shared fixture, and commits: calls, a fork, a rename."""
    d = _store(cli, tmp_path / "a")
    for rel in FIXTURES:
        ok(cli("import", FIX / rel, cwd=d))
    call = {"messages": [{"role": "user", "content": "hi"}], "response": {"role": "assistant", "content": "hello"},
            "model": "m1", "usage": {"input_tokens": 3, "output_tokens": 2}, "started_at": 1700000000000}
    ok(cli("commit", "-t", "work", "-", input=json.dumps(call), cwd=d))
    call2 = {**call, "messages": [*call["messages"], call["response"], {"role": "user", "content": "more"}],
             "response": {"role": "assistant", "content": "sure"}, "model": "m2", "started_at": 1700000100000}
    ok(cli("commit", "-t", "work", "-", input=json.dumps(call2), cwd=d))
    ok(cli("fork", "work~2", "side", cwd=d))
    ok(cli("commit", "-t", "side", "-", input=json.dumps({"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "q"}],
        "response": {"role": "assistant", "content": "a"}, "model": "m3", "started_at": 1700000200000}), cwd=d))
    ok(cli("threads", "rename", "side", "side-renamed", cwd=d))
    return d


@needs_fixtures
@pytest.mark.parametrize("fmt", ["native", "jsonl"])
def test_export_import_round_trip_over_every_fixture(cli, tmp_path, everything, fmt):
    a = everything
    out = tmp_path / f"all.{fmt}"
    ok(cli("export", "--all", "-f", fmt, "-o", out, cwd=a))
    if fmt == "native":
        doc = json.loads(out.read_text())  # one valid document
        assert doc["convgit"] == {"version": 1} and len(doc["threads"]) == len(_threads(cli, a))
    else:
        assert len(out.read_text().splitlines()) == len(_threads(cli, a))
    b = _store(cli, tmp_path / "b")
    r = ok(cli("import", "--json", out, cwd=b)).json()
    assert r["status"] == "ok" and {c["status"] for c in r["conversations"]} == {"imported"}, r
    before, after = _answers(cli, a), _answers(cli, b)
    assert [t["name"] for t in after["threads"]] == [t["name"] for t in before["threads"]]
    for t0, t1 in zip(before["threads"], after["threads"]):
        if t0["name"] == "side-renamed":  # its last reflog line (the rename) named no turn
            t0, t1 = {**t0, "updated_at": None}, {**t1, "updated_at": None}
        assert t1 == t0  # name, tip, message count, title, fork origin, created/updated
    for t in before["threads"]:
        (log0, usage0), (log1, usage1) = before[t["name"]], after[t["name"]]
        assert [(e["id"], e["role"]) for e in log1] == [(e["id"], e["role"]) for e in log0]
        assert log1 == log0, t["name"]  # time, model, the turn ids themselves
        assert usage1 == usage0, t["name"]  # tokens per turn and in total
    assert after["threads"][-1]["name"] == "work"
    side = next(t for t in after["threads"] if t["name"] == "side-renamed")
    assert side["forked_from"] is not None
    # the same turn objects: byte for byte
    docs = json.loads(out.read_text())["threads"] if fmt == "native" else [json.loads(x) for x in out.read_text().splitlines()]
    exported = {t["id"] for d in docs for t in d["turns"]}
    assert _turns_of(cli, a, [t["name"] for t in before["threads"]]) <= exported
    for tid in sorted(exported)[::7]:  # a sample (one process each)
        assert ok(cli("cat-object", "--raw", tid, cwd=b)).out_bytes == ok(cli("cat-object", "--raw", tid, cwd=a)).out_bytes
    ok(cli("fsck", cwd=b))
    # importing the same export again writes nothing
    objects = _objects(cli, b)
    again = ok(cli("import", "--json", out, cwd=b)).json()
    assert {c["status"] for c in again["conversations"]} == {"deduplicated"} and again["new_objects"] == 0, again
    assert _objects(cli, b) == objects and _answers(cli, b) == after
    # and both exports into the same store: the other one is recognised too
    other = tmp_path / ("all.jsonl" if fmt == "native" else "all.native")
    ok(cli("export", "--all", "-f", "jsonl" if fmt == "native" else "native", "-o", other, cwd=a))
    assert ok(cli("import", "--json", other, cwd=b)).json()["new_objects"] == 0 and _objects(cli, b) == objects


@needs_fixtures
def test_empty_messages_convgit_stored_round_trip(cli, tmp_path):
    """An llm prompt with no text and a ShareGPT row with a missing turn are stored as empty
    messages; their export carries the id, so they import again (the defect's exit 11)."""
    a = _store(cli, tmp_path / "a")
    ok(cli("import", FIX / "llm" / "sample-logs.db", cwd=a))
    ok(cli("import", FIX / "sharegpt" / "axolotl-conversation-missingturns.json", cwd=a))
    ok(cli("import", FIX / "sharegpt" / "axolotl-conversation.json", cwd=a))
    out = tmp_path / "x.jsonl"
    ok(cli("export", "--all", "-f", "jsonl", "-o", out, cwd=a))
    assert any(all(p["type"] == "text" and not p.get("text") for p in m["parts"])
               for line in out.read_text().splitlines() for m in json.loads(line)["messages"])
    b = _store(cli, tmp_path / "b")
    ok(cli("import", out, cwd=b))
    assert _threads(cli, b) == _threads(cli, a)
    assert not any(t["name"].startswith("native/") for t in _threads(cli, b))


def test_empty_message_rule(cli, proj, tmp_path):
    """Without its convgit id an empty message is refused; with the right id it is what
    convgit stored, and is accepted; with a wrong one it is a hash mismatch."""
    assert_error(cli("commit", "-", input=json.dumps({"messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]})), "schema_validation_failed")
    empty_root = ok(cli("hash-object", "-t", "message", "-",
                        input=json.dumps({"type": "message", "parent": None, "role": "user", "parts": []})))
    oid = empty_root.out.strip()
    r = ok(cli("commit", "--json", "-", input=json.dumps({"messages": [{"role": "user", "parts": [], "id": oid}]}))).json()
    assert r["tip"] == oid
    assert_error(cli("commit", "-", input=json.dumps({"messages": [{"role": "user", "parts": [], "id": "0" * 64}]})),
                 "hash_mismatch")


def test_branch_switch_and_alt_threads_round_trip(cli, tmp_path):
    """A ChatGPT conversation whose current branch moved (its main thread's reflog holds a
    non-fast-forward move) and its alt thread come back with the same answers."""
    a = _store(cli, tmp_path / "a")
    from test_import import _node, _text

    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps([chatgpt_conv(current="a2")]))
    ok(cli("import", v1, cwd=a))
    grown = chatgpt_conv(current="u2", extra=[_node("u2", "a1", "user", _text("thanks"), 200.0, [])])
    grown["mapping"]["a1"]["children"] = ["u2"]
    v2 = tmp_path / "v2.json"
    v2.write_text(json.dumps([grown]))
    ok(cli("import", v2, cwd=a))
    out = tmp_path / "all.json"
    ok(cli("export", "--all", "-o", out, cwd=a))
    b = _store(cli, tmp_path / "b")
    ok(cli("import", out, cwd=b))
    assert _answers(cli, b) == _answers(cli, a)
    assert ok(cli("import", "--json", out, cwd=b)).json()["new_objects"] == 0


def test_taken_name_gets_a_suffix_and_is_recognised_next_time(cli, tmp_path):
    a = _store(cli, tmp_path / "a")
    ok(cli("commit", "-t", "work", "-", input=json.dumps({"messages": [{"role": "user", "content": "from a"}]}), cwd=a))
    out = tmp_path / "w.json"
    ok(cli("export", "work", "-o", out, cwd=a))
    b = _store(cli, tmp_path / "b")
    ok(cli("commit", "-t", "work", "-", input=json.dumps({"messages": [{"role": "user", "content": "from b"}]}), cwd=b))
    r = ok(cli("import", "--json", out, cwd=b)).json()
    assert r["conversations"][0]["threads"][0]["thread"] == "work-2"
    again = ok(cli("import", "--json", out, cwd=b)).json()
    assert again["conversations"][0]["status"] == "deduplicated" and again["new_objects"] == 0
    assert [t["name"] for t in _threads(cli, b)] == ["work", "work-2"]


def test_thread_continued_after_export_is_recognised(cli, tmp_path):
    a = _store(cli, tmp_path / "a")
    first = {"messages": [{"role": "user", "content": "q"}], "response": {"role": "assistant", "content": "a"},
             "model": "m", "started_at": 1700000000000}
    ok(cli("commit", "-t", "work", "-", input=json.dumps(first), cwd=a))
    out = tmp_path / "w.json"
    ok(cli("export", "work", "-o", out, cwd=a))
    ok(cli("commit", "-t", "work", "-", input=json.dumps({"messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]}), cwd=a))
    objects = _objects(cli, a)
    r = ok(cli("import", "--json", out, cwd=a)).json()
    assert r["conversations"][0]["status"] == "deduplicated" and _objects(cli, a) == objects


def _export_doc(cli, tmp_path) -> dict:
    a = _store(cli, tmp_path / "a")
    ok(cli("commit", "-t", "work", "-", input=json.dumps({"messages": [{"role": "user", "content": "q"}],
                                                            "response": {"role": "assistant", "content": "a"},
                                                            "model": "m"}), cwd=a))
    return json.loads(ok(cli("export", "work", cwd=a)).out)


@pytest.mark.parametrize("damage, code", [
    (lambda d: d["convgit"].update(version=2), "schema_validation_failed"),
    (lambda d: d["turns"][0].update(model="other"), "hash_mismatch"),
    (lambda d: d["reflog"][0].update(turn="f" * 64), "schema_validation_failed"),
    (lambda d: d["messages"][0]["parts"][0].update(text="changed"), "hash_mismatch"),
    (lambda d: d["messages"][0].pop("id"), "schema_validation_failed"),
    (lambda d: d.update(tip="e" * 64), "schema_validation_failed"),
    (lambda d: d["turns"][0].update(started_at="yesterday"), "schema_validation_failed"),
])
def test_bad_export_document_is_refused_and_writes_nothing(cli, tmp_path, damage, code):
    doc = _export_doc(cli, tmp_path)
    damage(doc)
    b = _store(cli, tmp_path / "b")
    before = _objects(cli, b)
    for shape in (doc, {"convgit": {"version": 1}, "threads": [doc]}):
        f = tmp_path / "bad.json"
        f.write_text(json.dumps(shape))
        r = cli("import", "--json", f, cwd=b)
        assert_error(r, code)
        assert _objects(cli, b) == before and _threads(cli, b) == []


def test_invalid_exported_name_is_imported_under_another_name_with_a_warning(cli, tmp_path):
    doc = _export_doc(cli, tmp_path)
    doc["thread"] = "bad..name"
    b = _store(cli, tmp_path / "b")
    f = tmp_path / "x.json"
    f.write_text(json.dumps(doc))
    (c,) = ok(cli("import", "--json", f, cwd=b)).json()["conversations"]
    assert c["status"] == "imported" and c["threads"][0]["thread"].startswith("native/")
    assert any("bad..name" in w for w in c["warnings"])
