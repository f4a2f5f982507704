"""convgit mcp: the memory-hub contract through the official MCP SDK's client.

In process (``mcp.client.Client(server)``) for the tool contracts; a real ``convgit mcp``
subprocess over stdio driven by the SDK's stdio client; the real ``--http`` server on
127.0.0.1 (an ephemeral port) with and without its bearer token.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import convgit
from convgit.config import McpLimits

pytest.importorskip("mcp.server.mcpserver")  # the [mcp] extra (in the test extra, so CI runs these)

from mcp.client import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from convgit.memory.hub import EVIDENCE_NOTICE, MemoryHub  # noqa: E402
from convgit.memory.server import build_server  # noqa: E402

PY = sys.executable
HEX = re.compile(r"[0-9a-f]{64}")

HISTORY = [
    {"role": "user", "content": "How do I count tokens with a unicode tokenizer?"},
    {"role": "assistant", "content": "Normalise to NFC first, then split on grapheme clusters."},
]
GROWN = HISTORY + [
    {"role": "user", "content": "And for emoji sequences?"},
    {"role": "assistant", "content": "Treat each ZWJ sequence as one cluster."},
]


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def store(tmp_path):
    r = convgit.init(tmp_path / "s")
    yield r
    r.close()


def hub_for(repo, **kw) -> MemoryHub:
    limits = kw.pop("limits", McpLimits())
    return MemoryHub(repo, limits, **kw)


def snapshot(repo) -> tuple:
    """Everything a write could change: object files, refs, reflogs (not the index cache)."""
    files = []
    for sub in ("objects", "refs", "logs"):
        for p in sorted((repo.path / sub).rglob("*")):
            if p.is_file():
                files.append((str(p.relative_to(repo.path)), p.stat().st_size))
    return tuple(files)


def raw_ids(repo) -> set[str]:
    """Every message and turn id the store holds."""
    out = set()
    for p in (repo.path / "objects").rglob("*"):
        if p.is_file() and len(p.parent.name) == 2:
            out.add(p.parent.name + p.name)
    return out


async def call(c, tool, args):
    r = await c.call_tool(tool, args)
    doc = r.structured_content
    assert json.loads(r.content[0].text) == doc  # the text content is the same document
    assert r.is_error == (doc["status"] == "error"), doc
    return doc


def error(doc, code):
    assert doc["status"] == "error" and doc["error_code"] == code, doc
    assert set(doc) <= {"status", "error_code", "error_message", "details"}
    return doc


OK_KEYS = {"status", "id", "deduplicated", "appended_messages", "embedded_chunks"}


# -- the agent-like session, in process ---------------------------------------------------------


def test_agent_session_contract(store):
    """Save, re-save (deduplicated), grow by 2 (appended 2), edit an early message
    (duplicate_conflict, nothing written), fork, search, get; a second client appending to the
    first client's thread is unauthorized_update and writes nothing."""
    hub = hub_for(store)
    outputs: list = []

    async def session():
        async with Client(build_server(hub, "alice")) as a, Client(build_server(hub, "bob")) as b:
            names = {t.name for t in (await a.list_tools()).tools}
            assert names == {"save_conversation", "search", "get_conversation", "list_conversations",
                             "fork_conversation"}
            first = await call(a, "save_conversation", {"messages": HISTORY, "model": "gpt-4o", "source": "ide"})
            assert set(first) == OK_KEYS and first["status"] == "ok"
            assert (first["deduplicated"], first["appended_messages"], first["embedded_chunks"]) == (False, 2, 0)
            tid = first["id"]
            again = await call(a, "save_conversation", {"messages": HISTORY, "model": "gpt-4o"})
            assert again == {**first, "deduplicated": True, "appended_messages": 0}
            grown = await call(a, "save_conversation", {"messages": GROWN})
            assert grown == {"status": "ok", "id": tid, "deduplicated": False, "appended_messages": 2,
                             "embedded_chunks": 0}
            # the same, naming the thread: deduplicated
            assert (await call(a, "save_conversation", {"messages": GROWN, "id": tid}))["deduplicated"] is True
            before = snapshot(store)
            edited = [{"role": "user", "content": "How do I count tokens?"}] + GROWN[1:]
            error(await call(a, "save_conversation", {"messages": edited + [{"role": "user", "content": "x"}],
                                                      "id": tid}), "duplicate_conflict")
            assert snapshot(store) == before
            # bob may read alice's thread but not append to it
            bad = await call(b, "save_conversation", {"messages": GROWN + [{"role": "user", "content": "bob"}],
                                                      "id": tid})
            error(bad, "unauthorized_update")
            assert snapshot(store) == before
            # ... and a stateless re-send of alice's history by bob never moves alice's thread
            bobs = await call(b, "save_conversation", {"messages": GROWN + [{"role": "user", "content": "bob"}]})
            assert bobs["status"] == "ok" and bobs["id"] != tid and bobs["appended_messages"] == 5
            got = await call(a, "get_conversation", {"id": tid})
            assert [m["text"] for m in got["messages"]] == [m["content"] for m in GROWN]
            assert got["evidence_notice"] == EVIDENCE_NOTICE and got["total"] == 4
            fork = await call(a, "fork_conversation", {"id": got["messages"][1]["id"]})
            assert fork["status"] == "ok" and fork["forked_from"] == {"thread": tid, "message": got["messages"][1]["id"]}
            of_fork = await call(a, "get_conversation", {"id": fork["id"]})
            assert of_fork["forked_from"] == fork["forked_from"] and of_fork["total"] == 2
            cont = await call(a, "save_conversation", {"messages": HISTORY + [{"role": "user", "content": "zwj?"}],
                                                       "id": fork["id"]})
            assert cont == {"status": "ok", "id": fork["id"], "deduplicated": False, "appended_messages": 1,
                            "embedded_chunks": 0}
            got = await call(a, "get_conversation", {"id": tid})
            points = {p["index"]: set(p["threads"]) for p in got["fork_points"]}
            assert fork["id"] in points[1] and bobs["id"] in points[3]
            hits = await call(a, "search", {"query": "grapheme"})
            assert hits["evidence_notice"] == EVIDENCE_NOTICE
            assert [h["message"] for h in hits["results"]] == [got["messages"][1]["id"]]
            assert hits["results"][0]["role"] == "assistant" and tid in hits["results"][0]["threads"]
            assert "grapheme" in hits["results"][0]["excerpt"]
            by_model = await call(a, "search", {"query": "tokenizer", "model": "gpt-4o", "source": "mcp:alice"})
            assert len(by_model["results"]) == 1
            listed = await call(a, "list_conversations", {"limit": 2})
            assert listed["total"] == 3 and len(listed["conversations"]) == 2 and listed["next_offset"] == 2
            rest = await call(a, "list_conversations", {"offset": 2})
            every = listed["conversations"] + rest["conversations"]
            assert {c["id"] for c in every} == {tid, fork["id"], bobs["id"]}
            assert {c["id"]: c["writable"] for c in every} == {tid: True, fork["id"]: True, bobs["id"]: False}
            listed_res = {str(r.uri) for r in (await a.list_resources()).resources}
            assert listed_res == {f"convgit://thread/{h}" for h in (tid, fork["id"], bobs["id"])}
            res = await a.read_resource(f"convgit://thread/{tid}")
            md = res.contents[0].text
            assert EVIDENCE_NOTICE in md and "ZWJ sequence" in md
            outputs.extend([first, again, grown, bad, bobs, got, fork, hits, listed, rest, md])

    run(session())
    # Every write is a turn with source mcp:<client>; the client's source is in the turn's meta.
    sources = {json.loads(t)["source"] for t in _turns(store)}
    assert sources == {"mcp:alice", "mcp:bob"}
    # No raw id (message or turn) appears in any output
    text = json.dumps(outputs[:-1]) + outputs[-1]
    ids = raw_ids(store)
    assert ids and not any(i in text for i in ids) and not any(i[:12] in text for i in ids)
    # HEAD was not moved by the server
    assert store.refs.read_head() == "main"


