"""``commit_many`` moving a thread several times in one batch (convgit serve's group commit):
one compare-and-swap per thread whose reflog still has a line per commit, trusted thread
names per payload, and a crash before the rename leaving only lines the serve drain ignores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import convgit
from convgit.commit import commit_many
from convgit.serve.recorder import real_turns

from helpers.store import NOW, conv

ROOT = Path(__file__).resolve().parent.parent


def _growing(k: int, n: int) -> list[dict]:
    """``n`` calls of conversation ``k``, each re-sending the history plus one exchange."""
    out, texts = [], [f"c{k} first", f"c{k} answer"]
    for i in range(n):
        out.append({"messages": conv(*texts)})
        texts += [f"c{k} q{i}", f"c{k} a{i}"]
    return out


def _state(repo) -> tuple:
    logs = {n: [(e.old, e.new, e.turn, e.message) for e in repo.refs.read_log(n)] for n in repo.refs.read_all()}
    return repo.refs.read_all(), logs, convgit.threads(repo)


def test_a_thread_moved_several_times_in_one_batch_has_a_reflog_line_per_commit(tmp_path):
    # 3 conversations x 4 calls, interleaved: with fsync on and more than 3 moves the batch
    # path is taken, each thread moved once. The result must be what 12 commits one by one give.
    docs = [d for i in range(4) for d in (_growing(k, 4)[i] for k in range(3))]
    a, b = convgit.init(tmp_path / "a"), convgit.init(tmp_path / "b")
    seq = [convgit.commit(a, d, now_ms=NOW) for d in docs]
    bulk = convgit.commit_many(b, docs, now_ms=NOW)
    assert [(r.status, r.thread, r.tip, r.new_messages, r.turn) for r in bulk] == \
        [(r.status, r.thread, r.tip, r.new_messages, r.turn) for r in seq]
    assert _state(b) == _state(a)
    refs, logs, _ = _state(b)
    assert len(refs) == 3
    for name, lines in logs.items():
        assert len(lines) == 4  # one line per commit, chained old -> new up to the tip
        assert [old for old, *_ in lines[1:]] == [new for _, new, *_ in lines[:-1]]
        assert lines[-1][1] == refs[name]
        assert real_turns(b, name) == [t for _, _, t, _ in lines if t]  # all of them happened
    assert b.index.dump() == a.index.dump()
    a.close()
    b.close()


def test_trusted_threads_per_payload_append_and_fork_in_one_batch(tmp_path):
    repo = convgit.init(tmp_path / "s")
    base = conv("hello", "hi", "more?", "yes")
    other = conv("hello", "hi", "something else", "ok")
    items = [{"messages": base[:2]}, {"messages": base}, {"messages": other}, {"messages": conv("x", "y")},
             {"messages": conv("x", "y", "z", "w")}]
    payloads = [convgit.api.to_payload(repo, d) for d in items]
    rs = commit_many(repo, payloads, threads=["work", "work", "work", None, None], on_conflict="fork", now_ms=NOW)
    assert [r.status for r in rs] == ["created", "appended", "forked", "created", "appended"]
    assert rs[0].thread == rs[1].thread == "work"
    assert rs[2].thread.startswith("work-fork-") and rs[2].forked_from["thread"] == "work"
    assert rs[3].thread == rs[4].thread != "work"
    refs = repo.refs.read_all()
    assert refs["work"] == rs[1].tip and refs[rs[2].thread] == rs[2].tip and refs[rs[4].thread] == rs[4].tip
    log = repo.refs.read_log("work")
    assert [(e.old, e.new) for e in log] == [(None, rs[0].tip), (rs[0].tip, rs[1].tip)]
    repo.close()


def test_a_crash_before_the_rename_leaves_lines_the_drain_does_not_count(tmp_path):
    # A child commits a batch that moves thread "t" three times (one rename), and dies after the
    # reflog lines are durable, before the rename. The lines name moves that never happened:
    # real_turns (the serve drain's dedup) must count none of them, before and after a later
    # real move of the thread.
    repo = convgit.init(tmp_path / "s")
    first = convgit.commit(repo, {"messages": conv("q0", "a0")}, thread="t", now_ms=NOW)
    for k in range(3):  # more threads, so the batch takes the batched path (4+ moves)
        convgit.commit(repo, {"messages": conv(f"o{k}", "x")}, thread=f"o{k}", now_ms=NOW)
    repo.close()
    script = f"""
import convgit
from convgit.commit import commit_many
from helpers.store import conv
repo = convgit.open_repo({str(tmp_path / 's')!r})
texts = ["q0", "a0"]
items, threads = [], []
for i in range(3):
    texts += [f"q{{i+1}}", f"a{{i+1}}"]
    items.append({{"messages": conv(*texts)}}); threads.append("t")
for k in range(3):
    items.append({{"messages": conv(f"o{{k}}", "x", "more", "y")}}); threads.append(f"o{{k}}")
commit_many(repo, [convgit.api.to_payload(repo, d) for d in items], threads=threads)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | {"CONVGIT_CRASH_AT": "ref_after_tmp_fsync"}
    p = subprocess.run([sys.executable, "-c", script], cwd=str(ROOT / "tests"), env=env, capture_output=True, text=True)
    assert p.returncode == 137, p.stderr
    repo = convgit.open_repo(tmp_path / "s")
    assert repo.refs.read("t") == first.tip  # the rename never happened
    lines = repo.refs.read_log("t")
    assert len(lines) == 4  # the real creation + 3 phantom moves, chained among themselves
    assert real_turns(repo, "t") == [e.turn for e in lines[:1] if e.turn]
    # a real move from the real tip afterwards: still none of the phantom lines count
    r = convgit.commit(repo, {"messages": conv("q0", "a0", "later", "b")}, thread="t", now_ms=NOW)
    assert repo.refs.read("t") == r.tip
    log = repo.refs.read_log("t")
    assert len(log) == 5 and log[4].old == first.tip
    assert real_turns(repo, "t") == [log[0].turn, log[4].turn]
    # the index reads the same walk (issue 10's phantom turns): none of the three cut-short
    # steps' turns is on the thread, caught up or rebuilt
    repo.index.refresh_if_changed()
    live = repo.index.dump()
    on_t = {row[0] for row in live["turns"] if row[1] == "t"}
    assert on_t == {log[0].turn, log[4].turn}
    repo.index.rebuild()
    assert repo.index.dump() == live
    repo.close()
