"""``convgit.commit`` / ``commit_many``: deduplication and which thread moves (DESIGN §3, §5)."""

from __future__ import annotations

import base64
import json
import math
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

import convgit
from convgit import errors
from convgit.objects import AttachmentPart, Blob, Message, TextPart, ToolCallPart, ToolResultPart, Turn
from convgit.repository import Repository

from helpers.store import NOW, conv, fast_repo, object_ids, objects_by_type, set_config, tree_state


def commit(repo, data, **kw):
    kw.setdefault("now_ms", NOW)
    return convgit.commit(repo, data, **kw)


def new_objects(repo, before: set[str]) -> dict[str, list]:
    return objects_by_type(repo, object_ids(repo) - before)


# -- deduplication --------------------------------------------------------------------------

HISTORY = conv("What is convgit?", "Git for conversations.", "Does it dedup?", "Yes, by content hash.")


@pytest.mark.parametrize(
    "shape",
    ["dict", "list", "json_bytes", "json_str", "trusted_thread", "commit_many", "later_clock"],
)
def test_exact_reingest_writes_nothing(repo, shape):
    first = commit(repo, {"messages": HISTORY}, thread="t" if shape == "trusted_thread" else None)
    before = tree_state(repo)
    refs = repo.refs.read_all()
    dump = repo.index.dump()
    doc = {"messages": HISTORY}
    if shape == "list":
        r = commit(repo, HISTORY)
    elif shape == "json_bytes":
        r = commit(repo, json.dumps(doc).encode())
    elif shape == "json_str":
        r = commit(repo, json.dumps(doc, ensure_ascii=False, indent=2))
    elif shape == "trusted_thread":
        r = commit(repo, doc, thread="t")
    elif shape == "commit_many":
        [r] = convgit.commit_many(repo, [doc], now_ms=NOW)
    elif shape == "later_clock":
        r = commit(repo, doc, now_ms=NOW + 86_400_000)
    else:
        r = commit(repo, doc)
    assert r.status == "deduplicated" and r.deduplicated
    assert r.tip == first.tip and r.thread == first.thread
    assert (r.new_objects, r.new_messages, r.appended_messages, r.turn) == (0, 0, 0, None)
    assert tree_state(repo) == before
    assert repo.refs.read_all() == refs
    assert repo.index.dump() == dump


def test_reingest_many_times_and_from_a_fresh_handle_writes_nothing(repo):
    commit(repo, {"messages": HISTORY})
    before = tree_state(repo)
    for _ in range(3):
        with Repository.open(repo.path) as again:
            assert commit(again, {"messages": HISTORY}).deduplicated
    assert tree_state(repo) == before


def test_reingest_of_a_prefix_writes_nothing_and_names_the_thread_holding_it(repo):
    first = commit(repo, {"messages": HISTORY})
    before = tree_state(repo)
    r = commit(repo, {"messages": HISTORY[:2]})
    assert r.deduplicated and r.thread == first.thread
    assert r.tip == repo.objects.read(repo.objects.read(first.tip).parent).parent
    assert tree_state(repo) == before


@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("trusted", [False, True])
def test_stateless_continuation_writes_exactly_k_messages(repo, k, trusted):
    thread = "chat" if trusted else None
    first = commit(repo, {"messages": HISTORY}, thread=thread)
    before = object_ids(repo)
    more = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"new {i}"} for i in range(k)]
    r = commit(repo, {"messages": HISTORY + more}, thread=thread)
    assert r.status == "appended" and not r.deduplicated
    assert r.thread == first.thread
    assert r.appended_messages == k and r.new_messages == k
    written = new_objects(repo, before)
    assert len(written["message"]) == k
    assert written["blob"] == []
    [turn] = written["turn"]
    assert turn.kind == "append" and turn.input == first.tip and turn.output == r.tip
    assert r.new_objects == k + 1
    assert repo.refs.read(first.thread) == r.tip
    assert [m.parent for m in written["message"]].count(first.tip) == 1
    assert len(repo.refs.read_all()) == 1
    entries = convgit.log(repo, first.thread)
    assert len(entries) == len(HISTORY) + k
    assert [e.text for e in reversed(entries)] == [m["content"] for m in HISTORY + more]


def test_two_conversations_sharing_a_prefix_share_objects(repo):
    a = commit(repo, {"messages": HISTORY})
    before = object_ids(repo)
    b_msgs = HISTORY[:2] + conv("Can I fork?", "Yes.")
    b = commit(repo, {"messages": b_msgs})
    assert b.status == "created" and b.thread != a.thread
    written = new_objects(repo, before)
    assert len(written["message"]) == 2
    a_ids = [e.id for e in convgit.conversation(repo, a.thread)]
    b_ids = [e.id for e in convgit.conversation(repo, b.thread)]
    assert a_ids[:2] == b_ids[:2] and a_ids[2:] != b_ids[2:]
    # the new thread records where it left the other one
    assert (b.forked_from["message"], b.forked_from["threads"]) == (a_ids[1], [])
    assert len(object_ids(repo)) == len(before) + 3  # 2 messages + 1 turn


