"""Phantom turns (issue 10): a writer killed between appending its reflog line and renaming its
ref (a real process killed at ``ref_after_tmp_fsync``) leaves a line for a move that never
happened. The index must not show that line's call on the thread (``log --turns``,
``log -m``, status's turn count, a message's time and model), whether it catches up from an
offset or rebuilds, and both must hold the same rows; archived reflogs follow the same rule;
a line whose objects a power loss lost (deleted by hand here) breaks neither the index nor
fsck nor gc; and gc's reflog expiry never cuts the chain of moves that happened."""

from __future__ import annotations

from pathlib import Path

import convgit
from convgit.gc import _expire
from convgit.refformat import ReflogEntry, applied_entries
from helpers.cli import assert_error, cli, cli_env, conv, dumps, env, ok, proj, run  # noqa: F401

CRASH = {"CONVGIT_CRASH_AT": "ref_after_tmp_fsync"}


def payload(texts, model, started):
    return dumps({"messages": conv(*texts), "model": model, "started_at": started})


def call(cli, texts, model, started, thread="main") -> dict:
    return ok(cli("commit", "-", "--json", "--thread", thread, input=payload(texts, model, started))).json()


def killed(run, texts, model, started, thread="main") -> None:
    """A commit killed after its reflog line was made durable, before its ref rename."""
    r = run("commit", "-", "--thread", thread, input=payload(texts, model, started), env_extra=CRASH)
    assert r.rc == 137, r


def models(cli, *args) -> list:
    return [t["model"] for t in ok(cli("log", "--turns", "--json", *args)).json()]


def dumped(store: Path) -> tuple[dict, dict]:
    """(the live index caught up, a rebuild of it): ``Index.dump`` of each."""
    with convgit.open_repo(store) as repo:
        repo.index.refresh_if_changed()
        live = repo.index.dump()
        repo.index.rebuild()
        return live, repo.index.dump()


def phantom_turn(store: Path, thread: str = "main") -> str:
    """The turn of the last line of ``thread``'s live reflog (the cut-short move's)."""
    with convgit.open_repo(store) as repo:
        return [e.turn for e in repo.refs.read_log(thread)][-1]


def loose(store: Path, oid: str) -> Path:
    return store / "objects" / oid[:2] / oid[2:]


def test_a_call_a_crash_cut_short_is_not_on_the_thread(cli, run, proj):
    """The killed call stored q2 and a2; its retry stores q2 again with another answer. Its
    reflog line comes before the retry's, so an incremental catch-up used to index it; it
    started first, so q2 used to take its time and model."""
    store = proj / ".convgit"
    first = call(cli, ["q1", "a1"], "m-real", "2030-01-01T00:00:00Z")["tip"]
    killed(run, ["q1", "a1", "q2", "a2"], "m-phantom", "2030-01-01T00:01:00Z")
    assert models(cli) == ["m-real"]
    again = call(cli, ["q1", "a1", "q2", "a3"], "m-retry", "2030-01-01T00:02:00Z")
    assert again["tip"] != first and ok(cli("rev-parse", "main")).out.strip() == again["tip"]
    assert models(cli) == ["m-retry", "m-real"]
    assert ok(cli("log", "-m", "m-phantom", "--json")).json() == []
    assert [m["text"] for m in ok(cli("log", "-m", "m-retry", "--json")).json()] == ["a3", "q2"]
    assert ok(cli("status", "--json")).json()["turns"] == 2
    assert ok(cli("search", "q2", "-m", "m-phantom", "--json")).json() == []
    assert [h["model"] for h in ok(cli("search", "q2", "--json")).json()] == ["m-retry"]
    q2 = [m for m in ok(cli("log", "--json")).json() if m["text"] == "q2"][0]
    assert q2["model"] == "m-retry"
    live, rebuilt = dumped(store)
    assert live == rebuilt
    assert sorted(t[5] for t in live["turns"]) == ["m-real", "m-retry"]
    ok(cli("reindex"))
    assert models(cli) == ["m-retry", "m-real"] and ok(cli("status", "--json")).json()["turns"] == 2
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"
    # reflog says the same: the cut-short move is counted, not shown
    assert ok(cli("reflog", "--json")).json()["interrupted"] == 1


