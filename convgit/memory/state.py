"""What ``convgit mcp`` keeps beside a store, in ``.convgit/mcp/`` (mode 0700, docs/mcp.md):

- ``secret``: 32 random bytes (hex), the HMAC key of handles. Created once, mode 0600, with
  O_EXCL: two servers starting together agree on one (the loser reads the winner's).
- ``tokens.json``: the HTTP bearer tokens, one per client name, mode 0600.
- ``state.sqlite`` (mode 0600): which client owns which thread, the user's grants, the
  upstream thread ids each client used, and the handle table (handle → id or thread name).

Ownership and grants are state, not derived data: they are what the user decided, so they
are not in the index (a cache rebuilt from objects). The handle table *is* derived (an HMAC
of each id under the secret): a handle missing from it is found again by hashing what the
store holds (``convgit.memory.handles``).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from pathlib import Path

from .. import fsio
from ..errors import InvalidInput, StorageFailed, UnsafeSymlink

DIRNAME = "mcp"
SECRET_FILE = "secret"
TOKENS_FILE = "tokens.json"
STATE_FILE = "state.sqlite"
TOKEN_PREFIX = "cgt_"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS owners (thread TEXT PRIMARY KEY, client TEXT NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS grants (thread TEXT NOT NULL, client TEXT NOT NULL, created_ms INTEGER NOT NULL,
                                   PRIMARY KEY (thread, client));
CREATE TABLE IF NOT EXISTS upstream (client TEXT NOT NULL, upstream_id TEXT NOT NULL, thread TEXT NOT NULL,
                                     PRIMARY KEY (client, upstream_id));
CREATE TABLE IF NOT EXISTS handles (handle TEXT PRIMARY KEY, kind TEXT NOT NULL, value TEXT NOT NULL);
"""


def check_client_name(name: str) -> str:
    """A client name (``--client``, a token's name): 1-40 of ``A-Z a-z 0-9 . _ -``, not
    starting with ``.`` or ``-``; it becomes part of thread names and of the turn source."""
    ok = isinstance(name, str) and 0 < len(name) <= 40 and name[0] not in ".-" and all(
        c.isascii() and (c.isalnum() or c in "._-") for c in name) and ".." not in name
    if not ok:
        raise InvalidInput(f"client name {name!r}: use 1-40 letters, digits, '.', '_' or '-'")
    return name


