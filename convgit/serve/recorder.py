"""The committer: spooled calls → the store, in batches, through the public commit API.

One thread owns the repository (its SQLite index is used from that thread only). It takes
every call the spool has made durable, builds each one's payload (``record.build``), and
commits the batch with its raw bodies in one repository transaction
(``convgit.commit.commit_many``: named threads trusted with ``on_conflict="fork"``, a
conflicting history kept as a fork, never refused). A store that fails (full, read-only,
locked) is retried with a backoff; the calls wait in memory and in the spool, never lost. A
call whose request is no conversation convgit can store is kept in ``spool/rejected.calls``
and reported.

``embed.on_commit``: after a batch's commit point (and after the spool is told), the same
thread embeds what the batch added, as ``convgit.api.commit_many`` does
(``semantic.embed_written``): the answers were relayed long before, so no client waits for
it. A failing or missing provider leaves the chunks failed or pending with a warning in the
server's log, never touches the write, and is not asked again for a while (a backoff).

Responses chains: a call with ``previous_response_id`` continues the chain that response
ended; the chain's messages come from memory for calls this process saw, else from the
store (the ``serve:openai-responses`` alias of the response id, recorded with its turn).
"""

from __future__ import annotations

import re
import threading
import time
import traceback
from collections import OrderedDict
from pathlib import Path
from typing import Callable, NamedTuple

from .. import api, codec, fsio, graph
from ..config import crash_point
from ..commit import commit_many, commit_payload
from ..errors import AmbiguousThread, ConvgitError, Locked, RefExists, RefStale, StorageFailed
from ..gc import GC_LOG
from ..ingest import Draft
from ..objects import Blob
from ..refformat import parse_reflog_line
from . import record as rec_mod
from . import spool as spool_mod
from .prefix import PrefixCache
from .record import CallRecord

# A store that cannot be written now (full, read-only, locked, racing writers): retried later.
RETRY = (StorageFailed, Locked, RefStale, OSError)
_HISTORY_CACHE = 4096
_RECOVERED = "recovered"  # commit_batch: a call found in the store already (not a problem)
_STORED_TIPS = 65536  # tips remembered as stored (the hole check's hint)
_HINT_REACH = 16
_MAX_BATCH = 512
# A batch smaller than this waits up to GATHER_SECONDS for more calls before it is committed:
# the clients were answered already (the spool holds their calls), and in one process with
# the proxy every batch's fixed cost (a transaction, its syncs, the index) is CPU the relay
# does not get; a committer that keeps up with small batches makes the proxy answer slower.
GATHER_CALLS = 128
GATHER_SECONDS = 0.1
_EMBED_BACKOFF = (5.0, 300.0)  # seconds a failing provider is left alone: first, at most (doubling)
_WARN_EVERY = 60.0  # the same kind of embedding warning at most this often in the server's log
GC_CHECK_SECONDS = 30.0  # the committer looks at most this often whether gc --auto would act
LOOSE_CHECK_SECONDS = 5.0  # ... and, when idle, at most this often whether loose objects should be packed
HEAD_EVERY_SECONDS = 1.0  # HEAD follows the last call at most this often (and this long after it at most)


class _Found(NamedTuple):
    """Where a call found recorded before is (its summary's ``thread`` and ``tip``)."""

    thread: str | None
    tip: str
    new_messages: None = None


