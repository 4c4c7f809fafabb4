"""MCP: envs whose tools come from a real Model Context Protocol server over stdio.

``turngym/MCP-SQLite-v0`` drives the reference ``mcp-server-sqlite`` and ``turngym/MCP-Memory-v0``
the published ``@modelcontextprotocol/server-memory`` (node), each env with its own sandboxed
server; both read their world file after every call, outside the server. Any other server is a
declaration: :class:`turngym.envs.mcp.server.MCPServer` plus :class:`turngym.envs.mcp.world_env.MCPWorldEnv`
(or :class:`turngym.envs.mcp.env.MCPEnv` for full control). Needs ``pip install -e ".[mcp]"`` (the
``mcp`` SDK and the SQLite server), bubblewrap, and for MCP-Memory node + npm and
``python -m turngym.envs.mcp.memory_env --install``.
"""

from turngym.core.registry import register

__all__ = ["MAX_TURNS"]

#: The family's default turn budget: its registrations and ``MCPWorldEnv`` and ``MCPSQLiteEnv.default_max_turns`` both read
#: this one number (it lives here, not on the class, because registering must not import the env module).
MAX_TURNS = 12

register(
    "turngym/MCP-SQLite-v0",
    "turngym.envs.mcp.sqlite_env:MCPSQLiteEnv",
    description="Change/query a generated company DB through the real mcp-server-sqlite (sandboxed); DB checked every turn",
    max_turns=MAX_TURNS,
    family="mcp",
)
register(
    "turngym/MCP-Memory-v0",
    "turngym.envs.mcp.memory_env:MCPMemoryEnv",
    description="Change/query a generated knowledge graph through the published @modelcontextprotocol/server-memory "
    "(node, sandboxed); graph file checked every turn",
    max_turns=MAX_TURNS,
    family="mcp",
)
