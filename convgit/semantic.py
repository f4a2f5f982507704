"""Embedding chunks and searching by meaning: ``convgit embed``, ``search --semantic`` and
``--hybrid`` (docs/search.md).

Objects are the truth; chunks (index/chunks.py) and vectors (index/vectors.py) are derived.
A chunk is *pending* until its vector is stored in the active namespace (*indexed*), or its
embedding failed (*failed*: retried by the next ``embed``). Embedding goes in batches, each
committed on its own, so an interrupted ``embed`` loses at most the batch in flight and a
re-run embeds only what is still pending. A chunk id is ``<message id>:<window>``: the same
message reached again (a re-send, a fork, a merge, a re-import) has no new chunk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from .config import load_embed_config
from .errors import EmbeddingFailed, EmbeddingUnavailable, InvalidInput
from .index.filters import Filters
from .index.search import Hit, describe, fts_ranked, highlight_terms, plain_words
from .index.search import search as fts_search
from .index.fts import parse

if TYPE_CHECKING:
    from .config_types import EmbedConfig
    from .embedders import Provider
    from .index import chunks as C
    from .index.vectors import VectorStore

# The providers, chunks, vectors and nearest-chunk search are imported by the functions that
# embed or search by meaning: a full-text search (`search` on a store without vectors, the
# common case) loads none of them (start-up: docs/performance.md).

MODES = ("auto", "fts", "semantic", "hybrid")
RRF_K = 60  # reciprocal-rank fusion: score = sum over the lists of 1 / (RRF_K + rank)
SEARCH_CATCH_UP = 256  # a search embeds at most this many pending chunks first (more: `convgit embed`)
MAX_FAILED_BATCHES = 3  # consecutive failed batches before embed stops (the rest stays pending)
EMBED_ON_WRITE = 256  # chunks a commit, an import or an MCP save embeds at most (more: `convgit embed`)


@dataclass
class Embedding:
    """An opened embedding setup: the settings, the provider, the chunk rules, the vector store."""

    config: EmbedConfig
    provider: Provider
    rules: C.ChunkRules
    store: VectorStore

    @property
    def mark_key(self) -> str:
        """The key of this store's progress mark in the index (void if the store is remade)."""
        return f"{self.store.ns.key}@{self.store.uid}"


def open_embedding(repo, **overrides) -> Embedding:
    """The embedding setup of ``repo`` from config.toml ``[embed]``, with ``overrides``
    (``provider``, ``model``, ``dimension``, ``url``…) taking precedence."""
    from .embedders import make_provider
    from .index import chunks as C
    from .index.vectors import VectorStore

    cfg = load_embed_config(repo.path / "config.toml", **overrides)
    provider = make_provider(cfg)
    rules = C.ChunkRules(cfg.include_reasoning, cfg.include_tools)
    store = VectorStore(repo.path, provider.namespace(rules.key), search=cfg.search,
                        ann_threshold=cfg.ann_threshold, nprobe=cfg.ann_nprobe)
    return Embedding(cfg, provider, rules, store)


@dataclass
class EmbedResult:
    """What ``embed`` did: chunks cut, vectors made, failures, what is still pending."""

    namespace: dict
    new_chunks: int = 0  # chunks cut from messages indexed since the last run
    embedded: int = 0  # vectors computed and stored by this run
    failed: int = 0  # chunks whose embedding failed in this run
    retried: int = 0  # failed chunks tried again
    pending: int = 0  # chunks still without a vector (a run stopped early)
    batches: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    switched: bool = False  # embed --switch: config.toml [embed] now names this namespace
    ann: str | None = None  # what happened to the IVF lists: "fresh", "extended", "built"; None: not used

    def to_json(self) -> dict:
        """The result as ``embed --json`` prints it."""
        return {"status": "ok" if not self.failed else "error", "namespace": self.namespace,
                "new_chunks": self.new_chunks, "embedded_chunks": self.embedded, "failed_chunks": self.failed,
                "retried_chunks": self.retried, "pending_chunks": self.pending, "batches": self.batches,
                "ann_index": self.ann, "errors": self.errors[:10], "seconds": round(self.seconds, 3),
                "switched": self.switched}