def test_a_call_that_records_without_moving_stays_after_a_cut_short_one(cli, run, proj):
    """A call whose messages are all stored already records its turn with a line whose old
    and new are the tip (no rename: nothing to cut short). After a cut-short move, that line
    chains on from the tip: its call is indexed, the cut-short one is not."""
    store = proj / ".convgit"
    call(cli, ["q1", "a1"], "m-real", "2030-01-01T00:00:00Z")
    killed(run, ["q1", "a1", "q2", "a2"], "m-phantom", "2030-01-01T00:01:00Z")
    same = call(cli, ["q1", "a1"], "m-again", "2030-01-01T00:02:00Z")
    assert same["appended_messages"] == 0
    with convgit.open_repo(store) as repo:
        last = repo.refs.read_log("main")[-1]
    assert last.old == last.new == same["tip"] and last.turn is not None
    assert models(cli) == ["m-again", "m-real"]
    assert ok(cli("reflog", "--json")).json()["interrupted"] == 1
    live, rebuilt = dumped(store)
    assert live == rebuilt and sorted(t[5] for t in live["turns"]) == ["m-again", "m-real"]


def test_a_call_a_crash_cut_short_is_carried_to_no_other_store(cli, run, proj, tmp_path):
    """merge (from a store, from a bundle) and export carry a thread's recorded calls to
    another store, where they become lines of moves that happened: the cut-short call stays
    behind (it used to arrive as a call on the thread there)."""
    call(cli, ["q1", "a1"], "m-real", "2030-01-01T00:00:00Z")
    killed(run, ["q1", "a1", "q2", "a2"], "m-phantom", "2030-01-01T00:01:00Z")
    call(cli, ["q1", "a1", "q2", "a3"], "m-retry", "2030-01-01T00:02:00Z")
    bundle = tmp_path / "b.db"
    ok(cli("bundle", "create", str(bundle)))
    out = tmp_path / "out.json"
    ok(cli("export", "--all", "-f", "native", "-o", str(out)))
    assert "m-phantom" not in out.read_text() and "m-retry" in out.read_text()
    for i, src in enumerate([proj, bundle]):
        other = tmp_path / f"other{i}"
        other.mkdir()
        ok(cli("-C", str(other), "init"))
        ok(cli("-C", str(other), "merge", str(src)))
        turns = ok(cli("-C", str(other), "log", "main", "--turns", "--json")).json()
        assert [t["model"] for t in turns] == ["m-retry", "m-real"]
        assert ok(cli("-C", str(other), "reflog", "main", "--json")).json()["interrupted"] == 0


def test_a_thread_whose_creation_a_crash_cut_short(cli, run, proj):
    """The killed call would have created the thread: its reflog is stale, archived when the
    retry creates the thread (logs/deleted). Its line is of a move that never happened, so
    the archive's turns do not include it: q's earliest turn is the retry's."""
    store = proj / ".convgit"
    killed(run, ["q", "a-lost"], "m-phantom", "2030-01-01T00:00:00Z", thread="t")
    call(cli, ["q", "a"], "m-retry", "2030-01-01T00:05:00Z", thread="t")
    assert len(list((store / "logs" / "deleted").glob("t.*"))) == 1
    assert models(cli, "t") == ["m-retry"]
    q = [m for m in ok(cli("log", "t", "--json")).json() if m["text"] == "q"][0]
    assert q["model"] == "m-retry"
    assert ok(cli("log", q["id"], "--json")).json()[-1]["model"] == "m-retry"  # by id: its earliest turn anywhere
    live, rebuilt = dumped(store)
    assert live == rebuilt
    with convgit.open_repo(store) as repo:
        rows = repo.index.db.execute("SELECT model FROM turns ORDER BY model").fetchall()
    assert rows == [("m-retry",)]
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"


def test_a_cut_short_line_whose_objects_a_power_loss_lost(cli, run, proj):
    """The lead's reduced fsyncs may let a reflog line survive a power loss that its objects
    did not (only for a move that never happened): deleted by hand here. The index catches up
    and rebuilds, fsck calls it harmless (info, status ok) and gc runs (it used to refuse:
    "names missing turn"), keeping what the threads show."""
    store = proj / ".convgit"
    call(cli, ["q1", "a1"], "m-real", "2030-01-01T00:00:00Z")
    killed(run, ["q1", "a1", "lost q", "lost a"], "m-phantom", "2030-01-01T00:01:00Z")
    turn = phantom_turn(store)
    with convgit.open_repo(store) as repo:
        lost = [turn, repo.refs.read_log("main")[-1].new]
        lost.append(repo.objects.read(lost[1]).parent)
    for oid in lost:
        loose(store, oid).unlink()
    assert models(cli) == ["m-real"]
    call(cli, ["q1", "a1", "q3", "a3"], "m-retry", "2030-01-01T00:02:00Z")
    assert models(cli) == ["m-retry", "m-real"]
    live, rebuilt = dumped(store)
    assert live == rebuilt
    doc = ok(cli("fsck", "--json")).json()
    assert doc["status"] == "ok"
    notes = [p for p in doc["problems"] if p["kind"] == "bad_reflog"]
    assert [p["severity"] for p in notes] == ["info"] and "never happened" in notes[0]["message"]
    before = ok(cli("log", "--json")).json()
    ok(cli("gc", "--prune=now", "--json"))  # (it used to refuse: gc_refused)
    assert ok(cli("log", "--json")).json() == before and models(cli) == ["m-retry", "m-real"]
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"
    ok(cli("reindex"))
    assert ok(cli("log", "--json")).json() == before


