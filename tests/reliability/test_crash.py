"""T4: process crashes.

- T4.1: 200 random ``kill -9`` of a forked worker doing commit 80% / fork 5% / merge 5% / gc 10%
  (delay U[0, 30] ms, seeded): after every kill fsck is clean, every acknowledged commit, fork
  and merge is readable where it was acknowledged, and the next commit succeeds with no manual
  unlock. Mutation: in-place ref writes (truncate, then write) must be caught.
- T4.3: every named crash point (``CONVGIT_CRASH_AT``), driven through the real CLI (exit 137):
  fsck clean, the operation invisible or complete (as the point's position says), merges all or
  nothing after the next writer's recovery, and the next commit and gc work.

The stores live on tmpfs when there is one, with fsync on (the kill tests exercise process-crash
atomicity: the page cache survives a kill, so durability is the power-loss tests' subject).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import time
import traceback
from collections import Counter
from pathlib import Path

import pytest

import convgit
from convgit import api, errors, fsio
from convgit.fsck import fsck
from convgit.gc import gc
from convgit.repository import Repository

from .helpers import NOW, age_tree, chain, cli_env, history, new_store, run_cli, user

SEED = int(os.environ.get("CONVGIT_TEST_SEED", "20240515"))
KILLS = int(os.environ.get("CONVGIT_TEST_KILLS", "200"))
THREADS = ("a", "b", "c")


# -- T4.1: kill -9 ----------------------------------------------------------------------------


def _in_place_ref_writes(refs_dir: str) -> None:
    """The mutation: refs rewritten in place (truncate, then write), with the short stall of a
    slow disk between the two."""
    real, real_rename = fsio.replace_file, fsio.rename

    def write_in_place(path, data):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            time.sleep(0.003)
            os.write(fd, data)
        finally:
            os.close(fd)

    def replace_file(path, data, *, fsync, tmp=None, point=None):
        if not str(path).startswith(refs_dir):
            return real(path, data, fsync=fsync, tmp=tmp, point=point)
        write_in_place(path, data)

    def rename(src, dst):  # a staged temp ref "renamed" by copying its content in place
        if not str(dst).startswith(refs_dir):
            return real_rename(src, dst)
        with open(src, "rb") as f:
            data = f.read()
        os.unlink(src)
        write_in_place(dst, data)

    fsio.replace_file = replace_file
    fsio.rename = rename


def _worker(root: str, source: str, seed: int, ackpath: str, broken: bool) -> None:
    """Run operations until killed; write an ack line after each one returns."""
    if broken:
        _in_place_ref_writes(os.path.join(root, "refs"))
    rnd = random.Random(seed)
    repo = Repository.open(root)
    fd = os.open(ackpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    n = 0
    while True:
        n += 1
        r = rnd.random()
        kind = "commit" if r < 0.80 else "fork" if r < 0.85 else "merge" if r < 0.90 else "gc"
        os.write(fd, (json.dumps(["start", kind]) + "\n").encode())
        if r < 0.80:
            t = rnd.choice(THREADS)
            res = convgit.commit(repo, {"messages": history(repo, t) + [user(f"k{seed}-{n}")]}, thread=t)
            ack = ["commit", t, res.tip, res.turn]
        elif r < 0.85:
            have = [t for t in THREADS if repo.refs.read(t)]
            if not have:
                continue
            res = convgit.fork(repo, rnd.choice(have), f"f{seed}-{n}")
            ack = ["fork", res.thread, res.tip, res.turn]
        elif r < 0.90:
            rep = api.merge(repo, source)
            ack = ["merge", [[e["as"], e["incoming"]] for e in rep.refs]]
        else:
            api.gc(repo, prune=rnd.choice(["now", None]))
            ack = ["gc"]
        os.write(fd, (json.dumps(ack) + "\n").encode())


def _check_after_kill(root: Path, ackpath: Path, k: int, *, full: bool) -> tuple[list[str], int]:
    """(problems, number of acks so far). Also makes the probe commit."""
    problems: list[str] = []
    acks = []
    if ackpath.exists():
        for line in ackpath.read_text().splitlines():
            try:
                acks.append(json.loads(line))
            except ValueError:
                pass  # a line cut by the kill: its operation had returned, we are lenient
    with Repository.open(root) as repo:
        rep = fsck(repo, check_index=full)
        problems += [f"fsck: {p.kind}: {p.message}" for p in rep.errors]
        try:
            refs = repo.refs.read_all()
        except errors.ConvgitError as e:
            return problems + [f"refs unreadable: {e.message}"], len(acks)
        history_of: dict[str, set] = {}

        def reaches(thread, oid) -> bool:
            if thread not in history_of:
                try:
                    history_of[thread] = set(chain(repo, refs.get(thread)))
                except errors.ConvgitError as e:
                    problems.append(f"thread {thread} unreadable: {e.message}")
                    history_of[thread] = set()
            return oid in history_of[thread]

        logged: dict[str, set] = {}
        for a in acks:
            if a[0] == "start":
                continue
            if a[0] in ("commit", "fork"):
                _, t, tip, turn = a
                if not reaches(t, tip):
                    problems.append(f"acknowledged {a[0]} {tip[:12]} on {t} lost")
                if turn:
                    if t not in logged:
                        logged[t] = {e.turn for e in repo.refs.read_log(t)}
                    if turn not in logged[t]:
                        problems.append(f"acknowledged turn {turn[:12]} of {t} missing from the reflog")
            elif a[0] == "merge":
                for thread, incoming in a[1]:
                    if not reaches(thread, incoming):
                        problems.append(f"acknowledged merge of {incoming[:12]} into {thread} lost")
        # the next commit succeeds, without any manual unlock (short lock timeout)
        try:
            convgit.commit(repo, {"messages": history(repo, "probe") + [user(f"probe {k}")]}, thread="probe")
        except errors.ConvgitError as e:
            problems.append(f"the next commit failed: {e.code}: {e.message}")
    return problems, len(acks)


def _wait_growth(path: Path, size: int, timeout: float) -> None:
    """Until ``path`` is longer than ``size`` bytes (or ``timeout`` seconds passed)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if path.stat().st_size > size:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.0005)


