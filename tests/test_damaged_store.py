"""A store damaged by hand (an object file deleted or flipped): a re-sent history heals it,
reading commands fail with the right code and, under --json, one valid JSON document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import convgit
from helpers.cli import assert_error, cli, conv, dumps, env, ok, proj, run  # noqa: F401
from convgit import api, codec, graph
from convgit.gc import gc
from convgit.repository import Repository

FIVE = conv("m1", "m2", "m3", "m4", "m5")
SIX = conv("m1", "m2", "m3", "m4", "m5", "m6")


def _loose(store: Path, oid: str) -> Path:
    return store / "objects" / oid[:2] / oid[2:]


def _delete(store: Path, oid: str) -> bytes:
    f = _loose(store, oid)
    data = f.read_bytes()
    f.chmod(0o644)
    f.unlink()
    return data


def _flip_last_byte(store: Path, oid: str) -> None:
    f = _loose(store, oid)
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x01
    f.chmod(0o644)
    f.write_bytes(bytes(data))


def _rev(cli, rev: str) -> str:
    return ok(cli("rev-parse", rev)).out.strip()


# -- a re-sent history heals a hole ---------------------------------------------------------


@pytest.mark.parametrize("trusted", [False, True], ids=["stateless", "thread"])
def test_a_resent_history_writes_a_hand_deleted_message_again(cli, proj, trusted):
    store = proj / ".convgit"
    thread = ["--thread", "main"] if trusted else []
    first = json.loads(ok(cli("commit", "-", *thread, "--json", input=dumps(FIVE))).out)
    m3 = _rev(cli, f"{first['thread']}~2")
    data = _delete(store, m3)
    assert_error(cli("fsck", "--json"), "fsck_failed")

    r = json.loads(ok(cli("commit", "-", *thread, "--json", input=dumps(SIX))).out)

    assert _loose(store, m3).read_bytes() == data and codec.hash_bytes(data) == m3  # back, intact
    assert r["new_objects"] == 3  # m3, m6 and the turn: not acknowledged on a broken chain
    if trusted:
        assert r["action"] == "appended" and r["thread"] == "main" and r["appended_messages"] == 1
    rep = json.loads(ok(cli("fsck", "--json")).out)
    assert rep["status"] == "ok" and rep["errors"] == 0, rep
    log = json.loads(ok(cli("log", r["tip"], "--json")).out)
    assert [e["text"] for e in log] == ["m6", "m5", "m4", "m3", "m2", "m1"]
    assert len(json.loads(ok(cli("log", first["tip"], "--json")).out)) == 5  # the old tip reads again


def _threads(cli) -> dict[str, str]:
    return {t["name"]: t["tip"] for t in json.loads(ok(cli("threads", "--json")).out)}


def _fsck_ok(cli) -> None:
    rep = json.loads(ok(cli("fsck", "--json")).out)
    assert rep["status"] == "ok" and rep["errors"] == 0, rep


# Every position of the hole: m4 (index 3) and m5 (the thread's tip) are where the binary
# search over m1..m6 stops, so they need the thread found through the history it holds.
@pytest.mark.parametrize("hole", range(5), ids=[f"m{i + 1}" for i in range(5)])
def test_a_stateless_resend_over_a_hole_appends_to_the_thread_it_continues(cli, proj, hole):
    """The same outcome as without the hole (the thread moves on by one message), with the
    missing message written again and counted: not a new thread forked before the hole."""
    store = proj / ".convgit"
    first = json.loads(ok(cli("commit", "-", "--json", input=dumps(FIVE))).out)
    victim = _rev(cli, f"{first['thread']}~{4 - hole}")
    _delete(store, victim)

    r = json.loads(ok(cli("commit", "-", "--json", input=dumps(SIX))).out)

    assert (r["action"], r["thread"], r["deduplicated"]) == ("appended", first["thread"], False)
    assert (r["appended_messages"], r["new_messages"], r["new_objects"]) == (1, 2, 3)  # victim, m6, the turn
    assert r["forked_from"] is None
    assert _threads(cli) == {first["thread"]: r["tip"]}
    assert _loose(store, victim).exists()
    _fsck_ok(cli)
    log = json.loads(ok(cli("log", first["thread"], "--json")).out)
    assert [e["text"] for e in log] == ["m6", "m5", "m4", "m3", "m2", "m1"]


@pytest.mark.parametrize("trusted", [False, True], ids=["stateless", "thread"])
@pytest.mark.parametrize("payload,hole", [("whole", h) for h in range(5)] + [("prefix", h) for h in range(4)],
                         ids=[f"whole-m{h + 1}" for h in range(5)] + [f"prefix-m{h + 1}" for h in range(4)])
def test_a_resent_history_over_a_hole_is_deduplicated_and_heals_it(cli, proj, trusted, payload, hole):
    """Nothing moves (the history is the thread or a prefix of it, m1..m4), but the missing
    message is written again: one new object, one new message, no turn. A prefix ending above
    the hole does not make the trusted thread's history walk fail on the hole below it."""
    store = proj / ".convgit"
    thread = ["--thread", "main"] if trusted else []
    first = json.loads(ok(cli("commit", "-", *thread, "--json", input=dumps(FIVE))).out)
    victim = _rev(cli, f"{first['thread']}~{4 - hole}")
    _delete(store, victim)
    before = _threads(cli)
    sent = FIVE if payload == "whole" else FIVE[:4]

    r = json.loads(ok(cli("commit", "-", *thread, "--json", input=dumps(sent))).out)

    assert (r["action"], r["thread"], r["deduplicated"]) == ("deduplicated", first["thread"], True)
    assert (r["appended_messages"], r["new_messages"], r["new_objects"], r["turn"]) == (0, 1, 1, None)
    assert _threads(cli) == before
    assert _loose(store, victim).exists()
    _fsck_ok(cli)


