"""The spool: every relayed call is appended here, durably, before its last byte reaches the
client; the store commit happens after, from the spool, so a crash between the response and
the commit loses nothing and a slow or broken store never delays a call.

``.convgit/spool/`` holds segment files (``<ms>-<pid>-<n>.spool``); each is a sequence of
frames ``u32 length · u32 crc32 · record`` (``record.encode_record``). A frame whose length or
checksum does not hold is a torn tail (a crash mid-append, never acknowledged) and ends the
segment. Appends are group-committed: the writer thread takes every queued record, writes
them with one ``write`` and makes them durable with one ``fsync``. Each server holds a
``flock`` on its own segments; a segment nobody holds is left over from a server that died,
and the next server commits what it holds (skipping calls already recorded) and deletes it.
A segment is deleted once every record in it is committed and a newer one is being written.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import Callable

from .. import fsio

SPOOL_DIR = "spool"
_HEAD = struct.Struct(">II")
_MAX_RECORDS = 1024  # per segment, then a new one
_MAX_BYTES = 64 * 1024 * 1024


def frame(data: bytes) -> bytes:
    """One record's bytes as a spool frame."""
    return _HEAD.pack(len(data), zlib.crc32(data)) + data


def done_path(segment: Path) -> Path:
    """The sidecar naming the calls of ``segment`` already committed (``<segment>.done``)."""
    return segment.with_name(segment.name + ".done")


def read_done(segment: Path) -> set[str]:
    """The call ids the sidecar of ``segment`` says are committed (a torn last line ignored)."""
    try:
        text = done_path(segment).read_bytes().decode("ascii", "replace")
    except FileNotFoundError:
        return set()
    return {ln for ln in text.split("\n")[:-1] if len(ln) == 32}


def read_frames(path: Path) -> list[bytes]:
    """The records of a segment, up to its first torn or damaged frame."""
    data = path.read_bytes()
    out = []
    pos = 0
    while pos + _HEAD.size <= len(data):
        n, crc = _HEAD.unpack_from(data, pos)
        body = data[pos + _HEAD.size: pos + _HEAD.size + n]
        if len(body) < n or zlib.crc32(body) != crc:
            break
        out.append(body)
        pos += _HEAD.size + n
    return out


class Segment:
    """One spool file being written by this process (held under ``flock``)."""

    def __init__(self, path: Path, fsync: bool) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if fsync:
            fsio.fsync_dir(path.parent)  # the file's name is durable before any record in it counts
        self.appended = 0
        self.committed = 0
        self.size = 0
        self.closed = False

    def close(self) -> None:
        """Stop writing here (it is deleted once every record in it is committed)."""
        if not self.closed:
            os.close(self.fd)
            self.closed = True

    @property
    def done(self) -> bool:
        """Closed, and every record in it committed: it can go."""
        return self.closed and self.committed >= self.appended


def leftover_segments(directory: Path) -> list[Path]:
    """Segments of servers that are gone (nobody holds their lock), oldest first."""
    if not directory.is_dir():
        return []
    out = []
    for p in sorted(directory.glob("*.spool")):
        try:
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live server's
        finally:
            os.close(fd)
        out.append(p)
    return out


class SpoolWriter:
    """The group-commit writer: ``submit`` queues a record; a thread appends every queued one
    with one write and one fsync, then calls each one's ``done`` and hands the record on to
    ``deliver(segment, record)`` (the committer)."""

    def __init__(self, directory: Path, *, fsync: bool, deliver: Callable, warn: Callable[[str], None]) -> None:
        self.directory = directory
        self.fsync = fsync
        self.deliver = deliver
        self.warn = warn
        self._cond = threading.Condition()
        self._queue: list[tuple[bytes, object, Callable[[], None]]] = []
        self._stop = False
        self._n = 0
        self.segment: Segment | None = None
        self.segments: list[Segment] = []
        self._lock = threading.Lock()  # segments list (the committer marks records committed)
        self.on_removed: Callable[[Segment], None] | None = None  # told of each segment deleted
        try:
            fsio.makedirs(directory, fsync=fsync)
        except Exception as e:  # a read-only store: serve anyway, from memory
            warn(f"spool directory not made ({e})")
        self._thread = threading.Thread(target=self._run, name="convgit-spool", daemon=True)
        self._thread.start()

    def submit(self, data: bytes, record: object, done: Callable[[], None]) -> None:
        """Queue ``record`` (``data``: its encoded bytes); ``done()`` is called once it is durable."""
        with self._cond:
            self._queue.append((data, record, done))
            self._cond.notify()

    def close(self) -> None:
        """Write what is queued, then stop."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join()
        if self.segment is not None:
            self.segment.close()
        self.collect()

    def committed(self, segment: Segment | None, ids: list[str]) -> None:
        """The calls ``ids`` of ``segment`` are in the store: noted in its sidecar (so a server
        that dies before the segment goes skips them without building them again), counted.
        The note is not fsynced: it is a shortcut, never what decides. A leftover segment's
        calls are always committed with the store's own check (``Recorder.recorded_already``:
        the ``call:<id>`` alias, the reflogs read back from the tips), so a note a power loss
        took only costs that check; a note that survived the loss of what it names cannot
        exist, since it is written after the batch's commit point (kill -9 loses neither)."""
        if segment is None or not ids:
            return
        try:
            fd = os.open(done_path(segment.path), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, "".join(f"{i}\n" for i in ids).encode())
            finally:
                os.close(fd)
        except Exception as e:  # the store's own check (the call:<id> alias) still holds
            self.warn(f"spool: committed calls not noted ({e})")
        with self._lock:
            segment.committed += len(ids)
        self.collect()

    def collect(self) -> None:
        """Delete the segments that are closed and fully committed."""
        with self._lock:
            keep, gone = [], []
            for s in self.segments:
                if s.done:
                    fsio.unlink_quiet(s.path)
                    fsio.unlink_quiet(done_path(s.path))
                    gone.append(s)
                else:
                    keep.append(s)
            self.segments = keep
        if self.on_removed is not None:
            for s in gone:
                self.on_removed(s)

    def _new_segment(self) -> Segment:
        self._n += 1
        path = self.directory / f"{int(time.time() * 1000):013d}-{os.getpid()}-{self._n:06d}.spool"
        seg = Segment(path, self.fsync)
        with self._lock:
            if self.segment is not None:
                self.segment.close()
            self.segment = seg
            self.segments.append(seg)
        return seg

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                batch, self._queue = self._queue, []
                stop = self._stop
            if batch:
                self._write(batch)
            if stop and not batch:
                return

    def _write(self, batch) -> None:
        seg = None
        try:
            seg = self.segment
            if seg is None or seg.appended >= _MAX_RECORDS or seg.size >= _MAX_BYTES:
                seg = self._new_segment()
            buf = b"".join(frame(d) for d, _, _ in batch)
            view = memoryview(buf)
            while view:
                n = os.write(seg.fd, view)
                view = view[n:]
            if self.fsync:
                fsio.fsync_fd(seg.fd, seg.path)
            with self._lock:
                seg.appended += len(batch)
                seg.size += len(buf)
        except Exception as e:  # a full or read-only disk: the calls go on, committed from memory
            self.warn(f"spool not written ({e}); {len(batch)} call(s) are only in memory until committed")
            seg = None
        for data, record, done in batch:
            self.deliver(seg, record, data=data)
            try:
                done()
            except Exception:  # the waiting request is gone (a cancelled future)
                pass
