"""Revisions → ids: full ids, unique prefixes (4+ hex), thread names, remote-tracking refs
(``origin/main``), HEAD, NAME~N, NAME^."""

from __future__ import annotations

import re

from .errors import InvalidRefName, NotFound
from .graph import read_message
from .ids import check_thread_name, is_oid, is_oid_prefix

_SUFFIX = re.compile(r"(~\d*|\^+)+\Z")


def split_rev(rev: str) -> tuple[str, int]:
    """``"main~2"`` → ``("main", 2)``; ``"HEAD^^"`` → ``("HEAD", 2)``."""
    m = _SUFFIX.search(rev)
    if not m or m.start() == 0:
        return rev, 0
    base, suffix = rev[: m.start()], m.group(0)
    n = 0
    for tok in re.findall(r"~\d*|\^", suffix):
        n += 1 if tok in ("~", "^") else int(tok[1:])
    return base, n


def resolve_base(repo, base: str) -> tuple[str, str | None]:
    """(id, thread name or None) for a revision without ~N."""
    if base in ("HEAD", "@"):
        name = repo.refs.read_head()
        tip = repo.refs.read(name)
        if tip is None:
            raise NotFound(f"HEAD names thread {name!r}, which has no messages yet", thread=name)
        return tip, name
    try:
        check_thread_name(base)
        tip = repo.refs.read(base)
        if tip is not None:
            return tip, base
        if "/" in base:  # a remote-tracking ref (NAME/THREAD, remotes/NAME/THREAD): after the threads, as in git
            from .remotes.tracking import read_tracking

            found = read_tracking(repo.path, base)
            if found is not None:
                return found[0], None
    except InvalidRefName:
        pass
    if ":" in base:
        return _resolve_alias(repo, base), None
    low = base.lower()
    if is_oid(low):
        if repo.objects.contains(low):
            return low, None
        raise NotFound(f"unknown revision {base!r}: no such object", rev=base)
    if is_oid_prefix(low):
        oid = repo.objects.resolve_prefix(low)
        if oid is not None:
            return oid, None
    if 0 < len(low) < 4 and all(c in "0123456789abcdef" for c in low):
        raise NotFound(f"unknown revision {base!r}: not a thread, and an id prefix needs 4 or more hex digits",
                       rev=base)
    raise NotFound(f"unknown revision {base!r}: not a thread, id or unique id prefix", rev=base)


def _resolve_alias(repo, base: str) -> str:
    """``SOURCE:ID``: the message an import recorded for that source message id (an exact id,
    or a unique prefix of 4+ characters), e.g. ``chatgpt:f63b8e17`` or ``llm:b2:80b1…``."""
    source, _, sid = base.partition(":")
    if not source or not sid:
        raise NotFound(f"unknown revision {base!r}", rev=base)
    found = repo.index.find_alias(source, sid)
    if not found:
        raise NotFound(f"unknown revision {base!r}: no {source} message with that id was imported", rev=base)
    if len(found) > 1:
        from .errors import AmbiguousRevision

        raise AmbiguousRevision(
            f"{base} names {len(found)} messages: {', '.join(f[:12] for f in found[:5])}", candidates=found[:20]
        )
    return found[0]


def resolve(repo, rev: str) -> str:
    """The message (or object) id a revision names."""
    return resolve_with_thread(repo, rev)[0]


def resolve_with_thread(repo, rev: str) -> tuple[str, str | None]:
    """``(id, thread or None)`` for a revision; the thread when ``rev`` names one."""
    if not isinstance(rev, str) or not rev:
        raise NotFound("empty revision")
    base, n = split_rev(rev)
    oid, thread = resolve_base(repo, base)
    for i in range(n):
        msg = read_message(repo.objects, oid)
        if msg.parent is None:
            raise NotFound(f"{rev}: {base} has only {i + 1} message(s)", rev=rev)
        oid = msg.parent
    return oid, (thread if n == 0 else None)
