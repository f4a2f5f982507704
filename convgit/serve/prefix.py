"""The prefix cache: a re-sent history is parsed and hashed once, not once per call.

A stateless client sends the whole conversation with every call: call k+1 re-sends call k's
messages and answer, plus one new message. Parsing each message (``message_draft``) and
hashing it into the chain (``build_chain``) is O(history) per call in Python; this cache
makes it O(new messages) plus an exact comparison of the prefix in C.

Two levels, both keyed by the exact bytes of each message (msgpack of the decoded value:
``1``, ``1.0``, ``true`` and NaN all encode differently, so equal keys mean equal values):

- chat requests (OpenAI Chat Completions): the request's message objects → their Drafts;
  a hit parses only the messages after the cached prefix;
- every API: the Drafts → the hashed chain (ids, bytes, messages, blobs); a hit hashes only
  the messages after the prefix, below the prefix's last id.

A lookup tries the prefix lengths a stateless call can have (the whole list, then down to
``_REACH`` fewer messages) by one dict probe each on (length, last message's key), then
checks the candidate's keys one by one (C-speed bytes comparisons): a false match is
impossible, a miss only costs the full path. Entries never say anything about the store
(content addresses are pure): whether a cached prefix is *stored* is the committer's
business (``Recorder``'s stored tips, checked again inside the transaction).

Shared by the proxy's builds (event loop) and a committer thread's (a committer process keeps its own): a lock around
the tables; entries are never changed once made. Bounded: least recently used entries go
once their weight (bytes of keys and encoded messages) passes ``max_bytes``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Sequence

import msgspec

from ..ingest import Chain, Draft, build_chain

_REACH = 16  # prefix lengths tried below the message count: a call adds a few messages, a tool loop more
DEFAULT_MAX_BYTES = 32 * 1024 * 1024  # keys + encoded messages counted (the objects behind them: about 3x in memory at worst)

_enc = msgspec.msgpack.Encoder()


def message_key(value: Any) -> bytes | None:
    """The exact bytes of one decoded message (a JSON value or a Draft), or None when it
    cannot be encoded (that message is never cached)."""
    try:
        return _enc.encode(value)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return None


def message_keys(values: Sequence[Any]) -> list[bytes | None]:
    """``message_key`` of each value."""
    try:
        return [_enc.encode(v) for v in values]
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return [message_key(v) for v in values]


def _weight(keys: list[bytes | None], chain: Chain) -> int:
    return sum(map(len, filter(None, keys))) + sum(map(len, chain.data))


class _Entry:
    __slots__ = ("keys", "values", "weight")

    def __init__(self, keys: list[bytes], values: tuple, weight: int) -> None:
        self.keys = keys
        self.values = values  # per level: (drafts,) or (ids, data, messages, blobs)
        self.weight = weight


class PrefixCache:
    """Cached prefixes of conversations (see the module docstring). ``hits``/``misses``
    count lookups (one per level and call)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._index: dict[tuple, _Entry] = {}  # (level, length, last key) -> entry
        self._lru: OrderedDict[int, tuple[_Entry, list[tuple]]] = OrderedDict()  # id(entry) -> (entry, its index keys)
        self._weight = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._lru)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._index.clear()
            self._lru.clear()
            self._weight = 0

    # -- the tables ---------------------------------------------------------------------------

    def _find(self, level: str, keys: Sequence[bytes | None]) -> tuple[_Entry, int] | None:
        """The cached entry sharing the longest prefix with ``keys`` (among the lengths tried)
        and that length, or None."""
        n = len(keys)
        with self._lock:
            for k in range(n, max(0, n - _REACH), -1):
                last = keys[k - 1]
                if last is None:
                    continue
                e = self._index.get((level, k, last))
                if e is None or len(e.keys) < k:
                    continue
                if e.keys[:k - 1] == keys[:k - 1]:  # (bytes compared in C; the last one matched already)
                    self._lru.move_to_end(id(e))
                    self.hits += 1
                    return e, k
            self.misses += 1
        return None

    def _add(self, level: str, keys: list[bytes | None], values: tuple, ends: Sequence[int], weight: int) -> None:
        """Keep ``values`` for the prefix ``keys``, found by lookups of the lengths ``ends``."""
        if None in keys or weight > self.max_bytes:
            return  # (a message that cannot be keyed: never cached)
        e = _Entry(keys, values, weight)  # type: ignore[arg-type]
        idx = [(level, k, keys[k - 1]) for k in sorted(set(ends)) if 0 < k <= len(keys)]
        if not idx:
            return
        with self._lock:
            for key in idx:
                self._index[key] = e
            self._lru[id(e)] = (e, idx)
            self._weight += weight
            while self._weight > self.max_bytes and self._lru:
                _, (old, old_idx) = self._lru.popitem(last=False)
                self._weight -= old.weight
                for key in old_idx:
                    if self._index.get(key) is old:
                        del self._index[key]

    # -- chat requests: message objects -> drafts and chain ----------------------------------

    def chat_prefix(self, messages: list) -> "ChatPrefix":
        """The request messages' keys, and what their longest cached prefix parsed and hashed
        to (``n`` messages; 0 on a miss)."""
        keys = message_keys(messages)
        hit = self._find("chat", keys)
        if hit is None:
            return ChatPrefix(keys, 0, ())
        e, n = hit
        return ChatPrefix(keys, n, e.values)

    def add_chat(self, keys: list[bytes | None], drafts: Sequence[Draft], chain: Chain, ends: Sequence[int]) -> None:
        """Remember that the message objects of ``keys`` parse to ``drafts`` and hash to
        ``chain`` (one each, in order)."""
        if not (len(keys) == len(drafts) == len(chain.ids)):
            return
        weight = _weight(keys, chain)
        self._add("chat", keys, (tuple(drafts), *_parts(chain)), ends, weight)

    # -- every API: drafts -> chain ------------------------------------------------------------

    def build_chain(self, drafts: Sequence[Draft], config, *, known: "ChatPrefix | None" = None,
                    ends: Sequence[int] = ()) -> Chain:
        """``ingest.build_chain(drafts, None, config)``, the longest cached prefix taken as
        hashed, the rest hashed below it. ``known``: a chat prefix found for these drafts'
        first messages (its chain is theirs); otherwise the drafts are looked up themselves
        and the result is cached (found again by the lengths ``ends``, and the whole length).
        Raises as build_chain does: on any error the whole chain is built again without the
        cache, so errors name the same message."""
        keys: list[bytes | None] | None = None
        level = f"chain:{getattr(config, 'max_message_bytes', None)}"
        if known is not None and known.n:
            n, parts = known.n, known.values[1:]
        else:
            keys = message_keys(drafts)
            hit = self._find(level, keys)
            n, parts = (hit[1], hit[0].values) if hit is not None else (0, ())
        chain = None
        if n:
            ids, data, messages, blobs = parts
            try:
                rest = build_chain(drafts[n:], ids[n - 1], config)
            except Exception:  # noqa: BLE001  (the full path raises the same error, with its index)
                rest = None
            if rest is not None:
                # (a message's blob list is shared between chains: nothing changes one once made)
                chain = Chain(ids=list(ids[:n]) + rest.ids, data=list(data[:n]) + rest.data,
                              messages=list(messages[:n]) + rest.messages, blobs=list(blobs[:n]) + rest.blobs)
        if chain is None:
            chain = build_chain(drafts, None, config)
        if keys is not None:
            weight = _weight(keys, chain)
            self._add(level, keys, _parts(chain), (*ends, len(keys)), weight)
        return chain


class ChatPrefix:
    """What ``PrefixCache.chat_prefix`` found: the messages' keys, how many lead the cached
    entry (``n``), and its (drafts, ids, data, messages, blobs)."""

    __slots__ = ("keys", "n", "values")

    def __init__(self, keys: list[bytes | None], n: int, values: tuple) -> None:
        self.keys, self.n, self.values = keys, n, values

    @property
    def drafts(self) -> tuple[Draft, ...]:
        """The Drafts of the cached prefix."""
        return self.values[0][:self.n] if self.n else ()


def _parts(chain: Chain) -> tuple:
    return tuple(chain.ids), tuple(chain.data), tuple(chain.messages), tuple(chain.blobs)
