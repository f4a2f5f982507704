"""What ``import`` makes of the paths it is given, before reading any conversation: a
directory stands for the files in it, an llm logs.db is told apart from a bundle, and the
progress bar's sizes (used by api.import_paths and merge)."""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidInput
from .sources import expand_dir


def is_llm_db(path: str | Path) -> bool:
    """Is ``path`` a file holding an ``llm`` logs.db (not a convgit bundle)?"""
    p = Path(path)
    try:
        if not p.is_file():
            return False
        with open(p, "rb") as f:
            if not f.read(16).startswith(b"SQLite format 3"):
                return False
    except OSError:
        return False
    from . import llmdb

    return llmdb.is_llm_db(p) and not llmdb.is_bundle(p)


def expand_paths(paths, fmt: str) -> list:
    """A directory stands for the files in it that import reads (``ingest.sources.expand_dir``:
    a whole ``~/.claude/projects`` or ``~/.codex/sessions``); an empty one is an error."""
    out: list = []
    for p in paths:
        if Path(p).is_dir():
            files = expand_dir(p, None if fmt == "auto" else fmt)
            if not files:
                raise InvalidInput(f"{p}: a directory with no file to import in it")
            out.extend(files)
        else:
            out.append(p)
    return out


def progress_sizes(path, fmt: str) -> tuple[int, int, int]:
    """(file size, 0, bytes per conversation when the format gives none: an llm logs.db)."""
    try:
        fsize = Path(path).stat().st_size
    except OSError:
        return 0, 0, 0
    per = 0
    if fmt in ("auto", "llm") and is_llm_db(path):
        from . import llmdb

        per = fsize // max(1, llmdb.count_conversations(path))
    return fsize, 0, per
