"""Packed refs (docs/format.md §4.1, §6.4): gc moves every loose ref into ``packed-refs``;
readers see a loose ref first, then the packed one; every operation on a packed ref behaves
exactly as on a loose one; a kill at every step of the packing leaves every ref at its value;
an older store (no ``packed-refs``) opens unchanged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import convgit
from convgit import errors
from convgit.fsck import fsck
from convgit.gc import gc
from convgit.refs import PACKED_HEADER, PACKED_REFS, parse_packed_refs
from convgit.repository import Repository

from helpers.cli import cli, env, proj  # noqa: F401  (fixtures)
from helpers.store import NOW, conv

from test_refs import (  # noqa: F401  (re-run here with every ref packed: the `tips` fixture below)
    test_cas_create_absent, test_cas_create_existing_is_ref_exists, test_cas_delete_missing_is_not_found,
    test_cas_expected_value_on_a_missing_ref_is_not_found, test_cas_move_and_delete, test_cas_same_value_is_a_noop,
    test_cas_to_a_missing_object_is_object_missing, test_cas_wrong_expected_is_stale_and_leaves_the_ref,
    test_api_update_ref_plumbing, test_a_thread_cannot_be_both_a_file_and_a_directory,
    test_a_deleted_or_renamed_nested_thread_frees_its_directory_name, test_rename_errors_change_nothing,
    test_rename_does_not_move_head_of_another_thread,
    test_delete_removes_the_thread_but_keeps_objects_and_an_archived_reflog, test_head_naming_a_deleted_thread,
    test_switch_moves_head, test_a_corrupt_ref_file_is_reported,
)

PY = sys.executable


def commit(repo, data, **kw):
    kw.setdefault("now_ms", NOW)
    return convgit.commit(repo, data, **kw)


def loose_refs(repo) -> list[str]:
    return sorted(str(p.relative_to(repo.refs.threads_dir)) for p in repo.refs.threads_dir.rglob("*") if p.is_file())


@pytest.fixture
def tips(repo):
    """test_refs' two conversations, with every ref packed (and no loose ref file left)."""
    a, b = _tips(repo)
    repo.refs.pack_refs()
    assert loose_refs(repo) == [] and set(repo.refs.packed().refs) == {"seed-a", "seed-b"}
    return a, b


def _tips(repo):  # as test_refs.tips
    a = commit(repo, {"messages": conv("first", "one")}, thread="seed-a")
    b = commit(repo, {"messages": conv("second", "two")}, thread="seed-b")
    return a.tip, b.tip


# -- the file and the precedence ----------------------------------------------------------------


def test_gc_packs_every_loose_ref_into_one_sorted_file(repo):
    tips = {n: commit(repo, {"messages": conv(f"in {n}")}, thread=n).tip for n in ("b", "a", "x/y", "x/z/w")}
    stats = gc(repo)
    assert stats.refs_packed == 4 and stats.to_json()["refs_packed"] == 4
    assert loose_refs(repo) == []
    assert not any(repo.refs.threads_dir.iterdir())  # nested directories pruned too
    data = (repo.path / PACKED_REFS).read_text()
    assert data == PACKED_HEADER + "".join(f"{tips[n]} {n}\n" for n in sorted(tips))
    assert repo.refs.read_all() == dict(sorted(tips.items()))
    assert list(repo.refs.iter_names()) == sorted(tips)
    assert not (repo.path / (PACKED_REFS + ".lock")).exists()
    assert gc(repo).refs_packed == 0  # nothing loose: packed-refs is not rewritten
    assert (repo.path / PACKED_REFS).read_text() == data


def test_a_loose_ref_wins_over_its_packed_line(repo):
    t1 = commit(repo, {"messages": conv("one")}, thread="a").tip
    gc(repo)
    t2 = commit(repo, {"messages": conv("one", "two")}, thread="a").tip
    assert loose_refs(repo) == ["a"] and repo.refs.packed().refs == {"a": t1}
    assert repo.refs.read("a") == t2 and repo.refs.read_all() == {"a": t2}
    gc(repo)
    assert loose_refs(repo) == [] and repo.refs.packed().refs == {"a": t2}


