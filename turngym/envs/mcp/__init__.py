"""MCP: envs whose tools come from a real Model Context Protocol server over stdio.

``turngym/MCP-SQLite-v0`` drives the reference ``mcp-server-sqlite`` (sandboxed; one server per
process, shared by its envs, or one per env with ``restart_each_episode=True``) and checks its
database after every call. :class:`turngym.envs.mcp.env.MCPEnv` is the base for other servers. Needs ``pip install -e ".[mcp]"`` (the ``mcp`` SDK
and the server) and bubblewrap.
"""

from turngym.core.registry import register

register(
    "turngym/MCP-SQLite-v0",
    "turngym.envs.mcp.sqlite_env:MCPSQLiteEnv",
    description="Change/query a generated company DB through the real mcp-server-sqlite (sandboxed); DB checked every turn",
    max_turns=12,
    family="mcp",
)
