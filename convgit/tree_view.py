"""The fork tree of every thread (``log --graph``, ``tree``): messages as a forest in a stable
order, and the same rows nested as JSON (re-exported by api)."""

from __future__ import annotations

from typing import Iterator

from . import graph, revparse
from .objects import Message, ReasoningPart
from .repository import Repository
from .texts import message_text


def tree(repo: Repository, rev: str | None = None) -> list[dict]:
    """Every message reachable from a thread as a forest in a stable order (with ``rev``: only
    the tree holding that revision). Each row: id, parent, role, text, depth (how many forks
    deep), branch (first message of a branch), last (no later sibling branch), tips (the
    thread names whose tip it is)."""
    refs = repo.refs.read_all()
    only_root = None
    if rev is not None:
        only_root = graph.ancestry_ids(repo.objects, revparse.resolve(repo, rev))[0]
    tips: dict[str, list[str]] = {}
    for n, t in refs.items():
        tips.setdefault(t, []).append(n)
    children: dict[str | None, list[str]] = {}
    msgs: dict[str, Message] = {}
    for name, tip in refs.items():
        for oid, msg in graph.iter_ancestry(repo.objects, tip, stop=set(msgs)):
            msgs[oid] = msg
            children.setdefault(msg.parent, []).append(oid)
    # Siblings in the order their threads were created (the older branch first, as the
    # conversation happened), then by name: the same drawing in every store and every second.
    created = {r["name"]: r["created_ms"] or 0 for r in repo.index.thread_rows()}
    far = (float("inf"), "\uffff")
    for k in children:
        children[k].sort(key=lambda o: (min(((created.get(n, 0), n) for n in _names_below(o, children, tips)),
                                            default=far), o))
    roots = [r for r in children.get(None, []) if only_root is None or r == only_root]
    rows: list[dict] = []
    stack = [(oid, 0, False, True) for oid in reversed(roots)]
    while stack:
        oid, depth, branch, last = stack.pop()
        msg = msgs[oid]
        kids = children.get(oid, [])
        text = message_text(repo, msg)
        rows.append({
            "id": oid, "parent": msg.parent, "role": msg.role, "text": text,
            "summary": _summary_of(msg, text, msgs.get(msg.parent) if msg.parent else None),
            "depth": depth, "branch": branch, "last": last, "tips": sorted(tips.get(oid, [])),
        })
        if len(kids) == 1:
            stack.append((kids[0], depth, False, True))
        else:
            for i, k in reversed(list(enumerate(kids))):
                stack.append((k, depth + 1, True, i == len(kids) - 1))
    return rows


def _summary_of(msg: Message, text: str, parent: Message | None = None, width: int = 72) -> str:
    """One line saying what a message is: its first line of text, else what its tool calls
    and results do (a result named after its call in ``parent``), else its kind of content."""
    from .objects import AttachmentPart
    from .views import tool_names, tool_summary

    first = text.strip().splitlines()[0] if text.strip() else ""
    if first:
        return first if len(first) <= width else first[: width - 1] + "…"
    tools = tool_summary(msg.parts, width, tool_names(parent.parts) if parent is not None else None)
    if tools:
        return tools
    for p in msg.parts:
        if isinstance(p, AttachmentPart):
            return f"[attachment] {p.name or p.mime_type or p.url or ''}".rstrip()
    if any(isinstance(p, ReasoningPart) for p in msg.parts):
        return "[reasoning]"
    return ""


def nest_tree(rows: list[dict]) -> list[dict]:
    """``tree`` rows as a JSON tree: one object per conversation (root), each a run of
    messages up to a fork, then its ``branches`` (runs in turn). Nesting grows with forks,
    not with messages, so a long thread stays one flat list."""
    out: list[dict] = []
    stack: list[tuple[int, dict]] = []  # (depth, run) of the open runs
    for r in rows:
        node = {k: r[k] for k in ("id", "parent", "role", "summary", "tips")}
        if r["parent"] is None:
            run = {"messages": [node], "branches": []}
            out.append(run)
            stack = [(0, run)]
        elif r["branch"]:
            while stack and stack[-1][0] >= r["depth"]:
                stack.pop()
            run = {"messages": [node], "branches": []}
            stack[-1][1]["branches"].append(run)
            stack.append((r["depth"], run))
        else:
            stack[-1][1]["messages"].append(node)
    return out


def _names_below(oid: str, children: dict, tips: dict) -> Iterator[str]:
    todo = [oid]
    while todo:
        o = todo.pop()
        yield from tips.get(o, [])
        todo.extend(children.get(o, []))