def test_operations_on_packed_refs_behave_as_on_loose_ones(repo):
    a = commit(repo, {"messages": conv("a0")}, thread="a").tip
    commit(repo, {"messages": conv("b0")}, thread="b")
    commit(repo, {"messages": conv("n0")}, thread="p/q")
    gc(repo)
    # commit (CAS against the packed value), fork, rename, delete, update-ref
    a2 = commit(repo, {"messages": conv("a0", "a1")}, thread="a").tip
    assert repo.refs.read("a") == a2 and repo.refs.read_log("a")[-1].old == a
    f = convgit.fork(repo, "b", "b-fork")
    assert repo.refs.read("b-fork") == repo.refs.read("b") == f.tip
    with pytest.raises(errors.RefExists):
        repo.refs.update("b", f.tip, expected=None)
    with pytest.raises(errors.RefStale):
        repo.refs.update("b", a, expected=a)
    convgit.rename_thread(repo, "b", "c")
    assert repo.refs.read("b") is None and repo.refs.read("c") == f.tip
    assert "b" not in repo.refs.packed().refs and not (repo.refs.threads_dir / "b").exists()
    assert [e.message for e in repo.refs.read_log("c")][-1] == "rename: b -> c"
    convgit.rename_thread(repo, "p/q", "p")  # up, across a packed name
    assert repo.refs.read("p") is not None and repo.refs.read("p/q") is None
    convgit.rename_thread(repo, "p", "r/s")
    convgit.delete_thread(repo, "c")
    assert "c" not in repo.refs.iter_names() and "c" not in repo.refs.packed().refs
    convgit.update_ref(repo, "a", None, a2)  # delete, CAS, of a ref both loose and packed
    assert repo.refs.read("a") is None and "a" not in repo.refs.packed().refs  # the packed a does not come back
    assert sorted(repo.refs.read_all()) == ["b-fork", "r/s"]
    assert [p.message for p in fsck(repo).errors] == []


def test_packed_names_take_part_in_the_file_directory_rule(repo):
    t = commit(repo, {"messages": conv("x")}, thread="a").tip
    commit(repo, {"messages": conv("y")}, thread="d/e")
    gc(repo)
    with pytest.raises(errors.RefExists, match="conflicts with thread 'a'"):
        repo.refs.update("a/b", t, expected=None)
    with pytest.raises(errors.RefExists, match="conflicts with threads named d/"):
        repo.refs.update("d", t, expected=None)
    with pytest.raises(errors.RefExists):
        convgit.rename_thread(repo, "a", "d")
    assert sorted(repo.refs.read_all()) == ["a", "d/e"]


def test_update_many_moves_packed_refs(repo):
    from convgit.refs import RefMove

    tips = {n: commit(repo, {"messages": conv(n)}, thread=n).tip for n in "abcdef"}
    gc(repo)
    new = commit(repo, {"messages": conv("z")}, thread="z").tip
    moves = [RefMove(n, new, expected=tips[n]) for n in "abcde"] + [RefMove("f", new, expected=new)]
    res = repo.refs.update_many(moves)
    assert res[:5] == [tips[n] for n in "abcde"] and isinstance(res[5], errors.RefStale)
    assert repo.refs.read_all() == {**{n: new for n in "abcde"}, "f": tips["f"], "z": new}


# -- the CLI answers the same before and after gc -------------------------------------------------


def _answers(cli) -> dict:
    out = {}
    threads = cli("threads", "--json")
    assert threads.rc == 0, threads
    out["threads"] = threads.json()
    out["show-ref"] = cli("show-ref").out
    for t in out["threads"]["threads"] if isinstance(out["threads"], dict) else out["threads"]:
        name = t["name"]
        r = cli("log", name, "--json")
        assert r.rc == 0, r
        out[f"log {name}"] = r.json()
    fs = cli("fsck", "--json")
    assert fs.rc == 0, fs
    out["fsck"] = [p for p in fs.json()["problems"] if p["severity"] == "error"]
    return out


