"""ChatGPT data export (``conversations.json``): the whole ``mapping`` tree, every branch.

One node = one message (formats.md §1.8 (a)), so parents stay exactly the source's. Nodes with
no message (``message: null``) and hidden nodes with no content are dropped and their
children re-parented to the nearest kept ancestor (the dropped node is kept verbatim in the
conversation's metadata). What a message says (role, parts, hidden flag, tool name,
recipient, channel, content type) is hashed; when and how it was produced (create_time,
model_slug, status, the rest of ``metadata``) is provenance and goes into the node's turn.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import SchemaValidationFailed
from ..objects import AttachmentPart, OpaquePart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from .model import Conversation, Draft, Node
from .parts import normalize_role
from .shapes import chatgpt_looks_like as looks_like

SOURCE = "chatgpt"
_CONV_KEYS = ("mapping", "current_node", "conversation_id", "id")
_MSG_HASHED = {"author", "content", "recipient", "channel", "weight"}


def parse(doc: Any, label: str = "", *, detect: Callable[[Any], str | None] | None = None) -> Conversation:
    """One ChatGPT export entry as a conversation tree. ``detect`` (sources' format detector,
    passed in because sources imports this module) names what a forced ``--format chatgpt``
    document looks like instead."""
    if not isinstance(doc, dict):
        raise SchemaValidationFailed("a ChatGPT conversation must be an object")
    mapping = doc.get("mapping")
    upstream = doc.get("conversation_id") or doc.get("id")
    if not isinstance(upstream, str):
        upstream = None
    if mapping is None:
        if not looks_like(doc):  # --format chatgpt forced on something else
            raise SchemaValidationFailed(f"not a ChatGPT conversation (no \"mapping\"){_looks_like_other(doc, detect)}")
        raise SchemaValidationFailed("entry has no \"mapping\" (a corrupted or partial export entry): skipped", skip=True)
    if not isinstance(mapping, dict):
        raise SchemaValidationFailed("\"mapping\" must be an object")
    parents = _parents(mapping)
    conv_time = _secs(doc.get("create_time"))
    kept: dict[str, tuple[Draft, dict]] = {}
    dropped: dict[str, Any] = {}
    for nid, node in mapping.items():
        if not isinstance(node, dict):
            raise SchemaValidationFailed(f"node {nid}: must be an object")
        msg = node.get("message")
        if msg is None:
            dropped[nid] = node
            continue
        if not isinstance(msg, dict):
            raise SchemaValidationFailed(f"node {nid}: message must be an object or null")
        draft = _draft(msg, nid)
        if draft is None:
            dropped[nid] = node
            continue
        kept[nid] = (draft, msg)
    nodes = []
    for nid, (draft, msg) in kept.items():
        parent = _kept_parent(nid, parents, kept)
        md = msg.get("metadata") if isinstance(msg.get("metadata"), dict) else {}
        t = _secs(msg.get("create_time"))
        if t is None and parent is None:
            t = conv_time
        prov = {k: v for k, v in msg.items() if k not in _MSG_HASHED and k not in ("id", "create_time", "metadata")}
        if msg.get("id") not in (None, nid):
            prov["message_id"] = msg.get("id")
        author = msg.get("author") if isinstance(msg.get("author"), dict) else {}
        if author.get("metadata"):
            prov["author_metadata"] = author["metadata"]
        rest = {k: v for k, v in md.items() if k != "model_slug"}
        if rest:
            prov["metadata"] = rest
        model = md.get("model_slug") if isinstance(md.get("model_slug"), str) else None
        nodes.append(Node(key=nid, parent=parent, draft=draft, time_ms=t, model=model,
                          meta={k: v for k, v in prov.items() if v is not None} or None))
    current = doc.get("current_node")
    if isinstance(current, str) and current not in kept:
        current = _kept_parent(current, parents, kept) if current in mapping else None
    meta = {k: v for k, v in doc.items() if k not in _CONV_KEYS and k != "title"}
    if dropped:
        meta["dropped_nodes"] = dropped
    title = doc.get("title") if isinstance(doc.get("title"), str) else None
    return Conversation(source=SOURCE, nodes=nodes, upstream_id=upstream, current=current if isinstance(current, str) else None,
                        tree=True, title=title, meta=meta or None, label=label)


def _looks_like_other(doc: dict, detect) -> str:
    other = detect(doc) if detect is not None else None
    return f": it looks like {other} (use --format {other}, or auto)" if other and other != SOURCE else ""


def _parents(mapping: dict) -> dict[str, str | None]:
    """node -> parent from each node's ``parent``; nodes without one fall back to the
    ``children`` lists (which are never trusted otherwise)."""
    out: dict[str, str | None] = {}
    from_children: dict[str, str] = {}
    for nid, node in mapping.items():
        if isinstance(node, dict):
            for c in node.get("children") or ():
                if isinstance(c, str):
                    from_children.setdefault(c, nid)
    for nid, node in mapping.items():
        p = node.get("parent") if isinstance(node, dict) and "parent" in node else from_children.get(nid)
        out[nid] = p if isinstance(p, str) and p in mapping and p != nid else None
    return out


def _kept_parent(nid: str, parents: dict, kept: dict) -> str | None:
    p = parents.get(nid)
    seen = 0
    while p is not None and p not in kept:
        p = parents.get(p)
        seen += 1
        if seen > len(parents):
            raise SchemaValidationFailed("the conversation's parent links form a cycle")
    return p


def _secs(v: Any) -> int | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 253402300799:
        return int(v * 1000)
    return None


def _draft(msg: dict, nid: str) -> Draft | None:
    where = f"node {nid}"
    author = msg.get("author")
    if not isinstance(author, dict):
        raise SchemaValidationFailed(f"{where}: author must be an object")
    role = normalize_role(author.get("role"), where)
    name = author.get("name") if isinstance(author.get("name"), str) else None
    content = msg.get("content")
    if not isinstance(content, dict):
        raise SchemaValidationFailed(f"{where}: content must be an object")
    ct = content.get("content_type")
    recipient = msg.get("recipient") if isinstance(msg.get("recipient"), str) else "all"
    md = msg.get("metadata") if isinstance(msg.get("metadata"), dict) else {}
    hidden = md.get("is_visually_hidden_from_conversation") is True or msg.get("weight") == 0
    meta: dict[str, Any] = {}
    used = {"content_type"}  # the content keys a branch maps; every other one goes to meta.content
    parts: list = []
    if ct in ("user_editable_context", "model_editable_context"):
        role = "system"
        hidden = True
        for k, v in content.items():
            if k not in ("content_type", "parts") and isinstance(v, str):
                used.add(k)
                if v:
                    parts.append(TextPart(text=v, meta={"field": k}))
        parts.extend(_loose_parts(content, used, "parts", field=True))
    elif ct in ("text", "multimodal_text"):
        raw = content.get("parts")
        if raw is None and isinstance(content.get("text"), str):
            raw, key = [content["text"]], "text"
        else:
            key = "parts"
        if not isinstance(raw, list):
            raise SchemaValidationFailed(f"{where}: {ct} content needs a parts list")
        used.add(key)
        strs = [p for p in raw if isinstance(p, str)]
        if recipient != "all" and role == "assistant" and len(strs) == len(raw):
            parts.append(ToolCallPart(name=recipient, arguments="\n".join(strs)))
            recipient = "all"
        elif role == "tool" and len(strs) == len(raw):
            if any(strs):
                parts.append(ToolResultPart(name=name, output=strs[0] if len(strs) == 1 else strs))
                name = None
        else:
            for p in raw:
                if isinstance(p, str):
                    if p or len(raw) == 1:
                        parts.append(TextPart(text=p))
                else:
                    parts.append(_asset(p, md))
    elif ct == "code":
        strs, others = _texts(content, used)
        if role == "tool":  # a tool's echo or output, whoever it is addressed to: a result
            if any(strs):
                parts.append(ToolResultPart(name=name, output=strs[0] if len(strs) == 1 else strs))
                name = None
        elif recipient != "all":
            parts.append(ToolCallPart(name=recipient, arguments="\n".join(strs)))
            recipient = "all"
        else:
            parts.extend(TextPart(text=t) for t in strs)
        parts.extend(others)
    elif ct == "execution_output":
        strs, others = _texts(content, used)
        if strs or not others:
            parts.append(ToolResultPart(name=name, output=strs[0] if len(strs) == 1 else (strs or None)))
            name = None
        parts.extend(others)
    elif role == "tool" and ct not in ("thoughts", "reasoning_recap"):
        out = {k: v for k, v in content.items() if k != "content_type"}
        parts.append(ToolResultPart(name=name, output=out, is_error=ct == "system_error"))
        name = None
        used.update(content)
    elif ct == "thoughts":
        used.add("thoughts")
        for th in content.get("thoughts") or ():
            if isinstance(th, dict):
                rest = {k: v for k, v in th.items() if k != "content"}
                parts.append(ReasoningPart(text=th.get("content") or "", meta={"source_type": "thoughts", **rest}))
            else:
                parts.append(_loose(th, "thoughts"))
        strs, others = _texts(content, used)
        parts.extend(ReasoningPart(text=t, meta={"source_type": "thoughts"}) for t in strs if t)
        parts.extend(others)
    elif ct == "reasoning_recap":
        strs, others = _texts(content, used, ("content", "text", "parts"))
        parts.extend(ReasoningPart(text=t, meta={"source_type": "reasoning_recap"}) for t in strs if t)
        if not any(isinstance(p, ReasoningPart) for p in parts):
            parts.insert(0, ReasoningPart(text="", meta={"source_type": "reasoning_recap"}))
        parts.extend(others)
    else:
        parts.append(OpaquePart(data=content, source=SOURCE))
        used.update(content)
    extra = {k: v for k, v in content.items() if k not in used}
    if ct not in (None, "text"):
        meta["content_type"] = ct
    if extra:
        meta["content"] = extra
    if hidden:
        meta["hidden"] = True
    if name is not None:
        meta["name"] = name
    if recipient != "all":
        meta["recipient"] = recipient
    if msg.get("channel") is not None:
        meta["channel"] = msg["channel"]
    if not parts or all(isinstance(p, TextPart) and not p.text for p in parts):
        return None  # nothing to say: dropped (kept verbatim in the conversation's meta)
    return Draft(role=role, parts=tuple(parts), meta=meta or None)


def _texts(content: dict, used: set, keys: tuple[str, ...] = ("text", "parts")) -> tuple[list[str], list]:
    """The strings a content carries under ``keys`` (a string, or a ``parts`` list), in that
    order, and an opaque part for anything else found there: the text is never lost to the
    key it came under. Marks the keys it read as used."""
    strs: list[str] = []
    others: list = []
    for k in keys:
        if k not in content:
            continue
        v = content[k]
        if isinstance(v, str):
            strs.append(v)
        elif isinstance(v, list) and k == "parts":
            for p in v:
                if isinstance(p, str):
                    strs.append(p)
                else:
                    others.append(_loose(p, k))
        elif v is None:
            pass
        else:
            others.append(_loose(v, k))
        used.add(k)
    return strs, others


def _loose_parts(content: dict, used: set, key: str, *, field: bool = False) -> list:
    """Text parts for the strings of a ``parts`` list a content type does not expect."""
    if key not in content:
        return []
    used.add(key)
    v = content[key]
    items = v if isinstance(v, list) else [v]
    out: list = []
    for p in items:
        if isinstance(p, str):
            if p:
                out.append(TextPart(text=p, meta={"field": key} if field else None))
        elif p is not None:
            out.append(_loose(p, key))
    return out


def _loose(v: Any, key: str) -> OpaquePart:
    return OpaquePart(data={key: v}, source=SOURCE)


def _asset(p: Any, md: dict) -> Any:
    if not isinstance(p, dict):
        return OpaquePart(data=p, source=SOURCE)
    ct = p.get("content_type")
    if ct == "audio_transcription" and isinstance(p.get("text"), str):
        rest = {k: v for k, v in p.items() if k != "text"}
        return TextPart(text=p["text"], meta=rest)
    pointer = p.get("asset_pointer")
    if isinstance(pointer, str):
        fid = pointer.rsplit("/", 1)[-1]
        att = next((a for a in md.get("attachments") or () if isinstance(a, dict) and a.get("id") and a["id"] in fid), {})
        size = p.get("size_bytes") if isinstance(p.get("size_bytes"), int) else None
        rest = {k: v for k, v in p.items() if k not in ("asset_pointer", "size_bytes")}
        mime = att.get("mime_type") or att.get("mimeType")
        return AttachmentPart(url=pointer, size=size, name=att.get("name"), mime_type=mime if isinstance(mime, str) else None,
                              meta=rest or None)
    return OpaquePart(data=p, source=SOURCE)