def kill_loop(root: Path, source: Path, *, kills: int, seed: int, broken: bool = False) -> dict:
    rnd = random.Random(seed)
    ackpath = root.parent / "acks.jsonl"
    errpath = root.parent / "worker-error.txt"
    src = Repository.open(source)
    stats = {"kills": 0, "acks": 0, "first_failure": None, "problems": []}
    try:
        for k in range(kills):
            size0 = ackpath.stat().st_size if ackpath.exists() else 0
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                try:
                    _worker(str(root), str(source), seed * 10_000 + k, str(ackpath), broken)
                except BaseException:
                    errpath.write_text(traceback.format_exc())
                finally:
                    os._exit(1)
            if k % 2:
                # Every other kill waits for the worker's first operation to start: on a slow or
                # loaded machine opening the store can take the whole window, and no kill would
                # land among the operations. The others may land in the open, as before.
                _wait_growth(ackpath, size0, 5.0)
            time.sleep(rnd.uniform(0, 0.030))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            stats["kills"] += 1
            if errpath.exists():
                stats["problems"] = [f"worker failed before the kill:\n{errpath.read_text()}"]
                stats["first_failure"] = k
                break
            problems, stats["acks"] = _check_after_kill(root, ackpath, k, full=(k % 10 == 9 or k == kills - 1))
            if problems:
                stats["problems"], stats["first_failure"] = problems, k
                break
            # the merge source moves on, so later merges have something to do
            t = ("m1", "m2")[k % 2]
            convgit.commit(src, {"messages": history(src, t) + [user(f"src {k}")]}, thread=t)
    finally:
        src.close()
    kinds, started, in_flight = Counter(), Counter(), Counter()
    if ackpath.exists():
        last = None
        for line in ackpath.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec[0] == "start":
                if last is not None:  # the previous op never finished: a kill landed in it
                    in_flight[last] += 1
                started[rec[1]] += 1
                last = rec[1]
            else:
                kinds[rec[0]] += 1
                last = None
        if last is not None:
            in_flight[last] += 1
    stats["ack_kinds"], stats["started"], stats["killed_in"] = dict(kinds), dict(started), dict(in_flight)
    return stats


