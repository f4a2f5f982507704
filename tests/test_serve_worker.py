"""`convgit serve`'s committer process (convgit/serve/worker.py), killed from outside.

The server relays and spools; a child process commits. Real processes throughout: the real
`convgit serve`, its real worker found among its children, kill -9 from here.

- The worker killed under load, three times: the server keeps answering, starts another
  worker each time and hands it every call not yet committed, each looked up in the store
  first. Every answered call is recorded exactly once and has exactly one `--json` line,
  the spool is emptied, fsck is clean.
  (Fails if the calls are not handed over again: they stay in the spool, unrecorded until a
  restart; or if they are handed over without the store check: recorded twice.)
- The server killed with kill -9: its worker goes with it (no orphan committing beside the
  next server), and the next server commits what the spool holds.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

import convgit
from helpers.serve import ServeProcess, recorded_calls, store, upstream  # noqa: E402,F401 (fixtures)


def _worker_pids(pid: int) -> list[int]:
    """The committer processes among ``pid``'s children (Linux /proc)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for k in kids:
            try:
                cmd = Path(f"/proc/{k}/cmdline").read_bytes()
            except OSError:
                continue
            if b"convgit.serve.worker" in cmd:
                out.append(int(k))
    return out


def _one_worker(pid: int, other_than: int | None = None, timeout: float = 30) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pids = [p for p in _worker_pids(pid) if p != other_than]
        if pids:
            return pids[0]
        time.sleep(0.05)
    raise AssertionError("no committer process")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def _call(url: str, text: str) -> str:
    r = httpx.post(url + "/v1/chat/completions", timeout=30,
                   json={"model": "gpt-fake", "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return r.headers["x-convgit-call"]


def test_a_killed_committer_process_is_started_again_and_no_call_is_lost_or_doubled(store, upstream):
    sp = ServeProcess(store, upstream.url)
    url = sp.wait_listening()
    answered: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(k: int) -> None:
        i = 0
        while not stop.is_set():
            cid = _call(url, f"client {k} call {i}")
            with lock:
                answered.append(cid)
            i += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    try:
        worker = _one_worker(sp.proc.pid)
        for _ in range(3):
            time.sleep(0.4)  # (calls are being committed)
            subprocess.run(["kill", "-9", str(worker)], check=True)
            worker = _one_worker(sp.proc.pid, other_than=worker)  # started again
        time.sleep(0.4)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert sp.proc.poll() is None  # the server lived through it
    end = time.monotonic() + 120
    while sorted(recorded_calls(store)) != sorted(answered) and time.monotonic() < end:
        time.sleep(0.2)
    assert sp.stop() == 0
    assert sum("committer process stopped" in ln for ln in sp.stderr) == 3, sp.stderr
    # One --json line per call: a call a worker committed but was killed before reporting
    # gets its line from the next worker (marked recovered); one whose line was written
    # before the kill is not written again.
    lines = sp.calls + [sp.lines.get() for _ in range(sp.lines.qsize())]
    said = [doc["call"] for doc in lines if "call" in doc]
    assert len(said) == len(set(said)), "a call's line written twice"
    assert sorted(said) == sorted(answered), "an answered call has no line"
    assert all(doc.get("thread") and doc.get("tip") for doc in lines if "call" in doc)
    calls = recorded_calls(store)
    assert len(calls) == len(set(calls)), "a call recorded twice"
    assert sorted(calls) == sorted(answered), "an answered call is missing"
    assert not list((store / ".convgit" / "spool").glob("*.spool"))
    r = subprocess.run([sys.executable, "-m", "convgit", "-C", str(store), "fsck"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_kill_9_of_the_server_takes_its_committer_process_with_it(store, upstream):
    sp = ServeProcess(store, upstream.url, env={"CONVGIT_LOCK_TIMEOUT": "0.1"})
    url = sp.wait_listening()
    worker = _one_worker(sp.proc.pid)
    repo = convgit.open_repo(store)
    with repo.exclusive_lock():  # the worker is retrying a locked store when the server dies
        answered = [_call(url, f"held {i}") for i in range(3)]
        time.sleep(0.3)
        sp.kill()
        end = time.monotonic() + 5
        while not _gone(worker) and time.monotonic() < end:
            time.sleep(0.02)
        assert _gone(worker), "the committer process outlived its server"
    repo.close()
    assert recorded_calls(store) == []
    sp = ServeProcess(store, upstream.url)  # the next server drains the spool
    sp.wait_listening()
    sp.wait_calls(3)
    sp.stop()
    assert sorted(recorded_calls(store)) == sorted(answered)
    assert not list((store / ".convgit" / "spool").glob("*.spool"))


def test_an_unknown_committer_is_refused_and_nothing_is_written(store):
    r = subprocess.run([sys.executable, "-m", "convgit", "-C", str(store), "serve", "--committer", "fork", "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 10, r.stderr
    assert "[invalid_input]" in r.stderr and "--committer must be process or thread" in r.stderr
    assert not (store / ".convgit" / "spool").exists()
