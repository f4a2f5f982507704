"""What the import's speed work (issue 10, docs/performance.md "Import at random ids") must not
change: an export whose conversation ids are random uuids (as real ChatGPT exports are, so each
batch's new threads land all over ``packed-refs`` and ``packed-logs``) imports to exactly what
importing its conversations one by one gives (``log --all --json``, threads, fsck), and again
writes nothing; ``packed-refs``, once searched often, answers from its split lines exactly as
its byte search does (and an unordered file keeps the byte search); a ``packed-logs`` reader
keeping few chunks still reads every thread; the per-message turns an import indexes in bulk
give the index a rebuild gives."""

from __future__ import annotations

import json
import random
import uuid

import pytest

import convgit
from convgit import api, graph, importer, packedlogs, refformat
from convgit.fsck import fsck
from convgit.packedlogs import PackedLog, PackedLogsReader, format_packed_logs
from convgit.refformat import PACKED_HEADER, open_packed_refs

from helpers.cli import cli, env, ok  # noqa: F401

NOW = 1_750_000_000_000


def _chatgpt(rnd: random.Random, i: int) -> dict:
    """A ChatGPT-shaped conversation with a random uuid id, sometimes a regenerated answer."""
    cid = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
    t = 1.7e9 + i * 3600
    mapping: dict = {}

    def add(parent, role, text, **md):
        nonlocal t
        nid = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
        t += 7
        mapping[nid] = {"id": nid, "parent": parent, "children": [], "message": None if role is None else {
            "id": nid, "author": {"role": role, "metadata": {}}, "create_time": t,
            "content": {"content_type": "text", "parts": [text]}, "status": "finished_successfully",
            "metadata": md, "recipient": "all"}}
        if parent is not None:
            mapping[parent]["children"].append(nid)
        return nid

    cur = add(None, None, None)
    for k in range(rnd.randint(1, 3)):
        u = add(cur, "user", f"question {i}.{k}")
        a = add(u, "assistant", f"answer {i}.{k}", model_slug="gpt-4o", finish_details={"type": "stop"})
        if rnd.random() < 0.3:
            add(u, "assistant", f"answer {i}.{k}, regenerated", model_slug="gpt-4o")
        cur = a
    return {"id": cid, "conversation_id": cid, "title": f"conversation {i}", "create_time": 1.7e9 + i * 3600,
            "update_time": t, "mapping": mapping, "current_node": cur}


def _log(cli, store) -> list:
    return ok(cli("-C", str(store), "log", "--all", "--json")).json()


def test_random_ids_in_bulk_answer_as_one_by_one_and_again_write_nothing(tmp_path, cli, monkeypatch):
    rnd = random.Random(10)
    convs = [_chatgpt(rnd, i) for i in range(60)]
    ids = [c["id"] for c in convs]
    assert ids != sorted(ids)  # (random order: new names fall between the packed ones)
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps(convs))
    monkeypatch.setattr(importer, "BATCH_CONVERSATIONS", 13)  # 5 transactions, each creating in bulk
    bulk = convgit.init(tmp_path / "bulk")
    r = api.import_paths(bulk, [export], now_ms=NOW)
    assert r.counts()["imported"] == 60
    assert not bulk.refs._loose_names()  # every thread went straight into packed-refs
    one = convgit.init(tmp_path / "one")
    for i, c in enumerate(convs):  # a conversation at a time: the per-ref path
        f = tmp_path / f"c{i}.json"
        f.write_text(json.dumps([c]))
        assert api.import_paths(one, [f], now_ms=NOW).counts()["imported"] == 1
    assert one.refs._loose_names()
    logs = _log(cli, bulk.path)
    assert len({e["thread"] for e in logs if "thread" in e} or logs) > 0
    assert logs == _log(cli, one.path)
    assert bulk.refs.read_all() == one.refs.read_all()
    for name in one.refs.read_all():
        assert [(e.old, e.new, e.turn, e.message) for e in bulk.refs.read_log(name)] == \
               [(e.old, e.new, e.turn, e.message) for e in one.refs.read_log(name)]
    again = api.import_paths(bulk, [export], now_ms=NOW + 1)
    assert again.new_objects == 0 and again.counts()["deduplicated"] == 60
    assert _log(cli, bulk.path) == logs
    assert fsck(bulk).ok
    ok(cli("-C", str(bulk.path), "reindex"))  # the index built from the objects: the same answers
    assert _log(cli, bulk.path) == logs


def _packed_refs(names: list[str]) -> bytes:
    return (PACKED_HEADER + "".join(f"{i:064x} {n}\n" for i, n in enumerate(names))).encode()


def test_packed_refs_searched_often_answers_as_its_byte_search(monkeypatch):
    names = sorted(f"chatgpt/{uuid.UUID(int=random.Random(k).getrandbits(128))}" for k in range(4000))
    data = _packed_refs(names)
    assert len(data) > refformat.PACKED_SCAN_BYTES  # (searched, not parsed)
    probes = names[::37] + [n + "x" for n in names[::53]] + ["chatgpt", "a", "zzz", "chatgpt/0", names[-1] + "/b"]
    bytewise = open_packed_refs(data)
    monkeypatch.setattr(refformat, "_LINES_AFTER", 10**9)
    want = [(bytewise.get(n), n in bytewise, bytewise.has_under(n)) for n in probes]
    changes = {names[5]: None, names[6]: "f" * 64, "chatgpt/new": "e" * 64}
    want_changed = bytewise.with_changes(changes)
    monkeypatch.setattr(refformat, "_LINES_AFTER", 3)
    split = open_packed_refs(data)
    got = [(split.get(n), n in split, split.has_under(n)) for n in probes]
    assert split._lines  # (it did switch to its split lines)
    assert got == want
    assert split.with_changes(changes) == want_changed
    assert open_packed_refs(want_changed).refs == {**{n: f"{i:064x}" for i, n in enumerate(names) if n != names[5]},
                                                   names[6]: "f" * 64, "chatgpt/new": "e" * 64}
    # Out of order (not as convgit writes it): the lines are not used, the byte search answers.
    shuffled = names[:]
    shuffled[10], shuffled[3000] = shuffled[3000], shuffled[10]
    bad = open_packed_refs(_packed_refs(shuffled))
    for n in probes:
        bad.get(n) if n not in (shuffled[10], shuffled[3000]) else None
    assert bad._lines == ()
    monkeypatch.setattr(refformat, "_LINES_AFTER", 10**9)
    ref = open_packed_refs(_packed_refs(shuffled))
    assert [bad.get(n) for n in probes] == [ref.get(n) for n in probes]