def _turns(repo):
    out = []
    for oid in raw_ids(repo):
        obj = repo.objects.read(oid)
        if type(obj).__name__ == "Turn":
            out.append(json.dumps({"source": obj.source, "meta": obj.meta}))
    return out


def test_client_source_and_model_are_recorded(store):
    hub = hub_for(store)
    doc = hub.save_conversation("cursor", {"messages": HISTORY, "source": "cursor-chat", "model": "claude-x",
                                           "upstream_thread_id": "abc"})
    assert doc["status"] == "ok"
    turns = [json.loads(t) for t in _turns(store)]
    assert turns == [{"source": "mcp:cursor", "meta": {"client_source": "cursor-chat"}}]
    # the upstream id names the thread again, for this client only
    again = hub.save_conversation("cursor", {"messages": GROWN, "upstream_thread_id": "abc"})
    assert again["id"] == doc["id"] and again["appended_messages"] == 2
    other = hub.save_conversation("zed", {"messages": GROWN + [{"role": "user", "content": "z"}],
                                          "upstream_thread_id": "abc"})
    assert other["status"] == "ok" and other["id"] != doc["id"]


# -- hostile inputs: each its code, nothing written ---------------------------------------------


HOSTILE = [
    ({"messages": "not a list"}, "schema_validation_failed"),
    ({"messages": [1, 2]}, "schema_validation_failed"),
    ({"messages": []}, "schema_validation_failed"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "schema_validation_failed"),
    ({"messages": [{"role": "user"}]}, "schema_validation_failed"),
    ({}, "schema_validation_failed"),
    ({"messages": HISTORY, "conversation": HISTORY}, "schema_validation_failed"),
    ({"messages": HISTORY, "model": 7}, "schema_validation_failed"),
    ({"messages": HISTORY, "source": ["x"]}, "schema_validation_failed"),
    ({"messages": HISTORY, "unknown_key": 1}, "schema_validation_failed"),
    ({"transcript": "User: hi\nAssistant: yo"}, "invalid_input"),
    ({"transcript": "User: hi\n  assistant: sneaky\nAssistant: yo", "strict_transcript": True}, "schema_validation_failed"),
    ({"messages": HISTORY, "id": "not-a-handle"}, "invalid_input"),
    ({"messages": HISTORY, "id": "t_" + "a" * 26}, "invalid_input"),
    # client-supplied hashes that are not the server's
    ({"messages": [{**HISTORY[0], "id": "0" * 64}, HISTORY[1]]}, "invalid_input"),
    ({"messages": [HISTORY[0], {**HISTORY[1], "parent": "m_" + "b" * 26}]}, "invalid_input"),
    ({"messages": [{**HISTORY[0], "content_hash": "deadbeef"}, HISTORY[1]]}, "invalid_input"),
    ({"messages": [{**HISTORY[0], "parent": "m_" + "c" * 26}, HISTORY[1]]}, "invalid_input"),
]


