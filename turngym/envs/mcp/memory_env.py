"""``turngym/MCP-Memory-v0``: keep a knowledge graph through the published ``@modelcontextprotocol/server-memory``.

The env is the declaration below (:class:`~turngym.envs.mcp.world_env.MCPWorldEnv` plays the episode):
the node server sandboxed with its ``node_modules`` read-only, the graph's JSONL file as the world (read
outside the server after every call). Install it once: ``python -m turngym.envs.mcp.memory_env --install``.
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

from turngym.core.errors import ConfigError
from turngym.envs.mcp.memory_tasks import ANSWER_KINDS, MEMORY_PREFIX, generate_memory_task, graph_distance, read_graph
from turngym.envs.mcp.npm import npm_entry, npm_install, npm_package_dir
from turngym.envs.mcp.server import MCPServer
from turngym.envs.mcp.world_env import MCPWorldEnv, WorldTask

__all__ = ["MCPMemoryEnv", "PACKAGE", "VERSION"]

PACKAGE, VERSION = "@modelcontextprotocol/server-memory", "2026.8.31"


class MCPMemoryEnv(MCPWorldEnv):
    """Change and query a knowledge graph (people, organizations, ``works_at``) via server-memory's own tools.

    Signals and outcome: :data:`~turngym.envs.mcp.world_env.WORLD_REWARD_SPEC` (progress: the item diff of
    the graph file against the goal graph). Tasks: ``mcp/memory/SEED`` (:mod:`.memory_tasks`).
    """

    server = MCPServer(
        command=("node", str(npm_entry(PACKAGE, VERSION, "dist/index.js"))),
        world_file="memory.jsonl",
        env={"MEMORY_FILE_PATH": "{world}"},
        ro_binds=(str(npm_package_dir(PACKAGE, VERSION)),),
        memory_mb=512,
        address_space_mb=16384,  # V8 reserves its heap cage up front: it dies at start under ~1.3 GB of RLIMIT_AS
        processes=64,
    )
    task_prefix = MEMORY_PREFIX
    answer_kinds = ANSWER_KINDS

    def check_installed(self) -> None:
        if shutil.which("node") is None or not npm_entry(PACKAGE, VERSION, "dist/index.js").is_file():
            raise ConfigError(f"{type(self).__name__} needs node and {PACKAGE}@{VERSION}: apt-get install -y nodejs "
                              "npm, then python -m turngym.envs.mcp.memory_env --install")

    def generate_task(self, seed: int) -> WorldTask:
        return generate_memory_task(seed)

    def read_world(self, data: bytes) -> Any:
        return read_graph(data)

    def distance(self, a: Any, b: Any) -> int:
        return graph_distance(a, b)


if __name__ == "__main__" and sys.argv[1:] == ["--install"]:
    print(npm_install(PACKAGE, VERSION))
