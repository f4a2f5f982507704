"""Packed reflogs (docs/format.md §4.2, §6.4): gc, and a writer past AUTO_PACK_LOOSE loose
refs, move refs into ``packed-refs`` and reflogs into ``packed-logs``; a thread's reflog is
its packed part, then its loose file; a kill at every step of the packing leaves every ref
at its value and every reflog whole (no line lost, none twice); writers racing the packing
lose nothing; an older (loose) store gives the same answers before and after packing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import convgit
from convgit import refs as refs_mod
from convgit import transaction
from convgit.fsck import fsck
from convgit.gc import gc
from convgit.packedlogs import PACKED_LOGS, PackedLog, PackedLogsReader, format_packed_logs, verify
from convgit.refformat import STALE_MESSAGE, format_reflog_line, open_packed_refs, format_packed_refs, read_log_file
from convgit.repository import Repository

from helpers.cli import cli, env, ok  # noqa: F401  (fixtures)
from helpers.store import NOW, conv

PY = sys.executable
HERE = Path(__file__).parent


def commit(repo, data, **kw):
    kw.setdefault("now_ms", NOW)
    return convgit.commit(repo, data, **kw)


def loose_logs(repo) -> list[str]:
    return sorted(n for n, _ in repo.refs.iter_log_files() if n is not None)


def loose_refs(repo) -> list[str]:
    return sorted(str(p.relative_to(repo.refs.threads_dir)) for p in repo.refs.threads_dir.rglob("*") if p.is_file())


def all_logs(repo) -> dict[str, list]:
    return {n: repo.refs.read_log(n) for n in repo.refs.iter_names()}


def tails_disagree(repo) -> list:
    """Where ``log_tail`` (what the index reads after a move) differs from the whole log cut
    at that byte: at every line boundary, mid-line, at the end and past it. Empty: none."""
    bad = []
    for n in repo.refs.live_log_names():
        data = repo.refs.log_bytes(n)
        cuts = {0, 1, len(data) // 2, len(data), len(data) + 7} | {i + 1 for i, b in enumerate(data) if b == 10}
        for k in sorted(cuts):
            if repo.refs.log_tail(n, k) != (data[k:], len(data)):
                bad.append((n, k))
        if repo.refs.log_size(n) != len(data):
            bad.append((n, "size"))
    return bad


# -- the packing ------------------------------------------------------------------------------------


def test_gc_packs_every_reflog_and_every_operation_still_reads_it(repo):
    a = commit(repo, {"messages": conv("a")}, thread="a")
    commit(repo, {"messages": conv("a", "a2")}, thread="a")
    commit(repo, {"messages": conv("b")}, thread="n/b")
    before = all_logs(repo)
    assert [len(v) for v in before.values()] == [2, 1]
    gc(repo)
    assert loose_logs(repo) == [] and loose_refs(repo) == [] and (repo.path / PACKED_LOGS).exists()
    assert all_logs(repo) == before and verify((repo.path / PACKED_LOGS).read_bytes()) == []
    # A move appends to a fresh loose file after the packed part.
    c = commit(repo, {"messages": conv("a", "a2", "a3")}, thread="a")
    assert [e.new for e in repo.refs.read_log("a")][-1] == c.tip and len(repo.refs.read_log("a")) == 3
    assert loose_logs(repo) == ["a"]
    # rename carries the packed part; delete archives it whole; restore brings it back.
    convgit.api.rename_thread(repo, "n/b", "b2")
    assert [e.message for e in repo.refs.read_log("b2")][-1] == "rename: n/b -> b2"
    assert len(repo.refs.read_log("b2")) == 2 and repo.refs.read_log("n/b") == []
    convgit.api.delete_thread(repo, "a")
    assert repo.refs.read_log("a") == [] and not repo.refs.has_log("a")
    shown = convgit.api.reflog(repo, "a")
    assert shown["deleted"] and len(shown["entries"]) == 4  # three moves and the delete
    convgit.api.restore_thread(repo, "a")
    assert [e.new for e in repo.refs.read_log("a")][:1] == [a.tip] and len(repo.refs.read_log("a")) == 5
    assert [p.message for p in fsck(repo).errors] == []
    gc(repo)
    assert len(repo.refs.read_log("a")) == 5 and [p.message for p in fsck(repo).errors] == []


def test_a_new_thread_never_inherits_a_stale_packed_reflog(repo):
    """A packed reflog of a thread that does not exist (what a crash between archiving and
    dropping the packed part leaves) is archived when the thread is created again."""
    commit(repo, {"messages": conv("x")}, thread="x")
    gc(repo)
    old = repo.refs.read_log("x")
    repo.refs._unpack(["x"])  # the ref gone, its packed reflog left behind
    fsio_unlink = [p for p in repo.refs.threads_dir.rglob("x")]
    assert fsio_unlink == [] and repo.refs.read("x") is None and repo.refs.has_log("x")
    commit(repo, {"messages": conv("y")}, thread="x")
    assert len(repo.refs.read_log("x")) == 1 and repo.refs.read_log("x") != old
    # kept whole in logs/deleted, ended by the stale line (a ref that vanished without a
    # delete line: its moves read as never made, refformat.applied_archived)
    archived = [read_log_file(p) for n, p in repo.refs.iter_log_files() if n is None]
    assert len(archived) == 1 and archived[0][0] == old[0] and archived[0][-1].message == STALE_MESSAGE


def test_a_writer_past_the_threshold_packs_and_the_index_catches_up_without_a_rescan(repo, monkeypatch):
    monkeypatch.setattr(refs_mod, "AUTO_PACK_LOOSE", 8)
    monkeypatch.setattr(transaction, "AUTO_PACK_STEP", 16)
    monkeypatch.setattr(refs_mod, "BULK_CREATE_MIN", 10**6)  # (created loose, as one by one)
    commit(repo, {"messages": conv("first")}, thread="first")
    repo.index.refresh_if_changed()  # (the journal's first line: read every ref once)
    items = [{"messages": conv(f"t{i}"), "source": "s", "upstream_thread_id": f"u{i}"} for i in range(12)]
    convgit.commit_many(repo, items)
    assert loose_refs(repo) == [] and loose_logs(repo) == []
    assert (repo.path / "format").read_text() == "convgit-store 3\n"
    # the packing named its threads in the journal: the index reads just those, never every ref
    calls = []
    monkeypatch.setattr(repo.index, "refresh", lambda: calls.append(1))
    repo.index.refresh_if_changed()
    assert calls == [] and repo.index.refs_unchanged()
    assert len(convgit.api.threads(repo)) == 13
    # a hot thread goes loose again, the rest stay packed
    commit(repo, {"messages": conv("t3", "more")}, thread="s/u3")
    assert loose_refs(repo) == ["s/u3"] and len(repo.refs.read_log("s/u3")) == 2


# -- kill -9 at every step of the packing -----------------------------------------------------------

POINTS = ("pack_logs_after_tmp_fsync", "pack_logs_after_rename", "pack_refs_after_tmp_fsync",
          "pack_refs_after_rename", "pack_refs_mid_prune", "pack_logs_mid_prune")


def _store_for_crash(path: Path) -> tuple[Repository, dict, dict]:
    repo = convgit.init(path)
    for n in ("a", "b", "n/x", "n/y"):
        commit(repo, {"messages": conv(n)}, thread=n)
    gc(repo)  # packed files exist already: a loose part must be read after the packed one
    commit(repo, {"messages": conv("a", "a2")}, thread="a")
    commit(repo, {"messages": conv("c")}, thread="c")
    return repo, repo.refs.read_all(), all_logs(repo)


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_every_step_of_the_packing_loses_nothing(tmp_path, point):
    repo, tips, logs = _store_for_crash(tmp_path / "s")
    repo.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {"CONVGIT_CRASH_AT": point}
    r = subprocess.run([PY, "-m", "convgit", "-C", str(tmp_path / "s"), "gc", "--json"], env=env,
                       capture_output=True, timeout=120)
    assert r.returncode == 137, r
    with Repository.open(tmp_path / "s" / ".convgit") as repo:
        assert repo.refs.read_all() == tips
        assert all_logs(repo) == logs  # every line once: none lost, none read twice
        assert tails_disagree(repo) == []  # (after pack_logs_after_rename: absorbed loose files)
        assert [p.message for p in fsck(repo).errors] == []
        t = commit(repo, {"messages": conv("c", "c2")}, thread="c").tip
        logs["c"] = repo.refs.read_log("c")
        assert len(logs["c"]) == 2
        gc(repo)
        assert repo.refs.read_all() == tips | {"c": t} and all_logs(repo) == logs
        assert loose_refs(repo) == [] and loose_logs(repo) == []
        assert [p.message for p in fsck(repo).errors] == []


def test_a_kill_mid_packing_by_a_writer_loses_nothing(tmp_path):
    """The writer's own packing (past the threshold, under the exclusive store lock), killed
    after packed-logs is in and before any loose file goes."""
    repo = convgit.init(tmp_path / "s")
    path = repo.path
    repo.close()
    code = f"""
