"""Export files that hold many conversations in one JSON document: Grok's data export
(``conversations[].responses[]``, a tree through ``parent_response_id``) and chatbot-ui's
export (``{"version", "history": [...], "folders", "prompts"}``, linear chats).

Grok: each response has ``_id``, ``message``, ``sender`` (``human`` or ``assistant``, any
case), ``create_time`` (ISO, epoch, or Mongo's ``{"$date": {"$numberLong": ...}}``),
``parent_response_id`` and ``model``. Every branch is kept; the main thread is the newest
leaf. chatbot-ui: each conversation has ``id``, ``name``, ``messages`` (``role``,
``content``), ``model`` (``{"id", "name"}``), ``prompt`` (its system prompt) and
``temperature``.
"""

from __future__ import annotations

from typing import Any, Iterator

from ..errors import SchemaValidationFailed
from ..objects import TextPart
from .chat import parse_time
from .model import Conversation, Draft, Node
from .parts import normalize_role


def grok_looks_like(doc: Any) -> bool:
    """True for a Grok export: ``conversations`` whose entries hold ``responses``."""
    convs = doc.get("conversations") if isinstance(doc, dict) else None
    return isinstance(convs, list) and bool(convs) and all(
        isinstance(c, dict) and isinstance(c.get("responses"), list) for c in convs[:3])


def chatbot_ui_looks_like(doc: Any) -> bool:
    """True for a chatbot-ui export: ``history`` (conversations with ``messages``) and ``version``
    or ``folders``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("history"), list):
        return False
    return ("version" in doc or "folders" in doc) and all(
        isinstance(c, dict) and isinstance(c.get("messages"), list) for c in doc["history"][:3])


def _time(v: Any) -> int | None:
    if isinstance(v, dict):  # Mongo extended JSON
        v = v.get("$date", v)
        if isinstance(v, dict):
            v = v.get("$numberLong")
            v = int(v) if isinstance(v, str) and v.isdigit() else v
    try:
        return parse_time(v, "create_time")
    except SchemaValidationFailed:
        return None


def iter_grok(doc: dict, label: str) -> Iterator[Conversation | tuple[str, Exception]]:
    """Each conversation of a Grok export."""
    for i, c in enumerate(doc["conversations"]):
        lab = f"{label}[{i}]"
        try:
            yield _grok_one(c, lab)
        except SchemaValidationFailed as e:
            yield (lab, e)


def _grok_one(c: dict, label: str) -> Conversation:
    info = c.get("conversation") if isinstance(c.get("conversation"), dict) else {}
    nodes = []
    for j, entry in enumerate(c["responses"]):
        r = entry.get("response") if isinstance(entry, dict) and isinstance(entry.get("response"), dict) else entry
        where = f"response {j}"
        if not isinstance(r, dict):
            raise SchemaValidationFailed(f"{where}: must be an object")
        key = r.get("_id") or r.get("id") or f"#{j}"
        sender = str(r.get("sender") or "").lower()
        role = normalize_role("user" if sender in ("human", "user") else sender or "assistant", where)
        msg = r.get("message")
        if msg is not None and not isinstance(msg, str):
            raise SchemaValidationFailed(f"{where}: message must be a string")
        parent = r.get("parent_response_id") or None
        t = _time(r.get("create_time"))
        model = r.get("model") if isinstance(r.get("model"), str) else None
        # every key of the response is kept (the turn's meta) but those mapped
        meta = {k: v for k, v in r.items() if k not in ("_id", "id", "message", "sender", "parent_response_id")
                and not (k == "create_time" and t is not None) and not (k == "model" and model is not None)}
        if key != r.get("_id") and r.get("_id") is not None:
            meta["_id"] = r["_id"]
        if r.get("id") is not None and key != r.get("id"):
            meta["id"] = r["id"]
        if isinstance(entry, dict) and entry is not r:
            meta.update({f"entry_{k}": v for k, v in entry.items() if k != "response"})
        nodes.append(Node(key=str(key), parent=str(parent) if parent else None,
                          draft=Draft(role=role, parts=(TextPart(text=msg or ""),)), time_ms=t,
                          model=model, meta=meta or None))
    if not nodes:
        raise SchemaValidationFailed("a Grok conversation with no responses")
    keys = {n.key for n in nodes}
    parents = {n.parent for n in nodes if n.parent}
    leaves = [n for n in nodes if n.key not in parents]
    main = max(leaves, key=lambda n: (n.time_ms or 0, nodes.index(n))).key if leaves else None
    for n in nodes:
        if n.parent is not None and n.parent not in keys:
            raise SchemaValidationFailed(f"response {n.key}: parent_response_id {n.parent} is not in the conversation")
    up = info.get("id") or info.get("conversation_id")
    title = info.get("title")
    cmeta = {k: v for k, v in info.items() if not (k == "title" and isinstance(v, str))
             and not (k in ("id", "conversation_id") and v == up)}
    cmeta.update({k: v for k, v in c.items() if k not in ("conversation", "responses")})
    return Conversation(source="grok", nodes=nodes, upstream_id=str(up) if up else None, current=main, tree=True,
                        title=title if isinstance(title, str) else None, meta=cmeta or None, label=label)


def iter_chatbot_ui(doc: dict, label: str) -> Iterator[Conversation | tuple[str, Exception]]:
    """Each conversation of a chatbot-ui export."""
    for i, c in enumerate(doc["history"]):
        lab = f"{label}[{i}]"
        try:
            yield _chatbot_ui_one(c, lab)
        except SchemaValidationFailed as e:
            yield (lab, e)


def _chatbot_ui_one(c: dict, label: str) -> Conversation:
    nodes = []
    parent = None
    prompt = c.get("prompt")
    msgs = list(c["messages"])
    if isinstance(prompt, str) and prompt.strip():
        msgs.insert(0, {"role": "system", "content": prompt})
    model = c.get("model")
    model_id = model.get("id") if isinstance(model, dict) else model if isinstance(model, str) else None
    for j, m in enumerate(msgs):
        where = f"message {j}"
        if not isinstance(m, dict):
            raise SchemaValidationFailed(f"{where}: must be an object")
        role = normalize_role(m.get("role"), where)
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise SchemaValidationFailed(f"{where}: content must be a string")
        key = f"#{j}"
        rest = {k: v for k, v in m.items() if k not in ("role", "content")}  # (the turn's, not the message's)
        nodes.append(Node(key=key, parent=parent, draft=Draft(role=role, parts=(TextPart(text=content or ""),)),
                          model=model_id if role == "assistant" else None, alias=False, meta=rest or None,
                          options={"temperature": c["temperature"]} if isinstance(c.get("temperature"), (int, float))
                          and role == "assistant" else None))
        parent = key
    if not nodes:
        raise SchemaValidationFailed("a chatbot-ui conversation with no messages")
    up = c.get("id")
    name = c.get("name")
    # the conversation's other keys (its model object, folderId, ...) as they are; the prompt
    # is the system message, the temperature each answer's option
    meta = {k: v for k, v in c.items() if k not in ("id", "messages") and not (k == "name" and isinstance(v, str))
            and not (k == "model" and isinstance(v, str)) and not (k == "prompt" and isinstance(v, str) and v.strip())
            and not (k == "temperature" and isinstance(v, (int, float)))}
    return Conversation(source="chatbot-ui", nodes=nodes, upstream_id=str(up) if up else None, current=parent,
                        tree=True, title=name if isinstance(name, str) else None, meta=meta or None, label=label)
