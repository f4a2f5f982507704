"""HEAD while serving: the committer moves it to the thread of the last call recorded at most
once a second (within a second of the last call), not in every batch's transaction; a batch
leaves HEAD alone. Through the real `convgit serve` on 127.0.0.1 and the fake upstream, and
the committer in process."""

from __future__ import annotations

import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

import convgit
from convgit.repository import Repository
from convgit.serve.record import CallRecord
from convgit.serve.recorder import Recorder

sys.path.insert(0, str(Path(__file__).parent))
from helpers.serve import FakeUpstream, ServeProcess  # noqa: E402


def _head(store: Path) -> str:
    with Repository.open(store / ".convgit") as repo:
        return repo.refs.read_head()


def _head_becomes(store: Path, want: str, timeout: float = 20) -> str:
    end = time.monotonic() + timeout
    while True:
        got = _head(store)
        if got == want or time.monotonic() > end:
            return got
        time.sleep(0.05)


def test_head_names_the_last_recorded_calls_thread_once_the_server_is_idle(tmp_path):
    store = tmp_path / "s"
    convgit.init(store).close()
    up = FakeUpstream().start()
    sp = ServeProcess(store, up.url)
    try:
        sp.wait_listening()
        with httpx.Client(timeout=30) as c:
            def call(thread: str, k: int) -> None:
                msgs = [{"role": "user", "content": f"{thread} question {k}"}]
                r = c.post(sp.url + "/v1/chat/completions", json={"model": "gpt-fake", "messages": msgs},
                           headers={"X-Convgit-Thread": thread})
                assert r.status_code == 200

            for k, thread in enumerate(["alpha", "beta", "gamma", "delta"]):  # one at a time
                call(thread, k)
                doc = sp.wait_calls(k + 1)[-1]
                assert doc["thread"] == thread and _head_becomes(store, thread) == thread
            with ThreadPoolExecutor(8) as pool:  # a burst over 40 threads: batches of several
                list(pool.map(lambda i: call(f"t{i}", 100 + i), range(40)))
            docs = sp.wait_calls(44)
        assert all("not_recorded" not in d for d in docs)
        last = docs[-1]["thread"]  # the committer's order: the last call it recorded
        assert _head_becomes(store, last) == last
    finally:
        assert sp.stop() == 0
        up.stop()
    assert _head(store) == last
    with Repository.open(store / ".convgit") as repo:
        assert convgit.fsck(repo).ok


def _records(n: int, thread_of) -> list[CallRecord]:
    import json

    out = []
    for i in range(n):
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}).encode()
        resp = json.dumps({"id": f"r{i}", "object": "chat.completion", "model": "m",
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": f"a{i}"},
                                        "finish_reason": "stop"}]}).encode()
        out.append(CallRecord(id=uuid.uuid4().hex, api="openai-chat", request=body, response=resp, status=200,
                              started_at=1_700_000_000_000 + i, duration_ms=1, thread=thread_of(i)))
    return out


def test_a_batch_committed_without_following_leaves_head_alone(tmp_path):
    """``Recorder(follow_head=False)`` (the serve committer's): HEAD's file is not rewritten by
    a batch, whatever threads it moved; ``last_thread`` says where it would go. The default
    Recorder moves HEAD within the batch's transaction, as a commit does."""
    repo = convgit.init(tmp_path / "s")
    try:
        head_file = repo.path / "HEAD"
        before = (os.stat(head_file).st_ino, head_file.read_bytes())
        rec = Recorder(repo, follow_head=False)
        docs = rec.commit_batch(_records(6, lambda i: f"n{i}"))
        assert all("not_recorded" not in d for d in docs)
        assert (os.stat(head_file).st_ino, head_file.read_bytes()) == before
        assert repo.refs.read_head() == "main" and rec.last_thread == "n5"
        Recorder(repo).commit_batch(_records(1, lambda i: "moved"))
        assert repo.refs.read_head() == "moved"
    finally:
        repo.close()
