"""convgit mcp over stdio: what one tool call costs an agent, end to end.

A real `convgit mcp` subprocess (fsync on, the store default) driven by the official MCP
SDK's stdio client, as Claude Code or Cursor would drive it:

- start: spawning the server until the first `tools/list` answer;
- save (grow): a stateless agent re-sending its whole history plus 2 new messages, N times
  (history length 2 .. 2N messages);
- save (same): the same history again (deduplicated, nothing written);
- search, get_conversation (first page of 50), list_conversations.

    .venv/bin/python benchmarks/bench_mcp.py [--rounds 100]

Prints a markdown table of medians and 95th percentiles (milliseconds). Figures and the
machine are in docs/performance.md ("MCP server").
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import convgit  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


async def run(rounds: int) -> dict[str, list[float]]:
    store = Path(tempfile.mkdtemp()) / "s"
    convgit.init(store).close()
    params = StdioServerParameters(command=sys.executable, args=["-m", "convgit", "-C", str(store), "mcp",
                                                                 "--client", "bench"])
    times: dict[str, list[float]] = {k: [] for k in ("start", "save (grow)", "save (same)", "search", "get", "list")}
    t0 = time.perf_counter()
    async with Client(params) as c:
        await c.list_tools()
        times["start"].append(time.perf_counter() - t0)
        history: list[dict] = []
        handle = None
        for i in range(rounds):
            history += [{"role": "user", "content": f"question {i}: how does step {i} of the tokenizer work?"},
                        {"role": "assistant", "content": f"Step {i} splits the text into grapheme clusters. " * 8}]
            t = time.perf_counter()
            r = (await c.call_tool("save_conversation", {"messages": history})).structured_content
            times["save (grow)"].append(time.perf_counter() - t)
            assert r["status"] == "ok" and r["appended_messages"] == 2, r
            handle = r["id"]
            t = time.perf_counter()
            r = (await c.call_tool("save_conversation", {"messages": history})).structured_content
            times["save (same)"].append(time.perf_counter() - t)
            assert r["deduplicated"], r
            for name, args in (("search", {"query": f"step {i}"}), ("get", {"id": handle}), ("list", {})):
                t = time.perf_counter()
                r = (await c.call_tool({"get": "get_conversation", "list": "list_conversations"}.get(name, name),
                                       args)).structured_content
                times[name].append(time.perf_counter() - t)
                assert r["status"] == "ok", r
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=100)
    a = ap.parse_args()
    times = asyncio.run(run(a.rounds))
    print(f"rounds: {a.rounds} (the history grows to {2 * a.rounds} messages)\n")
    print("| call | n | median ms | p95 ms |")
    print("|---|---:|---:|---:|")
    for k, xs in times.items():
        print(f"| {k} | {len(xs)} | {statistics.median(xs) * 1000:.1f} | {pct(xs, 0.95) * 1000:.1f} |")


if __name__ == "__main__":
    main()
