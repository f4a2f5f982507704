"""T3: commits and gc at the same time.

- T3.1: 4 committer processes x 250 commits over 2 shared + 4 private threads while gc runs in
  a loop: 0 acknowledged commits lost or duplicated, each thread's chain is exactly its acked
  set (in each writer's order), fsck clean. Mutation: gc without the store lock and with
  grace 0 must lose commits or corrupt the store.
- T3.2: deterministic interleavings (git t6501): gc between a commit's object writes and its
  ref move, for each of the two safety layers (the lock; freshen + grace), each with its mutation.
- T3.3: gc fails closed on an unreadable or dangling ref or reflog: deletes nothing.
- T3.5: two gcs at once: one runs, one skips.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import os
import random
import time
from pathlib import Path

import pytest

import convgit
from convgit import errors, fsio, graph
from convgit.api import message_text
from convgit.gc import gc
from convgit.repository import Repository

from .helpers import NOW, age_tree, chain, chain_texts, fsck_errors, new_store, tree_snapshot, user

CTX = multiprocessing.get_context("fork")
SHARED = ["s1", "s2"]
SEED = int(os.environ.get("CONVGIT_TEST_SEED", "20240515"))


# -- T3.1 -----------------------------------------------------------------------------------


class _History:
    """A writer's view of each thread's messages, caught up from the store incrementally."""

    def __init__(self, repo):
        self.repo = repo
        self.ids: dict[str, list[str]] = {}
        self.texts: dict[str, list[str]] = {}

    def get(self, thread: str) -> list[dict]:
        tip = self.repo.refs.read(thread)
        ids, texts = self.ids.setdefault(thread, []), self.texts.setdefault(thread, [])
        pos = {o: i for i, o in enumerate(ids)}
        new_ids, new_texts = [], []
        oid = tip
        while oid is not None and oid not in pos:
            m = graph.read_message(self.repo.objects, oid)
            new_ids.append(oid)
            new_texts.append(message_text(self.repo, m))
            oid = m.parent
        keep = pos[oid] + 1 if oid is not None else 0
        ids[keep:] = reversed(new_ids)
        texts[keep:] = reversed(new_texts)
        return [user(t) for t in texts]


def _committer(root: str, wid: int, m: int, ackpath: str, seed: int, go, progress=None) -> None:
    try:
        _commit_loop(root, wid, m, ackpath, seed, go, progress)
    except BaseException:
        import traceback

        Path(ackpath + ".crash").write_text(traceback.format_exc())
        raise


def _commit_loop(root: str, wid: int, m: int, ackpath: str, seed: int, go, progress=None) -> None:
    rnd = random.Random(seed * 1000 + wid)
    repo = Repository.open(root)
    hist = _History(repo)
    threads = SHARED + [f"p{wid}"]
    fd = os.open(ackpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    go.wait()
    failures = 0
    for i in range(m):
        t = rnd.choice(threads)
        text = f"w{wid}-m{i}"
        for _attempt in range(500):
            try:
                payload = hist.get(t) + [user(text)]
                r = convgit.commit(repo, {"messages": payload}, thread=t)
            except (errors.DuplicateConflict, errors.RefStale):
                continue  # another writer moved the thread: read it again and retry
            except Exception as e:  # noqa: BLE001 - counted; the real gc must cause none
                failures += 1
                os.write(fd, (json.dumps(["error", wid, type(e).__name__, str(e)[:200]]) + "\n").encode())
                if failures >= 3:  # broken: stop early (the check at the end says why)
                    return
                continue
            # acknowledged: written only after the call returned
            os.write(fd, (json.dumps(["ack", t, r.tip, text]) + "\n").encode())
            if progress is not None:
                with progress.get_lock():
                    progress.value += 1
            break
    os.close(fd)


def _break_gc() -> None:
    """The mutation (in the gc process only): a naive gc. No store lock; no grace at all (every
    unreachable object is prunable whatever its age: --prune=now with its clock an hour ahead,
    so not even objects written during the run count as young); and refs read before objects
    are listed, so an object written and referenced in between looks unreachable."""
    gc_mod = importlib.import_module("convgit.gc")  # (convgit.gc is also a function)

    Repository.exclusive_lock = lambda self, timeout=None: contextlib.nullcontext()  # type: ignore[method-assign]
    real_run, real_roots = gc_mod._run, gc_mod._roots

    def run_with_early_refs(repo, stats, grace, now, dry_run, progress=None):
        early = real_roots(repo, now, repo.config.reflog_expire_days * 86400)
        gc_mod._roots = lambda *a: early
        try:
            return real_run(repo, stats, grace, now + 3600, dry_run, progress)
        finally:
            gc_mod._roots = real_roots

    gc_mod._run = run_with_early_refs


def _gc_loop(root: str, stop, countpath: str, broken: bool, progress, total: int, target: int) -> None:
    """gc in a loop, paced by the writers' progress: one run each time another 1/target of
    the commits is acknowledged (an iteration count, not a duration), until they finish."""
    if broken:
        _break_gc()
    repo = Repository.open(root)
    runs = skipped = failed = pruned = 0
    k = 0
    while not stop.is_set():
        while progress.value < k * total // target and not stop.is_set():
            time.sleep(0.002)
        if stop.is_set():
            break
        k += 1
        try:
            s = gc(repo, prune="now" if broken else None)
            runs += s.status == "done"
            skipped += s.status == "skipped"
            pruned += s.pruned
        except Exception as e:  # the broken variant races writers; count and go on
            failed += 1
            Path(countpath + ".err").write_text(repr(e))
            repo.close()
            repo = Repository.open(root)
    Path(countpath).write_text(json.dumps({"runs": runs, "skipped": skipped, "failed": failed, "pruned": pruned}))


def run_commits_with_gc(root: Path, *, writers: int, commits: int, seed: int, broken_gc: bool,
                        gc_runs: int = 30) -> dict:
    """Run the T3.1 workload; returns the figures and the list of invariant violations."""
    acks = [root.parent / f"acks-{w}.jsonl" for w in range(writers)]
    go, stop, progress = CTX.Event(), CTX.Event(), CTX.Value("i", 0)
    procs = [CTX.Process(target=_committer, args=(str(root), w, commits, str(acks[w]), seed, go, progress))
             for w in range(writers)]
    gcp = CTX.Process(target=_gc_loop, args=(str(root), stop, str(root.parent / "gc.json"), broken_gc, progress,
                                             writers * commits, gc_runs))
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    gcp.start()
    go.set()
    deadline = time.monotonic() + 240
    for p in procs:
        p.join(max(1, deadline - time.monotonic()))
    stop.set()
    gcp.join(max(1, deadline + 30 - time.monotonic()))
    elapsed = time.perf_counter() - t0
    hung = [p for p in procs + [gcp] if p.is_alive()]
    for p in hung:
        p.kill()
        p.join()
    assert not hung, f"{len(hung)} process(es) still running after {elapsed:.0f}s (deadlock or starvation), seed={seed}"
    crashes = [f.with_name(f.name + ".crash").read_text() for f in acks if f.with_name(f.name + ".crash").exists()]
    assert not crashes, crashes[0]
    assert all(p.exitcode == 0 for p in procs + [gcp]), [p.exitcode for p in procs + [gcp]]
    gcs = json.loads((root.parent / "gc.json").read_text())
    return {"seconds": round(elapsed, 1), "gc": gcs, **check_acks(root, acks, writers)}


def check_acks(root: Path, ack_files: list[Path], writers: int) -> dict:
    """0 lost, 0 duplicated, each chain = its acked set in each writer's order, fsck clean."""
    acked: dict[str, list[str]] = {}
    n_acks = worker_errors = 0
    for f in ack_files:
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec[0] == "ack":
                acked.setdefault(rec[1], []).append(rec[3])
                n_acks += 1
            else:
                worker_errors += 1
    problems: list[str] = []
    with Repository.open(root) as repo:
        refs = repo.refs.read_all()
        for t in sorted(set(acked) | set(refs)):
            try:
                texts = chain_texts(repo, refs.get(t))
            except errors.ConvgitError as e:
                problems.append(f"thread {t}: unreadable: {e.message}")
                continue
            want = set(acked.get(t, []))
            lost = want - set(texts)
            extra = set(texts) - want
            dup = len(texts) - len(set(texts))
            if lost:
                problems.append(f"thread {t}: {len(lost)} acknowledged commit(s) lost, e.g. {sorted(lost)[:3]}")
            if extra:
                problems.append(f"thread {t}: {len(extra)} unacknowledged message(s)")
            if dup:
                problems.append(f"thread {t}: {dup} duplicated message(s)")
            for w in range(writers):
                seq = [int(x.split("-m")[1]) for x in texts if x.startswith(f"w{w}-")]
                if seq != sorted(seq):
                    problems.append(f"thread {t}: writer {w}'s commits out of order")
        # objects, refs, reflogs, packs (the index agreeing with a rebuild is T6.4's check)
        problems += [f"fsck: {e}" for e in fsck_errors(repo, check_index=False)]
    return {"acks": n_acks, "worker_errors": worker_errors, "problems": problems}


