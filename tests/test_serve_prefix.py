"""The serve prefix cache (convgit/serve/prefix.py) and the committer's stored-tip hint.

Through the real `convgit serve` (127.0.0.1, the fake upstream of tests/helpers/serve.py):
every recorded call's chain is the one computed from its bodies without any cache (edited
histories and values equal in Python but not in JSON — ``1``, ``1.0``, ``true`` — included),
and a gc that pruned a history the server had cached and committed makes the next call
write it all again (nothing recorded whose parent is missing; fsck clean). In process: the
cache is used (one full parse per conversation) and the hole check stops growing with the
history (the committer's hint).
"""

from __future__ import annotations

import os

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import convgit
from convgit import decide, graph
from convgit.ingest import build_chain
from convgit.ingest.chat import parse_chat
from convgit.repository import Repository
from convgit.serve import record as rec_mod
from convgit.serve.prefix import PrefixCache
from convgit.serve.recorder import Recorder

sys.path.insert(0, str(Path(__file__).parent))
from helpers.serve import FakeUpstream, ServeProcess  # noqa: E402


@pytest.fixture(scope="module")
def upstream():
    up = FakeUpstream().start()
    yield up
    up.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory, upstream):
    store = tmp_path_factory.mktemp("prefix") / "s"
    convgit.init(store).close()
    sp = ServeProcess(store, upstream.url)
    sp.wait_listening()
    yield store, sp
    sp.stop()


def _expected_tip(messages: list, answer: dict) -> str:
    """The chain's tip computed from the bodies alone: no cache, no server."""
    doc = {"model": "gpt-fake", "messages": messages,
           "response": {"choices": [{"index": 0, "message": answer}]}}
    return build_chain(parse_chat(doc).all_messages).tip


def _call(c: httpx.Client, sp: ServeProcess, messages: list) -> tuple[dict, dict]:
    """One whole call; (its answer message, its recorded summary)."""
    n = len(sp.calls)
    r = c.post(sp.url + "/v1/chat/completions", json={"model": "gpt-fake", "messages": messages})
    assert r.status_code == 200, r.text
    sp.wait_calls(n + 1)
    doc = sp.calls[-1]
    assert "not_recorded" not in doc, doc
    return r.json()["choices"][0]["message"], doc


def _cli(store: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "convgit", "-C", str(store), *args],
                          capture_output=True, text=True, cwd=str(store))


def test_every_call_is_stored_as_sent_whatever_the_cache_holds(served):
    store, sp = served
    base = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "one", "meta": {"n": 1}}]
    hist = list(base)
    with httpx.Client(timeout=30) as c:
        for i in range(4):  # the cache learns this conversation
            answer, doc = _call(c, sp, hist)
            assert doc["tip"] == _expected_tip(hist, answer)
            hist += [answer, {"role": "user", "content": f"more {i}"}]
        # The same history with message 1's meta value changed to ones Python calls equal
        # (1 == 1.0 == True): each is another message, stored as sent.
        tips = set()
        for value in (1.0, True):
            edited = [dict(m) for m in hist]
            edited[1] = {**edited[1], "meta": {"n": value}}
            answer, doc = _call(c, sp, edited)
            assert doc["tip"] == _expected_tip(edited, answer)
            tips.add(doc["tip"])
            repo = convgit.open_repo(store)
            try:
                chain = [m for _, m in graph.iter_ancestry(repo.objects, doc["tip"])][::-1]
            finally:
                repo.close()
            got = chain[1].meta["n"]
            assert got == value and type(got) is type(value)
        assert len(tips) == 2
        # an edit in the middle, a dropped message, the answer re-sent in another shape:
        # each stored exactly as sent
        mid = [dict(m) for m in hist]
        mid[3] = {"role": "user", "content": "edited"}
        reshaped = [dict(m) for m in hist]
        reshaped[2] = {"content": reshaped[2]["content"], "role": "assistant", "refusal": None}
        for msgs in (mid, hist[:3] + hist[4:], reshaped, hist):
            answer, doc = _call(c, sp, msgs)
            assert doc["tip"] == _expected_tip(msgs, answer)
    repo = convgit.open_repo(store)
    try:
        assert convgit.fsck(repo).ok
    finally:
        repo.close()


