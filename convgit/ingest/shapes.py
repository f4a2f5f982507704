"""What format detection asks of one decoded document: each export format's "looks like"
predicate, pure and cheap, without the format's parser. Detecting the format of commit's one
document (convgit.ingest.sources.detect) loads these and the API shapes' check, not the
ChatGPT, Claude, Open WebUI, LibreChat, dataset and session parsers (start-up:
docs/performance.md). Each format module re-exports its predicate under its own name.
"""

from __future__ import annotations

from typing import Any

# The whole-file JSONL session formats (convgit.ingest.sessions.FILE_FORMATS).
SESSION_FORMATS = ("sillytavern", "claude-code", "codex")


def chatgpt_looks_like(doc: Any) -> bool:
    """A ChatGPT conversation: a ``mapping`` tree, or the keys an entry without one still has.
    A ``chat_messages`` list is Claude's, whatever else the document holds."""
    if not isinstance(doc, dict) or isinstance(doc.get("chat_messages"), list):
        return False
    return "mapping" in doc or "current_node" in doc or ("conversation_id" in doc and "title" in doc)


def claude_looks_like(doc: Any) -> bool:
    """True for a Claude.ai conversation (a ``chat_messages`` list)."""
    return isinstance(doc, dict) and isinstance(doc.get("chat_messages"), list)


def owui_looks_like(doc: Any) -> bool:
    """True for an Open WebUI chat (``history.messages``, at the top or under ``chat``)."""
    if not isinstance(doc, dict):
        return False
    chat = doc.get("chat") if isinstance(doc.get("chat"), dict) else doc
    return isinstance(chat.get("history"), dict) and isinstance(chat["history"].get("messages"), dict)


def librechat_looks_like(doc: Any) -> bool:
    """True for a LibreChat export (``conversationId`` and messages)."""
    return isinstance(doc, dict) and "conversationId" in doc and (
        isinstance(doc.get("messages"), list) or isinstance(doc.get("messagesTree"), list))


def sharegpt_looks_like(doc: Any) -> bool:
    """True for a ShareGPT record (or bare list) of ``{from, value}`` turns."""
    turns = doc.get("conversations") if isinstance(doc, dict) else doc
    return isinstance(turns, list) and bool(turns) and all(isinstance(t, dict) and "from" in t and "value" in t for t in turns[:3])
