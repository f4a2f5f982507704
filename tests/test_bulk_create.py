"""Bulk creation (docs/format.md §6.3 "Bulk creation"): an import or a bulk commit creating
many threads writes them straight into ``packed-refs`` and ``packed-logs`` under the creation
lock, with no loose ref, reflog or lock file per thread. Checked: the same refs, reflogs, index
and answers as the per-ref path; what falls back to it (a stale reflog, a name that exists, a
file/directory conflict); a failing sync undoes it all; a kill between its two renames leaves a
stale reflog that the next creation archives; processes creating the same names at the same
time never both win; and the index, told what was created, still reads what another writer
moved meanwhile. (Power loss: tests/reliability/test_powerloss.py; kill -9 at each step:
tests/reliability/test_crash.py, op ``import_new``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import convgit
from convgit import fsio, refs as refs_mod
from convgit.errors import RefExists, StorageFailed
from convgit.fsck import fsck
from convgit.index import writer as index_writer
from convgit.refformat import STALE_MESSAGE, read_log_file
from convgit.refs import RefMove
from convgit.repository import Repository

from helpers.store import NOW, conv


def _items(prefix: str, n: int, k: int = 0) -> list[dict]:
    return [{"messages": conv(f"{prefix}{j} q", f"{prefix}{j} a", *[f"{prefix}{j} more {i}" for i in range(k)]),
             "source": "s", "upstream_thread_id": f"{prefix}{j}", "model": "m"} for j in range(n)]


def _loose(repo) -> tuple[list[str], list[str]]:
    return sorted(repo.refs._loose_names()), sorted(n for n, _ in repo.refs.iter_log_files() if n)


def _view(repo) -> dict:
    """Every thread's tip, reflog (messages, turns, times) and answers through the API."""
    out = {}
    for name, tip in repo.refs.read_all().items():
        out[name] = (tip, [(e.old, e.new, e.turn, e.message, e.time_ms) for e in repo.refs.read_log(name)],
                     [m.text for m in convgit.conversation(repo, name)])
    return out


def test_many_new_threads_go_straight_into_the_packed_files_as_the_per_ref_path_would(tmp_path, monkeypatch):
    items = _items("t", 12)
    bulk = convgit.init(tmp_path / "bulk")
    convgit.commit_many(bulk, items, now_ms=NOW)
    assert _loose(bulk) == ([], [])  # no ref, reflog (nor lock) file per thread
    assert len(bulk.refs.packed().refs) == 12 and bulk.refs.packed_logs().count == 12
    assert (bulk.path / "format").read_text() == "convgit-store 3\n"
    monkeypatch.setattr(refs_mod, "BULK_CREATE_MIN", 10**6)
    each = convgit.init(tmp_path / "each")
    convgit.commit_many(each, items, now_ms=NOW)
    assert len(_loose(each)[0]) == 12
    monkeypatch.undo()
    assert _view(bulk) == _view(each)
    assert convgit.threads(bulk) == convgit.threads(each)
    assert [p.message for p in fsck(bulk).errors] == []  # (fsck compares the index with a rebuild)
    # the threads go on as any packed thread does: a loose ref that wins, its reflog continued
    convgit.commit(bulk, {"messages": items[3]["messages"] + conv("t3 next")}, thread="s/t3")
    assert _loose(bulk) == (["s/t3"], ["s/t3"]) and len(bulk.refs.read_log("s/t3")) == 2
    # a second bulk creation lands beside the first
    convgit.commit_many(bulk, _items("u", 6), now_ms=NOW + 1)
    assert len(bulk.refs.read_all()) == 18 and _loose(bulk) == (["s/t3"], ["s/t3"])
    assert [p.message for p in fsck(bulk).errors] == []