import convgit
from convgit import refs, transaction
refs.AUTO_PACK_LOOSE = 4
transaction.AUTO_PACK_STEP = 32
refs.BULK_CREATE_MIN = 10**6  # (created loose, then packed by the writer)
repo = convgit.Repository.open({str(path)!r})
convgit.commit_many(repo, [{{"messages": [{{"role": "user", "content": f"q{{i}}"}}], "source": "s", "upstream_thread_id": f"t{{i}}"}} for i in range(9)])
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {"CONVGIT_CRASH_AT": "pack_refs_after_rename"}
    r = subprocess.run([PY, "-c", code], env=env, capture_output=True, timeout=120)
    assert r.returncode == 137, r
    with Repository.open(path) as repo:
        assert sorted(repo.refs.read_all()) == sorted(f"s/t{i}" for i in range(9))
        assert all(len(repo.refs.read_log(f"s/t{i}")) == 1 for i in range(9))
        assert (repo.path / "packed-refs").exists() and repo.refs.packed_logs().count == 9
        assert [p.message for p in fsck(repo).errors] == []


# -- readers and writers racing the packing ---------------------------------------------------------


def _log_reader(path: str, names: list[str], stop, q) -> None:
    repo = Repository.open(Path(path))
    bad = []
    rounds = 0
    while not stop.is_set() or rounds < 20:
        rounds += 1
        for n in names:
            msgs = [e.message for e in repo.refs.read_log(n)]
            if msgs != [f"m{k}" for k in range(len(msgs))] or not msgs:
                bad.append((n, msgs))
    q.put((bad[:5], rounds))


