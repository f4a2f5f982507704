"""Provenance is data (issue 9, defects 1-3): a message's time, model, tokens and source
survive gc, survive the deletion of the thread that recorded them, and come from the
thread's own history, not from the earliest conversation that shared the message.

The battery at the end compares the ``--json`` of every reading command for every thread
before and after ``gc --prune=now`` (and after deleting each other thread): identical.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers.cli import cli, dumps, env, ok, proj, write_json  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT.parent / "shared" / "fixtures"
needs_fixtures = pytest.mark.skipif(not FIX.is_dir(), reason="../shared/fixtures is absent")


def every_fixture() -> list[Path]:
    """Every shared fixture file (each is an import format convgit takes)."""
    return sorted(p for p in FIX.rglob("*") if p.is_file() and p.name != "README.md")


def names(cli, d) -> list[str]:
    return [t["name"] for t in ok(cli("threads", "--json", cwd=d)).json()]


def log_json(cli, d, *args) -> list[dict]:
    return ok(cli("log", "--json", *args, cwd=d)).json()


def fsck_json(cli, d) -> dict:
    r = cli("fsck", "--json", cwd=d)
    return r.json()


# -- defect 1: gc keeps the per-message turns of an import ----------------------------------


@needs_fixtures
def test_gc_keeps_the_times_and_models_of_an_imported_tree(cli, proj):
    ok(cli("import", str(FIX / "chatgpt/librechat-chatgpt-tree.json"), cwd=proj))
    (thread,) = [n for n in names(cli, proj) if not n.endswith("-alt-1")]
    before = ok(cli("show", "--json", thread, cwd=proj)).json()
    entries = log_json(cli, proj, thread)
    assert {e["started_at"][:10] for e in entries} == {"2024-05-01"}
    assert "text-davinci-002-render-sha" in {e["model"] for e in entries}
    # Right after an import nothing is unreachable: the per-message turns hang off the import turn.
    doc = fsck_json(cli, proj)
    assert doc["status"] == "ok" and not [p for p in doc["problems"] if p["kind"] == "unreachable"], doc
    ok(cli("gc", "--prune=now", cwd=proj))
    assert ok(cli("show", "--json", thread, cwd=proj)).json() == before
    assert log_json(cli, proj, thread) == entries


@needs_fixtures
def test_gc_keeps_llm_token_usage(cli, proj):
    ok(cli("import", str(FIX / "llm/sample-logs.db"), cwd=proj))
    usage = {t: ok(cli("log", "-u", "--json", t, cwd=proj)).out for t in names(cli, proj)}
    assert any('"input_tokens"' in u for u in usage.values())
    ok(cli("gc", "--prune=now", cwd=proj))
    assert {t: ok(cli("log", "-u", "--json", t, cwd=proj)).out for t in names(cli, proj)} == usage


@needs_fixtures
def test_gc_with_the_default_grace_two_weeks_later_keeps_them_too(cli, proj):
    """What cron's `gc --auto` does two weeks after an import: the grace has passed."""
    import os
    import time

    ok(cli("import", str(FIX / "chatgpt/librechat-chatgpt-tree.json"), cwd=proj))
    ok(cli("import", str(FIX / "llm/sample-logs.db"), cwd=proj))
    before = {t: log_json(cli, proj, t) for t in names(cli, proj)}
    old = time.time() - 15 * 86400
    for dp, _, files in os.walk(proj / ".convgit" / "objects"):
        for f in files:
            os.utime(os.path.join(dp, f), (old, old))
    ok(cli("gc", cwd=proj))
    assert {t: log_json(cli, proj, t) for t in names(cli, proj)} == before


# -- defect 2: deleting a thread keeps what its turns tell about shared messages -----------


def test_deleting_a_thread_keeps_the_metadata_of_messages_a_fork_holds(cli, proj):
    call = {"messages": [{"role": "user", "content": "q1"}],
            "response": {"role": "assistant", "content": "a1"}, "model": "gpt-x"}
    ok(cli("commit", "-t", "a", "-", input=dumps(call), cwd=proj))
    ok(cli("fork", "a~1", "b", cwd=proj))
    before = ok(cli("log", "-s", "--json", "b", cwd=proj)).json()
    assert before[0]["started_at"] and before[0]["model"] == "gpt-x", before
    ok(cli("threads", "delete", "a", cwd=proj))
    ok(cli("gc", "--prune=now", cwd=proj))
    # The same, but that the turn's thread is gone.
    assert ok(cli("log", "-s", "--json", "b", cwd=proj)).json() == _without_thread(before, "a")
    assert "(no time)" not in ok(cli("log", "-s", "b", cwd=proj)).out
    assert fsck_json(cli, proj)["status"] == "ok"
    ok(cli("reindex", cwd=proj))
    assert ok(cli("log", "-s", "--json", "b", cwd=proj)).json() == _without_thread(before, "a")


