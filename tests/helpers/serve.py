"""For the `convgit serve` tests and benchmark: a fake upstream (a real HTTP server on
127.0.0.1 playing OpenAI Chat Completions, Responses and Anthropic Messages, streaming and
not, with realistic SSE event shapes), and the real `convgit serve` started as a subprocess.

The fake upstream's answers are a pure function of the request body (ids included), so a
call made directly and the same call through the proxy must give the same bytes.

Behaviour by ``model``: ``*tool*`` answers with a tool call, ``*think*`` with reasoning,
``slow`` streams 40 chunks 0.1 s apart, ``break`` cuts the stream (connection dropped after
a few events), ``short`` ends the stream cleanly without its final event, ``error-500``,
``error-429`` (with ``retry-after``), ``bad-json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import convgit

ROOT = Path(__file__).resolve().parents[2]  # (the repository: tests/helpers/ is two below it)


def _h(body: bytes, n: int = 12) -> str:
    return hashlib.sha256(body).hexdigest()[:n]


def _last_user_text(req: dict) -> str:
    if isinstance(req.get("input"), str):
        return req["input"]
    items = req.get("messages") or req.get("input") or []
    for m in reversed(items):
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return " ".join(b.get("text", "") for b in c if isinstance(b, dict))
    return ""


def _sse(data, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"{head}data: {payload}\n\n".encode()


class FakeUpstream:
    """The fake provider: ``start()`` binds an ephemeral port on 127.0.0.1 (``url``);
    ``requests`` keeps (path, headers, body) of each request it received."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                outer.requests.append((self.path, dict(self.headers), b""))
                if self.path.startswith("/v1/models"):
                    self._json(200, {"object": "list", "data": [{"id": "fake-1", "object": "model", "owned_by": "test"}]})
                else:
                    self._json(404, {"error": {"message": "no such path", "type": "invalid_request_error"}})

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n)
                outer.requests.append((self.path, dict(self.headers), body))
                try:
                    req = json.loads(body)
                    # ids in the answer depend on the request, not on whether it streams
                    key = json.dumps({k: v for k, v in req.items() if k not in ("stream", "stream_options")},
                                     sort_keys=True).encode()
                except ValueError:
                    self._json(400, {"error": {"message": "bad json"}})
                    return
                model = str(req.get("model", ""))
                if model == "error-500":
                    return self._json(500, {"error": {"message": "the fake upstream failed", "type": "server_error"}})
                if model == "error-429":
                    return self._json(429, {"error": {"message": "slow down", "type": "rate_limit_error"}},
                                      extra={"retry-after": "7"})
                if model == "bad-json":
                    return self._raw(200, b"{not json", "application/json")
                if self.path == "/v1/embeddings":
                    return self._json(200, {"object": "list", "data": [{"embedding": [0.1, 0.2], "index": 0}]})
                api = {"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "anthropic"}.get(self.path)
                if api is None:
                    return self._json(404, {"error": {"message": "no such path"}})
                if req.get("stream"):
                    return self._stream(api, req, key, model)
                doc = {"chat": outer.chat_completion, "responses": outer.response_object,
                       "anthropic": outer.anthropic_message}[api](req, key)
                self._json(200, doc)

            def _json(self, status, doc, extra=None):
                self._raw(status, json.dumps(doc).encode(), "application/json", extra)

            def _raw(self, status, data, ctype, extra=None):
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.send_header("x-request-id", "req_" + _h(data, 8))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, api, req, body, model):
                events = {"chat": outer.chat_events, "responses": outer.responses_events,
                          "anthropic": outer.anthropic_events}[api](req, body)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.send_header("x-request-id", "req_" + _h(body, 8))
                self.end_headers()
                if model == "short":
                    events = events[:-1]
                for i, ev in enumerate(events):
                    if model == "break" and i == 3:
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    self.wfile.write(f"{len(ev):x}\r\n".encode() + ev + b"\r\n")
                    self.wfile.flush()
                    if model == "slow":
                        time.sleep(0.1)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # many clients connect at once (socketserver's default backlog is 5)

            def handle_error(self, request, client_address):
                # A client that went away mid-stream (the disconnect tests do it on purpose) is
                # not an error; socketserver would print its traceback on this process's
                # stderr, in the middle of whatever test this xdist worker runs next.
                import sys

                if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    return
                super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "FakeUpstream":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- OpenAI Chat Completions ------------------------------------------------------------

    @staticmethod
    def _words(req: dict, model: str) -> list[str]:
        """The answer's text in stream pieces ("echo", " hello", ...): joined, the whole answer."""
        n = 40 if model == "slow" else 6
        base = f"echo {_last_user_text(req)}".split() or ["echo"]
        words = [(base * n)[i] for i in range(max(n, len(base)))]
        return [words[0]] + [" " + w for w in words[1:]]

    def chat_completion(self, req: dict, body: bytes) -> dict:
        model = str(req.get("model"))
        msg: dict = {"role": "assistant", "content": "".join(self._words(req, model)).strip()}
        if "think" in model:
            msg["reasoning_content"] = "thinking about it"
        if "tool" in model:
            msg["content"] = None
            msg["tool_calls"] = [{"id": "call_" + _h(body, 8), "type": "function",
                                  "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]
        return {"id": "chatcmpl-" + _h(body), "object": "chat.completion", "created": 1700000000,
                "model": model + "-2024", "system_fingerprint": "fp_fake",
                "choices": [{"index": 0, "message": msg, "logprobs": None,
                             "finish_reason": "tool_calls" if "tool" in model else "stop"}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}

    def chat_events(self, req: dict, body: bytes) -> list[bytes]:
        model = str(req.get("model"))
        head = {"id": "chatcmpl-" + _h(body), "object": "chat.completion.chunk", "created": 1700000000,
                "model": model + "-2024", "system_fingerprint": "fp_fake"}

        def chunk(delta, finish=None, **kw):
            return _sse({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **kw})

        out = [chunk({"role": "assistant", "content": ""})]
        if "think" in model:
            out += [chunk({"reasoning_content": "thinking "}), chunk({"reasoning_content": "about it"})]
        if "tool" in model:
            out.append(chunk({"tool_calls": [{"index": 0, "id": "call_" + _h(body, 8), "type": "function",
                                              "function": {"name": "get_weather", "arguments": ""}}]}))
            for piece in ("{\"city\"", ": \"Par", "is\"}"):
                out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
            out.append(chunk({}, "tool_calls"))
        else:
            out += [chunk({"content": w}) for w in self._words(req, model)]
            out.append(chunk({}, "stop"))
        if (req.get("stream_options") or {}).get("include_usage"):
            out.append(_sse({**head, "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}))
        out.append(b"data: [DONE]\n\n")
        return out

    # -- OpenAI Responses ---------------------------------------------------------------------

    def response_object(self, req: dict, body: bytes) -> dict:
        model = str(req.get("model"))
        rid = "resp_" + _h(body, 16)
        text = "".join(self._words(req, model)).strip()
        output = []
        if "think" in model:
            output.append({"id": "rs_" + _h(body, 8), "type": "reasoning",
                           "summary": [{"type": "summary_text", "text": "thinking about it"}]})
        output.append({"id": "msg_" + _h(body, 8), "type": "message", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
        return {"id": rid, "object": "response", "created_at": 1700000000, "status": "completed",
                "model": model + "-2024", "output": output, "previous_response_id": req.get("previous_response_id"),
                "usage": {"input_tokens": 9, "output_tokens": 5, "total_tokens": 14}}

    def responses_events(self, req: dict, body: bytes) -> list[bytes]:
        final = self.response_object(req, body)
        start = {**final, "status": "in_progress", "output": [], "usage": None}
        seq = iter(range(10_000))
        out = [_sse({"type": "response.created", "sequence_number": next(seq), "response": start}, "response.created"),
               _sse({"type": "response.in_progress", "sequence_number": next(seq), "response": start}, "response.in_progress")]
        msg = final["output"][-1]
        oi = len(final["output"]) - 1
        added = {**msg, "status": "in_progress", "content": []}
        out.append(_sse({"type": "response.output_item.added", "sequence_number": next(seq), "output_index": oi,
                         "item": added}, "response.output_item.added"))
        out.append(_sse({"type": "response.content_part.added", "sequence_number": next(seq), "item_id": msg["id"],
                         "output_index": oi, "content_index": 0,
                         "part": {"type": "output_text", "text": "", "annotations": []}}, "response.content_part.added"))
        text = msg["content"][0]["text"]
        for w in self._words(req, str(req.get("model"))):
            out.append(_sse({"type": "response.output_text.delta", "sequence_number": next(seq), "item_id": msg["id"],
                             "output_index": oi, "content_index": 0, "delta": w}, "response.output_text.delta"))
        out.append(_sse({"type": "response.output_item.done", "sequence_number": next(seq), "output_index": oi,
                         "item": msg}, "response.output_item.done"))
        out.append(_sse({"type": "response.completed", "sequence_number": next(seq), "response": final},
                        "response.completed"))
        return out

    # -- Anthropic Messages ---------------------------------------------------------------------

    def anthropic_message(self, req: dict, body: bytes) -> dict:
        model = str(req.get("model"))
        content: list = []
        if "think" in model:
            content.append({"type": "thinking", "thinking": "thinking about it", "signature": "sig_" + _h(body, 20)})
        content.append({"type": "text", "text": "".join(self._words(req, model)).strip()})
        if "tool" in model:
            content.append({"type": "tool_use", "id": "toolu_" + _h(body, 10), "name": "get_weather",
                            "input": {"city": "Paris"}})
        return {"id": "msg_" + _h(body, 20), "type": "message", "role": "assistant", "model": model + "-2024",
                "content": content, "stop_reason": "tool_use" if "tool" in model else "end_turn",
                "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 8}}

    def anthropic_events(self, req: dict, body: bytes) -> list[bytes]:
        final = self.anthropic_message(req, body)
        start = {**final, "content": [], "stop_reason": None, "usage": {"input_tokens": 12, "output_tokens": 1}}
        out = [_sse({"type": "message_start", "message": start}, "message_start"), _sse({"type": "ping"}, "ping")]
        for i, b in enumerate(final["content"]):
            if b["type"] == "thinking":
                out.append(_sse({"type": "content_block_start", "index": i,
                                 "content_block": {"type": "thinking", "thinking": "", "signature": ""}}, "content_block_start"))
                for piece in ("thinking ", "about it"):
                    out.append(_sse({"type": "content_block_delta", "index": i,
                                     "delta": {"type": "thinking_delta", "thinking": piece}}, "content_block_delta"))
                out.append(_sse({"type": "content_block_delta", "index": i,
                                 "delta": {"type": "signature_delta", "signature": b["signature"]}}, "content_block_delta"))
            elif b["type"] == "text":
                out.append(_sse({"type": "content_block_start", "index": i,
                                 "content_block": {"type": "text", "text": ""}}, "content_block_start"))
                for w in self._words(req, str(req.get("model"))):
                    out.append(_sse({"type": "content_block_delta", "index": i,
                                     "delta": {"type": "text_delta", "text": w}}, "content_block_delta"))
            else:
                out.append(_sse({"type": "content_block_start", "index": i,
                                 "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}},
                                "content_block_start"))
                for piece in ("{\"city\"", ": \"Paris\"}"):
                    out.append(_sse({"type": "content_block_delta", "index": i,
                                     "delta": {"type": "input_json_delta", "partial_json": piece}}, "content_block_delta"))
            out.append(_sse({"type": "content_block_stop", "index": i}, "content_block_stop"))
        out.append(_sse({"type": "message_delta", "delta": {"stop_reason": final["stop_reason"], "stop_sequence": None},
                         "usage": {"output_tokens": 8}}, "message_delta"))
        out.append(_sse({"type": "message_stop"}, "message_stop"))
        return out


class ConnectProxy:
    """An HTTP proxy on 127.0.0.1 that tunnels ``CONNECT host:port`` (what a client does for an
    https URL through a proxy) and refuses anything else (405). ``auth``: the
    ``Proxy-Authorization`` value it requires (else 407). ``connects`` keeps (target, the
    Proxy-Authorization it was sent) of each tunnel opened."""

    def __init__(self, auth: str | None = None) -> None:
        self.auth = auth
        self.connects: list[tuple[str, str | None]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = False

    def start(self) -> "ConnectProxy":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop = True
        self.sock.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                b = conn.recv(4096)
                if not b:
                    return
                head += b
            lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
            method, target = lines[0].split(" ")[:2]
            headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            if method != "CONNECT":
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
                return
            self.connects.append((target, headers.get("proxy-authorization")))
            if self.auth is not None and headers.get("proxy-authorization") != self.auth:
                conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n")
                return
            host, port = target.rsplit(":", 1)
            up = socket.create_connection((host, int(port)))
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

            def pipe(a: socket.socket, b: socket.socket) -> None:
                try:
                    while True:
                        data = a.recv(65536)
                        if not data:
                            break
                        b.sendall(data)
                except OSError:
                    pass
                finally:
                    try:
                        b.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass

            t = threading.Thread(target=pipe, args=(up, conn), daemon=True)
            t.start()
            pipe(conn, up)
            t.join()
            up.close()


class ServeProcess:
    """The real ``convgit serve --json`` in a subprocess, on 127.0.0.1 and an ephemeral port.
    ``url`` once it listens; ``wait_calls(n)`` waits for ``n`` recorded-call lines."""

    def __init__(self, store_dir: Path, upstream: str, *args: str, env: dict | None = None) -> None:
        self.cmd = [sys.executable, "-m", "convgit", "-C", str(store_dir), "serve", "--port", "0", "--json",
                    "--openai-upstream", upstream, "--anthropic-upstream", upstream, *args]
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, cwd=str(store_dir))
        self.lines: "queue.Queue[dict]" = queue.Queue()
        self.calls: list[dict] = []
        self.stderr: list[str] = []
        self.url: str | None = None
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self) -> None:
        for line in self.proc.stdout:
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                self.lines.put({"unparsed": line.decode("utf-8", "replace")})

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def wait_listening(self, timeout: float = 30) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                doc = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise AssertionError(f"convgit serve exited {self.proc.returncode}: {''.join(self.stderr)}")
                continue
            if doc.get("status") == "listening":
                self.url = doc["url"]
                return self.url
            self.calls.append(doc)
        raise AssertionError(f"convgit serve did not start: {''.join(self.stderr)}")

    def wait_calls(self, n: int, timeout: float = 60) -> list[dict]:
        end = time.monotonic() + timeout
        while len(self.calls) < n and time.monotonic() < end:
            try:
                self.calls.append(self.lines.get(timeout=0.2))
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
        assert len(self.calls) >= n, f"{len(self.calls)} of {n} calls recorded; stderr: {''.join(self.stderr)}"
        return self.calls

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def recorded_calls(store: Path) -> list[str]:
    """The call ids of the turns the store's threads record (moves that happened)."""
    from convgit.refformat import applied_entries, parse_log

    repo = convgit.open_repo(store)
    try:
        out = []
        for name, tip in convgit.show_refs(repo).items():
            for e in applied_entries(parse_log(repo.refs.log_bytes(name)), tip):
                t = repo.objects.read(e.turn) if e.turn else None
                if t is not None and (t.meta or {}).get("call"):
                    out.append(t.meta["call"])
        return out
    finally:
        repo.close()


# -- fixtures for the serve tests (imported by them: ``from helpers.serve import store, upstream``)


@pytest.fixture(scope="module")
def upstream():
    """A FakeUpstream on 127.0.0.1 for the test module."""
    up = FakeUpstream().start()
    yield up
    up.stop()


@pytest.fixture
def store(tmp_path) -> Path:
    """A fresh store (the directory holding .convgit) at ``tmp_path/s``."""
    convgit.init(tmp_path / "s").close()
    return tmp_path / "s"