def _store_with_index(parent: Path) -> Path:
    """A fresh store whose index exists (so the writers do not all build it at once: that race
    is the index tests' business, T6.4)."""
    repo = new_store(parent, fsync=False)
    repo.index
    repo.close()
    return repo.path


@pytest.mark.serial
def test_4_writers_x_250_commits_with_gc_looping_lose_nothing(shm_tmp, fast_env, capsys):
    root = _store_with_index(Path(shm_tmp) / "s")
    res = run_commits_with_gc(root, writers=4, commits=250, seed=SEED, broken_gc=False)
    with capsys.disabled():
        print(f"\n[T3.1] seed={SEED}: {res['acks']} acked commits, gc {res['gc']}, {res['seconds']}s")
    assert res["problems"] == [], f"seed={SEED}: {res}"
    assert res["acks"] == 1000 and res["worker_errors"] == 0, res
    assert res["gc"]["runs"] >= 20, f"only {res['gc']} gc runs overlapped the writers (seed={SEED})"


@pytest.mark.serial
def test_mutation_naive_gc_without_lock_and_grace_loses_commits(shm_tmp, fast_env, capsys):
    """The same workload against a naive gc (no store lock, no grace, refs read before objects
    are listed: see _break_gc) must fail the check.

    (No lock plus --prune=now alone loses nothing here: gc never prunes an object newer than its
    own start, and it lists objects before it reads refs, so only a writer stalled between its
    object write and its ref move for longer than that gap could lose a commit.)"""
    root = _store_with_index(Path(shm_tmp) / "s")
    res = run_commits_with_gc(root, writers=4, commits=250, seed=SEED, broken_gc=True)
    with capsys.disabled():
        print(f"\n[T3.1-M] seed={SEED}: {res['acks']} acked, {res['worker_errors']} writer errors, gc {res['gc']}, "
              f"{len(res['problems'])} violation(s): {res['problems'][:3]}")
    assert res["problems"], f"the broken gc went unnoticed (seed={SEED}): {res}"


