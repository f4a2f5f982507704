"""Threads as refs (DESIGN §4): names, compare-and-swap, concurrency, reflog, rename, delete, HEAD."""

from __future__ import annotations

import multiprocessing
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import convgit
from convgit import errors
from convgit.objects import Blob, Message, TextPart
from convgit.repository import Repository

from helpers.store import NOW, conv, object_ids, tree_state


def commit(repo, data, **kw):
    kw.setdefault("now_ms", NOW)
    return convgit.commit(repo, data, **kw)


@pytest.fixture
def tips(repo):
    """Two unrelated stored conversations: (tip of the first, tip of the second)."""
    a = commit(repo, {"messages": conv("first", "one")}, thread="seed-a")
    b = commit(repo, {"messages": conv("second", "two")}, thread="seed-b")
    return a.tip, b.tip


# -- thread names ---------------------------------------------------------------------------

BAD_NAMES = [
    "",
    ".",
    "..",
    "a/../b",
    "../escape",
    "a/..",
    "/abs",
    "/etc/passwd",
    "x.lock",
    "a/x.lock",
    "x.lock/b",
    ".hidden",
    "a/.hidden",
    "a//b",
    "a/",
    "a.",
    "a/b.",
    "tab\there",
    "new\nline",
    "nul\x00byte",
    "del\x7f",
    "esc\x1b[31m",
    "a~1",
    "a^",
    "a:b",
    "what?",
    "star*",
    "br[acket",
    "back\\slash",
    "with space",
    "a@{1}",
    "@{-1}",
    "@",
    "x" * 256,
    "é" * 128,  # 256 bytes in UTF-8
    "a/" * 127 + "bc",  # 256 bytes: 255 would be fine
    "x" * 201,  # one path component over 200 bytes: with ".lock" or a temp suffix, over NAME_MAX
    "a/" + "é" * 101,
    "tmp_scratch",  # temp-file prefix: such files are skipped when listing refs, and gc removes them
    "a/tmp_b",
    "\ud800",
    "ok\udfffno",
    "-x",
    "--help",
    "HEAD",
]

GOOD_NAMES = [
    "main",
    "a/b/c",
    "feature/x-1",
    "日本語",
    "emoji-🎉",
    "v1.2",
    "a@b",
    "x.locked",
    "HEADS",
    "a.b/c.d",
    "x" * 200,
    "é" * 100,
    "y" * 200 + "/" + "z" * 54,  # 255 bytes
    "a/" * 126 + "bcd",  # 255 bytes, deep
    "tmp",
    "tmp-x",
    "x/tmp",
    "_",
    "a-",
    "0123abcd",  # looks like an id prefix: allowed, the thread wins in rev-parse
]


def test_the_name_corpora_are_what_they_claim():
    assert len(BAD_NAMES) >= 20 and len(set(BAD_NAMES)) == len(BAD_NAMES)
    assert len(("a/" * 127 + "bc").encode()) == 256
    assert len(("y" * 200 + "/" + "z" * 54).encode()) == len(("a/" * 126 + "bcd").encode()) == 255
    from convgit import fsio, ids

    assert ids.RESERVED_PREFIX == fsio.TMP_PREFIX


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n)[:40] for n in BAD_NAMES])
def test_bad_thread_names_are_rejected_everywhere_and_write_nothing(repo, tips, name):
    before = tree_state(repo)
    head = repo.refs.read_head()
    attempts = [
        lambda: repo.refs.update(name, tips[0], expected=None, exists=repo.objects.contains),
        lambda: repo.refs.update(name, None),
        lambda: repo.refs.read(name),
        lambda: repo.refs.read_log(name),
        lambda: repo.refs.write_head(name),
        lambda: commit(repo, {"messages": conv("brand new")}, thread=name),
        lambda: commit(repo, {"messages": conv("first", "one")}, thread=name),
        lambda: convgit.fork(repo, "seed-a", name),
        lambda: convgit.rename_thread(repo, "seed-a", name),
        lambda: convgit.switch(repo, name),
        lambda: convgit.api.update_ref(repo, name, tips[0]),
    ]
    for attempt in attempts:
        with pytest.raises(errors.InvalidRefName) as e:
            attempt()
        assert e.value.code == "invalid_ref_name"
    assert tree_state(repo) == before
    assert repo.refs.read_head() == head
    assert set(repo.refs.read_all()) == {"seed-a", "seed-b"}


