"""The refs document of remote format 1 (``refs.json``, docs/format.md §13.3): the one
mutable key of a remote, naming every thread's tip and every pack, with a generation number
that grows by one on every write. Parsed strictly: a remote is input from elsewhere, so a
thread name that is not a valid thread name (``../../x``, a control character), a tip that
is not an id or a pack name that is not a pack's is refused before anything is built on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..errors import ConvgitError, RemoteCorrupt
from ..ids import check_thread_name, is_oid

DOC_KEY = "refs.json"
PACKS = "packs"
FORMAT = "convgit-remote 1"
MAX_FORCED = 100  # forced moves the document remembers (the newest)
_PACK_RE = re.compile(r"pack-[0-9a-f]{64}\Z")


def pack_key(name: str, ext: str) -> str:
    """The key of pack ``name``'s ``.pack`` or ``.idx``."""
    return f"{PACKS}/{name}.{ext}"


@dataclass
class RefsDoc:
    """A refs document as read (``tag``: its ETag; None when the remote has none yet)."""

    generation: int = 0
    threads: dict[str, str] = field(default_factory=dict)
    packs: list[str] = field(default_factory=list)
    head: str | None = None
    forced: list[dict] = field(default_factory=list)
    retired: dict[str, int] = field(default_factory=dict)  # pack → when gc --remote stopped naming it (ms)
    tag: str | None = None

    def dump(self) -> bytes:
        """The document's bytes (sorted keys, one line per thread: diffable, stable)."""
        doc = {"format": FORMAT, "generation": self.generation, "head": self.head,
               "threads": dict(sorted(self.threads.items())), "packs": list(self.packs), "forced": self.forced[-MAX_FORCED:]}
        if self.retired:
            doc["retired"] = dict(sorted(self.retired.items()))
        return (json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def parse(data: bytes, where: str) -> RefsDoc:
    """A refs document from its bytes; RemoteCorrupt for anything malformed or hostile."""
    def bad(why: str) -> RemoteCorrupt:
        return RemoteCorrupt(f"remote {where}: refs document {DOC_KEY} {why}; nothing was taken from it")

    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"does not parse ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise bad(f"is not {FORMAT!r}")
    gen, threads, packs = doc.get("generation"), doc.get("threads"), doc.get("packs")
    if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
        raise bad("has no valid generation")
    if not isinstance(threads, dict) or not isinstance(packs, list):
        raise bad("lacks its threads or packs")
    for name, tip in threads.items():
        try:
            check_thread_name(name)
        except ConvgitError as e:
            raise bad(f"has an invalid thread name {name!r} ({e.message})") from e
        if not is_oid(tip):
            raise bad(f"gives thread {name!r} the tip {str(tip)[:80]!r}, not an object id")
    for p in packs:
        if not isinstance(p, str) or not _PACK_RE.match(p):
            raise bad(f"names {str(p)[:80]!r}, not a pack")
    head = doc.get("head")
    if head is not None and (not isinstance(head, str) or head not in threads):
        head = None  # a stale head only loses the clone's default thread
    forced = [f for f in doc.get("forced") or [] if isinstance(f, dict)]
    retired = doc.get("retired") or {}
    if not isinstance(retired, dict) or not all(isinstance(k, str) and _PACK_RE.match(k) and isinstance(v, int)
                                               for k, v in retired.items()):
        raise bad("has a malformed retired list")
    return RefsDoc(gen, dict(threads), list(dict.fromkeys(packs)), head, forced, dict(retired))