@pytest.mark.parametrize("args,code", HOSTILE, ids=[f"{i}-{c}" for i, (_, c) in enumerate(HOSTILE)])
def test_hostile_inputs_write_nothing(store, args, code):
    hub = hub_for(store)
    before = snapshot(store)
    doc = hub.save_conversation("alice", args)
    error(doc, code)
    assert snapshot(store) == before
    assert not HEX.search(json.dumps(doc))


def test_hostile_inputs_through_the_sdk(store):
    """Wrong types reach the hub (not the SDK's validator): the contract's code, isError set."""
    hub = hub_for(store)

    async def go():
        async with Client(build_server(hub, "alice")) as c:
            for t in (await c.list_tools()).tools:
                assert t.input_schema["additionalProperties"] is False
            before = snapshot(store)
            for args, code in HOSTILE:
                error(await call(c, "save_conversation", args), code)
            error(await call(c, "search", {"query": "x", "sort": "new"}), "schema_validation_failed")
            assert snapshot(store) == before
            error(await call(c, "get_conversation", {"id": 42}), "invalid_input")
            error(await call(c, "search", {"query": ""}), "schema_validation_failed")
            error(await call(c, "list_conversations", {"limit": -1}), "schema_validation_failed")

    run(go())


def test_claimed_hashes_equal_to_the_servers_are_accepted(store):
    hub = hub_for(store)
    first = hub.save_conversation("alice", {"messages": HISTORY})
    got = hub.get_conversation("alice", {"id": first["id"]})
    h0, h1 = (m["id"] for m in got["messages"])
    claimed = [{**HISTORY[0], "id": h0}, {**HISTORY[1], "id": h1, "parent": h0}, {"role": "user", "content": "more",
                                                                                  "parent": h1}]
    doc = hub.save_conversation("alice", {"messages": claimed})
    assert doc == {**first, "appended_messages": 1}
    # a raw id, if a client knows it, must equal the server's too
    raw = store.refs.read(next(iter(store.refs.read_all())))
    assert hub.save_conversation("alice", {"messages": [*claimed, {"role": "assistant", "content": "ok",
                                                                    "parent": raw}]})["status"] == "ok"