def test_a_gc_that_pruned_a_cached_history_makes_the_server_write_it_again(served):
    store, sp = served
    hist = [{"role": "user", "content": "gc me: first"}]
    with httpx.Client(timeout=30) as c:
        for i in range(3):
            answer, doc = _call(c, sp, hist)
            hist += [answer, {"role": "user", "content": f"gc me: {i}"}]
        thread = doc["thread"]
        # the thread deleted and its messages pruned by another process while the server runs
        assert _cli(store, "threads", "delete", thread).returncode == 0
        p = _cli(store, "gc", "--prune=now", "--json")  # (waits for the idle committer's pack merge, if any)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["pruned"] > 0
        answer, doc = _call(c, sp, hist)
    # everything was written again: the whole history, not just the new tail
    assert doc["new_messages"] == len(hist) + 1
    assert doc["tip"] == _expected_tip(hist, answer)
    repo = convgit.open_repo(store)
    try:
        assert convgit.fsck(repo).ok
        texts = [e.text for e in convgit.conversation(repo, doc["thread"])]
    finally:
        repo.close()
    assert texts[0] == "gc me: first" and texts[-2] == "gc me: 2" and len(texts) == len(hist) + 1


def _records(conversations: int, calls: int) -> list:
    fake = FakeUpstream()
    hists = [[{"role": "user", "content": f"conversation {k}"}] for k in range(conversations)]
    out = []
    for i in range(calls):
        for k, h in enumerate(hists):
            req = {"model": "gpt-fake", "messages": h}
            body = json.dumps(req).encode()
            resp = fake.chat_completion(req, body)
            out.append(rec_mod.CallRecord(id=f"c{k}-{i}", api="openai-chat", request=body,
                                          response=json.dumps(resp).encode(), status=200, started_at=1, duration_ms=1))
            h += [resp["choices"][0]["message"], {"role": "user", "content": f"q {k} {i}"}]
    return out


def _count_probes(monkeypatch) -> list[int]:
    """The lengths the hole check (``decide.first_missing``) is asked about, as it is asked."""
    probed: list[int] = []
    real = decide.first_missing

    def counting(objects, ids, end=None):
        probed.append(len(ids) if end is None else end)
        return real(objects, ids, end)

    monkeypatch.setattr(decide, "first_missing", counting)
    return probed


def test_the_committer_parses_a_history_once_and_checks_only_its_new_tail(tmp_path, monkeypatch):
    records = _records(conversations=3, calls=12)  # histories of 1 to 23 messages
    probed = _count_probes(monkeypatch)
    tips = {}
    for cached in (True, False):
        convgit.init(tmp_path / str(cached)).close()
        repo = Repository.open(tmp_path / str(cached) / ".convgit")
        try:
            cache = PrefixCache()
            rec = Recorder(repo, cache=cache if cached else None)
            if not cached:  # a recorder that never knows anything: the full path, every time
                rec.cache = None
                rec._hint = lambda built: None
            probed.clear()
            docs = []
            for i in range(0, len(records), 3):  # one call of each conversation a batch
                docs += rec.commit_batch(records[i:i + 3])
            tips[cached] = [d["tip"] for d in docs]
            assert [d["new_messages"] for d in docs] == [2] * len(records)
            if cached:
                assert cache.misses == 3 * 2  # each conversation's first call, at both levels
                # after each conversation's first call, the hole check sees the new tail only
                assert max(probed[3:]) <= 2, probed
            else:
                assert max(probed) >= 21
        finally:
            repo.close()
    assert tips[True] == tips[False]


def test_no_hint_is_used_while_a_gc_holds_its_lock(tmp_path, monkeypatch):
    """The committer starts gc --auto in the background; until that gc is done (``gc.lock``
    free again) a batch takes the full hole check, not its stored-tip hint: the gc may prune
    what the hint takes as stored, and its new journal only says so once it is done."""
    from convgit import fsio

    records = _records(conversations=1, calls=6)  # one history growing by 2 each call
    probed = _count_probes(monkeypatch)
    convgit.init(tmp_path / "s").close()
    repo = Repository.open(tmp_path / "s" / ".convgit")
    try:
        rec = Recorder(repo, cache=PrefixCache())
        for r in records[:4]:
            rec.commit_batch([r])
        probed.clear()
        fd = fsio.try_flock(repo.path / "gc.lock", shared=False)  # a gc runs
        try:
            rec.commit_batch([records[4]])
        finally:
            os.close(fd)
        assert max(probed) >= 7, probed  # the whole history checked (all but the 2 new messages)
        probed.clear()
        rec.commit_batch([records[5]])  # (the gc is done; a real one would have a new journal too)
        assert max(probed) <= 2, probed  # the new tail only, again
    finally:
        repo.close()