def _without_thread(doc, victim: str):
    """``doc`` with the thread name ``victim`` (deleted) shown as None, as log -s shows a
    turn whose thread is gone."""
    if isinstance(doc, list):
        return [_without_thread(x, victim) for x in doc]
    if isinstance(doc, dict):
        return {k: (None if k == "thread" and v == victim else _without_thread(v, victim)) for k, v in doc.items()}
    return doc


def test_deleting_a_thread_still_frees_its_own_messages(cli, proj):
    """The rule keeps turns, not every message a deleted fork wrote: the fork's own
    messages go when nothing else records them."""
    ok(cli("commit", "-t", "a", "-", input=dumps({"messages": [{"role": "user", "content": "base"}]}), cwd=proj))
    ok(cli("fork", "a", "b", cwd=proj))
    ok(cli("commit", "-t", "b", "-", input=dumps({"messages": [
        {"role": "user", "content": "base"}, {"role": "user", "content": "only in b"}]}), cwd=proj))
    ok(cli("threads", "delete", "b", cwd=proj))
    gc = ok(cli("gc", "--prune=now", "--json", cwd=proj)).json()
    assert gc["pruned"] >= 2  # b's message and the turn that recorded it
    r = cli("search", "--json", "only", cwd=proj)
    assert r.json()["results"] == [] if isinstance(r.json(), dict) else r.json() == []


def test_fsck_reports_a_lost_per_message_turn_as_an_error(cli, proj, tmp_path):
    doc = {"mapping": {
        "r": {"id": "r", "message": None, "parent": None, "children": ["u"]},
        "u": {"id": "u", "parent": "r", "children": ["a"], "message": {
            "id": "u", "author": {"role": "user"}, "create_time": 1714584000.0,
            "content": {"content_type": "text", "parts": ["hello"]}}},
        "a": {"id": "a", "parent": "u", "children": [], "message": {
            "id": "a", "author": {"role": "assistant"}, "create_time": 1714584001.0,
            "metadata": {"model_slug": "gpt-4o"}, "content": {"content_type": "text", "parts": ["hi"]}}}},
        "current_node": "a", "id": "conv-1", "title": "t", "create_time": 1714584000.0}
    ok(cli("import", str(write_json(tmp_path / "c.json", [doc])), cwd=proj))
    store = proj / ".convgit"
    ok(cli("gc", "--prune=now", cwd=proj))  # everything packed; the sub-turns are kept
    assert fsck_json(cli, proj)["status"] == "ok"
    # Damage: drop one per-message turn (what a gc before this fix did).
    entries = log_json(cli, proj)
    sub = next(e["turn"] for e in entries if e["model"] == "gpt-4o")
    import convgit
    from convgit.gc import gc as run_gc

    repo = convgit.open_repo(store)
    try:
        objs = {o: repo.objects.read_bytes(o) for p in repo.objects.packs() for o in p.ids() if o != sub}
        for p in repo.objects.packs():
            p.close()
            p.idx_path.unlink()
            p.pack_path.unlink()
        repo.objects.packs(reload=True)
        repo.objects.write_many(list(objs.items()))
        repo.index.rebuild()
        assert run_gc(repo, prune="now").status == "done"  # gc does not refuse: it was lost already
    finally:
        repo.close()
    doc = fsck_json(cli, proj)
    assert doc["status"] == "error" and doc["error_code"] == "fsck_failed"
    assert [p["kind"] for p in doc["problems"] if p["severity"] == "error"] == ["provenance_missing"], doc


# -- defect 3: a thread's own times -------------------------------------------------------


def _chatgpt(cid: str, t: float, text: str) -> dict:
    sys_msg = {"id": f"{cid}-s", "author": {"role": "system"}, "create_time": t,
               "content": {"content_type": "text", "parts": ["custom instructions: be brief"]}}
    return {"id": cid, "title": cid, "create_time": t, "current_node": f"{cid}-u", "mapping": {
        f"{cid}-s": {"id": f"{cid}-s", "parent": None, "children": [f"{cid}-u"], "message": sys_msg},
        f"{cid}-u": {"id": f"{cid}-u", "parent": f"{cid}-s", "children": [], "message": {
            "id": f"{cid}-u", "author": {"role": "user"}, "create_time": t + 1,
            "content": {"content_type": "text", "parts": [text]}}}}}