@pytest.mark.parametrize("hole", [0, 2, 3, 4], ids=["m1", "m3", "m4", "m5"])
@pytest.mark.parametrize("batch", ["alone", "after_another"])
def test_commit_many_over_a_hole_appends_and_heals(tmp_path, batch, hole):
    """Bulk ingest makes the same decision and writes the hole again, also when an earlier
    payload of the batch is pending (its own prefix search then counts pending objects)."""
    repo = Repository.init(tmp_path / ".convgit")
    first = convgit.commit(repo, {"messages": FIVE})
    ids = _chain(repo, first.thread)
    _delete(repo.path, ids[hole])
    items = [{"messages": SIX}]
    if batch == "after_another":
        items.insert(0, {"messages": conv("other 1", "other 2")})
    r = convgit.commit_many(repo, items)[-1]
    assert (r.status, r.thread, r.appended_messages, r.new_messages, r.new_objects) == \
        ("appended", first.thread, 1, 2, 3)
    assert repo.objects.is_loose(ids[hole])
    assert graph.ancestry_ids(repo.objects, repo.refs.read(first.thread)) == ids + [r.tip]
    assert api.fsck(repo).ok
    repo.close()


def test_an_import_over_a_hole_heals_it_in_a_batch(tmp_path):
    """The importer's prefix search (shared with commit_many) stops at the hole too, also
    behind another conversation of the same file."""
    repo = Repository.init(tmp_path / ".convgit")

    def claude(uuid, texts):
        return {"uuid": uuid, "name": "Chat", "created_at": "2025-01-01T00:00:00Z", "chat_messages": [
            {"uuid": f"{uuid}-{i}", "sender": "human" if i % 2 == 0 else "assistant",
             "created_at": f"2025-01-01T00:00:0{i}Z", "text": t, "content": [{"type": "text", "text": t}]}
            for i, t in enumerate(texts)]}

    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps([claude("c-1", ["q", "a", "q2", "a2"])]))
    api.import_paths(repo, [str(v1)])
    (name,) = repo.refs.read_all()
    ids = _chain(repo, name)
    _delete(repo.path, ids[1])
    v2 = tmp_path / "v2.json"
    v2.write_text(json.dumps([claude("c-0", ["other"]), claude("c-1", ["q", "a", "q2", "a2", "q3"])]))
    rep = api.import_paths(repo, [str(v2)])
    assert [c.status for c in rep.conversations] == ["imported", "appended"]
    assert repo.objects.contains(ids[1])
    assert graph.ancestry_ids(repo.objects, repo.refs.read(name))[:4] == ids
    assert api.fsck(repo).ok
    repo.close()


