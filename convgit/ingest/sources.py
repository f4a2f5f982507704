"""Files → conversations: format detection, ZIP exports, streamed JSON arrays, JSONL, llm's
logs.db. Yields a Conversation (or a Rejected with its error) per conversation, so one bad
conversation is reported on its own and never stops the others.

Limits (config.toml) apply per conversation: ``max_payload_bytes`` to each conversation's
JSON (an array element, a JSONL line, or a whole single-conversation file), the others when
it is hashed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Iterator

from ..config import Config
from ..errors import ConvgitError, InvalidInput, PayloadTooLarge, SchemaValidationFailed
from .chat import parse_chat
from .decode import decode_json
from .model import Conversation, Node, Payload, TurnInfo
from .shapes import (SESSION_FORMATS, chatgpt_looks_like, claude_looks_like, is_anthropic_request, librechat_looks_like,
                     owui_looks_like, sharegpt_looks_like)

if TYPE_CHECKING:
    from .jsonsplit import Skipped

# What only `import` reads (llm's logs.db, ZIP files, streamed arrays, the many-conversation
# exports, convgit's own, the tree formats, datasets and session files) is imported by the
# functions that read it: `commit`, which takes one document through payload_from_document,
# loads none of it; its detection asks convgit.ingest.shapes (start-up: docs/performance.md).


def _chatgpt(doc: Any, label: str = "") -> Conversation:
    from . import chatgpt

    return chatgpt.parse(doc, label, detect=detect)


def _claude(doc: Any, label: str = "") -> Conversation:
    from . import claude

    return claude.parse(doc, label)


def _owui(doc: Any, label: str = "") -> Conversation:
    from . import webui

    return webui.parse_owui(doc, label)


def _librechat(doc: Any, label: str = "") -> Conversation:
    from . import webui

    return webui.parse_librechat(doc, label)


TREE_FORMATS = {"chatgpt": _chatgpt, "claude": _claude, "open-webui": _owui, "librechat": _librechat}
PAYLOAD_FORMATS = ("native", "openai", "openai-completion", "openai-responses", "anthropic", "gemini", "aistudio",
                   "sharegpt", "messages", "conversation", "transcript")
# Formats of a whole file, several conversations per document or one per file.
FILE_FORMATS = ("grok", "chatbot-ui", "open-webui-db", *SESSION_FORMATS)
FORMATS = ("auto", *TREE_FORMATS, "llm", *FILE_FORMATS, *PAYLOAD_FORMATS)


@dataclass
class Rejected:
    """A conversation (or a whole input) that could not be read: reported, never imported."""

    label: str
    error: ConvgitError
    size: int = 0
    source: str | None = None
    upstream_id: str | None = None


# -- one decoded document ---------------------------------------------------------------------


def detect(doc: Any) -> str | None:
    """The format of one decoded conversation document, or None."""
    if isinstance(doc, list):
        if doc and all(isinstance(x, dict) for x in doc[:3]):
            if sharegpt_looks_like(doc):
                return "sharegpt"
            if all("role" in x for x in doc[:3]):
                return "native"
        return None
    if not isinstance(doc, dict):
        return None
    if chatgpt_looks_like(doc):
        return "chatgpt"
    if claude_looks_like(doc):
        return "claude"
    if owui_looks_like(doc):
        return "open-webui"
    if librechat_looks_like(doc):
        return "librechat"
    if "chunkedPrompt" in doc:
        return "aistudio"
    if "contents" in doc or "candidates" in doc:
        return "gemini"
    if sharegpt_looks_like(doc):
        return "sharegpt"
    if isinstance(doc.get("conversation"), list):
        return "conversation"
    if doc.get("type") == "message" and doc.get("role") == "assistant" and isinstance(doc.get("content"), list):
        return "anthropic"
    if doc.get("object") == "response" or (("input" in doc or isinstance(doc.get("output"), list)) and "messages" not in doc):
        return "openai-responses"
    if "choices" in doc and "messages" not in doc:
        return "openai-completion"
    if isinstance(doc.get("messages"), list):
        if is_anthropic_request(doc) or (isinstance(doc.get("response"), dict) and doc["response"].get("type") == "message"):
            return "anthropic"
        if any(k in doc for k in ("images", "videos", "audios")):
            return "messages"
        return "native"
    return None


def payload_from_document(doc: Any, fmt: str | None = None, *, allow_bare_response: bool = False) -> Payload:
    """One linear conversation (commit's input): native/OpenAI chat or another API shape."""
    fmt = fmt or detect(doc) or "native"
    if fmt in TREE_FORMATS or fmt == "llm" or fmt in FILE_FORMATS:
        raise SchemaValidationFailed(f"this is a {fmt} export, which can hold many conversations: use `convgit import`")
    if fmt in ("openai-completion", "openai-responses", "anthropic", "gemini", "aistudio"):
        from . import apis
    if fmt == "openai-completion":
        if not allow_bare_response:
            raise SchemaValidationFailed("a chat.completion response needs the request: give {\"messages\": [...], \"response\": {...}}")
        return apis.completion_payload(_obj(doc, fmt))
    if fmt == "openai-responses":
        return apis.responses_payload(_obj(doc, fmt))
    if fmt == "anthropic":
        return apis.anthropic_payload(_obj(doc, fmt))
    if fmt == "gemini":
        return apis.gemini_payload(_obj(doc, fmt))
    if fmt == "aistudio":
        return apis.aistudio_payload(_obj(doc, fmt))
    if fmt in ("sharegpt", "conversation", "messages"):
        from . import datasets
    if fmt == "sharegpt":
        return datasets.sharegpt_payload(doc)
    if fmt == "conversation":
        return datasets.conversation_list_payload(_obj(doc, fmt))
    if fmt == "messages" and isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        return datasets.messages_with_media(doc)
    if fmt == "transcript":
        raise SchemaValidationFailed("a transcript is plain text, not JSON")
    return parse_chat(doc)


def _obj(doc: Any, fmt: str) -> dict:
    if not isinstance(doc, dict):
        raise SchemaValidationFailed(f"a {fmt} document must be a JSON object")
    return doc


def payload_conversation(payload: Payload, *, source: str, label: str, size: int = 0) -> Conversation:
    """A linear payload (an API request/response, a dataset row) as a conversation to import."""
    info = payload.turn
    nodes, parent = [], None
    for i, d in enumerate(payload.all_messages):
        key = f"#{i}"
        nodes.append(Node(key=key, parent=parent, draft=d, alias=False))
        parent = key
    turn = TurnInfo(model=info.model, resolved_model=info.resolved_model, options=info.options, usage=info.usage,
                    started_at=info.started_at, duration_ms=info.duration_ms, error=info.error, meta=info.meta)
    return Conversation(source=info.source or source, nodes=nodes, upstream_id=info.upstream_thread_id, turn=turn,
                        label=label, size=size)


def conversation_from_document(doc: Any, fmt: str | None, label: str, size: int = 0) -> Conversation:
    """One decoded document of format ``fmt`` (None: detected) as a Conversation to import."""
    from . import native

    fmt = fmt or detect(doc)
    if fmt is None:
        raise SchemaValidationFailed("unknown format: not a conversation convgit can read (use --format)")
    if fmt in TREE_FORMATS:
        conv = TREE_FORMATS[fmt](doc, label)
        conv.size = size
        return conv
    if fmt == "native" and native.is_export(doc):
        return native.parse_thread(doc, label, size)
    payload = payload_from_document(doc, fmt, allow_bare_response=True)
    return payload_conversation(payload, source=fmt, label=label, size=size)


# -- files ------------------------------------------------------------------------------------


def iter_path(path: str | Path, fmt: str | None = None, config: Config | None = None) -> Iterator[Conversation | Rejected]:
    """Every conversation in a file (JSON, JSONL, a ZIP export, an llm logs.db)."""
    from . import llmdb, webui

    config = config or Config()
    fmt = None if fmt in (None, "auto") else fmt
    if fmt is not None and fmt not in FORMATS:
        raise InvalidInput(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    p = Path(path)
    label = str(path)
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        raise InvalidInput(f"{label}: no such file") from None
    except IsADirectoryError:
        raise InvalidInput(f"{label}: is a directory") from None
    except OSError as e:
        raise InvalidInput(f"{label}: {e.strerror}") from None
    if (head.startswith(b"SQLite format 3\x00") and fmt in (None, "open-webui-db") and webui.is_webui_db(p)
            and not llmdb.is_llm_db(p)) or fmt == "open-webui-db":
        if not webui.is_webui_db(p):
            raise InvalidInput(f"{label}: not an Open WebUI database (no chat table)")
        for item in webui.iter_webui_db(p, label):
            yield Rejected(item[0], item[1], source="open-webui") if isinstance(item, tuple) else item
        return
    if head.startswith(b"SQLite format 3\x00") or fmt == "llm":
        if not llmdb.is_llm_db(p):
            raise InvalidInput(f"{label}: a SQLite file that is not an llm logs.db")
        for item in llmdb.iter_conversations(p, label):
            yield Rejected(item[0], item[1], source="llm") if isinstance(item, tuple) else item
        return
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        yield from _iter_zip(p, fmt, config, label)
        return
    size = p.stat().st_size
    with open(p, "rb") as f:
        kind = fmt if fmt in SESSION_FORMATS else _session_kind(f) if fmt is None else None
        if kind is not None:
            yield _session_file(f, kind, config, label, size)
            return
        yield from iter_stream(f, fmt, config, label, size=size, jsonl=p.suffix.lower() in (".jsonl", ".ndjson"))


def _session_kind(f: BinaryIO) -> str | None:
    """The whole-file JSONL format (sessions.py) whose first line starts ``f``, or None."""
    from . import sessions

    first = f.readline(1 << 20)
    f.seek(0)
    try:
        return sessions.detect_first_line(decode_json(first)) if first.strip() else None
    except ConvgitError:
        return None


def _session_file(f: BinaryIO, kind: str, config: Config, label: str, size: int) -> Conversation | Rejected:
    """One whole-file conversation (SillyTavern, Claude Code, Codex): every line decoded; a
    last line cut short (a session still being written) is left out."""
    raw = f.read(config.max_payload_bytes + 1)
    if len(raw) > config.max_payload_bytes:
        return Rejected(label, PayloadTooLarge(f"more than {config.max_payload_bytes} bytes in one conversation "
                                               "(limits.max_payload_bytes)"), size)
    lines = [ln for ln in raw.split(b"\n") if ln.strip()]
    docs = []
    for i, ln in enumerate(lines, 1):
        try:
            docs.append(decode_json(ln))
        except ConvgitError as e:
            if i == len(lines) and not raw.endswith(b"\n"):
                break
            return Rejected(label, SchemaValidationFailed(f"line {i}: {e.message}"), size)
    from . import sessions

    return _one(label, size, lambda: _sized(sessions.parse_file(kind, docs, label), size))


def _sized(conv: Conversation, size: int) -> Conversation:
    conv.size = size
    return conv


_NOT_CONVERSATIONS = {"user.json", "users.json", "message_feedback.json", "shared_conversations.json", "projects.json",
                      "model_comparisons.json", "memories.json"}


def _iter_zip(p: Path, fmt: str | None, config: Config, label: str) -> Iterator[Conversation | Rejected]:
    import zipfile

    try:
        zf = zipfile.ZipFile(p)
        names = [i for i in zf.infolist() if not i.is_dir()]
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise InvalidInput(f"{label}: not a readable ZIP file ({e})") from None
    with zf:
        chosen = [i for i in names if i.filename.rsplit("/", 1)[-1] == "conversations.json"]
        if not chosen:
            chosen = [i for i in names if i.filename.lower().endswith((".json", ".jsonl", ".ndjson"))
                      and i.filename.rsplit("/", 1)[-1] not in _NOT_CONVERSATIONS]
        if not chosen:
            raise InvalidInput(f"{label}: the ZIP holds no conversations.json (nor any .json file)")
        for info in sorted(chosen, key=lambda i: i.filename):
            try:
                f = zf.open(info)
            except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError) as e:
                yield Rejected(f"{label}:{info.filename}", InvalidInput(f"cannot read {info.filename} in the ZIP: {e}"))
                continue
            with f:
                try:
                    yield from iter_stream(f, fmt, config, f"{label}:{info.filename}", size=info.file_size,
                                           jsonl=info.filename.lower().endswith((".jsonl", ".ndjson")))
                except (zipfile.BadZipFile, EOFError, OSError) as e:  # a corrupt member: CRC, truncation
                    yield Rejected(f"{label}:{info.filename}", InvalidInput(f"corrupt ZIP member {info.filename}: {e}"))


def iter_stream(f: BinaryIO, fmt: str | None, config: Config, label: str, *, size: int = 0,
                jsonl: bool = False) -> Iterator[Conversation | Rejected]:
    """Conversations in one JSON/JSONL/transcript stream."""
    from .jsonsplit import Skipped

    limit = config.max_payload_bytes
    if fmt == "transcript":
        from . import datasets

        raw = _read_limited(f, limit, label)
        yield _one(label, len(raw), lambda: payload_conversation(
            datasets.transcript_payload(_text(raw, label)), source="transcript", label=label, size=len(raw)))
        return
    first = _peek_nonspace(f)
    if first == b"[":
        yield from _iter_array_source(f, fmt, config, label)
        return
    if jsonl or first == b"{":
        line = f.readline(limit + 1)
        rest = f.read(1) if len(line) <= limit or jsonl else b""
        if len(line) > limit and not rest:  # (one JSON Lines line over the limit stops only itself)
            yield Rejected(label, PayloadTooLarge(f"more than {limit} bytes in one conversation (limits.max_payload_bytes)"))
            return
        if not rest:  # one document
            yield from _document(line, fmt, label, limit)
            return
        if jsonl or _complete(line):
            n = 0
            for n, ln in enumerate(_lines(line + rest, f, limit), 1):
                if isinstance(ln, Skipped) or ln.strip():
                    yield _array_element(ln, fmt, f"{label}:{n}", limit)
            return
        raw = line + rest + _read_limited(f, limit - len(line) - 1, label)
        yield from _document(raw, fmt, label, limit)
        return
    raw = _read_limited(f, limit, label)
    yield _element(raw, fmt, label, limit)


def _one(label: str, size: int, make) -> Conversation | Rejected:
    try:
        return make()
    except ConvgitError as e:
        return Rejected(label, e, size)


def _element(raw: bytes, fmt: str | None, label: str, limit: int) -> Conversation | Rejected:
    if len(raw) > limit:
        return Rejected(label, PayloadTooLarge(f"{len(raw)} bytes; the limit is {limit} (limits.max_payload_bytes)"), len(raw))
    return _one(label, len(raw), lambda: conversation_from_document(decode_json(raw), fmt, label, len(raw)))


def _document(raw: bytes, fmt: str | None, label: str, limit: int) -> Iterator[Conversation | Rejected]:
    """One JSON document: a conversation, or a convgit export bundle of several threads."""
    from . import exports, native

    if fmt in (None, "grok", "chatbot-ui") and len(raw) <= limit and (b'"responses"' in raw or b'"history"' in raw):
        try:
            doc = decode_json(raw)
        except ConvgitError as e:
            yield Rejected(label, e, len(raw))
            return
        many = (exports.iter_grok if fmt == "grok" or (fmt is None and exports.grok_looks_like(doc)) else
                exports.iter_chatbot_ui if fmt == "chatbot-ui" or (fmt is None and exports.chatbot_ui_looks_like(doc))
                else None)
        if many is not None:
            if fmt is not None and not (exports.grok_looks_like(doc) if fmt == "grok" else exports.chatbot_ui_looks_like(doc)):
                yield Rejected(label, SchemaValidationFailed(f"not a {fmt} export"), len(raw))
                return
            n = 0
            for n, item in enumerate(many(doc, label), 1):
                if isinstance(item, tuple):
                    yield Rejected(item[0], item[1], 0, source=fmt or None)
                else:
                    item.size = len(raw) // max(1, len(doc.get("conversations") or doc.get("history") or [1]))
                    yield item
            if n == 0:
                yield Rejected(label, SchemaValidationFailed("no conversations in this export"), len(raw))
            return
    if fmt in (None, "native") and len(raw) <= limit and b'"threads"' in raw:
        try:
            doc = decode_json(raw)
        except ConvgitError as e:
            yield Rejected(label, e, len(raw))
            return
        if native.is_bundle(doc):
            try:
                for where, item in native.iter_bundle(doc, label):
                    yield Rejected(where, item) if isinstance(item, ConvgitError) else item
            except ConvgitError as e:
                yield Rejected(label, e, len(raw))
            return
    yield _element(raw, fmt, label, limit)


def _iter_array_source(f: BinaryIO, fmt: str | None, config: Config, label: str) -> Iterator[Conversation | Rejected]:
    """A top-level array: a list of conversations (streamed), or one conversation's message
    list. The first element within the limit decides which.

    Nothing is read twice: a message list is decoded element by element as the splitter hands
    them out, so the conversation is made of exactly the file's bytes however large its first
    message is (an earlier replay buffer that stopped remembering spliced the file), and an
    element or a message list over ``max_payload_bytes`` is refused without being buffered.
    """
    from .jsonsplit import Skipped, iter_array

    limit = config.max_payload_bytes
    it = iter_array(f, max_element=limit)
    seen: list[tuple[int, bytes | Skipped]] = []  # read before the kind is known
    head: Any = None
    error: InvalidInput | None = None
    while True:
        try:
            item = next(it, None)
        except InvalidInput as e:
            error = e
            break
        if item is None:
            break
        seen.append(item)
        if not isinstance(item[1], Skipped):
            try:
                head = decode_json(item[1])
            except ConvgitError:
                head = None
            break
    if not seen:
        yield Rejected(label, error or SchemaValidationFailed("an empty list: no conversations"))
        return
    kind = fmt or (detect(head) if head is not None else None)
    if isinstance(head, dict) and ("role" in head or "from" in head) and kind in (None, "native", "sharegpt", "openai"):
        # the array is one conversation's messages
        yield _message_list(seen, head, it, fmt, label, limit)
        return
    del head  # (streaming from here on: hold no conversation longer than its turn)
    i = 0
    while seen:
        yield _array_element(seen.pop(0)[1], kind, f"{label}[{i}]", limit)
        i += 1
    while error is None:
        try:
            nxt = next(it, None)
        except InvalidInput as e:
            error = e
            break
        if nxt is None:
            return
        yield _array_element(nxt[1], kind, f"{label}[{i}]", limit)
        i += 1
    yield Rejected(f"{label}[{i}]", error)


def _array_element(element: bytes | Skipped, kind: str | None, label: str, limit: int) -> Conversation | Rejected:
    from .jsonsplit import Skipped

    if isinstance(element, Skipped):
        return Rejected(label, PayloadTooLarge(
            f"{element.size} bytes; the limit is {limit} (limits.max_payload_bytes)"), element.size)
    return _element(element, kind, label, limit)


def _message_list(seen: list[tuple[int, bytes | Skipped]], head: Any, it: Iterator[tuple[int, bytes | Skipped]],
                  fmt: str | None, label: str, limit: int) -> Conversation | Rejected:
    """One conversation whose messages are the array's elements (``head`` is the first one,
    already decoded): decoded one by one, refused as soon as it exceeds ``limit`` bytes."""
    from .jsonsplit import Skipped

    def too_large(size: int) -> Rejected:
        return Rejected(label, PayloadTooLarge(
            f"more than {limit} bytes in one conversation (limits.max_payload_bytes)"), size)

    off, first = seen[-1]
    if len(seen) > 1:  # the elements before it were each over the limit on their own
        return too_large(off)
    assert isinstance(first, bytes)
    doc = [head]
    size = off + len(first) + 1  # through the closing bracket, counted from the start of the file
    del first, head
    while True:
        try:
            item = next(it, None)
        except InvalidInput as e:
            return Rejected(label, e, size)
        if item is None:
            break
        off, element = item
        if isinstance(element, Skipped) or off + len(element) + 1 > limit:
            return too_large(off + (element.size if isinstance(element, Skipped) else len(element)))
        size = off + len(element) + 1
        try:
            doc.append(decode_json(element, what=f"message {len(doc)} of the list"))
        except ConvgitError as e:
            return Rejected(label, e, size)
    if size > limit:
        return too_large(size)
    return _one(label, size, lambda: conversation_from_document(doc, fmt, label, size))


def _peek_nonspace(f: BinaryIO) -> bytes:
    # Callers re-read from the start: only seekable streams and ZIP members come here, and
    # both are wrapped so the bytes peeked are not lost.
    pos = f.tell() if f.seekable() else None
    data = f.read(4096)
    if pos is not None:
        f.seek(pos)
    else:  # pragma: no cover - zip members are seekable on 3.11
        raise InvalidInput("cannot read this stream")
    s = data.lstrip(b" \t\r\n")
    return s[:1]


def _complete(line: bytes) -> bool:
    import msgspec

    try:
        msgspec.json.decode(line)
        return True
    except msgspec.DecodeError:
        return False


def _lines(first: bytes, f: BinaryIO, limit: int) -> Iterator[bytes | Skipped]:
    """The lines of a JSON Lines stream; a line over ``limit`` bytes comes as ``Skipped``,
    read to its end without being kept."""
    from .jsonsplit import CHUNK, Skipped

    pending = first
    while True:
        nl = pending.find(b"\n")
        if nl >= 0:
            yield pending[: nl + 1]
            pending = pending[nl + 1:]
            continue
        if len(pending) > limit:
            size, more = len(pending), b""
            while True:
                more = f.readline(CHUNK)
                size += len(more)
                if not more or more.endswith(b"\n"):
                    break
            yield Skipped(size)
            if not more:
                return
            pending = b""
            continue
        more = f.readline(limit + 1)
        if not more:
            if pending:
                yield pending
            return
        pending += more


def _read_limited(f: BinaryIO, limit: int, label: str) -> bytes:
    data = f.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLarge(f"{label}: more than {limit} bytes in one conversation (limits.max_payload_bytes)")
    return data


def _text(raw: bytes, label: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(f"{label}: not valid UTF-8 (byte {e.start})") from None


# What a directory given to import holds that is read (the rest is left alone).
DIR_SUFFIXES = (".json", ".jsonl", ".ndjson")


def expand_dir(path: str | Path, fmt: str | None = None) -> list[Path]:
    """The files of directory ``path`` that import reads, recursively, in name order: for
    ``codex`` its ``rollout-*.jsonl``, for ``claude-code`` and ``sillytavern`` its ``*.jsonl``,
    else every ``.json``/``.jsonl``/``.ndjson`` file. Hidden files and directories are skipped."""
    base = Path(path)
    if fmt == "codex":
        pats = ("rollout-*.jsonl",)
    elif fmt in ("claude-code", "sillytavern"):
        pats = ("*.jsonl",)
    else:
        pats = tuple(f"*{s}" for s in DIR_SUFFIXES)
    out = set()
    for pat in pats:
        for p in base.rglob(pat):
            rel = p.relative_to(base).parts
            if p.is_file() and not any(x.startswith(".") for x in rel):
                out.add(p)
    return sorted(out)
