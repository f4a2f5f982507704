"""``commit -c/--continue [THREAD]`` and a first message's ``"parent"``: a payload holding only
the new messages is appended after a thread's tip or after a stored message (issue 11)."""

from __future__ import annotations

import json

import convgit
from helpers.cli import assert_error, env, ok, run, store_state  # noqa: F401  (fixtures)
from helpers.store import NOW, conv, fast_repo


def _doc(*texts, response=None, parent=None):
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
    if parent:
        msgs[0]["parent"] = parent
    d = {"messages": msgs}
    if response:
        d["response"] = {"role": "assistant", "content": response}
    return json.dumps(d)


def _texts(run, rev):
    r = ok(run("log", rev, "--json"))
    return [e["text"] for e in reversed(json.loads(r.out))]


def test_continue_appends_to_heads_thread(run):
    ok(run("init"))
    ok(run("commit", "--thread", "idea", "-", input=_doc("hi", "hello")))
    r = ok(run("commit", "-c", "-", "--json", input=_doc("more", response="sure")))
    doc = json.loads(r.out)
    assert doc["action"] == "appended" and doc["thread"] == "idea" and doc["appended_messages"] == 2
    assert _texts(run, "idea") == ["hi", "hello", "more", "sure"]
    # the turn records the call: its input is the request's last message, its output the reply
    turn = json.loads(ok(run("cat-object", "-p", doc["turn"])).out)
    assert turn["kind"] == "call" and turn["output"] == doc["tip"]
    assert turn["input"] == ok(run("rev-parse", "idea~1")).out.strip()


def test_the_issue_example_fork_then_continue_the_fork(run, tmp_path):
    ok(run("init"))
    ok(run("commit", "--thread", "main", "-", input=_doc("q1", "a1", "q2", "a2")))
    ok(run("fork", "HEAD~2", "idea"))
    more = tmp_path / "more.json"
    more.write_text(_doc("another direction"))
    # without -c the payload is a new root conversation: refused on a trusted thread, and the
    # error says what the user meant (append with -c), not --on-conflict fork (an unconnected root)
    before = store_state(tmp_path / "proj" / ".convgit")
    r = run("commit", "--thread", "idea", str(more))
    assert_error(r, "duplicate_conflict")
    assert "use convgit commit -c idea FILE" in r.err and "--on-conflict" not in r.err
    doc = assert_error(run("commit", "--thread", "idea", str(more), "--json"), "duplicate_conflict")
    assert "commit -c idea FILE" in doc["error_message"] and doc["details"]["diverged_after"] is None
    assert store_state(tmp_path / "proj" / ".convgit") == before
    # following the hint (the long form --continue here) appends after the fork's tip
    doc = json.loads(ok(run("commit", "--continue", "idea", str(more), "--json")).out)
    assert doc["action"] == "appended" and doc["thread"] == "idea" and doc["new_messages"] == 1
    assert _texts(run, "idea") == ["q1", "a1", "another direction"]
    assert _texts(run, "main") == ["q1", "a1", "q2", "a2"]
    assert json.loads(ok(run("status", "--json")).out)["head"] == "idea"


def test_a_payload_sharing_the_threads_history_is_told_to_fork(run, tmp_path):
    """The --on-conflict hint stays where it fits: the payload starts at the thread's root and
    diverges later, so forking there keeps both branches of one conversation."""
    ok(run("init"))
    ok(run("commit", "--thread", "main", "-", input=_doc("q1", "a1", "q2", "a2")))
    r = run("commit", "--thread", "main", "-", input=_doc("q1", "a1", "q2 bis"))
    assert_error(r, "duplicate_conflict")
    a1 = ok(run("rev-parse", "main~2")).out.strip()
    assert f"diverges after message {a1[:12]}" in r.err
    assert "(use --on-conflict fork to keep both)" in r.err and "commit -c" not in r.err
    doc = json.loads(ok(run("commit", "--thread", "main", "--on-conflict", "fork", "-", "--json",
                            input=_doc("q1", "a1", "q2 bis"))).out)
    assert doc["forked_from"] == {"thread": "main", "message": a1}
    # a thread whose name needs quoting in a shell is quoted in the -c hint
    ok(run("commit", "--thread", "it's", "-", input=_doc("x", "y")))
    r = run("commit", "--thread", "it's", "-", input=_doc("z"))
    assert_error(r, "duplicate_conflict")
    assert "use convgit commit -c 'it'\"'\"'s' FILE" in r.err