def test_a_resend_reads_no_object_and_probes_each_id_at_most_once_more(tmp_path, monkeypatch):
    """The common path (nothing missing) of a batch: existence probes only, no object read,
    at most one probe per message on top of the binary search."""
    repo = Repository.init(tmp_path / ".convgit")
    hist = conv(*(f"m{i}" for i in range(200)))
    first = convgit.commit(repo, {"messages": hist})
    gc(repo)  # the old part packed, the recent part loose: both probes
    convgit.commit(repo, {"messages": hist + conv("n1", first="assistant")})

    def boom(oid):
        raise AssertionError("read")

    probes = []
    real_loose, real_contains = repo.objects.is_loose, repo.objects.contains
    monkeypatch.setattr(repo.objects, "read", boom)
    monkeypatch.setattr(repo.objects, "read_bytes", boom)
    monkeypatch.setattr(repo.objects, "is_loose", lambda o: probes.append(o) or real_loose(o))
    monkeypatch.setattr(repo.objects, "contains", lambda o: probes.append(o) or real_contains(o))
    more = hist + conv("n1", "n2", first="assistant")
    rs = convgit.commit_many(repo, [{"messages": conv("other")}, {"messages": more}])
    assert rs[-1].status == "appended" and rs[-1].thread == first.thread and rs[-1].new_messages == 1
    assert len(probes) <= len(more) + 2 * 10 + 10, len(probes)


def _chain(repo, thread: str) -> list[str]:
    return graph.ancestry_ids(repo.objects, repo.refs.read(thread))


@pytest.fixture
def mixed(tmp_path):
    """Thread t: m1..m3 in a pack, m4..m8 loose."""
    repo = Repository.init(tmp_path / ".convgit")
    convgit.commit(repo, {"messages": conv("m1", "m2", "m3")}, thread="t")
    gc(repo)
    convgit.commit(repo, {"messages": conv("m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8")}, thread="t")
    yield repo
    repo.close()


def test_longest_stored_prefix_stops_before_a_hole(mixed):
    ids = _chain(mixed, "t")
    assert [mixed.objects.is_loose(o) for o in ids] == [False] * 3 + [True] * 5
    new = ids + ["ab" * 32]
    assert graph.longest_stored_prefix(mixed.objects, new) == 8
    assert graph.longest_stored_prefix(mixed.objects, ids) == 8
    assert graph.longest_stored_prefix(mixed.objects, []) == 0
    _delete(mixed.path, ids[5])
    assert graph.longest_stored_prefix(mixed.objects, new) == 5
    assert graph.first_missing(mixed.objects, ids) == 5
    _delete(mixed.path, ids[3])
    assert graph.longest_stored_prefix(mixed.objects, new) == 3
    assert graph.first_missing(mixed.objects, ids, 3) == 3


def test_longest_stored_prefix_only_checks_existence(mixed, monkeypatch):
    """The common path (nothing missing) reads no object: existence checks only."""
    ids = _chain(mixed, "t")

    def boom(oid):
        raise AssertionError("read")

    monkeypatch.setattr(mixed.objects, "read", boom)
    monkeypatch.setattr(mixed.objects, "read_bytes", boom)
    assert graph.longest_stored_prefix(mixed.objects, ids + ["cd" * 32]) == 8