# -- T3.2: deterministic interleavings ------------------------------------------------------


def _abandoned_store(tmp_path):
    """A store whose thread 'old' was deleted: its messages are unreachable and 15 days old."""
    repo = new_store(tmp_path / "s")
    convgit.commit(repo, {"messages": [user("keep 1"), user("keep 2")]}, thread="keep", now_ms=NOW)
    old = convgit.commit(repo, {"messages": [user("old 1"), user("old 2")]}, thread="old", now_ms=NOW)
    convgit.delete_thread(repo, "old")
    age_tree(repo.path, 15 * 86400)
    return repo, old.tip


def _gc_between_objects_and_ref(monkeypatch, repo, gc_call):
    """Run ``gc_call`` at the commit's crash point ``commit_after_objects`` (after its objects
    are written and durable, before its ref moves)."""
    commit_mod = importlib.import_module("convgit.commit")  # (convgit.commit is also a function)

    ran = []

    def hook(name):
        if name == "commit_after_objects" and not ran:
            ran.append(gc_call())

    monkeypatch.setattr(commit_mod, "crash_point", hook)
    return ran


def test_t6501_commit_on_an_old_abandoned_parent_survives_a_gc_in_between(tmp_path, monkeypatch):
    """Layer 2 (freshen + grace): gc runs without the store lock between the object writes and
    the ref move; the re-put old parent was freshened, so gc keeps it and what it reaches."""
    repo, old_tip = _abandoned_store(tmp_path)
    nolock = contextlib.nullcontext

    def gc_without_lock():
        with monkeypatch.context() as m:
            m.setattr(Repository, "exclusive_lock", lambda self, timeout=None: nolock())
            return gc(repo)  # default grace: two weeks

    ran = _gc_between_objects_and_ref(monkeypatch, repo, gc_without_lock)
    r = convgit.commit(repo, {"messages": [user("old 1"), user("old 2"), user("new 3")]}, thread="revived", now_ms=NOW + 1)
    assert ran and ran[0].status == "done"
    with Repository.open(repo.path) as fresh:
        assert chain_texts(fresh, fresh.refs.read("revived")) == ["old 1", "old 2", "new 3"]
        assert graph.read_message(fresh.objects, r.tip).parent == old_tip
        assert fsck_errors(fresh) == []


