"""convgit's own export documents read back (``export -f native`` / ``-f jsonl``).

A document marked ``"convgit": {"version": 1}`` is a thread convgit wrote: its messages
(each with its ``id``, checked against the hash), its name, where it was forked from, and
its recorded history — the reflog lines that named a turn and every turn object they name
(an import turn's per-message turns included). Each turn is decoded back into a ``Turn`` and
re-encoded with the one canonical encoder; its ``id`` must match, so the import writes the
very same turn objects and names them from the new thread's reflog (docs/import.md §Export).
Pure: values in, a Conversation out.
"""

from __future__ import annotations

from typing import Any, Iterator

import msgspec

from .. import codec
from ..errors import ConvgitError, HashMismatch, SchemaValidationFailed
from ..ids import is_oid
from ..objects import Turn
from .chat import message_draft
from .model import Conversation, NativeLine, NativeThread, Node

VERSION = 1
SOURCE = "native"


def is_export(doc: Any) -> bool:
    """A document convgit's export wrote (it carries the ``convgit`` marker)."""
    return isinstance(doc, dict) and "convgit" in doc


def is_bundle(doc: Any) -> bool:
    """Several threads in one document (``export --all -f native``)."""
    return is_export(doc) and "threads" in doc and "messages" not in doc


def iter_bundle(doc: dict, label: str) -> Iterator[tuple[str, Conversation | ConvgitError]]:
    """(label, conversation or the error that thread met) for each thread of a bundle."""
    _check_marker(doc)
    threads = doc["threads"]
    if not isinstance(threads, list):
        raise SchemaValidationFailed("\"threads\" must be a list of thread documents")
    for i, t in enumerate(threads):
        where = f"{label}[{i}]"
        try:
            yield where, parse_thread(t, where)
        except ConvgitError as e:
            yield where, e


def parse_thread(doc: Any, label: str, size: int = 0) -> Conversation:
    """One thread document → a linear conversation carrying its NativeThread."""
    if not isinstance(doc, dict):
        raise SchemaValidationFailed(f"a thread document must be an object, got {type(doc).__name__}")
    _check_marker(doc)
    msgs = doc.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise SchemaValidationFailed("a convgit export thread needs a non-empty \"messages\" list")
    nodes: list[Node] = []
    parent = None
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or not is_oid(m.get("id")):
            raise SchemaValidationFailed(f"{where}: a message of a convgit export carries its 64-hex \"id\"")
        nodes.append(Node(key=f"#{i}", parent=parent, draft=message_draft(m, where), alias=False))
        parent = f"#{i}"
    tip = doc.get("tip")
    if tip != msgs[-1]["id"]:
        raise SchemaValidationFailed(f"\"tip\" must be the last message's id ({msgs[-1]['id']})")
    name = doc.get("thread")
    if name is not None and not isinstance(name, str):
        raise SchemaValidationFailed("\"thread\" must be a string or null")
    forked = doc.get("forked_from")
    if forked is not None and not isinstance(forked, dict):
        raise SchemaValidationFailed("\"forked_from\" must be an object or null")
    forked = forked or {}
    f_thread, f_msg = forked.get("thread"), forked.get("message")
    if f_thread is not None and not isinstance(f_thread, str):
        raise SchemaValidationFailed("forked_from.thread must be a string or null")
    if f_msg is not None and not is_oid(f_msg):
        raise SchemaValidationFailed("forked_from.message must be a 64-hex convgit id or null")
    turns = _turns(doc.get("turns", []))
    lines = _lines(doc.get("reflog", []), {tid for tid, _ in turns})
    native = NativeThread(name=name, tip=tip, forked_from=f_thread, forked_at=f_msg, turns=turns, reflog=lines)
    return Conversation(source=SOURCE, nodes=nodes, label=label, size=size, native=native)


def _check_marker(doc: dict) -> None:
    mark = doc.get("convgit")
    if not isinstance(mark, dict) or mark.get("version") is None:
        raise SchemaValidationFailed("the \"convgit\" marker must be an object with a \"version\"")
    if mark.get("version") != VERSION:
        raise SchemaValidationFailed(
            f"a convgit export of version {mark.get('version')!r}; this convgit reads version {VERSION}")


def _turns(items: Any) -> list[tuple[str, bytes]]:
    if not isinstance(items, list):
        raise SchemaValidationFailed("\"turns\" must be a list")
    out: dict[str, bytes] = {}
    for i, d in enumerate(items):
        where = f"turns[{i}]"
        if not isinstance(d, dict) or not is_oid(d.get("id")):
            raise SchemaValidationFailed(f"{where}: a turn carries its 64-hex \"id\"")
        fields = {k: v for k, v in d.items() if k != "id"}
        if fields.get("type", "turn") != "turn":
            raise SchemaValidationFailed(f"{where}: not a turn (type {fields.get('type')!r})")
        try:
            turn = msgspec.convert(fields, Turn)
            oid, data = codec.encode_and_hash(turn)
        except (msgspec.ValidationError, codec.EncodeError) as e:
            raise SchemaValidationFailed(f"{where}: {e}") from e
        if oid != d["id"]:
            raise HashMismatch(f"{where}: turn claims id {d['id']} but hashes to {oid}", claimed=d["id"], computed=oid)
        out[oid] = data
    return list(out.items())


def _lines(items: Any, turn_ids: set[str]) -> list[NativeLine]:
    if not isinstance(items, list):
        raise SchemaValidationFailed("\"reflog\" must be a list")
    out = []
    for i, d in enumerate(items):
        where = f"reflog[{i}]"
        if not isinstance(d, dict):
            raise SchemaValidationFailed(f"{where}: a reflog line must be an object")
        old, new, turn, t, msg = d.get("old"), d.get("new"), d.get("turn"), d.get("time_ms"), d.get("message", "")
        if (old is not None and not is_oid(old)) or (new is not None and not is_oid(new)):
            raise SchemaValidationFailed(f"{where}: old/new must be 64-hex convgit ids or null")
        if turn not in turn_ids:
            raise SchemaValidationFailed(f"{where}: names turn {turn!r}, which \"turns\" does not hold")
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise SchemaValidationFailed(f"{where}: time_ms must be a non-negative integer")
        if not isinstance(msg, str):
            raise SchemaValidationFailed(f"{where}: message must be a string")
        out.append(NativeLine(old=old, new=new, turn=turn, time_ms=t, message=msg))
    return out