def test_payload_too_large_before_parsing(store):
    hub = hub_for(store, limits=McpLimits(max_payload_bytes=2000, max_messages=3, page_size=2, max_page_size=3))
    before = snapshot(store)
    error(hub.save_conversation("alice", {"messages": [{"role": "user", "content": "x" * 3000}]}), "payload_too_large")
    # over the message count: refused before a single message is looked at (these are not even valid)
    error(hub.save_conversation("alice", {"messages": [1, 2, 3, 4]}), "payload_too_large")
    error(hub.save_conversation("alice", {"transcript": "User: " + "y" * 3000, "strict_transcript": True}),
          "payload_too_large")
    assert snapshot(store) == before
    error(hub.list_conversations("alice", {"limit": 4}), "payload_too_large")
    assert hub.list_conversations("alice", {})["next_offset"] is None


def test_strict_transcript_and_conversation_list(store):
    hub = hub_for(store)
    t = hub.save_conversation("alice", {"transcript": "User: hi there\nAssistant: hello", "strict_transcript": True})
    assert t["status"] == "ok" and t["appended_messages"] == 2
    c = hub.save_conversation("alice", {"conversation": [{"role": "human", "content": "hi there"},
                                                         {"role": "gpt", "content": "hello"},
                                                         {"role": "human", "content": "bye"}]})
    assert c == {**t, "appended_messages": 1}  # the same history, continued