def test_every_command_answers_the_same_after_gc_packs_the_refs(cli, proj):
    for i, name in enumerate(["main", "work/a", "work/b", "x"]):
        r = cli("commit", "-", "--thread", name, "--json", input=json.dumps(conv(f"q{i}", f"r{i}")))
        assert r.rc == 0, r
    assert cli("fork", "work/a", "work/a-fork", "--json").rc == 0
    before = _answers(cli)
    r = cli("gc", "--json")
    assert r.rc == 0 and r.json()["refs_packed"] == 5, r
    store = proj / ".convgit"
    assert not [p for p in (store / "refs" / "threads").rglob("*") if p.is_file()]
    assert _answers(cli) == before
    assert before["fsck"] == []
    # and every write through the CLI on the packed refs
    r = cli("commit", "-", "--thread", "x", "--json", input=json.dumps(conv("q3", "r3", "more")))
    assert r.rc == 0 and r.json()["thread"] == "x", r
    assert cli("threads", "rename", "work/b", "work/c").rc == 0
    assert cli("threads", "delete", "work/a-fork").rc == 0
    tip = cli("show-ref").out
    assert "refs/threads/work/c" in tip and "work/b" not in tip and "work/a-fork" not in tip
    refs = dict(reversed(ln.split(" ")) for ln in tip.splitlines())
    main, x = refs["refs/threads/main"], refs["refs/threads/x"]
    stale = cli("update-ref", "main", x, x, "--json")  # main (packed) is not at x: CAS refused
    assert stale.rc != 0 and stale.json()["error_code"] == "ref_stale", stale
    assert cli("update-ref", "main", x, main, "--json").rc == 0  # at main: moved, as a loose ref
    assert cli("show-ref").out.count(f"{x} ") == 2
    assert _answers(cli)["fsck"] == []


# -- the index --------------------------------------------------------------------------------------


def test_the_index_reads_every_ref_once_after_gc_and_follows_packed_ref_moves(repo):
    for n in ("a", "b", "c"):
        commit(repo, {"messages": conv(n)}, thread=n)
    repo.index.refresh_if_changed()
    gc(repo)
    idx = repo.index
    idx.refresh_if_changed()
    rows = dict(idx.db.execute("SELECT name, tip FROM threads"))
    assert rows == repo.refs.read_all()
    assert str(repo.refs.packed_path) in [d for d, _ in json.loads(
        idx.db.execute("SELECT value FROM meta WHERE key='refs_state'").fetchone()[0])["dirs"]]
    assert idx.refs_unchanged()
    convgit.delete_thread(repo, "b")  # rewrites packed-refs
    idx.refresh_if_changed()
    assert dict(idx.db.execute("SELECT name, tip FROM threads")) == repo.refs.read_all()
    # packed-refs replaced behind convgit's back (no journal line): the signature notices it
    data = (repo.path / PACKED_REFS).read_text().replace(" c\n", " c2\n")
    (repo.path / PACKED_REFS).write_text(data)
    os.utime(repo.path / PACKED_REFS, ns=(1, 1))
    assert not idx.refs_unchanged()
    idx.refresh_if_changed()
    assert set(dict(idx.db.execute("SELECT name, tip FROM threads"))) == {"a", "c2"}


# -- damage -----------------------------------------------------------------------------------------