def test_a_shared_root_takes_each_conversations_own_date(cli, proj, tmp_path):
    early, late = 1704067200.0, 1735689600.0  # 2024-01-01, 2025-01-01
    path = write_json(tmp_path / "conversations.json", [_chatgpt("c-2024", early, "first"), _chatgpt("c-2025", late, "second")])
    ok(cli("import", str(path), cwd=proj))
    by_thread = {n: log_json(cli, proj, n) for n in names(cli, proj)}
    for name, entries in by_thread.items():
        year = "2024" if "2024" in name else "2025"
        assert {e["started_at"][:4] for e in entries} == {year}, (name, entries)
        assert {e["provenance"] for e in entries} == {"thread"}
    roots = {e["id"] for es in by_thread.values() for e in es if e["role"] == "system"}
    assert len(roots) == 1  # the same message object, dated per thread


def _claude(cid: str, when: str, reply: str) -> dict:
    msg = lambda uid, sender, text, t: {"uuid": uid, "sender": sender, "created_at": t, "updated_at": t,  # noqa: E731
                                        "text": text, "content": [{"type": "text", "text": text}],
                                        "attachments": [], "files": []}
    return {"uuid": cid, "name": cid, "created_at": when + "T00:00:00Z", "updated_at": when + "T00:00:09Z",
            "chat_messages": [msg(f"{cid}-1", "human", "hello", when + "T00:00:01Z"),
                              msg(f"{cid}-2", "assistant", reply, when + "T00:00:02Z")]}


def test_claude_conversations_that_open_alike_keep_their_own_dates(cli, proj, tmp_path):
    path = write_json(tmp_path / "claude.json", [_claude("c24", "2024-03-01", "hi 2024"), _claude("c25", "2025-06-01", "hi 2025")])
    ok(cli("import", str(path), cwd=proj))
    for name in names(cli, proj):
        year = "2024" if "c24" in name else "2025"
        assert {e["started_at"][:4] for e in log_json(cli, proj, name)} == {year}, name


@needs_fixtures
def test_llm_prompts_are_dated_with_their_response(cli, proj):
    ok(cli("import", str(FIX / "llm/sample-logs.db"), cwd=proj))
    for name in names(cli, proj):
        entries = log_json(cli, proj, name)
        assert all(e["started_at"] and e["started_at"].startswith("2026-11-30") for e in entries), (name, entries)
        assert all(e["model"] for e in entries), (name, entries)
        # the question is never dated after its answer
        rev = entries[::-1]
        for q, a in zip(rev, rev[1:]):
            if q["role"] == "user" and a["role"] == "assistant":
                assert q["started_at"] <= a["started_at"]