def embed(repo, *, emb: Embedding | None = None, retry: bool = True, batch_size: int | None = None,
          progress: Callable[[int, int], None] | None = None, limit: int | None = None, **overrides) -> EmbedResult:
    """Embed every pending chunk (and, with ``retry``, the failed ones) in batches.
    ``progress(done, total)`` is called after each batch. ``limit``: stop before embedding
    more than this many chunks (what is left stays pending: ``pending`` says at most how many)."""
    from .index import chunks as C

    t0 = time.perf_counter()
    emb = emb or open_embedding(repo, **overrides)
    store, prov = emb.store, emb.provider
    size = batch_size or emb.config.batch_size
    if limit is not None:
        size = max(1, min(size, limit))  # (a configured batch larger than the limit would never start)
    res = EmbedResult(store.ns.to_json())
    res.new_chunks = C.sync(repo, emb.rules)
    db = repo.index.db
    mark = C.embedded_mark(db, emb.mark_key)
    failed = store.failed() if retry else {}
    todo_failed = C.rows_for(db, list(failed)) if failed else {}
    pending_total = db.execute("SELECT count(*) FROM chunks WHERE message_rowid > ?", (mark,)).fetchone()[0]
    total = pending_total + len(todo_failed)
    done = 0
    bad_streak = 0

    def run(cids: list[str], rows: list[tuple]) -> bool:
        nonlocal done, bad_streak
        if limit is not None and res.embedded + res.failed + len(cids) > limit:
            return False
        texts = C.texts_of(repo.index.db, rows, emb.rules)
        res.batches += 1
        try:
            vecs = prov.embed(texts)
        except EmbeddingUnavailable:
            raise
        except EmbeddingFailed as e:
            store.mark_failed(cids, e.message)
            res.failed += len(cids)
            res.errors.append(e.message)
            bad_streak += 1
        else:
            res.embedded += store.add(cids, vecs)
            bad_streak = 0
        done += len(cids)
        if progress is not None:
            progress(done, total)
        return bad_streak < MAX_FAILED_BATCHES

    items = sorted(todo_failed.items(), key=lambda kv: (kv[1][0], kv[1][1]))
    for i in range(0, len(items), size):
        part = items[i : i + size]
        res.retried += len(part)
        if not run([c for c, _ in part], [r for _, r in part]):
            res.pending = total - done
            res.seconds = time.perf_counter() - t0
            return res
    failed_now = set(store.failed())
    buf_c: list[str] = []
    buf_r: list[tuple] = []
    last_rid = mark
    for rows in C.iter_chunks_after(repo.index.db, mark, batch=max(1, size)):
        cids = [C.chunk_id(r[0], r[2]) for r in rows]
        have = store.has(cids) | failed_now  # failed ones: retried above (``retry``), else left failed
        for cid, r in zip(cids, rows):
            if cid not in have:
                buf_c.append(cid)
                buf_r.append(r[1:])
            else:
                done += 1
        while len(buf_c) >= size:
            ok = run(buf_c[:size], buf_r[:size])
            del buf_c[:size], buf_r[:size]
            if not ok:
                res.pending = total - done
                res.seconds = time.perf_counter() - t0
                return res
        last_rid = rows[-1][1]
        if not buf_c:
            C.set_embedded_mark(repo, emb.mark_key, last_rid)
    if buf_c:
        if not run(buf_c, buf_r):
            res.pending = total - done
            res.seconds = time.perf_counter() - t0
            return res
    if last_rid != mark:
        C.set_embedded_mark(repo, emb.mark_key, last_rid)
    if limit is None:  # `convgit embed`: the IVF lists follow (index/ivf.py); a search's catch-up never lays out
        res.ann = store.ensure_ann()  # the IVF lists follow the appended vectors (index/ivf.py)
    res.seconds = time.perf_counter() - t0
    return res