def test_mutation_t6501_gc_that_keeps_young_objects_but_not_their_ancestry(tmp_path, monkeypatch):
    """The same interleaving against a gc that keeps young objects but not what they reach:
    the old parent is pruned and the new commit's history is broken."""
    gc_mod = importlib.import_module("convgit.gc")  # (convgit.gc is also a function)

    repo, old_tip = _abandoned_store(tmp_path)
    real = gc_mod.mark_reachable
    # gc calls mark_reachable with a list of roots, then with the set of young objects
    monkeypatch.setattr(gc_mod, "mark_reachable", lambda objects, roots, on_missing=None, visit=None:
                        set(roots) if isinstance(roots, set) else real(objects, roots, on_missing=on_missing, visit=visit))

    def gc_without_lock():
        with monkeypatch.context() as m:
            m.setattr(Repository, "exclusive_lock", lambda self, timeout=None: contextlib.nullcontext())
            return gc(repo)

    _gc_between_objects_and_ref(monkeypatch, repo, gc_without_lock)
    assert not _revived_ok(repo, ["old 1", "old 2", "new 3"])


def _revived_ok(repo, texts) -> bool:
    try:
        convgit.commit(repo, {"messages": [user(t) for t in texts]}, thread="revived", now_ms=NOW + 1)
    except errors.ConvgitError:
        return False
    with Repository.open(repo.path) as fresh:
        try:
            return chain_texts(fresh, fresh.refs.read("revived")) == texts and not fsck_errors(fresh, check_index=False)
        except errors.ConvgitError:
            return False


def _reput_gc_then_ref(repo, old_tip) -> bool:
    """Re-put the old (aged, unreachable) tip as a writer that has it would, then a gc without
    the lock, then point a thread at it: is the thread readable afterwards?"""
    data = repo.objects.read_bytes(old_tip)
    repo.objects.write_raw(old_tip, data)  # exists: freshened, not rewritten
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Repository, "exclusive_lock", lambda self, timeout=None: contextlib.nullcontext())
        gc(repo)
    try:
        repo.refs.update("revived", old_tip, expected=None, exists=repo.objects.contains)
    except errors.ConvgitError:
        return False
    with Repository.open(repo.path) as fresh:
        try:
            return chain_texts(fresh, fresh.refs.read("revived")) == ["old 1", "old 2"] and not fsck_errors(fresh, check_index=False)
        except errors.ConvgitError:
            return False


def test_t6501_reput_of_an_old_identical_object_is_freshened(tmp_path):
    """Variant (b): re-putting an existing old object refreshes its mtime, so a gc before the
    ref moves keeps it (and what it reaches)."""
    repo, old_tip = _abandoned_store(tmp_path)
    assert _reput_gc_then_ref(repo, old_tip)


def test_mutation_t6501_without_freshen_the_reput_object_is_pruned(tmp_path, monkeypatch):
    repo, old_tip = _abandoned_store(tmp_path)
    monkeypatch.setattr(fsio, "freshen", lambda path: os.path.exists(path))  # found, but mtime left old
    assert not _reput_gc_then_ref(repo, old_tip)


