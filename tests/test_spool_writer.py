"""The spool writer (convgit/serve/spool.py) on its own: a call is acknowledged (``done``) only
once an fsync covers its frame, whether the submitter wrote the frame itself (the writer idle)
or the writer thread did (a group); and a failed append never hides the records after it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convgit import fsio
from convgit.serve import spool as spool_mod


def _writer(tmp_path, deliver, warn=None):
    return spool_mod.SpoolWriter(tmp_path / "spool", fsync=True, deliver=deliver, warn=warn or (lambda text: None))


def _frame_ends(path) -> dict[bytes, int]:
    """Each record's bytes → the file offset where its frame ends."""
    data = path.read_bytes()
    out, pos = {}, 0
    for body in spool_mod.read_frames(path):
        pos += spool_mod._HEAD.size + len(body)
        out[body] = pos
    assert pos <= len(data)
    return out


@pytest.mark.parametrize("quiet", ["at once", "default"])
def test_a_call_is_acknowledged_only_once_an_fsync_covers_its_frame(tmp_path, monkeypatch, quiet):
    if quiet == "at once":  # (every call that finds the thread idle is written by the submitter)
        monkeypatch.setattr(spool_mod, "_QUIET_S", 0.0)
    synced: dict[str, int] = {}  # segment path → its size at its latest fsync
    lock = threading.Lock()
    real_fsync = fsio.fsync_fd

    def fsync_fd(fd, path=None):
        size = os.fstat(fd).st_size
        real_fsync(fd, path)
        with lock:
            synced[str(path)] = max(synced.get(str(path), 0), size)

    monkeypatch.setattr(fsio, "fsync_fd", fsync_fd)
    seen: dict[bytes, int] = {}  # record → the synced size of its segment when it was acknowledged
    where: dict[bytes, str] = {}

    def deliver(seg, record, data=None):
        where[data] = str(seg.path)

    w = _writer(tmp_path, deliver)

    def submit(data: bytes) -> threading.Event:
        ev = threading.Event()

        def done():
            with lock:
                seen[data] = dict(synced)
            ev.set()

        w.submit(data, data, done)
        return ev

    # one at a time (the writer idle: the submitter writes, the thread syncs) ...
    for i in range(40):
        assert submit(f"alone {i}".encode()).wait(10)
    # ... and from several threads at once (groups written by the thread, and idle moments)
    def burst(k):
        for i in range(40):
            assert submit(f"burst {k} {i}".encode()).wait(10)

    threads = [threading.Thread(target=burst, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    assert len(seen) == 40 + 160
    ends: dict[bytes, int] = {}
    for p in {*where.values()}:
        ends.update(_frame_ends(Path(p)))
    for data, snapshot in seen.items():
        path = where[data]
        assert snapshot.get(path, 0) >= ends[data], f"{data!r} acknowledged before an fsync covered it"


@pytest.mark.parametrize("quiet", ["at once", "default"])
@pytest.mark.parametrize("failing", ["first", "later"])
def test_a_torn_append_sends_the_next_records_to_a_new_segment(tmp_path, monkeypatch, failing, quiet):
    """An append that wrote part of a frame, then failed (a disk full): that record goes on
    from memory (delivered with no segment), and every record acknowledged after it is
    readable from its segment (appended after a torn frame, a reader would never see it)."""
    real = spool_mod._write_all
    state = {"armed": False, "failed": 0}

    def write_all(fd, buf):
        if state["armed"]:
            state["armed"] = False
            state["failed"] += 1
            os.write(fd, buf[: len(buf) // 2])
            raise OSError(28, "No space left on device")
        real(fd, buf)

    monkeypatch.setattr(spool_mod, "_write_all", write_all)
    if quiet == "at once":  # (the later failure is then the submitter's own write)
        monkeypatch.setattr(spool_mod, "_QUIET_S", 0.0)
    delivered: list[tuple[object, bytes]] = []
    warnings: list[str] = []
    w = _writer(tmp_path, lambda seg, record, data=None: delivered.append((seg, data)), warnings.append)
    for i in range(30):
        if (failing == "first" and i == 0) or (failing == "later" and i == 12):
            state["armed"] = True
        ev = threading.Event()
        w.submit(f"call {i}".encode(), None, ev.set)
        assert ev.wait(10)
    w.close()
    assert state["failed"] == 1
    in_memory = [d for seg, d in delivered if seg is None]
    assert len(delivered) == 30 and len(in_memory) <= 1
    assert bool(warnings) == bool(in_memory)
    for seg, data in delivered:
        if seg is not None:
            assert data in spool_mod.read_frames(seg.path), f"{data!r} hidden behind a torn frame"


@pytest.mark.parametrize("quiet", ["at once", "default"])
def test_the_committer_has_a_call_before_its_caller_is_told(tmp_path, monkeypatch, quiet):
    """``done`` comes after ``deliver``: a caller that, once its call returned, waits for the
    committer to be idle (``capture.flush``) must find the call already handed over."""
    if quiet == "at once":
        monkeypatch.setattr(spool_mod, "_QUIET_S", 0.0)
    delivered: set[bytes] = set()
    early: list[bytes] = []
    w = _writer(tmp_path, lambda seg, record, data=None: delivered.add(data))
    for i in range(20):
        data = f"call {i}".encode()
        ev = threading.Event()

        def done(data=data, ev=ev):
            if data not in delivered:
                early.append(data)
            ev.set()

        w.submit(data, data, done)
        assert ev.wait(10)
    w.close()
    assert not early, f"told before the committer had them: {early}"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ok", "torn", "refused", "fsync fails"]),
                          st.sampled_from([0.0, 0.003]), st.integers(1, 3)), min_size=1, max_size=25),
       st.sampled_from([0.0, 0.002]))
def test_every_call_is_handed_on_once_and_readable_where_it_was_acknowledged(tmp_path_factory, steps, quiet):
    """Any mix of appends that succeed, tear (part of a frame written), are refused, or whose
    fsync fails, submitted alone, after a pause or a few at once: every call is handed to the
    committer exactly once, before its waiter is told; a call handed on with a segment is
    readable from that segment's frames; one handed on without is one whose append or fsync
    failed (it goes on from memory), and a warning says so."""
    tmp = tmp_path_factory.mktemp("spool")
    plan: list[str] = []  # what the next append does (consumed in order)
    real_write, real_fsync = spool_mod._write_all, fsio.fsync_fd
    failures = {"n": 0}

    def write_all(fd, buf):
        what = plan.pop(0) if plan else "ok"
        if what == "torn":
            failures["n"] += 1
            os.write(fd, buf[: max(1, len(buf) // 2)])
            raise OSError(28, "No space left on device")
        if what == "refused":
            failures["n"] += 1
            raise OSError(28, "No space left on device")
        if what == "fsync fails":
            plan.insert(0, "fail the fsync")
        real_write(fd, buf)

    def fsync_fd(fd, path=None):
        if plan and plan[0] == "fail the fsync":
            plan.pop(0)
            failures["n"] += 1
            raise OSError(5, "Input/output error")
        real_fsync(fd, path)

    handed: list[tuple[object, bytes]] = []
    told_early: list[bytes] = []
    warnings: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spool_mod, "_write_all", write_all)
        mp.setattr(fsio, "fsync_fd", fsync_fd)
        mp.setattr(spool_mod, "_QUIET_S", quiet)
        w = spool_mod.SpoolWriter(tmp / "spool", fsync=True, warn=warnings.append,
                                  deliver=lambda seg, record, data=None: handed.append((seg, data)))
        n = 0
        for what, pause, at_once in steps:
            time.sleep(pause)
            plan.append(what)
            waits = []
            for _ in range(at_once):
                data = f"call {n}".encode()
                n += 1
                ev = threading.Event()

                def done(data=data, ev=ev):
                    if not any(d == data for _, d in handed):
                        told_early.append(data)
                    ev.set()

                w.submit(data, data, done)
                waits.append(ev)
            for ev in waits:
                assert ev.wait(10)
        w.close()
    assert not told_early
    datas = [d for _, d in handed]
    assert sorted(datas) == sorted(f"call {i}".encode() for i in range(n))  # each once
    for seg, data in handed:
        if seg is not None:
            assert data in spool_mod.read_frames(seg.path), f"{data!r} not readable where acknowledged"
    if any(seg is None for seg, _ in handed):
        assert warnings