def test_a_reader_racing_the_packing_never_sees_a_line_twice_or_misses_one(repo):
    """Another process reads every reflog over and over while this one appends to them and
    packs them, 12 times: each read is the log as it was at some instant (m0, m1, ... with
    no gap and no repeat)."""
    import multiprocessing

    names = sorted(f"n{i:02d}" for i in range(30))
    t1 = {n: commit(repo, {"messages": conv(n)}, thread=n).tip for n in names}
    t2 = {n: commit(repo, {"messages": conv(n, "2")}, thread=n).tip for n in names}
    count = {}
    for n in names:  # the commits' reflog lines out of the way: every line is "m<k>"
        repo.refs.update(n, None, message="x")
        repo.refs.update(n, t1[n], expected=None, message="m0")
        count[n] = 1
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    stop = ctx.Event()
    p = ctx.Process(target=_log_reader, args=(str(repo.path), names, stop, q))
    p.start()
    for i in range(12):
        for n in names[: 10 + i % 20]:
            tip = t2[n] if count[n] % 2 else t1[n]
            repo.refs.update(n, tip, message=f"m{count[n]}")
            count[n] += 1
        with repo.exclusive_lock():
            repo.pack_refs()
    stop.set()
    bad, rounds = q.get(timeout=120)
    p.join(30)
    assert bad == [] and rounds >= 20
    assert all(len(repo.refs.read_log(n)) == count[n] for n in names)


def _paused_across_two_packings(repo, monkeypatch, pause: str, read: str, *, offset: str = "start"):
    """Thread ``a`` with m0 packed and m1 in a loose file, and a second handle on the store
    whose loose-file read ``read`` (``_loose_log`` or ``_loose_tail``) pauses once, just
    before or just after it reads (``pause``), while the first handle packs (m1 absorbed,
    its loose file unlinked), moves once more (m2, a new loose file) and packs again.
    Returns (that handle, with ``.paused`` set once it paused; the byte offset of the end of
    m0's line when ``offset`` is "end_of_m0", else 0)."""
    t1 = commit(repo, {"messages": conv("a")}, thread="a").tip
    t2 = commit(repo, {"messages": conv("a", "2")}, thread="a").tip
    repo.refs.update("a", None, message="x")
    repo.refs.update("a", t1, expected=None, message="m0")
    with repo.exclusive_lock():
        repo.pack_refs()  # m0 packed
    k = 0 if offset == "start" else len(repo.refs.log_bytes("a"))
    repo.refs.update("a", t2, message="m1")  # m1 in a loose file
    reader = Repository.open(repo.path)
    real = getattr(reader.refs, read)
    reader.paused = []

    def meanwhile() -> None:
        reader.paused.append(True)
        with repo.exclusive_lock():
            repo.pack_refs()  # m1 absorbed, its loose file unlinked
        repo.refs.update("a", t1, message="m2")  # a new loose file
        with repo.exclusive_lock():
            repo.pack_refs()  # m2 absorbed: the marker names the new file

    def paused_read(*a):
        if not reader.paused and pause == "before_loose_read":
            meanwhile()
        got = real(*a)
        if not reader.paused and pause == "after_loose_read":
            meanwhile()
        return got

    monkeypatch.setattr(reader.refs, read, paused_read)
    return reader, k


