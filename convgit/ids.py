"""Object ids and ref names: validated before any path is built from them."""

from __future__ import annotations

import re

from .errors import InvalidRefName

OID_LEN = 64
SHORT_LEN = 12
MIN_PREFIX = 4
ZERO_OID = "0" * OID_LEN
ANY = object()  # a compare-and-swap's expected tip that checks nothing (refs.ANY: "do not check the old value")

_OID_RE = re.compile(r"[0-9a-f]{64}\Z")
_PREFIX_RE = re.compile(r"[0-9a-f]{4,64}\Z")
MAX_REF_BYTES = 255
# One path component of a thread name becomes a file name, and so does that name plus a
# suffix (``<name>.lock``, the temp file ``tmp_<name>.<pid>.<ns>``, an archived reflog
# ``<name>.<ms>``): keep it well inside NAME_MAX (255 bytes).
MAX_COMPONENT_BYTES = 200
# Files whose name starts with this are temp files (fsio.TMP_PREFIX): skipped when refs are
# listed and removed by gc, so no thread name component may start with it.
RESERVED_PREFIX = "tmp_"


def is_oid(s: object) -> bool:
    """True for a full object id: 64 lowercase hex digits."""
    return isinstance(s, str) and _OID_RE.match(s) is not None


def is_oid_prefix(s: str) -> bool:
    """True for something that can abbreviate an id (4 to 64 lowercase hex digits)."""
    return _PREFIX_RE.match(s) is not None


def short(oid: str | None) -> str:
    """The short form of an id shown to people (empty for None)."""
    return oid[:SHORT_LEN] if oid else ""


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")  # (one scan in C: names are checked by the 100,000 in a packed-refs)
_VALID: set[str] = set()  # names already checked (ref paths are built from names often)


def check_thread_name(name: object) -> str:
    """Return ``name`` if it is a valid thread name, else raise InvalidRefName.

    The rules are git's ``check-ref-format`` rules, plus a byte limit so that a name always
    fits in a file name, and a ban on names that would collide with convgit's own syntax
    (``~`` revisions, ``@{`` reflog selectors). A thread name that is also a hex prefix is
    allowed; as in git, the thread wins when a revision is resolved.
    """
    if isinstance(name, str) and name in _VALID:
        return name
    if not isinstance(name, str):
        raise InvalidRefName("thread name must be a string")
    why = _why_bad(name)
    if why:
        raise InvalidRefName(f"invalid thread name {name!r}: {why}", name=name)
    if len(_VALID) < 100_000:
        _VALID.add(name)
    return name


def _why_bad(name: str) -> str | None:
    if not name:
        return "empty"
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8"
    if len(raw) > MAX_REF_BYTES:
        return f"longer than {MAX_REF_BYTES} bytes"
    if _CONTROL_RE.search(name):
        return "contains a control character"
    for ch in " ~^:?*[\\":
        if ch in name:
            return f"contains {ch!r}"
    if "@{" in name:
        return "contains '@{'"
    if name == "@":
        return "is '@'"
    if name == "HEAD":
        return "'HEAD' is reserved"
    if ".." in name:
        return "contains '..'"
    if name.startswith("/") or name.endswith("/"):
        return "starts or ends with '/'"
    if "//" in name:
        return "contains '//'"
    if name.startswith("-"):
        return "starts with '-'"
    if name.endswith("."):
        return "ends with '.'"
    for comp in name.split("/"):
        if comp.startswith("."):
            return "a component starts with '.'"
        if comp.startswith(RESERVED_PREFIX):
            return f"a component starts with {RESERVED_PREFIX!r} (reserved for temporary files)"
        if len(comp.encode("utf-8")) > MAX_COMPONENT_BYTES:
            return f"a component is longer than {MAX_COMPONENT_BYTES} bytes"
        if comp.endswith(".lock"):
            return "a component ends with '.lock'"
    return None