def test_below_the_threshold_or_in_the_way_the_per_ref_path_creates_them(tmp_path, monkeypatch):
    repo = convgit.init(tmp_path / "s")
    convgit.commit_many(repo, _items("a", refs_mod.BULK_CREATE_MIN - 1), now_ms=NOW)
    assert len(_loose(repo)[0]) == refs_mod.BULK_CREATE_MIN - 1
    # a stale loose reflog (a move cut short) and a name that conflicts with a thread: those two
    # take the per-ref path (the stale one archived, the conflict reported), the rest are packed
    convgit.commit(repo, {"messages": conv("x")}, thread="s/b1")
    stale = repo.refs.log_path("s/b0")
    fsio.append_line(stale, "0" * 64 + " " + "1" * 64 + " 1 -\tcut short\n", fsync=False)
    moves = [RefMove(f"s/b{j}", repo.refs.read("s/b1"), expected=None, message="m") for j in range(8)]
    moves.append(RefMove("s/b1/c", repo.refs.read("s/b1"), expected=None, message="m"))
    with repo.transaction() as tx:
        out = tx.move_many(moves)
    assert out[0] is None and isinstance(out[1], RefExists) and isinstance(out[8], RefExists)
    assert all(o is None for o in out[2:8])
    loose_refs, loose_logs = _loose(repo)
    assert "s/b0" in loose_refs and not {f"s/b{j}" for j in range(2, 8)} & set(loose_refs)
    assert [e.message for e in repo.refs.read_log("s/b0")] == ["m"]  # the stale line archived
    assert list((repo.path / "logs" / "deleted" / "s").glob("b0.*"))
    assert [p.message for p in fsck(repo).errors] == []


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_a_failing_sync_leaves_every_thread_and_reflog_as_it_was(tmp_path, monkeypatch, fail_at):
    repo = convgit.init(tmp_path / "s")
    convgit.commit_many(repo, _items("p", 6), now_ms=NOW)  # packed files to keep intact
    before = _view(repo)
    files = {n: (repo.path / n).read_bytes() for n in ("packed-refs", "packed-logs")}
    tip = repo.refs.read("s/p0")
    calls = []
    real_sync, real_dir = fsio.sync_filesystem, fsio.fsync_dir

    def counting(real):
        def f(path):
            calls.append(path)
            if len(calls) == fail_at:  # the syncfs, the fsync after packed-logs, after packed-refs
                raise StorageFailed("injected: sync failed")
            return real(path)
        return f

    monkeypatch.setattr(fsio, "sync_filesystem", counting(real_sync))
    monkeypatch.setattr(fsio, "fsync_dir", counting(real_dir))
    with pytest.raises(StorageFailed):
        repo.refs.update_many([RefMove(f"n{j}", tip, expected=None, message="new") for j in range(6)])
    monkeypatch.undo()
    assert {n: (repo.path / n).read_bytes() for n in files} == files and _view(repo) == before
    assert not [p for p in repo.path.rglob("*") if p.name.startswith(fsio.TMP_PREFIX)]
    convgit.commit_many(repo, _items("q", 6), now_ms=NOW + 1)  # the next creation works
    assert [p.message for p in fsck(repo).errors] == []