def test_same_text_at_another_position_is_another_object(repo):
    r = commit(repo, {"messages": conv("hi", "hi", "hi")})
    ids = [e.id for e in convgit.conversation(repo, r.thread)]
    assert len(set(ids)) == 3
    r2 = commit(repo, {"messages": conv("hi", first="assistant")})
    assert r2.tip not in ids


def test_a_fork_writes_no_message(repo):
    a = commit(repo, {"messages": HISTORY}, thread="main")
    before = object_ids(repo)
    f = convgit.fork(repo, "main~2", "alt", now_ms=NOW)
    written = new_objects(repo, before)
    assert written["message"] == [] and written["blob"] == []
    [turn] = written["turn"]
    assert turn.kind == "fork" and turn.forked_from == "main" and turn.output == f.tip
    assert repo.refs.read("alt") == f.tip == convgit.rev_parse(repo, "main~2")
    assert repo.refs.read("main") == a.tip
    # continuing the fork statelessly moves the fork, not main
    r = commit(repo, {"messages": HISTORY[:2] + conv("other question")})
    assert r.status == "appended" and r.thread == "alt" and r.new_messages == 1


# -- which thread moves: no thread named ----------------------------------------------------


def test_prefix_ending_at_two_tips_creates_a_new_thread(repo):
    commit(repo, {"messages": HISTORY}, thread="a")
    commit(repo, {"messages": HISTORY}, thread="b")
    r = commit(repo, {"messages": HISTORY + conv("more")})
    assert r.status == "created" and r.thread not in ("a", "b")
    assert (r.forked_from["message"], r.forked_from["threads"]) == (repo.refs.read("a"), ["a", "b"])
    assert repo.refs.read("a") == repo.refs.read("b") != r.tip


def test_unrelated_conversations_get_unique_time_sortable_names(repo):
    names = [commit(repo, {"messages": conv(f"q{i}")}, now_ms=NOW + i * 1000).thread for i in range(3)]
    assert len(set(names)) == 3
    assert names == sorted(names)
    assert all(n.startswith("2023111") for n in names)  # NOW is 2023-11-14


# -- trusted threads ------------------------------------------------------------------------


def test_trusted_thread_create_fast_forward_and_ancestor_noop(repo):
    r1 = commit(repo, {"messages": HISTORY[:2]}, thread="work/t")
    assert (r1.status, r1.thread, r1.appended_messages) == ("created", "work/t", 2)
    r2 = commit(repo, {"messages": HISTORY}, thread="work/t")
    assert (r2.status, r2.appended_messages, r2.new_messages) == ("appended", 2, 2)
    assert repo.refs.read("work/t") == r2.tip
    before = tree_state(repo)
    for prefix in (HISTORY[:1], HISTORY[:2], HISTORY[:3], HISTORY):
        r = commit(repo, {"messages": prefix}, thread="work/t")
        assert r.status == "deduplicated" and r.thread == "work/t"
        assert r.new_objects == 0
    assert tree_state(repo) == before
    assert repo.refs.read("work/t") == r2.tip


def test_trusted_thread_can_reuse_messages_of_another_thread(repo):
    a = commit(repo, {"messages": HISTORY}, thread="a")
    before = object_ids(repo)
    r = commit(repo, {"messages": HISTORY}, thread="b")
    assert r.status == "created" and r.tip == a.tip
    assert new_objects(repo, before)["message"] == []


@pytest.mark.parametrize("diverge_at", [0, 1, 3])
def test_trusted_thread_diverged_is_rejected_and_writes_nothing(repo, diverge_at):
    commit(repo, {"messages": HISTORY}, thread="t")
    before = tree_state(repo)
    dump = repo.index.dump()
    other = [dict(m) for m in HISTORY]
    other[diverge_at]["content"] += " (edited)"
    with pytest.raises(errors.DuplicateConflict) as e:
        commit(repo, {"messages": other + conv("next")}, thread="t")
    assert e.value.code == "duplicate_conflict"
    ids = [x.id for x in convgit.conversation(repo, "t")]
    assert e.value.details["diverged_after"] == (ids[diverge_at - 1] if diverge_at else None)
    assert tree_state(repo) == before
    assert repo.index.dump() == dump


