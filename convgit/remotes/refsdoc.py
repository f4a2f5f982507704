"""The refs document of a remote (``refs.json``, docs/format.md §13.3): the one mutable key
of a remote, naming every pack, with a generation number that grows by one on every write.

Remote format 2 (written now) keeps the threads out of it: ``refs.json`` names **ref
segments** (``refs/<BLAKE3>.json``, written once, never overwritten, like packs), a base and
the deltas after it, whose threads laid over each other in order are the remote's threads
(convgit/remotes/refsegments.py reads and writes them). A push of a few threads then writes a
small delta and a small document instead of one line per thread of the remote. Format 1
(the threads inline) is still read, and the first write after it writes format 2.

Parsed strictly: a remote is input from elsewhere, so a thread name that is not a valid
thread name (``../../x``, a control character), a tip that is not an id, a pack or segment
name that is not one is refused before anything is built on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..errors import ConvgitError, RemoteCorrupt
from ..ids import check_thread_name, is_oid

DOC_KEY = "refs.json"
PACKS = "packs"
SEGMENTS = "refs"
FORMAT = "convgit-remote 2"
FORMAT1 = "convgit-remote 1"
SEGMENT_FORMAT = "convgit-remote 2 refs"
MANIFEST_FORMAT = FORMAT1  # turns manifests are unchanged since format 1 (§13.4)
MAX_FORCED = 100  # forced moves the document remembers (the newest)
MAX_RETIRED_SEGMENTS = 1000  # retired segments the document remembers (the newest)
_PACK_RE = re.compile(r"pack-[0-9a-f]{64}\Z")
_HEX_RE = re.compile(r"[0-9a-f]{64}\Z")


def pack_key(name: str, ext: str) -> str:
    """The key of pack ``name``'s ``.pack`` or ``.idx``."""
    return f"{PACKS}/{name}.{ext}"


def segment_key(digest: str) -> str:
    """The key of the ref segment whose bytes hash to ``digest``."""
    return f"{SEGMENTS}/{digest}.json"