class Recorder:
    """Builds and commits batches of records into ``repo`` (no threads here: ``Committer``
    runs it). ``on_call(summary)`` is told about each call once it is recorded or refused."""

    def __init__(self, repo, *, on_call: Callable[[dict], None] | None = None,
                 prebuilt: "Prebuilt | None" = None, cache: PrefixCache | None = None,
                 follow_head: bool = True) -> None:
        self.repo = repo
        # HEAD follows the thread of the last call in each batch's transaction (True), or is
        # left to the caller (False: the Committer moves it, at most once a second: ``last_thread``).
        self.follow_head = follow_head
        self.last_thread: str | None = None  # the thread of the last call committed
        self.prebuilt = prebuilt if prebuilt is not None else Prebuilt()  # calls built by the proxy
        self.cache = cache if cache is not None else PrefixCache()  # prefixes parsed and hashed (prefix.py)
        self.on_call = on_call or (lambda doc: None)
        self._history: OrderedDict[str, tuple[Draft, ...]] = OrderedDict()
        self.recorded = 0
        self.rejected = 0
        self.embedded = 0  # chunks embedded after commits (embed.on_commit)
        self.unembedded = False  # a batch wrote messages the on_commit embedding has not seen
        self._embed_after = 0.0  # monotonic time before which a failing provider is not asked again
        self._embed_backoff = 0.0
        self._embed_retry = False  # the last try failed (or could take nothing): tried again when idle
        # Tips of chains this recorder committed (so their whole history is stored): a later
        # call re-sending one skips the hole check below it (Chain.known_stored, checked by
        # one probe in the transaction). Forgotten whenever a gc may have pruned (its
        # journal rotation, or this committer's own gc --auto).
        self._stored: OrderedDict[str, None] = OrderedDict()
        self._store_gen: tuple | None = None

    # -- Responses chains ---------------------------------------------------------------------

    def history_for(self, response_id: str) -> tuple[Draft, ...] | None:
        """The messages of the chain a Responses call ended with ``response_id``, or None."""
        h = self._history.get(response_id)
        if h is not None:
            self._history.move_to_end(response_id)
            return h
        source = rec_mod.SOURCES[rec_mod.sse.OPENAI_RESPONSES]
        found = self.repo.index.find_alias(source, response_id)
        exact = sorted(m for _, m in self.repo.index.known_aliases(source, [(response_id, f) for f in found]))
        if not exact:
            return None
        msgs = [m for _, m in graph.iter_ancestry(self.repo.objects, exact[0])][::-1]
        return tuple(Draft(role=m.role, parts=m.parts, meta=m.meta) for m in msgs)

    def _remember(self, response_id: str | None, history: tuple[Draft, ...]) -> None:
        if not response_id:
            return
        self._history[response_id] = history
        self._history.move_to_end(response_id)
        while len(self._history) > _HISTORY_CACHE:
            self._history.popitem(last=False)

    def _thread_of(self, tip: str) -> str | None:
        """A thread holding ``tip`` (a call found recorded before: where its line says it is)."""
        names = self.repo.index.threads_containing(tip, limit=1)
        return names[0] if names else None

    def recorded_already(self, r: CallRecord, tip: str) -> bool:
        """Whether a call was committed before (a spool left by a server that died after
        committing, before noting it): its ``call:<id>`` alias in the index, else a turn
        naming it in the reflog of a thread holding its tip (the index can be behind on
        turns after a crash, never on tips: the reflogs are the truth)."""
        if self.repo.index.find_alias(rec_mod.SOURCES[r.api], f"call:{r.id}"):
            return True
        for name in self.repo.index.threads_containing(tip, limit=8):
            for tid in reversed(real_turns(self.repo, name)):
                t = graph.find_turn(self.repo.objects, tid)
                if t is not None and (t.meta or {}).get("call") == r.id:
                    return True
        return False


    # -- committing -------------------------------------------------------------------------

    def commit_batch(self, records: list[CallRecord], *, check_recorded: bool = False) -> list[dict]:
        """Commit ``records`` (in order). Returns one summary per record. Raises StorageFailed
        (or OSError) when the store cannot be written: nothing is lost, call again later."""
        if check_recorded:
            self.repo.index.refresh_if_changed()
        built: list[tuple[CallRecord, rec_mod.Built | None, str | None]] = []
        blobs: list[tuple[str, bytes]] = []
        for r in records:
            raw = None
            if r.store_raw:
                raw = {}
                for key, data in (("raw_request", r.request), ("raw_response", self._body(r))):
                    if data:
                        oid, enc = codec.encode_and_hash(Blob(data=data))
                        blobs.append((oid, enc))
                        raw[key] = oid
            try:
                b = self.prebuilt.take(r.id)
                b = rec_mod.with_raw(b, raw) if b is not None else \
                    rec_mod.build(r, history_for=self.history_for, config=self.repo.config, raw=raw, cache=self.cache)
            except ConvgitError as e:
                built.append((r, None, f"{e.code}: {e.message}"))
                continue
            except Exception as e:  # a parser's bug on an odd payload: the call is kept, not lost
                built.append((r, None, f"internal error: {type(e).__name__}: {e}"))
                continue
            if r.api == rec_mod.sse.OPENAI_RESPONSES:  # only a Responses call is continued by its id
                self._remember(b.response_id, b.history)
            if check_recorded and self.recorded_already(r, b.tip):
                built.append((r, b, _RECOVERED))
                continue
            built.append((r, b, None))
        summaries: list[dict] = []
        ok = [(r, b) for r, b, problem in built if b is not None and problem is None]
        self._hint([b for _, b in ok])
        results = self._commit_all([b for _, b in ok], blobs) if ok else []
        self._learn([b for _, b in ok], results)
        for res in reversed(results):
            if getattr(res, "thread", None):
                self.last_thread = res.thread
                break
        if any(getattr(res, "new_messages", 0) for res in results) or any(pr is _RECOVERED for _, _, pr in built):
            self.unembedded = True  # (a recovered call: the committer that wrote it may have died before embedding)
        res_of = {id(b): res for (_, b), res in zip(ok, results)}
        for r, b, problem in built:
            if problem is _RECOVERED:  # (committed before: its line again, marked, for a log that lost it)
                summaries.append(rec_mod.summary(r, b, _Found(self._thread_of(b.tip), b.tip), recovered=True))
            elif b is None:
                self._reject(r, problem or "")
                summaries.append(rec_mod.summary(r, None, problem=problem))
            else:
                summaries.append(self._done(r, b, res_of[id(b)]))
        return summaries

    # -- what this recorder stored (the hole check's hint) ------------------------------------

    def forget_stored(self) -> None:
        """Drop every stored-tip hint (a gc ran: the next calls take the full hole check)."""
        self._stored.clear()

    def _hint(self, built: list[rec_mod.Built]) -> None:
        """Set each chain's ``known_stored``: its longest prefix ending at a tip this recorder
        committed (looked for among the last _HINT_REACH lengths: a call adds a few messages)."""
        gen = _store_generation(self.repo)
        if gen != self._store_gen:  # gc rotated the journal (or first batch): it may have pruned
            self._stored.clear()
            self._store_gen = gen
        if not self._stored:
            return
        if _gc_running(self.repo):  # (the gc --auto this committer started, say): no hint until
            self._stored.clear()   # it is done, since it may prune what a hint takes as stored
            return
        for b in built:
            c = b.chain
            if c is None:
                continue
            ids = c.ids
            for k in range(len(ids), max(0, len(ids) - _HINT_REACH), -1):
                if ids[k - 1] in self._stored:
                    c.known_stored = k
                    break

    def _learn(self, built: list[rec_mod.Built], results: list) -> None:
        """Remember the tips of the chains just committed (every message of each is stored)."""
        for b, res in zip(built, results):
            if b.chain is not None and b.chain.ids and not isinstance(res, Exception):
                self._stored[b.chain.ids[-1]] = None
                self._stored.move_to_end(b.chain.ids[-1])
        while len(self._stored) > _STORED_TIPS:
            self._stored.popitem(last=False)

    def _body(self, r: CallRecord) -> bytes:
        try:
            return rec_mod.decode_body(r.response, r.content_encoding)
        except Exception:
            return r.response

    def _commit_one(self, b: rec_mod.Built):
        """One call alone (the batch could not take it), through the core commit: embedding
        follows the batch (``embed_written``), as for the calls committed together."""
        payload = api.to_payload(self.repo, b.payload)
        if b.thread is None:
            return commit_payload(self.repo, payload, move_head=self.follow_head)
        try:
            return commit_payload(self.repo, payload, thread=b.thread, on_conflict="fork", move_head=self.follow_head)
        except (AmbiguousThread, RefExists):
            # The same messages in another order, or a name this store cannot take (``a`` beside
            # threads ``a/…``): never refused, the call is kept on a thread of its own.
            return commit_payload(self.repo, payload, move_head=self.follow_head)
        except RETRY:
            raise
        except ConvgitError as e:
            return e

    def _commit_all(self, built: list[rec_mod.Built], blobs: list[tuple[str, bytes]]) -> list:
        """Every call of a batch in one repository transaction (``convgit.commit.commit_many``: one
        write of the objects, each thread moved once, its chain hashed once, by ``build``).
        A call the batch cannot take (a named thread holding these messages in another order,
        a name in the way) makes each call commit alone, so the others are kept."""
        try:
            return commit_many(self.repo, [b.payload for b in built], move_head=self.follow_head,
                                          threads=[b.thread for b in built], on_conflict="fork",
                                          chains=[b.chain for b in built], blobs=blobs)
        except RETRY:
            raise
        except ConvgitError:
            with self.repo.write_lock():  # (the raw bodies the turns name)
                self.repo.objects.write_many(blobs)
            out = []
            for b in built:
                try:
                    out.append(self._commit_one(b))
                except RETRY:
                    raise
                except ConvgitError as e:
                    out.append(e)
            return out

    def embed_written(self) -> tuple[int, list[str]]:
        """``embed.on_commit``: embed what the batches committed since the last call added,
        after their commit point, as ``convgit.api.commit_many`` does (``semantic.embed_written``:
        at most ``EMBED_ON_WRITE`` chunks; more stay pending and are taken by the next call).
        Never raises for the provider: returns (chunks embedded, warnings). A provider that
        failed (or could not be loaded) is left alone for a backoff (5 s doubling to 5 min):
        the chunks wait, pending or failed, for the next try or ``convgit embed``."""
        if not self.unembedded or not self.repo.config.embed_on_commit:
            return 0, []
        now = time.monotonic()
        if now < self._embed_after:
            return 0, []
        from .. import semantic

        warnings: list[str] = []
        try:  # (a locked index or vectors file, a provider down: None or ``failed``, never raised)
            res = semantic.embed_written(self.repo, warnings=warnings)
        except Exception as e:  # noqa: BLE001  (a bug in a provider: the write stands, say so)
            res = None
            warnings.append(f"embedding skipped: {type(e).__name__}: {e}; the chunks stay pending")
        if res is None or res.failed or (res.pending and not res.embedded):  # (the last: no progress)
            self._embed_backoff = min(max(self._embed_backoff * 2, _EMBED_BACKOFF[0]), _EMBED_BACKOFF[1])
            self._embed_after = now + self._embed_backoff
            self._embed_retry = True
        else:
            # More pending than one try takes (a burst, or chunks of an import nobody embedded):
            # the next batch goes on; an idle server does not chase the store's backlog.
            self._embed_backoff = 0.0
            self._embed_retry = False
            self.unembedded = bool(res.pending)
        n = res.embedded if res is not None else 0
        self.embedded += n
        return n, warnings

    def embed_due(self) -> float | None:
        """When an idle committer should try ``embed_written`` again (monotonic time: the end
        of the provider's backoff), or None: the last try did not fail, nothing committed is
        left unembedded, or ``embed.on_commit`` is off. So what a failed try left (a provider
        that was down, a locked index) is taken without waiting for a call."""
        if not self._embed_retry or not self.unembedded or not self.repo.config.embed_on_commit:
            return None
        return self._embed_after

    def _done(self, r: CallRecord, b: rec_mod.Built, res) -> dict:
        if isinstance(res, ConvgitError):
            problem = f"{res.code}: {res.message}"
            self._reject(r, problem)
            return rec_mod.summary(r, b, problem=problem)
        self.recorded += 1
        doc = rec_mod.summary(r, b, res)
        return doc

    def _reject(self, r: CallRecord, problem: str) -> None:
        """Keep a call that cannot be committed in ``spool/rejected.calls`` (nothing lost)."""
        self.rejected += 1
        try:
            d = self.repo.path / spool_mod.SPOOL_DIR
            fsio.makedirs(d)
            with open(d / "rejected.calls", "ab") as f:
                f.write(spool_mod.frame(rec_mod.encode_record(r)))
        except OSError:
            pass