def test_trusted_thread_diverged_with_fork_creates_a_forked_thread(repo):
    t = commit(repo, {"messages": HISTORY}, thread="t")
    ids = [x.id for x in convgit.conversation(repo, "t")]
    before = object_ids(repo)
    edited = HISTORY[:2] + conv("Another question", "Another answer")
    r = commit(repo, {"messages": edited}, thread="t", on_conflict="fork")
    assert r.status == "forked"
    assert r.thread != "t" and r.thread.startswith("t-fork-")
    assert r.forked_from == {"thread": "t", "message": ids[1]}
    assert repo.refs.read("t") == t.tip
    assert repo.refs.read(r.thread) == r.tip
    written = new_objects(repo, before)
    assert len(written["message"]) == 2
    [turn] = written["turn"]
    assert (turn.kind, turn.forked_from, turn.input, turn.output) == ("fork", "t", ids[1], r.tip)
    [row] = [x for x in convgit.threads(repo) if x["name"] == r.thread]
    assert row["forked_from"] == {"thread": "t", "message": ids[1]}
    assert row["messages"] == 4
    # the same payload again: the fork thread already holds it
    again = commit(repo, {"messages": edited}, thread="t", on_conflict="fork")
    assert again.tip == r.tip and again.new_messages == 0


def test_trusted_thread_fork_at_the_first_message(repo):
    commit(repo, {"messages": HISTORY}, thread="t")
    r = commit(repo, {"messages": conv("totally different")}, thread="t", on_conflict="fork")
    assert r.status == "forked" and r.forked_from == {"thread": "t", "message": None}


def test_trusted_thread_same_messages_in_another_order_is_ambiguous(repo):
    commit(repo, {"messages": HISTORY}, thread="t")
    before = tree_state(repo)
    reordered = HISTORY[2:] + HISTORY[:2]
    for on_conflict in ("reject", "fork"):
        with pytest.raises(errors.AmbiguousThread) as e:
            commit(repo, {"messages": reordered}, thread="t", on_conflict=on_conflict)
        assert e.value.code == "ambiguous_thread"
    assert tree_state(repo) == before


def test_on_conflict_must_be_known(repo):
    with pytest.raises(errors.SchemaValidationFailed):
        commit(repo, {"messages": HISTORY}, thread="t", on_conflict="merge")
    assert repo.refs.read_all() == {}


# -- source + upstream thread id ------------------------------------------------------------


def test_source_and_upstream_thread_id_name_a_trusted_thread(repo):
    doc = {"messages": HISTORY[:2], "source": "chatgpt", "upstream_thread_id": "abc-123"}
    r1 = commit(repo, doc)
    assert r1.status == "created" and r1.thread == "chatgpt/abc-123"
    r2 = commit(repo, {**doc, "messages": HISTORY})
    assert r2.status == "appended" and r2.thread == "chatgpt/abc-123" and r2.new_messages == 2
    # another upstream conversation with the same content is its own thread
    r3 = commit(repo, {**doc, "upstream_thread_id": "other"})
    assert r3.status == "created" and r3.thread == "chatgpt/other"
    assert r3.new_messages == 0 and repo.refs.read("chatgpt/other") == r1.tip
    # the upstream thread is trusted: an edited history is a conflict, not a silent fork
    before = tree_state(repo)
    edited = [dict(m) for m in HISTORY]
    edited[0]["content"] = "edited"
    with pytest.raises(errors.DuplicateConflict):
        commit(repo, {**doc, "messages": edited})
    assert tree_state(repo) == before
    # re-sending the same upstream conversation stores nothing (HEAD follows the thread)
    assert commit(repo, {**doc, "messages": HISTORY}).deduplicated
    assert repo.refs.read_head() == "chatgpt/abc-123"
    assert {k: v for k, v in tree_state(repo).items() if k != "HEAD"} == {k: v for k, v in before.items() if k != "HEAD"}


def test_upstream_identity_survives_a_rename_and_an_index_rebuild(repo):
    doc = {"messages": HISTORY[:2], "source": "claude", "upstream_thread_id": "u1"}
    commit(repo, doc)
    convgit.rename_thread(repo, "claude/u1", "mine")
    repo.close()
    (repo.path / "index.sqlite").unlink()
    repo = Repository.open(repo.path)
    r = commit(repo, {**doc, "messages": HISTORY})
    assert r.status == "appended" and r.thread == "mine"
    repo.close()


def test_upstream_with_commit_many(repo):
    docs = [
        {"messages": HISTORY[:2], "source": "s", "upstream_thread_id": "x"},
        {"messages": HISTORY, "source": "s", "upstream_thread_id": "x"},
    ]
    r1, r2 = convgit.commit_many(repo, docs, now_ms=NOW)
    assert (r1.status, r1.thread) == ("created", "s/x")
    assert (r2.status, r2.thread, r2.new_messages) == ("appended", "s/x", 2)
    assert repo.refs.read_all() == {"s/x": r2.tip}


# -- recorded model calls -------------------------------------------------------------------


