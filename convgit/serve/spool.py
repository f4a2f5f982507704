"""The spool: every relayed call is appended here, durably, before its last byte reaches the
client; the store commit happens after, from the spool, so a crash between the response and
the commit loses nothing and a slow or broken store never delays a call.

``.convgit/spool/`` holds segment files (``<ms>-<pid>-<n>.spool``); each is a sequence of
frames ``u32 length · u32 crc32 · record`` (``record.encode_record``). A frame whose length or
checksum does not hold is a torn tail (a crash mid-append, never acknowledged) and ends the
segment. Appends are group-committed: the writer thread takes every queued record, writes
them with one ``write`` and makes them durable with one ``fsync`` (a record submitted while
the thread is idle is written by the submitter, the thread only syncs it). A segment where a
write or fsync failed gets nothing more (a torn frame ends what a reader sees of it): the next
records go to a new one. Each server holds a
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
_HANDOFF_S = 0.002  # submit waits at most this long for the thread to take its fsync
# submit writes a record itself only once the thread has been idle this long: a quiet moment.
# Under a steady load the thread is back at work sooner, and a wait for it to be scheduled
# would stall the event loop with the cores busy; there, groups are what saves time.
_QUIET_S = 0.002


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
        self.broken = False  # a write or fsync failed: the next records go to a new segment

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
    ``deliver(segment, record)`` (the committer).

    When the thread has been idle for a moment, ``submit`` writes the record itself and leaves only the fsync to
    the thread, returning once the thread is in it: the caller (the event loop) goes on
    with its own work (the chain's build for ``X-Convgit-Tip``) while the disk syncs,
    instead of handing the write over and running its work while the thread waits for the
    GIL. Either way ``done`` is called only after the fsync."""

    def __init__(self, directory: Path, *, fsync: bool, deliver: Callable, warn: Callable[[str], None]) -> None:
        self.directory = directory
        self.fsync = fsync
        self.deliver = deliver
        self.warn = warn
        self._cond = threading.Condition()
        self._queue: list[tuple[bytes, object, Callable[[], None]]] = []
        self._written: tuple | None = None  # (segment, bytes, data, record, done): written by submit, to sync
        self._syncing = threading.Event()  # the thread took ``_written`` (and is in its fsync)
        self._busy = False  # the thread is appending or syncing
        self._idle_since = 0.0  # when the thread last finished (perf_counter)
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
        written = False
        with self._cond:
            seg = self.segment
            if not (self._busy or self._queue or self._written is not None or self._stop
                    or seg is None or seg.broken or _full(seg)
                    or time.perf_counter() - self._idle_since < _QUIET_S):
                buf = frame(data)
                try:
                    _write_all(seg.fd, buf)
                    written = True
                except Exception:  # (the thread writes it again, in a new segment, or says why not)
                    seg.broken = True
            if written:
                self._written = (seg, len(buf), data, record, done)
                self._syncing.clear()
            else:
                self._queue.append((data, record, done))
            self._cond.notify()
        if written:
            self._syncing.wait(_HANDOFF_S)

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
                while self._written is None and not self._queue and not self._stop:
                    self._cond.wait()
                written, self._written = self._written, None
                batch, self._queue = self._queue, []
                stop = self._stop
                self._busy = True
            try:
                if written is not None:
                    self._sync_written(written)
                if batch:
                    self._write(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._idle_since = time.perf_counter()
            if stop and not batch and written is None:
                return

    def _sync_written(self, written: tuple) -> None:
        seg, size, data, record, done = written
        self._syncing.set()  # (submit's caller goes on once this thread is in the fsync, without the GIL)
        self._hand_on(self._synced(seg, 1, size), [(data, record, done)])

    def _write(self, batch) -> None:
        seg = self.segment
        try:
            if seg is None or seg.broken or _full(seg):
                seg = None
                seg = self._new_segment()
            buf = b"".join(frame(d) for d, _, _ in batch)
            _write_all(seg.fd, buf)
        except Exception as e:
            seg = self._failed(seg, len(batch), e)
        else:
            seg = self._synced(seg, len(batch), len(buf))
        self._hand_on(seg, batch)

    def _synced(self, seg: Segment, records: int, size: int) -> Segment | None:
        """``records`` frames of ``size`` bytes, written to ``seg``, made durable and counted:
        the segment, or None when the fsync failed."""
        try:
            if self.fsync:
                fsio.fsync_fd(seg.fd, seg.path)
        except Exception as e:
            return self._failed(seg, records, e)
        with self._lock:
            seg.appended += records
            seg.size += size
        return seg

    def _failed(self, seg: Segment | None, records: int, e: Exception) -> None:
        """An append that failed (a full or read-only disk): the calls go on, committed from
        memory; the segment gets nothing more (maybe a torn frame at its end)."""
        self.warn(f"spool not written ({e}); {records} call(s) are only in memory until committed")
        if seg is not None:
            seg.broken = True

    def _hand_on(self, seg: Segment | None, batch) -> None:
        """The records of ``batch`` are durable in ``seg`` (None: only in memory): the
        committer is given each one, then its waiter is told (in that order: a caller that
        waits for the committer to be idle once its call returned, as ``capture.flush`` does,
        must find the call queued)."""
        for data, record, done in batch:
            self.deliver(seg, record, data=data)
            try:
                done()
            except Exception:  # the waiting request is gone (a cancelled future)
                pass


def _full(seg: Segment) -> bool:
    return seg.appended >= _MAX_RECORDS or seg.size >= _MAX_BYTES


def _write_all(fd: int, buf: bytes) -> None:
    view = memoryview(buf)
    while view:
        n = os.write(fd, view)
        view = view[n:]
