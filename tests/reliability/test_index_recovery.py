"""T6: the derived index. Whatever happens to ``index.sqlite`` (deleted, empty, a garbage
header, cut in half, a page zeroed, or stale because a commit was killed before updating it), a
fixed battery of CLI queries (--json) answers byte for byte as before; and 4 processes
committing at once never fail (no "database is locked") and leave an index equal to a rebuild.

(tests/test_index.py compares the library's answers over a wider damage matrix; this is the
CLI-level battery and the concurrency half.)
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import random
from pathlib import Path

import pytest

import convgit
from convgit.index import Index
from convgit.objects import TEXT_BLOB_THRESHOLD
from convgit.repository import Repository

from .helpers import NOW, cli_env, cli_json, new_store, run_cli, user

CTX = multiprocessing.get_context("fork")
SEED = int(os.environ.get("CONVGIT_TEST_SEED", "20240515"))
LONG = "A long message.\n" + "0123456789 ✓ " * (TEXT_BLOB_THRESHOLD // 10)


def build_corpus(repo) -> list[str]:
    """Threads of every kind: forks, nested names, calls with models, a blob-sized message,
    an attachment, a stateless continuation, a rename and a delete. Returns the thread names."""
    t = NOW
    rnd = random.Random(7)

    def c(data, **kw):
        nonlocal t
        t += 1000
        return convgit.commit(repo, data, now_ms=t, **kw)

    base = [user("What is convgit?"), {"role": "assistant", "content": "Git for conversations."}]
    c({"messages": base}, thread="main")
    for i in range(4):
        c({"messages": _hist(repo, "main") + [user(f"main q{i}")],
           "response": {"role": "assistant", "content": f"main a{i}"}, "model": "gpt-4o",
           "usage": {"prompt_tokens": 10 + i, "completion_tokens": 3}, "duration_ms": 100 + i})
    convgit.fork(repo, "main~3", "alt", now_ms=t + 1)
    c({"messages": _hist(repo, "alt") + [user("another angle")]}, thread="alt")
    c({"messages": [user(LONG)], "response": {"role": "assistant", "content": "ok"}, "model": "claude-x"})
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(64)).decode()
    c({"messages": [user("look"), {"role": "user", "content": [
        {"type": "text", "text": "this"}, {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}]}]},
      thread="team/images")
    for i in range(8):
        msgs = [user(f"topic {i}")] + [user(f"topic {i} turn {j} {rnd.random():.6f}") for j in range(rnd.randint(1, 6))]
        c({"messages": msgs}, thread=f"team/t{i}")
    c({"messages": _hist(repo, "team/t0") + [user("stateless continuation")]})  # no thread named
    c({"messages": [user("to be renamed")]}, thread="old-name")
    convgit.rename_thread(repo, "old-name", "renamed")
    c({"messages": [user("to be deleted")]}, thread="doomed")
    convgit.delete_thread(repo, "doomed")
    convgit.switch(repo, "alt")
    return sorted(repo.refs.read_all())


def _hist(repo, thread):
    from .helpers import history

    return history(repo, thread)


def battery(store: Path, names: list[str]) -> list[tuple[str, int, str]]:
    """The fixed query battery: (query, exit code, stdout) for each."""
    queries = [["log", n, "--json"] for n in names]
    queries += [
        ["threads", "--json"],
        ["log", "--all", "--json"],
        ["log", "main", "-n", "2", "--reverse", "--json"],
        ["show", "main", "--json"],
        ["show", "team/images", "--json"],
        ["show", "--json"],  # HEAD
        ["rev-parse", "main~2", "alt", "team/t3~1", "--json"],
        ["show-ref", "--json"],
        ["log", "--all", "--graph"],
        ["log", "alt", "--oneline"],
    ]
    out = []
    for q in queries:
        rc, stdout = cli_json(q, store=store)
        out.append((" ".join(q), rc, stdout))
    tip = json.loads(cli_json(["rev-parse", "main", "--json"], store=store)[1])
    rc, stdout = cli_json(["cat-object", tip, "--json"], store=store)
    out.append((f"cat-object {tip}", rc, stdout))
    return out


@pytest.fixture
def corpus(tmp_path, fast_env):
    repo = new_store(tmp_path / "proj", fsync=False)
    names = build_corpus(repo)
    path = repo.path
    repo.close()
    base = battery(path, names)
    assert len(base) >= 20 and all(rc == 0 for _, rc, _ in base), [q for q, rc, _ in base if rc]
    return path, names, base


def _page_size(p: Path) -> int:
    size = int.from_bytes(p.read_bytes()[16:18], "big")
    return 65536 if size == 1 else size


def _zero_a_page(p: Path) -> None:
    data = bytearray(p.read_bytes())
    size = _page_size(p)
    n = len(data) // size
    assert n >= 4, "the index should span several pages"
    data[(n // 2) * size: (n // 2 + 1) * size] = bytes(size)
    p.write_bytes(bytes(data))


DAMAGE = {
    "deleted": lambda p: p.unlink(),
    "zero_bytes": lambda p: p.write_bytes(b""),
    "garbage_header": lambda p: p.write_bytes(b"not a database, only garbage!!!!" * 4 + p.read_bytes()[128:]),
    "half_truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "page_zeroed": _zero_a_page,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_index_answers_the_battery_byte_for_byte(corpus, damage):
    store, names, base = corpus
    DAMAGE[damage](store / "index.sqlite")
    again = battery(store, names)
    assert [q for (q, *a), (_, *b) in zip(base, again) if a != b] == []
    assert again == base


def test_mutation_an_index_that_is_not_rebuilt_answers_differently(corpus, monkeypatch):
    """Power check: if a damaged index were trusted (its schema check disabled and an empty
    file taken as a valid, empty index), the battery would see it."""
    store, names, base = corpus
    (store / "index.sqlite").write_bytes(b"")
    import convgit.index as index_mod

    def trusting(self):
        import sqlite3

        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.executescript(index_mod.SCHEMA)
        return db

    monkeypatch.setattr(index_mod.Index, "_open_valid", trusting)
    monkeypatch.setattr(index_mod.Index, "refresh", lambda self: None)
    monkeypatch.setattr(index_mod.Index, "refresh_if_changed", lambda self: None)
    try:
        again = battery(store, names)
    except Exception:  # noqa: BLE001 - a crash is also "answers differently"
        return
    assert again != base


def test_a_stale_index_after_a_commit_killed_before_its_index_update_catches_up(corpus, tmp_path):
    """CONVGIT_CRASH_AT=commit_before_index through the real CLI: the ref moved, the index did
    not. The next queries catch up and equal a full rebuild; the new message is there."""
    store, names, base = corpus
    payload = json.dumps([user("topic 5"), user("killed before the index saw me")])
    r = run_cli(["commit", "-", "--thread", "team/new", "--json"], store=store,
                env=cli_env(tmp_path, CONVGIT_CRASH_AT="commit_before_index", CONVGIT_FSYNC="0"), input=payload)
    assert r.returncode == 137, r.stderr
    names2 = names + ["team/new"]
    caught_up = battery(store, names2)
    assert all(rc == 0 for _, rc, _ in caught_up)
    log_new = json.loads(dict((q, out) for q, _, out in caught_up)["log team/new --json"])
    assert [e["text"] for e in log_new] == ["killed before the index saw me", "topic 5"]
    (store / "index.sqlite").unlink()
    assert battery(store, names2) == caught_up


# -- T6.4: concurrent writers -------------------------------------------------------------------


def _writer(root: str, wid: int, n: int, errpath: str, go) -> None:
    import traceback

    repo = Repository.open(root)
    rnd = random.Random(SEED + wid)
    go.wait()
    errs = []
    for i in range(n):
        t = rnd.choice(["shared", f"own{wid}"])
        for _ in range(100):
            try:
                convgit.commit(repo, {"messages": _hist(repo, t) + [user(f"w{wid} {i}")]}, thread=t,
                               model=f"model-{wid}")
                break
            except (convgit.errors.DuplicateConflict, convgit.errors.RefStale):
                continue  # the other writers moved the shared thread
            except Exception as e:  # noqa: BLE001 - every other failure is reported
                errs.append(f"{type(e).__name__}: {e}\n{traceback.format_exc()[-600:]}")
                break
    Path(errpath).write_text(json.dumps(errs))


def _race(tmp_path: Path, writers: int = 4, commits: int = 40) -> None:
    """A fresh store (no index yet), ``writers`` processes committing to a shared and their
    own threads; then the index must equal a rebuild (its rows, its running totals, and no
    reachable message held as unreachable: Index.dump)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    root = new_store(tmp_path / "s", fsync=False).path
    go = CTX.Event()
    errfiles = [tmp_path / f"err{w}.json" for w in range(writers)]
    ps = [CTX.Process(target=_writer, args=(str(root), w, commits, str(errfiles[w]), go)) for w in range(writers)]
    for p in ps:
        p.start()
    go.set()
    for p in ps:
        p.join(120)
    assert all(p.exitcode == 0 for p in ps), [p.exitcode for p in ps]
    errs = [e for f in errfiles for e in json.loads(f.read_text())]
    locked = [e for e in errs if "locked" in e]
    assert locked == [], f"{len(locked)} commit(s) failed on a locked database: {locked[0][:800]}"
    assert errs == [], f"{len(errs)} commit(s) failed: {errs[0][:1500]}"
    with Repository.open(root) as repo:
        repo.index.refresh()
        have = repo.index.dump()
        fresh = Index(repo, path=tmp_path / "fresh.sqlite", autorefresh=False)
        want = fresh.dump()
        fresh.close()
    diff = {k: (len(want[k]), len(have.get(k, []))) for k in want if want[k] != have.get(k)}
    sample = {k: ([(a, b) for a, b in zip(want[k], have.get(k, [])) if a != b][:2]
                  if isinstance(want[k], list) else (want[k], have.get(k))) for k in diff}
    assert diff == {}, f"incremental index differs from a rebuild in {diff}: {sample}"


@pytest.mark.serial
def test_4_processes_committing_never_fail_and_the_index_equals_a_rebuild(tmp_path, fast_env):
    """A fresh store (no index yet), 4 processes committing to a shared and their own threads."""
    _race(tmp_path)


@pytest.mark.slow
@pytest.mark.serial
def test_soak_6_processes_committing_20_times_leave_the_index_equal_to_a_rebuild(tmp_path, fast_env):
    """The race above, 20 times with 6 writers: before issue 10's fix (a refresh catching up
    to tips read before another writer's indexed move; reach stopping at a new message above
    an unreachable one) about 4 runs in 10 ended with reachable messages held as unreachable
    and the running totals short of a rebuild's (scripts/repro_totals_drift.py)."""
    for i in range(20):
        _race(tmp_path / f"run{i}", writers=6)