def test_first_missing_sees_an_object_packed_after_the_pack_list_was_loaded(mixed):
    """gc may pack loose objects meanwhile: an id in neither probe is asked of the store."""
    ids = _chain(mixed, "t")
    mixed.objects.packs()  # loaded before gc runs
    other = Repository.open(mixed.path)
    gc(other)
    other.close()
    assert not any(mixed.objects.is_loose(o) for o in ids)
    assert graph.first_missing(mixed.objects, ids) == len(ids)


def test_first_missing_walks_a_chain_spread_over_many_packs_in_about_one_probe_per_id(tmp_path, monkeypatch):
    """A server's committer writes a pack per batch, so a long conversation's messages sit
    two by two in many packs. The hole check probes the packs oldest first, from where the
    previous id was: about one probe per id plus one per pack, not one per id and pack."""
    from convgit.pack import Pack

    repo = Repository.init(tmp_path / ".convgit")
    (repo.path / "config.toml").write_text("[core]\nfsync = false\n")
    repo.close()
    repo = Repository.open(tmp_path / ".convgit")
    r = convgit.commit(repo, {"messages": conv(*[f"turn {i}" for i in range(80)])})
    ids = _chain(repo, r.thread)
    data = {o: _delete(repo.path, o) for o in ids}  # (loose copies would make write_packed skip them)
    for k in range(0, 80, 2):  # 40 packs of 2 messages each, written in the chain's order
        repo.objects.write_packed([(o, data[o]) for o in ids[k:k + 2]])
        graph.first_missing(repo.objects, ["00" * 32])  # as each batch's decisions look (new packs seen in order)
    assert len(repo.objects.packs()) == 40 and not any(repo.objects.is_loose(o) for o in ids)
    calls = []
    real = Pack.contains
    monkeypatch.setattr(Pack, "contains", lambda self, oid: calls.append(oid) or real(self, oid))
    assert graph.first_missing(repo.objects, ids) == 80
    assert len(calls) <= len(ids) + 2 * 40, len(calls)  # (the old way: ~20 per id here, 1,600+)
    calls.clear()
    assert graph.first_missing(repo.objects, ids[::-1]) == 80  # any order is still answered right
    assert len(calls) > len(ids) + 2 * 40  # (only slower: the order is what makes it cheap)
    repo.close()
    again = Repository.open(tmp_path / ".convgit")  # a new process: the packs by file time
    assert graph.first_missing(again.objects, ids) == 80
    again.close()


# -- log --json on a damaged history: one valid JSON document, streamed -----------------------


def _two_threads(cli) -> tuple[str, str]:
    ok(cli("commit", "-", "--thread", "a", input=dumps(conv("a1", "a2", "a3", "a4"))))
    ok(cli("commit", "-", "--thread", "b", input=dumps(conv("b1", "b2"))))
    return _rev(cli, "a~2"), _rev(cli, "a")


def _error_last(r, code: str) -> tuple[list, dict]:
    """stdout is one valid JSON array (or the -u object) whose last element is the error
    document; the exit code is the error's; stderr says so too."""
    from helpers.cli import ERRORS

    assert r.rc == ERRORS[code].exit_code and "Traceback" not in r.err, r
    doc = json.loads(r.out)
    rows = doc["entries"] if isinstance(doc, dict) else doc
    err = rows[-1]
    assert err["status"] == "error" and err["error_code"] == code and err["error_message"], r
    assert f"[{code}]" in r.err
    return rows[:-1], err


@pytest.mark.parametrize("damage,code", [("missing", "object_missing"), ("corrupt", "object_corrupt")])
@pytest.mark.parametrize("args", [["log", "a"], ["log", "--all"], ["log", "a", "--usage"], ["log", "--all", "-n", "1"],
                                  ["log", "a", "--reverse"]],
                         ids=["thread", "all", "usage", "all-n1", "reverse"])