def test_continue_reads_the_thread_from_the_first_argument_or_the_option(run):
    ok(run("init"))
    ok(run("commit", "--thread", "a", "-", input=_doc("qa", "aa")))
    ok(run("commit", "--thread", "b", "-", input=_doc("qb", "ab")))
    ok(run("commit", "-c", "a", input=_doc("to a")))  # THREAD, then stdin
    ok(run("commit", "-c", "--thread", "b", "-", input=_doc("to b")))
    assert _texts(run, "a") == ["qa", "aa", "to a"]
    assert _texts(run, "b") == ["qb", "ab", "to b"]


def test_continue_of_a_missing_thread_is_not_found_and_writes_nothing(run, tmp_path):
    ok(run("init"))
    ok(run("commit", "--thread", "a", "-", input=_doc("qa", "aa")))
    before = store_state(tmp_path / "proj" / ".convgit")
    assert_error(run("commit", "-c", "nosuch", "-", input=_doc("x")), "not_found")
    assert store_state(tmp_path / "proj" / ".convgit") == before


def test_a_first_message_naming_a_stored_parent_is_appended_after_it(run):
    ok(run("init"))
    ok(run("commit", "--thread", "main", "-", input=_doc("q1", "a1", "q2", "a2")))
    a1 = ok(run("rev-parse", "main~2")).out.strip()
    doc = json.loads(ok(run("commit", "--thread", "branch", "-", "--json", input=_doc("q2 bis", parent=a1))).out)
    assert doc["action"] == "created" and doc["new_messages"] == 1
    assert _texts(run, "branch") == ["q1", "a1", "q2 bis"]
    # and without --thread: a tip of main's history ⇒ main itself moves on
    tip = ok(run("rev-parse", "main")).out.strip()
    doc = json.loads(ok(run("commit", "-", "--json", input=_doc("q3", parent=tip))).out)
    assert doc["action"] == "appended" and doc["thread"] == "main"


def test_a_first_message_naming_an_unknown_parent_is_refused_and_writes_nothing(run, tmp_path):
    ok(run("init"))
    ok(run("commit", "--thread", "main", "-", input=_doc("q1", "a1")))
    before = store_state(tmp_path / "proj" / ".convgit")
    # an unknown object (docs/json.md, DESIGN.md §5): not_found, as --continue of a missing thread
    r = run("commit", "-", input=_doc("orphan", parent="a" * 64))
    assert_error(r, "not_found")
    assert "a" * 64 in r.err
    doc = assert_error(run("commit", "--json", "--thread", "t", "-", input=_doc("orphan", parent="a" * 64)), "not_found")
    assert doc["details"] == {"claimed": "a" * 64}
    assert store_state(tmp_path / "proj" / ".convgit") == before


def test_the_library_continues_like_the_cli(tmp_path):
    repo = fast_repo(tmp_path / "lib")
    convgit.commit(repo, {"messages": conv("hi", "hello")}, thread="t", now_ms=NOW)
    out = convgit.commit(repo, {"messages": [{"role": "user", "content": "next"}]}, continue_=True, now_ms=NOW)
    assert out.status == "appended" and out.thread == "t"
    assert [e.text for e in reversed(convgit.log(repo, "t"))] == ["hi", "hello", "next"]
    hello = convgit.rev_parse(repo, "t~1")
    out = convgit.commit(repo, {"messages": [{"role": "user", "content": "alt"}]}, after=hello, thread="alt", now_ms=NOW)
    assert out.status == "created"
    assert [e.text for e in reversed(convgit.log(repo, "alt"))] == ["hi", "hello", "alt"]