def test_a_model_call_records_a_turn_even_when_every_message_is_old(repo):
    first = commit(repo, {"messages": HISTORY})
    before = object_ids(repo)
    call = {
        "messages": HISTORY[:3],
        "response": HISTORY[3],
        "model": "gpt-4o",
        "usage": {"input_tokens": 30, "output_tokens": 7},
        "started_at": "2023-11-14T20:00:00Z",
        "duration_ms": 1200,
    }
    r = commit(repo, call)
    assert r.deduplicated and r.new_messages == 0 and r.thread == first.thread
    assert r.turn is not None and r.new_objects == 1
    written = new_objects(repo, before)
    assert written["message"] == []
    [turn] = written["turn"]
    assert isinstance(turn, Turn)
    assert (turn.kind, turn.model, turn.usage, turn.duration_ms) == ("call", "gpt-4o", call["usage"], 1200)
    assert turn.started_at == 1_699_992_000_000
    assert turn.output == first.tip and turn.input == repo.objects.read(first.tip).parent
    assert repo.refs.read(first.thread) == first.tip  # nothing moved
    assert [e.turn for e in repo.refs.read_log(first.thread)][-1] == r.turn
    # the response message now shows the call's model and time (the earliest turn that made it)
    newest = convgit.log(repo, first.thread, count=1)[0].to_json(repo)
    assert newest["model"] == "gpt-4o" and newest["started_at"] == "2023-11-14T20:00:00.000Z"


def test_a_model_call_with_no_time_records_a_new_turn_each_time(repo):
    call = {"messages": HISTORY[:1], "response": HISTORY[1], "model": "m"}
    r1 = commit(repo, call, now_ms=NOW)
    r2 = commit(repo, call, now_ms=NOW + 1)
    assert r1.turn and r2.turn and r1.turn != r2.turn
    assert r2.deduplicated and r2.new_messages == 0 and r2.new_objects == 1
    assert [e.turn for e in repo.refs.read_log(r1.thread)] == [r1.turn, r2.turn]


def test_the_same_recorded_call_twice_writes_nothing(repo):
    call = {"messages": HISTORY[:1], "response": HISTORY[1], "model": "m", "started_at": 1_699_999_999_000}
    r1 = commit(repo, call)
    before = tree_state(repo)
    log_before = repo.refs.read_log(r1.thread)
    r2 = commit(repo, call, now_ms=NOW + 5000)
    assert r2.deduplicated and r2.turn in (None, r1.turn) and r2.new_objects == 0
    assert repo.refs.read_log(r1.thread) == log_before
    assert tree_state(repo) == before


def test_a_call_ending_mid_thread_gets_its_own_thread(repo):
    first = commit(repo, {"messages": HISTORY}, thread="main")
    call = {"messages": HISTORY[:1], "response": HISTORY[1], "model": "m"}
    r = commit(repo, call)
    assert r.thread != "main" and r.turn and r.new_messages == 0
    assert repo.refs.read(r.thread) == convgit.rev_parse(repo, "main~2")
    assert repo.refs.read("main") == first.tip


# -- commit_many == commit, one by one ------------------------------------------------------


def _results(rs):
    return [(r.status, r.thread, r.tip, r.deduplicated, r.appended_messages, r.new_messages, r.turn) for r in rs]


@pytest.fixture
def template(tmp_path):
    """An empty fsync-off store to copy (cheaper than an init per hypothesis example)."""
    r = fast_repo(tmp_path / "template")
    r.index  # an empty index too, so no copy has to build one
    r.close()
    return r.path


def _copy(template, dest):
    shutil.copytree(template, dest / ".convgit")
    return Repository.open(dest / ".convgit")


def _check_many_equals_sequential(tmp, docs, template=None):
    if template is None:
        a, b = fast_repo(tmp / "a"), fast_repo(tmp / "b")
    else:
        a, b = _copy(template, tmp / "a"), _copy(template, tmp / "b")
    try:
        seq = [convgit.commit(a, d, now_ms=NOW) for d in docs]
        bulk = convgit.commit_many(b, docs, now_ms=NOW)
        assert _results(bulk) == _results(seq)
        assert [r.new_objects for r in bulk] == [r.new_objects for r in seq]
        assert b.refs.read_all() == a.refs.read_all()
        assert object_ids(b) == object_ids(a)
        assert b.index.dump() == a.index.dump()
        assert convgit.threads(b) == convgit.threads(a)
    finally:
        a.close()
        b.close()


_texts = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=5)


def _family_doc(texts, first, kind):
    msgs = conv(*texts, first=first)
    if kind == "plain":
        return {"messages": msgs}
    if kind == "model":
        return {"messages": msgs, "model": "m"}
    # a recorded call: the last message is the response (a fixed time: the same call twice
    # is the same event)
    return {"messages": msgs[:-1], "response": msgs[-1], "model": "m", "started_at": 1_600_000_000_000}


