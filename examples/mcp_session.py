"""An agent-like session against a real `convgit mcp` (stdio), printed as a transcript.

    pip install 'convgit[mcp]'
    python examples/mcp_session.py            # in a throw-away store under a temp directory

Two clients, `alice` and `bob`, each a `convgit mcp --client NAME` subprocess on the same
store, driven by the official MCP SDK's stdio client.
"""

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

HISTORY = [
    {"role": "user", "content": "How do I count tokens with a unicode tokenizer?"},
    {"role": "assistant", "content": "Normalise to NFC first, then split on grapheme clusters."},
]
GROWN = HISTORY + [
    {"role": "user", "content": "And for emoji sequences?"},
    {"role": "assistant", "content": "Treat each ZWJ sequence as one cluster."},
]
EDITED = [{"role": "user", "content": "How do I count tokens?"}] + GROWN[1:] + [{"role": "user", "content": "?"}]


def server(store: Path, client: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "convgit", "-C", str(store), "mcp", "--client", client])


async def main() -> None:
    import convgit

    store = Path(tempfile.mkdtemp()) / "store"
    convgit.init(store).close()  # a project store there (else -C DIR would find the default store)

    async def step(c, who, tool, args, note):
        r = await c.call_tool(tool, args)
        shown = {k: (f"[{len(v)} messages]" if k in ("messages",) else v) for k, v in args.items()}
        print(f"\n## {note}\n{who} → {tool} {json.dumps(shown, ensure_ascii=False)}")
        print(f"← {json.dumps(r.structured_content, ensure_ascii=False, indent=1)}")
        return r.structured_content

    async with Client(server(store, "alice")) as a, Client(server(store, "bob")) as b:
        print("tools:", ", ".join(t.name for t in (await a.list_tools()).tools))
        first = await step(a, "alice", "save_conversation", {"messages": HISTORY, "model": "gpt-4o"}, "save")
        tid = first["id"]
        await step(a, "alice", "save_conversation", {"messages": HISTORY, "model": "gpt-4o"}, "save it again")
        await step(a, "alice", "save_conversation", {"messages": GROWN}, "save it grown by 2 messages")
        await step(a, "alice", "save_conversation", {"messages": EDITED, "id": tid}, "an edited early message")
        got = await step(a, "alice", "get_conversation", {"id": tid, "limit": 2}, "get (first page)")
        fork = await step(a, "alice", "fork_conversation", {"id": got["messages"][1]["id"]}, "fork at message 1")
        await step(a, "alice", "search", {"query": "grapheme"}, "search")
        await step(b, "bob", "save_conversation", {"messages": GROWN + [{"role": "user", "content": "mine now"}],
                                                   "id": tid}, "bob appends to alice's thread")
        await step(b, "bob", "save_conversation", {"messages": [{**HISTORY[0], "id": "0" * 64}, HISTORY[1]]},
                   "bob sends a hash that is not the server's")
        await step(a, "alice", "list_conversations", {}, "list")
        print("\n(fork:", fork["id"], ")")


if __name__ == "__main__":
    asyncio.run(main())
