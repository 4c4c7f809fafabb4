"""The MCP env base: a real MCP server's tools are the action grammar; its world is checked.

:class:`MCPEnv` owns what every MCP family shares, and a family (``sqlite_env.py``) adds the
tasks, the reading of its world and the verdicts (or uses :class:`~turngym.envs.mcp.world_env.MCPWorldEnv`,
which has them for one-file worlds):

* **the server** — declared by the family as an :class:`~turngym.envs.mcp.server.MCPServer`
  (command, world file, read-only binds, resident memory vs address space, environment,
  excluded tools), started in a bubblewrap session on the first ``reset`` (not at
  construction: ``make(id).reward_spec`` starts nothing). **Each env has its own server**,
  kept across its episodes (a start costs seconds, a call milliseconds): a hostile episode
  cannot hold a lock another env waits on, nor leave anything another env sees. The world is
  one file of the session's working dir, which the server reopens on every call; the env
  writes its own world there before its calls and reads it back after them, so each env's
  world is its state's bytes, never the file, and anything beside the world file is cleared
  before the next call. A file left in the server's ``/tmp`` or ``/dev/shm`` (``VACUUM INTO
  '/tmp/x'``) replaces the server before its next call: no file outlives its episode outside
  the world. The call deadline reaches the server (:data:`~turngym.envs.mcp.server.DEADLINE_ENV`),
  which should stop its own work in time (MCP-SQLite: SQLite's progress handler).
  ``restart_each_episode=True`` restarts the server on every ``reset``; ``share_server=True``
  shares one per process among envs that trust each other, serialized per call by a fair
  lock (a neighbour is at most one call ahead). A family whose server keeps state in memory
  must exclude the tools that touch it, or restart per episode.
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
  server, it is the call's doing (a query the server cannot stop) and the agent is told the
  call did not complete and changed nothing.
* **state** — the world file's bytes after every call, read on the host by the session's
  link-safe reader; ``snapshot`` holds them, ``restore`` only installs them (they reach the
  file before the next call).
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from turngym.core.env import Transition, TurngymEnv
from turngym.core.errors import ConfigError
from turngym.core.parsing import ToolCall
from turngym.core.task import Task
from turngym.envs.mcp.client import CallTimeout, ServerLost, ToolReply, mcp_tools_to_openai
from turngym.envs.mcp.server import DEADLINE_ENV, MCPServer, SandboxedServer
from turngym.envs.tools.parsing import Reply, parse_message
from turngym.envs.tools.schema import Tool, oversized_integer, validate_arguments
from turngym.sandbox.limits import Limits

__all__ = ["MCPEnv", "MCPState", "CallOutcome", "close_shared_servers"]

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


class _FairLock:
    """A reentrant lock granted in arrival order.

    ``threading.RLock`` lets the releasing thread take the lock again at once, so an env that
    calls in a loop could keep a shared server's neighbours waiting for many of its calls; with
    tickets, a waiting env is next.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._next = self._serving = self._depth = 0
        self._owner: int | None = None

    def acquire(self) -> bool:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return True
            ticket, self._next = self._next, self._next + 1
            while ticket != self._serving:
                self._cond.wait()
            self._owner, self._depth = me, 1
        return True

    def release(self) -> None:
        with self._cond:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._serving += 1
                self._cond.notify_all()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class _Server:
    """A sandboxed server, the lock its users take, and whose world its file holds now."""

    def __init__(self, server: SandboxedServer) -> None:
        self.server = server
        self.pid = os.getpid()  # a forked child must not use (or kill) its parent's server
        self.lock = _FairLock()
        self.on_disk: bytes | None = None
        self.offered: dict[str, Tool] = {}

    def ensure(self, excluded: Mapping[str, str], restart: bool = False) -> None:
        """Start the server if it is not running (or ``restart``); :class:`ServerLost` on failure."""
        client = self.server.client
        if restart or client is None or not client.alive or not self.server.running():
            self.on_disk = None
            offered = mcp_tools_to_openai(self.server.start())
            self.offered = {n: t for n, t in offered.items() if n not in excluded}
            if not self.offered:
                raise ServerLost(f"the MCP server offers no tool this env can use (it listed {sorted(offered)})")

    def write(self, world: bytes) -> None:
        if self.on_disk == world:
            return
        self.on_disk = None
        session = self.server.session
        session.reset()
        session.write_files({self.server.spec.world_file: world})
        self.on_disk = world

    def read(self) -> bytes:
        try:
            world = self.server.session.read_file(self.server.spec.world_file)
        except FileNotFoundError:
            world = b""
        # Anything beside the world (an ATTACHed or VACUUMed-INTO file, a left journal) is not
        # the world: the next write must clear it, or it leaks into the next call's episode.
        self.on_disk = world if os.listdir(self.server.session.host_dir) == [self.server.spec.world_file] else None
        self.server.trim_log()
        return world

    def close(self) -> None:
        with self.lock:
            self.server.close()


_SHARED: dict[tuple[str, str, float, float, str], _Server] = {}
_SHARED_LOCK = threading.Lock()