@pytest.fixture
def kill_stores(shm_tmp, monkeypatch):
    monkeypatch.setenv("CONVGIT_LOCK_TIMEOUT", "5")
    root = new_store(Path(shm_tmp) / "main")  # fsync on
    root.index
    root.close()
    src = new_store(Path(shm_tmp) / "src", fsync=False)
    for t in ("m1", "m2"):
        convgit.commit(src, {"messages": [user(f"{t} root")]}, thread=t, now_ms=NOW)
    src.close()
    return root.path, src.path


@pytest.mark.serial
def test_200_random_kill_9_leave_a_valid_store_and_every_ack(kill_stores, capsys):
    root, source = kill_stores
    t0 = time.perf_counter()
    stats = kill_loop(root, source, kills=KILLS, seed=SEED)
    with capsys.disabled():
        print(f"\n[T4.1] seed={SEED}: {stats['kills']} kills, acks {stats['ack_kinds']}, started {stats['started']}, "
              f"kills landing mid-operation {stats['killed_in']}, {time.perf_counter() - t0:.1f}s")
    assert stats["problems"] == [], f"seed={SEED}, after kill {stats['first_failure']}: {stats['problems'][:5]}"
    assert stats["kills"] == KILLS
    assert sum(stats["ack_kinds"].values()) >= KILLS // 4, stats  # the workers got work done between kills
    assert all(stats["killed_in"].get(k, 0) > 0 for k in ("commit", "gc")), stats  # kills did land mid-commit and mid-gc


@pytest.mark.serial
def test_mutation_in_place_ref_writes_are_caught_by_the_kill_loop(kill_stores, capsys):
    root, source = kill_stores
    stats = kill_loop(root, source, kills=KILLS, seed=SEED, broken=True)
    with capsys.disabled():
        print(f"\n[T4.1-M] seed={SEED}: in-place ref writes caught after {stats['kills']} kill(s): "
              f"{stats['problems'][:2]}")
    assert stats["problems"], f"in-place ref writes survived {stats['kills']} kills (seed={SEED})"


# -- T4.3: named crash points through the CLI ---------------------------------------------------

# (operation, crash point, what is visible after the next writer: "none" or "all")
COMMIT_POINTS = [
    ("object_after_write", "none"), ("object_after_fsync", "none"), ("object_after_rename", "none"),
    ("commit_after_objects", "none"), ("ref_after_lock", "none"), ("ref_after_tmp_fsync", "none"),
    ("ref_after_rename", "all"), ("commit_after_ref", "all"), ("commit_before_index", "all"),
]
CASES = (
    [("commit", p, v) for p, v in COMMIT_POINTS]
    + [("commit_new", p, v) for p, v in COMMIT_POINTS]
    + [("fork", p, v) for p, v in [("object_after_rename", "none"), ("ref_after_lock", "none"),
                                    ("ref_after_tmp_fsync", "none"), ("ref_after_rename", "all")]]
    + [("gc", p, "all") for p in ("gc_after_mark", "gc_after_pack", "gc_mid_sweep", "pack_refs_after_tmp_fsync",
                                  "pack_refs_after_rename", "pack_refs_mid_prune", "pack_logs_after_tmp_fsync",
                                  "pack_logs_after_rename", "pack_logs_mid_prune", "gc_before_index")]
    + [("merge", p, v) for p, v in [
        ("merge_after_quarantine", "none"), ("merge_mid_migrate", "none"), ("merge_before_refs", "none"),
        # after the journal: the next writer finishes the merge
        ("ref_after_lock", "all"), ("ref_after_tmp_fsync", "all"), ("ref_after_rename", "all"),
        ("merge_mid_refs", "all")]]
    # after its intent file: the next writer finishes the rename
    + [("rename", "rename_after_intent", "all")]
    # an import continuing four packed threads: their lines rewritten in one packed-refs (§6.2)
    + [("import_packed", p, v) for p, v in [("ref_after_tmp_fsync", "none"), ("ref_after_rename", "all")]]
    # ... continuing four loose threads: packed-refs made, then their loose files unlinked
    + [("import_loose", p, v) for p, v in [("ref_after_tmp_fsync", "none"), ("ref_mid_unpack_loose", "none"),
                                            ("ref_after_rename", "all")]]
    # an import creating six threads straight in packed-refs and packed-logs (§6.3 Bulk creation)
    + [("import_new", p, v) for p, v in [("bulk_after_tmp_fsync", "none"), ("bulk_after_logs_rename", "none"),
                                          ("bulk_after_rename", "all")]]
)
# Points owned by other operations' tests (the importer's; push's: tests/test_remote.py kills a
# push there and resumes it, tests/test_remote_refsegments.py after its ref segment).
NOT_HERE = {"import_after_objects", "import_after_refs", "push_mid_pack", "push_after_pack", "push_refs_after_segments",
            # a fetch creating tracking refs packed at once: tests/test_remote_bulk.py kills it at both
            "bulk_logs_after_tmp_fsync", "bulk_refs_after_tmp_fsync",
            # a serve committer (thread or process) killed after a batch's commit, before the
            # spool's note, or before the calls' --json lines: tests/test_serve.py::test_a_committer_killed_...
            "serve_after_commit", "serve_before_lines"}


