"""Edits of config.toml made by commands (``remote add|remove|rename``, ``embed --switch``):
one table replaced, every other line of the user's file left as it is, the result checked to
be TOML (and, for ``[embed]``, valid settings) before it atomically replaces the file."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from . import fsio
from .config import _table, load_embed_config
from .errors import InvalidInput


def replace_table(path: Path, is_header, block: str | None, *, fsync: bool = True, what: str) -> None:
    """Rewrite config.toml with the table whose header line ``is_header(line)`` accepts
    replaced by ``block`` (None: removed; appended when there was none), every other line left
    as it is; checked to be TOML before it replaces the file (atomically). ``what`` names the
    table in the error."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        text = ""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("["):
            skipping = is_header(line)
        if not skipping:
            out.append(line)
    new = "".join(out)
    if block:
        if new and not new.endswith("\n"):
            new += "\n"
        new += ("\n" if new.strip() else "") + block
    try:
        tomllib.loads(new)
    except tomllib.TOMLDecodeError as e:
        raise InvalidInput(f"{path}: cannot be updated as TOML ({e}); edit {what} by hand") from e
    fsio.replace_file(path, new.encode("utf-8"), fsync=fsync)


_PROVIDER_KEYS = ("provider", "model", "dimension", "url")  # api_key_env is kept: no CLI option sets it


def switch_embed(path: Path, settings: dict, *, fsync: bool = True) -> None:
    """Point config.toml's ``[embed]`` at another provider (``embed --provider … --switch``):
    the provider's own keys are replaced by ``settings`` (None values dropped), the rest of the
    table (batch size, chunk rules, on_commit) is kept; checked as ``load_embed_config`` checks."""
    table = {k: v for k, v in _table(path, "embed").items() if k not in _PROVIDER_KEYS}
    values = {**{k: v for k, v in settings.items() if v is not None}, **table}
    load_embed_config(path.parent / "_unused", **values)  # every value checked before writing
    block = "[embed]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())
    replace_table(path, lambda line: re.match(r"\[\s*embed\s*\]\s*(#.*)?\Z", line.strip()) is not None, block,
                  fsync=fsync, what="[embed]")