def test_a_fork_shows_the_times_of_the_thread_it_came_from(cli, proj):
    ok(cli("commit", "-t", "a", "--model", "m1", "-", input=dumps({"messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}), cwd=proj))
    ok(cli("fork", "a", "b", cwd=proj))
    a, b = log_json(cli, proj, "a"), log_json(cli, proj, "b")
    assert [e["started_at"] for e in a] == [e["started_at"] for e in b]
    assert {e["provenance"] for e in a} == {"thread"} and {e["provenance"] for e in b} == {"earliest"}
    # thread~N starts below the tip but keeps the thread's own provenance
    assert log_json(cli, proj, "a~1")[0]["provenance"] == "thread"


# -- the battery: answers identical after gc ----------------------------------------------

READERS = (("log", "--json"), ("show", "--json"), ("log", "-u", "--json"), ("log", "-s", "--json"))


def _build_everything(cli, d: Path, tmp_path: Path) -> None:
    for path in every_fixture():
        ok(cli("import", str(path), cwd=d))
    call = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}],
            "response": {"role": "assistant", "content": "a1"}, "model": "gpt-x",
            "usage": {"input_tokens": 5, "output_tokens": 2}}
    ok(cli("commit", "-t", "calls", "-", input=dumps(call), cwd=d))
    resend = dict(call, messages=call["messages"] + [{"role": "assistant", "content": "a1"},
                                                     {"role": "user", "content": "q2"}],
                  response={"role": "assistant", "content": "a2"})
    ok(cli("commit", "-", input=dumps(resend), cwd=d))  # a stateless client: only the tail is new
    ok(cli("fork", "calls~2", "calls-fork", cwd=d))  # at a1
    ok(cli("commit", "-t", "calls-fork", "-", input=dumps({"messages": call["messages"] + [
        {"role": "assistant", "content": "a1"}, {"role": "user", "content": "other question"}]}), cwd=d))


def _snapshot(cli, d: Path, threads: list[str]) -> dict:
    out = {"threads": ok(cli("threads", "--json", cwd=d)).json(),
           "search": cli("search", "--json", "the", cwd=d).out}
    for t in threads:
        for args in READERS:
            out[(t, *args)] = ok(cli(*args, t, cwd=d)).json()
    return out


@needs_fixtures
def test_answers_identical_after_gc_and_after_deleting_threads(cli, proj, tmp_path, capsys):
    """gc, then one thread of each kind deleted in turn (the slow variant deletes every one)."""
    _battery(cli, proj, tmp_path, capsys, every=False)


@pytest.mark.slow
@needs_fixtures
def test_answers_identical_after_deleting_each_thread_in_turn(cli, proj, tmp_path, capsys):
    _battery(cli, proj, tmp_path, capsys, every=True)


def _battery(cli, proj, tmp_path, capsys, *, every: bool) -> None:
    _build_everything(cli, proj, tmp_path)
    threads = names(cli, proj)
    assert len(threads) >= 47  # 45 from the fixtures, calls and calls-fork
    doc = fsck_json(cli, proj)
    assert doc["status"] == "ok" and not [p for p in doc["problems"] if p["kind"] == "unreachable"], doc
    before = _snapshot(cli, proj, threads)
    ok(cli("gc", "--prune=now", cwd=proj))
    after = _snapshot(cli, proj, threads)
    diff = [k for k in before if before[k] != after[k]]
    assert diff == [], diff
    compared = len(before)
    # Delete one thread of each kind in turn (on a copy), gc, compare every other thread.
    victims = threads if every else [
        next(t for t in threads if t.startswith(p)) for p in ("calls", "chatgpt/", "llm/01m8nd8nm", "claude/")]
    for victim in victims:
        copy = tmp_path / f"copy-{len(victim)}-{abs(hash(victim))}"
        shutil.copytree(proj, copy, symlinks=True)
        ok(cli("threads", "delete", "--force", victim, cwd=copy)) if "--force" in cli(
            "threads", "delete", "--help", cwd=copy).out else ok(cli("threads", "delete", victim, cwd=copy))
        ok(cli("gc", "--prune=now", cwd=copy))
        rest = [t for t in threads if t != victim]
        got = _snapshot(cli, copy, rest)
        for t in rest:
            for args in READERS:
                assert got[(t, *args)] == _without_thread(before[(t, *args)], victim), (victim, t, args)
                compared += 1
        shutil.rmtree(copy)
    with capsys.disabled():
        print(f"\n[answers identical] {len(threads)} threads, {compared} command outputs compared, 0 differed")


def test_merge_and_bundles_carry_what_a_deleted_thread_recorded(cli, proj, tmp_path):
    """The provenance rule across machines: a store whose thread was deleted (a fork still
    holds its message) merged into another, directly or through a bundle, shows the same."""
    call = {"messages": [{"role": "user", "content": "q1"}],
            "response": {"role": "assistant", "content": "a1"}, "model": "gpt-x"}
    ok(cli("commit", "-t", "a", "-", input=dumps(call), cwd=proj))
    ok(cli("fork", "a~1", "b", cwd=proj))
    ok(cli("threads", "delete", "a", cwd=proj))
    want = ok(cli("log", "--json", "b", cwd=proj)).json()
    assert want[0]["model"] == "gpt-x"
    ok(cli("bundle", "create", str(tmp_path / "b.db"), cwd=proj))
    for n, src in enumerate((str(proj), str(tmp_path / "b.db"))):
        d = tmp_path / f"dst{n}"
        ok(cli("init", cwd=d))
        ok(cli("merge", src, cwd=d))
        assert ok(cli("log", "--json", "b", cwd=d)).json() == want, src
        logs = sorted((d / ".convgit/logs/deleted").rglob("*"))
        size = sum(p.stat().st_size for p in logs if p.is_file())
        ok(cli("merge", src, cwd=d))  # idempotent: nothing written twice
        assert sum(p.stat().st_size for p in logs if p.is_file()) == size
        ok(cli("gc", "--prune=now", cwd=d))
        assert ok(cli("log", "--json", "b", cwd=d)).json() == want, src
        assert fsck_json(cli, d)["status"] == "ok"


@needs_fixtures
def test_answers_identical_after_merging_into_an_empty_store(cli, proj, tmp_path):
    """merge hands the index the objects it decoded and the reflogs it wrote (no read back):
    the merged store answers every reader as after a rebuild of its index, and merging again
    changes no answer."""
    _build_everything(cli, proj, tmp_path)
    threads = names(cli, proj)
    dest = tmp_path / "dest"
    ok(cli("init", "--json", cwd=dest))
    ok(cli("merge", str(proj), "--json", cwd=dest))
    assert names(cli, dest) == threads
    merged = _snapshot(cli, dest, threads)
    assert sum(len(merged[(t, "log", "--json")]) for t in threads) > 0
    ok(cli("merge", str(proj), "--json", cwd=dest))
    assert _snapshot(cli, dest, threads) == merged
    ok(cli("reindex", cwd=dest))
    rebuilt = _snapshot(cli, dest, threads)
    assert [k for k in merged if merged[k] != rebuilt[k]] == []
