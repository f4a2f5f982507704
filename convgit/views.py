"""Views over log entries, in the spirit of ``llm logs``: the last response, fenced code
blocks, token usage, one summary per turn, truncation. Pure functions over values."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Sequence

TRUNCATE = 100

_FENCE = re.compile(r"^([ \t]{0,3})(`{3,}|~{3,})(.*)$")


def code_blocks(text: str) -> list[str]:
    """The fenced code blocks of Markdown ``text`` (```` ``` ```` or ``~~~``, any info string),
    their content without the fences. An unclosed block runs to the end of the text."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
            i += 1
            continue
        fence, indent = m.group(2), len(m.group(1))
        body: list[str] = []
        i += 1
        while i < len(lines):
            c = _FENCE.match(lines[i])
            if c and c.group(2)[0] == fence[0] and len(c.group(2)) >= len(fence) and not c.group(3).strip():
                break
            ln = lines[i]
            body.append(ln[min(indent, len(ln) - len(ln.lstrip(" "))):])
            i += 1
        out.append("\n".join(body))
        i += 1
    return out


def extract(texts: Iterable[str], *, last: bool = False) -> list[str]:
    """The first (``last``: the last) code block of each text that has one."""
    out = []
    for t in texts:
        blocks = code_blocks(t)
        if blocks:
            out.append(blocks[-1] if last else blocks[0])
    return out


def truncate(text: str, n: int = TRUNCATE) -> str:
    """One line of at most ``n`` characters (whitespace collapsed, "…" when cut)."""
    s = " ".join(text.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def truncate_json(doc: dict, n: int = TRUNCATE) -> dict:
    """A log entry's JSON with its text, and the text inside its parts, truncated."""
    d = dict(doc)
    d["text"] = truncate(d.get("text") or "", n)
    parts = []
    for p in d.get("parts") or ():
        p = dict(p)
        for k in ("text", "output", "arguments"):
            if isinstance(p.get(k), str):
                p[k] = truncate(p[k], n)
        parts.append(p)
    d["parts"] = parts
    return d


# -- usage ----------------------------------------------------------------------------------


def usage(entry) -> dict | None:
    """The token usage of the turn whose output is this entry (so totals count each turn once)."""
    t = entry.turn or {}
    if not t or t.get("output") != entry.id:
        return None
    raw = t.get("usage_json")
    if raw is None and t.get("input_tokens") is None and t.get("output_tokens") is None:
        return None
    return {"turn": t.get("turn"), "input_tokens": t.get("input_tokens"), "output_tokens": t.get("output_tokens"),
            "details": json.loads(raw) if raw else None}


def usage_totals(entries: Sequence) -> dict:
    """Token usage summed over ``entries``: turns with usage, input and output tokens."""
    turns = inp = outp = 0
    for e in entries:
        u = usage(e)
        if u is None:
            continue
        turns += 1
        inp += u["input_tokens"] or 0
        outp += u["output_tokens"] or 0
    return {"turns": turns, "input_tokens": inp, "output_tokens": outp, "total_tokens": inp + outp}


# -- one summary per turn -------------------------------------------------------------------


def _tool_names(entry) -> list[str]:
    from .objects import ToolCallPart

    return [p.name for p in entry.message.parts if isinstance(p, ToolCallPart)]


def short(entries: Sequence, key_of, *, n: int = TRUNCATE) -> list[dict[str, Any]]:
    """One summary per turn (consecutive entries of the same turn; a message no turn
    brought is its own entry): key, time, model, kind, thread, counts, first user text, last
    assistant text, tool calls, usage. ``key_of(entry)`` gives an entry's key."""
    groups: list[list] = []
    for e in entries:
        tid = (e.turn or {}).get("turn")
        if groups and tid is not None and (groups[-1][0].turn or {}).get("turn") == tid:
            groups[-1].append(e)
        else:
            groups.append([e])
    out = []
    for g in groups:
        t = g[0].turn or {}
        ordered = sorted(g, key=lambda e: e.depth)
        prompt = next((e.text for e in ordered if e.role == "user" and e.text.strip()), None)
        response = next((e.text for e in reversed(ordered) if e.role == "assistant" and e.text.strip()), None)
        tools = [name for e in ordered for name in _tool_names(e)]
        u = next((x for x in (usage(e) for e in g) if x is not None), None)
        out.append({
            "key": key_of(ordered[0]),
            "turn": t.get("turn"),
            "started_at": t.get("started_at"),
            "model": t.get("resolved_model") or t.get("model"),
            "kind": t.get("kind"),
            "thread": t.get("thread"),
            "messages": [e.id for e in ordered],
            "prompt": truncate(prompt, n) if prompt is not None else None,
            "response": truncate(response, n) if response is not None else None,
            "tool_calls": tools,
            "usage": {k: u[k] for k in ("input_tokens", "output_tokens")} if u else None,
        })
    return out


def _brief(value: Any, width: int) -> str:
    s = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    s = " ".join((s or "").split())
    return s if len(s) <= width else s[: width - 1] + "…"


def tool_names(parts: Iterable[Any]) -> dict[str, str]:
    """call id -> tool name, for the tool calls among ``parts`` (to name their results)."""
    from .objects import ToolCallPart

    return {p.id: p.name for p in parts if isinstance(p, ToolCallPart) and p.id}


def tool_summary(parts: Iterable[Any], width: int = 60, names: dict[str, str] | None = None) -> str:
    """What a message's tool parts do, in one line: ``[tool call] NAME(args)`` and
    ``[tool result] NAME: output`` (``[tool error]`` for a failed call; a result without a
    name takes its call's from ``names``, else shows the call id); "" when it has none."""
    from .objects import ToolCallPart, ToolResultPart

    bits = []
    for p in parts:
        if isinstance(p, ToolCallPart):
            bits.append(f"[tool call] {p.name}({_brief(p.arguments, width // 2) if p.arguments else ''})")
        elif isinstance(p, ToolResultPart):
            label = "[tool error]" if p.is_error else "[tool result]"
            called = p.name or (names or {}).get(p.tool_call_id or "") or p.tool_call_id
            name = f" {called}" if called else ""
            bits.append(f"{label}{name}: {_brief(p.output, width // 2)}")
    return "; ".join(bits)
