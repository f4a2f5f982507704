"""The committer in a process of its own: the proxy's process relays and spools, a child
process commits (docs/serve.md "The committer process").

In one process, the relay and the committer took turns on one GIL: every batch committed was
CPU the event loop did not get, so answers waited behind commits and the proxy logged at most
what one core could do for both. Here the server starts ``python -m convgit.serve.worker``,
which runs the same ``Committer`` (recorder.py) on the other core, and talks to it over a Unix
socket pair:

    server → worker   S key (+ the segment's file descriptor)   a spool segment the calls are in
                      C key check record                        a durable call (check: it may be in the store)
                      F key                                     the segment is gone: close it
                      X                                         stop: commit what is queued, exit
    worker → server   O summary (JSON)                          a call recorded or refused (``on_call``)
                      K key ids (JSON)                          those calls are committed (the spool's note)
                      W text                                    a warning for the server's log
                      R                                         the leftover segments are drained

Each frame is ``u32 length · u8 kind · body``. What this keeps true, as in one process:

- **Nothing lost.** The server keeps every call it handed over until the worker says it is
  committed. A worker that dies (a crash, a kill) is started again and handed those calls
  again with ``check`` set: each is looked up in the store first (``Recorder.recorded_already``),
  so a call committed just before the death is not recorded twice. Its line is sent again,
  marked ``recovered``; the server drops it when it wrote that call's line already, so each
  call has one line.
- **A server killed with kill -9 takes its worker with it** (``PR_SET_PDEATHSIG``), and the
  spool segments stay locked while either lives: the worker holds each segment's descriptor,
  passed over the socket (the same open file, so the same ``flock``). The next server drains
  a segment only once nobody can still be committing from it.
- **The client never waits for the worker.** The spool writer hands calls to a queue; a
  thread of the server's sends them; the socket's buffer never blocks a fsync or an answer.

``CONVGIT_CRASH_AT`` (the crash test hook) names one crash: a worker started again after a
crash runs without it.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from .prefix import PrefixCache

_HEAD = struct.Struct(">IB")  # body length, kind
_KEY = struct.Struct(">I")
NO_SEGMENT = 0xFFFFFFFF  # a call the spool could not write (committed from memory)
_RESTART = (0.2, 30.0)  # seconds before a dead worker is started again: first, at most (doubling)
_STABLE = 60.0  # a worker that lived this long resets the backoff


def _frame(kind: bytes, body: bytes = b"") -> bytes:
    return _HEAD.pack(len(body), kind[0]) + body


_STOP = _frame(b"X")


class _Reader:
    """Frames from a stream socket, with the descriptors passed alongside (in order)."""

    def __init__(self, sock: socket.socket, bufsize: int = 1 << 18) -> None:
        self.sock = sock
        self.bufsize = bufsize
        self.fds: list[int] = []

    def frames(self):
        """Yield ``(kind, body)`` until the other end closes."""
        buf = b""
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, self.bufsize, 16)
            except OSError:
                return
            self.fds.extend(fds)
            if not data:
                return
            buf = buf + data if buf else data
            pos = 0
            while len(buf) - pos >= _HEAD.size:
                n, kind = _HEAD.unpack_from(buf, pos)
                end = pos + _HEAD.size + n
                if len(buf) < end:
                    break
                yield bytes((kind,)), buf[pos + _HEAD.size:end]
                pos = end
            buf = buf[pos:]


class CommitterProcess:
    """The server's side: the same interface as ``recorder.Committer`` (``deliver``, ``start``,
    ``close``, ``writer``, ``prefix``), the commits done by a worker process."""

    def __init__(self, repo_path: Path, *, on_call: Callable[[dict], None], warn: Callable[[str], None]) -> None:
        self.repo_path = repo_path
        self.on_call = on_call
        self.warn = warn
        self.writer = None  # the SpoolWriter, told what is committed
        self.prefix = PrefixCache()  # the proxy's builds (the worker keeps its own)
        self.drained_leftovers = threading.Event()
        self._cond = threading.Condition()
        # Frames to send, each with a descriptor to pass along and one to close once sent.
        self._out: list[tuple[bytes, int | None, int | None]] = []
        self._pending: dict[str, tuple[int, bytes]] = {}  # call id -> (segment key, record), until committed
        # Calls whose line was written but not yet reported committed: a worker that dies in
        # between leaves them pending, the next one finds them recorded and sends a line again
        # (marked ``recovered``), which is dropped here: one line per call.
        self._reported: set[str] = set()
        # key -> (spool Segment, our own duplicate of its descriptor: the segment stays locked
        # until the spool deletes it, even after the spool writer moved on to a newer one)
        self._segs: dict[int, tuple[object, int]] = {}
        self._key_of: dict[int, int] = {}  # id(Segment) -> key
        self._next_key = 0
        self._stop = False
        self._stop_sent = False
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._started_at = 0.0
        self._backoff = 0.0
        self._sender = threading.Thread(target=self._send_loop, name="convgit-commit-send", daemon=True)
        self._receiver = threading.Thread(target=self._receive_loop, name="convgit-commit-recv", daemon=True)

    # -- the Committer's interface ----------------------------------------------------------

    def expect(self, call_id: str) -> None:
        """(The proxy's builds are not handed across: the worker builds each call again.)"""

    def offer(self, call_id: str, built) -> None:
        """(See ``expect``.)"""

    def start(self) -> None:
        """Start the worker (from this thread, which must outlive it: the worker's
        parent-death signal follows the thread that started it) and the two threads."""
        proc, sock = self._spawn(crash_hook=True)
        with self._cond:
            self._proc, self._sock, self._started_at = proc, sock, time.monotonic()
        self._sender.start()
        self._receiver.start()

    def deliver(self, segment, record, data: bytes | None = None) -> None:
        """A durable (or, when the spool failed, in-memory) record to commit; ``data``: its
        bytes as the spool wrote them (encoded here when not given)."""
        if data is None:
            from .record import encode_record

            data = encode_record(record)
        with self._cond:
            key = self._segment_key(segment)
            self._pending[record.id] = (key, data)
            self._out.append((_frame(b"C", _KEY.pack(key) + b"\x00" + data), None, None))
            self._cond.notify()

    def segment_removed(self, segment) -> None:
        """The spool deleted ``segment``: the worker closes its descriptor."""
        with self._cond:
            key = self._key_of.pop(id(segment), None)
            if key is None:
                return
            _, fd = self._segs.pop(key)
            self._out.append((_frame(b"F", _KEY.pack(key)), None, fd))
            self._cond.notify()

    def close(self, timeout: float | None = None) -> None:
        """Have the worker commit what is queued (while the store allows it), then stop it."""
        with self._cond:
            self._stop = True
            self._out.append((_STOP, None, None))
            self._cond.notify()
        self._receiver.join(timeout)
        proc = self._proc
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with self._cond:
            self._cond.notify()
        self._sender.join(5)

    # -- the worker's life ------------------------------------------------------------------

    def _segment_key(self, segment) -> int:
        if segment is None:
            return NO_SEGMENT
        key = self._key_of.get(id(segment))
        if key is None:
            key = self._next_key
            self._next_key += 1
            fd = os.dup(segment.fd)
            os.set_inheritable(fd, False)
            self._key_of[id(segment)] = key
            self._segs[key] = (segment, fd)
            self._out.append((_frame(b"S", _KEY.pack(key)), fd, None))
        return key

    def _spawn(self, *, crash_hook: bool) -> tuple[subprocess.Popen, socket.socket]:
        """A new worker and the server's end of its socket (not yet the one frames go to)."""
        from ..config import env_without_crash_hook

        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = None if crash_hook else env_without_crash_hook()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "convgit.serve.worker", str(self.repo_path), str(child.fileno()), str(os.getpid())],
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                start_new_session=True)  # (a Ctrl-C to the terminal is the server's to handle)
        finally:
            child.close()
        return proc, parent

    def _respawn(self) -> bool:
        """A worker died: start another, hand it every call not yet committed (checked
        against the store first). False when stopping."""
        proc = self._proc
        code = proc.wait() if proc is not None else None
        with self._cond:
            if self._stop:
                return False
        lived = time.monotonic() - self._started_at
        self._backoff = _RESTART[0] if lived >= _STABLE else min(max(self._backoff * 2, _RESTART[0]), _RESTART[1])
        with self._cond:
            waiting = len(self._pending)
        self.warn(f"the committer process stopped (exit {code}); started again in {self._backoff:g} s, "
                  f"{waiting} call(s) wait in the spool")
        time.sleep(self._backoff)
        with self._cond:
            if self._stop:
                return False
        proc, sock = self._spawn(crash_hook=False)
        with self._cond:
            # The new socket and what it is sent, together: a frame queued for the dead worker
            # never reaches the new one (a call sent twice could be committed twice in one
            # batch). Those frames are dropped, but for the descriptors to close.
            old, self._proc, self._sock, self._started_at = self._sock, proc, sock, time.monotonic()
            out = [(b"", None, fd) for _, _, fd in self._out if fd is not None]
            out += [(_frame(b"S", _KEY.pack(k)), fd, None) for k, (_, fd) in self._segs.items()]
            out += [(_frame(b"C", _KEY.pack(k if k in self._segs else NO_SEGMENT) + b"\x01" + data), None, None)
                    for k, data in self._pending.values()]
            if self._stop:
                out.append((_STOP, None, None))
            self._out = out
            self._cond.notify()
        if old is not None:
            old.close()
        return True

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while not self._out:
                    if self._stop_sent:
                        return
                    self._cond.wait(1.0)
                out, self._out = self._out, []
                sock = self._sock
            buf = bytearray()
            try:
                for data, fd, _ in out:
                    if fd is None:
                        buf += data
                        continue
                    if buf:
                        sock.sendall(buf)
                        buf = bytearray()
                    socket.send_fds(sock, [data], [fd])
                if buf:
                    sock.sendall(buf)
            except OSError:
                pass  # the worker is gone: the receiver starts another and sends everything again
            for _, _, close in out:  # (a segment the spool deleted: after its last frame)
                if close is not None:
                    os.close(close)
            if any(data == _STOP for data, _, _ in out):
                with self._cond:
                    self._stop_sent = True

    def _receive_loop(self) -> None:
        while True:
            sock = self._sock
            for kind, body in _Reader(sock).frames():
                try:
                    self._received(kind, body)
                except Exception as e:  # noqa: BLE001  (a bad summary never stops the server)
                    self.warn(f"committer process: {type(e).__name__}: {e}")
            if not self._respawn():
                self.drained_leftovers.set()
                return

    def _received(self, kind: bytes, body: bytes) -> None:
        if kind == b"O":
            doc = json.loads(body)
            cid = doc.get("call")
            with self._cond:
                if cid in self._reported:
                    return  # (written before the worker that committed it died)
                if cid in self._pending:
                    self._reported.add(cid)
            self.on_call(doc)
        elif kind == b"K":
            key, ids = json.loads(body)
            with self._cond:
                for i in ids:
                    self._pending.pop(i, None)
                    self._reported.discard(i)
                entry = self._segs.get(key)
            seg = entry[0] if entry is not None else None
            if seg is not None and self.writer is not None:
                self.writer.committed(seg, ids)
        elif kind == b"W":
            self.warn(body.decode("utf-8", "replace"))
        elif kind == b"R":
            self.drained_leftovers.set()


