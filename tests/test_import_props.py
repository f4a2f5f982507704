"""Property tests for ingestion: a random tree imports to the same DAG whatever the order of
its nodes; re-importing writes nothing; random input is either accepted (and round-trips
through a native export to the same ids) or rejected with a known error code."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from convgit import api
from convgit.errors import ALL_ERRORS, ConvgitError
from convgit.objects import Message
from helpers.store import NOW, fast_repo, object_ids, tree_state

KNOWN = {c.code for c in ALL_ERRORS}


@st.composite
def trees(draw):
    n = draw(st.integers(1, 12))
    parents = [None] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    texts = draw(st.lists(st.sampled_from(["a", "b", "same", "é", "🧠", ""]), min_size=n, max_size=n))
    mapping = {}
    for i in range(n):
        role = "user" if (i == 0 or parents[i] is None or i % 2 == 0) else "assistant"
        mapping[f"n{i}"] = {"id": f"n{i}", "parent": None if parents[i] is None else f"n{parents[i]}",
                            "children": [f"n{j}" for j in range(n) if parents[j] == i],
                            "message": {"id": f"n{i}", "author": {"role": role}, "create_time": 1000.0 + i,
                                        "content": {"content_type": "text", "parts": [texts[i] or "x"]}}}
    order = draw(st.permutations(list(mapping)))
    current = draw(st.sampled_from(list(mapping)))
    doc = {"id": "c", "conversation_id": "c", "current_node": current, "mapping": mapping}
    shuffled = {**doc, "mapping": {k: mapping[k] for k in order}}
    return doc, shuffled


def _messages(repo):
    return {o for o in object_ids(repo) if isinstance(repo.objects.read(o), Message)}


@settings(max_examples=30)
@given(trees())
def test_tree_import_order_independent_and_idempotent(tmp_path_factory, pair):
    doc, shuffled = pair
    base = tmp_path_factory.mktemp("t")
    a, b = fast_repo(base / "a"), fast_repo(base / "b")
    (base / "a.json").write_text(json.dumps([doc]))
    (base / "b.json").write_text(json.dumps([shuffled]))
    ra = api.import_paths(a, [base / "a.json"], now_ms=NOW)
    api.import_paths(b, [base / "b.json"], now_ms=NOW)
    assert ra.failures == []
    assert a.refs.read_all() == b.refs.read_all()
    assert _messages(a) == _messages(b)
    state = tree_state(a)
    again = api.import_paths(a, [base / "b.json"], now_ms=NOW + 1)
    assert again.new_objects == 0 and tree_state(a) == state
    a.close()
    b.close()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10,
)
messages = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool", "bogus", "human"]),
                                  "content": st.one_of(st.text(max_size=30), json_values)})


@settings(max_examples=60)
@given(st.one_of(st.lists(messages, max_size=4).map(lambda m: {"messages": m}), json_values))
def test_random_input_is_accepted_and_round_trips_or_rejected_with_a_code(tmp_path_factory, doc):
    base = tmp_path_factory.mktemp("f")
    repo = fast_repo(base / "s")
    f = base / "in.json"
    f.write_text(json.dumps(doc, ensure_ascii=False), "utf-8")
    state = tree_state(repo)
    rep = api.import_paths(repo, [f], now_ms=NOW)
    for c in rep.conversations:
        assert c.status in ("imported", "skipped", "deduplicated"), c
        if c.error_code:
            assert c.error_code in KNOWN
    if rep.failures:
        assert tree_state(repo) == state
        return
    for name, tip in repo.refs.read_all().items():
        out = base / "x.json"
        out.write_text(api.export(repo, [name]))
        other = fast_repo(base / "o")
        r2 = api.import_paths(other, [out], now_ms=NOW)
        assert r2.failures == [] and tip in other.refs.read_all().values()
        other.close()
    try:
        api.commit(repo, doc)
    except ConvgitError as e:
        assert e.code in KNOWN
    repo.close()
