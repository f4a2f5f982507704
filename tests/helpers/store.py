"""Helpers for the library tests: conversation builders and store snapshots (no fixtures)."""

from __future__ import annotations

import os
from pathlib import Path

import convgit
from convgit import codec
from convgit.repository import Repository

NOW = 1_700_000_000_000  # a fixed clock (UTC epoch ms) so thread names and turns are stable


def conv(*texts: str, first: str = "user") -> list[dict]:
    """Messages alternating user/assistant (starting with ``first``), one per text."""
    roles = ("user", "assistant") if first == "user" else ("assistant", "user")
    return [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]


def fast_repo(path: Path | str) -> Repository:
    """A store with fsync off: for property tests that create hundreds of stores."""
    repo = convgit.init(path)
    (repo.path / "config.toml").write_text("[core]\nfsync = false\n")
    repo.close()
    return Repository.open(repo.path)


def set_config(repo: Repository, toml: str) -> Repository:
    """Rewrite config.toml and return the store reopened with it."""
    (repo.path / "config.toml").write_text(toml)
    repo.close()
    return Repository.open(repo.path)


def _skip(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    # the derived index, and lock files (empty, created on first use, never data)
    return name.startswith("index.sqlite") or name.endswith(".lock") or rel == "lock"


def tree_state(repo: Repository) -> dict[str, tuple]:
    """Every file and directory under .convgit (files: relative path → size, mtime_ns), except
    the derived index and lock files. Equal states mean no file was written, touched, created
    or removed."""
    root = repo.path
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if _skip(rel):
                continue
            st = p.stat()
            if p.is_dir():
                out[rel] = ("d",)  # presence only: lock files come and go in ref directories
            else:
                out[rel] = ("f", st.st_size, st.st_mtime_ns)
    return out


def object_ids(repo: Repository) -> set[str]:
    return set(repo.objects.iter_oids())


def objects_by_type(repo: Repository, oids) -> dict[str, list]:
    """type name → decoded objects, for the given ids."""
    out: dict[str, list] = {"message": [], "blob": [], "turn": []}
    for oid in oids:
        obj = repo.objects.read(oid)
        out[codec.type_name(obj)].append(obj)
    return out


def api_view(repo: Repository) -> dict:
    """What the read API answers for a whole store (compared across index rebuilds)."""
    refs = repo.refs.read_all()
    return {
        "threads": convgit.threads(repo),
        "logs": {name: [e.to_json(repo) for e in convgit.log(repo, name)] for name in refs},
        "all": [e.to_json(repo) for e in convgit.log(repo, all_threads=True)],
        "tree": convgit.tree(repo),
        # search and the filters read the full-text index and the tables behind the filters
        "search": {q: [h.to_json() for h in convgit.search(repo, q, count=0, columns=SEARCH_ALL)]
                   for q in SEARCH_QUERIES},
        "tools": [e.id for e in convgit.log(repo, all_threads=True, filters=convgit.make_filters(repo, tools=True))],
        "status": {k: v for k, v in convgit.status(repo).items() if k in STATUS_KEYS},
    }


SEARCH_ALL = ("user", "assistant", "system", "tool", "reasoning")
SEARCH_QUERIES = ("convgit", "fine OR look OR brief", "a* OR e* OR i* OR o* OR u* OR t* OR s*")
STATUS_KEYS = ("threads", "turns", "messages", "message_refs", "dedup_ratio", "text_bytes")