# -- the worker -------------------------------------------------------------------------------


class _Segment:
    """A spool segment as the worker knows it: its key, and the server's descriptor of it
    (held open: the segment's lock)."""

    def __init__(self, key: int, fd: int | None) -> None:
        self.key = key
        self.fd = fd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _Acks:
    """The ``writer`` of the worker's Committer: committed calls are told to the server."""

    def __init__(self, send: Callable[[bytes, bytes], None]) -> None:
        self.send = send

    def committed(self, segment: _Segment, ids: list[str]) -> None:
        self.send(b"K", json.dumps([segment.key, ids]).encode())


def _die_with_parent(parent_pid: int) -> None:
    """Be killed when the server goes (Linux ``PR_SET_PDEATHSIG``); exit now if it is gone."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(0)


def _ignore(signum, frame) -> None:
    """A signal the server handles for this process."""


def worker_main(argv: list[str]) -> None:
    """``python -m convgit.serve.worker STORE FD PARENT_PID``: commit what the server sends."""
    import gc

    import signal

    repo_path, fd, parent_pid = Path(argv[0]), int(argv[1]), int(argv[2])
    # Ctrl-C and a SIGTERM to the process group are the server's to handle: it finishes the
    # calls in flight and then tells this process to commit what is queued and exit.
    # (A handler that does nothing, not SIG_IGN: an ignored signal stays ignored across exec,
    # and the background gc this process may start must stop on a SIGTERM.)
    signal.signal(signal.SIGINT, _ignore)
    signal.signal(signal.SIGTERM, _ignore)
    _die_with_parent(parent_pid)
    from ..repository import Repository
    from .record import decode_record
    from .recorder import Committer

    sock = socket.socket(fileno=fd)
    lock = threading.Lock()

    def send(kind: bytes, body: bytes = b"") -> None:
        try:
            with lock:
                sock.sendall(_frame(kind, body))
        except OSError:
            os._exit(0)  # the server is gone: what is not committed stays in its spool

    committer = Committer(repo_path, open_repo=lambda: Repository.open(repo_path),
                          on_call=lambda doc: send(b"O", json.dumps(doc).encode()),
                          warn=lambda text: send(b"W", text.encode("utf-8", "replace")))
    committer.writer = _Acks(send)
    gc.freeze()
    gc.set_threshold(50_000, 20, 50)  # (as the server: convgit/serve/__init__.py GC_YOUNG, GC_OLDER)
    committer.start()
    threading.Thread(target=lambda: (committer.drained_leftovers.wait(), send(b"R")), daemon=True).start()
    segments: dict[int, _Segment] = {}
    memory = _Segment(NO_SEGMENT, None)
    reader = _Reader(sock)
    stopped = False
    for kind, body in reader.frames():
        if kind == b"C":
            (key,) = _KEY.unpack_from(body, 0)
            seg = segments.get(key, memory)
            committer.deliver(seg, decode_record(body[_KEY.size + 1:]), check=body[_KEY.size] == 1)
        elif kind == b"S":
            (key,) = _KEY.unpack_from(body, 0)
            segments[key] = _Segment(key, reader.fds.pop(0) if reader.fds else None)
        elif kind == b"F":
            seg = segments.pop(_KEY.unpack_from(body, 0)[0], None)
            if seg is not None:
                seg.close()
        elif kind == b"X":
            stopped = True
            break
    if not stopped:
        os._exit(0)  # the server died: the next one drains its spool (each call checked)
    committer.close()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    worker_main(sys.argv[1:])
