"""What a store remembers of one remote between operations (``.convgit/remotes/NAME/``):
hints that let a sync with nothing to do cost O(1) requests and no file per thread. None is
trusted for safety: a lost, stale or damaged file costs HEAD requests, a progress total that
is off, or a sync that reads every ref again, never a wrong move (docs/remotes.md).

``state.json`` (small, read by every sync):

- ``sizes``, ``settled``: each pack's size (a pack never changes: one HEAD each, ever) and the
  packs whose objects are here (taken by a fetch, or uploaded by a push).
- ``checked``: the BLAKE3 of a refs document whose every tip push found in some pack.
- ``tracking``: the header of the tracking refs' snapshot: the fingerprint (size, mtime,
  inode) of their journal and packed file when it was read under the exclusive store lock,
  and ``doc``/``generation``/``tag``/``packs``: the digest, generation, tag (ETag) and pack
  names of a refs document whose threads are exactly those tracking refs (None when not
  known). While the fingerprint is the same no tracking ref has moved (every move appends to
  their journal first), so a fetch reading a document with that digest has nothing to do,
  without parsing it (and an index sync's report names its packs from ``packs``).
- ``pulled``: the threads' and tracking refs' fingerprints when every thread was at its
  remote tip (a pull with both unchanged has nothing to do).
- ``pushed``: ``doc``, ``refs``, ``tracking``: the digest of a refs document every thread
  here was at, the threads' fingerprint taken before they were read, and the tracking
  snapshot's fingerprint (a push of every thread with all three unchanged has nothing to do).

``tracking.json`` (the snapshot's body: one entry per thread, read only when the refs
document changed): ``{"fp": [...], "refs": {thread: tip}}``; used only when its ``fp`` is the
header's. (Before this file, the body sat in state.json's ``tracking``: such a state is
still read.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import msgspec

from .. import fsio


def _fp(x) -> list[int] | None:
    return [int(v) for v in x] if isinstance(x, list) else None


class RemoteState:
    """``state.json`` and ``tracking.json`` of one remote, loaded on first use."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path, self.tracking_path = folder / "state.json", folder / "tracking.json"
        self._st: dict | None = None
        self._refs: dict[str, str] | None = None  # the snapshot's body, once read (or just recorded)
        self._refs_fp: list[int] | None = None
        self.dirty = False
        self._refs_dirty = False

    def get(self) -> dict:
        """The state (a blank one when the file is missing or does not parse)."""
        if self._st is None:
            try:
                st = msgspec.json.decode(self.path.read_bytes())
                snap = st.get("tracking")
                header = None
                if isinstance(snap, dict) and _fp(snap.get("fp")) is not None:
                    header = {"fp": _fp(snap["fp"]), "doc": str(snap["doc"]) if snap.get("doc") else None,
                              "generation": int(snap.get("generation") or 0),
                              "tag": str(snap["tag"]) if snap.get("doc") and snap.get("tag") else None,
                              "packs": [str(p) for p in snap["packs"]] if snap.get("doc") and isinstance(snap.get("packs"), list)
                              else None}
                    if isinstance(snap.get("refs"), dict):  # (the older layout: the body inline)
                        self._refs = {str(k): str(v) for k, v in snap["refs"].items()}
                        self._refs_fp = header["fp"]
                pushed = st.get("pushed")
                if isinstance(pushed, dict):
                    pushed = {"doc": str(pushed["doc"]), "refs": _fp(pushed["refs"]), "tracking": _fp(pushed["tracking"]),
                              "generation": int(pushed.get("generation") or 0),
                              "tag": str(pushed["tag"]) if pushed.get("tag") else None}
                else:
                    pushed = None
                st = {"sizes": {str(k): int(v) for k, v in dict(st.get("sizes", {})).items()},
                      "settled": {str(n) for n in st.get("settled", [])}, "tracking": header,
                      "checked": str(st["checked"]) if st.get("checked") else None,
                      "pulled": [[int(x) for x in fp] for fp in st["pulled"]] if st.get("pulled") else None,
                      "pushed": pushed}
            except (OSError, ValueError, TypeError, AttributeError, KeyError, msgspec.DecodeError):
                st = {"sizes": {}, "settled": set(), "tracking": None, "checked": None, "pulled": None, "pushed": None}
            self._st = st
        return self._st

    def set(self, key: str, value) -> None:
        """Set ``key`` of the state (written by ``save``)."""
        st = self.get()
        if st.get(key) != value:
            st[key] = value
            self.dirty = True

    # -- the tracking refs' snapshot --------------------------------------------------------

    def tracking_header(self, fp: list[int]) -> dict | None:
        """The snapshot's header when its fingerprint is ``fp`` (the tracking refs now), else None."""
        head = self.get()["tracking"]
        return head if head is not None and head["fp"] == fp else None

    def tracking_refs(self, fp: list[int]) -> dict[str, str] | None:
        """The snapshot's body when it was taken at fingerprint ``fp``, else None."""
        if self.tracking_header(fp) is None:
            return None
        if self._refs is None or self._refs_fp != fp:
            try:
                body = msgspec.json.decode(self.tracking_path.read_bytes())
                if _fp(body.get("fp")) != fp:
                    return None
                self._refs = {str(k): str(v) for k, v in dict(body["refs"]).items()}
                self._refs_fp = fp
            except (OSError, ValueError, TypeError, AttributeError, KeyError, msgspec.DecodeError):
                return None
        return dict(self._refs)

    def record_tracking(self, fp: list[int], refs: dict[str, str], doc: str | None, generation: int,
                        tag: str | None = None, packs: list[str] | None = None) -> None:
        """A new snapshot: ``refs`` read at fingerprint ``fp``; ``doc``: the digest of a refs
        document whose threads are exactly ``refs`` (None: not known), ``tag`` its tag,
        ``packs`` the packs it names."""
        st = self.get()
        st["tracking"] = {"fp": fp, "doc": doc, "generation": generation, "tag": tag if doc else None,
                          "packs": list(packs) if doc and packs is not None else None}
        if self._refs != refs or self._refs_fp != fp:
            self._refs, self._refs_fp, self._refs_dirty = dict(refs), fp, True
        self.dirty = True

    def key_tracking(self, fp: list[int], doc: str | None, generation: int, tag: str | None = None,
                     packs: list[str] | None = None) -> None:
        """Note that the snapshot at ``fp`` is exactly the threads of document ``doc`` (tag
        ``tag``, naming packs ``packs``)."""
        head = self.tracking_header(fp)
        packs = list(packs) if doc and packs is not None else None
        if head is not None and (head["doc"], head["generation"], head.get("tag"), head.get("packs")) != (doc, generation, tag, packs):
            head["doc"], head["generation"], head["tag"], head["packs"] = doc, generation, tag, packs
            self.dirty = True

    def known_packs(self, fp: list[int], doc: str | None) -> list[str] | None:
        """The packs named by the refs document with digest ``doc``, when the snapshot at
        ``fp`` was keyed by it and noted them (a no-op index sync's report, without parsing it)."""
        head = self.tracking_header(fp)
        return list(head["packs"]) if head is not None and doc and head["doc"] == doc and head.get("packs") is not None else None

    def save(self, keep: set[str] | None = None) -> None:
        """Write what changed (pack names not in ``keep``, when given, are dropped)."""
        if not self.dirty and not self._refs_dirty:
            return
        fsio.makedirs(self.folder)
        if self._refs_dirty:  # (the body first: a header never names a body that is not there yet)
            data = msgspec.json.encode({"fp": self._refs_fp, "refs": dict(sorted(self._refs.items()))})
            fsio.replace_file(self.tracking_path, data, fsync=False)
            self._refs_dirty = False
        st = self.get()
        data = {"format": 2, "sizes": {k: v for k, v in sorted(st["sizes"].items()) if keep is None or k in keep},
                "settled": sorted(n for n in st["settled"] if keep is None or n in keep)}
        for k in ("tracking", "checked", "pulled", "pushed"):
            if st.get(k):
                data[k] = st[k]
        fsio.replace_file(self.path, msgspec.json.encode(data), fsync=False)
        self.dirty = False


class UnchangedRows(Sequence):
    """A report's per-thread rows when no thread moved: built only when read (a no-op sync of
    100,000 threads makes no row unless its report is looked at, e.g. printed as JSON).
    ``load()``: thread → tip; each row is ``{"thread", "action", "old", "new"}`` (plus ``as``
    when ``with_as``), ``old`` and ``new`` the tip."""

    def __init__(self, load: Callable[[], dict[str, str]], action: str, *, with_as: bool = False) -> None:
        self._load, self.action, self._with_as = load, action, with_as
        self._rows: list[dict] | None = None

    def _all(self) -> list[dict]:
        if self._rows is None:
            if self._with_as:
                self._rows = [{"thread": n, "old": t, "new": t, "as": n, "action": self.action}
                              for n, t in sorted(self._load().items())]
            else:
                self._rows = [{"thread": n, "action": self.action, "old": t, "new": t} for n, t in sorted(self._load().items())]
        return self._rows

    def __getitem__(self, i):
        return self._all()[i]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[dict]:
        return iter(self._all())

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, Sequence)) else NotImplemented

    def __repr__(self) -> str:
        return f"UnchangedRows({self.action!r}, {'read' if self._rows is not None else 'not read'})"
