"""Renaming a thread: the ``RefRenames`` mixin of ``RefStore`` (refs.py), with its intent file
and its roll-forward (docs/format.md §6.2). ``RefStore`` supplies the reads, the locks, the
moves and the reflog files these use."""

from __future__ import annotations

import json
import os
import time

from . import fsio
from .config import crash_point
from .errors import InvalidRefName, NotFound, RefExists
from .ids import check_thread_name, is_oid
from .refformat import rename_message

RENAME_INTENT = "rename-intent.json"  # a rename in progress: rolled forward by the next writer


class RefRenames:
    """``rename`` and ``recover_rename`` (and the two ways a rename is made)."""

    def rename(self, old_name: str, new_name: str) -> str:
        """Rename a thread (ref and reflog). Fails if the new name exists. The reflog records
        the rename (``rename_message``): that is how forks of the thread follow the new name.

        Two names change, so the rename is made whole by an intent file (``rename-intent.json``,
        docs/format.md §6.2): written durably once the rename is checked, before anything
        moves, and removed when it is done. A rename cut short (a power loss, a kill, a full
        disk) is rolled forward by the next writer (``recover_rename``): never both names, and
        never neither."""
        check_thread_name(old_name)
        check_thread_name(new_name)
        if self.ref_path(new_name) not in self.ref_path(old_name).parents:
            self._check_df_conflict(self.ref_path(new_name), new_name)  # (a symlink in the way first)
        tip = self.read(old_name)
        if tip is None:
            raise NotFound(f"thread {old_name!r} does not exist", thread=old_name)
        if self.read(new_name) is not None or self.ref_path(new_name) == self.ref_path(old_name):
            raise RefExists(f"thread {new_name!r} already exists", thread=new_name)
        intent = self.root / RENAME_INTENT
        fsio.replace_file(intent, json.dumps({"old": old_name, "new": new_name, "tip": tip}).encode(), fsync=self.fsync)
        crash_point("rename_after_intent")
        tip = self._rename(old_name, new_name)
        fsio.unlink(intent)  # (need not be durable: rolling a finished rename forward changes nothing)
        return tip

    def recover_rename(self) -> bool:
        """Finish a rename cut short (its intent file exists): the thread ends under its new
        name at the tip it had, whichever step the rename reached. True when there was one."""
        intent = self.root / RENAME_INTENT
        try:
            doc = json.loads(intent.read_text("utf-8"))
            old, new, tip = doc["old"], doc["new"], doc["tip"]
            check_thread_name(old), check_thread_name(new)
            if not is_oid(tip):
                raise ValueError(tip)
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError, InvalidRefName):
            fsio.unlink(intent)  # torn before it was durable: the rename never began
            return False
        cur_old, cur_new = self.read(old), self.read(new)
        if cur_new is None and cur_old == tip:
            self._rename(old, new)  # it never got past the checks: do it all
        elif cur_new is None and cur_old is None:  # ``a/b`` -> ``a`` stopped between its two steps
            if self.has_log(old):  # its delete's archiving was cut short: finish it
                self._archive_log(old)
            self._prune_empty_dirs(self.ref_path(old).parent)  # what ``a/b`` left in the way of ``a``
            self.update(new, tip, expected=None, message=rename_message(old, new) + " (completed)")
        elif cur_new == tip and cur_old == tip:  # the new ref was in, the old one not yet gone
            self.update(old, None, expected=tip, message=rename_message(old, new) + " (completed)")
        fsio.unlink(intent)
        return True

    def _rename(self, old_name: str, new_name: str) -> str:
        src, dst = self.ref_path(old_name), self.ref_path(new_name)
        if src == dst:
            tip = self._read_ref(src, old_name)
            if tip is None:
                raise NotFound(f"thread {old_name!r} does not exist", thread=old_name)
            raise RefExists(f"thread {new_name!r} already exists", thread=new_name)
        if dst in src.parents:
            # ``p/q`` -> ``p``: the only thing in the way is the thread being renamed.
            others = [n for n in self.iter_names() if n.startswith(new_name + "/") and n != old_name]
            if others:
                raise RefExists(f"thread {new_name!r} conflicts with threads named {new_name}/…", thread=new_name)
            return self._rename_up(old_name, new_name)
        self._check_df_conflict(dst, new_name)
        fsio.makedirs(dst.parent, fsync=self.fsync)
        fsio.makedirs(src.parent)  # a packed nested thread's directory may be gone: its lock goes there
        first, second = sorted([src, dst])
        with self._locked(first), self._locked(second), self._creating():  # (the new name is a creation)
            tip = self._read_ref(src, old_name)
            if tip is None:
                raise NotFound(f"thread {old_name!r} does not exist", thread=old_name)
            if self._read_ref(dst, new_name) is not None:
                raise RefExists(f"thread {new_name!r} already exists", thread=new_name)
            self.journal([new_name])
            self._append_log(old_name, tip, tip, None, rename_message(old_name, new_name))
            lsrc, ldst = self.log_path(old_name), self.log_path(new_name)
            if ldst.exists() or self._packed_log(new_name) is not None:
                self._archive_log(new_name)
            if self._packed_log(old_name) is not None:
                # The whole reflog (packed part and loose file) becomes the new name's loose
                # reflog, then the old name's packed part goes: a crash between leaves a
                # stale reflog under the old name (archived when it is next created).
                fsio.makedirs(ldst.parent, fsync=self.fsync)
                fsio.replace_file(ldst, self.log_bytes(old_name), fsync=self.fsync)
                self._drop_packed_logs({old_name})
                fsio.unlink(lsrc)
            elif lsrc.exists():
                fsio.makedirs(ldst.parent, fsync=self.fsync)
                fsio.rename(lsrc, ldst)
            tmp = dst.with_name(f"{fsio.TMP_PREFIX}{dst.name}.{os.getpid()}.{time.monotonic_ns()}")
            fsio.replace_file(dst, f"{tip}\n".encode(), fsync=self.fsync, tmp=tmp)
            self._unpack([old_name])  # as a delete: the packed line before the loose file
            fsio.unlink(src)
            if self.fsync:
                fsio.fsync_dir(src.parent)
            self._prune_empty_dirs(src.parent)  # renaming ``p/q`` away leaves room for ``p``
            return tip

    def _rename_up(self, old_name: str, new_name: str) -> str:
        """Rename ``a/b`` to ``a``: delete the old ref, then create the new one (its reflog
        carries over). Not atomic across the two names; each step is."""
        tip = self.read(old_name)
        if tip is None:
            raise NotFound(f"thread {old_name!r} does not exist", thread=old_name)
        saved = self.log_bytes(old_name)
        self.update(old_name, None, expected=tip, message=rename_message(old_name, new_name))
        archived = sorted(self.deleted_logs_dir.glob(f"{old_name}.*"))
        self.update(new_name, tip, expected=None, message=rename_message(old_name, new_name))
        if saved:
            ldst = self.log_path(new_name)
            data = saved + ldst.read_bytes()
            fsio.replace_file(ldst, data, fsync=self.fsync)
            self.journal([new_name])  # its reflog changed again
            for a in archived[-1:]:
                fsio.unlink(a)
        return tip

