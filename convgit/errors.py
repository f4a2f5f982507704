"""One error hierarchy. Every error has a stable ``code`` slug and a documented exit code.

Library code raises these and never prints or exits; ``convgit.cli`` maps them to a message
on stderr (or a JSON document under ``--json``) and ``exit_code``. The table is in docs/cli.md.
"""

from __future__ import annotations

import errno
import sys


class ConvgitError(Exception):
    """Root of every error convgit raises on purpose."""

    code = "error"
    exit_code = 1

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_json(self) -> dict:
        """The error as the JSON document the CLI prints under ``--json``."""
        out: dict = {"status": "error", "error_code": self.code, "error_message": self.message}
        if self.details:
            out["details"] = self.details
        return out


# -- input: 10-19 ---------------------------------------------------------------------------


class InvalidInput(ConvgitError):
    """The input could not be read at all (not JSON, bad UTF-8, unknown shape)."""

    code = "invalid_input"
    exit_code = 10


class SchemaValidationFailed(InvalidInput):
    """The input parsed but does not describe a valid conversation."""

    code = "schema_validation_failed"
    exit_code = 11


class PayloadTooLarge(InvalidInput):
    """The input is over a limit (``limits.max_payload_bytes``, ``max_messages``, ``max_message_bytes``)."""

    code = "payload_too_large"
    exit_code = 12


class InvalidRefName(InvalidInput):
    """A thread name that is not allowed (docs/format.md §5)."""

    code = "invalid_ref_name"
    exit_code = 13


class HashMismatch(InvalidInput):
    """A payload carried its own id or parent id and it is not the one convgit computes."""

    code = "hash_mismatch"
    exit_code = 14


class NotFound(ConvgitError):
    """An unknown revision, thread or object named by the user."""

    code = "not_found"
    exit_code = 15


class AmbiguousRevision(NotFound):
    """A short id or an imported id that names more than one object."""

    code = "ambiguous_revision"
    exit_code = 16


# -- threads and refs: 20-29 ----------------------------------------------------------------


class DuplicateConflict(ConvgitError):
    """A trusted thread already holds a different history (an earlier message differs)."""

    code = "duplicate_conflict"
    exit_code = 20


class AmbiguousThread(ConvgitError):
    """The payload holds the thread's messages in another order."""

    code = "ambiguous_thread"
    exit_code = 21


class RefStale(ConvgitError):
    """Compare-and-swap failed: the ref is not at the expected value."""

    code = "ref_stale"
    exit_code = 22


class RefExists(ConvgitError):
    """A thread of that name exists already (create, rename, fork to a taken name)."""

    code = "ref_exists"
    exit_code = 23


class Locked(ConvgitError):
    """A lock could not be taken within the timeout."""

    code = "locked"
    exit_code = 24


class UnauthorizedUpdate(ConvgitError):
    """A client (``convgit mcp``) asked to write to a thread it neither created nor was
    granted: nothing was written."""

    code = "unauthorized_update"
    exit_code = 25


class NonFastForward(ConvgitError):
    """``push``: the remote's thread holds messages this store lacks or has diverged from it
    (``convgit pull`` first, or ``push --force``): that thread was not moved."""

    code = "non_fast_forward"
    exit_code = 26


# -- integrity: 30-39 -----------------------------------------------------------------------


class ObjectCorrupt(ConvgitError):
    """Stored bytes that do not hash to their id or do not decode, or a damaged ref or HEAD."""

    code = "object_corrupt"
    exit_code = 30


class ObjectMissing(ConvgitError):
    """An object that should be stored (a parent, a blob, a tip) is not."""

    code = "object_missing"
    exit_code = 31


class NotAStore(ConvgitError):
    """Not a convgit store, or a store of a format version this release cannot read."""

    code = "not_a_store"
    exit_code = 32


class GcRefused(ConvgitError):
    """gc found an unreadable or dangling ref or reflog: it fails closed and deletes nothing."""

    code = "gc_refused"
    exit_code = 33


class SourceCorrupt(ConvgitError):
    """A merge source (store or bundle) holds a bad object or ref: nothing was taken from it."""

    code = "source_corrupt"
    exit_code = 34


class FsckFailed(ConvgitError):
    """fsck found corruption (each problem is listed in ``details``)."""

    code = "fsck_failed"
    exit_code = 35


class RemoteCorrupt(SourceCorrupt):
    """A remote's refs document or packs are damaged or hostile (a bad name, a pack it names
    is missing or does not verify): nothing was taken from it or built on it."""

    code = "remote_corrupt"
    exit_code = 36


