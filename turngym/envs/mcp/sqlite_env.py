"""``turngym/MCP-SQLite-v0``: change and query a database through the real ``mcp-server-sqlite``."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turngym.core.answers import missing_answers
from turngym.core.env import Transition
from turngym.core.errors import ConfigError
from turngym.core.hashing import state_hash
from turngym.core.spec import RewardSpec, Signal
from turngym.envs.mcp import MAX_TURNS
from turngym.envs.mcp.client import ToolReply
from turngym.envs.mcp.env import CallOutcome, MCPEnv, MCPState
from turngym.envs.mcp.server import DEADLINE_ENV, MCPServer
from turngym.envs.mcp.sqlite_tasks import (
    ANSWER_KINDS,
    SQLITE_ID_PREFIX,
    SQLiteTask,
    build_database,
    generate_sqlite_task,
    sqlite_task_from_id,
)
from turngym.envs.mcp.sqlite_world import World, progress, read_world
from turngym.envs.tools.verifier import call_key

__all__ = ["MCPSQLiteEnv", "SQLiteState", "SERVER_MAIN", "sqlite_server"]

#: How the sandbox starts ``mcp-server-sqlite``: its console script's entry point, by import,
#: after giving every SQLite connection the server opens (one per call) a progress handler that
#: interrupts the statement past the env's call deadline (:data:`DEADLINE_ENV`). The deadline is
#: kept inside the server's own work: a query that never ends is answered ("interrupted") in time,
#: instead of hanging the server until the client kills and restarts it.
SERVER_MAIN = (
    "import os, sqlite3, sys, time\n"
    f"_connect, _budget = sqlite3.connect, float(os.environ.get({DEADLINE_ENV!r}, '5'))\n"
    "def _connect_with_deadline(*args, **kwargs):\n"
    "    con = _connect(*args, **kwargs)\n"
    "    end = time.monotonic() + _budget\n"
    "    con.set_progress_handler(lambda: time.monotonic() > end, 10000)\n"
    "    return con\n"
    "sqlite3.connect = _connect_with_deadline\n"
    "from mcp_server_sqlite import main\n"
    "sys.argv[0] = 'mcp-server-sqlite'\n"
    "main()\n"
)

SYSTEM_PROMPT = """\
You are an assistant that works on a SQLite database through tools. Each of your messages is either tool calls or a reply to the user.
To call a tool, write JSON: {"name": "TOOL", "arguments": {...}}. For several calls in order, write a JSON list of them
(or one <tool_call>{...}</tool_call> block per call). Each result comes back in a <tool_response> block.
When the request is done, reply to the user in plain text with no tool call (that ends the conversation); put any
facts the user asked for in that reply. The tools are listed in a <tools> block.
Example:
User: How many projects are paused?
You: {"name": "read_query", "arguments": {"query": "SELECT COUNT(*) AS n FROM projects WHERE status = 'paused'"}}
Reply: <tool_response> {"name": "read_query", "content": "[{'n': 2}]"} </tool_response>
You: 2 projects are paused."""

#: What mcp-server-sqlite's answers start with when the tool failed (it never sets isError).
_PYTHON = os.path.realpath(sys.executable)
"""This interpreter, resolved: ``sys.executable`` may be relative to a cwd the sandbox does not show
(``../venv/bin/python`` gives ``/cwd/../venv/bin/python``) or reached through links it does not bind.
With ``-S`` the venv's site-packages come from the sandbox's ``PYTHONPATH`` (``PythonRuntime.env``),
not from the venv's ``pyvenv.cfg``, so the resolved path keeps them, as ``run_python`` does."""


def sqlite_server(python: str = _PYTHON, site_packages: str | None = None) -> MCPServer:
    """``mcp-server-sqlite`` run by ``python``; ``site_packages``: where that interpreter finds the
    server and its ``mcp<2`` (a venv of its own), shown read-only and put first on its path -- so
    turngym's client may use ``mcp`` 2.x while the server keeps the 1.x API it was written for."""
    env = {} if site_packages is None else {"PYTHONPATH": site_packages}
    return MCPServer(
        command=(python, "-S", "-c", SERVER_MAIN, "--db-path", "{world}"),
        env=env,
        ro_binds=() if site_packages is None else (site_packages,),
        excluded_tools={"append_insight": "its memo lives in the server's memory, outside the checked database"},
    )