def embed_status(repo, **overrides) -> dict:
    """Chunks per state in the active namespace (``indexed``, ``pending``, ``failed``), the
    vectors stored, and every namespace under ``.convgit/vectors/``."""
    from .index import chunks as C

    from .index.vectors import namespaces

    emb = open_embedding(repo, **overrides)
    C.sync(repo, emb.rules)
    db = repo.index.db
    live = [C.chunk_id(oid, w) for oid, w in C.live_chunk_ids(db)]
    have = emb.store.has(live)
    failed = set(emb.store.failed()) & set(live)
    stored = emb.store.count()
    return {
        "namespace": emb.store.ns.to_json(),
        "chunks": len(live),
        "indexed": len(have),
        "failed": len(failed - have),
        "pending": len(live) - len(have) - len(failed - have),
        "vectors": stored,
        "orphan_vectors": stored - len(have),
        "bytes": emb.store.size_bytes(),
        "chunking": emb.rules.key,
        "namespaces": namespaces(repo.path),
    }


def embed_written(repo, *, warnings: list[str] | None = None) -> EmbedResult | None:
    """Embed what a write just added, after its commit point (``embed.on_commit``, and MCP
    saves once the store holds vectors): at most ``EMBED_ON_WRITE`` chunks, the rest left
    pending for ``convgit embed``. The write stands whatever happens here: a provider that
    fails marks its chunks failed (``failed``), a missing one leaves them pending, and each
    problem is appended to ``warnings`` rather than raised. None when nothing could run."""
    from .errors import ConvgitError

    try:
        res = embed(repo, limit=EMBED_ON_WRITE)
    except (ConvgitError, OSError) as e:
        if warnings is not None:
            warnings.append(f"embedding skipped: {getattr(e, 'message', None) or e}; the chunks stay pending")
        return None
    if warnings is not None:
        if res.failed:
            warnings.append(f"embedding failed for {res.failed} chunk(s): {res.errors[0] if res.errors else ''}"
                            "; `convgit embed` retries them")
        if res.pending:
            warnings.append(f"{res.pending} chunk(s) left pending: run `convgit embed`")
    return res


def has_vectors(repo) -> bool:
    """Does any namespace hold a vector? (A directory made by ``embed --status`` alone does
    not make plain-words searches hybrid.)"""
    from .index.vectors import VECTORS_DIR

    root = repo.path / VECTORS_DIR
    if not root.is_dir():
        return False
    for p in root.glob("*/matrix-*.f32"):
        try:
            if p.stat().st_size > 0:
                return True
        except OSError:
            continue
    return False


def search(repo, query: str, *, mode: str = "auto", count: int = 20, latest: bool = False,
           columns: tuple[str, ...] = ("user", "assistant"), filters: Filters | None = None,
           emb: Embedding | None = None) -> list[Hit]:
    """Search by ``mode``: ``fts`` (FTS5 query language, every word required), ``semantic``
    (nearest chunks), ``hybrid`` (reciprocal-rank fusion of both), or ``auto``: a query of
    plain words is hybrid when this store has vectors, else full-text with the any-word
    fallback; any other query is ``fts``. Semantic and hybrid embed pending chunks first."""
    if mode not in MODES:
        raise InvalidInput(f"search mode {mode!r}: one of {', '.join(MODES)}")
    if count < 0:
        raise InvalidInput("-n must be 0 (all) or more")
    if mode == "fts":
        return fts_search(repo, query, count=count, latest=latest, columns=columns, filters=filters)
    if mode == "auto":
        words = plain_words(query)
        if not words or not has_vectors(repo):
            return fts_search(repo, query, count=count, latest=latest, columns=columns, filters=filters,
                              any_words=bool(words))
        try:
            return _vector_search(repo, query, "hybrid", count, latest, columns, filters, emb)
        except EmbeddingFailed as e:  # no model here, or the provider is down: words still work
            repo.warnings.append(f"semantic search unavailable ({e.message}); showing full-text results")
            return fts_search(repo, query, count=count, latest=latest, columns=columns, filters=filters,
                              any_words=True)
    return _vector_search(repo, query, mode, count, latest, columns, filters, emb)