# -- I/O: 40-43 -----------------------------------------------------------------------------


class StorageFailed(ConvgitError):
    """The file system failed (EIO, ENOSPC, a failed fsync): the operation did not happen."""

    code = "storage_failed"
    exit_code = 40


class UnsafeSymlink(StorageFailed):
    """A symlink inside the store where convgit keeps its own files: refused, nothing was
    written through it (the operation did not happen)."""

    code = "unsafe_symlink"
    exit_code = 41


class RemoteFailed(StorageFailed):
    """A remote could not be reached or refused a request (network, credentials, a missing
    bucket): the operation did not complete; what it uploaded is never referenced."""

    code = "remote_failed"
    exit_code = 42


class IndexUnavailable(ConvgitError):
    """The index lives on a server (``[index] backend = "postgres"``) that cannot be reached
    or refused the connection: the command did nothing (no object or ref was written)."""

    code = "index_unavailable"
    exit_code = 43


# -- embeddings: 50-51 ----------------------------------------------------------------------


class EmbeddingFailed(ConvgitError):
    """An embedding provider failed or answered wrongly (a bad dimension, an HTTP error), or
    vectors of another namespace were asked for: nothing was mixed, the chunks stay pending."""

    code = "embedding_failed"
    exit_code = 50


class EmbeddingUnavailable(EmbeddingFailed):
    """No embedding provider is usable: the local model is not installed (``pip install
    'convgit[semantic]'``) or the configured one is incomplete."""

    code = "embedding_unavailable"
    exit_code = 51


# -- optional features: 52 ---------------------------------------------------------------


class MissingDependency(ConvgitError):
    """A feature needs an optional extra that is not installed (``pip install 'convgit[mcp]'``)."""

    code = "missing_dependency"
    exit_code = 52


# errno values and SQLite result codes that mean the file system failed, not the data.
_STORAGE_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EIO", "EROFS", "EFBIG") if hasattr(errno, n))
# (Not SQLITE_READONLY: that is how SQLite reports an index swapped out under a connection,
# which the index cures by reconnecting.)
_SQLITE_STORAGE = ("SQLITE_FULL", "SQLITE_IOERR")
_SQLITE_STORAGE_TEXT = ("database or disk is full", "disk i/o error")


def storage_failure(e: BaseException, what: str = "") -> "StorageFailed | None":
    """The StorageFailed that ``e`` stands for when it is a file-system failure (a full disk,
    an I/O error, a read-only file system) raised as OSError or by SQLite, else None.

    (SQLite reports ENOSPC as SQLITE_FULL after it has rolled back on its own: this is how
    such an error is told apart from a corrupt index, which a rebuild cures.)
    """
    if isinstance(e, StorageFailed):
        return e
    prefix = f"{what}: " if what else ""
    if isinstance(e, OSError) and e.errno in _STORAGE_ERRNOS:
        where = f"{e.filename}: " if e.filename and not what else ""
        return StorageFailed(f"{prefix}{where}{e.strerror or e}", errno=e.errno)
    sqlite3 = sys.modules.get("sqlite3")  # (an SQLite error exists only once sqlite3 is loaded: start-up stays lean)
    if sqlite3 is not None and isinstance(e, sqlite3.Error):
        name = getattr(e, "sqlite_errorname", "") or ""
        text = str(e).lower()
        if name.startswith(_SQLITE_STORAGE) or any(t in text for t in _SQLITE_STORAGE_TEXT):
            return StorageFailed(f"{prefix}{e}", sqlite_error=name or None)
    return None


ALL_ERRORS: tuple[type[ConvgitError], ...] = (
    ConvgitError,
    InvalidInput,
    SchemaValidationFailed,
    PayloadTooLarge,
    InvalidRefName,
    HashMismatch,
    NotFound,
    AmbiguousRevision,
    DuplicateConflict,
    AmbiguousThread,
    RefStale,
    RefExists,
    Locked,
    UnauthorizedUpdate,
    NonFastForward,
    ObjectCorrupt,
    ObjectMissing,
    NotAStore,
    GcRefused,
    SourceCorrupt,
    FsckFailed,
    RemoteCorrupt,
    StorageFailed,
    UnsafeSymlink,
    RemoteFailed,
    IndexUnavailable,
    EmbeddingFailed,
    EmbeddingUnavailable,
    MissingDependency,
)
