"""What every remote backend is: the contract (RemoteStore) and the lost-race signal (CasLost)."""

from __future__ import annotations

from typing import Protocol


class CasLost(Exception):
    """A conditional write met another writer's version (the caller re-reads and retries)."""


class RemoteStore(Protocol):
    """The contract every remote backend keeps (tests/test_remote_store_contract.py)."""

    url: str

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The bytes under ``key`` and their tag (an ETag), or None if absent."""

    def get_unless(self, key: str, tag: str) -> tuple[bytes | None, str] | None:
        """``get``, unless ``key``'s tag is still ``tag``: then ``(None, tag)`` (S3: a
        conditional GET, ``If-None-Match``, answered 304 with no body); None if absent."""

    def size(self, key: str) -> int | None:
        """The size of ``key`` in bytes, or None if absent (a HEAD request)."""

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``key`` from byte ``start`` (fewer at its end); RemoteCorrupt
        naming the key when it is absent (index sync reads packs by range)."""

    def put_new(self, key: str, data: bytes) -> bool:
        """Write ``key`` only if it does not exist: True if written, False if it existed."""

    def put_if_match(self, key: str, data: bytes, tag: str | None) -> str:
        """Replace ``key`` only if its tag is ``tag`` (None: only if absent); the new tag.
        Raises CasLost when another writer got there first."""

    def delete(self, key: str) -> None:
        """Remove ``key`` (absent: nothing to do)."""

    def list(self, prefix: str) -> dict[str, float]:
        """Every key under ``prefix`` and when it was last written (epoch seconds): gc
        --remote only, never on the hot path."""
