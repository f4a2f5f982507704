"""`convgit serve` while its store cannot be written (issue 12's failure mode "store made
read-only while serving"): the store directory is remounted read-only under the running
server (a real bind mount: every new file, rename and directory there fails with EROFS), its
spool left writable. Calls are still answered and spooled; nothing is committed meanwhile;
once the store is writable again the committer's retries commit every call, once, and fsck is
clean. Skipped where this process may not mount (not root, or no mount namespace rights)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

import convgit
from helpers.serve import FakeUpstream, ServeProcess, recorded_calls  # noqa: E402


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


def _can_mount(tmp: Path) -> bool:
    d = tmp / "probe"
    d.mkdir()
    if os.geteuid() != 0 or _mount("--bind", str(d), str(d)).returncode != 0:
        return False
    ok = _mount("-o", "remount,ro,bind", str(d)).returncode == 0
    subprocess.run(["umount", str(d)], capture_output=True)
    return ok


def test_a_store_made_read_only_while_serving_loses_no_call(tmp_path):
    if not _can_mount(tmp_path):
        pytest.skip("this process cannot bind-mount read-only (needs root and mount rights)")
    store = tmp_path / "s"
    convgit.init(store).close()
    dot, spool = store / ".convgit", store / ".convgit" / "spool"
    spool.mkdir(exist_ok=True)
    up = FakeUpstream().start()
    sp = ServeProcess(store, up.url)
    mounted: list[Path] = []
    try:
        url = sp.wait_listening()
        answered = []

        def call(text: str) -> None:
            r = httpx.post(url + "/v1/chat/completions", timeout=30,
                           json={"model": "gpt-fake", "messages": [{"role": "user", "content": text}]})
            assert r.status_code == 200, r.text
            answered.append(r.headers["x-convgit-call"])

        call("before")
        deadline = time.monotonic() + 30
        while len(recorded_calls(store)) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert recorded_calls(store) == answered
        # The store read-only under the server (a bind mount of it, remounted ro), the spool
        # a writable bind mount inside it.
        for args in (("--bind", str(dot), str(dot)), ("-o", "remount,ro,bind", str(dot)), ("--bind", str(spool), str(spool))):
            r = _mount(*args)
            assert r.returncode == 0, r.stderr
            if args[0] == "--bind":
                mounted.append(Path(args[-1]))
        with pytest.raises(OSError):
            (dot / "objects" / f"probe-{uuid.uuid4().hex}").write_bytes(b"x")  # (really read-only)
        for i in range(3):
            call(f"while read-only {i}")
        time.sleep(1.5)  # the committer tries (and fails, and backs off) meanwhile
        assert recorded_calls(store) == answered[:1]  # nothing committed...
        assert len(list(spool.glob("*.spool"))) >= 1  # ... the calls are in the spool
        for m in reversed(mounted):
            subprocess.run(["umount", str(m)], check=True, capture_output=True)
        mounted.clear()
        deadline = time.monotonic() + 60
        while sorted(recorded_calls(store)) != sorted(answered) and time.monotonic() < deadline:
            time.sleep(0.2)  # the retries (backoff up to 5 s) commit them now
        assert sorted(recorded_calls(store)) == sorted(answered)  # every call, once
    finally:
        for m in reversed(mounted):
            subprocess.run(["umount", str(m)], capture_output=True)
        sp.stop()
        up.stop()
    assert not [d for d in sp.calls if d.get("not_recorded")]
    r = subprocess.run([sys.executable, "-m", "convgit", "-C", str(store), "fsck"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
