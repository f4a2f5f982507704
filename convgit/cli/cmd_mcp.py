"""mcp: the MCP server (stdio or HTTP), its tokens and grants (docs/mcp.md).

The SDK and the memory hub are imported inside the commands: ``convgit --help`` loads this
module, and must load neither pydantic nor sqlite3.
"""

from __future__ import annotations

from typing import Optional

import typer

from ..errors import InvalidInput, MissingDependency
from . import output
from .app import _Group, app, get_repo

INSTALL = "pip install 'convgit[mcp]'"
# What the extra brings: one of these missing means the extra is not (fully) installed.
SDK_MODULES = ("mcp", "mcp_types", "pydantic", "pydantic_core", "starlette", "uvicorn", "anyio", "httpx2",
               "sse_starlette", "jwt")

mcp_app = typer.Typer(cls=_Group, invoke_without_command=True, rich_markup_mode=None,
                      help="Serve the store to agents over MCP (stdio, or --http), and manage their access. "
                           "Needs the extra: pip install 'convgit[mcp]'.",
                      context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(mcp_app, name="mcp")

CLIENT_OPT = typer.Option("default", "--client", metavar="NAME",
                          help="The client's identity: it owns the threads it creates (over HTTP: the token's name).")


@mcp_app.callback()
def mcp_serve(
    ctx: typer.Context,
    http: bool = typer.Option(False, "--http", help="Serve streamable HTTP (bearer token) instead of stdio."),
    host: str = typer.Option("127.0.0.1", "--host", metavar="HOST", help="HTTP address to listen on (loopback unless --allow-remote)."),
    port: int = typer.Option(8788, "--port", metavar="PORT", help="HTTP port (0: any free port, printed on stderr)."),
    client: str = CLIENT_OPT,
    print_token: bool = typer.Option(False, "--print-token", help="Print the HTTP token of --client (made on first use) and exit."),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="Allow a non-loopback --host (the token is then all that guards the store)."),
    trusted_local: bool = typer.Option(False, "--trusted-local", help="Give out raw ids and thread names instead of handles (debugging)."),
    read_scope: Optional[str] = typer.Option(None, "--read-scope", metavar="PREFIX", help="Only threads whose name starts with PREFIX are readable."),
    json_: bool = typer.Option(False, "--json", help="With --print-token: output JSON."),
) -> None:
    """Serve this store's conversations to MCP clients (Claude Code, Cursor, ...): save, search, read, fork.

    stdio by default (what a client's config launches). Needs the extra: pip install 'convgit[mcp]'.
    """
    if ctx.invoked_subcommand is not None:
        return
    output.set_json(json_)
    from ..memory.state import HubState, check_client_name

    check_client_name(client)
    repo = get_repo()
    if print_token:
        token, created = HubState(repo.path, fsync=repo.config.fsync).ensure_token(client)
        if json_:
            output.emit_json({"client": client, "token": token, "created": created})
        else:
            output.line(token)
        return
    from ..config import is_loopback

    if http and not allow_remote and not is_loopback(host):
        raise InvalidInput(f"--host {host} is not a loopback address: add --allow-remote to serve beyond this machine")
    server = _server_module()
    from ..config import load_mcp_limits
    from ..memory.hub import MemoryHub

    hub = MemoryHub(repo, load_mcp_limits(repo.path / "config.toml"), trusted_local=trusted_local,
                    read_scope=read_scope)
    try:
        if http:
            _, created = hub.state.ensure_token(client)
            if created:
                output.info(f"convgit mcp: made an HTTP token for client {client!r} (convgit mcp --print-token --client {client})")
            server.serve_http(hub, host, port, lambda url: output.info(f"convgit mcp: serving {url}"))
        else:
            server.serve_stdio(hub, client)
    finally:
        hub.close()


def _server_module():
    try:
        from ..memory import server
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in SDK_MODULES:
            raise  # a module of convgit itself: a bug, with its traceback
        raise MissingDependency(f"convgit mcp needs the MCP SDK (mcp>=2.3), which is not installed ({e.name} is "
                                f"missing): {INSTALL}", missing=e.name, install=INSTALL) from None
    return server


@mcp_app.command("grant")
def mcp_grant(
    client: str = typer.Argument(..., metavar="NAME", help="The client (its --client name or token name)."),
    thread: str = typer.Argument(..., metavar="THREAD", help="The thread it may then update."),
    json_: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """Let client NAME append to THREAD (a thread it did not create)."""
    output.set_json(json_)
    from ..errors import NotFound
    from ..ids import check_thread_name
    from ..memory.state import HubState

    repo = get_repo()
    check_thread_name(thread)
    if repo.refs.read(thread) is None:
        raise NotFound(f"thread {thread!r} does not exist", thread=thread)
    state = HubState(repo.path, fsync=repo.config.fsync)
    try:
        changed = state.grant(client, thread)
    finally:
        state.close()
    doc = {"status": "granted" if changed else "unchanged", "client": client, "thread": thread}
    output.emit_json(doc) if json_ else output.line(
        f"{client} may now update {thread}" if changed else f"{client} could already update {thread}")


@mcp_app.command("revoke")
def mcp_revoke(
    client: str = typer.Argument(..., metavar="NAME", help="The client."),
    thread: str = typer.Argument(..., metavar="THREAD", help="The thread granted to it."),
    json_: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """Withdraw a grant (a client keeps the threads it created)."""
    output.set_json(json_)
    from ..memory.state import HubState, check_client_name

    check_client_name(client)
    repo = get_repo()
    state = HubState(repo.path, fsync=repo.config.fsync)
    try:
        changed = state.revoke(client, thread)
    finally:
        state.close()
    doc = {"status": "revoked" if changed else "unchanged", "client": client, "thread": thread}
    output.emit_json(doc) if json_ else output.line(
        f"{client} may no longer update {thread}" if changed else f"{client} had no grant on {thread}")


@mcp_app.command("grants")
def mcp_grants(json_: bool = typer.Option(False, "--json", help="Output JSON.")) -> None:
    """List which client may update which thread (created by it, or granted)."""
    output.set_json(json_)
    from ..memory.state import HubState
    from ..timefmt import iso

    repo = get_repo()
    state = HubState(repo.path, fsync=repo.config.fsync)
    try:
        rows = [{**r, "since": iso(r.pop("since_ms"))} for r in state.grants()]
    finally:
        state.close()
    if json_:
        output.emit_json(rows)
        return
    if not rows:
        output.info("no client owns or was granted a thread yet")
    for r in rows:
        output.line(f"{r['thread']}  {r['client']}  {r['why']}")
