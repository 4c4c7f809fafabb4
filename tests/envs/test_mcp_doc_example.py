"""A team-notes env over the published @modelcontextprotocol/server-memory, in public API only."""

from __future__ import annotations

import json
from typing import Any

from turngym.envs.mcp.memory_env import PACKAGE, VERSION  # the pinned npm package, installed into the cache
from turngym.envs.mcp.npm import npm_entry, npm_package_dir
from turngym.envs.mcp.server import MCPServer
from turngym.envs.mcp.world_env import MCPWorldEnv, WorldTask


def entity(name: str, kind: str, *facts: str) -> str:
    return json.dumps({"type": "entity", "name": name, "entityType": kind, "observations": list(facts)})


START = "\n".join([entity("Ada", "person", "lives in Oslo"), entity("Bo", "person", "lives in Rome")])
TASKS = [
    WorldTask(id="notes/0", prompt="Note that Bo speaks Italian.", world=START,
              goal="\n".join([entity("Ada", "person", "lives in Oslo"),
                              entity("Bo", "person", "lives in Rome", "speaks Italian")]),
              gold=({"name": "add_observations",
                     "arguments": {"observations": [{"entityName": "Bo", "contents": ["speaks Italian"]}]}},)),
    WorldTask(id="notes/1", prompt="Where does Ada live?", world=START, goal=START,
              gold=({"name": "open_nodes", "arguments": {"names": ["Ada"]}},), answers=("Oslo",)),
]


class NotesEnv(MCPWorldEnv):
    """Keep team notes in a knowledge graph through server-memory (a node MCP server)."""

    server = MCPServer(
        command=("node", str(npm_entry(PACKAGE, VERSION, "dist/index.js"))),
        world_file="memory.jsonl",                        # the server's state: one file
        env={"MEMORY_FILE_PATH": "{world}"},              # where the server keeps it
        ro_binds=(str(npm_package_dir(PACKAGE, VERSION)),),  # node_modules, read-only
        memory_mb=512,                                    # resident memory (cgroup)
        address_space_mb=16384,                           # V8 reserves far more than it uses
        processes=64,
    )
    task_prefix = "notes"
    answer_kinds = ({"Oslo", "Rome", "Paris", "Lima"},)   # a reply naming every city answers nothing

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(tasks=TASKS, **kwargs)

    def generate_task(self, seed: int) -> WorldTask:
        return TASKS[seed % len(TASKS)]

    def read_world(self, data: bytes) -> Any:             # the file, read outside the server
        try:
            lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
            return tuple(sorted((x["name"], tuple(sorted(x["observations"]))) for x in lines
                                if x.get("type") == "entity"))
        except (ValueError, KeyError, TypeError, AttributeError):
            return ("unreadable",)

    def distance(self, a: Any, b: Any) -> int:
        return len(set(a) ^ set(b))
# --- end of the example (docs/write_your_own_env.md's MCP section shows everything above this line) ---

import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

import turngym  # noqa: E402
from tests.envs.memory_server_fixture import require_memory_server  # noqa: E402

DOC = Path(__file__).parents[2] / "docs" / "write_your_own_env.md"
MARKER = "# --- end of the example"


def test_the_doc_shows_this_files_example_verbatim():
    example = Path(__file__).read_text(encoding="utf-8").split(MARKER)[0]
    section = DOC.read_text(encoding="utf-8").split("## An MCP server")[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks and blocks[0] == example, f"the MCP section's first python block must be the top of {Path(__file__).name}"


@pytest.fixture
def server_installed():
    require_memory_server()


def test_notes_env_keeps_the_contract_and_the_oracle_wins(server_installed):
    env = NotesEnv()
    try:
        turngym.check_env(env)
        for task in TASKS:
            env.reset(options={"task": task})
            while True:
                *_, reward, term, trunc, info = env.step(env.oracle_action())
                if term or trunc:
                    break
            assert reward == 1.0, info["outcome"]
        env.reset(options={"task": TASKS[1]})
        env.step(json.dumps(TASKS[1].gold[0]))
        assert env.step("Oslo, Rome, Paris or Lima")[1] == 0.0
    finally:
        env.close()