@pytest.mark.parametrize("pause", ["after_loose_read", "before_loose_read"])
def test_a_reader_paused_across_two_packings_reads_the_log_as_it_was_at_one_instant(repo, monkeypatch, pause):
    """The race the test above catches only under load, made certain: a reader is paused just
    after (or just before) it reads the loose reflog while the log is packed, moved once more
    and packed again. What it returns must be the log at some instant of its read: m0 m1, or
    m0 m1 m2; never m1 twice (the second packing's marker names another loose file than the
    one the reader read), never m1 missing."""
    reader, _ = _paused_across_two_packings(repo, monkeypatch, pause, "_loose_log")
    msgs = [e.message for e in reader.refs.read_log("a")]
    assert reader.paused and msgs in (["m0", "m1"], ["m0", "m1", "m2"]), msgs
    assert [e.message for e in reader.refs.read_log("a")] == ["m0", "m1", "m2"]
    assert reader.refs.log_size("a") == len(repo.refs.log_bytes("a"))


@pytest.mark.parametrize("offset", ["start", "end_of_m0"])
@pytest.mark.parametrize("pause", ["after_loose_read", "before_loose_read"])
def test_a_tail_reader_paused_across_two_packings_reads_the_tail_of_one_instant(repo, monkeypatch, offset, pause):
    """The same pause for ``log_tail`` (the index's read after a move): paused just before or
    after it reads the loose file's tail, across a packing, a move and another packing. The tail it
    returns, and the length, are those of the log at one instant of its read: from the start
    m0 m1 or m0 m1 m2; from the end of m0's line m1 or m1 m2; never a line twice."""
    reader, k = _paused_across_two_packings(repo, monkeypatch, pause, "_loose_tail", offset=offset)
    tail, size = reader.refs.log_tail("a", k)
    msgs = [e.message for e in convgit.refs.parse_log(tail)]
    want = (["m0", "m1"], ["m0", "m1", "m2"]) if k == 0 else (["m1"], ["m1", "m2"])
    assert reader.paused and msgs in want, msgs
    assert size == k + len(tail)
    assert tails_disagree(reader) == []
    reader.close()


def _writer(path: str, me: int, rounds: int, q) -> None:
    done: list = []
    try:
        repo = Repository.open(Path(path))
        history: dict[str, list] = {}
        for k in range(rounds):
            thread = f"w{me}/r{k % 3}"
            msgs = history.setdefault(thread, [])
            msgs.append({"role": "user" if len(msgs) % 2 == 0 else "assistant", "content": f"w{me} r{k}"})
            r = convgit.commit(repo, {"messages": list(msgs)}, thread=thread)
            done.append((r.thread, r.tip))
    except BaseException as e:  # noqa: BLE001  (reported to the test, never a hang)
        done.append(("error", repr(e)))
    q.put(done)


def test_writers_racing_the_packing_lose_no_update(repo, monkeypatch):
    """Three writer processes commit while this one runs gc (which packs) over and over, and
    writers' own threshold packings run too: every commit's ref move and reflog line is
    there at the end, each once."""
    import multiprocessing

    monkeypatch.setattr(refs_mod, "AUTO_PACK_LOOSE", 2)
    monkeypatch.setattr(transaction, "AUTO_PACK_STEP", 16)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    ws = [ctx.Process(target=_writer, args=(str(repo.path), i, 12, q)) for i in range(3)]
    for w in ws:
        w.start()
    for _ in range(6):
        gc(repo, prune="never")
    done = [q.get(timeout=120) for _ in ws]
    assert not [d for ds in done for d in ds if d[0] == "error"], done
    for w in ws:
        w.join(30)
    gc(repo, prune="never")
    last: dict[str, str] = {}
    moves: dict[str, list[str]] = {}
    for d in done:
        for thread, tip in d:
            last[thread] = tip
            moves.setdefault(thread, []).append(tip)
    assert repo.refs.read_all() == dict(sorted(last.items()))
    for thread, tips in moves.items():
        assert [e.new for e in repo.refs.read_log(thread)] == tips  # every move, in order, once
    assert [p.message for p in fsck(repo).errors] == []