def test_a_packed_reflog_follows_the_same_rule(cli, run, proj):
    """After gc the reflog is in packed-logs; the cut-short line lands in the loose part
    after it, and the catch-up reads from an offset inside neither."""
    store = proj / ".convgit"
    call(cli, ["q1", "a1"], "m-real", "2030-01-01T00:00:00Z")
    ok(cli("gc", "--json"))
    assert (store / "packed-logs").exists()
    killed(run, ["q1", "a1", "q2", "a2"], "m-phantom", "2030-01-01T00:01:00Z")
    call(cli, ["q1", "a1", "q2", "a3"], "m-retry", "2030-01-01T00:02:00Z")
    assert models(cli) == ["m-retry", "m-real"]
    ok(cli("gc", "--json"))  # packed again, with the cut-short line
    killed(run, ["q1", "a1", "q2", "a3", "q4", "a4"], "m-phantom2", "2030-01-01T00:03:00Z")
    call(cli, ["q1", "a1", "q2", "a3", "q4", "a5"], "m-retry2", "2030-01-01T00:04:00Z")
    assert models(cli) == ["m-retry2", "m-retry", "m-real"]
    live, rebuilt = dumped(store)
    assert live == rebuilt
    assert ok(cli("reflog", "--json")).json()["interrupted"] == 2
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"


def test_a_deleted_threads_archive_leaves_out_its_cut_short_moves(cli, run, proj):
    store = proj / ".convgit"
    call(cli, ["q1", "a1"], "m-real", "2030-01-01T00:00:00Z")
    killed(run, ["q1", "a1", "q2", "a2"], "m-phantom", "2030-01-01T00:01:00Z")
    call(cli, ["q1", "a1", "q2", "a3"], "m-retry", "2030-01-01T00:02:00Z")
    ok(cli("fork", "main", "keep"))
    ok(cli("threads", "delete", "main"))
    doc = ok(cli("reflog", "main", "--json")).json()
    assert doc["deleted"] is True and doc["interrupted"] == 1 and len(doc["entries"]) == 3
    q2 = [m for m in ok(cli("log", "keep", "--json")).json() if m["text"] == "q2"][0]
    assert q2["model"] == "m-retry"  # the fork shows the deleted thread's real call
    live, rebuilt = dumped(store)
    assert live == rebuilt
    with convgit.open_repo(store) as repo:
        models_ = sorted(r[0] for r in repo.index.db.execute("SELECT model FROM turns WHERE kind='call'"))
    assert models_ == ["m-real", "m-retry"]


def test_reflog_expiry_keeps_the_chain_of_moves(cli, proj):
    """Two old update-ref moves (no turn) between two calls expire: gc replaces them by one
    line from where they start to where they end, so the first call is still a move that
    happened (dropped, it read as one a crash cut short: reflog and a rebuilt index lost it)."""
    store = proj / ".convgit"
    a = call(cli, ["q1", "a1"], "m1", "2030-01-01T00:00:00Z")["tip"]
    b = call(cli, ["q1", "a1", "b"], "m-side", "2030-01-01T00:00:30Z", thread="side")["tip"]
    c = call(cli, ["q1", "a1", "c"], "m-side", "2030-01-01T00:00:40Z", thread="side2")["tip"]
    ok(cli("update-ref", "main", b))
    ok(cli("update-ref", "main", c))
    call(cli, ["q1", "a1", "c", "d"], "m2", "2030-01-01T00:01:00Z")
    cfg = store / "config.toml"
    cfg.write_text(cfg.read_text().replace("reflog_expire_days = 90", "reflog_expire_days = 0"))
    before = ok(cli("reflog", "--json")).json()
    turns = models(cli)
    assert len(before["entries"]) == 4 and turns[0] == "m2" and turns[-1] == "m1"
    gc = ok(cli("gc", "--json")).json()
    assert gc["reflog_expired"] == 1
    after = ok(cli("reflog", "--json")).json()
    assert [(e["old"], e["new"]) for e in after["entries"]] == [
        (c, before["entries"][0]["new"]), (a, c), (None, a)] and after["interrupted"] == 0
    assert after["entries"][1]["message"] == "expired: 2 moves"
    assert models(cli) == turns
    ok(cli("reindex"))
    assert models(cli) == turns
    live, rebuilt = dumped(store)
    assert live == rebuilt
    gc = ok(cli("gc", "--json")).json()  # a second gc changes nothing more
    assert gc["reflog_expired"] == 0 and ok(cli("reflog", "--json")).json() == after
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"


