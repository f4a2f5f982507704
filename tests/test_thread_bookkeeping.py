"""Thread bookkeeping (issue 9, defect 9): a rename shows in every fork's "forked from",
the same before and after `convgit reindex`; deleting the thread HEAD names switches HEAD
to another thread (library and CLI alike), saying so."""

from __future__ import annotations


import convgit
from helpers.cli import assert_error, cli, conv, dumps, env, ok, proj  # noqa: F401


def _commit(cli, thread: str, *texts: str) -> str:
    return ok(cli("commit", "-", "-t", thread, "--json", input=dumps({"messages": conv(*texts)}))).json()["tip"]


def _forked_from(cli) -> dict[str, str | None]:
    return {r["name"]: (r["forked_from"] or {}).get("thread") for r in ok(cli("threads", "--json")).json()}


def _answers(cli) -> list:
    return [ok(cli("threads", "--json")).json(), ok(cli("threads")).out]


def test_rename_shows_in_forks_and_survives_a_reindex(cli, proj):
    _commit(cli, "A", "q", "a")
    ok(cli("fork", "A~1", "F"))
    # a commit that shares part of A's history: a new thread forked from A
    g = ok(cli("commit", "-", "--json", input=dumps({"messages": conv("q", "other a")}))).json()["thread"]
    assert _forked_from(cli) == {"A": None, "F": "A", g: "A"}
    ok(cli("threads", "rename", "A", "B"))
    assert _forked_from(cli) == {"B": None, "F": "B", g: "B"}
    assert "[forked from B@" in ok(cli("threads")).out and "forked from A" not in ok(cli("threads")).out
    before = _answers(cli)
    ok(cli("reindex"))
    assert _answers(cli) == before
    ok(cli("threads", "rename", "B", "p/C"))  # a chain of renames, into a subdirectory
    assert _forked_from(cli) == {"p/C": None, "F": "p/C", g: "p/C"}
    before = _answers(cli)
    ok(cli("reindex"))
    assert _answers(cli) == before
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"  # the index agrees with a rebuild


def test_a_thread_created_later_under_the_old_name_is_another_thread(cli, proj):
    _commit(cli, "A", "q", "a")
    ok(cli("fork", "A", "F1"))
    ok(cli("threads", "rename", "A", "B"))
    _commit(cli, "A", "new q", "new a")  # a new thread named A
    ok(cli("fork", "A", "F2"))
    want = {"A": None, "B": None, "F1": "B", "F2": "A"}
    assert _forked_from(cli) == want
    ok(cli("reindex"))
    assert _forked_from(cli) == want


def test_a_rename_upwards_and_a_deleted_renamed_thread_rebuild_the_same(cli, proj):
    _commit(cli, "a/b", "q", "a")
    ok(cli("fork", "a/b", "F"))
    ok(cli("threads", "rename", "a/b", "a"))  # delete + create under the hood
    assert _forked_from(cli)["F"] == "a"
    ok(cli("switch", "F"))
    ok(cli("threads", "delete", "a"))  # its reflog (with the rename) is archived
    before = _answers(cli)
    assert _forked_from(cli) == {"F": "a"}
    ok(cli("reindex"))
    assert _answers(cli) == before


def test_rename_lines_survive_reflog_expiry(cli, proj):
    _commit(cli, "A", "q", "a")
    ok(cli("fork", "A", "F"))
    ok(cli("threads", "rename", "A", "B"))
    cfg = proj / ".convgit" / "config.toml"
    cfg.write_text(cfg.read_text().replace("reflog_expire_days = 90", "reflog_expire_days = 0"))
    logs = proj / ".convgit" / "logs" / "refs" / "threads"
    log = logs / "B"
    # every line ages past expiry (the fork before the rename): a line without a turn would
    # go, a rename line stays
    for path, t in ((logs / "F", "500"), (log, "1000")):
        lines = path.read_text().splitlines()
        path.write_text("".join(ln.replace(ln.split(" ")[2], t, 1) + "\n" for ln in lines))
    ok(cli("gc", "--prune=now"))
    assert "rename: A -> B" in [e["message"] for e in ok(cli("reflog", "B", "--json")).json()["entries"]]
    assert not log.exists()  # gc packed it (packed-logs): read through convgit, as any reflog
    ok(cli("reindex"))
    assert _forked_from(cli)["F"] == "B"


def test_deleting_the_current_thread_switches_head_and_says_so(cli, proj):
    store = proj / ".convgit"
    _commit(cli, "one", "q1")
    _commit(cli, "two", "q2")
    _commit(cli, "three", "q3")
    ok(cli("switch", "one"))
    r = ok(cli("threads", "delete", "one"))
    # the most recently updated thread left
    assert r.out.endswith("; it was the current thread: HEAD now names three\n")
    assert (store / "HEAD").read_text() == "ref: refs/threads/three\n"
    assert ok(cli("log", "--json")).json()[0]["text"] == "q3"  # not "has no messages yet"
    # another thread than HEAD's: HEAD stays
    doc = ok(cli("threads", "delete", "two", "--json")).json()
    assert doc["head"] == "three" and doc["head_moved"] is False
    doc = ok(cli("threads", "delete", "three", "--json")).json()  # the last one: HEAD has nowhere to go
    assert doc["head"] == "three" and doc["head_moved"] is False
    assert assert_error(cli("log", "--json"), "not_found")


def test_library_delete_of_the_current_thread_is_the_cli_s(proj):
    repo = convgit.open_repo(proj)
    try:
        convgit.commit(repo, {"messages": conv("x")}, thread="x")
        convgit.commit(repo, {"messages": conv("y")}, thread="y")
        assert repo.refs.read_head() == "y"
        doc = convgit.delete_thread(repo, "y")
        assert doc["head"] == "x" and doc["head_moved"] and repo.refs.read_head() == "x"
        assert repo.refs.read("y") is None
    finally:
        repo.close()


def test_a_turn_an_archived_reflog_names_again_stays_the_live_threads(cli, proj):
    """An archived reflog can name a turn a live thread's reflog names too (a stale reflog
    that a re-commit under the same name archived; a merged store's deleted provenance): the
    turn is still shown as that live thread's, in an incremental index and a rebuild alike."""
    _commit(cli, "A", "q", "a")
    repo = convgit.open_repo(proj)
    try:
        log = repo.refs.log_bytes("A")
        archive = repo.refs.deleted_logs_dir / "old-A.1796000000000"
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.write_bytes(log)  # the same lines, archived under another name
    finally:
        repo.close()
    ok(cli("reindex"))
    turns = ok(cli("reflog", "A", "--json")).json()["entries"]
    assert turns and all(t.get("turn") for t in turns)
    repo = convgit.open_repo(proj)
    try:
        rows = repo.index.dump()["turns"]
        assert {r[0] for r in rows} >= {t["turn"] for t in turns} and {r[1] for r in rows} == {"A"}
    finally:
        repo.close()
