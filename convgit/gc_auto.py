"""``gc --auto`` without cron: when it would act (a cheap estimate, as git's), and started in
the background after a write of the command line.

The estimate reads a few fan-out directories of ``objects/`` (object ids are uniformly
distributed, so the loose objects of ``k`` of the 256 directories, times ``256 / k``, estimate
them all; ``k`` is chosen so that about ``SAMPLE_AT_THRESHOLD`` objects are counted at the
threshold) and the names in ``objects/pack/``. gc --auto decides with the same estimate, so a
gc started because the estimate said so always acts.

The background gc (``start_background_gc``) is ``python -m convgit gc --auto -q`` in a new
session, its stdin and stdout ``/dev/null``, its stderr ``.convgit/gc-auto.log``. The caller
takes ``gc.lock`` first (``fsio.try_flock``): busy means a gc (or an fsck) runs, and nothing
is started. The lock passes to the child (an inherited file descriptor, named by
``CONVGIT_GC_LOCK_FD``), which holds it until it exits: no second gc starts in between. A
log left non-empty by a failed gc stops further automatic gcs for a day (as git's gc.log),
so a store that gc refuses is not gc'd after every commit.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

from . import fsio
from .config import child_env

SAMPLE_AT_THRESHOLD = 32  # loose objects the sampled directories hold, on average, at the threshold
AUTO_LOG = "gc-auto.log"  # the stderr of the last background gc (empty when it went well)
FAILED_BACKOFF_SECONDS = 86400  # a failed background gc's log stops the next ones for this long
LOCK_FD_VAR = "CONVGIT_GC_LOCK_FD"


@dataclass(frozen=True)
class GcDue:
    """Whether gc --auto would act: the loose objects estimated, the packs counted, and the
    limits of the store's config (``[gc] auto_threshold``, ``auto_pack_limit``)."""

    due: bool
    loose_estimate: int
    packs: int
    threshold: int
    pack_limit: int

    def __bool__(self) -> bool:
        return self.due

    def to_json(self) -> dict:
        """The estimate as a JSON object."""
        return {"due": self.due, "loose_estimate": self.loose_estimate, "packs": self.packs,
                "threshold": self.threshold, "pack_limit": self.pack_limit}


def sample_dirs(threshold: int) -> int:
    """How many fan-out directories the estimate reads for ``threshold`` (1 to 256)."""
    return max(1, min(256, math.ceil(SAMPLE_AT_THRESHOLD * 256 / max(1, threshold))))


def estimate_loose(objects_path, threshold: int) -> int:
    """The loose objects of the store, estimated from ``sample_dirs(threshold)`` fan-out
    directories (exact when that is all 256)."""
    k = sample_dirs(threshold)
    n = 0
    root = os.fspath(objects_path)
    for i in range(k):
        try:  # (every entry counts: a writer's temp file lives here only for a moment)
            n += len(os.listdir(f"{root}/{i:02x}"))
        except (FileNotFoundError, NotADirectoryError):
            pass
    return n * 256 // k


def count_packs(pack_dir) -> int:
    """The packs of ``objects/pack/`` (their ``.idx`` files: a pack without one is invisible)."""
    try:
        with os.scandir(pack_dir) as it:
            return sum(1 for e in it if e.name.startswith("pack-") and e.name.endswith(".idx"))
    except FileNotFoundError:
        return 0


def gc_due(repo) -> GcDue:
    """Whether ``gc --auto`` would act on ``repo`` now (cheap: a few directory listings)."""
    cfg = repo.config
    threshold, limit = cfg.gc_auto_threshold, cfg.gc_auto_pack_limit
    objects = repo.objects
    path = getattr(objects, "path", None)
    if path is None:  # an index-only store (objects read from a remote): nothing loose to pack
        return GcDue(False, 0, 0, threshold, limit)
    loose = estimate_loose(path, threshold)
    packs = count_packs(path / "pack")
    return GcDue(loose >= threshold or packs > limit, loose, packs, threshold, limit)


def _failed_recently(log_path, now: float) -> bool:
    try:
        st = os.stat(log_path)
    except FileNotFoundError:
        return False
    return st.st_size > 0 and now - st.st_mtime < FAILED_BACKOFF_SECONDS


def auto_state(repo, *, now: float | None = None) -> dict:
    """What ``status`` says of automatic gc: ``enabled`` (``[gc] auto``), and ``failed``:
    None, or when the last background gc failed (epoch ms), its log's path and first line,
    and until when that stops further automatic gcs (epoch ms)."""
    now = time.time() if now is None else now
    path = repo.path / AUTO_LOG
    failed = None
    if _failed_recently(path, now):
        st = os.stat(path)
        try:
            with open(path, "rb") as f:
                first = f.read(4096).decode("utf-8", "replace").strip().splitlines()
        except OSError:
            first = []
        failed = {"at": int(st.st_mtime * 1000), "log": str(path), "first_line": first[0][:300] if first else "",
                  "paused_until": int((st.st_mtime + FAILED_BACKOFF_SECONDS) * 1000)}
    return {"enabled": bool(repo.config.gc_auto), "failed": failed}


def start_background_gc(repo, *, check: bool = True) -> int | None:
    """Start ``gc --auto -q`` on ``repo`` in the background when ``[gc] auto`` is on and (with
    ``check``) ``gc_due`` says it would act, unless a gc already runs (``gc.lock`` busy) or
    the last background gc failed less than a day ago (``gc-auto.log`` not empty). Returns
    the child's process id, or None when nothing was started. Never waits for the child."""
    import subprocess

    if not repo.config.gc_auto or getattr(repo.objects, "path", None) is None:
        return None
    if check and not gc_due(repo):
        return None
    log_path = repo.path / AUTO_LOG
    if _failed_recently(log_path, time.time()):
        return None
    lock_fd = fsio.try_flock(repo.path / "gc.lock", shared=False)
    if lock_fd is None:
        return None  # a gc or an fsck runs
    try:
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | fsio.NOFOLLOW, 0o644)
        try:
            env = child_env()
            env["CONVGIT_DIR"] = str(repo.path)
            env[LOCK_FD_VAR] = str(lock_fd)
            child = subprocess.Popen(
                [sys.executable, "-m", "convgit", "gc", "--auto", "-q"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_fd,
                cwd=repo.path, env=env, pass_fds=(lock_fd,), start_new_session=True, close_fds=True,
            )
        finally:
            os.close(log_fd)
    except OSError:
        return None  # no process could be started (out of memory, fds): the next write tries again
    finally:
        os.close(lock_fd)  # the child holds the lock now
    child.returncode = 0  # never waited for (the child outlives this process): no ResourceWarning
    return child.pid


__all__ = ["GcDue", "gc_due", "estimate_loose", "count_packs", "start_background_gc", "sample_dirs"]
