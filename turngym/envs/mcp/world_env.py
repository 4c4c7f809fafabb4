"""A ready-made MCP family: any server whose state is one file becomes an env by declaring four things.

:class:`MCPWorldEnv` is :class:`~turngym.envs.mcp.env.MCPEnv` with the episode logic filled in
for the common shape "change a world through the tools, maybe report a fact": tasks are
:class:`WorldTask` (the starting world file, the goal world, the gold calls, the facts the reply
must hold), and after every call message the env reads the world file *itself*, outside the
server, into a canonical view and scores the DB-diff potential ``1 - d(world, goal) / d(start,
goal)``. A family declares:

* ``server``: an :class:`~turngym.envs.mcp.server.MCPServer` (command, world file, binds, limits);
* ``task_prefix`` and :meth:`generate_task` (seed -> :class:`WorldTask`);
* :meth:`read_world` (bytes -> a comparable view, never raising on bad bytes: the file is
  adversarial) and :meth:`distance` (rows/items that differ between two views);
* optionally ``answer_kinds`` (the vocabularies text answers are drawn from; see
  :mod:`turngym.core.answers`) and :meth:`check_installed`.

``docs/write_your_own_env.md`` builds one; ``turngym/MCP-Memory-v0`` is one (``memory_env.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from turngym.core.answers import missing_answers
from turngym.core.env import Transition
from turngym.core.hashing import state_hash
from turngym.core.spec import RewardSpec, Signal
from turngym.core.task import Task
from turngym.envs.mcp import MAX_TURNS
from turngym.envs.mcp.env import CallOutcome, MCPEnv, MCPState
from turngym.envs.tools.verifier import call_key

__all__ = ["MCPWorldEnv", "WorldTask", "WorldState", "WORLD_REWARD_SPEC"]


@dataclass(frozen=True)
class WorldTask(Task):
    """A request against a world file.

    Attributes:
        world: the world file's text at the start (UTF-8; tasks stay JSON, ``write_jsonl``-able).
        goal: the world file's text once the request is done (compared as views, not text).
        gold: the oracle's calls in order (``{"name": ..., "arguments": {...}}``).
        answers: facts the closing reply must contain (numbers compared by value).
    """

    world: str = ""
    goal: str = ""
    gold: tuple[Mapping[str, Any], ...] = ()
    answers: tuple[str, ...] = ()


@dataclass
class WorldState(MCPState):
    """The episode: the world's bytes (``world``), its view, its potential, the oracle's place."""

    view: Any = None
    progress: float = 0.0
    gold_done: int = 0


WORLD_REWARD_SPEC = RewardSpec(
    signals=(
        Signal("call_valid", 0, 1, "verifiable", "every call parsed, names an offered tool and matches its schema",
               weight=0.05),
        Signal("exec_ok", 0, 1, "verifiable", "fraction of the message's calls the server ran without an error",
               weight=0.05),
        Signal("forbidden_action", 0, 1, "verifiable", "a tool that is not offered was called", weight=-0.2),
        Signal("progress", 0, 1, "verifiable", "world-diff potential 1 - d(world, goal) / d(start, goal), read "
               "from the world file outside the server", weight=0.5, potential=True),
        Signal("state_match", 0, 1, "verifiable", "on the reply: the world equals the goal world"),
        Signal("answers_given", 0, 1, "verifiable", "on the reply: share of the requested facts in it (bounded: "
               "turngym.core.answers)"),
    ),
    outcome="1 if the final world equals the goal world and the reply holds every requested fact, else 0",
)


class MCPWorldEnv(MCPEnv[WorldTask, WorldState]):
    """An MCP env over a one-file world: the family declares the server, tasks and world reading.

    Outcome on the reply: 1 if the world (read by the env from the file) equals the goal and
    the reply holds every requested fact (bounded-answer rule), else 0. The oracle makes the
    gold calls one per message, then replies with the facts.
    """

    reward_spec = WORLD_REWARD_SPEC
    task_type = WorldTask
    default_max_turns = MAX_TURNS
    #: Task ids are ``{task_prefix}/{seed}``.
    task_prefix: ClassVar[str] = "mcp/world"
    #: Vocabularies of text answers (a reply naming more of one kind than it has answers scores nothing).
    answer_kinds: ClassVar[Sequence[Collection[str]]] = ()

    # -- what a family declares ------------------------------------------------------------
    def generate_task(self, seed: int) -> WorldTask:
        """The task of ``seed`` (its id must be ``f"{task_prefix}/{seed}"``)."""
        raise NotImplementedError

    def read_world(self, data: bytes) -> Any:
        """A canonical, comparable view of the world file's bytes (never raises on bad bytes)."""
        raise NotImplementedError

    def distance(self, a: Any, b: Any) -> int:
        """How many items differ between two views (0 exactly when they are equal)."""
        raise NotImplementedError

    # -- tasks -------------------------------------------------------------------------------
    def __init__(self, *, tasks: Sequence[WorldTask | str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._view_cache: tuple[WorldTask, Any, Any] | None = None
        pool = None if tasks is None else [t if isinstance(t, WorldTask) else self._task_from_id(t) for t in tasks]
        self._set_task_pool(pool)

    def _generate_task(self, rng: np.random.Generator) -> WorldTask:
        return self.generate_task(int(rng.integers(1 << 31)))

    def _regenerate_task(self, task_id: str) -> WorldTask:
        m = re.fullmatch(re.escape(self.task_prefix) + r"/(\d+)", task_id)
        if m is None:
            raise self._unknown_task(task_id)
        return self.generate_task(int(m.group(1)))

    def _views(self, task: WorldTask) -> tuple[Any, Any]:
        cached = self._view_cache
        if cached is None or cached[0] is not task:
            cached = self._view_cache = (task, self.read_world(task.world.encode()), self.read_world(task.goal.encode()))
        return cached[1], cached[2]

    def _progress(self, view: Any, task: WorldTask) -> float:
        start, goal = self._views(task)
        d, base = self.distance(view, goal), self.distance(start, goal)
        return (1.0 if d == 0 else 0.0) if base == 0 else max(0.0, 1.0 - d / base)

    # -- MCPEnv hooks ------------------------------------------------------------------------
    def _initial_world(self, task: WorldTask) -> bytes:
        return task.world.encode()

    def _new_state(self, task: WorldTask, world: bytes) -> WorldState:
        view = self._views(task)[0]
        return WorldState(world=world, view=view, progress=self._progress(view, task))

    def _after_calls(self, outcomes: Sequence[CallOutcome], world: bytes) -> Transition:
        st, task = self.state, self.current_task
        view = st.view if world == st.world else self.read_world(world)
        done = st.gold_done
        for o in outcomes:
            if done < len(task.gold) and call_key(o.call.name, o.call.arguments) == call_key(
                    task.gold[done]["name"], task.gold[done]["arguments"]):
                done += 1
        self.state = WorldState(world=world, view=view, progress=self._progress(view, task), gold_done=done)
        return Transition(obs="", signals={"call_valid": 1.0, "forbidden_action": 0.0,
                                           "exec_ok": sum(not o.failed for o in outcomes) / len(outcomes)})

    def _reply(self, text: str) -> Transition:
        task = self.current_task
        match = self.distance(self.state.view, self._views(task)[1]) == 0
        missing = missing_answers(task.answers, text, kinds=self.answer_kinds, context=task.prompt)
        answered = 1.0 - len(missing) / len(task.answers) if task.answers else 1.0
        success = match and not missing
        return Transition(
            obs=f"The conversation is over: the request was {'done' if success else 'not done'}.",
            terminated=True,
            signals={"state_match": float(match), "answers_given": answered},
            outcome=self._outcome(success, match, answered, "replied"),
        )

    def _outcome(self, success: bool, match: bool, answered: float, reason: str) -> dict[str, Any]:
        return {"reward": float(success), "success": success, "reason": reason, "final_state_match": match,
                "answers_given": answered, "progress": self.state.progress}

    def _outcome_on_truncation(self) -> dict[str, Any]:
        match = self.distance(self.state.view, self._views(self.current_task)[1]) == 0
        return self._outcome(False, match, 0.0, "max_turns")

    def _state_signals(self) -> Mapping[str, float]:
        return {"progress": self.state.progress}

    def _state_key(self) -> str:
        if self.task is None:
            return state_hash("empty")
        return state_hash((self.task_prefix, repr(self.state.view)))

    # -- scripted policies -------------------------------------------------------------------
    def _oracle_action(self) -> str:
        st, task = self.state, self.current_task
        if st.gold_done < len(task.gold):
            call = task.gold[st.gold_done]
            return json.dumps({"name": call["name"], "arguments": call["arguments"]})
        return "Done." if not task.answers else "Done: " + ", ".join(task.answers) + "."

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random offered tool with empty arguments (often invalid) or, 20% of the time, a reply."""
        tools = sorted(self._offered)
        if rng.random() < 0.2 or not tools:
            return str(rng.choice(["OK, done.", "I can't do that, sorry."]))
        return json.dumps({"name": tools[int(rng.integers(len(tools)))], "arguments": {}})
