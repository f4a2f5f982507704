"""What format detection asks of one decoded document: each export format's "looks like"
predicate, pure and cheap, without the format's parser. Detecting the format of commit's one
document (convgit.ingest.sources.detect) loads these, not the ChatGPT, Claude, Open WebUI,
LibreChat, dataset, session and provider API parsers (start-up:
docs/performance.md). Each format module re-exports its predicate under its own name (the API shapes' Anthropic
check is convgit.ingest.apis.is_anthropic_request).
"""

from __future__ import annotations

from typing import Any

# The whole-file JSONL session formats (convgit.ingest.sessions.FILE_FORMATS).
SESSION_FORMATS = ("sillytavern", "claude-code", "codex")

_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking"}


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


# Message keys and roles only OpenAI's Chat Completions has: a document holding one is read as
# a chat document even when a content list also holds Anthropic-style blocks (LiteLLM and
# others put ``thinking`` blocks beside ``tool_calls``); the Anthropic reader has no place
# for them.
_OPENAI_ONLY_KEYS = ("tool_calls", "function_call", "tool_call_id", "reasoning_content", "refusal", "audio")
_OPENAI_ONLY_ROLES = ("tool", "function", "developer")


def _openai_only(m: Any) -> bool:
    if not isinstance(m, dict):
        return False
    role = m.get("role")
    return any(m.get(k) not in (None, [], {}) for k in _OPENAI_ONLY_KEYS) or (
        isinstance(role, str) and role.strip().lower() in _OPENAI_ONLY_ROLES)


def is_anthropic_request(doc: dict) -> bool:
    """True when ``doc`` is an Anthropic Messages request: a top-level ``system`` or content
    blocks of Anthropic's types, and no message with a key or role only OpenAI's chat shape
    has (``tool_calls``, ``tool_call_id``, role ``tool``, ...)."""
    msgs = doc.get("messages") or ()
    if any(_openai_only(m) for m in msgs):
        return False
    if "system" in doc and isinstance(doc.get("messages"), list):
        return True
    for m in msgs:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list) and any(isinstance(b, dict) and (b.get("type") in _ANTHROPIC_BLOCKS or
                                                                 isinstance(b.get("source"), dict)) for b in c):
            return True
    return False
