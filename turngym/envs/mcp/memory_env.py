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
    """Change and query a knowledge graph through the published ``@modelcontextprotocol/server-memory``.

    ## Description
    The user asks for changes to a small knowledge graph (people, organizations, ``works_at``
    relations, facts as observations) and/or a fact from it. The agent acts only through the
    node server's own tools (``create_entities``, ``add_observations``, ``delete_entities``,
    ``read_graph``, ``open_nodes``, ...), sandboxed; after every call message the env reads the
    graph's JSONL file itself, outside the server, and diffs it against the goal graph.

    ## Task Distribution
    Generated from a seed (:func:`~.memory_tasks.generate_memory_task`): 4-6 people, 3 organizations;
    0-2 changes on distinct people plus an optional question (never neither). Ids ``mcp/memory/SEED``.

    ## Action Space
    Tools-v0's grammar over the server's tool list: ``{"name": ..., "arguments": {...}}``, a JSON
    list of calls, or ``<tool_call>`` blocks; a message with no call is the reply.

    ## Observation
    On reset: the offered tools and the request. After calls: one ``<tool_response>`` per call.

    ## Rewards
    Outcome (on the reply): 1 if the graph equals the goal graph and the reply holds every
    requested fact (bounded: :mod:`turngym.core.answers`), else 0.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | call_valid | 0–1 | call messages | every call parsed, names an offered tool and matches its schema |
    | exec_ok | 0–1 | call messages | fraction of the calls the server ran without an error |
    | forbidden_action | 0–1 | call messages | a tool not offered was called |
    | progress | 0–1 | every turn | graph-diff potential: 1 - d(graph, goal) / d(start, goal) over items |
    | state_match | 0–1 | the reply | the graph equals the goal graph |
    | answers_given | 0–1 | the reply | share of the requested facts in the reply |

    ## Episode End
    Terminated by the reply; truncated after ``max_turns`` messages (default 12); a server that
    cannot be (re)started ends it with ``info["infra_error"]``, unscored.
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
