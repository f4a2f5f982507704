"""Remotes: where stores meet (remote format 2, docs/format.md §13; docs/remotes.md).

A remote is a key → bytes store with two conditional writes, which is all remote format 2
needs and what every S3-compatible server and a plain directory both give:

- ``put_new(key, data)``: create-only (S3 ``If-None-Match: *``; a directory: a hard link);
  packs and their indexes are written this way, once, under names that are their hashes;
- ``put_if_match(key, data, tag)``: compare-and-swap on the key's tag (S3 ``If-Match`` on
  the ETag; a directory: a lock and a check of the document's hash); the refs document is
  the one key ever written twice, and only this way.

Nothing on the hot path lists keys: the refs document names every pack.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import InvalidInput
from .base import CasLost, RemoteStore  # noqa: F401 (the package's public names)

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")


def check_remote_name(name: str) -> str:
    """A remote's name: letters, digits, ``-`` and ``_`` (it names a config table and a
    directory under ``refs/remotes/``)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidInput(f"invalid remote name {name!r}: use letters, digits, '-' and '_' (up to 63)")
    return name


def parse_url(url: str) -> tuple[str, str, str]:
    """``(kind, location, prefix)``: ``("dir", absolute path, "")`` for a path or ``file://``
    URL, ``("s3", bucket, prefix)`` for ``s3://bucket/prefix``."""
    if url.startswith("s3://"):
        rest = url[5:]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise InvalidInput(f"remote URL {url!r} names no bucket (s3://BUCKET/PREFIX)")
        return "s3", bucket, prefix.strip("/")
    if url.startswith("file://"):
        url = url[7:]
    elif "://" in url:
        raise InvalidInput(f"remote URL {url!r}: only a directory, file:// and s3:// are supported")
    if not url:
        raise InvalidInput("remote URL is empty")
    return "dir", str(Path(url).absolute()), ""


def open_remote(url: str, *, endpoint: str | None = None, region: str | None = None,
                profile: str | None = None) -> RemoteStore:
    """The backend for ``url`` (see parse_url). ``endpoint``/``region``/``profile``: an
    S3-compatible server's address, its region and the AWS profile to read (config.toml
    ``[remote.NAME]``; otherwise the standard AWS variables and profile files apply)."""
    kind, where, prefix = parse_url(url)
    if kind == "dir":
        from .directory import DirectoryRemote

        return DirectoryRemote(Path(where), url=url)
    from .s3 import S3Remote

    return S3Remote(where, prefix, url=url, endpoint=endpoint, region=region, profile=profile)


__all__ = ["CasLost", "RemoteStore", "check_remote_name", "open_remote", "parse_url"]