# Conversations over a tiny alphabet: shared prefixes, duplicates, continuations and forks.
_doc = st.builds(
    _family_doc,
    _texts,
    st.sampled_from(["user", "user", "assistant"]),
    st.sampled_from(["plain", "plain", "model", "call"]),
)


@given(st.lists(_doc, min_size=1, max_size=7))
def test_commit_many_matches_sequential_commits(tmp_path_factory, template, docs):
    _check_many_equals_sequential(tmp_path_factory.mktemp("many"), docs, template)


def test_commit_many_matches_sequential_commits_on_a_family(tmp_path):
    docs = [
        {"messages": HISTORY},
        {"messages": HISTORY},  # duplicate
        {"messages": HISTORY + conv("more")},  # continuation
        {"messages": HISTORY[:2] + conv("fork here")},  # fork mid-thread
        {"messages": HISTORY[:2] + conv("fork here", "and on")},  # continues the fork
        {"messages": HISTORY[:3]},  # a prefix
        {"messages": conv("unrelated")},
        {"messages": HISTORY[:1], "response": HISTORY[1], "model": "m", "started_at": 5},  # a call
    ]
    _check_many_equals_sequential(tmp_path, docs)


def test_commit_many_is_durable_with_fsync_on(repo):
    rs = convgit.commit_many(repo, [{"messages": conv(f"q{i}", f"a{i}")} for i in range(40)], now_ms=NOW)
    assert len({r.thread for r in rs}) == 40
    with Repository.open(repo.path) as again:
        assert again.refs.read_all() == {r.thread: r.tip for r in rs}
        assert not list(repo.path.rglob("tmp_*"))


def test_commit_many_with_one_bad_payload_writes_nothing(repo):
    commit(repo, {"messages": HISTORY})
    before = tree_state(repo)
    for bad in ({"messages": []}, {"messages": [{"role": "wizard", "content": "x"}]}, b"{nope"):
        with pytest.raises(errors.InvalidInput):
            convgit.commit_many(repo, [{"messages": conv("fine")}, bad], now_ms=NOW)
    assert tree_state(repo) == before


# -- another writer -------------------------------------------------------------------------


def test_a_long_lived_handle_sees_what_another_handle_committed(repo):
    commit(repo, {"messages": HISTORY[:2]}, thread="t")
    assert convgit.threads(repo)[0]["tip"] == repo.refs.read("t")  # index open on this handle
    with Repository.open(repo.path) as other:
        moved = commit(other, {"messages": HISTORY}, thread="t")
    # a stateless continuation of what the other handle wrote fast-forwards the same thread
    r = commit(repo, {"messages": HISTORY + conv("and more")})
    assert r.status == "appended" and r.thread == "t" and r.new_messages == 1
    assert repo.refs.read("t") == r.tip != moved.tip


def test_a_long_lived_handle_sees_a_ref_moved_behind_the_index(repo):
    first = commit(repo, {"messages": HISTORY[:2]}, thread="t")
    assert convgit.threads(repo)[0]["tip"] == first.tip  # index open on this handle
    with Repository.open(repo.path) as other:
        oid, _ = other.objects.write(Message(parent=first.tip, role="user", parts=(TextPart(text=HISTORY[2]["content"]),)))
        other.refs.update("t", oid, expected=first.tip, exists=other.objects.contains)
    r = commit(repo, {"messages": HISTORY})
    assert (r.status, r.thread) == ("appended", "t")


# -- bad input: the right error, nothing written --------------------------------------------

