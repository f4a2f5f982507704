"""``remote add|list|remove|rename``: the ``[remote.NAME]`` tables of config.toml, and the
cache each remote keeps under ``.convgit/remotes/NAME/`` (docs/remotes.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from . import fsio
from .config import load_remotes
from .config_edit import replace_table
from .errors import InvalidInput, NotFound, RefExists
from .remotes import check_remote_name, parse_url

_PROFILE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}\Z")  # an AWS profile name
CACHE = "remotes"  # .convgit/remotes/NAME/: the remote's pack indexes, ref segments, and packs in flight


def _config(repo) -> Path:
    return repo.path / "config.toml"


def list_remotes(repo) -> list[dict]:
    """Every configured remote: name, url, endpoint and region when set."""
    return [{"name": n, **v} for n, v in sorted(load_remotes(_config(repo)).items())]


def get_remote(repo, name: str | None) -> tuple[str, dict]:
    """``(name, settings)`` of remote ``name``; None: ``origin``, or the only remote."""
    remotes = load_remotes(_config(repo))
    if name is None:
        if "origin" in remotes:
            name = "origin"
        elif len(remotes) == 1:
            name = next(iter(remotes))
        else:
            raise NotFound("no remote given and no remote named origin (convgit remote add NAME URL)"
                           if not remotes else f"which remote? {', '.join(sorted(remotes))}")
    if name not in remotes:
        raise NotFound(f"no remote named {name!r} (convgit remote list)", remote=name)
    return name, remotes[name]


def add_remote(repo, name: str, url: str, *, endpoint: str | None = None, region: str | None = None,
               profile: str | None = None) -> dict:
    """Add remote ``name`` at ``url`` (a directory, ``file://`` or ``s3://bucket/prefix``);
    ``profile``: the AWS profile (``~/.aws/config``) an S3 remote reads its keys, region and
    endpoint from (its name is stored, never a key)."""
    check_remote_name(name)
    kind = parse_url(url)[0]
    if profile is not None and (kind != "s3" or not _PROFILE_RE.match(profile)):
        raise InvalidInput(f"--profile {profile!r}: " + ("only s3:// remotes read AWS profiles" if kind != "s3"
                                                         else "not a profile name"))
    for opt, value in (("--endpoint", endpoint), ("--region", region)):
        if value is not None and kind != "s3":  # stored and never read: say so rather than keep it
            raise InvalidInput(f"{opt} {value!r}: only s3:// remotes have one ({url} is a directory remote)")
    if name in load_remotes(_config(repo)):
        raise RefExists(f"remote {name!r} exists already", remote=name)
    values = {"url": url, "endpoint": endpoint, "region": region, "profile": profile}
    write_remote(_config(repo), name, values, fsync=repo.config.fsync)
    return {"name": name, **{k: v for k, v in values.items() if v}}


def remove_remote(repo, name: str) -> dict:
    """Remove remote ``name``: its config table, tracking refs and cache."""
    name, settings = get_remote(repo, name)
    with repo.transaction(index="none") as tx:
        write_remote(_config(repo), name, None, fsync=repo.config.fsync)
        tx.drop_tracking(name)
    fsio.rmtree(repo.path / CACHE / name)
    return {"name": name, "url": settings["url"], "removed": True}


def rename_remote(repo, old: str, new: str) -> dict:
    """Rename remote ``old`` to ``new`` (its tracking refs and cache follow)."""
    old, settings = get_remote(repo, old)
    check_remote_name(new)
    if new in load_remotes(_config(repo)):
        raise RefExists(f"remote {new!r} exists already", remote=new)
    with repo.transaction(index="none") as tx:
        write_remote(_config(repo), new, settings, fsync=repo.config.fsync)
        write_remote(_config(repo), old, None, fsync=repo.config.fsync)
        tx.drop_tracking(old, rename_to=new)
    cache = repo.path / CACHE / old
    if cache.exists():
        fsio.rename(cache, repo.path / CACHE / new)
    return {"name": new, "old": old, "url": settings["url"]}


def _remote_header(line: str) -> str | None:
    m = re.match(r'\[\s*remote\s*\.\s*("?)([A-Za-z0-9_-]+)\1\s*\]\s*(#.*)?\Z', line.strip())
    return m.group(2) if m else None


def write_remote(path: Path, name: str, values: dict | None, *, fsync: bool = True) -> None:
    """Set (``values``) or remove (None) the ``[remote.NAME]`` table of config.toml, leaving
    every other line as it is; checked to be TOML before it replaces the file (atomically)."""
    block = None
    if values:
        block = f"[remote.{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items() if v)
    replace_table(path, lambda line: _remote_header(line) == name, block, fsync=fsync, what=f"[remote.{name}]")