@pytest.mark.parametrize("bad", [None, b"main", 1, ["main"]])
def test_non_string_thread_names_are_rejected(repo, bad):
    with pytest.raises(errors.InvalidRefName):
        repo.refs.read(bad)


@pytest.mark.parametrize("name", GOOD_NAMES, ids=[repr(n)[:40] for n in GOOD_NAMES])
def test_good_thread_names_work_end_to_end(repo, name):
    r = commit(repo, {"messages": conv("hello")}, thread=name)
    assert r.thread == name
    assert repo.refs.read(name) == r.tip
    assert (repo.path / "refs" / "threads" / name).read_bytes() == f"{r.tip}\n".encode()
    assert repo.refs.read_all() == {name: r.tip}
    assert convgit.rev_parse(repo, name) == r.tip
    assert [t["name"] for t in convgit.threads(repo)] == [name]
    with Repository.open(repo.path) as again:
        assert again.refs.read_all() == {name: r.tip}


def test_a_thread_name_that_looks_like_an_id_prefix_wins_over_the_id(repo):
    r = commit(repo, {"messages": conv("x")})
    prefix = r.tip[:8]
    other = commit(repo, {"messages": conv("y")}, thread=prefix)
    assert convgit.rev_parse(repo, prefix) == other.tip
    assert convgit.rev_parse(repo, r.tip[:9]) == r.tip


# -- compare-and-swap -----------------------------------------------------------------------


def _log_len(repo, name):
    return len(repo.refs.read_log(name))


def test_cas_create_absent(repo, tips):
    assert repo.refs.update("n", tips[0], expected=None, exists=repo.objects.contains) is None
    assert repo.refs.read("n") == tips[0]
    [entry] = repo.refs.read_log("n")
    assert (entry.old, entry.new) == (None, tips[0])


def test_cas_create_existing_is_ref_exists(repo, tips):
    repo.refs.update("n", tips[0], expected=None)
    with pytest.raises(errors.RefExists) as e:
        repo.refs.update("n", tips[1], expected=None)
    assert e.value.code == "ref_exists"
    assert repo.refs.read("n") == tips[0]
    assert _log_len(repo, "n") == 1


def test_cas_wrong_expected_is_stale_and_leaves_the_ref(repo, tips):
    repo.refs.update("n", tips[0], expected=None)
    before = tree_state(repo)
    with pytest.raises(errors.RefStale) as e:
        repo.refs.update("n", tips[1], expected=tips[1])
    assert e.value.code == "ref_stale"
    assert e.value.details["tip"] == tips[0]
    assert repo.refs.read("n") == tips[0]
    assert tree_state(repo) == before


def test_cas_expected_value_on_a_missing_ref_is_not_found(repo, tips):
    with pytest.raises(errors.NotFound):
        repo.refs.update("absent", tips[0], expected=tips[1])
    assert repo.refs.read("absent") is None


@pytest.mark.parametrize("expected", ["any", None, "some-id"])
def test_cas_delete_missing_is_not_found(repo, tips, expected):
    kw = {} if expected == "any" else {"expected": tips[0] if expected else None}
    before = tree_state(repo)
    with pytest.raises(errors.NotFound) as e:
        repo.refs.update("absent", None, **kw)
    assert e.value.code == "not_found"
    assert tree_state(repo) == before


@pytest.mark.parametrize("new", ["ab" * 32, "0" * 64, "not-an-id", "AB" * 32, "ab" * 31])
def test_cas_to_a_missing_object_is_object_missing(repo, tips, new):
    repo.refs.update("n", tips[0], expected=None)
    before = tree_state(repo)
    for name, expected in (("n", tips[0]), ("fresh", None)):
        with pytest.raises(errors.ObjectMissing) as e:
            repo.refs.update(name, new, expected=expected, exists=repo.objects.contains)
        assert e.value.code == "object_missing"
    assert repo.refs.read("n") == tips[0] and repo.refs.read("fresh") is None
    assert tree_state(repo) == before