def _gc_in_other_process(root: Path, queue) -> None:
    """gc with a short lock timeout, from another process, with everything aged 15 days."""
    os.environ["CONVGIT_LOCK_TIMEOUT"] = "0.3"
    age_tree(root, 15 * 86400)
    try:
        s = gc(Repository.open(root))
        queue.put(s.status)
    except errors.Locked:
        queue.put("locked")


def test_gc_cannot_run_between_a_commits_objects_and_its_ref_move(tmp_path, monkeypatch):
    """Layer 1 (the lock): with the writer's objects aged past the grace, a gc from another
    process started between object write and ref move cannot take the store lock."""
    repo = new_store(tmp_path / "s")
    convgit.commit(repo, {"messages": [user("base")]}, thread="t", now_ms=NOW)
    q = CTX.Queue()

    def other_gc():
        p = CTX.Process(target=_gc_in_other_process, args=(repo.path, q))
        p.start()
        p.join(30)
        return q.get(timeout=5)

    ran = _gc_between_objects_and_ref(monkeypatch, repo, other_gc)
    r = convgit.commit(repo, {"messages": [user("base"), user("next")]}, thread="t", now_ms=NOW + 1)
    assert ran == ["locked"]
    with Repository.open(repo.path) as fresh:
        assert chain_texts(fresh, fresh.refs.read("t")) == ["base", "next"] and fresh.refs.read("t") == r.tip
        assert fsck_errors(fresh) == []


def test_mutation_without_the_lock_gc_prunes_the_commit_in_flight(tmp_path, monkeypatch):
    repo = new_store(tmp_path / "s")
    convgit.commit(repo, {"messages": [user("base")]}, thread="t", now_ms=NOW)

    def unlocked_gc():  # the mutation: gc takes no lock (in this process), grace as configured
        with monkeypatch.context() as m:
            m.setattr(Repository, "exclusive_lock", lambda self, timeout=None: contextlib.nullcontext())
            age_tree(repo.path, 15 * 86400)
            return gc(repo).status

    _gc_between_objects_and_ref(monkeypatch, repo, unlocked_gc)
    acked = True
    try:
        convgit.commit(repo, {"messages": [user("base"), user("next")]}, thread="t", now_ms=NOW + 1)
    except errors.ConvgitError:
        acked = False  # refused because its object vanished: not lost, but the commit failed
    with Repository.open(repo.path) as fresh:
        ok = acked and not fsck_errors(fresh, check_index=False)
        try:
            ok = ok and chain_texts(fresh, fresh.refs.read("t")) == ["base", "next"]
        except errors.ConvgitError:
            ok = False
    assert not ok, "gc without the lock should have broken the commit in flight"


# -- T3.3: gc fails closed ------------------------------------------------------------------


def _populated(tmp_path):
    repo = new_store(tmp_path / "s")
    convgit.commit(repo, {"messages": [user("a1"), user("a2")]}, thread="a", now_ms=NOW)
    gc(repo)  # a pack (for the damaged-pack cases)
    convgit.commit(repo, {"messages": [user("b1"), user("b2")]}, thread="b", now_ms=NOW)  # loose
    convgit.commit(repo, {"messages": [user("gone")]}, thread="doomed", now_ms=NOW)
    convgit.delete_thread(repo, "doomed")  # something gc --prune=now would delete
    age_tree(repo.path, 30 * 86400)
    return repo


def _missing_oid():
    return "ab" * 32


def _tip(store: Path, thread: str) -> str:
    """A thread's tip (packed by gc: there may be no loose ref file to read)."""
    with Repository.open(store) as r:
        return r.refs.read(thread)


FAIL_CLOSED = {
    "garbage_ref": lambda s: (s / "refs/threads/x").write_text("not an id\n"),
    "empty_ref": lambda s: (s / "refs/threads/x").write_bytes(b""),
    "dangling_ref": lambda s: (s / "refs/threads/x").write_text(_missing_oid() + "\n"),
    "bad_name_ref": lambda s: (s / "refs/threads/x..y").write_text(_tip(s, "a") + "\n"),
    "dangling_symlink_ref": lambda s: os.symlink(s / "nowhere", s / "refs/threads/x"),
    "garbage_reflog_line": lambda s: open(s / "logs/refs/threads/a", "a").write("this is not a reflog line\n"),
    "reflog_names_missing_turn": lambda s: open(s / "logs/refs/threads/a", "a").write(
        f"{'0' * 64} {_tip(s, 'a')} {NOW} {_missing_oid()}\tforged\n"),
    "missing_reachable_object": lambda s: _drop_parent_of(s, "b"),
    "damaged_pack_index": lambda s: _damage_an_index(s),
    "missing_pack_file": lambda s: [p.unlink() for p in (s / "objects/pack").glob("*.pack")],
}


