"""A small real HTTP server on 127.0.0.1 playing an OpenAI-compatible ``/v1/embeddings``
upstream (offline stand-in for Ollama or OpenAI), for the openai-compatible provider tests.

Each text's vector is derived from its SHA-256 (deterministic, ``dim`` values). Knobs:
``fail_every`` (every Nth request answers 500), ``wrong_dim`` (answers vectors of another
length), ``delay`` (seconds per request), ``key`` (a required bearer token: 401 otherwise).
``texts`` records every text embedded, ``requests`` every request's headers.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def vector(text: str, dim: int) -> list[float]:
    out: list[float] = []
    i = 0
    while len(out) < dim:
        h = hashlib.sha256(f"{i}:{text}".encode()).digest()
        out.extend(v / 2**31 for v in struct.unpack("<8i", h))
        i += 1
    return out[:dim]


class FakeEmbeddings:
    """Start with ``with FakeEmbeddings(dim=16) as fake: fake.url``."""

    def __init__(self, dim: int = 16, *, fail_every: int = 0, wrong_dim: bool = False, delay: float = 0.0,
                 key: str | None = None, model: str = "fake-embed") -> None:
        self.dim, self.fail_every, self.wrong_dim, self.delay, self.key, self.model = dim, fail_every, wrong_dim, delay, key, model
        self.texts: list[str] = []
        self.requests: list[dict] = []
        self.calls = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with fake.lock:
                    fake.calls += 1
                    n = fake.calls
                    fake.requests.append(dict(self.headers))
                if self.path != "/v1/embeddings":
                    return self._send(404, {"error": {"message": "not found"}})
                if fake.key is not None and self.headers.get("Authorization") != f"Bearer {fake.key}":
                    return self._send(401, {"error": {"message": "bad key"}})
                if fake.delay:
                    time.sleep(fake.delay)
                if fake.fail_every and n % fake.fail_every == 0:
                    return self._send(500, {"error": {"message": "upstream overloaded"}})
                doc = json.loads(body)
                texts = doc["input"] if isinstance(doc["input"], list) else [doc["input"]]
                d = fake.dim + (3 if fake.wrong_dim else 0)
                with fake.lock:
                    fake.texts.extend(texts)
                data = [{"object": "embedding", "index": i, "embedding": vector(t, d)} for i, t in enumerate(texts)]
                data.reverse()  # clients must order by index
                self._send(200, {"object": "list", "data": data, "model": doc.get("model"),
                                 "usage": {"prompt_tokens": 0, "total_tokens": 0}})

            def _send(self, code, doc):
                raw = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                # A client that gave up (a timeout test) is not an error worth a traceback on
                # the stderr another test of this xdist worker is capturing.
                import sys

                if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    return
                super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeEmbeddings":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def config(self, *, key_env: str | None = None, batch_size: int = 32) -> str:
        """The ``[embed]`` table pointing at this server."""
        extra = f'api_key_env = "{key_env}"\n' if key_env else ""
        return (f'\n[embed]\nprovider = "openai-compatible"\nurl = "{self.url}"\nmodel = "{self.model}"\n'
                f"dimension = {self.dim}\nbatch_size = {batch_size}\n{extra}")
