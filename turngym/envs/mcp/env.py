"""The MCP env base: a real MCP server's tools are the action grammar; its world is checked.

:class:`MCPEnv` owns what every MCP family shares, and a family (``sqlite_env.py``) adds the
tasks, the reading of its world and the verdicts:

* **the server** — started in a bubblewrap session on the first ``reset`` (not at
  construction: ``make(id).reward_spec`` starts nothing), kept across episodes and restarted
  when it died, hung, or ``restart_each_episode`` asks for it. Keeping it is exact because the
  world lives in one file of the session's working dir that the env rewrites on every reset
  and restore, and the server reopens it on every call (a family whose server keeps state in
  memory says so and restarts per episode).
* **the grammar** — ``tools/list`` of the server, in OpenAI format, minus the tools the family
  excludes (and says why); calls are parsed exactly as in ``turngym/Tools-v0``
  (:func:`turngym.envs.tools.parsing.parse_message`: a JSON call, a JSON list of calls, or
  ``<tool_call>`` blocks; a message without a call is the reply that ends the episode) and
  checked against the tool's JSON schema before anything runs.
* **blame** — a tool that runs and fails (bad SQL) is the agent's failure: its error text is
  the observation. A call that gets no answer, or after which the server is gone, is retried
  once on a restarted server with the world put back as it was before the call: if the
  restart fails, or the retry succeeds, the fault was the infrastructure's (an
  ``infra_error``, or nothing the agent sees); if the same call fails again on a healthy
  server, it is the call's doing (a query that never ends) and the agent is told the call did
  not complete and changed nothing.
* **state** — the world file's bytes after every call message, read on the host by the
  session's link-safe reader; ``snapshot`` holds them, ``restore`` writes them back.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from turngym.core.env import Transition, TurngymEnv
from turngym.core.errors import ConfigError
from turngym.core.parsing import ToolCall
from turngym.core.task import Task
from turngym.envs.mcp.client import CallTimeout, ServerLost, ToolReply, mcp_tools_to_openai
from turngym.envs.mcp.server import SERVER_LIMITS, SandboxedServer
from turngym.envs.tools.parsing import Reply, parse_message
from turngym.envs.tools.schema import Tool, oversized_integer, validate_arguments

__all__ = ["MCPEnv", "MCPState", "CallOutcome"]

TaskT = TypeVar("TaskT", bound=Task)
StateT = TypeVar("StateT", bound="MCPState")


@dataclass
class MCPState:
    """What every MCP episode holds (families subclass it).

    Attributes:
        world: the world file's bytes after the last call message.
    """

    world: bytes


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """One executed call: what the server said, and whether it failed.

    Attributes:
        call: the call as parsed.
        reply: the server's answer (for a call that never completed, the env's note).
        failed: the tool reported an error, or the call did not complete.
    """

    call: ToolCall
    reply: ToolReply
    failed: bool


class MCPEnv(TurngymEnv[TaskT, StateT], Generic[TaskT, StateT]):
    """Base class of envs whose actions are calls to a real MCP server's tools.

    Arguments (beyond the base class's):
        call_timeout_s: deadline of one tool call (then the blame rule of the module doc).
        start_timeout_s: deadline of a server start (start-up, ``initialize``, ``tools/list``).
        restart_each_episode: start a fresh server process on every ``reset``.
    """

    #: The world's file name in the server's working dir.
    world_file: ClassVar[str] = "world"
    #: Server tools never offered, each with the reason (calling one is a forbidden action).
    excluded_tools: ClassVar[Mapping[str, str]] = {}
    stop_strings = ("</tool_call>",)
    max_new_tokens = 160

    def __init__(
        self,
        *,
        call_timeout_s: float = 5.0,
        start_timeout_s: float = 60.0,
        restart_each_episode: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        for name, value in (("call_timeout_s", call_timeout_s), ("start_timeout_s", start_timeout_s)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        self.call_timeout_s = float(call_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.restart_each_episode = bool(restart_each_episode)
        self._server: SandboxedServer | None = None
        self._offered: dict[str, Tool] = {}
        self._on_disk: bytes | None = None  # what the world file holds now (None: unknown)
        #: Calls that failed on the infrastructure and succeeded on a restarted server.
        self.recovered_calls = 0

    # -- hooks for families --------------------------------------------------------------
    def server_argv(self, workdir: str) -> list[str]:
        """The server's command line inside the sandbox (``workdir``: the world's directory)."""
        raise NotImplementedError

    def _initial_world(self, task: TaskT) -> bytes:
        """The world file's bytes at the start of ``task``."""
        raise NotImplementedError

    def _new_state(self, task: TaskT, world: bytes) -> StateT:
        """The episode state at the start of ``task``."""
        raise NotImplementedError

    def _call_failed(self, reply: ToolReply) -> bool:
        """Whether a completed call failed (default: MCP's ``isError``)."""
        return reply.is_error

    def _after_calls(self, outcomes: Sequence[CallOutcome], world: bytes) -> Transition:
        """Update ``self.state`` for the executed calls (``world``: the bytes after them)."""
        raise NotImplementedError

    def _reply(self, text: str) -> Transition:
        """The agent replied (no tool call): usually the end of the episode."""
        raise NotImplementedError

    # -- the server ------------------------------------------------------------------------
    def _ensure_server(self, restart: bool = False) -> SandboxedServer:
        server = self._server
        if server is None:
            server = SandboxedServer(self.server_argv, limits=SERVER_LIMITS, start_timeout_s=self.start_timeout_s)
            self._server = server
            self._finalizer = weakref.finalize(self, server.close)
            self._on_disk = None
            restart = True
        elif server.client is None or not server.client.alive:
            restart = True
        if restart:
            tools = server.start()
            offered = mcp_tools_to_openai(tools)
            self._offered = {n: t for n, t in offered.items() if n not in self.excluded_tools}
            if not self._offered:
                raise ServerLost(f"the MCP server offers no tool this env can use (it listed {sorted(offered)})")
        return server

    def close(self) -> None:
        """Stop the server and remove its session (a later ``reset`` starts a new one)."""
        server, self._server = self._server, None
        if server is not None:
            self._finalizer.detach()
            server.close()
        super().close()

    def _write_world(self, world: bytes) -> None:
        assert self._server is not None
        if self._on_disk == world:
            return
        self._on_disk = None
        session = self._server.session
        session.reset()
        session.write_files({self.world_file: world})
        self._on_disk = world

    def _read_world(self) -> bytes:
        assert self._server is not None
        try:
            world = self._server.session.read_file(self.world_file)
        except FileNotFoundError:
            world = b""
        self._on_disk = world
        return world

    # -- tools -----------------------------------------------------------------------------
    @property
    def tools(self) -> list[Tool]:
        """The offered tools in OpenAI format (known once a server has started: after ``reset``)."""
        return list(self._offered.values())

    @staticmethod
    def _render_tools(tools: Mapping[str, Tool]) -> str:
        lines = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools.values())
        return f"<tools>\n{lines}\n</tools>"

    # -- episode ---------------------------------------------------------------------------
    def _reset(self, task: TaskT, options: Mapping[str, Any]) -> str:
        self._ensure_server(restart=self.restart_each_episode)
        world = self._initial_world(task)
        self._write_world(world)
        self.state = self._new_state(task, world)
        return f"{self._render_tools(self._offered)}\n\nUser: {task.prompt}"

    def _step(self, action: str) -> Transition:
        parsed = parse_message(action)
        if not parsed.ok:
            return self._invalid(f"invalid tool call: {parsed.error}", parsed.error or "")
        assert parsed.value is not None
        if isinstance(parsed.value, Reply):
            return self._reply(parsed.value.text)
        calls: tuple[ToolCall, ...] = parsed.value
        errors: list[str] = []
        forbidden = False
        for i, c in enumerate(calls, 1):
            tool = self._offered.get(c.name)
            if tool is None:
                if c.name in self.excluded_tools:
                    forbidden = True
                    errors.append(f"call {i}: tool {c.name!r} is not available to you ({self.excluded_tools[c.name]})")
                else:
                    errors.append(f"call {i}: unknown tool {c.name!r}; available: {', '.join(self._offered)}")
                continue
            problem = oversized_integer(c.arguments) or validate_arguments(c.arguments, tool["function"]["parameters"])
            if problem is not None:
                errors.append(f"call {i} ({c.name}): {problem}")
        if errors:
            return self._invalid("Invalid tool call(s):\n" + "\n".join(errors), "; ".join(errors), forbidden=forbidden)
        outcomes = [self._execute(c) for c in calls]
        world = self._read_world()
        t = self._after_calls(outcomes, world)
        t.obs = "\n".join(
            "<tool_response>\n" + json.dumps({"name": o.call.name, "content": o.reply.text}, ensure_ascii=False) + "\n</tool_response>"
            for o in outcomes
        )
        return t

    def _invalid(self, obs: str, reason: str, *, forbidden: bool = False) -> Transition:
        return Transition(
            obs=f'{obs}\nNothing was executed. Call tools as JSON {{"name": ..., "arguments": {{...}}}} '
            "(a list for several), or reply in plain text when you are done.",
            valid=False,
            invalid_reason=reason,
            signals={"forbidden_action": 1.0 if forbidden else 0.0},
        )

    def _execute(self, call: ToolCall) -> CallOutcome:
        """Run one call under the blame rule (module doc); :class:`ServerLost` is infra."""
        server = self._ensure_server()
        before = self._read_world()
        try:
            assert server.client is not None
            reply = server.client.call(call.name, call.arguments, self.call_timeout_s)
        except (CallTimeout, ServerLost):
            pass  # first failure: nobody is blamed yet
        else:
            return CallOutcome(call, reply, self._call_failed(reply))
        self._restart_on(before)
        try:
            assert server.client is not None
            reply = server.client.call(call.name, call.arguments, self.call_timeout_s)
        except (CallTimeout, ServerLost) as exc:
            self._restart_on(before)  # a healthy server, the world as before: the call did it
            note = f"Error: the call did not complete ({exc}). Nothing was changed."
            return CallOutcome(call, ToolReply(note, True), True)
        self.recovered_calls += 1
        return CallOutcome(call, reply, self._call_failed(reply))

    def _restart_on(self, world: bytes) -> None:
        """Stop the server, put ``world`` back (and nothing else), start it again."""
        assert self._server is not None
        self._server.stop()
        self._on_disk = None
        self._write_world(world)
        self._ensure_server(restart=True)

    def _get_state(self) -> StateT:
        import copy

        return copy.copy(self.state)  # fields are immutable (bytes, frozen views, frozensets)

    def _set_state(self, payload: StateT) -> None:
        import copy

        self.state = copy.copy(payload)
        if self._server is None or self._server.client is None:
            self._ensure_server()
        self._write_world(self.state.world)