def _damage_an_index(store: Path) -> None:
    idx = next((store / "objects/pack").glob("*.idx"))
    data = bytearray(idx.read_bytes())
    data[-40] ^= 0x01  # in the trailer: lookups still work, the checksum does not match
    os.chmod(idx, 0o644)
    idx.write_bytes(bytes(data))


def _drop_parent_of(store: Path, thread: str) -> None:
    with Repository.open(store) as r:
        parent = chain(r, r.refs.read(thread))[0]
    (store / "objects" / parent[:2] / parent[2:]).unlink()


@pytest.mark.parametrize("case", list(FAIL_CLOSED))
def test_gc_fails_closed_and_deletes_nothing(tmp_path, case):
    repo = _populated(tmp_path)
    FAIL_CLOSED[case](repo.path)
    before = tree_snapshot(repo.path)
    with Repository.open(repo.path) as r:
        with pytest.raises(errors.GcRefused) as e:
            gc(r, prune="now")
        assert e.value.exit_code == 33
    assert tree_snapshot(repo.path) == before


@pytest.mark.parametrize("case", ["dangling_ref", "missing_reachable_object"])
def test_mutation_gc_that_skips_bad_refs_deletes_data(tmp_path, monkeypatch, case):
    """A gc that ignores what it cannot read (treats the ref as absent, the object as a leaf)
    deletes objects: the snapshot check above would catch it."""
    gc_mod = importlib.import_module("convgit.gc")  # (convgit.gc is also a function)

    repo = _populated(tmp_path)
    FAIL_CLOSED[case](repo.path)
    before = tree_snapshot(repo.path)
    real_roots = gc_mod._roots

    def lenient_roots(repo, now, expire_s):
        bad = repo.path / "refs/threads/x"
        saved = bad.read_bytes() if bad.exists() else None
        if saved is not None:
            bad.unlink()
        try:
            return real_roots(repo, now, expire_s)
        finally:
            if saved is not None:
                bad.write_bytes(saved)

    monkeypatch.setattr(gc_mod, "_roots", lenient_roots)
    real_mark = gc_mod.mark_reachable
    monkeypatch.setattr(gc_mod, "mark_reachable", lambda objects, roots, on_missing=None, visit=None:
                        real_mark(objects, roots, on_missing=lambda o, b: None, visit=visit))
    with Repository.open(repo.path) as r:
        try:
            gc(r, prune="now")
        except errors.GcRefused:
            pass
    assert tree_snapshot(repo.path) != before


# -- T3.5: two gcs at once ------------------------------------------------------------------


def _slow_gc(root: str, go, q) -> None:
    gc_mod = importlib.import_module("convgit.gc")  # (convgit.gc is also a function)

    def slow(name):  # hold the gc lock long enough for the other to try
        if name == "gc_after_mark":
            time.sleep(0.5)

    gc_mod.crash_point = slow
    repo = Repository.open(root)
    go.wait()
    try:
        q.put(gc(repo).status)
    except Exception as e:  # noqa: BLE001 - reported to the test
        q.put(f"error: {e!r}")


@pytest.mark.serial
def test_two_gcs_at_once_one_runs_one_skips(tmp_path):
    repo = new_store(tmp_path / "s", fsync=False)
    for i in range(5):
        convgit.commit(repo, {"messages": [user(f"m{i}")]}, thread=f"t{i}", now_ms=NOW)
    go, q = CTX.Event(), CTX.Queue()
    ps = [CTX.Process(target=_slow_gc, args=(str(repo.path), go, q)) for _ in range(2)]
    for p in ps:
        p.start()
    go.set()
    for p in ps:
        p.join(60)
    assert sorted(q.get(timeout=5) for _ in ps) == ["done", "skipped"]
    with Repository.open(repo.path) as r:
        assert fsck_errors(r) == []