def test_cas_same_value_is_a_noop(repo, tips):
    repo.refs.update("n", tips[0], expected=None)
    before = tree_state(repo)
    assert repo.refs.update("n", tips[0], expected=tips[0], exists=repo.objects.contains) == tips[0]
    assert repo.refs.update("n", tips[0]) == tips[0]
    assert tree_state(repo) == before
    assert _log_len(repo, "n") == 1


def test_cas_move_and_delete(repo, tips):
    repo.refs.update("n", tips[0], expected=None)
    assert repo.refs.update("n", tips[1], expected=tips[0], message="move") == tips[0]
    assert repo.refs.read("n") == tips[1]
    assert repo.refs.update("n", None, expected=tips[1]) == tips[1]
    assert repo.refs.read("n") is None
    assert "n" not in repo.refs.read_all()
    assert not (repo.path / "refs" / "threads" / "n").exists()


def test_api_update_ref_plumbing(repo, tips):
    out = convgit.api.update_ref(repo, "p", tips[0], create=True)
    assert out == {"status": "updated", "thread": "p", "old": None, "new": tips[0]}
    with pytest.raises(errors.RefExists):
        convgit.api.update_ref(repo, "p", tips[1], create=True)
    with pytest.raises(errors.RefStale):
        convgit.api.update_ref(repo, "p", tips[1], tips[1])
    convgit.api.update_ref(repo, "p", tips[1], tips[0])
    assert [t["tip"] for t in convgit.threads(repo) if t["name"] == "p"] == [tips[1]]
    with pytest.raises(errors.NotFound):
        convgit.api.update_ref(repo, "p", "cd" * 32)
    assert repo.refs.read("p") == tips[1]


def test_a_thread_cannot_be_both_a_file_and_a_directory(repo, tips):
    repo.refs.update("a", tips[0], expected=None)
    with pytest.raises(errors.RefExists):
        repo.refs.update("a/b", tips[0], expected=None)
    repo.refs.update("x/y", tips[0], expected=None)
    with pytest.raises(errors.RefExists):
        repo.refs.update("x", tips[0], expected=None)
    before = tree_state(repo)
    for name in ("a/b", "x"):
        with pytest.raises(errors.RefExists) as e:
            commit(repo, {"messages": conv("brand new question")}, thread=name)
        assert "conflicts" in e.value.message
    assert tree_state(repo) == before  # refused before anything was written
    assert set(repo.refs.read_all()) == {"seed-a", "seed-b", "a", "x/y"}


def test_an_upstream_thread_name_taken_by_a_directory_falls_back_to_another_name(repo, tips):
    repo.refs.update("src", tips[0], expected=None)
    r = commit(repo, {"messages": conv("imported"), "source": "src", "upstream_thread_id": "u1"})
    assert r.status == "created" and r.thread != "src/u1"
    again = commit(repo, {"messages": conv("imported", "more"), "source": "src", "upstream_thread_id": "u1"})
    assert again.status == "appended" and again.thread == r.thread


def test_a_deleted_or_renamed_nested_thread_frees_its_directory_name(repo, tips):
    repo.refs.update("x/y", tips[0], expected=None)
    convgit.delete_thread(repo, "x/y")
    repo.refs.update("x", tips[1], expected=None)
    assert repo.refs.read("x") == tips[1]
    convgit.rename_thread(repo, "x", "p/q")
    convgit.rename_thread(repo, "p/q", "r")
    repo.refs.update("p", tips[1], expected=None)
    assert repo.refs.read("p") == repo.refs.read("r") == tips[1]
    # a failed delete of a nested name leaves no directory behind either
    with pytest.raises(errors.NotFound):
        convgit.delete_thread(repo, "m/n")
    repo.refs.update("m", tips[0], expected=None)
    assert set(repo.refs.read_all()) == {"seed-a", "seed-b", "p", "r", "m"}


# -- concurrency ----------------------------------------------------------------------------

_CTX = multiprocessing.get_context("fork")