def test_a_packed_logs_reader_keeping_few_chunks_reads_every_thread(monkeypatch):
    logs = [PackedLog(f"t/{k:05d}", (f"{k:064x} line\n" * (1 + k % 5)).encode()) for k in range(3000)]
    data = format_packed_logs(logs)
    monkeypatch.setattr(packedlogs, "CACHE_BYTES", 70 * 1024)  # about one chunk
    r = PackedLogsReader(lambda o, n: data[o:o + n], len(data))
    assert len(r.chunks) > 5
    order = list(range(3000))
    random.Random(3).shuffle(order)
    for k in order[:500]:
        assert r.get(logs[k].name) == logs[k]
    assert r._cached_bytes <= 70 * 1024 + packedlogs.CHUNK_BYTES
    assert r.get("t/99999") is None
    assert [e.name for e in r] == [e.name for e in logs]


@pytest.mark.parametrize("aliases_known", [False, True])
def test_per_message_turns_indexed_in_bulk_give_the_rebuilt_index(tmp_path, cli, aliases_known):
    rnd = random.Random(4)
    convs = [_chatgpt(rnd, i) for i in range(12)]
    export = tmp_path / "e.json"
    export.write_text(json.dumps(convs))
    repo = convgit.init(tmp_path / "s")
    if aliases_known:  # half of it first: the second import's turns meet indexed messages too
        half = tmp_path / "half.json"
        half.write_text(json.dumps(convs[:6]))
        api.import_paths(repo, [half], now_ms=NOW)
    api.import_paths(repo, [export], now_ms=NOW)
    db = repo.index.db
    q = ("SELECT t.id, t.thread, t.kind, t.input, t.output, t.started_at, t.model, t.meta_json, r.id, t.out_depth, "
         "t.span FROM turns t LEFT JOIN turns r ON r.rowid = t.record_rowid ORDER BY t.id")
    before = db.execute(q).fetchall()
    # From the objects, not the index: every turn the reflogs name and every per-message turn
    # they list has its row, with its output, time and record.
    want = {}
    for name in repo.refs.read_all():
        for e in repo.refs.read_log(name):
            t = graph.find_turn(repo.objects, e.turn)
            want[e.turn] = (t.output, t.started_at, None)
            for sid in (t.meta or {}).get("turns", []):
                sub = graph.find_turn(repo.objects, sid)
                want[sid] = (sub.output, sub.started_at, e.turn)
    assert len(want) > 2 * len(convs)
    assert {r[0]: (r[4], r[5], r[8]) for r in before} == want
    msgs = db.execute("SELECT m.id, t.id FROM messages m LEFT JOIN turns t ON t.rowid = m.turn_rowid ORDER BY m.id").fetchall()
    log = _log(cli, repo.path)
    ok(cli("-C", str(repo.path), "reindex"))
    repo2 = convgit.open_repo(repo.path)
    db2 = repo2.index.db
    assert db2.execute(q).fetchall() == before
    assert db2.execute("SELECT m.id, t.id FROM messages m LEFT JOIN turns t ON t.rowid = m.turn_rowid "
                       "ORDER BY m.id").fetchall() == msgs
    assert _log(cli, repo.path) == log


def test_a_turn_row_keeps_only_the_meta_the_index_queries(tmp_path, cli):
    """Schema 12: ``turns.meta_json`` holds only the keys the index's own queries read
    (``INDEXED_META``); the source's metadata of each imported message stays in its turn
    object, where `log --json` and a re-import still find what they need."""
    from convgit.index.turn_rows import INDEXED_META

    rnd = random.Random(12)
    export = tmp_path / "e.json"
    export.write_text(json.dumps([_chatgpt(rnd, i) for i in range(8)]))
    repo = convgit.init(tmp_path / "s")
    api.import_paths(repo, [export], now_ms=NOW)
    rows = repo.index.db.execute("SELECT id, kind, meta_json FROM turns").fetchall()
    kept = [json.loads(m) for _, _, m in rows if m is not None]
    assert kept and all(set(m) <= set(INDEXED_META) for m in kept)
    assert {m["branch"] for m in kept} >= {"main"}  # each import turn's branch: what a re-import reads
    # The per-message turns' own metadata (finish details, the model slug) is in their objects.
    richer = 0
    for tid, kind, _ in rows:
        t = graph.find_turn(repo.objects, tid)
        richer += bool(set(t.meta or {}) - set(INDEXED_META))
    assert richer > len(rows) // 2
    before = _log(cli, repo.path)
    again = api.import_paths(repo, [export], now_ms=NOW + 1)  # each conversation found by its branch rows
    assert again.counts().get("imported", 0) == 0
    assert _log(cli, repo.path) == before