def close_shared_servers() -> None:
    """Stop every shared MCP server of this process (they also stop at interpreter exit)."""
    with _SHARED_LOCK:
        servers = list(_SHARED.values())
        _SHARED.clear()
    for s in servers:
        s.close()


def _forget_in_child() -> None:
    """A forked child starts its own servers: the parent's belong to the parent (and its loop
    threads do not exist in the child)."""
    global _SHARED_LOCK
    _SHARED.clear()
    _SHARED_LOCK = threading.Lock()


atexit.register(close_shared_servers)
os.register_at_fork(after_in_child=_forget_in_child)


class MCPEnv(TurngymEnv[TaskT, StateT], Generic[TaskT, StateT]):
    """Base class of envs whose actions are calls to a real MCP server's tools.

    A family declares its server as the class attribute :attr:`server` (an
    :class:`~turngym.envs.mcp.server.MCPServer`: command, world file, binds, limits, environment,
    excluded tools) and implements the world hooks below; nothing private is overridden.

    Arguments (beyond the base class's):
        server: this env's server instead of the class's (same fields).
        call_timeout_s: deadline of one tool call. The server is told it (:data:`DEADLINE_ENV`)
            and, where it can, stops its own work in time (MCP-SQLite: SQLite's progress
            handler); a call with no answer by then is the blame rule's (module doc).
        start_timeout_s: deadline of a server start (start-up, ``initialize``, ``tools/list``).
        restart_each_episode: restart the env's server on every ``reset`` (else it is kept
            across the env's episodes; its world and scratch dirs are emptied between them).
        limits: the server sandbox's :class:`~turngym.sandbox.Limits` (memory, processes,
            ``cpu_cores``, disk; the same argument Code and SWE envs take) instead of the ones
            its :class:`MCPServer` declares.
        share_server: use one server for every env of this class and settings in the process
            (fewer processes), instead of one per env. Calls are serialized per *call*, so a
            neighbour can delay one of this env's calls by up to one of its own call deadlines:
            do not share between envs of different trust (the default does not share).
    """

    #: The family's server (see :class:`~turngym.envs.mcp.server.MCPServer`).
    server: ClassVar[MCPServer | None] = None
    stop_strings = ("</tool_call>",)
    max_new_tokens = 160

    def __init__(
        self,
        *,
        server: MCPServer | None = None,
        call_timeout_s: float = 5.0,
        start_timeout_s: float = 60.0,
        restart_each_episode: bool = False,
        share_server: bool = False,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        #: the server sandbox's limits; None: the server spec's own (``server_spec.limits()``)
        self.limits = limits
        for name, value in (("call_timeout_s", call_timeout_s), ("start_timeout_s", start_timeout_s)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        spec = server if server is not None else type(self).server
        if not isinstance(spec, MCPServer):
            raise ConfigError(f"{type(self).__name__} declares no MCP server (set the class attribute `server` "
                              "or pass server=MCPServer(...))")
        self.server_spec: MCPServer = spec
        self.call_timeout_s = float(call_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.restart_each_episode = bool(restart_each_episode)
        self.share_server = bool(share_server) and not self.restart_each_episode
        self._server: _Server | None = None
        #: Calls that failed on the infrastructure and then succeeded on a restarted server.
        self.recovered_calls = 0

    @property
    def excluded_tools(self) -> Mapping[str, str]:
        """Server tools never offered, each with the reason (calling one is a forbidden action)."""
        return self.server_spec.excluded_tools

    # -- hooks for families --------------------------------------------------------------
    def check_installed(self) -> None:
        """Raise :class:`~turngym.core.errors.ConfigError` naming the fix if the server is missing."""

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
    def _new_server(self) -> _Server:
        self.check_installed()
        return _Server(SandboxedServer(self.server_spec, extra_env=self._deadline_env(),
                                       start_timeout_s=self.start_timeout_s, limits=self.limits))

    def _deadline_env(self) -> dict[str, str]:
        """The server stops its own work a little before the client gives up on the call (a
        server learns the deadline when it starts: a changed ``call_timeout_s`` restarts it)."""
        return {DEADLINE_ENV: f"{max(0.05, 0.8 * self.call_timeout_s):g}"}

    def _acquire_server(self, fresh: bool, start: bool = True) -> _Server:
        """This env's server: its own (restarted when ``fresh`` and ``restart_each_episode``) or the
        shared one; running unless not ``start`` (a step's calls start it under the lock, each
        call taking one turn of it)."""
        if self._server is not None and self._server.pid != os.getpid():
            self._server = None  # inherited through fork: the parent's
        if not self.share_server:
            if self._server is None:
                self._server = self._new_server()
                self._finalizer = weakref.finalize(self, self._server.close)
            if start:
                with self._server.lock:
                    self._server.ensure(self.excluded_tools, restart=fresh and self.restart_each_episode)
            return self._server
        if self._server is None:
            key = (type(self).__qualname__, repr(self.server_spec), self.start_timeout_s, self.call_timeout_s,
                   repr(self.limits))
            with _SHARED_LOCK:
                server = _SHARED.get(key)
                if server is None:
                    server = _SHARED[key] = self._new_server()
            self._server = server
        if start:
            with self._server.lock:
                self._server.ensure(self.excluded_tools)
        return self._server

    def close(self) -> None:
        """Stop the env's own server (a later ``reset`` starts a new one); a shared one stays up."""
        server, self._server = self._server, None
        if server is not None and not self.share_server:
            self._finalizer.detach()
            server.close()
        super().close()

    # -- tools -----------------------------------------------------------------------------
    @property
    def tools(self) -> list[Tool]:
        """The offered tools in OpenAI format (known once a server has started: after ``reset``)."""
        return list(self._server.offered.values()) if self._server is not None else []

    @property
    def _offered(self) -> dict[str, Tool]:
        return self._server.offered if self._server is not None else {}

    @staticmethod
    def _render_tools(tools: Mapping[str, Tool]) -> str:
        lines = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools.values())
        return f"<tools>\n{lines}\n</tools>"

    # -- episode ---------------------------------------------------------------------------
    def _reset(self, task: TaskT, options: Mapping[str, Any]) -> str:
        server = self._acquire_server(fresh=True)
        world = self._initial_world(task)
        self.state = self._new_state(task, world)
        return f"{self._render_tools(server.offered)}\n\nUser: {task.prompt}"

    def _step(self, action: str) -> Transition:
        parsed = parse_message(action)
        if not parsed.ok:
            return self._invalid(f"invalid tool call: {parsed.error}", parsed.error or "")
        assert parsed.value is not None
        if isinstance(parsed.value, Reply):
            return self._reply(parsed.value.text)
        calls: tuple[ToolCall, ...] = parsed.value
        offered = self._offered
        errors: list[str] = []
        forbidden = False
        for i, c in enumerate(calls, 1):
            tool = offered.get(c.name)
            if tool is None:
                if c.name in self.excluded_tools:
                    forbidden = True
                    errors.append(f"call {i}: tool {c.name!r} is not available to you ({self.excluded_tools[c.name]})")
                else:
                    errors.append(f"call {i}: unknown tool {c.name!r}; available: {', '.join(offered)}")
                continue
            problem = (oversized_integer(c.arguments) or _not_utf8(c.arguments)
                       or validate_arguments(c.arguments, tool["function"]["parameters"]))
            if problem is not None:
                errors.append(f"call {i} ({c.name}): {problem}")
        if errors:
            return self._invalid("Invalid tool call(s):\n" + "\n".join(errors), "; ".join(errors), forbidden=forbidden)
        server = self._acquire_server(fresh=False, start=False)
        world = self.state.world
        outcomes = []
        for c in calls:
            with server.lock:  # per call, not per message: a shared server's neighbours wait one call at most
                outcome, world = self._execute(server, c, world)
            outcomes.append(outcome)
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

    def _execute(self, server: _Server, call: ToolCall, world: bytes) -> tuple[CallOutcome, bytes]:
        """Run one call on ``world`` under the blame rule (module doc); the world after it.

        :class:`ServerLost` (a server that cannot be restarted) propagates: the base class
        turns it into ``info["infra_error"]``.
        """
        want = self._deadline_env()
        if not self.share_server and server.server.extra_env != want:
            server.server.extra_env = want  # call_timeout_s changed: the server restarts knowing it
            server.server.stop()
            server.on_disk = None
        for attempt in range(2):
            server.ensure(self.excluded_tools)
            server.write(world)
            client = server.server.client
            assert client is not None
            try:
                reply = client.call(call.name, call.arguments, self.call_timeout_s)
            except (CallTimeout, ServerLost) as exc:
                server.server.kill()  # hung or dead: no polite shutdown
                server.server.stop()  # the world goes back to ``world`` on the next write
                server.on_disk = None
                if attempt == 0:
                    continue
                server.ensure(self.excluded_tools)  # healthy again: the call itself is to blame
                note = f"Error: the call did not complete ({exc}). Nothing was changed."
                return CallOutcome(call, ToolReply(note, True), True), world
            self.recovered_calls += attempt
            after = server.read()
            if server.server.scratch_used():
                # A file in the server's /tmp would outlive this episode: a fresh sandbox for the next call.
                server.server.kill()
                server.server.stop()
                server.on_disk = None
            return CallOutcome(call, reply, self._call_failed(reply)), after
        raise AssertionError("unreachable")

    def _get_state(self) -> StateT:
        return copy.copy(self.state)  # fields are immutable (bytes, frozen views, frozensets)

    def _set_state(self, payload: StateT) -> None:
        self.state = copy.copy(payload)  # the world reaches the server's file before the next call


def _not_utf8(arguments: Any) -> str | None:
    """Why ``arguments`` cannot cross the stdio transport (JSON in UTF-8), or None.

    A lone surrogate (``"\\ud800"``) is a valid Python string but no UTF-8: sent on, it breaks the
    server's reader, and the call would cost a server restart instead of one invalid turn."""
    try:
        json.dumps(arguments, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"arguments are not valid UTF-8 ({exc.reason} at position {exc.start})"
    return None