def test_a_kill_between_the_two_renames_leaves_stale_reflogs_the_next_creation_archives(tmp_path):
    repo = convgit.init(tmp_path / "p" / ".convgit")
    path = repo.path
    repo.close()
    export = tmp_path / "new.jsonl"
    export.write_text("".join(json.dumps(it) + "\n" for it in _items("k", 6)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {"CONVGIT_GC_AUTO": "0"}
    r = subprocess.run([sys.executable, "-m", "convgit", "-C", str(path.parent), "import", str(export)],
                       env={**env, "CONVGIT_CRASH_AT": "bulk_after_logs_rename"}, capture_output=True, timeout=120)
    assert r.returncode == 137, r
    with Repository.open(path) as repo:
        assert repo.refs.read_all() == {} and repo.refs.packed_logs().count == 6  # reflogs, no refs
        assert [p.message for p in fsck(repo).errors] == []
    r = subprocess.run([sys.executable, "-m", "convgit", "-C", str(path.parent), "import", str(export)],
                       env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, r
    with Repository.open(path) as repo:
        refs = repo.refs.read_all()
        assert len(refs) == 6 and all(len(repo.refs.read_log(n)) == 1 for n in refs)
        # the stale ones kept, never mixed in; their moves never happened, so they are no
        # provenance to carry (refformat.applied_archived: an archive ends at the stale line)
        stale = [p for n, p in repo.refs.iter_log_files() if n is None]
        assert len(stale) == 6 and repo.refs.archived_entries() == []
        assert all([e.message for e in read_log_file(p)][-1] == STALE_MESSAGE for p in stale)
        # The creation journaled each archive: the index read their turns as a rebuild does
        # (it used to leave them out, and fsck found the index disagreeing until a reindex).
        assert [p.message for p in fsck(repo).errors] == []
        before = repo.index.dump()
        convgit.reindex(repo)
        assert repo.index.dump() == before


RACER = r"""
import sys
import convgit
from convgit.errors import RefExists
from convgit.refs import RefMove
from convgit.repository import Repository
repo = Repository.open(sys.argv[1])
tip, names, mode = sys.argv[2], sys.argv[3].split(","), sys.argv[4]
won = []
for r in range(int(sys.argv[5])):
    batch = [f"{n}.{r}" for n in names]
    if mode == "bulk":
        with repo.transaction() as tx:
            out = tx.move_many([RefMove(n, tip, expected=None, message=mode) for n in batch])
        won += [n for n, o in zip(batch, out) if o is None]
    else:
        for n in reversed(batch):
            try:
                with repo.transaction() as tx:
                    tx.move(n, tip, expected=None, message=mode)
                won.append(n)
            except RefExists:
                pass
print(",".join(won))
"""


def test_processes_creating_the_same_threads_never_both_win(tmp_path):
    """A bulk creator and a one-by-one creator (and a second bulk creator) race to create the
    same names: each name is created once, by the one whose creation reports success, with
    one reflog line; no creation is lost nor reported twice."""
    repo = convgit.init(tmp_path / "s")
    tip = convgit.commit(repo, {"messages": conv("seed")}, thread="seed").tip
    names = [f"r/n{j}" for j in range(24)]
    rounds = 6
    env = {**os.environ, "CONVGIT_LOCK_TIMEOUT": "60"}
    procs = {mode: subprocess.Popen([sys.executable, "-c", RACER, str(repo.path), tip, ",".join(names), mode,
                                     str(rounds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for mode in ("bulk", "each", "bulk2")}
    won = {}
    for mode, p in procs.items():
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        won[mode] = set(filter(None, out.strip().split(",")))
    everything = {f"{n}.{r}" for n in names for r in range(rounds)}
    assert set(repo.refs.read_all()) - {"seed"} == everything
    assert sum(len(w) for w in won.values()) == len(everything)  # each created once
    assert set().union(*won.values()) == everything
    for mode, w in won.items():
        for n in w:
            assert [e.message for e in repo.refs.read_log(n)] == [mode], n
    assert [p.message for p in fsck(repo).errors] == []


def test_the_index_reads_back_a_created_thread_another_writer_moved_meanwhile(tmp_path, monkeypatch):
    """What a transaction created is handed to the index as written, but only while the refs
    journal ends where its own lines did: a thread another writer moved between the creation
    and the index update is read from disk (else the index would put it back)."""
    repo = convgit.init(tmp_path / "s")
    items = _items("h", 6)
    real = index_writer.IndexWriter.record_moves
    seen = []

    def meanwhile(self, names, cache=None, **kw):
        if not seen:
            seen.append(kw.get("written"))
            other = Repository.open(repo.path)  # another writer (its own journal lines)
            convgit.commit(other, {"messages": items[2]["messages"] + conv("moved meanwhile")}, thread="s/h2")
            other.close()
        return real(self, names, cache, **kw)

    monkeypatch.setattr(index_writer.IndexWriter, "record_moves", meanwhile)
    convgit.commit_many(repo, items, now_ms=NOW)
    monkeypatch.undo()
    assert seen and "s/h2" in seen[0]  # created in bulk, handed over as written
    row = repo.index.db.execute("SELECT tip FROM threads WHERE name='s/h2'").fetchone()
    assert row[0] == repo.refs.read("s/h2")
    assert [m.text for m in convgit.conversation(repo, "s/h2")][-1] == "moved meanwhile"
    assert [p.message for p in fsck(repo).errors] == []


def test_the_index_is_told_what_was_created_and_reads_no_reflog(tmp_path, monkeypatch):
    repo = convgit.init(tmp_path / "s")
    convgit.commit(repo, {"messages": conv("first")}, thread="first")
    reads = []
    real = type(repo.refs).log_bytes

    def counting(self, name):
        reads.append(name)
        return real(self, name)

    monkeypatch.setattr(type(repo.refs), "log_bytes", counting)
    convgit.commit_many(repo, _items("z", 10), now_ms=NOW)
    assert reads == []
    monkeypatch.undo()
    assert len(convgit.threads(repo)) == 11
    assert [p.message for p in fsck(repo).errors] == []


@pytest.mark.parametrize("second", ["done", "killed_before_the_index"])
def test_a_stale_loose_reflog_archived_by_the_next_creation_is_indexed_as_a_rebuild_indexes_it(tmp_path, second):
    """One conversation (the per-ref path): killed after its reflog line, before its ref; the
    same import again archives that stale reflog. Whether that import updates the index
    itself or is killed just after its ref move (then the next command reads the journal's
    ``archive`` line), the index holds what a rebuild holds: fsck is clean, no reindex."""
    store = tmp_path / "p"
    convgit.init(store / ".convgit").close()
    export = tmp_path / "one.jsonl"
    export.write_text(json.dumps(_items("s", 1)[0]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {"CONVGIT_GC_AUTO": "0"}

    def run(crash: str | None) -> int:
        e = env if crash is None else {**env, "CONVGIT_CRASH_AT": crash}
        return subprocess.run([sys.executable, "-m", "convgit", "-C", str(store), "import", str(export)],
                              env=e, capture_output=True, timeout=120).returncode

    assert run("ref_after_tmp_fsync") == 137
    with Repository.open(store / ".convgit") as repo:
        assert repo.refs.read_all() == {} and [n for n, _ in repo.refs.iter_log_files() if n]  # a stale reflog
    assert run(None if second == "done" else "ref_after_rename") == (0 if second == "done" else 137)
    with Repository.open(store / ".convgit") as repo:
        assert len(repo.refs.read_all()) == 1 and len([n for n, _ in repo.refs.iter_log_files() if n is None]) == 1
        assert repo.refs.archived_entries() == []  # (a move that never happened: nothing to carry)
        assert [p.message for p in fsck(repo).errors] == []
        before = repo.index.dump()
        convgit.reindex(repo)
        assert repo.index.dump() == before