NAN = float("nan")
BAD_INPUT = [
    ("json_truncated", b'{"messages": [', errors.InvalidInput),
    ("json_trailing", b'{"messages": []} x', errors.InvalidInput),
    ("json_nan_literal", b'{"messages": [{"role": "user", "content": "x", "meta": {"a": NaN}}]}', errors.InvalidInput),
    ("not_utf8", b'{"messages": [{"role": "user", "content": "\xff"}]}', errors.InvalidInput),
    ("bom", b'\xef\xbb\xbf{"messages": [{"role": "user", "content": "x"}]}', errors.InvalidInput),
    ("empty_bytes", b"", errors.InvalidInput),
    ("json_number", b"42", errors.SchemaValidationFailed),
    ("empty_list", b"[]", errors.SchemaValidationFailed),
    ("empty_messages", {"messages": []}, errors.SchemaValidationFailed),
    ("messages_not_list", {"messages": "hi"}, errors.SchemaValidationFailed),
    ("no_messages_key", {"conversation_id": "x"}, errors.SchemaValidationFailed),
    ("bare_completion", {"choices": [{"message": {"role": "assistant", "content": "x"}}]}, errors.SchemaValidationFailed),
    ("unknown_role", {"messages": [{"role": "wizard", "content": "x"}]}, errors.SchemaValidationFailed),
    ("role_not_str", {"messages": [{"role": 1, "content": "x"}]}, errors.SchemaValidationFailed),
    ("missing_role", {"messages": [{"content": "x"}]}, errors.SchemaValidationFailed),
    ("missing_content", {"messages": [{"role": "user"}]}, errors.SchemaValidationFailed),
    ("empty_content", {"messages": [{"role": "user", "content": ""}]}, errors.SchemaValidationFailed),
    ("null_content", {"messages": [{"role": "user", "content": None}]}, errors.SchemaValidationFailed),
    ("empty_parts", {"messages": [{"role": "user", "content": []}]}, errors.SchemaValidationFailed),
    ("content_int", {"messages": [{"role": "user", "content": 42}]}, errors.SchemaValidationFailed),
    ("content_part_int", {"messages": [{"role": "user", "content": [42]}]}, errors.SchemaValidationFailed),
    ("text_part_not_str", {"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, errors.SchemaValidationFailed),
    ("message_not_object", {"messages": ["hi"]}, errors.SchemaValidationFailed),
    ("meta_not_object", {"messages": [{"role": "user", "content": "x", "meta": [1]}]}, errors.SchemaValidationFailed),
    ("bad_base64", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!"}}]}]}, errors.SchemaValidationFailed),
    ("tool_call_no_name", {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}]}, errors.SchemaValidationFailed),
    ("bad_started_at", {"messages": conv("x"), "started_at": "yesterday"}, errors.SchemaValidationFailed),
    ("usage_not_object", {"messages": conv("x"), "usage": 12}, errors.SchemaValidationFailed),
    ("model_not_str", {"messages": conv("x"), "model": 4}, errors.SchemaValidationFailed),
    ("nan_in_meta", {"messages": [{"role": "user", "content": "x", "meta": {"a": NAN}}]}, errors.SchemaValidationFailed),
    ("inf_in_args", {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"x": math.inf}}}]}]}, errors.SchemaValidationFailed),
    ("int_key_in_meta", {"messages": [{"role": "user", "content": "x", "meta": {1: "a"}}]}, errors.SchemaValidationFailed),
    ("huge_int", {"messages": [{"role": "user", "content": "x", "meta": {"n": 2**64}}]}, errors.SchemaValidationFailed),
    ("lone_surrogate", {"messages": [{"role": "user", "content": "bad \ud800 text"}]}, errors.InvalidInput),
    ("lone_surrogate_long", {"messages": [{"role": "user", "content": "\ud800" + "x" * 40000}]}, errors.InvalidInput),
    ("lone_surrogate_json_str", '{"messages": [{"role": "user", "content": "\ud800"}]}', errors.InvalidInput),
    ("lone_surrogate_json_escape", b'{"messages": [{"role": "user", "content": "\\ud800"}]}', errors.InvalidInput),
    ("nan_in_usage", {"messages": conv("x"), "usage": {"cost": NAN}}, errors.SchemaValidationFailed),
    ("claimed_id", {"messages": [{"role": "user", "content": "x", "id": "f" * 64}]}, errors.HashMismatch),
    ("claimed_parent", {"messages": [{"role": "user", "content": "x", "parent": "e" * 64}]}, errors.NotFound),
    ("parent_not_id", {"messages": [{"role": "user", "content": "x", "parent": "msg_1"}]}, errors.SchemaValidationFailed),
    ("empty_response", {"messages": [], "response": []}, errors.SchemaValidationFailed),
    ("response_no_choices", {"messages": conv("x"), "response": {"choices": []}}, errors.SchemaValidationFailed),
]