def test_a_rename_up_keeps_the_history_it_carries(cli, proj):
    """``p/q`` -> ``p`` is a delete and a create: ``p``'s reflog is ``p/q``'s history, then a
    creation line (old none). The chain goes on from that line's new tip, so the history
    is still moves that happened (reflog used to count it as cut short)."""
    store = proj / ".convgit"
    call(cli, ["q1", "a1"], "m1", "2030-01-01T00:00:00Z", thread="p/q")
    call(cli, ["q1", "a1", "q2", "a2"], "m2", "2030-01-01T00:01:00Z", thread="p/q")
    ok(cli("threads", "rename", "p/q", "p"))
    doc = ok(cli("reflog", "p", "--json")).json()
    assert doc["interrupted"] == 0 and [e["model"] for e in doc["entries"]] == [None, "m2", "m1"]
    assert models(cli, "p") == ["m2", "m1"]
    live, rebuilt = dumped(store)
    assert live == rebuilt and sorted(t[1] for t in live["turns"]) == ["p", "p"]
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"


def _e(old, new, t, turn=None, msg="update-ref") -> ReflogEntry:
    ids = {k: k * 64 for k in "abcdefghijklmnopqrstuvwxyz"}
    return ReflogEntry(ids.get(old), ids.get(new), t, ids.get(turn) if turn else None, msg)


def test_expiry_bridges_runs_of_old_moves_and_keeps_the_chain():
    """gc._expire over made-up reflogs (expire everything older than 1,000 ms at 10,000):
    whatever it drops, the turns of the moves that happened are the same before and after."""
    old = lambda e: (e.old, e.new, e.turn, e.message)  # noqa: E731
    cases = [
        # kept call, two old moves, kept call: one bridge where the run ended
        [_e(None, "a", 1, "t"), _e("a", "b", 2), _e("b", "c", 3), _e("c", "d", 4, "u")],
        # a single old move between two calls stays as it is
        [_e(None, "a", 1, "t"), _e("a", "b", 2), _e("b", "c", 4, "u")],
        # old moves at the end: bridged up to the tip
        [_e(None, "a", 1, "t"), _e("a", "b", 2), _e("b", "c", 3)],
        # old moves at the start (no kept move before them): dropped
        [_e(None, "a", 1), _e("a", "b", 2), _e("b", "c", 3, "u")],
        # a cut-short call inside the run goes with it; one after the run stays
        [_e(None, "a", 1, "t"), _e("a", "p", 2, "x"), _e("a", "b", 3), _e("b", "q", 4, "y"), _e("b", "c", 5),
         _e("c", "r", 6, "z"), _e("c", "d", 7, "u")],
        # a move back to an earlier tip, cut short, then real moves
        [_e(None, "a", 1, "t"), _e("a", "b", 2), _e("b", "a", 3, "x"), _e("b", "c", 4), _e("c", "d", 5, "u")],
        # a delete of an unreadable ref, then a restore, in a restored thread's reflog
        [_e(None, "a", 1, "t"), _e("a", "b", 2), _e(None, None, 3, msg="delete (unreadable ref)"),
         _e(None, "c", 4, msg="restore"), _e("c", "d", 5, "u")],
    ]
    tips = ["d", "c", "c", "c", "d", "d", "d"]
    kept = []
    for entries, tip in zip(cases, tips):
        tip = tip * 64
        keep = _expire(entries, tip, 10, 1 / 86400)  # 1 s: every line above is older
        assert [e.turn for e in applied_entries(keep, tip) if e.turn] == \
            [e.turn for e in applied_entries(entries, tip) if e.turn]
        assert _expire(keep, tip, 10, 1 / 86400) == keep  # a second gc changes nothing
        kept.append([old(e) for e in keep])
    a, b, c, d = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
    assert kept[0][1] == (a, c, None, "expired: 2 moves") and len(kept[0]) == 3
    assert len(kept[1]) == 3 and kept[1][1] == (a, b, None, "update-ref")
    assert kept[2][1] == (a, c, None, "expired: 2 moves")
    assert kept[3] == [(b, c, "u" * 64, "update-ref")]
    assert [k[2] for k in kept[4]] == ["t" * 64, "x" * 64, None, "z" * 64, "u" * 64]  # y went with the run
    assert "x" * 64 not in [k[2] for k in kept[5]]
    assert len(kept[6]) == 5 and kept[6][2][3] == "delete (unreadable ref)"