def test_read_scope_and_grants(store, tmp_path):
    hub = hub_for(store)
    a = hub.save_conversation("alice", {"messages": HISTORY})
    convgit.commit(store, {"messages": [{"role": "user", "content": "private grapheme notes"}]}, thread="private/x")
    scoped = hub_for(store, read_scope="mcp/")
    assert [h["excerpt"] for h in scoped.search("alice", {"query": "grapheme"})["results"]] == [
        "Normalise to NFC first, then split on grapheme clusters."]
    assert len(hub.search("alice", {"query": "grapheme"})["results"]) == 2
    assert scoped.list_conversations("alice", {})["total"] == 1
    # bob may not append until the user grants it (the CLI: convgit mcp grant bob THREAD)
    error(hub.save_conversation("bob", {"messages": GROWN, "id": a["id"]}), "unauthorized_update")
    name = next(n for n in store.refs.read_all() if n.startswith("mcp/alice/"))
    r = subprocess.run([PY, "-m", "convgit", "-C", str(tmp_path / "s"), "mcp", "grant", "bob", name, "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "granted", r.stderr
    assert hub.save_conversation("bob", {"messages": GROWN, "id": a["id"]})["appended_messages"] == 2
    r = subprocess.run([PY, "-m", "convgit", "-C", str(tmp_path / "s"), "mcp", "grant", "bob", "nope", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 15 and json.loads(r.stdout)["error_code"] == "not_found"
    mcp_cli = [PY, "-m", "convgit", "-C", str(tmp_path / "s"), "mcp"]
    rows = json.loads(subprocess.run([*mcp_cli, "grants", "--json"], capture_output=True, text=True).stdout)
    assert [(r["thread"], r["client"], r["why"]) for r in rows] == [(name, "alice", "owner"), (name, "bob", "grant")]
    r = subprocess.run([*mcp_cli, "revoke", "bob", name, "--json"], capture_output=True, text=True)
    assert json.loads(r.stdout)["status"] == "revoked"
    error(hub.save_conversation("bob", {"messages": GROWN + [{"role": "user", "content": "b"}], "id": a["id"]}),
          "unauthorized_update")
    # outside the read scope, a thread is not found, as a resource too
    private = next(c["id"] for c in hub.list_conversations("alice", {})["conversations"] if c["owner"] is None)
    error(scoped.get_conversation("alice", {"id": private}), "not_found")
    with pytest.raises(convgit.ConvgitError):
        scoped.thread_markdown("alice", private)
    assert "private grapheme notes" in hub.thread_markdown("alice", private)


def test_saves_embed_their_new_chunks_once_the_store_uses_semantic_search(tmp_path):
    from helpers.store import set_config

    repo = set_config(convgit.init(tmp_path / "sem"), '[embed]\nprovider = "hash"\n')
    hub = hub_for(repo)
    first = hub.save_conversation("alice", {"messages": HISTORY})
    assert first["status"] == "ok" and first["embedded_chunks"] == 0  # no vectors yet: nothing embedded
    assert convgit.semantic.embed(repo).embedded > 0  # the user turns semantic search on
    more = hub.save_conversation("alice", {"id": first["id"], "messages": HISTORY + [
        {"role": "user", "content": "and what about byte-pair encoding merges?"}]})
    assert more["status"] == "ok" and more["appended_messages"] == 1 and more["embedded_chunks"] == 1
    again = hub.save_conversation("alice", {"id": first["id"], "messages": HISTORY})
    assert again["deduplicated"] and again["embedded_chunks"] == 0
    doc = hub.search("alice", {"query": "byte pair encoding", "mode": "semantic"})
    assert doc["status"] == "ok" and doc["results"], doc
    error(hub.search("alice", {"query": "x", "mode": "vibes"}), "schema_validation_failed")
    repo.close()


def test_handles_are_stable_across_restarts_and_private_per_store(store, tmp_path):
    doc = hub_for(store).save_conversation("alice", {"messages": HISTORY})
    hub2 = hub_for(convgit.api.open_repo(tmp_path / "s"))
    assert hub2.save_conversation("alice", {"messages": HISTORY})["id"] == doc["id"]
    # the handle table is derived: deleting it loses nothing
    hub2.close()
    (store.path / "mcp" / "state.sqlite").unlink()
    hub3 = hub_for(store)
    got = hub3.get_conversation("alice", {"id": doc["id"]})
    assert got["status"] == "ok" and len(got["messages"]) == 2
    msg = got["messages"][0]["id"]
    hub3.close()
    (store.path / "mcp" / "state.sqlite").unlink()
    assert hub_for(store).get_conversation("x", {"id": msg})["total"] == 1
    other = convgit.init(tmp_path / "t")
    assert hub_for(other).save_conversation("alice", {"messages": HISTORY})["id"] != doc["id"]
    mode = stat.S_IMODE((store.path / "mcp" / "secret").stat().st_mode)
    assert mode == 0o600 and stat.S_IMODE((store.path / "mcp").stat().st_mode) == 0o700


def test_trusted_local_exposes_raw_ids(store):
    hub = hub_for(store, trusted_local=True)
    doc = hub.save_conversation("alice", {"messages": HISTORY})
    assert doc["id"].startswith("mcp/alice/")
    got = hub.get_conversation("alice", {"id": doc["id"]})
    assert HEX.fullmatch(got["messages"][0]["id"])


# -- the real server: stdio subprocess ----------------------------------------------------------


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
    env["HOME"] = str(tmp_path / "home")
    env["CONVGIT_FSYNC"] = "0"
    return env


def test_stdio_subprocess(tmp_path):
    convgit.init(tmp_path / "s").close()
    params = StdioServerParameters(command=PY, args=["-m", "convgit", "-C", str(tmp_path / "s"), "mcp",
                                                     "--client", "claude-code"], env=_env(tmp_path))

    async def go():
        async with Client(params) as c:
            assert {t.name for t in (await c.list_tools()).tools} >= {"save_conversation", "search"}
            first = await call(c, "save_conversation", {"messages": HISTORY})
            again = await call(c, "save_conversation", {"messages": GROWN})
            hits = await call(c, "search", {"query": "emoji"})
            return first, again, hits

    first, again, hits = run(go())
    assert first["appended_messages"] == 2 and again == {**first, "appended_messages": 2}
    assert len(hits["results"]) == 1 and hits["results"][0]["threads"] == [first["id"]]
    # a second server process over the same store gives the same handles
    async def again_go():
        async with Client(params) as c:
            return await call(c, "list_conversations", {})

    listed = run(again_go())
    assert [c["id"] for c in listed["conversations"]] == [first["id"]]
    assert listed["conversations"][0]["owner"] == "claude-code"


def test_mcp_without_the_sdk_says_what_to_install(tmp_path):
    """A Python where `mcp` cannot be imported: `convgit mcp` fails with missing_dependency (52)."""
    convgit.init(tmp_path / "s").close()
    shadow = tmp_path / "shadow"
    (shadow / "mcp").mkdir(parents=True)
    (shadow / "mcp" / "__init__.py").write_text("raise ModuleNotFoundError('No module named mcp', name='mcp')\n")
    env = {**_env(tmp_path), "PYTHONPATH": str(shadow)}
    r = subprocess.run([PY, "-m", "convgit", "-C", str(tmp_path / "s"), "mcp", "--json"], capture_output=True,
                       text=True, env=env, stdin=subprocess.DEVNULL, timeout=60)
    assert r.returncode == 52, r
    doc = json.loads(r.stdout)
    assert doc["error_code"] == "missing_dependency" and "pip install 'convgit[mcp]'" in doc["error_message"]
    r = subprocess.run([PY, "-m", "convgit", "-C", str(tmp_path / "s"), "mcp"], capture_output=True, text=True,
                       env=env, stdin=subprocess.DEVNULL, timeout=60)
    assert r.returncode == 52 and "pip install 'convgit[mcp]'" in r.stderr and r.stdout == ""


# -- the real server: HTTP on 127.0.0.1 ---------------------------------------------------------


@pytest.fixture
def http_server(tmp_path):
    convgit.init(tmp_path / "s").close()
    env = _env(tmp_path)
    p = subprocess.Popen([PY, "-m", "convgit", "-C", str(tmp_path / "s"), "mcp", "--http", "--port", "0",
                          "--client", "cursor"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    url = None
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"serving (http://\S+)", line)
        if m:
            url = m.group(1)
            break
    assert url, "".join(lines)
    token = subprocess.run([PY, "-m", "convgit", "-C", str(tmp_path / "s"), "mcp", "--print-token", "--client",
                            "cursor"], capture_output=True, text=True, env=env).stdout.strip()
    yield url, token, tmp_path / "s" / ".convgit"
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _http_client(url: str, token: str | None):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)))


def test_http_with_and_without_the_token(http_server):
    import httpx2

    url, token, store = http_server
    assert token.startswith("cgt_")
    mode = stat.S_IMODE((store / "mcp" / "tokens.json").stat().st_mode)
    assert mode == 0o600

    async def with_token():
        async with _http_client(url, token) as c:
            doc = await call(c, "save_conversation", {"messages": HISTORY})
            got = await call(c, "get_conversation", {"id": doc["id"]})
            return doc, got

    doc, got = run(with_token())
    assert doc["status"] == "ok" and got["total"] == 2
    ref = next((store / "refs" / "threads" / "mcp").iterdir())
    assert ref.name == "cursor"  # the token's name is the client
    # another token, another client: it may read cursor's thread, not append to it
    bob = subprocess.run([PY, "-m", "convgit", "-C", str(store.parent), "mcp", "--print-token", "--client", "bob"],
                         capture_output=True, text=True, env=_env(store.parent.parent)).stdout.strip()

    async def as_bob():
        async with _http_client(url, bob) as c:
            got = await call(c, "get_conversation", {"id": doc["id"]})
            bad = await call(c, "save_conversation", {"messages": GROWN, "id": doc["id"]})
            return got, bad

    got, bad = run(as_bob())
    assert got["total"] == 2
    error(bad, "unauthorized_update")

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer cgt_wrong"}, {"Authorization": token}):
        r = httpx2.post(url, json=body, headers={"Accept": "application/json, text/event-stream", **headers})
        assert r.status_code == 401 and r.json()["error_code"] == "unauthorized", r.text

    async def without_token():
        async with _http_client(url, None) as c:
            await c.list_tools()

    from mcp.shared.exceptions import MCPError

    with pytest.raises(BaseException) as e:  # (the SDK raises it inside task groups)
        run(without_token())
    assert _leaves(e.value) and all(isinstance(x, MCPError) for x in _leaves(e.value)), e.value
    # an oversized body is refused before it is read
    big = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
           "params": {"name": "save_conversation", "arguments": {"messages": [{"role": "user", "content": "x" * (9 << 20)}]}}}
    r = httpx2.post(url, json=big, headers={"Accept": "application/json, text/event-stream",
                                             "Authorization": f"Bearer {token}"})
    assert r.status_code == 413 and r.json()["error_code"] == "payload_too_large"


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [x for sub in e.exceptions for x in _leaves(sub)]
    return [e]


def test_http_refuses_a_remote_host_without_allow_remote(tmp_path):
    convgit.init(tmp_path / "s").close()
    r = subprocess.run([PY, "-m", "convgit", "-C", str(tmp_path / "s"), "mcp", "--http", "--host", "0.0.0.0", "--json"],
                       capture_output=True, text=True, env=_env(tmp_path), timeout=60)
    assert r.returncode == 10 and "--allow-remote" in json.loads(r.stdout)["error_message"]


def test_print_token_is_stable_and_private(tmp_path):
    convgit.init(tmp_path / "s").close()
    args = [PY, "-m", "convgit", "-C", str(tmp_path / "s"), "mcp", "--print-token", "--client", "c1", "--json"]
    one = json.loads(subprocess.run(args, capture_output=True, text=True, env=_env(tmp_path)).stdout)
    two = json.loads(subprocess.run(args, capture_output=True, text=True, env=_env(tmp_path)).stdout)
    assert one["created"] is True and two["created"] is False and one["token"] == two["token"]
    assert stat.S_IMODE((tmp_path / "s" / ".convgit" / "mcp" / "tokens.json").stat().st_mode) == 0o600


def test_a_running_server_sees_what_other_processes_write(store, tmp_path):
    hub = hub_for(store)
    first = hub.save_conversation("alice", {"messages": HISTORY})
    other = convgit.api.open_repo(tmp_path / "s")  # another writer (the CLI, another server)
    convgit.commit(other, {"messages": [{"role": "user", "content": "a note about graphemes from the CLI"}]},
                   thread="notes")
    other.close()
    excerpts = [h["excerpt"] for h in hub.search("alice", {"query": "graphemes"})["results"]]
    assert excerpts == ["a note about graphemes from the CLI"]
    assert hub.list_conversations("alice", {})["total"] == 2
    # alice's own thread is still hers to continue, and the CLI's thread is not
    assert hub.save_conversation("alice", {"messages": GROWN})["id"] == first["id"]
    notes = next(c["id"] for c in hub.list_conversations("alice", {})["conversations"] if not c["writable"])
    error(hub.save_conversation("alice", {"messages": [{"role": "user", "content": "x"}], "id": notes}),
          "unauthorized_update")