# -- an older store: the same answers before and after packing --------------------------------------


def _answers(cli, store: Path) -> dict:
    def run(*args):
        return ok(cli("-C", str(store.parent), *args)).json()

    out = {"threads": run("threads", "--json"), "show-ref": run("show-ref", "--json")}
    for t in out["threads"]:
        out[f"reflog {t['name']}"] = run("reflog", t["name"], "--json")
        out[f"log {t['name']}"] = run("log", "-t", t["name"], "--json")
    return out


def test_an_older_loose_store_gives_the_same_answers_before_and_after_packing(cli, tmp_path):
    shutil.copytree(HERE / "data" / "store-v1", tmp_path / "v1", symlinks=True)
    store = tmp_path / "v1" / ".convgit"
    assert not (store / PACKED_LOGS).exists() and (store / "format").read_text() == "convgit-store 1\n"
    before = _answers(cli, store)
    assert len(before) > 4 and (store / "format").read_text() == "convgit-store 1\n"  # reading changes nothing
    ok(cli("-C", str(store.parent), "gc", "--prune", "never", "--json"))
    with Repository.open(store) as repo:
        assert loose_logs(repo) == [] and loose_refs(repo) == [] and [p.message for p in fsck(repo).errors] == []
    assert (store / "format").read_text() == "convgit-store 3\n"
    assert _answers(cli, store) == before


# -- the format ---------------------------------------------------------------------------------------

NAMES = st.from_regex(r"[a-z][a-z0-9_-]{0,12}(/[a-z0-9][a-z0-9_-]{0,8})?", fullmatch=True)
OID = st.text("0123456789abcdef", min_size=64, max_size=64)


@st.composite
def logs(draw):
    names = draw(st.lists(NAMES, min_size=0, max_size=40, unique=True))
    out = []
    for n in names:
        lines = draw(st.lists(st.tuples(OID, OID, st.integers(0, 2**45), st.one_of(st.none(), OID),
                                        st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)),
                              min_size=1, max_size=4))
        data = "".join(format_reflog_line(*ln) for ln in lines).encode()
        marker = draw(st.one_of(st.just((0, 0, "-")), st.tuples(st.integers(1, 2**40), st.integers(0, 500), OID.map(lambda x: x[:32]))))
        out.append(PackedLog(n, data, *marker))
    return out


@settings(max_examples=60, deadline=None)
@given(logs())
def test_packing_reflogs_is_lossless(entries):
    data = format_packed_logs(entries)
    r = PackedLogsReader(lambda o, n: data[o:o + n], len(data))
    assert verify(data) == []
    assert r.count == len(entries)
    assert sorted(r, key=lambda e: e.name) == sorted(entries, key=lambda e: e.name)
    for e in entries:
        assert r.get(e.name) == e
        assert r.get(e.name + "-absent") is None


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c/d", "e"]), st.sampled_from(["move", "pack", "delete"])),
                min_size=1, max_size=12))
def test_pack_and_unpack_of_refs_and_reflogs_in_a_store_is_lossless(tmp_path_factory, ops):
    """Any sequence of moves, packings and deletes: every thread's tip and reflog read the
    same whether packed or loose, and a deleted thread's archive holds its whole reflog."""
    repo = convgit.init(tmp_path_factory.mktemp("p") / "s")
    (repo.path / "config.toml").write_text("[core]\nfsync = false\n")
    repo.close()
    repo = Repository.open(repo.path)
    want: dict[str, list[str]] = {}
    tips = {n: commit(repo, {"messages": conv(n)}, thread=f"seed-{n.replace('/', '-')}").tip for n in "abcde"}
    for i, (name, op) in enumerate(ops):
        if op == "move":
            tip = tips["abcde"[i % 5]]
            if repo.refs.read(name) == tip:
                continue
            repo.refs.update(name, tip, message=f"m{i}")
            want.setdefault(name, []).append(f"m{i}")
        elif op == "pack":
            with repo.exclusive_lock():
                repo.pack_refs()
        elif name in want:
            repo.refs.update(name, None, message=f"d{i}")
            archived = sorted(repo.refs.deleted_logs_dir.rglob(f"{name.split('/')[-1]}.*"))[-1]
            assert [e.message for e in convgit.refs.read_log_file(archived)] == want.pop(name) + [f"d{i}"]
        for n, msgs in want.items():
            assert [e.message for e in repo.refs.read_log(n)] == msgs
        assert tails_disagree(repo) == []
    assert sorted(n for n in repo.refs.iter_names() if not n.startswith("seed-")) == sorted(want)
    repo.close()