def test_a_damaged_packed_refs_file_is_reported_and_gc_refuses(repo):
    t = commit(repo, {"messages": conv("x")}, thread="a").tip
    commit(repo, {"messages": conv("y")}, thread="b")
    gc(repo)
    p = repo.path / PACKED_REFS
    good = p.read_text()
    p.write_text(good + "garbage line\n")
    assert repo.refs.read("a") == t  # readers skip what they cannot parse
    assert [e.kind for e in fsck(repo).errors] == ["bad_ref"]
    with pytest.raises(errors.GcRefused, match="unreadable"):
        gc(repo)
    p.write_text(good.replace(f"{t} a", "nothex a"))
    with pytest.raises(errors.ObjectCorrupt):
        repo.refs.read("a")
    assert any("'a'" in e.message for e in fsck(repo).errors)
    with pytest.raises(errors.GcRefused):
        gc(repo)
    convgit.delete_thread(repo, "a")  # an unreadable ref can always be deleted
    assert " a\n" not in p.read_text() and [e.message for e in fsck(repo).errors] == []
    p.write_text("# convgit packed-refs v9\n" + good.split("\n", 1)[1])
    assert [e.kind for e in fsck(repo).errors][:1] == ["bad_ref"]
    with pytest.raises(errors.GcRefused):
        gc(repo)


def test_parse_packed_refs():
    t = "a" * 64
    assert parse_packed_refs(b"").refs == {}
    p = parse_packed_refs(f"{PACKED_HEADER}{t} x\n{t} x\n{t} bad..name\nnope\n".encode())
    assert p.header_ok and p.refs == {"x": t} and len(p.bad) == 3
    assert not parse_packed_refs(f"{t} x\n".encode()).header_ok


# -- older stores -----------------------------------------------------------------------------------


def test_an_older_store_opens_unchanged_and_gc_packs_it(tmp_path):
    src = Path(__file__).parent / "data" / "store-v1"
    shutil.copytree(src, tmp_path / "v1", symlinks=True)
    store = tmp_path / "v1" / ".convgit"
    assert not (store / PACKED_REFS).exists()
    with Repository.open(store) as repo:
        before = repo.refs.read_all()
        assert before and not (store / PACKED_REFS).exists()
        logs = {n: repo.refs.read_log(n) for n in before}
        gc(repo, prune="never")
        assert repo.refs.read_all() == before and loose_refs(repo) == []
        assert {n: repo.refs.read_log(n) for n in before} == logs
        assert [p.message for p in fsck(repo).errors] == []


# -- kill -9 at every step of the packing -----------------------------------------------------------

PACK_POINTS = ("pack_refs_after_tmp_fsync", "pack_refs_after_rename", "pack_refs_mid_prune")


@pytest.mark.parametrize("point", PACK_POINTS)
def test_a_kill_at_every_step_of_the_packing_leaves_every_ref_at_its_value(tmp_path, point):
    repo = convgit.init(tmp_path / "s")
    tips = {n: commit(repo, {"messages": conv(n)}, thread=n).tip for n in ("a", "b", "n/x", "n/y")}
    gc(repo)  # a packed-refs file exists already: a loose ref that moved since must win
    tips["a"] = commit(repo, {"messages": conv("a", "a2")}, thread="a").tip
    tips["c"] = commit(repo, {"messages": conv("c")}, thread="c").tip
    repo.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {"CONVGIT_CRASH_AT": point}
    r = subprocess.run([PY, "-m", "convgit", "-C", str(tmp_path / "s"), "gc", "--json"], env=env,
                       capture_output=True, timeout=120)
    assert r.returncode == 137, r
    with Repository.open(tmp_path / "s" / ".convgit") as repo:
        assert repo.refs.read_all() == dict(sorted(tips.items()))
        for n, t in tips.items():
            assert repo.refs.read(n) == t
        assert [p.message for p in fsck(repo).errors] == []
        t = commit(repo, {"messages": conv("c", "c2")}, thread="c").tip  # the next writer: no unlock
        gc(repo)
        assert repo.refs.read_all() == dict(sorted((tips | {"c": t}).items())) and loose_refs(repo) == []


