"""Memory for agents: the rules of ``convgit mcp`` (docs/mcp.md), without the MCP SDK.

``hub`` holds the tools as functions returning JSON values, ``handles`` the opaque names
given out instead of raw ids, ``state`` what the server keeps beside the store (``.convgit/
mcp/``). ``mcp`` binds them to the official MCP SDK (``pip install 'convgit[mcp]'``) and is
imported only by ``convgit mcp``.
"""