def test_every_named_crash_point_is_exercised():
    root = Path(convgit.__file__).parent
    names = set()
    for p in root.rglob("*.py"):
        names |= set(re.findall(r'crash_point\("([a-z_]+)"\)', p.read_text()))
        names |= set(re.findall(r'point="([a-z_]+)"', p.read_text()))
    covered = {p for _, p, _ in CASES}
    assert names - NOT_HERE <= covered, f"crash points without a test: {sorted(names - NOT_HERE - covered)}"
    assert covered <= names, f"tests for crash points that do not exist: {sorted(covered - names)}"


@pytest.fixture(scope="module")
def crash_base(tmp_path_factory):
    """The base store (a, b, a deleted thread aged past the grace, some of it packed) and a
    merge source (a fast-forward of a, two new threads)."""
    d = tmp_path_factory.mktemp("crashpoints")
    repo = new_store(d / "base")
    convgit.commit(repo, {"messages": [user("a0"), user("a1")]}, thread="a", now_ms=NOW)
    for j in range(4):  # packed by the gc below: import_packed continues them in one batch
        convgit.commit(repo, {"messages": [user(f"w{j} 0")]}, thread=f"w{j}", now_ms=NOW)
    gc(repo)
    convgit.commit(repo, {"messages": [user("b0")]}, thread="b", now_ms=NOW)
    for j in range(4):  # loose: import_loose continues them, moving them into packed-refs
        convgit.commit(repo, {"messages": [user(f"v{j} 0")]}, thread=f"v{j}", now_ms=NOW)
    convgit.commit(repo, {"messages": [user("old")]}, thread="old", now_ms=NOW)
    convgit.delete_thread(repo, "old")
    repo.close()
    age_tree(repo.path, 30 * 86400)
    src = new_store(d / "src", fsync=False)
    convgit.commit(src, {"messages": [user("a0"), user("a1"), user("a2 from src")]}, thread="a", now_ms=NOW)
    convgit.commit(src, {"messages": [user("n0")]}, thread="n1", now_ms=NOW)
    convgit.commit(src, {"messages": [user("x0")]}, thread="src/x", now_ms=NOW)
    src.close()
    env = cli_env(d)
    (d / "packed.jsonl").write_text("".join(json.dumps({"messages": [user(f"w{j} 0"), user(f"w{j} 1")]}) + "\n"
                                            for j in range(4)))
    (d / "loose.jsonl").write_text("".join(json.dumps({"messages": [user(f"v{j} 0"), user(f"v{j} 1")]}) + "\n"
                                           for j in range(4)))
    base = {"store": repo.path, "source": src.path, "env": env, "dir": d, "after": {}}
    (d / "new.jsonl").write_text("".join(json.dumps({"messages": [user(f"n{j} 0"), user(f"n{j} 1")], "source": "s",
                                                     "upstream_thread_id": f"n{j}"}) + "\n" for j in range(6)))
    for op in ("commit", "commit_new", "fork", "gc", "merge", "rename", "import_packed", "import_loose", "import_new"):
        store = _copy(base, d / f"ref-{op}")
        r = _run(base, op, store)
        assert r.returncode == 0, r
        with Repository.open(store) as s:
            base["after"][op] = s.refs.read_all()
            if op == "import_new":  # (created without a loose ref or reflog)
                made = [n for n in base["after"][op] if n.startswith("s/")]
                assert len(made) == 6 and not set(made) & set(s.refs._loose_names())
                assert not [n for n, _ in s.refs.iter_log_files() if n in made]
            elif op.startswith("import_"):  # (the packed path: moved without a loose ref, or out of it)
                assert not [n for n in s.refs._loose_names() if n[0] == ("w" if op == "import_packed" else "v")]
    with Repository.open(repo.path) as s:
        base["before"] = s.refs.read_all()
    return base