_PENDING, _CLAIMED = object(), object()


class Prebuilt:
    """The proxy's builds of calls, handed to the committer (thread-safe). The proxy builds a
    call while the spool makes it durable, so the committer may reach the call first: it then
    builds it itself (the same build: ids are content addresses) and the late offer is
    dropped. Every ``expect`` is followed by one ``offer``, so nothing is left behind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, object] = {}

    def expect(self, call_id: str) -> None:
        """An offer for ``call_id`` will come."""
        with self._lock:
            self._calls[call_id] = _PENDING

    def offer(self, call_id: str, built) -> None:
        """The build of ``call_id`` (None: none), kept unless the committer went ahead."""
        with self._lock:
            state = self._calls.get(call_id)
            if state is _PENDING and built is not None:
                self._calls[call_id] = built
            else:
                self._calls.pop(call_id, None)

    def take(self, call_id: str):
        """The build of ``call_id``, or None (the committer builds it; a late offer is dropped)."""
        with self._lock:
            state = self._calls.get(call_id)
            if state is _PENDING:
                self._calls[call_id] = _CLAIMED
                return None
            if state is None or state is _CLAIMED:
                return None
            del self._calls[call_id]
            return state


class Committer:
    """The committer thread: drains leftover spool segments first, then commits what the
    spool writer hands it, batch by batch; retries a failing store with a backoff."""

    def __init__(self, repo_path: Path, *, open_repo: Callable, on_call: Callable[[dict], None],
                 warn: Callable[[str], None]) -> None:
        self.repo_path = repo_path
        self.open_repo = open_repo
        self.on_call = on_call
        self.warn = warn
        self.writer = None  # the SpoolWriter, told what is committed
        self._cond = threading.Condition()
        self._queue: list[tuple[object, CallRecord, bool]] = []
        self.prebuilt = Prebuilt()  # calls built by the proxy (X-Convgit-Tip)
        self.prefix = PrefixCache()  # prefixes parsed and hashed, by the proxy's builds and the committer's
        self._stop = False
        self._warned: dict[str, float] = {}  # kind of embedding warning -> when last said
        self.idle = threading.Event()
        self.drained_leftovers = threading.Event()
        self.compactions = 0  # pack merges done (compact.py)
        self._thread = threading.Thread(target=self._run, name="convgit-commit", daemon=True)

    def expect(self, call_id: str) -> None:
        """The proxy will offer its build of this call (``offer``), maybe after the spool has
        handed the call over: see ``Prebuilt``."""
        self.prebuilt.expect(call_id)

    def offer(self, call_id: str, built) -> None:
        """The proxy's build of an expected call (None: it could not build it)."""
        self.prebuilt.offer(call_id, built)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def deliver(self, segment, record: CallRecord, check: bool = False, data: bytes | None = None) -> None:
        """A durable (or, when the spool failed, in-memory) record to commit. ``check``: it may
        be in the store already (a committer process that died handed it over again), so it is
        looked up first (``Recorder.recorded_already``). ``data``: its spool bytes (unused here)."""
        with self._cond:
            self._queue.append((segment, record, check))
            self.idle.clear()
            self._cond.notify()

    def close(self, timeout: float | None = None) -> None:
        """Commit what is queued (while the store allows it), then stop."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            repo = self.open_repo()
        except Exception as e:  # the calls stay in the spool for the next start
            self.warn(f"the store cannot be opened ({e}); calls are spooled, not committed")
            self.drained_leftovers.set()
            return
        # HEAD is moved by this thread at most once a HEAD_EVERY_SECONDS (``_follow_head``),
        # not in every batch's transaction: under load the last call's thread changes from
        # batch to batch, and each HEAD write is two syncs. Nothing durable depends on HEAD
        # (docs/format.md §2.3).
        recorder = Recorder(repo, on_call=self.on_call, prebuilt=self.prebuilt, cache=self.prefix,
                            follow_head=False)
        try:
            self._drain_leftovers(recorder)
            self._follow_head(repo, recorder)
            self.drained_leftovers.set()
            while True:
                with self._cond:
                    while not self._queue and not self._stop:
                        self.idle.set()
                        due = [self._head_at + HEAD_EVERY_SECONDS] if recorder.last_thread is not None else []
                        embed_at = recorder.embed_due()
                        if embed_at is not None:
                            due.append(embed_at)
                        if not due:
                            self._cond.wait()
                            continue
                        left = min(due) - time.monotonic()
                        if left <= 0:
                            break  # a HEAD move or an embedding is due
                        self._cond.wait(left)
                    end = time.monotonic() + GATHER_SECONDS
                    while self._queue and len(self._queue) < GATHER_CALLS and not self._stop:
                        left = end - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)  # (deliver notifies: more calls came)
                    batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
                    stop = self._stop
                if not batch:
                    if stop:
                        self._follow_head(repo, recorder)
                        return
                    if recorder.last_thread is not None and time.monotonic() - self._head_at >= HEAD_EVERY_SECONDS:
                        self._follow_head(repo, recorder)
                    embed_at = recorder.embed_due()
                    if embed_at is not None and embed_at <= time.monotonic():
                        self._embed(recorder)
                    continue
                if not self._commit(recorder, [r for _, r, _ in batch], stop=stop, check=any(c for _, _, c in batch),
                                    batch=batch):
                    with self._cond:  # the store refused and we are stopping: the spool keeps them
                        return
                crash_point("serve_after_commit")  # (committed, not yet noted: the next committer checks the store)
                by_seg: dict[int, tuple[object, list[str]]] = {}
                for seg, r, _ in batch:
                    if seg is not None:
                        by_seg.setdefault(id(seg), (seg, []))[1].append(r.id)
                if self.writer is not None:
                    for seg, ids in by_seg.values():
                        self.writer.committed(seg, ids)
                if not stop:  # (stopping: the chunks stay pending, the exit is not kept waiting)
                    self._embed(recorder)
                self._auto_gc(repo, recorder)  # (after the embedding: the batch's own work first)
                with self._cond:
                    idle = not self._queue and not self._stop
                if stop or time.monotonic() - self._head_at >= HEAD_EVERY_SECONDS:
                    self._follow_head(repo, recorder)
                if idle:
                    self._compact(repo)
        finally:
            self.drained_leftovers.set()
            self.idle.set()
            repo.close()

    def _embed(self, recorder: Recorder) -> None:
        """``embed.on_commit`` after a batch (Recorder.embed_written); its warnings go to the
        server's log, each kind at most once a minute (a provider down for an hour is one
        line a minute, not one a batch)."""
        try:
            _, warnings = recorder.embed_written()
        except RETRY as e:  # the index could not be read or written: the chunks stay pending
            warnings = [f"embedding skipped: {getattr(e, 'message', e)}; the chunks stay pending"]
        now = time.monotonic()
        for w in warnings:  # (the kind without its counts: "N chunk(s) left pending" is one kind)
            kind = re.sub(r"\d+", "#", w.split(":", 1)[0].split(" for ")[0])
            if now - self._warned.get(kind, -_WARN_EVERY) >= _WARN_EVERY:
                self._warned[kind] = now
                self.warn(w)

    def _commit(self, recorder: Recorder, records: list[CallRecord], *, stop: bool, check: bool = False,
                batch: list | None = None) -> bool:
        """Commit ``records`` (retrying while the store refuses), then write their lines.
        ``batch``: the queue's entries they came from; while the store refuses (a gc holds
        it, a full disk), the calls queued meanwhile join them (up to ``_MAX_BATCH``), added
        to ``batch`` too, so that the store, once free, takes them in one transaction."""
        delay = 0.05
        check_recorded = check
        bugs = 0
        refused = False  # the store refused the last try (not a bug: a bug's calls are not joined by others)
        while True:
            if refused and not bugs and batch is not None and len(batch) < _MAX_BATCH:
                with self._cond:
                    more, self._queue = self._queue[:_MAX_BATCH - len(batch)], self._queue[_MAX_BATCH - len(batch):]
                batch.extend(more)
                records.extend(r for _, r, _ in more)
            refused = False
            try:
                docs = recorder.commit_batch(records, check_recorded=check_recorded)
                crash_point("serve_before_lines")  # (committed, no line written: the next committer writes them)
                for doc in docs:
                    self.on_call(doc)
                return True
            except RETRY as e:
                refused = True
                self.warn(f"store not written ({getattr(e, 'message', e)}); {len(records)} call(s) wait in the spool")
            except Exception as e:  # a bug: say so; after a few tries keep the calls aside, go on
                bugs += 1
                self.warn(f"commit failed: {type(e).__name__}: {e}\n{traceback.format_exc()}")
                if bugs >= 3:
                    for r in records:
                        recorder._reject(r, f"internal error: {type(e).__name__}: {e}")
                    return True
            if stop:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            check_recorded = True  # part of the batch may be in the store already
            with self._cond:
                if self._stop:
                    stop = True

    _head_at = float("-inf")  # (monotonic) when _follow_head last ran
    _head_warned = False

    def _follow_head(self, repo, recorder: Recorder) -> None:
        """The HEAD rule for the calls committed since the last look: HEAD names the thread of
        the last one (if it still exists), as a commit moving HEAD would have left it; written
        only when it changes (the replace protocol, docs/format.md §2.3). A HEAD that cannot
        be read or written is a warning (once): the calls are in the store either way."""
        self._head_at = time.monotonic()
        thread, recorder.last_thread = recorder.last_thread, None
        if thread is None:
            return
        from ..transaction import move_head, thread_exists

        try:
            with repo.write_lock():  # (gc, which may delete the thread, waits)
                head = repo.refs.read_head()
                warning = move_head(repo, thread, head) if thread_exists(repo, thread) else None
        except RETRY as e:
            warning = f"HEAD not moved to {thread} ({getattr(e, 'message', e)})"
        except ConvgitError as e:  # an unreadable HEAD: left as it is (convgit switch writes it)
            warning = f"HEAD not moved to {thread}: {e.message}"
        if warning and not self._head_warned:
            self._head_warned = True
            self.warn(warning)

    _gc_checked = float("-inf")  # (monotonic) when _auto_gc last looked

    def _auto_gc(self, repo, recorder: Recorder | None = None) -> None:
        """Start ``gc --auto`` in the background, as a write of the command line does
        (``gc_auto.start_background_gc``: its own process, ``gc.lock`` handed over, its errors
        in ``gc-auto.log``), when ``[gc] auto`` is on and it would act: looked at after a batch
        at most every GC_CHECK_SECONDS, so a long-running proxy keeps its store packed. Not in
        this thread: merging a large store's packs takes seconds, and calls were not committed
        meanwhile (at 100,000 conversations, the first one held the committer for most of a
        2,000-call run). A gc running beside the committer is any gc run by hand: its new ref
        journal and its log make the recorder forget its stored tips (``Recorder._hint``)."""
        from ..gc_auto import start_background_gc

        now = time.monotonic()
        if not repo.config.gc_auto or now - self._gc_checked < GC_CHECK_SECONDS:
            return
        self._gc_checked = now
        try:
            if api.gc_due(repo):
                start_background_gc(repo, check=False)
        except (ConvgitError, OSError) as e:
            self.warn(f"gc --auto not started ({getattr(e, 'message', e)}); the next check tries again")

    _loose_looked = float("-inf")  # (monotonic) when _compact last listed the loose objects

    def _compact(self, repo) -> None:
        """Bound the pack count while serving (convgit/serve/compact.py: small packs merged
        geometrically) when no call waits; the loose objects (listing them costs a directory
        read per fan-out) are looked at too at most every LOOSE_CHECK_SECONDS. A failure is a
        warning; the next look tries again."""
        from .compact import compact, merge_due

        now = time.monotonic()
        loose = now - self._loose_looked >= LOOSE_CHECK_SECONDS
        if not loose and not merge_due(repo.objects):
            return
        if loose:
            self._loose_looked = now
        try:
            done = compact(repo, loose=loose)
        except (ConvgitError, OSError) as e:
            self.warn(f"merging small packs failed ({getattr(e, 'message', e)}); gc will do it")
            return
        if done is not None:
            self.compactions += 1

    def _drain_leftovers(self, recorder: Recorder) -> None:
        d = self.repo_path / spool_mod.SPOOL_DIR
        for seg in spool_mod.leftover_segments(d):
            try:
                done = spool_mod.read_done(seg)
                records = [r for r in (rec_mod.decode_record(f) for f in spool_mod.read_frames(seg)) if r.id not in done]
            except Exception as e:
                self.warn(f"{seg}: unreadable spool segment left in place ({e})")
                continue
            for i in range(0, len(records), _MAX_BATCH):
                if not self._commit(recorder, records[i:i + _MAX_BATCH], stop=False, check=True):
                    return
            fsio.unlink_quiet(seg)
            fsio.unlink_quiet(spool_mod.done_path(seg))
            self._embed(recorder)


def _gc_running(repo) -> bool:
    """Is ``gc.lock`` held (a gc, an fsck, a pack merge)? One non-blocking ``flock`` try."""
    try:
        return fsio.lock_busy(repo.path / "gc.lock")
    except ConvgitError:
        return True  # (cannot tell: the full check)


def _store_generation(repo) -> tuple:
    """What changes when a gc ran: the ref journal's file (gc starts a new one, under the
    exclusive store lock) and gc's log (appended once it is done)."""
    out = []
    for p in (repo.refs.journal_path, repo.path / GC_LOG):
        try:
            st = p.stat()
            out.append((st.st_ino, st.st_size if p.name == GC_LOG else 0, st.st_mtime_ns if p.name == GC_LOG else 0))
        except OSError:
            out.append(None)
    return tuple(out)


def real_turns(repo, name: str) -> list[str]:
    """The turns thread ``name``'s reflog records for moves that happened, oldest first.

    A writer killed between appending its reflog lines and renaming the ref in leaves lines
    for moves that never happened (one, or several for a thread a bulk commit moved more than
    once): they are left out (refformat.applied_entries, as ``reflog`` shows them)."""
    from ..refformat import applied_entries

    try:
        text = repo.refs.log_bytes(name).decode("utf-8", "replace")  # packed part, then loose
    except (OSError, ConvgitError):
        return []
    entries = [e for e in (parse_reflog_line(ln) for ln in text.splitlines(keepends=True)) if e is not None]
    return [e.turn for e in applied_entries(entries, repo.refs.read(name)) if e.turn]