def _cas_worker(path, new, old, barrier, queue):
    try:
        repo = Repository.open(path)
        barrier.wait(timeout=60)
        repo.refs.update("race", new, expected=old, exists=repo.objects.contains, message="race")
        queue.put(("won", new))
    except errors.RefStale as e:
        queue.put(("stale", e.details["tip"]))
    except BaseException as e:  # report, never hang the parent
        queue.put(("error", repr(e)))


def _run_all(target, argss, timeout=120):
    queue = _CTX.Queue()
    barrier = _CTX.Barrier(len(argss))
    procs = [_CTX.Process(target=target, args=(*args, barrier, queue)) for args in argss]
    for p in procs:
        p.start()
    results = [queue.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(timeout=timeout)
        assert p.exitcode == 0
    return results


def test_100_concurrent_cas_from_the_same_tip_have_exactly_one_winner(repo):
    old = commit(repo, {"messages": conv("race start")}, thread="race").tip
    news = [Message(parent=old, role="assistant", parts=(TextPart(text=f"candidate {i}"),)) for i in range(100)]
    ids = [repo.objects.write(m)[0] for m in news]
    results = _run_all(_cas_worker, [(repo.path, oid, old) for oid in ids])
    won = [r for r in results if r[0] == "won"]
    stale = [r for r in results if r[0] == "stale"]
    assert [r for r in results if r[0] == "error"] == []
    assert len(won) == 1 and len(stale) == 99
    winner = won[0][1]
    assert all(tip == winner for _, tip in stale)
    assert repo.refs.read("race") == winner
    log = repo.refs.read_log("race")
    assert [(e.old, e.new) for e in log] == [(None, old), (old, winner)]
    threads_dir = repo.path / "refs" / "threads"
    assert [p.name for p in threads_dir.iterdir() if not p.name.endswith(".lock")] == ["race"]


def _write_worker(path, items, barrier, queue):
    try:
        repo = Repository.open(path)
        barrier.wait(timeout=60)
        queue.put(("ok", repo.objects.write_many(items)))
    except BaseException as e:
        queue.put(("error", repr(e)))


def test_8_processes_writing_the_same_200_objects_store_each_once(repo):
    from convgit import codec

    items = [codec.encode_and_hash(Blob(data=f"object {i} ".encode() * (i + 1))) for i in range(200)]
    results = _run_all(_write_worker, [(repo.path, items)] * 8)
    assert [r for r in results if r[0] == "error"] == []
    # every object was created at least once; a same-content rename over another is harmless
    assert sum(n for _, n in results) >= 200
    objdir = repo.path / "objects"
    files = [p for p in objdir.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.startswith("tmp_")]
    # a batch this size is written as a pack (one per writer): every object readable, intact
    assert set(repo.objects.iter_oids()) == {oid for oid, _ in items}
    for oid, data in items:
        assert repo.objects.read_bytes(oid) == data
    for f in files:
        if f.parent.name == "pack":
            continue  # loose objects are read-only; packs are replaced, never edited
        assert stat.S_IMODE(f.stat().st_mode) == 0o444
        assert f.stat().st_nlink == 1
    # and they read back through a store that did not write them
    with Repository.open(repo.path) as again:
        assert all(again.objects.read_bytes(oid) == data for oid, data in items)


def test_writing_an_existing_object_refreshes_its_mtime(repo):
    oid, _ = repo.objects.write(Blob(data=b"keep me"))
    f = repo.path / "objects" / oid[:2] / oid[2:]
    os.utime(f, (1_000_000, 1_000_000))
    oid2, created = repo.objects.write(Blob(data=b"keep me"))
    assert oid2 == oid and not created
    assert f.stat().st_mtime > 1_000_000


def test_storing_bytes_under_the_wrong_id_is_refused(repo):
    from convgit import codec

    oid, data = codec.encode_and_hash(Blob(data=b"x"))
    with pytest.raises(errors.ObjectCorrupt):
        repo.objects.write_raw("ab" * 32, data)
    assert object_ids(repo) == set()


# -- reflog ---------------------------------------------------------------------------------


def test_the_reflog_has_one_line_per_move(repo):
    h = conv("q1", "a1", "q2", "a2", "q3", "a3")
    r1 = commit(repo, {"messages": h[:2]}, thread="t")
    r2 = commit(repo, {"messages": h[:4]}, thread="t", now_ms=NOW + 1)
    commit(repo, {"messages": h[:4]}, thread="t", now_ms=NOW + 2)  # exact re-ingest: no line
    commit(repo, {"messages": h[:2]})  # ancestor: no line
    r3 = commit(repo, {"messages": h}, now_ms=NOW + 3)  # stateless continuation
    convgit.fork(repo, "t~2", "f", now_ms=NOW + 4)  # the fork's own reflog, not t's
    log = repo.refs.read_log("t")
    assert [(e.old, e.new) for e in log] == [(None, r1.tip), (r1.tip, r2.tip), (r2.tip, r3.tip)]
    assert [e.time_ms for e in log] == [NOW, NOW + 1, NOW + 3]
    assert [e.turn for e in log] == [r1.turn, r2.turn, r3.turn]
    for e in log:
        turn = repo.objects.read(e.turn)
        assert (turn.thread, turn.input, turn.output) == ("t", e.old, e.new)
    raw = (repo.path / "logs" / "refs" / "threads" / "t").read_text().splitlines()
    assert len(raw) == 3
    old, new, ms, turn = raw[0].split("\t")[0].split(" ")
    assert (old, new, ms, turn) == ("0" * 64, r1.tip, str(NOW), r1.turn)
    [fork_entry] = repo.refs.read_log("f")
    assert (fork_entry.old, fork_entry.new) == (None, r2.tip)


def test_reflog_messages_are_one_line(repo, tips):
    repo.refs.update("n", tips[0], expected=None, message="multi\nline\tmessage\r\nhere")
    [e] = repo.refs.read_log("n")
    assert e.message == "multi line message here"
    assert len((repo.path / "logs" / "refs" / "threads" / "n").read_text().splitlines()) == 1


# -- rename and delete ----------------------------------------------------------------------


def test_rename_moves_ref_reflog_and_head(repo):
    r = commit(repo, {"messages": conv("q", "a")}, thread="old")
    commit(repo, {"messages": conv("q", "a", "q2")}, thread="old")
    convgit.switch(repo, "old")
    out = convgit.rename_thread(repo, "old", "new/name")
    assert out["status"] == "renamed" and out["tip"] == repo.refs.read("new/name")
    assert repo.refs.read("old") is None
    assert repo.refs.read_head() == "new/name"
    assert repo.refs.read_log("old") == []
    log = repo.refs.read_log("new/name")
    assert len(log) == 3 and log[0].new == r.tip
    assert log[-1].old == log[-1].new and "rename" in log[-1].message
    assert [t["name"] for t in convgit.threads(repo)] == ["new/name"]
    assert convgit.threads(repo)[0]["current"] is True
    assert convgit.rev_parse(repo, "HEAD") == out["tip"]


def test_rename_errors_change_nothing(repo, tips):
    before = tree_state(repo)
    with pytest.raises(errors.RefExists):
        convgit.rename_thread(repo, "seed-a", "seed-b")
    with pytest.raises(errors.NotFound):
        convgit.rename_thread(repo, "absent", "other")
    with pytest.raises(errors.RefExists):
        convgit.rename_thread(repo, "seed-a", "seed-a/child")
    assert repo.refs.read_all() == {"seed-a": tips[0], "seed-b": tips[1]}
    assert tree_state(repo) == before


def test_rename_does_not_move_head_of_another_thread(repo, tips):
    convgit.switch(repo, "seed-b")
    convgit.rename_thread(repo, "seed-a", "renamed")
    assert repo.refs.read_head() == "seed-b"


def test_delete_removes_the_thread_but_keeps_objects_and_an_archived_reflog(repo, tips):
    ids = object_ids(repo)
    out = convgit.delete_thread(repo, "seed-a")
    assert out == {"status": "deleted", "thread": "seed-a", "tip": tips[0], "broken": None,
                   "head": repo.refs.read_head(), "head_moved": False}
    assert repo.refs.read("seed-a") is None
    assert [t["name"] for t in convgit.threads(repo)] == ["seed-b"]
    assert object_ids(repo) == ids
    assert repo.refs.read_log("seed-a") == []
    archived = [name for name, _ in repo.refs.iter_log_files() if name is None]
    assert len(archived) == 1
    with pytest.raises(errors.NotFound):
        convgit.delete_thread(repo, "seed-a")
    with pytest.raises(errors.NotFound):
        convgit.rev_parse(repo, "seed-a")
    # the name can be used again, with a fresh reflog
    again = commit(repo, {"messages": conv("first", "one")}, thread="seed-a")
    assert again.status == "created" and again.tip == tips[0]
    assert len(repo.refs.read_log("seed-a")) == 1


# -- HEAD -----------------------------------------------------------------------------------


def test_head_of_a_new_store_names_main_before_it_exists(repo):
    assert (repo.path / "HEAD").read_text() == "ref: refs/threads/main\n"
    assert repo.refs.read_head() == "main"
    with pytest.raises(errors.NotFound):
        convgit.rev_parse(repo, "HEAD")
    r = commit(repo, {"messages": conv("hi")}, thread="main")
    assert convgit.rev_parse(repo, "HEAD") == convgit.rev_parse(repo, "@") == r.tip
    assert [t["current"] for t in convgit.threads(repo)] == [True]


def test_switch_moves_head(repo, tips):
    out = convgit.switch(repo, "seed-b")
    assert out == {"status": "switched", "thread": "seed-b", "tip": tips[1]}
    assert (repo.path / "HEAD").read_text() == "ref: refs/threads/seed-b\n"
    assert convgit.rev_parse(repo, "HEAD") == tips[1]
    assert convgit.rev_parse(repo, "HEAD~1") == repo.objects.read(tips[1]).parent
    assert {t["name"]: t["current"] for t in convgit.threads(repo)} == {"seed-a": False, "seed-b": True}
    with pytest.raises(errors.NotFound):
        convgit.switch(repo, "absent")
    assert repo.refs.read_head() == "seed-b"


def test_head_naming_a_deleted_thread(repo, tips):
    convgit.switch(repo, "seed-a")
    convgit.delete_thread(repo, "seed-b")
    out = convgit.delete_thread(repo, "seed-a")  # the current thread, and no thread left to move HEAD to
    assert out["head"] == "seed-a" and not out["head_moved"]
    assert repo.refs.read_head() == "seed-a"
    with pytest.raises(errors.NotFound):
        convgit.log(repo)


def test_a_corrupt_head_is_reported(repo):
    (repo.path / "HEAD").write_text("garbage\n")
    with pytest.raises(errors.ObjectCorrupt):
        repo.refs.read_head()


def test_a_corrupt_ref_file_is_reported(repo, tips):
    (repo.path / "refs" / "threads" / "seed-a").write_text("not an id\n")
    with pytest.raises(errors.ObjectCorrupt):
        repo.refs.read("seed-a")
    assert repo.refs.read("seed-b") == tips[1]


def test_a_thread_deleted_twice_in_one_millisecond_keeps_both_archived_reflogs(repo, tips, monkeypatch):
    """Its archive is named by the time: the second one takes the next free millisecond
    rather than replacing the first (whose turns would be lost to gc)."""
    import time as time_mod

    a, b = tips
    monkeypatch.setattr(time_mod, "time", lambda: 1_796_000_000.0)
    repo.refs.update("twice", a, expected=None, message="one")
    repo.refs.update("twice", None, expected=a, message="delete")
    repo.refs.update("twice", b, expected=None, message="two")
    repo.refs.update("twice", None, expected=b, message="delete")
    from convgit.refformat import read_log_file

    files = sorted(repo.refs.deleted_logs_dir.glob("twice.*"))
    assert [p.name for p in files] == ["twice.1796000000000", "twice.1796000000001"]
    assert [[e.message for e in read_log_file(p)] for p in files] == [["one", "delete"], ["two", "delete"]]


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_a_thread_name_holds_a_control_character_exactly_when_a_code_point_is_below_0x20_or_0x7f(name):
    """The control-character rule (one regex scan since session 9) is the rule it replaced."""
    from convgit.ids import _why_bad

    control = any(ord(c) < 0x20 or ord(c) == 0x7F for c in name)
    why = _why_bad(name)
    if control:
        assert why in ("contains a control character", "not valid UTF-8") or why.startswith("longer than"), why
    else:
        assert why != "contains a control character"