def _copy(base, dest: Path) -> Path:
    shutil.copytree(base["store"].parent, dest, symlinks=True)
    return dest / ".convgit"


def _run(base, op: str, store: Path, crash: str | None = None):
    env = dict(base["env"])
    if crash:
        env["CONVGIT_CRASH_AT"] = crash
    payload = {"commit": [user("a0"), user("a1"), user("a2 by commit")], "commit_new": [user("fresh")]}
    args = {
        "commit": ["commit", "-", "--thread", "a", "--json"],
        "commit_new": ["commit", "-", "--thread", "new/thread", "--json"],
        "fork": ["fork", "a", "forked", "--json"],
        "gc": ["gc", "--prune=now", "--json"],
        "merge": ["merge", str(base["source"]), "--json"],
        "rename": ["threads", "rename", "a", "renamed/a", "--json"],
        "import_packed": ["import", str(base["dir"] / "packed.jsonl"), "--json"],
        "import_loose": ["import", str(base["dir"] / "loose.jsonl"), "--json"],
        "import_new": ["import", str(base["dir"] / "new.jsonl"), "--json"],
    }[op]
    return run_cli(args, store=store, env=env, input=json.dumps(payload[op]) if op in payload else None)


@pytest.mark.parametrize("op,point,visible", CASES, ids=[f"{o}-{p}" for o, p, _ in CASES])
def test_crash_point_leaves_the_operation_invisible_or_complete(crash_base, tmp_path, monkeypatch, op, point, visible):
    monkeypatch.setenv("CONVGIT_LOCK_TIMEOUT", "5")
    store = _copy(crash_base, tmp_path / "case")
    before, after = crash_base["before"], crash_base["after"][op]
    r = _run(crash_base, op, store, crash=point)
    assert r.returncode == 137, f"{point} was not reached by {op}: rc={r.returncode} {r.stderr[-500:]!r}"
    with Repository.open(store) as repo:
        # 1. fsck clean (leftovers of the interrupted write are warnings), each ref old or new
        assert [p.message for p in fsck(repo).errors] == []
        refs = repo.refs.read_all()
        for name in set(refs) | set(before) | set(after):
            assert refs.get(name) in (before.get(name), after.get(name)), name
        # 2. the next writer: no manual unlock; it finishes an interrupted merge
        nxt = convgit.commit(repo, {"messages": [user("next")]}, thread="next-writer")
        refs = {n: t for n, t in repo.refs.read_all().items() if n != "next-writer"}
        assert refs == (after if visible == "all" else before), f"{op} at {point}: expected {visible}"
        assert repo.refs.read("next-writer") == nxt.tip
        assert not (repo.path / "merge-journal.json").exists()
        assert not (repo.path / "rename-intent.json").exists()
        for name, tip in refs.items():
            chain(repo, tip)  # every thread reads
        # 3. gc cleans up what the crash left, and the store is still sound
        gc(repo, prune="now")
        rep = fsck(repo)
        assert [p.message for p in rep.errors] == []
        assert not list((repo.path / "objects").glob("incoming-*"))