_ERROR_PREFIXES = ("Error:", "Database error:")
_GOAL_CACHE = 256
#: The server's tools that only read: a new read is how an agent learns the database.
_READ_TOOLS = frozenset({"read_query", "list_tables", "describe_table"})


@dataclass
class SQLiteState(MCPState):
    """The episode: the world's bytes and view, and what the signals need.

    Attributes:
        view: the canonical view of ``world`` (:func:`read_world`).
        progress: the DB-diff potential of ``view``.
        seen: keys of the calls already made on each world (a repeat learns nothing).
        gold_done: how many of the task's gold calls were made, in order (the oracle's place).
    """

    view: World
    progress: float = 0.0
    seen: frozenset[str] = frozenset()
    gold_done: int = 0


class MCPSQLiteEnv(MCPEnv[SQLiteTask, SQLiteState]):
    """Change and query a company database through the real ``mcp-server-sqlite`` MCP server.

    ## Description
    The user asks for changes to a small SQLite database (hire, remove, give raises, move
    people, close projects, set budgets) and/or a fact from it. The agent acts only through
    the tools of ``mcp-server-sqlite`` (the reference MCP server, over stdio, in a bubblewrap
    sandbox). After every call message the env reads the database file itself — from the
    host, outside the server's reach — and compares it with the goal database (the starting
    one plus the gold changes), so every turn carries a verifiable DB-diff signal.

    ## Task Distribution
    Generated from a seed (:func:`generate_sqlite_task`): 3 tables, 3-9 rows each; 0-2
    changes on distinct tables plus an optional question about the result (never neither).
    ``tasks=`` plays a fixed list; ids are ``mcp/sqlite/SEED``.

    ## Action Space
    Tools-v0's grammar over the server's own tool list: ``{"name": ..., "arguments": {...}}``,
    a JSON list of calls, or ``<tool_call>`` blocks; a message with no call is the reply.
    Valid: ``{"name": "read_query", "arguments": {"query": "SELECT * FROM projects"}}``,
    ``{"name": "describe_table", "arguments": {"table_name": "employees"}}``, ``There are 4.``
    Invalid (nothing runs): a broken call, an unknown tool, ``append_insight`` (not offered:
    its memo lives in the server's memory, which no check or snapshot can see; calling it is
    also a forbidden action), arguments that break the tool's JSON schema. SQL the server
    rejects is *not* invalid: the call ran, and the error text is the observation.

    ## Observation
    On reset: the offered tools (a ``<tools>`` block) and the request. After calls: one
    ``<tool_response>`` per call with the server's text.

    ## Rewards
    Outcome (on the reply): 1 if the database equals the goal database and the reply holds
    every requested fact, else 0.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | call_valid | 0–1 | call messages | every call parsed, names an offered tool and matches its schema |
    | exec_ok | 0–1 | call messages | fraction of the calls that ran without an error |
    | forbidden_action | 0–1 | call messages | a tool not offered, or the message changed the schema |
    | unneeded_call | 0–1 | call messages | if progress did not rise: fraction of calls that failed, repeated a call on the same database, or could write |
    | progress | 0–1 | every turn | DB-diff potential: 1 - d(db, goal) / d(initial, goal) over rows |
    | state_match | 0–1 | the reply | the database equals the goal database |
    | answers_given | 0–1 | the reply | share of the requested facts in the reply |

    ## Starting State
    The task's database; the env's own server (started on the first reset, kept across its
    episodes, its scratch dirs checked after every call) reopens the file on every call.

    ## Episode End
    Terminated by the reply; truncated after ``max_turns`` messages (default 12). An
    infrastructure failure (the server cannot be started, or dies and cannot be restarted)
    ends the episode with ``info["infra_error"]``, unscored.

    ## Arguments
    ``tasks`` (a fixed list of :class:`SQLiteTask` or ids), ``call_timeout_s`` (5),
    ``start_timeout_s``, ``restart_each_episode`` (False), ``share_server`` (False), plus the base class's.

    >>> import turngym
    >>> env = turngym.make("turngym/MCP-SQLite-v0")
    >>> obs, info = env.reset(seed=0)
    >>> while True:
    ...     obs, reward, terminated, truncated, info = env.step(env.oracle_action())
    ...     if terminated or truncated:
    ...         break
    >>> reward, info["signals"]["state_match"]
    (1.0, 1.0)
    >>> env.close()

    ## Oracle
    Makes the gold calls one per message (the changes, then the question's query), then
    replies with the requested facts.

    ## Version History
    * v0: initial release (mcp-server-sqlite 2025.4.25).
    """

    reward_spec = RewardSpec(
        signals=(
            Signal(
                "call_valid",
                0,
                1,
                "verifiable",
                "every call of the message parsed, names an offered tool and matches its JSON schema",
                weight=0.05,
            ),
            Signal(
                "exec_ok",
                0,
                1,
                "verifiable",
                "fraction of the message's calls that the server ran without an error",
                weight=0.05,
            ),
            Signal(
                "forbidden_action",
                0,
                1,
                "verifiable",
                "a tool that is not offered was called, or the message changed the database schema",
                weight=-0.2,
            ),
            Signal(
                "unneeded_call",
                0,
                1,
                "verifiable",
                "without progress: fraction of the message's calls that failed, repeated a call on the same database, or could write",
                weight=-0.02,
            ),
            Signal(
                "progress",
                0,
                1,
                "verifiable",
                "DB-diff potential: 1 - d(db, goal) / d(initial, goal), rows compared as multisets per table",
                weight=0.5,
                potential=True,
            ),
            Signal(
                "state_match",
                0,
                1,
                "verifiable",
                "on the reply: the database equals the goal database",
            ),
            Signal(
                "answers_given",
                0,
                1,
                "verifiable",
                "on the reply: share of the requested facts present in it",
            ),
        ),
        outcome="1 if the final database equals the goal database and the reply holds every requested fact, else 0",
    )
    default_max_turns = MAX_TURNS
    task_type = SQLiteTask
    system_prompt = SYSTEM_PROMPT
    server = sqlite_server()

    def __init__(self, *, tasks: Sequence[SQLiteTask | str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._set_task_pool(None if tasks is None else [t if isinstance(t, SQLiteTask) else self._task_from_id(t) for t in tasks])
        self._goals: OrderedDict[str, tuple[SQLiteTask, bytes, World, World]] = OrderedDict()

    # -- tasks -------------------------------------------------------------------------------
    def _generate_task(self, rng: np.random.Generator) -> SQLiteTask:
        return generate_sqlite_task(int(rng.integers(1 << 31)))

    def _regenerate_task(self, task_id: str) -> SQLiteTask:
        if not task_id.startswith(SQLITE_ID_PREFIX):
            raise self._unknown_task(task_id)
        return sqlite_task_from_id(task_id)

    def _worlds(self, task: SQLiteTask) -> tuple[bytes, World, World]:
        """The task's initial bytes, initial view and goal view (cached per task)."""
        hit = self._goals.get(task.id)
        if hit is not None and (hit[0] is task or hit[0] == task):
            self._goals.move_to_end(task.id)
            return hit[1], hit[2], hit[3]
        initial = build_database(task.setup)
        entry = (task, initial, read_world(initial), read_world(build_database((*task.setup, *task.writes))))
        self._goals[task.id] = entry
        if len(self._goals) > _GOAL_CACHE:
            self._goals.popitem(last=False)
        return entry[1], entry[2], entry[3]

    # -- MCPEnv hooks ---------------------------------------------------------------------------
    def check_installed(self) -> None:
        if self.server_spec.command[:1] != (_PYTHON,):
            return  # the server runs on another interpreter (its own venv): its packages are its own
        fix = 'pip install -e ".[mcp]" (or: pip install "mcp>=1.6,<2" mcp-server-sqlite)'
        if importlib.util.find_spec("mcp_server_sqlite") is None:
            raise ConfigError(f"{type(self).__name__} needs the mcp-server-sqlite package: {fix}")
        try:
            major = int(importlib.metadata.version("mcp").split(".")[0])
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError(f"{type(self).__name__} needs the mcp SDK: {fix}") from None
        if major >= 2:
            raise ConfigError(
                f"mcp-server-sqlite is written against mcp 1.x, but mcp {importlib.metadata.version('mcp')} is "
                f"installed (the server would die at start); {fix}"
            )

    def _initial_world(self, task: SQLiteTask) -> bytes:
        return self._worlds(task)[0]

    def _new_state(self, task: SQLiteTask, world: bytes) -> SQLiteState:
        _, initial, goal = self._worlds(task)
        return SQLiteState(world=world, view=initial, progress=progress(initial, initial, goal))

    def _call_failed(self, reply: ToolReply) -> bool:
        return reply.is_error or reply.text.startswith(_ERROR_PREFIXES)

    def _after_calls(self, outcomes: Sequence[CallOutcome], world: bytes) -> Transition:
        st, task = self.state, self.current_task
        _, initial, goal = self._worlds(task)
        before = st.view
        view = before if world == st.world else read_world(world)
        new_progress = progress(view, initial, goal)
        gained = new_progress > st.progress
        seen = set(st.seen)
        unneeded = 0
        gold_done = st.gold_done
        for o in outcomes:
            key = call_key(o.call.name, o.call.arguments)
            if gold_done < len(task.gold) and key == call_key(task.gold[gold_done]["name"], task.gold[gold_done]["arguments"]):
                gold_done += 1
            where = f"{before.key}:{key}"
            repeat = where in seen
            seen.add(where)
            if not gained and (o.failed or repeat or o.call.name not in _READ_TOOLS):
                unneeded += 1
        self.state = SQLiteState(world=world, view=view, progress=new_progress, seen=frozenset(seen), gold_done=gold_done)
        n = len(outcomes)
        return Transition(
            obs="",
            signals={
                "call_valid": 1.0,
                "exec_ok": sum(not o.failed for o in outcomes) / n,
                "forbidden_action": 1.0 if view.schema != before.schema else 0.0,
                "unneeded_call": unneeded / n,
            },
        )

    def _reply(self, text: str) -> Transition:
        st, task = self.state, self.current_task
        goal = self._worlds(task)[2]
        match = st.view.key == goal.key
        missing = missing_answers(task.answers, text, kinds=ANSWER_KINDS, context=task.prompt)
        answered = 1.0 - len(missing) / len(task.answers) if task.answers else 1.0
        success = match and not missing
        return Transition(
            obs=f"The conversation is over: the request was {'done' if success else 'not done'}.",
            terminated=True,
            signals={"state_match": 1.0 if match else 0.0, "answers_given": answered},
            outcome=self._outcome(success, match, answered, "replied"),
        )

    def _outcome(self, success: bool, match: bool, answered: float, reason: str) -> dict[str, Any]:
        return {
            "reward": 1.0 if success else 0.0,
            "success": success,
            "reason": reason,
            "final_state_match": match,
            "answers_given": answered,
            "progress": self.state.progress,
        }

    def _outcome_on_truncation(self) -> dict[str, Any]:
        goal = self._worlds(self.current_task)[2]
        return self._outcome(False, self.state.view.key == goal.key, 0.0, "max_turns")

    def _state_signals(self) -> Mapping[str, float]:
        return {"progress": self.state.progress}

    def _state_key(self) -> str:
        if self.task is None:
            return state_hash("empty")
        return state_hash(("mcp-sqlite", self.state.view.key))

    # -- scripted policies ---------------------------------------------------------------------
    def _oracle_action(self) -> str:
        st, task = self.state, self.current_task
        if st.gold_done < len(task.gold):
            call = task.gold[st.gold_done]
            return json.dumps({"name": call["name"], "arguments": dict(call["arguments"])})
        return "Done." if not task.answers else "Done: " + ", ".join(task.answers) + "."

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random call (random SQL from a small pool, random table) or, 20% of the time, a reply."""
        if rng.random() < 0.2:
            return str(rng.choice(["OK, done.", "Could you tell me more?", "I can't do that, sorry."]))
        tools = sorted(self._offered) or ["read_query"]
        name = tools[int(rng.integers(len(tools)))]
        table = str(rng.choice(_TABLES))
        if name == "describe_table":
            args: dict[str, Any] = {"table_name": table}
        elif name == "list_tables":
            args = {}
        else:
            args = {"query": str(rng.choice(_SQL)).format(t=table)}
        return json.dumps({"name": name, "arguments": args})


_TABLES = ("employees", "projects", "departments", "nope")
_SQL = (
    "SELECT * FROM {t}",
    "SELECT COUNT(*) FROM {t}",
    "DELETE FROM {t} WHERE rowid = 1",
    "UPDATE employees SET salary = salary + 100",
    "UPDATE projects SET status = 'done'",
    "INSERT INTO departments VALUES ('Ops', 100000)",
    "SELEC oops",
    "CREATE TABLE IF NOT EXISTS notes (x TEXT)",
)