def _vector_search(repo, query, mode, count, latest, columns, filters, emb) -> list[Hit]:
    from .index.nearest import chunk_texts, message_ids, semantic_ranked

    if not query.strip():
        raise InvalidInput("empty search query")
    emb = emb or open_embedding(repo)
    caught = embed(repo, emb=emb, retry=False, limit=SEARCH_CATCH_UP)
    if caught.pending:
        repo.warnings.append(f"up to {caught.pending} chunks are not embedded yet: run `convgit embed` "
                             "(this search used the vectors there are)")
    qvec = emb.provider.checked(emb.provider.embed_query(query)[None, :], 1)[0]
    words = plain_words(query)
    depth = count if mode == "semantic" else max(count, 10) * 3 if count else 0
    sem = semantic_ranked(repo, emb.store, qvec, count=depth, filters=filters)
    if mode == "semantic":
        ranked = sem
    else:
        try:  # every word: the any-word list would add common-word noise to the fusion (docs/search.md)
            fts = fts_ranked(repo, " ".join(words) if words else query, count=depth, columns=columns, filters=filters)
        except InvalidInput:
            fts = []  # not a valid FTS5 query: the vectors alone answer
        ranked = fuse(sem, fts, message_ids(repo.index.db, list({r[0] for r in sem} | {r[0] for r in fts})))
        if count:
            ranked = ranked[:count]
    try:  # what the snippets highlight: the query's words
        terms = parse(" OR ".join(words) if words else query, tuple(columns)).terms
        terms = highlight_terms(terms) if words else terms
    except InvalidInput:
        terms = []
    texts = chunk_texts(repo, [r[3] for r in ranked if r[3]], emb.rules)
    hits = describe(repo, ranked, columns, terms, texts)
    if latest:
        hits.sort(key=lambda h: h.key, reverse=True)
    return hits


def fuse(semantic: list[tuple[int, float, str, str]], fts: list[tuple[int, float]],
         ids: dict[int, str]) -> list[tuple[int, float, str, str | None]]:
    """Reciprocal-rank fusion: a message scores ``1 / (RRF_K + rank)`` (rank from 1) for each
    list it is in (the semantic list, the full-text list with every word); best first, ties
    by message id (``ids``: rowid → id; the same after an index rebuild). Match kind
    ``hybrid`` when in both lists, else the list it came from."""
    score: dict[int, float] = {}
    kind: dict[int, str] = {}
    chunk: dict[int, str | None] = {}
    for rank, (rid, _s, _k, cid) in enumerate(semantic, 1):
        score[rid] = score.get(rid, 0.0) + 1.0 / (RRF_K + rank)
        kind[rid] = "semantic"
        chunk[rid] = cid
    for rank, (rid, _s) in enumerate(fts, 1):
        score[rid] = score.get(rid, 0.0) + 1.0 / (RRF_K + rank)
        kind[rid] = "hybrid" if rid in kind else "fts"
        chunk.setdefault(rid, None)
    return [(rid, score[rid], kind[rid], chunk[rid]) for rid in sorted(score, key=lambda r: (-score[r], ids.get(r, "")))]


def drop_orphan_vectors(repo, exists: Callable[[str], bool]) -> int:
    """Compact every namespace under ``.convgit/vectors/``: drop the vectors of messages for
    which ``exists(message id)`` is false (gc passes "is still stored"). Returns how many."""
    from .index.vectors import VectorStore

    from .embedders import Namespace
    from .index.vectors import namespaces

    dropped = 0
    for info in namespaces(repo.path):
        try:
            ns = Namespace(info["provider"], info["model"], int(info["dimension"]), info["fingerprint"])
        except (KeyError, TypeError, ValueError):
            continue
        if ns.key != info["key"]:
            continue
        try:
            store = VectorStore(repo.path, ns, create=False)
        except EmbeddingFailed:
            continue
        try:
            dropped += store.compact(exists)
        finally:
            store.close()
    return dropped


def orphan_vectors(repo, exists: Callable[[str], bool]) -> dict[str, int]:
    """namespace key → how many of its messages with vectors ``exists`` rejects (fsck)."""
    from .index.vectors import VectorStore

    from .embedders import Namespace
    from .index.vectors import namespaces

    out = {}
    for info in namespaces(repo.path):
        try:
            ns = Namespace(info["provider"], info["model"], int(info["dimension"]), info["fingerprint"])
            store = VectorStore(repo.path, ns, create=False)
        except (KeyError, TypeError, ValueError, EmbeddingFailed):
            continue
        try:
            n = sum(1 for m in store.message_ids() if not exists(m))
        finally:
            store.close()
        if n:
            out[info["key"]] = n
    return out
