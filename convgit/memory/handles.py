"""Handles: the opaque names ``convgit mcp`` gives messages and threads instead of raw ids.

A message id is the BLAKE3 of its bytes, and the bytes name the parent: a raw id that leaves
the store is a content hash, which lets anyone holding a guess of the content confirm it.
So the server hands out handles instead (docs/mcp.md, "Handles"):

    m_<26 base32>   a message: HMAC-SHA256(secret, "convgit-message\\0" + id), 130 bits
    t_<26 base32>   a thread:  HMAC-SHA256(secret, "convgit-thread\\0" + name)

``secret`` is the store's own key (``.convgit/mcp/secret``), so the same message has the
same handle across restarts and clients of one store, and different handles in different
stores. A handle is resolved through the handle table (``state.sqlite``): every handle the
server gives out is recorded there first; one missing (a deleted table) is found again by
hashing every thread name and every reachable message once.

With ``trusted_local`` (``--trusted-local``, for debugging) the handle of a message is its
raw id and the handle of a thread its name; input then also takes either form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from .. import api
from ..errors import InvalidInput, NotFound
from ..ids import is_oid
from .state import HubState

MESSAGE = "message"
THREAD = "thread"
_PREFIX = {MESSAGE: "m_", THREAD: "t_"}
_DOMAIN = {MESSAGE: b"convgit-message\x00", THREAD: b"convgit-thread\x00"}
_LEN = 26  # base32 characters: 130 bits


class Handles:
    """Handles of one store (see the module docstring)."""

    def __init__(self, repo, state: HubState, *, trusted_local: bool = False) -> None:
        self.repo = repo
        self.state = state
        self.trusted_local = trusted_local
        self._key = state.read_secret()
        self._pending: dict[str, tuple[str, str]] = {}

    def compute(self, kind: str, value: str) -> str:
        """The handle of a message id or a thread name, without recording it."""
        if self.trusted_local:
            return value
        mac = hmac.new(self._key, _DOMAIN[kind] + value.encode("utf-8"), hashlib.sha256).digest()
        return _PREFIX[kind] + base64.b32encode(mac).decode("ascii").lower()[:_LEN]

    def make(self, kind: str, value: str) -> str:
        """The handle of a message id or a thread name, recorded (at the next ``flush``) so
        that it resolves later: what the server gives out."""
        h = self.compute(kind, value)
        if not self.trusted_local:
            self._pending[h] = (kind, value)
        return h

    def message(self, oid: str) -> str:
        """The handle of message ``oid``."""
        return self.make(MESSAGE, oid)

    def thread(self, name: str) -> str:
        """The handle of thread ``name``."""
        return self.make(THREAD, name)

    def flush(self) -> None:
        """Record the handles made since the last flush, so that they resolve later."""
        if self._pending:
            self.state.record_handles([(h, k, v) for h, (k, v) in self._pending.items()])
            self._pending.clear()

    def is_handle(self, text: object, kind: str | None = None) -> bool:
        """Whether ``text`` has the form of a handle (of ``kind``)."""
        if not isinstance(text, str):
            return False
        kinds = (kind,) if kind else (MESSAGE, THREAD)
        return any(text.startswith(_PREFIX[k]) and len(text) == 2 + _LEN for k in kinds)

    def resolve(self, handle: object, kinds: tuple[str, ...] = (MESSAGE, THREAD), what: str = "id") -> tuple[str, str]:
        """``(kind, value)`` for a handle of one of ``kinds``: not_found if unknown,
        invalid_input if it is not a handle at all."""
        if not isinstance(handle, str) or not handle:
            raise InvalidInput(f"{what}: expected a handle string")
        if self.trusted_local and not self.is_handle(handle):
            return self._resolve_raw(handle, kinds, what)
        if not self.is_handle(handle) or not any(handle.startswith(_PREFIX[k]) for k in kinds):
            want = " or ".join(f"{_PREFIX[k]}…" for k in kinds)
            raise InvalidInput(f"{what}: {handle[:80]!r} is not a handle ({want}, as this server gives them out)")
        self.flush()
        found = self._pending.get(handle) or self.state.lookup_handle(handle)
        if found is None:
            self._rehash(handle[:2])
            found = self.state.lookup_handle(handle)
        if found is None or found[0] not in kinds:
            raise NotFound(f"{what}: no message or thread has the handle {handle}")
        return found

    def _resolve_raw(self, text: str, kinds: tuple[str, ...], what: str) -> tuple[str, str]:
        if MESSAGE in kinds and is_oid(text):
            return MESSAGE, text
        if THREAD in kinds and text in self.repo.refs.read_all():
            return THREAD, text
        raise NotFound(f"{what}: no {' or '.join(kinds)} {text[:80]!r}")

    def _rehash(self, prefix: str) -> None:
        """The handle table lost a handle: hash every thread name (and, for a message
        handle, every reachable message) again. O(store), once."""
        refs = self.repo.refs.read_all()
        for name in refs:
            self.thread(name)
        if prefix == _PREFIX[MESSAGE]:
            for e in api.iter_log(self.repo, all_threads=True):
                self.message(e.id)
        self.flush()