@pytest.mark.parametrize("trusted", [None, "t"])
@pytest.mark.parametrize("name,data,cls", BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_raises_its_error_and_writes_nothing(repo, name, data, cls, trusted):
    commit(repo, {"messages": HISTORY[:2]}, thread="h")
    commit(repo, {"messages": conv("x")}, thread="t")
    before = tree_state(repo)
    dump = repo.index.dump()
    with pytest.raises(errors.ConvgitError) as e:
        commit(repo, data, thread=trusted)
    assert isinstance(e.value, cls), e.value
    assert e.value.to_json()["error_code"] == e.value.code == type(e.value).code
    assert tree_state(repo) == before
    assert repo.index.dump() == dump


def test_bad_input_on_a_fresh_store_creates_nothing(repo):
    before = tree_state(repo)
    for _, data, cls in BAD_INPUT:
        with pytest.raises(cls):
            commit(repo, data)
    assert tree_state(repo) == before
    assert object_ids(repo) == set()


def test_correct_claimed_ids_and_parents_are_accepted(repo):
    r = commit(repo, {"messages": conv("x")})
    again = commit(repo, {"messages": [{"role": "user", "content": "x", "id": r.tip, "parent": None}]})
    assert again.deduplicated
    nxt = commit(repo, {"messages": [
        {"role": "user", "content": "x", "id": r.tip},
        {"role": "assistant", "content": "y", "parent": r.tip},
    ]})
    assert nxt.status == "appended" and repo.objects.read(nxt.tip).parent == r.tip
    # a non-convgit id (an OpenAI message id, say) is not a claim: no error, same message
    other = commit(repo, {"messages": [{"role": "user", "content": "x", "id": "msg_abc"}]})
    assert other.deduplicated and other.tip == r.tip


# -- limits ---------------------------------------------------------------------------------

LIMITS = "[limits]\nmax_messages = 3\nmax_message_bytes = 300\nmax_payload_bytes = 2000\n"


@pytest.mark.parametrize(
    "name,data",
    [
        ("too_many_messages_json", json.dumps({"messages": conv("a", "b", "c", "d")}).encode()),
        ("too_many_messages_dict", {"messages": conv("a", "b", "c", "d")}),
        ("too_many_with_response", {"messages": conv("a", "b", "c"), "response": {"role": "assistant", "content": "d"}}),
        ("message_too_big", {"messages": conv("x" * 400)}),
        ("message_too_big_json", json.dumps({"messages": conv("x" * 400)}).encode()),
        ("payload_too_big", json.dumps({"messages": conv("small")}).encode()[:-1] + b" " * 2000 + b"}"),
        ("payload_too_big_str", json.dumps({"messages": conv("small")})[:-1] + " " * 2000 + "}"),
    ],
)
def test_limits_raise_payload_too_large_and_write_nothing(repo, name, data):
    repo = set_config(repo, LIMITS)
    commit(repo, {"messages": conv("a")}, thread="t")
    before = tree_state(repo)
    with pytest.raises(errors.PayloadTooLarge) as e:
        commit(repo, data, thread="t")
    assert e.value.code == "payload_too_large"
    with pytest.raises(errors.PayloadTooLarge):
        convgit.commit_many(repo, [data])
    assert tree_state(repo) == before
    repo.close()


def test_limits_allow_what_is_at_the_limit(repo):
    repo = set_config(repo, LIMITS)
    r = commit(repo, json.dumps({"messages": conv("a", "b", "c")}).encode())
    assert r.new_messages == 3
    # attachments are blobs: they do not count towards the bytes of their message
    png = base64.b64encode(b"\x89PNG" + bytes(600)).decode()
    r = commit(repo, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}]}]})
    assert r.new_messages == 1
    repo.close()


def test_a_bad_config_is_an_error(repo):
    (repo.path / "config.toml").write_text("[limits]\nmax_messages = 'many'\n")
    with pytest.raises(errors.InvalidInput):
        Repository.open(repo.path)
    (repo.path / "config.toml").write_text("[limits\n")
    with pytest.raises(errors.InvalidInput):
        Repository.open(repo.path)


# -- OpenAI Chat Completions ----------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
OPENAI_REQUEST = {
    "model": "gpt-4o",
    "temperature": 0.2,
    "messages": [
        {"role": "system", "content": "You are a weather bot."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What's the weather where this photo was taken?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode(), "detail": "low"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "22°C, sunny"},
    ],
}
OPENAI_RESPONSE = {
    "id": "chatcmpl-123",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "It is 22°C and sunny in Paris."}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 120, "completion_tokens": 11, "total_tokens": 131},
    "system_fingerprint": "fp_1",
}


