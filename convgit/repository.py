"""Open, create and discover stores; tie objects, refs, config and the index together."""

from __future__ import annotations

import os
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from . import fsio
from .config import DEFAULT_CONFIG_TOML, Config, env_overrides, env_store_dir, expand_home, load_config, user_data_dir
from .errors import NotAStore, NotFound, UnsafeSymlink
from .merge_journal import JOURNAL, recover
from .object_store import ObjectStore
from .refs import RENAME_INTENT, RefStore

STORE_DIRNAME = ".convgit"
FORMAT_MAGIC = "convgit-store"
FORMAT_VERSION = 1  # what a new store is written as (so that an older convgit opens it)
FORMAT_VERSIONS = (1, 2, 3)  # what this convgit reads; 2 = 1 + packed-refs, 3 = 2 + packed-logs (format.md §2.1)
PACKED_FORMAT = 3  # declared before the first packing writes packed-logs
PACKED_REFS_FORMAT = 2  # declared before a batch move makes the first packed-refs (docs/format.md §6.3)
FORMAT_LINE = f"{FORMAT_MAGIC} {FORMAT_VERSION}\n"


class Repository:
    """A store on disk. ``path`` is the ``.convgit`` directory itself."""

    def __init__(self, path: Path, config: Config) -> None:
        self.path = path
        self.config = config
        self.objects = ObjectStore(path / "objects", fsync=config.fsync)
        if config.objects_from:  # an index-only store: what is not here is read from a remote by range
            self.objects = _ranged_objects(self.objects, path, config.objects_from)
        self.refs = RefStore(path, fsync=config.fsync, lock_timeout=config.lock_timeout)
        self.refs.declare_packed = lambda: require_format(path, PACKED_REFS_FORMAT, fsync=config.fsync)
        self.refs.declare_packed_logs = lambda: require_format(path, PACKED_FORMAT, fsync=config.fsync)
        self._index = None
        # Said once the operation is done (the CLI prints them to stderr): a ref move that
        # stands although the index could not follow it (a full disk), and the like.
        self.warnings: list[str] = []

    # -- creation and opening ---------------------------------------------------------------

    @classmethod
    def init(cls, path: Path | str, *, default_thread: str = "main") -> "Repository":
        """Create a store at ``path`` (the ``.convgit`` directory). Idempotent."""
        path = Path(path).absolute()
        if (path / "format").exists():
            return cls.open(path)
        env_overrides()  # a bad CONVGIT_* value fails before anything is written
        # An empty directory, or one an interrupted init left (skeleton only), may be initialised.
        skeleton = {"objects", "refs", "logs", "config.toml", "HEAD", f"{fsio.TMP_PREFIX}format"}
        if path.exists() and not {p.name for p in path.iterdir()} <= skeleton:
            raise NotAStore(f"{path} exists and is not an empty directory or a convgit store")
        for sub in ("objects", "refs/threads", "logs"):
            fsio.makedirs(path / sub, fsync=True)  # each new directory's entry made durable
        _write_if_missing(path / "config.toml", DEFAULT_CONFIG_TOML.encode())
        _write_if_missing(path / "HEAD", f"ref: refs/threads/{default_thread}\n".encode())
        # The format file last: a store is complete once it exists.
        tmp = path / f"{fsio.TMP_PREFIX}format"
        fsio.replace_file(path / "format", FORMAT_LINE.encode(), fsync=True, tmp=tmp)
        return cls.open(path)

    @classmethod
    def open(cls, path: Path | str) -> "Repository":
        """Open the existing store at ``path``: check its format version and that it holds no
        unsafe symlink, then read its config."""
        path = Path(path).absolute()
        check_format(path)
        check_no_symlinks(path)
        return cls(path, load_config(path / "config.toml"))

    @classmethod
    def discover(cls, start: Path | str | None = None, *, create_default: bool = True) -> "Repository":
        """Find the store as git does: CONVGIT_DIR, then walk up from ``start`` for a
        ``.convgit/``, then the per-user default store (created on first use)."""
        env = env_store_dir()
        if env:
            p = expand_home(env)
            if not p.is_absolute() and start is not None:
                p = Path(start) / p
            if p.exists() and not p.is_dir():
                raise NotAStore(f"CONVGIT_DIR={env} is not a directory", path=str(p))
            if not (p / "format").exists() and (not p.exists() or not any(p.iterdir())):
                return cls.init(p)
            return cls.open(p)
        here = Path(start or os.getcwd()).absolute()
        for d in (here, *here.parents):
            cand = d / STORE_DIRNAME
            if cand.is_dir():
                return cls.open(cand)
        default = default_store_path()
        if (default / "format").exists():
            return cls.open(default)
        if not create_default:
            raise NotAStore("no convgit store here and no default store yet")
        return cls.init(default)

    # -- locks ------------------------------------------------------------------------------

    # Writers share the store lock; gc and merge take it exclusively (so gc never races a
    # writer). Shared holders that overlap without pause would starve an exclusive locker, so
    # both pass a turnstile first: ``queue.lock``, which writers hold shared only while they
    # take the store lock and an exclusive locker holds while it waits and works. New writers
    # then queue behind a waiting gc and the running ones drain.

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """Hold the store lock shared, as every writer does (after rolling an interrupted merge
        forward)."""
        t = self.config.lock_timeout
        with ExitStack() as held:
            with fsio.flock(self.path / "queue.lock", shared=True, timeout=t):
                held.enter_context(fsio.flock(self.path / "lock", shared=True, timeout=t))
            self.recover_interrupted()
            yield

    def recover_interrupted(self) -> None:
        """Roll forward what a writer cut short left half done (a merge, a rename): run by every
        writer once it holds the store lock, and by gc and merge before they start."""
        if (self.path / JOURNAL).exists():  # a merge died mid-way: finish it
            recover(self)
        if (self.path / RENAME_INTENT).exists():
            self.refs.recover_rename()

    @contextmanager
    def exclusive_lock(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the store lock exclusively (gc, merge): no writer runs meanwhile."""
        t = self.config.lock_timeout if timeout is None else timeout
        with fsio.flock(self.path / "queue.lock", shared=False, timeout=t), \
                fsio.flock(self.path / "lock", shared=False, timeout=t):
            yield

    def transaction(self, **options):
        """``with repo.transaction() as tx:``: the one path of every write after its objects
        are hashed (the lock, objects, ref moves, then the index and HEAD); see
        convgit/transaction.py for ``options``."""
        from .transaction import Transaction

        return Transaction(self, **options)

    # -- the index --------------------------------------------------------------------------

    @property
    def index(self):
        """The derived index (SQLite, or PostgreSQL with ``[index] backend``), opened and
        brought up to date on first use."""
        if self._index is None:
            self._index = self.open_index()
        return self._index

    def pack_refs(self, *, rewrites: dict[str, bytes] | None = None, journal: bool = False) -> int:
        """Move every loose ref and reflog into ``packed-refs`` / ``packed-logs``
        (RefStore.pack_refs; the caller holds the store lock exclusively), declaring format
        version 3 first when there is anything to pack. Returns the refs packed."""
        if rewrites or self.refs.has_loose_refs():
            require_format(self.path, PACKED_FORMAT, fsync=self.config.fsync)
        return self.refs.pack_refs(rewrites=rewrites, journal=journal)

    def auto_pack(self) -> int:
        """After a write that left more than AUTO_PACK_LOOSE loose refs: pack them, if the
        store lock can be had exclusively at once (else the next writer does). The journal
        names what was packed, so every index catches up in O(threads packed). When the
        journal has grown past JOURNAL_ROTATE, every ref is packed and the journal replaced,
        as gc does. Returns the refs packed (0: nothing done)."""
        from .errors import ConvgitError
        from .refs import AUTO_PACK_LOOSE, JOURNAL_ROTATE

        try:
            long_journal = os.stat(self.refs.journal_path).st_size > JOURNAL_ROTATE
        except FileNotFoundError:
            long_journal = False
        if not long_journal and self.refs.count_loose_refs(AUTO_PACK_LOOSE) <= AUTO_PACK_LOOSE:
            return 0
        try:
            with self.exclusive_lock(timeout=0):
                self.recover_interrupted()
                if not long_journal:
                    return self.pack_refs(journal=True)
                # A store nobody runs gc on (a long-lived ``serve``): the journal would grow
                # by a line per move for ever. Packed and started afresh as gc does (every
                # index then reads every ref once: one packed-refs file).
                n = self.pack_refs()
                self.refs.rotate_journal()
                return n
        except ConvgitError:
            return 0  # busy (another writer, a gc) or unreadable: the write stands, packing waits

    def open_index(self, *, autorefresh: bool = True):
        """A new connection to the store's index backend (``index.open_index``)."""
        from .index import open_index

        return open_index(self, autorefresh=autorefresh)

    def close(self) -> None:
        """Close the index, if it was opened, and the packed reflogs' file."""
        self.refs.close_packed_logs()
        if self._index is not None:
            self._index.close()
            self._index = None

    def __enter__(self) -> "Repository":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ranged_objects(local: ObjectStore, path: Path, remote: str):
    """The object store of an index-only store (``[store] objects_from = "NAME"``): local
    objects, then remote NAME's packs read by range (convgit/remotes/ranged.py)."""
    from .config import load_remotes
    from .remotes import open_remote
    from .remotes.ranged import RangedObjects

    def store_of():
        settings = load_remotes(path / "config.toml").get(remote)
        if settings is None:
            raise NotFound(f"store.objects_from names remote {remote!r}, which is not configured", remote=remote)
        return open_remote(settings["url"], endpoint=settings.get("endpoint"), region=settings.get("region"),
                           profile=settings.get("profile"))

    return RangedObjects(local, path / "remotes" / remote / "packs", store_of)


def default_store_path() -> Path:
    """The per-user default store: ``<platformdirs user_data_dir("convgit")>/.convgit``."""
    return user_data_dir() / STORE_DIRNAME


def check_format(path: Path) -> None:
    """Raise NotAStore unless ``path/format`` names this format version."""
    try:
        raw = (path / "format").read_text("utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        raise NotAStore(f"{path} is not a convgit store (no format file)", path=str(path)) from None
    parts = raw.split()
    if len(parts) != 2 or parts[0] != FORMAT_MAGIC or not parts[1].isdigit():
        raise NotAStore(f"{path}/format is not a convgit format file ({len(raw.encode())} bytes)", path=str(path))
    if int(parts[1]) not in FORMAT_VERSIONS:
        raise NotAStore(
            f"{path} is a format version {parts[1]} store; this convgit reads versions "
            f"{', '.join(map(str, FORMAT_VERSIONS))}",
            path=str(path), version=int(parts[1]),
        )


def read_format_version(path: Path) -> int:
    """The format version the store at ``path`` declares (checked by ``check_format``)."""
    check_format(path)
    return int((path / "format").read_text("utf-8", errors="replace").split()[1])


def require_format(path: Path, version: int, *, fsync: bool = True) -> None:
    """Declare format ``version`` before writing what needs it (gc, before ``packed-refs``):
    an older convgit, which does not read packed refs, then refuses the store instead of
    missing its packed threads (and letting its gc prune their messages). Atomic (temp file,
    fsync, rename, directory fsync); never lowers the version."""
    if read_format_version(path) >= version:
        return
    tmp = path / f"{fsio.TMP_PREFIX}format"
    fsio.replace_file(path / "format", f"{FORMAT_MAGIC} {version}\n".encode(), fsync=fsync, tmp=tmp)


# What convgit writes into (or creates) in place, so a symlink there would take the write
# outside the store: checked on every open. Files replaced by rename (HEAD, refs, the merge
# journal) are not on the list: a rename replaces a symlink, it never writes through it.
# Reflogs and ref locks are opened with O_NOFOLLOW (fsio), nested ref directories checked
# by RefStore. The store directory itself, and any parent of it, may be a symlink.
STORE_DIRS = ("objects", "objects/pack", "refs", "refs/threads", "logs", "logs/refs", "logs/refs/threads",
              "logs/deleted")
STORE_FILES = ("index.sqlite", "index.sqlite-journal", "index.sqlite-wal", "index.sqlite-shm",
               "lock", "queue.lock", "gc.lock", "compact.lock", "index.lock")


def check_no_symlinks(path: Path) -> None:
    """Refuse a store holding a symlink where convgit writes (UnsafeSymlink): its directories,
    the fan-out directories under objects/, the index and the lock files."""
    bad = fsio.find_symlinks(path, STORE_DIRS + STORE_FILES)
    if not bad:
        try:
            with os.scandir(path / "objects") as it:
                bad = [f"objects/{e.name}" for e in it if e.is_symlink()]
        except (FileNotFoundError, NotADirectoryError):
            pass
    if bad:
        raise UnsafeSymlink(
            f"{path} holds a symlink where convgit writes ({', '.join(sorted(bad)[:5])}): refusing to open it "
            "(replace the symlink with the real file or directory)", path=str(path), symlinks=sorted(bad)[:20])


def _write_if_missing(path: Path, data: bytes) -> None:
    if not path.exists():
        fsio.replace_file(path, data, fsync=True)


def locate_store(start: str | Path | None = None) -> tuple[Path, bool]:
    """(path, exists) of the store commands run from ``start`` (default: the current
    directory) use, found as ``open_repo`` finds it, without creating one (``exists`` false:
    the default store or CONVGIT_DIR's, created on first use, is not there yet)."""
    import os

    from .config import env_store_dir, expand_home

    env = env_store_dir()
    here = Path(start or os.getcwd()).absolute()
    if env:
        p = expand_home(env)
        if not p.is_absolute():
            p = here / p
        from .errors import NotAStore

        if p.exists() and not p.is_dir():
            raise NotAStore(f"CONVGIT_DIR={env} is not a directory", path=str(p))
        if p.is_dir() and not (p / "format").exists() and any(p.iterdir()):
            raise NotAStore(f"CONVGIT_DIR={env} is a directory that is neither empty nor a convgit store", path=str(p))
    else:
        p = next((d / STORE_DIRNAME for d in (here, *here.parents) if (d / STORE_DIRNAME).is_dir()), None)
        if p is None:
            p = default_store_path()
    exists = (p / "format").exists()
    if exists:
        Repository.open(p).close()  # a store of another format version is an error, as for every command
    return p, exists