def test_a_large_packed_refs_is_searched_not_parsed():
    refs = {f"t/{i:06d}": f"{i:064x}" for i in range(20000)}
    data = format_packed_refs(refs)
    p = open_packed_refs(data)
    assert p._refs is None  # not parsed
    for name in ("t/000000", "t/012345", "t/019999"):
        assert p.get(name) == refs[name] and name in p
    assert p.get("t/0123456") is None and "t" not in p and p.get("u") is None and p.get("a") is None
    assert p.has_under("t") and not p.has_under("t/000001") and not p.has_under("s")
    assert p._refs is None and p.refs == refs  # parsed only when every ref is asked for


def test_a_large_packed_refs_is_merged_as_bytes_like_a_parsed_one():
    refs = {f"t/{i:06d}": f"{i:064x}" for i in range(0, 40000, 2)}
    data = format_packed_refs(refs)
    changes = {"t/000002": None, "t/000003": "f" * 64, "a": "e" * 64, "t/039998": "d" * 64, "z/1": "c" * 64,
               "t/000005": None}
    got = open_packed_refs(data).with_changes(changes)
    want = dict(refs)
    for n, t in changes.items():
        if t is None:
            want.pop(n, None)
        else:
            want[n] = t
    assert got == format_packed_refs(want)


def test_a_packing_recompresses_only_the_chunks_it_lands_in():
    entries = [PackedLog(f"t{i:05d}", format_reflog_line(None, f"{i:064x}", i, None, "m").encode()) for i in range(3000)]
    data = format_packed_logs(entries)
    r = PackedLogsReader(lambda o, n: data[o:o + n], len(data))
    new = PackedLog("t01500x", format_reflog_line(None, "a" * 64, 1, None, "new").encode())
    from convgit.packedlogs import rewrite_packed_logs

    out = rewrite_packed_logs(r, {new.name: new, "t00007": None})
    r2 = PackedLogsReader(lambda o, n: out[o:o + n], len(out))
    assert verify(out) == [] and r2.count == 3000 and r2.get("t00007") is None and r2.get(new.name) == new
    kept = {data[o:o + n] for o, n, *_ in r.chunks} & {out[o:o + n] for o, n, *_ in r2.chunks}
    assert len(kept) == len(r.chunks) - 2  # every chunk but the two changed, copied as it was
    assert sorted(e.name for e in r2) == sorted([e.name for e in entries if e.name != "t00007"] + [new.name])


def test_one_thread_looked_up_pays_no_name_check_but_a_listing_and_fsck_still_refuse_a_bad_name(monkeypatch):
    """A commit's reflog tail reads one packed thread's entry: the other names of its chunk
    are not checked then (at 100,000 threads a chunk holds ~230); listing them, rewriting the
    chunk and verify (fsck) still find a name no thread can have."""
    from convgit import packedlogs

    line = format_reflog_line(None, "a" * 64, NOW, None, "commit").encode()
    data = format_packed_logs([PackedLog("good", line, 0, 0, "-"), PackedLog("zz..bad", line, 0, 0, "-")])
    checked = []
    real = packedlogs.check_thread_name
    monkeypatch.setattr(packedlogs, "check_thread_name", lambda n: (checked.append(n), real(n))[1])
    r = PackedLogsReader(lambda o, n: data[o:o + n], len(data))
    assert r.get("good").data == line and checked == []
    with pytest.raises(convgit.errors.ObjectCorrupt):
        r.names()
    with pytest.raises(convgit.errors.ObjectCorrupt):
        packedlogs.rewrite_packed_logs(r, {"good": None})
    assert any("invalid thread" in p for p in verify(data))
