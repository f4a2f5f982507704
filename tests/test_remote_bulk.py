"""Thousands of new refs at once (convgit/remotes/bulkrefs.py, docs/format.md §6.5): a push,
a first fetch or a clone that creates at least BULK_MIN tracking refs writes them straight
into the remote's packed files, and a clone's threads go into ``packed-refs`` /
``packed-logs`` in one rename; everything reads back as the usual path would have written
it (tips, reflogs with their turns, revisions, the index, fsck), later moves of those refs
take the usual path, and a crash before the commit point leaves no ref behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import convgit
from convgit.remotes.bulkrefs import BULK_MIN, read_logs
from convgit.remotes.tracking import TrackingRefs

N = BULK_MIN + 44  # threads: enough for the bulk path


def _cli(*args: str, cwd=None, env=None, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "convgit", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def _store(path, n: int = N, tag: str = "a"):
    repo = convgit.init(path)
    # threads named <source>/<upstream id>: team/a007, solo/a001, ...
    payloads = [{"messages": [{"role": "user", "content": f"question {tag}{i} about zebras"}],
                 "response": {"role": "assistant", "content": f"answer {i}"}, "model": "m",
                 "source": "team" if i % 7 == 0 else "solo", "upstream_thread_id": f"{tag}{i:03d}"} for i in range(n)]
    convgit.commit_many(repo, payloads)
    assert len(convgit.show_refs(repo)) == n
    return repo


def _loose_files(d) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) if d.exists() else []


def _turns(refs, name: str) -> list[str]:
    return [e.turn for e in refs.read_log(name) if e.turn]


def test_push_and_clone_write_many_new_refs_packed(tmp_path):
    remote = str(tmp_path / "remote")
    a = _store(tmp_path / "a")
    tips = convgit.show_refs(a)
    convgit.add_remote(a, "origin", remote)
    rep = convgit.push(a)
    assert rep.moved == N
    # the push's tracking refs: one packed file, no file per ref, each with its reflog line
    t = TrackingRefs(a.path, "origin")
    assert t.read_all() == tips
    assert _loose_files(a.path / "refs" / "remotes" / "origin") == []
    assert _loose_files(a.path / "logs" / "refs" / "remotes" / "origin") == []
    assert [(e.old, e.new, e.message) for e in t.read_log("team/a007")] == [(None, tips["team/a007"], "push origin")]
    assert convgit.rev_parse(a, "origin/team/a007") == tips["team/a007"]

    # clone (CLI): threads and tracking refs packed, reflogs carry the turns as merge writes them
    out = _cli("clone", remote, str(tmp_path / "b"), "--json")
    assert json.loads(out.stdout)["moved"] == N
    b = convgit.open_repo(tmp_path / "b")
    assert convgit.show_refs(b) == tips
    assert _loose_files(b.path / "refs" / "threads") == []
    assert _loose_files(b.path / "logs" / "refs") == []
    assert (b.path / "packed-refs").exists() and (b.path / "packed-logs").exists()
    for name in ("solo/a001", "team/a014"):
        log = b.refs.read_log(name)
        assert log[0].old is None and log[0].new == tips[name] and log[0].message == "merge: created"
        assert _turns(b.refs, name) == _turns(a.refs, name)
        assert [e.turn for e in TrackingRefs(b.path, "origin").read_log(name) if e.turn] == _turns(a.refs, name)
    # the index has them all: log, search, threads; fsck is clean
    assert len(json.loads(_cli("threads", "--json", cwd=tmp_path / "b").stdout)) == N
    hits = json.loads(_cli("search", "zebras", "--json", "-n", "0", cwd=tmp_path / "b").stdout)
    assert len({t for h in hits for t in h["threads"]}) == N
    assert [e["text"] for e in json.loads(_cli("log", "team/a021", "--json", cwd=tmp_path / "b").stdout)] == \
        ["answer 21", "question a21 about zebras"]  # (newest first)
    fsck = json.loads(_cli("fsck", "--json", cwd=tmp_path / "b").stdout)
    assert fsck["status"] == "ok" and fsck["problems"] == [], fsck
    assert json.loads(_cli("status", "--json", cwd=tmp_path / "b").stdout)["threads"] == N
    assert len(json.loads(_cli("threads", "--remotes", "--json", cwd=tmp_path / "b").stdout)) == N

    # later moves of packed refs take the usual path: 5 threads move on a, N new ones appear
    more = [{"messages": [{"role": "user", "content": f"question a{i} about zebras"},
                          {"role": "assistant", "content": f"answer {i}"},
                          {"role": "user", "content": "and giraffes?"}],
             "response": {"role": "assistant", "content": "tall"}, "model": "m",
             "source": "solo", "upstream_thread_id": f"a{i:03d}"} for i in range(1, 6)]
    convgit.commit_many(a, more)
    _store_more = _store(tmp_path / "c", tag="c")  # other threads, pushed from a as new ones
    convgit.merge(a, str(tmp_path / "c"))
    tips = convgit.show_refs(a)
    assert len(tips) == 2 * N
    convgit.push(a)
    assert TrackingRefs(a.path, "origin").read_all() == tips
    rep = convgit.pull(b)
    assert convgit.show_refs(b) == tips
    assert {t["action"] for t in rep.threads} >= {"fast-forward", "created", "same"}
    assert TrackingRefs(b.path, "origin").read_all() == tips
    assert [e.message for e in b.refs.read_log("solo/a003")][:2] == ["merge: created", "merge: fast-forward"]
    # reflogs read all at once (push, pull) are each thread's reflog: packed, loose, or both
    assert read_logs(b.refs, list(tips)) == {n: b.refs.read_log(n) for n in tips}
    assert read_logs(b.refs, ["solo/a003", "nope"]) == {"solo/a003": b.refs.read_log("solo/a003"), "nope": []}
    assert convgit.fetch(b).moved == 0 and convgit.pull(b).moved == 0
    # a remote renamed keeps its packed tracking refs
    convgit.rename_remote(b, "origin", "nas")
    assert convgit.rev_parse(b, "nas/solo/c010") == tips["solo/c010"]
    assert json.loads(_cli("fsck", "--json", cwd=tmp_path / "b").stdout)["problems"] == []
    for r in (a, b, _store_more):
        r.close()


def test_a_crash_before_the_bulk_commit_point_leaves_no_ref(tmp_path):
    remote = str(tmp_path / "remote")
    a = _store(tmp_path / "a")
    tips = convgit.show_refs(a)
    convgit.add_remote(a, "origin", remote)
    convgit.push(a)
    c = convgit.init(tmp_path / "c")
    convgit.add_remote(c, "origin", remote)
    env = {k: v for k, v in os.environ.items()}
    for point in ("bulk_logs_after_tmp_fsync", "bulk_refs_after_tmp_fsync"):
        p = _cli("fetch", cwd=tmp_path / "c", env={**env, "CONVGIT_CRASH_AT": point}, check=False)
        assert p.returncode == 137, (point, p.stderr)
        assert TrackingRefs(c.path, "origin").read_all() == {}, point
        assert json.loads(_cli("threads", "--remotes", "--json", cwd=tmp_path / "c").stdout) == []
    # (after the second crash, packed reflogs of refs that do not exist: stale, archived by
    # the fetch that creates them, which then takes the usual path)
    rep = convgit.fetch(c)
    assert rep.moved == N
    t = TrackingRefs(c.path, "origin")
    assert t.read_all() == tips
    assert [(e.old, e.new) for e in t.read_log("solo/a005")] == [(None, tips["solo/a005"])]
    assert (c.path / "logs" / "remotes-deleted" / "origin").is_dir()
    fsck = json.loads(_cli("fsck", "--json", cwd=tmp_path / "c").stdout)
    # (c has no thread: fsck counts only threads as roots, so every object shows as
    # "unreachable" (gc keeps them: tracking refs are its roots); and the temp files of the
    # packed files the killed fetches were writing, which gc removes)
    assert fsck["errors"] == 0 and {p["kind"] for p in fsck["problems"]} <= {"unreachable", "temp"}, fsck["problems"]
    a.close()
    c.close()