class HubState:
    """The ``.convgit/mcp/`` directory of one store: secret, tokens, ownership, handles."""

    def __init__(self, store: Path, *, fsync: bool = True) -> None:
        self.dir = Path(store) / DIRNAME
        self.fsync = fsync
        self._db: sqlite3.Connection | None = None

    # -- files ------------------------------------------------------------------------------

    def ensure_dir(self) -> Path:
        """The private directory (0700), created on first use; a symlink there is refused
        (the secret and the tokens would be written wherever it points)."""
        if self.dir.is_symlink():
            raise UnsafeSymlink(f"{self.dir} is a symlink: refusing to keep the MCP secret and tokens through it")
        fsio.makedirs(self.dir, fsync=self.fsync, mode=0o700)
        return self.dir

    def read_secret(self) -> bytes:
        """The handle key, created on first use (0600)."""
        path = self.ensure_dir() / SECRET_FILE
        try:
            return _parse_secret(path.read_text("ascii"), path)
        except FileNotFoundError:
            pass
        data = secrets.token_hex(32).encode() + b"\n"
        try:
            fsio.write_new_file(path, data, mode=0o600)
        except StorageFailed:
            if not path.exists():
                raise
        return _parse_secret(path.read_text("ascii"), path)  # ours, or the one a racing server wrote

    def tokens(self) -> dict[str, str]:
        """Client name → bearer token (empty when none was made)."""
        path = self.dir / TOKENS_FILE
        try:
            doc = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise InvalidInput(f"{path}: not valid JSON ({e})") from e
        toks = doc.get("tokens") if isinstance(doc, dict) else None
        if not isinstance(toks, dict) or not all(isinstance(v, str) for v in toks.values()):
            raise InvalidInput(f"{path}: expected {{\"tokens\": {{name: token}}}}")
        return dict(toks)

    def ensure_token(self, client: str) -> tuple[str, bool]:
        """The token of ``client`` and whether it was created now (0600 file, replaced atomically)."""
        check_client_name(client)
        with fsio.flock(self.ensure_dir() / "tokens.lock", shared=False, timeout=30.0):
            toks = self.tokens()
            if client in toks:
                return toks[client], False
            toks[client] = TOKEN_PREFIX + secrets.token_urlsafe(32)
            data = json.dumps({"tokens": toks}, indent=2, sort_keys=True).encode() + b"\n"
            fsio.replace_file(self.dir / TOKENS_FILE, data, fsync=self.fsync, mode=0o600)
            return toks[client], True

    def client_for_token(self, token: str) -> str | None:
        """The client a bearer token names, compared in constant time; None if none."""
        found = None
        for name, tok in self.tokens().items():
            if secrets.compare_digest(tok.encode(), token.encode()):
                found = name
        return found

    # -- the database -----------------------------------------------------------------------

    @property
    def db(self) -> sqlite3.Connection:
        """The state database, created (0600) on first use."""
        if self._db is None:
            path = self.ensure_dir() / STATE_FILE
            if not path.exists():
                try:
                    fsio.write_new_file(path, b"", mode=0o600)
                except StorageFailed:
                    if not path.exists():
                        raise
            db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            db.executescript(_SCHEMA)
            self._db = db
        return self._db

    def close(self) -> None:
        """Close the database (reopened on next use)."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def owner(self, thread: str) -> str | None:
        """The client that created ``thread`` through the server, or None."""
        row = self.db.execute("SELECT client FROM owners WHERE thread=?", (thread,)).fetchone()
        return row[0] if row else None

    def set_owner(self, thread: str, client: str) -> None:
        """Record that ``client`` created ``thread`` (a first owner is never replaced)."""
        self.db.execute("INSERT OR IGNORE INTO owners VALUES (?, ?, ?)", (thread, client, _now()))

    def owned(self, client: str) -> list[str]:
        """The threads ``client`` may update: created or granted, by name."""
        rows = self.db.execute("SELECT thread FROM owners WHERE client=? UNION SELECT thread FROM grants WHERE client=? "
                               "ORDER BY 1", (client, client))
        return [r[0] for r in rows]

    def may_update(self, client: str, thread: str) -> bool:
        """Whether ``client`` created ``thread`` or was granted it."""
        return self.owner(thread) == client or self.db.execute(
            "SELECT 1 FROM grants WHERE thread=? AND client=?", (thread, client)).fetchone() is not None

    def grant(self, client: str, thread: str) -> bool:
        """Let ``client`` update ``thread``; False if it already could."""
        check_client_name(client)
        if self.may_update(client, thread):
            return False
        self.db.execute("INSERT OR IGNORE INTO grants VALUES (?, ?, ?)", (thread, client, _now()))
        return True

    def revoke(self, client: str, thread: str) -> bool:
        """Withdraw a grant; False if there was none (ownership is never revoked here)."""
        return self.db.execute("DELETE FROM grants WHERE thread=? AND client=?", (thread, client)).rowcount > 0

    def grants(self) -> list[dict]:
        """Every grant and every ownership, for ``convgit mcp grants``."""
        rows = self.db.execute("SELECT thread, client, 'owner', created_ms FROM owners UNION ALL "
                               "SELECT thread, client, 'grant', created_ms FROM grants ORDER BY 1, 2, 3")
        return [{"thread": t, "client": c, "why": w, "since_ms": ms} for t, c, w, ms in rows]

    def thread_for_upstream(self, client: str, upstream_id: str) -> str | None:
        """The thread ``client`` saved under this upstream thread id, or None."""
        row = self.db.execute("SELECT thread FROM upstream WHERE client=? AND upstream_id=?",
                              (client, upstream_id)).fetchone()
        return row[0] if row else None

    def set_upstream(self, client: str, upstream_id: str, thread: str) -> None:
        """Remember which thread an upstream id of ``client`` names."""
        self.db.execute("INSERT OR REPLACE INTO upstream VALUES (?, ?, ?)", (client, upstream_id, thread))

    def record_handles(self, rows: list[tuple[str, str, str]]) -> None:
        """Remember ``(handle, kind, value)`` rows, so that the handles resolve later."""
        if rows:
            self.db.executemany("INSERT OR IGNORE INTO handles VALUES (?, ?, ?)", rows)

    def lookup_handle(self, handle: str) -> tuple[str, str] | None:
        """``(kind, value)`` for a handle seen before, or None."""
        row = self.db.execute("SELECT kind, value FROM handles WHERE handle=?", (handle,)).fetchone()
        return (row[0], row[1]) if row else None


def _parse_secret(text: str, path: Path) -> bytes:
    t = text.strip()
    try:
        key = bytes.fromhex(t)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise InvalidInput(f"{path}: not a handle secret (64 hex digits); delete it to make a new one "
                           "(every handle given out so far then changes)")
    return key


def _now() -> int:
    return int(time.time() * 1000)