@dataclass
class RefsDoc:
    """A refs document as read (``tag``: its ETag; None when the remote has none yet).
    ``threads`` is the remote's threads, whatever the format (for format 2, laid from its
    ``segments``: ``(digest, size)``, the base first)."""

    generation: int = 0
    threads: dict[str, str] = field(default_factory=dict)
    packs: list[str] = field(default_factory=list)
    head: str | None = None
    forced: list[dict] = field(default_factory=list)
    retired: dict[str, int] = field(default_factory=dict)  # pack → when gc --remote stopped naming it (ms)
    tag: str | None = None
    segments: list[tuple[str, int]] = field(default_factory=list)
    retired_segments: dict[str, int] = field(default_factory=dict)  # segment → when a write stopped naming it (ms)
    version: int = 2  # the format it was read in (1: threads inline; written as 2)

    def dump(self) -> bytes:
        """The document's bytes, format 2 (sorted keys, one-space indent; ``segments`` must
        already name the threads: refsegments.write_doc)."""
        doc = {"format": FORMAT, "generation": self.generation, "head": self.head,
               "segments": [[d, n] for d, n in self.segments], "packs": list(self.packs),
               "forced": self.forced[-MAX_FORCED:]}
        if self.retired:
            doc["retired"] = dict(sorted(self.retired.items()))
        if self.retired_segments:
            newest = sorted(self.retired_segments.items(), key=lambda kv: (kv[1], kv[0]))[-MAX_RETIRED_SEGMENTS:]
            doc["retired_segments"] = dict(sorted(newest))
        return (json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _bad(where: str, what: str):
    def bad(why: str) -> RemoteCorrupt:
        return RemoteCorrupt(f"remote {where}: {what} {why}; nothing was taken from it")
    return bad


def check_threads(threads, bad, *, deletions: bool = False) -> dict[str, str | None]:
    """``threads`` (name → tip) checked: valid thread names, object ids (None too when
    ``deletions``); ``bad(why)`` makes the error."""
    if not isinstance(threads, dict):
        raise bad("lacks its threads")
    for name, tip in threads.items():
        try:
            check_thread_name(name)
        except ConvgitError as e:
            raise bad(f"has an invalid thread name {name!r} ({e.message})") from e
        if not (is_oid(tip) or (deletions and tip is None)):
            raise bad(f"gives thread {name!r} the tip {str(tip)[:80]!r}, not an object id")
    return dict(threads)


def parse(data: bytes, where: str) -> RefsDoc:
    """A refs document from its bytes (format 1 or 2); RemoteCorrupt for anything malformed
    or hostile. A format-2 document's ``threads`` are empty until its segments are laid
    (refsegments.resolve)."""
    bad = _bad(where, f"refs document {DOC_KEY}")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"does not parse ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") not in (FORMAT, FORMAT1):
        raise bad(f"is not {FORMAT!r} (nor {FORMAT1!r})")
    version = 2 if doc["format"] == FORMAT else 1
    gen, packs = doc.get("generation"), doc.get("packs")
    if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
        raise bad("has no valid generation")
    if not isinstance(packs, list):
        raise bad("lacks its packs")
    threads: dict[str, str] = {}
    segments: list[tuple[str, int]] = []
    retired_segments: dict = {}
    if version == 1:
        threads = check_threads(doc.get("threads"), bad)  # type: ignore[assignment]
    else:
        segs = doc.get("segments")
        if not isinstance(segs, list) or not all(
                isinstance(s, list) and len(s) == 2 and isinstance(s[0], str) and _HEX_RE.match(s[0])
                and isinstance(s[1], int) and not isinstance(s[1], bool) and s[1] >= 0 for s in segs):
            raise bad("lacks its segments or names one that is not a segment")
        segments = [(s[0], s[1]) for s in segs]
        retired_segments = doc.get("retired_segments") or {}
        if not isinstance(retired_segments, dict) or not all(
                isinstance(k, str) and _HEX_RE.match(k) and isinstance(v, int) for k, v in retired_segments.items()):
            raise bad("has a malformed retired_segments list")
    for p in packs:
        if not isinstance(p, str) or not _PACK_RE.match(p):
            raise bad(f"names {str(p)[:80]!r}, not a pack")
    head = doc.get("head")
    if head is not None and not isinstance(head, str):
        head = None
    if version == 1 and head is not None and head not in threads:
        head = None  # a stale head only loses the clone's default thread
    forced = [f for f in doc.get("forced") or [] if isinstance(f, dict)]
    retired = doc.get("retired") or {}
    if not isinstance(retired, dict) or not all(isinstance(k, str) and _PACK_RE.match(k) and isinstance(v, int)
                                               for k, v in retired.items()):
        raise bad("has a malformed retired list")
    return RefsDoc(gen, threads, list(dict.fromkeys(packs)), head, forced, dict(retired),
                   segments=segments, retired_segments=dict(retired_segments), version=version)


def dump_segment(threads: dict[str, str | None]) -> bytes:
    """A ref segment's bytes: ``threads`` (name → tip; None: the thread is gone), sorted,
    one line each."""
    return (json.dumps({"format": SEGMENT_FORMAT, "threads": dict(sorted(threads.items()))},
                       indent=0, sort_keys=True, ensure_ascii=False) + "\n").encode()


def parse_segment(data: bytes, digest: str, where: str, *, base: bool, checked: bool = False) -> dict[str, str | None]:
    """A ref segment's threads; RemoteCorrupt when malformed or hostile (the caller has
    checked that its bytes hash to ``digest``). The base (``base``) removes nothing.
    ``checked``: these bytes passed the name and tip checks before (a cached segment)."""
    bad = _bad(where, f"ref segment {segment_key(digest)}")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"does not parse ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != SEGMENT_FORMAT:
        raise bad(f"is not {SEGMENT_FORMAT!r}")
    if checked and isinstance(doc.get("threads"), dict):
        return doc["threads"]
    return check_threads(doc.get("threads"), bad, deletions=not base)