def test_log_json_that_meets_damage_mid_walk_ends_the_array_with_the_error(cli, proj, args, damage, code):
    victim, tip = _two_threads(cli)
    store = proj / ".convgit"
    _delete(store, victim) if damage == "missing" else _flip_last_byte(store, victim)
    r = cli(*args, "--json")
    if args[-2:] == ["-n", "1"]:  # the walk stops before the damage
        assert [e["text"] for e in json.loads(ok(r).out)] == ["a4"]
        return
    if "--reverse" in args:  # nothing can be printed before the whole walk: the error alone
        doc = assert_error(r, code)
        assert json.loads(r.out) == doc and doc["details"]["oid"] == victim
    else:
        rows, err = _error_last(r, code)
        texts = [e["text"] for e in rows]  # what was read before the damage, then the error
        assert texts[0] == "a4" and "a2" not in texts and err["details"]["oid"] == victim
        if "--usage" in args:
            assert "usage" in json.loads(r.out)
    r = cli(*args)  # the human form streams what it could read, then the error on stderr
    assert r.rc != 0 and "Traceback" not in r.err and f"[{code}]" in r.err


def test_log_json_on_a_sound_history_is_unchanged(cli, proj):
    _two_threads(cli)
    out = ok(cli("log", "--all", "--json")).out
    assert [e["text"] for e in json.loads(out)] == ["a4", "a3", "a2", "a1", "b2", "b1"]
    assert out.startswith("[\n  {") and out.endswith("}\n]\n")


def test_log_json_error_at_the_start_is_the_error_document_alone(cli, proj):
    victim, tip = _two_threads(cli)
    _delete(proj / ".convgit", tip)
    r = cli("log", "a", "--json")
    doc = assert_error(r, "object_missing")
    assert json.loads(r.out) == doc


def test_log_json_streams_in_a_real_process(run, cli, proj):
    """The first rows reach the reader before the walk ends: a reader that reads two lines
    and goes away still got valid rows, and a damaged walk ends the array validly."""
    import subprocess

    from helpers.cli import PY, cli_env

    for i in range(40):
        ok(cli("commit", "-", "--thread", f"t{i:03d}", input=dumps(conv(f"q{i}", f"a{i}"))))
    p = subprocess.Popen([PY, "-m", "convgit", "log", "--all", "--json"], cwd=proj, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=cli_env(proj.parent.parent / "u2"))
    first = p.stdout.readline() + p.stdout.readline()
    assert first.startswith(b"[\n  {") and b'"text"' in first
    p.stdout.close()
    assert p.wait(timeout=60) == 0 and b"Traceback" not in p.stderr.read()  # a reader that left is no error
    victim, _ = _two_threads(cli)
    _flip_last_byte(proj / ".convgit", victim)
    r = run("log", "--all", "--json")
    rows, err = _error_last(r, "object_corrupt")
    assert err["details"]["oid"] == victim and rows[0]["text"] == "a4"


# -- show with a missing tip -----------------------------------------------------------------


@pytest.mark.parametrize("json_", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("rev", ["a", "HEAD", "a~1"])
def test_show_of_a_missing_object_is_object_missing(cli, proj, rev, json_):
    ok(cli("commit", "-", "--thread", "a", input=dumps(conv("a1", "a2", "a3"))))
    ok(cli("switch", "a"))
    victim = _rev(cli, rev)
    _delete(proj / ".convgit", victim)
    r = cli("show", rev, *(["--json"] if json_ else []))
    doc = assert_error(r, "object_missing")
    if json_:
        assert doc["details"]["oid"] == victim and victim in doc["error_message"]
    else:
        assert victim in r.err


def test_show_of_an_unknown_id_is_still_not_found(cli, proj):
    ok(cli("commit", "-", "--thread", "a", input=dumps(conv("a1"))))
    assert_error(cli("show", "ab" * 32, "--json"), "not_found")
    assert_error(cli("show", "nope"), "not_found")
