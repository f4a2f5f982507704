"""HEAD: which thread is current (docs/format.md §2.3), read, written, and staged before the
ref move it follows so that the move's syncfs makes its bytes durable (a mixin of RefStore)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from . import fsio
from .errors import ObjectCorrupt
from .ids import check_thread_name
from .refformat import THREADS


@dataclass
class StagedHead:
    """HEAD's next content in a temp file (RefStore.stage_head): the thread it names, the temp
    file, and the point in the process's syncs after which it was written (fsio.sync_mark)."""

    name: str
    tmp: Path
    mark: int

    def discard(self) -> None:
        """Remove the temp file (HEAD moved elsewhere, or not at all)."""
        fsio.unlink_quiet(self.tmp)


class RefHead:
    """HEAD's reads and writes; RefStore provides ``root`` and ``fsync``."""

    root: Path
    fsync: bool

    def read_head(self) -> str:
        """The thread HEAD names (``main`` when there is no HEAD file)."""
        try:
            raw = (self.root / "HEAD").read_text("utf-8").strip()
        except FileNotFoundError:
            return "main"
        prefix = f"ref: {THREADS}/"
        if not raw.startswith(prefix):
            raise ObjectCorrupt(f"HEAD is corrupt: it does not name a thread ({len(raw.encode())} bytes; "
                                "convgit switch NAME points it at a thread again)")
        return raw[len(prefix):]

    def write_head(self, name: str, staged: "StagedHead | None" = None) -> None:
        """Point HEAD at thread ``name``. ``staged``: its new content, written before the ref
        move it follows (``stage_head``); when a syncfs has made those bytes durable since,
        HEAD costs only its rename and the store directory's fsync (docs/format.md §2.3)."""
        check_thread_name(name)
        if staged is None or staged.name != name or not self.fsync:
            if staged is not None:
                staged.discard()
            fsio.replace_file(self.root / "HEAD", f"ref: {THREADS}/{name}\n".encode(), fsync=self.fsync)
            return
        try:
            if not fsio.synced_since(self.root, staged.mark):
                fsio.fsync_file(staged.tmp)  # (no syncfs since it was written: its own fsync)
            fsio.rename(staged.tmp, self.root / "HEAD")
        except BaseException:
            staged.discard()
            raise
        fsio.fsync_dir(self.root)

    def stage_head(self, name: str) -> "StagedHead | None":
        """HEAD's next content (naming thread ``name``) written to a temp file now, not synced,
        before a ref move whose syncfs (docs/format.md §6.2 step 4) makes it durable;
        ``write_head(name, staged)`` renames it in after the commit point. None without fsync."""
        check_thread_name(name)
        if not self.fsync:
            return None
        tmp = self.root / f"{fsio.TMP_PREFIX}HEAD.{os.getpid()}.{time.monotonic_ns()}"
        fsio.write_new_file(tmp, f"ref: {THREADS}/{name}\n".encode())
        return StagedHead(name, tmp, fsio.sync_mark())
