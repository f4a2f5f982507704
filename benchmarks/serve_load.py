"""A load harness for benchmarks/bench_serve.py that is not the bottleneck it measures.

The tests' fake upstream (tests/helpers/serve.py: ``http.server``, a thread per connection)
and httpx's async client cost more CPU per call than the proxy they are used to measure: on
this 2-core machine, quiet, that client calling that upstream directly, with no proxy at
all, answers 360-670 calls/s. A proxy cannot be shown logging 1,000 calls/s behind them.

Here, both ends are lean HTTP/1.1 on asyncio (uvloop when it is installed), keep-alive, one
connection per client:

- ``serve_upstream(port, delay_ms)``: the same answers as the fake upstream (its ``chat_completion`` and
  ``chat_events``, byte for byte: a pure function of the request), for
  ``POST /v1/chat/completions`` (streamed or not) and ``POST /v1/embeddings``; run it in its
  own process (``python benchmarks/serve_load.py upstream`` prints its URL).
- ``Conn``: a client connection; ``post(path, body)`` returns the status, the body and the
  times to the first byte and to the last. It reads ``content-length`` and ``chunked``
  answers, which is what the fake upstream and ``convgit serve`` send.

Not a general HTTP implementation: a load generator, like ``wrk``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def _loop_policy() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run(coro):
    """``asyncio.run`` on uvloop when it is installed."""
    _loop_policy()
    return asyncio.run(coro)


# -- the upstream ----------------------------------------------------------------------------

class _Upstream(asyncio.Protocol):
    def __init__(self, fake, delay: float) -> None:
        self.fake = fake
        self.delay = delay
        self.buf = b""

    def connection_made(self, transport) -> None:
        self.t = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            lines = self.buf[:i].split(b"\r\n")
            path = lines[0].split(b" ")[1].decode()
            n = 0
            for h in lines[1:]:
                k, _, v = h.partition(b":")
                if k.strip().lower() == b"content-length":
                    n = int(v)
            if len(self.buf) < i + 4 + n:
                return
            body, self.buf = self.buf[i + 4:i + 4 + n], self.buf[i + 4 + n:]
            if self.delay:
                asyncio.get_running_loop().call_later(self.delay, self.t.write, self.answer(path, body))
            else:
                self.t.write(self.answer(path, body))

    def answer(self, path: str, body: bytes) -> bytes:
        req = json.loads(body)
        if path == "/v1/embeddings":
            return _whole(b'{"object":"list","data":[{"embedding":[0.1,0.2],"index":0}]}')
        # (the ids depend on the request, not on whether it streams: as the fake upstream)
        key = json.dumps({k: v for k, v in req.items() if k not in ("stream", "stream_options")}, sort_keys=True).encode()
        if req.get("stream"):
            events = self.fake.chat_events(req, key)
            return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                    + b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n")
        return _whole(json.dumps(self.fake.chat_completion(req, key)).encode())


def _whole(data: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(data), data)


def serve_upstream(port: int = 0, delay_ms: float = 0) -> None:
    """Serve the lean fake upstream on 127.0.0.1 forever; prints its URL first. ``delay_ms``:
    each answer is sent that long after its request arrived (a model's time to first token)."""
    from helpers.serve import FakeUpstream

    fake = FakeUpstream()  # (its answers only: its own server is never started)
    fake.server.server_close()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(lambda: _Upstream(fake, delay_ms / 1000), "127.0.0.1", port, backlog=4096)
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        await server.serve_forever()

    run(main())


# -- the client --------------------------------------------------------------------------------

class Conn:
    """One keep-alive HTTP/1.1 connection to ``url`` (``http://host:port``)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes, float, float]:
        """(status, body, seconds to the first byte of the answer, seconds to its last)."""
        if self.w is None:
            self.r, self.w = await asyncio.open_connection(self.host, self.port)
            self.w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        self.w.write(b"POST %b HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\nauthorization: Bearer k\r\n"
                     b"content-length: %d\r\n\r\n%b" % (path.encode(), self.host.encode(), len(body), body))
        head = await self.r.readuntil(b"\r\n\r\n")
        first = time.perf_counter()
        lines = head[:-4].split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        length, chunked, close = None, False, False
        for h in lines[1:]:
            k, _, v = h.partition(b":")
            k, v = k.strip().lower(), v.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"transfer-encoding":
                chunked = v == b"chunked"
            elif k == b"connection":
                close = v == b"close"
        if length is not None:
            data = await self.r.readexactly(length)
        elif chunked:
            parts = []
            while True:
                size = int((await self.r.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
                if size == 0:
                    await self.r.readuntil(b"\r\n")
                    break
                parts.append((await self.r.readexactly(size + 2))[:-2])
            data = b"".join(parts)
        else:
            data = await self.r.read()
            close = True
        if close:
            await self.close()
        return status, data, first - t0, time.perf_counter() - t0

    async def close(self) -> None:
        if self.w is not None:
            self.w.close()
            self.r = self.w = None


if __name__ == "__main__":
    if sys.argv[1:2] == ["upstream"]:
        serve_upstream(int(sys.argv[2]) if len(sys.argv) > 2 else 0, float(sys.argv[3]) if len(sys.argv) > 3 else 0)
    else:
        sys.exit("usage: serve_load.py upstream [PORT [DELAY_MS]]")