def test_openai_request_with_tools_image_and_completion_response(repo):
    r = commit(repo, json.dumps({**OPENAI_REQUEST, "response": OPENAI_RESPONSE}).encode())
    assert r.status == "created" and r.new_messages == 5
    entries = convgit.conversation(repo, r.thread)
    msgs = [e.message for e in entries]
    msgs_ids = [e.id for e in entries]
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    # content part array: text + image as an attachment whose bytes are a blob
    text, image = msgs[1].parts
    assert text == TextPart(text="What's the weather where this photo was taken?")
    assert isinstance(image, AttachmentPart)
    assert (image.mime_type, image.size, image.url, image.meta) == ("image/png", len(PNG), None, {"detail": "low"})
    assert repo.objects.read(image.blob) == Blob(data=PNG)
    # tool_calls: the arguments are kept exactly as sent
    [call] = msgs[2].parts
    assert call == ToolCallPart(name="get_weather", id="call_1", arguments="{\"city\": \"Paris\"}")
    # the tool role answers that call
    [result] = msgs[3].parts
    assert result == ToolResultPart(tool_call_id="call_1", output="22°C, sunny")
    assert msgs[4].parts == (TextPart(text="It is 22°C and sunny in Paris."),)
    assert all(m.meta is None for m in msgs)
    # the call: request model, resolved model, options, usage and response ids in the turn
    turn = repo.objects.read(r.turn)
    assert (turn.kind, turn.model, turn.resolved_model) == ("call", "gpt-4o", "gpt-4o-2024-08-06")
    assert turn.options == {"temperature": 0.2}
    assert turn.usage == OPENAI_RESPONSE["usage"]
    assert turn.meta == {
        "response_id": "chatcmpl-123", "response_created": 1_700_000_000,
        "response_system_fingerprint": "fp_1", "finish_reason": "stop",
    }
    # the call covers its response: from the request's last message to the tip
    assert turn.input == msgs_ids[3] and turn.output == r.tip
    newest = convgit.log(repo, r.thread, count=1)[0].to_json(repo)
    assert newest["model"] == "gpt-4o-2024-08-06"
    assert newest["text"] == "It is 22°C and sunny in Paris."
    # the next stateless call re-sends everything: only the new tail is stored
    nxt = {
        **OPENAI_REQUEST,
        "messages": OPENAI_REQUEST["messages"] + [OPENAI_RESPONSE["choices"][0]["message"], {"role": "user", "content": "And tomorrow?"}],
        "response": {**OPENAI_RESPONSE, "id": "chatcmpl-124", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Rain."}, "finish_reason": "stop"}]},
    }
    before = object_ids(repo)
    r2 = commit(repo, nxt)
    assert (r2.status, r2.thread, r2.new_messages, r2.appended_messages) == ("appended", r.thread, 2, 2)
    written = new_objects(repo, before)
    assert len(written["message"]) == 2 and written["blob"] == [] and len(written["turn"]) == 1


def test_openai_assistant_tool_call_with_empty_content_and_several_calls(repo):
    doc = {
        "messages": [
            {"role": "user", "content": "two things"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{\"x\": 1}"}},
            ]},
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "B"}]},
        ]
    }
    r = commit(repo, doc)
    msgs = [e.message for e in convgit.conversation(repo, r.thread)]
    assert [p.id for p in msgs[1].parts] == ["a", "b"]
    assert all(isinstance(p, ToolCallPart) for p in msgs[1].parts)
    assert msgs[2].parts == (ToolResultPart(tool_call_id="a", output="A"),)
    assert msgs[3].parts[0].tool_call_id == "b"


def test_role_aliases_are_normalised(repo):
    a = commit(repo, {"messages": [{"role": "human", "content": "hi"}, {"role": "gpt", "content": "yo"}]})
    b = commit(repo, {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    assert a.tip == b.tip and b.deduplicated


def test_text_is_stored_byte_exact(repo):
    texts = ["  padded  ", "caf\u00e9", "cafe\u0301", "tab\tnewline\n", "👋🏽"]
    for t in texts:
        r = commit(repo, {"messages": [{"role": "user", "content": t}]})
        assert convgit.log(repo, r.tip)[0].text == t
        assert isinstance(repo.objects.read(r.tip), Message)
    assert len(repo.refs.read_all()) == len(texts)


def _up(*texts):
    return {"source": "chatgpt", "upstream_thread_id": "X",
            "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]}


@pytest.mark.parametrize("second", [
    _up("q1", "a1"),                  # a prefix of the first: the thread holds it already
    _up("q1", "a1", "q2", "a2"),      # an extension
    _up("q1", "a1", "q2"),            # the same
    _up("q1", "other"),               # diverges: a conflict
    _up("q2", "a1", "q1"),            # the same messages in another order
], ids=["prefix", "extension", "same", "diverged", "reordered"])
def test_a_batch_naming_one_upstream_thread_twice_decides_like_two_commits(tmp_path, second):
    """Two payloads of one batch for the same upstream conversation: the second is decided
    against what the first will write (its tip, its messages, not yet stored), with the
    result two separate commits give (it used to fail reading the first's objects)."""
    first = _up("q1", "a1", "q2")

    def outcome(run):
        try:
            return [(r.status, r.thread, r.tip) for r in run()]
        except errors.ConvgitError as e:
            return type(e).__name__

    seq = fast_repo(tmp_path / "seq")

    def sequential():
        return [convgit.commit(seq, first, now_ms=NOW), convgit.commit(seq, second, now_ms=NOW)]

    bulk = fast_repo(tmp_path / "bulk")
    expected = outcome(sequential)
    got = outcome(lambda: convgit.commit_many(bulk, [first, second], now_ms=NOW))
    if isinstance(expected, str):  # a conflict: the batch fails as the second commit does
        assert got == expected
    else:
        assert got == expected
        assert bulk.refs.read_all() == seq.refs.read_all()
