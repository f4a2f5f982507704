"""Property (issue 9): any sequence of commit / import / fork / delete / rename / gc / merge
leaves every message reachable from a surviving thread with exactly the provenance it had,
and a gc at any point changes no answer. A gc killed at each of its crash points leaves no
reachable message without its turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import example, given, settings
from hypothesis import strategies as st

import convgit
from convgit import api
from convgit.errors import ConvgitError
from helpers.store import NOW, fast_repo

TEXTS = ["hi", "q", "a", "more", "why?"]


def snapshot(repo) -> dict:
    """thread → [(id, time, model, usage tokens, provenance)] for every message, tip first."""
    out = {}
    for name in sorted(repo.refs.read_all()):
        rows = []
        for e in convgit.log(repo, name):
            t = e.turn or {}
            rows.append((e.id, t.get("started_at"), t.get("model"), t.get("input_tokens"), t.get("output_tokens"),
                         t.get("provenance")))
        out[name] = rows
    return out


def _payload(texts: list[str], model: str | None, tokens: int) -> dict:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
    doc: dict = {"messages": msgs[:-1] or msgs, "model": model}
    if len(msgs) > 1:
        doc["response"] = msgs[-1]
        doc["usage"] = {"input_tokens": tokens, "output_tokens": tokens + 1}
    return doc


ops = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from("abcd"), st.lists(st.sampled_from(TEXTS), min_size=1, max_size=4),
              st.sampled_from([None, "m1", "m2"])),
    st.tuples(st.just("import"), st.sampled_from(["x1", "x2", ""]), st.lists(st.sampled_from(TEXTS), min_size=1, max_size=4)),
    st.tuples(st.just("fork"), st.sampled_from("abcd"), st.integers(0, 3), st.sampled_from("efg")),
    st.tuples(st.just("delete"), st.sampled_from("abcdefg")),
    st.tuples(st.just("rename"), st.sampled_from("abcdefg"), st.sampled_from("hij")),
    st.tuples(st.just("gc")),
), min_size=1, max_size=12)


def _import_doc(tmp, cid: str, texts: list[str], t0: int) -> str:
    mapping = {"root": {"id": "root", "parent": None, "children": [], "message": None}}
    parent = "root"
    for i, text in enumerate(texts):
        nid = f"{cid}-{i}"
        mapping[parent]["children"].append(nid)
        mapping[nid] = {"id": nid, "parent": parent, "children": [], "message": {
            "id": nid, "author": {"role": "user" if i % 2 == 0 else "assistant"}, "create_time": t0 / 1000 + i,
            "metadata": {"model_slug": "gpt-imp"} if i % 2 else {},
            "content": {"content_type": "text", "parts": [text]}}}
        parent = nid
    doc = {"mapping": mapping, "current_node": parent, "title": cid or "untitled", "create_time": t0 / 1000}
    if cid:
        doc["id"] = cid
    path = os.path.join(tmp, f"imp-{cid or 'none'}-{t0}.json")
    with open(path, "w") as f:
        json.dump([doc], f)
    return path


@settings(max_examples=40)
@given(ops)
@example([("commit", "a", ["hi", "q"], "m1"), ("fork", "a", 1, "e"), ("delete", "a"), ("gc",)])
@example([("import", "x1", ["hi", "q", "a"]), ("fork", "a", 0, "e"), ("import", "", ["hi", "q"]), ("gc",)])
def test_provenance_survives_every_sequence(tmp_path_factory, seq):
    tmp = tmp_path_factory.mktemp("p")
    repo = fast_repo(tmp / "s")
    clock = NOW
    try:
        for op in seq:
            clock += 1000  # time moves on: a later event never becomes a message's earliest
            before = snapshot(repo)
            kind = op[0]
            try:
                if kind == "commit":
                    _, thread, texts, model = op
                    convgit.commit(repo, _payload(texts, model, len(texts)), thread=thread, now_ms=clock,
                                   on_conflict="fork")
                elif kind == "import":
                    _, cid, texts = op
                    api.import_paths(repo, [_import_doc(str(tmp), cid, texts, clock)], now_ms=clock)
                elif kind == "fork":
                    _, src, n, name = op
                    convgit.fork(repo, f"{src}~{n}", name, now_ms=clock)
                elif kind == "delete":
                    convgit.delete_thread(repo, op[1])
                elif kind == "rename":
                    convgit.rename_thread(repo, op[1], op[2])
                else:
                    api.gc(repo, prune="now")
            except ConvgitError:
                assert snapshot(repo) == before  # a refused operation changes nothing
                continue
            after = snapshot(repo)
            if kind == "gc":
                assert after == before
            elif kind == "delete":
                assert after == {k: v for k, v in before.items() if k != op[1]}
            elif kind == "rename":
                assert after[op[2]] == before[op[1]]
                assert {k: v for k, v in after.items() if k != op[2]} == {k: v for k, v in before.items() if k != op[1]}
        # Whatever happened, a gc and a merge into an empty store answer the same.
        want = snapshot(repo)
        api.gc(repo, prune="now")
        assert snapshot(repo) == want
        dst = fast_repo(tmp / "d")
        try:
            api.merge(dst, repo.path)
            assert snapshot(dst) == want
        finally:
            dst.close()
    finally:
        repo.close()


CRASH_POINTS = ("gc_after_mark", "gc_after_pack", "gc_mid_sweep", "gc_before_index")


def test_a_gc_killed_anywhere_leaves_every_reachable_message_its_turn(tmp_path):
    """A store where the provenance rule is what keeps a turn (its thread was deleted; a fork
    holds the message), gc killed (os._exit) at each crash point, then a full gc: the fork's
    message keeps its time and model, and fsck finds nothing missing."""
    for point in CRASH_POINTS:
        d = tmp_path / point
        repo = fast_repo(d / ".convgit")
        for i in range(30):  # enough loose objects for the sweep to have a middle
            convgit.commit(repo, _payload([f"q{i}", f"a{i}"], "mx", 3), thread=f"t{i}", now_ms=NOW + i)
        convgit.fork(repo, "t0~1", "keep", now_ms=NOW + 100)
        want = snapshot(repo)["keep"]
        assert want[0][2] == "mx"
        convgit.delete_thread(repo, "t0")
        repo.close()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
        env.update(CONVGIT_DIR=str(d / ".convgit"), CONVGIT_CRASH_AT=point)
        r = subprocess.run([sys.executable, "-m", "convgit", "gc", "--prune=now"], env=env, capture_output=True)
        assert r.returncode == 137, (point, r.stderr)
        env.pop("CONVGIT_CRASH_AT")
        for args in (["gc", "--prune=now"], ["fsck", "--json"]):
            r = subprocess.run([sys.executable, "-m", "convgit", *args], env=env, capture_output=True)
            assert r.returncode == 0, (point, args, r.stdout[-2000:], r.stderr[-2000:])
        with convgit.open_repo(d / ".convgit") as repo:
            assert snapshot(repo)["keep"] == want, point