def _reader(path: str, names: list[str], stop, q) -> None:
    repo = Repository.open(Path(path))
    bad = []
    rounds = 0
    while not stop.is_set() or rounds < 20:
        rounds += 1
        got = repo.refs.read_all()
        if sorted(got) != names:
            bad.append(("read_all", sorted(set(names) ^ set(got))))
        for n in names[::7]:
            if repo.refs.read(n) is None:
                bad.append(("read", n))
    q.put((bad, rounds))


def test_a_reader_racing_the_packing_never_misses_a_thread(repo):
    """Another process reads every ref over and over while this one moves refs (loose again)
    and packs them, 12 times: the reader never misses a thread. (Counted in rounds, not in
    time: on a loaded machine either side may be slow.)"""
    import multiprocessing

    names = sorted(f"n{i:02d}" for i in range(40))
    t1 = {n: commit(repo, {"messages": conv(n)}, thread=n).tip for n in names}
    t2 = {n: commit(repo, {"messages": conv(n, "2")}, thread=n).tip for n in names}
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    stop = ctx.Event()
    p = ctx.Process(target=_reader, args=(str(repo.path), names, stop, q))
    p.start()
    for i in range(12):
        tips = t1 if i % 2 else t2
        for n in names[: 10 + i % 30]:
            repo.refs.update(n, tips[n])  # loose refs again, then packed
        repo.refs.pack_refs()
    stop.set()
    bad, rounds = q.get(timeout=120)
    p.join(30)
    assert bad == [] and rounds >= 20


def test_fsck_repair_removes_an_unreadable_packed_line_of_a_thread(repo):
    t = commit(repo, {"messages": conv("x")}, thread="a").tip
    commit(repo, {"messages": conv("y")}, thread="b")
    gc(repo)
    p = repo.path / PACKED_REFS
    p.write_text(p.read_text().replace(f"{t} a", "f00 a"))
    rep = fsck(repo, repair=True)
    assert any("'a'" in r for r in rep.repaired)
    assert sorted(repo.refs.read_all()) == ["b"] and [e.message for e in fsck(repo).errors] == []
    gc(repo)  # no longer refused


def test_a_symlinked_packed_refs_is_refused(repo, tmp_path):
    commit(repo, {"messages": conv("x")}, thread="a")
    gc(repo)
    elsewhere = tmp_path / "elsewhere"
    os.replace(repo.path / PACKED_REFS, elsewhere)
    os.symlink(elsewhere, repo.path / PACKED_REFS)
    with pytest.raises(errors.UnsafeSymlink):
        repo.refs.read("a")
    with pytest.raises(errors.UnsafeSymlink):
        gc(repo)


def test_gc_that_packs_refs_declares_format_3_first(tmp_path):
    """An older convgit (format 1 or 2 only) must refuse a store with packed refs and reflogs
    rather than miss its packed threads or their reflogs and let its gc prune what they root:
    gc declares format 3 before it writes packed-logs and packed-refs, and this convgit opens
    versions 1, 2 and 3 (a fourth is refused)."""
    import convgit
    from convgit import api
    from convgit.errors import NotAStore
    from convgit.repository import Repository

    repo = convgit.init(tmp_path / "s")
    convgit.commit(repo, {"messages": [{"role": "user", "content": "hi"}]}, thread="t")
    assert (repo.path / "format").read_text() == "convgit-store 1\n"  # a new store opens in older versions
    api.gc(repo, prune="now")
    assert (repo.path / "format").read_text() == "convgit-store 3\n"
    assert (repo.path / "packed-refs").exists() and (repo.path / "packed-logs").exists()
    assert api.status(repo)["format_version"] == 3
    path = repo.path
    repo.close()
    with Repository.open(path) as r:
        assert r.refs.read("t") is not None and len(r.refs.read_log("t")) == 1
    (path / "format").write_text("convgit-store 2\n")  # a version-2 store (packed-refs only) opens too
    Repository.open(path).close()
    (path / "format").write_text("convgit-store 4\n")
    import pytest

    with pytest.raises(NotAStore):
        Repository.open(path)
