"""Sessions: one env per connection, with limits, idle timeouts and per-call deadlines.

The :class:`SessionManager` is the only thing in the server that owns envs. Both wire
formats (turngym's and OpenEnv's) open sessions through it, so ``max_sessions`` counts every
connection (including sockets that have not sent their first frame yet) and graceful
shutdown closes every env exactly once. Client ``kwargs`` pass the operator's
:class:`~turngym.server.policy.KwargPolicy` before any env is built.

How env calls run (``executor``):

* ``"process"`` (default): in a pool of worker processes (:mod:`turngym.server.workers`),
  each session pinned to one. A call running past ``request_timeout_s`` (counted from when
  it actually started in its worker, not from when it was queued) gets its worker killed,
  whatever it was doing (a GIL-holding verifier included), so no action can stall other
  sessions or the health check. A ``step`` that overran (or crashed its worker, or took it
  over its memory limit) is the *agent's* failure: the step is answered as an invalid action
  that ends the episode; sessions that shared the killed worker are told (an infrastructure
  error, not their agent's fault) and closed. :mod:`turngym.server.workers` says how the
  server decides which call is to blame.
* ``"thread"``: on a thread pool. A slow env (a sandbox, a retriever) never stalls the event
  loop, but a step that holds the GIL stalls the whole server, and an overrunning call is
  only abandoned (its thread runs on). For trusted workloads.
* ``"inline"``: on the event loop. For envs whose steps take microseconds this saves a
  hop per request, but one slow step stops the server. For trusted workloads.
* ``"auto"``: per env id, the first calls run on the thread pool while their duration is
  measured (an exponential moving average); an env whose calls average under
  ``inline_below_ms`` moves inline, and back to the pool if it slows down.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from turngym.core.errors import ConfigError
from turngym.core.registry import env_info
from turngym.server.errors import RequestTimeout, ServerBusy, WorkerLost
from turngym.server.policy import KwargPolicy
from turngym.server.protocol import reward_spec_from_wire, spec_to_wire
from turngym.server.workers import CallCost, CallDeadline, EnvHost, ProcessPool, RegistryFactory, run_op

__all__ = ["ServerConfig", "Session", "SessionManager"]

log = logging.getLogger("turngym.server")

EnvFactory = Callable[..., Any]

_EXECUTORS = ("process", "auto", "thread", "inline")


@dataclass(frozen=True)
class ServerConfig:
    """How a turngym env server behaves.

    Attributes:
        env_ids: the ids this server serves (the first is OpenEnv's default at ``/ws``).
        max_sessions: open sessions at once, counting sockets still waiting for their first
            frame; more are refused with ``ServerBusy``.
        idle_timeout_s: a session with no request for this long is closed (its env too).
        request_timeout_s: the deadline of one env call (a ``step`` past it ends the episode).
        executor: ``"process"``, ``"auto"``, ``"thread"`` or ``"inline"`` (see the module docstring).
        processes: worker processes of the ``process`` executor.
        inline_below_ms: ``auto`` runs an env inline while its calls average less than this.
        threads: size of the thread pool (per worker process with ``process``).
        max_snapshots: snapshot handles kept per session; older ones are evicted first.
        env_kwargs: constructor arguments applied to every env (the operator's: not checked).
        allow_kwargs: constructor arguments clients may set with any value, beyond the declared
            safe ones (:mod:`turngym.server.policy`); ``"tasks"`` also admits Task objects in
            ``reset`` options; ``"*"`` trusts clients with everything.
        token: when set, every request but the health check must carry it
            (``Authorization: Bearer TOKEN``).
        header_timeout_s: an HTTP request (or WebSocket upgrade) must send its headers within this.
        first_frame_timeout_s: a WebSocket must send its first frame within this after connecting.
        max_connections: open TCP connections at once (any kind); more are cut on arrival.
        max_per_client: open connections per client address; more are cut on arrival.
        max_message_bytes: the largest WebSocket frame or HTTP body accepted.
        worker_memory_mb: a worker process (``process`` executor) whose resident memory passes
            this is killed, and the running step that used the most CPU is charged with it as the
            agent's failure; None: half of the machine's memory per worker, 0: no limit.
    """

    env_ids: tuple[str, ...]
    max_sessions: int = 1024
    idle_timeout_s: float = 300.0
    request_timeout_s: float = 60.0
    executor: Literal["process", "auto", "thread", "inline"] = "process"
    processes: int = field(default_factory=lambda: max(1, min(4, os.cpu_count() or 1)))
    inline_below_ms: float = 1.0
    threads: int = 16
    max_snapshots: int = 1024
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    allow_kwargs: tuple[str, ...] = ()
    token: str | None = None
    header_timeout_s: float = 10.0
    first_frame_timeout_s: float = 10.0
    max_connections: int | None = None
    max_per_client: int | None = None
    max_message_bytes: int = 8 << 20
    worker_memory_mb: float | None = None

    def __post_init__(self) -> None:
        if not self.env_ids:
            raise ConfigError("ServerConfig.env_ids is empty: name at least one env id to serve")
        if self.max_sessions < 1:
            raise ConfigError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if self.idle_timeout_s <= 0 or self.request_timeout_s <= 0:
            raise ConfigError("idle_timeout_s and request_timeout_s must be > 0")
        if self.header_timeout_s <= 0 or self.first_frame_timeout_s <= 0:
            raise ConfigError("header_timeout_s and first_frame_timeout_s must be > 0")
        if self.executor not in _EXECUTORS:
            raise ConfigError(f"executor must be one of {list(_EXECUTORS)}, got {self.executor!r}")
        if self.threads < 1 or self.max_snapshots < 1 or self.processes < 1:
            raise ConfigError("threads, processes and max_snapshots must be >= 1")
        for name in ("max_connections", "max_per_client"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be >= 1 or None, got {value}")
        if self.max_message_bytes < 1024:
            raise ConfigError(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")
        if self.worker_memory_mb is not None and not (self.worker_memory_mb == 0 or self.worker_memory_mb >= 64):
            raise ConfigError(f"worker_memory_mb must be 0 (no limit), >= 64 or None, got {self.worker_memory_mb}")
        if self.token is not None and len(self.token) < 8:
            raise ConfigError("token must be at least 8 characters (use e.g. `python -c 'import secrets; "
                              "print(secrets.token_urlsafe())'`)")
        object.__setattr__(self, "allow_kwargs", tuple(self.allow_kwargs))

    @property
    def connection_limit(self) -> int:
        """Open connections allowed at once: ``max_connections``, or the sessions plus room for HTTP calls."""
        return self.max_connections if self.max_connections is not None else self.max_sessions + 64

    @property
    def per_client_limit(self) -> int:
        return self.max_per_client if self.max_per_client is not None else self.connection_limit


@dataclass(eq=False)
class Session:
    """One connection's env (local host or a worker's), its wire spec and what the server tracks of it."""

    id: str
    env_id: str
    last_active: float
    host: EnvHost | None = None
    spec: dict[str, Any] | None = None
    closed: bool = False
    #: Set when the env can no longer be trusted or is gone (a call overran, its worker died).
    broken: str | None = None
    #: Env calls in flight (the idle reaper never closes an env under a running call).
    busy: int = 0
    #: Called by the manager to drop the connection (idle timeout, shutdown, lost worker).
    disconnect: Callable[[int, str], Any] | None = None
    episode_id: str | None = None
    turn: int = 0
    state_key: str = ""
    task_id: str | None = None
    #: The env's action choices after the last reset/step/restore (wire form; None: it lists none).
    choices: list[str] | None = None

    @property
    def env(self) -> Any:
        """The env object when it lives in this process (thread/inline executors), else None."""
        return self.host.env if self.host is not None else None


class SessionManager:
    """Opens, times and closes sessions; runs env calls on the configured executor."""

    def __init__(self, config: ServerConfig, factories: Mapping[str, EnvFactory] | None = None) -> None:
        self.config = config
        self.factories: dict[str, EnvFactory] = dict(factories or {})
        self.policies: dict[str, KwargPolicy] = {}
        for env_id in config.env_ids:
            if env_id not in self.factories:
                env_info(env_id)  # unknown ids fail here, with "did you mean"
                self.factories[env_id] = RegistryFactory(env_id)
        for env_id in self.factories:
            family = None
            try:
                family = env_info(env_id).family
            except Exception:  # an env built in code (a test double): only the base arguments
                pass
            self.policies[env_id] = KwargPolicy.for_env(env_id, family, config.allow_kwargs)
        self.sessions: dict[str, Session] = {}
        self.specs: dict[str, dict[str, Any]] = {}
        self.pending = 0
        self._ids = itertools.count(1)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._procs: ProcessPool | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._cost: dict[str, CallCost] = {}
        #: Why :meth:`start` failed, if it did (a misconfigured factory, a script without a main guard).
        self.startup_error: BaseException | None = None
        self.stats = {"opened": 0, "closed": 0, "refused": 0, "timeouts": 0, "idle_closed": 0,
                      "worker_kills": 0, "lost_to_worker": 0, "refused_kwargs": 0}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(self.config.threads, thread_name_prefix="turngym-env")
        for env_id in self.config.env_ids:  # build each env once here: bad ids/kwargs fail at startup
            env = await self.run(self.factories[env_id], **self.config.env_kwargs)
            self.specs[env_id] = spec_to_wire(env, env_id)
            env.close()
        if self.config.executor == "process":
            self._procs = ProcessPool(self.config.processes, self.factories, self.config.threads, self._lost,
                                      memory_mb=_worker_memory_mb(self.config))
            await self._procs.start()
        self._reaper = asyncio.get_running_loop().create_task(self._reap_idle())

    async def shutdown(self) -> None:
        """Close every session (connections first, then envs) and stop the pools."""
        if self._reaper is not None:
            self._reaper.cancel()
        for session in list(self.sessions.values()):
            await self._drop(session, 1001, "server shutting down")
        if self._procs is not None:
            await self._procs.shutdown()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ sessions
    @property
    def active(self) -> int:
        return len(self.sessions)

    def _check_capacity(self, extra: int = 0) -> None:
        if len(self.sessions) + self.pending + extra > self.config.max_sessions:
            self.stats["refused"] += 1
            raise ServerBusy(
                f"server at capacity ({self.config.max_sessions} sessions, counting sockets that have not "
                "sent their first frame); retry later or start more servers"
            )

    def hold_pending(self) -> None:
        """Count a just-accepted socket toward ``max_sessions`` until it opens a session or leaves."""
        self._check_capacity(extra=1)
        self.pending += 1

    def release_pending(self) -> None:
        self.pending = max(0, self.pending - 1)

    def policy(self, env_id: str) -> KwargPolicy | None:
        return self.policies.get(env_id)

    def reserve(self, env_id: str, *, pending: bool = False) -> str:
        """Claim a session slot (synchronously, so the capacity check cannot race).

        ``pending``: the caller holds a slot from :meth:`hold_pending`, which this one replaces.
        """
        if pending:
            self.release_pending()
        if env_id not in self.factories:
            from turngym.core.errors import UnknownEnvError

            served = ", ".join(self.factories)
            raise UnknownEnvError(f"this server does not serve {env_id!r}; it serves: {served}")
        self._check_capacity(extra=1)
        # unique across workers and restarts: a snapshot handle never matches another session's
        sid = f"s{next(self._ids)}-{secrets.token_hex(6)}"
        self.sessions[sid] = Session(sid, env_id, time.monotonic())
        return sid

    async def open(self, env_id: str, kwargs: Any = None, *, pending: bool = False) -> Session:
        """A new session with a fresh env (raises ServerBusy at capacity, ConfigError for refused kwargs).

        ``kwargs`` come from the client: they must pass the env id's :class:`KwargPolicy`.
        """
        policy = self.policies.get(env_id)
        try:
            # no policy: an id this server does not serve, which reserve() refuses by name just below
            checked = policy.check_kwargs(kwargs) if policy is not None else {}
        except ConfigError:
            self.stats["refused_kwargs"] += 1
            if pending:
                self.release_pending()
            raise
        sid = self.reserve(env_id, pending=pending)
        session = self.sessions[sid]
        full = {**self.config.env_kwargs, **checked}
        try:
            if self._procs is not None:
                session.spec = await self._timed_out_as_infra(
                    self._procs.open(sid, env_id, full, self.config.request_timeout_s))
            else:
                env = await self.run(self.factories[env_id], **full)
                session.host = EnvHost(sid, env_id, env)
                session.spec = spec_to_wire(env, env_id)  # per session: client kwargs may change it
        except BaseException:
            self.sessions.pop(sid, None)
            raise
        self.stats["opened"] += 1
        return session

    async def close(self, session: Session) -> None:
        """Forget the session and close its env (idempotent; never waits on a worker)."""
        if session.closed:
            return
        session.closed = True
        self.sessions.pop(session.id, None)
        self.stats["closed"] += 1
        if self._procs is not None:
            self._procs.close(session.id)
            return
        if session.host is not None:
            session.host.snapshots.clear()
            try:
                await self.run(session.host.env.close, timeout=min(self.config.request_timeout_s, 10.0))
            except Exception:  # a failing close must not keep the slot or stop a shutdown
                log.exception("closing env of session %s failed", session.id)

    async def _drop(self, session: Session, code: int, reason: str) -> None:
        if session.disconnect is not None:
            try:
                await session.disconnect(code, reason)
            except Exception:  # the socket may already be gone; the session still closes
                log.debug("disconnect of %s failed", session.id, exc_info=True)
        await self.close(session)

    def _lost(self, sids: set[str], why: str) -> None:
        """A worker died with these sessions on it: mark them, and hang up on the ones not mid-call."""
        self.stats["worker_kills"] = self._procs.kills if self._procs is not None else 0
        loop = asyncio.get_running_loop()
        for sid in sids:
            session = self.sessions.get(sid)
            if session is None:
                continue
            self.stats["lost_to_worker"] += 1
            session.broken = why
            if not session.busy:  # a call in flight gets WorkerLost as its reply, then the socket closes
                loop.create_task(self._drop(session, 4504, why[:120]))

    async def _reap_idle(self) -> None:
        limit = self.config.idle_timeout_s
        while True:
            await asyncio.sleep(min(limit / 4, 5.0))
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if session.spec is not None and not session.busy and now - session.last_active > limit:
                    self.stats["idle_closed"] += 1
                    await self._drop(session, 4408, f"idle for more than {limit:g} s")

    # ------------------------------------------------------------------ env calls
    async def _timed_out_as_infra(self, coro: Any) -> Any:
        try:
            return await coro
        except CallDeadline as exc:
            self.stats["timeouts"] += 1
            raise RequestTimeout(str(exc)) from None

    async def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Call ``fn`` on the thread pool, within the per-request timeout (inline before ``start``)."""
        if self._pool is None:
            return fn(*args, **kwargs)
        fut = self._pool.submit(fn, *args, **kwargs)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), timeout or self.config.request_timeout_s)
        except TimeoutError:
            self.stats["timeouts"] += 1
            raise RequestTimeout(
                f"{getattr(fn, '__qualname__', fn)} took longer than {timeout or self.config.request_timeout_s:g} s"
            ) from None

    async def call(self, session: Session, op: str, *args: Any) -> Any:
        """Protocol op ``op`` on ``session``'s env; a step past its deadline ends the episode as the agent's failure."""
        if session.broken:
            raise WorkerLost(session.broken)
        session.last_active = time.monotonic()
        session.busy += 1
        try:
            result = await self._dispatch(session, op, args)
        except (CallDeadline, RequestTimeout) as exc:
            self.stats["timeouts"] += isinstance(exc, CallDeadline)
            self.stats["worker_kills"] = self._procs.kills if self._procs is not None else 0
            session.broken = str(exc)  # the handler answers, then ends the session
            session.choices = None
            if op == "step":
                return self._deadline_step(session, str(exc), getattr(exc, "reason", "step_timeout"))
            raise RequestTimeout(str(exc)) from None
        except WorkerLost as exc:
            session.broken = str(exc)
            raise
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()
        if op in ("reset", "step"):
            # the env host appends the env's choices (computed next to the env): keep them for the reply
            *transition, session.choices = result
            result = tuple(transition)
            info = result[-1]
            if isinstance(info, dict):
                session.turn = int(info.get("turn", session.turn))
                session.state_key = str(info.get("state_key", session.state_key))
                if op == "reset":
                    session.task_id = info.get("task_id")
        elif op == "restore" and isinstance(result, dict):
            session.choices = result.get("choices")
        return result

    async def _dispatch(self, session: Session, op: str, args: tuple[Any, ...]) -> Any:
        if self._procs is not None:
            return await self._procs.call(session.id, op, args, self.config.request_timeout_s)
        if session.host is None:
            raise WorkerLost("this session has no env (it was closed)")
        fn = functools.partial(run_op, session.host, op, args)
        if self.config.executor == "inline":
            return fn()
        if self.config.executor == "auto":
            cost = self._cost.setdefault(session.env_id, CallCost(self.config.inline_below_ms / 1e3, warmup=_AUTO_WARMUP))
            if cost.inline:
                t0 = time.perf_counter()
                try:
                    return fn()
                finally:
                    cost.add(time.perf_counter() - t0)
            return await self.run(_timed, cost, fn)
        return await self.run(fn)

    def _deadline_step(self, session: Session, why: str,
                       reason: str = "step_timeout") -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The answer to a step that overran its deadline (or crashed its worker): an invalid final action.

        The action made the env run away (a parser on a pathological input, a verifier on an
        astronomically large number) or die, so it is the agent's failure, scored as the worst
        outcome; it is not an ``infra_error``, which training would drop instead of learning from.
        """
        spec = session.spec or self.specs.get(session.env_id) or {}
        reward_spec = reward_spec_from_wire(spec["reward_spec"]) if "reward_spec" in spec else None
        worst = float(reward_spec.outcome_range[0]) if reward_spec is not None else 0.0
        session.turn += 1
        info = {
            "turn": session.turn,
            "task_id": session.task_id,
            "signals": reward_spec.zeros() if reward_spec is not None else {},
            "state_key": session.state_key,
            "action_valid": False,
            "invalid_reason": f"{reason}: {_REASONS.get(reason, 'the action killed the step')} ({why})",
            "infra_error": None,
            "outcome": {"reward": worst, "success": False, "reason": reason},
        }
        obs = "[the action was stopped: the step ran past the server's limits; the episode is over]"
        return obs, worst, True, False, info

    def executor_of(self, env_id: str) -> str:
        """Where ``env_id``'s calls run now: ``"process"``, ``"inline"`` or ``"thread"``."""
        if self.config.executor != "auto":
            return self.config.executor
        cost = self._cost.get(env_id)
        return "inline" if cost is not None and cost.inline else "thread"

    def workers_alive(self) -> int | None:
        return self._procs.alive() if self._procs is not None else None

    def served(self) -> Sequence[str]:
        return tuple(self.factories)


_REASONS = {
    "step_timeout": "the action made the step run past the server's deadline",
    "worker_crash": "the action made the env's worker process crash",
    "memory_limit": "the action made the env's worker process go over its memory limit",
}


def _worker_memory_mb(config: ServerConfig) -> float | None:
    if config.worker_memory_mb is not None:
        return config.worker_memory_mb or None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 20)
    except (ValueError, OSError, AttributeError):
        return None
    return max(256.0, total / 2)


#: Calls the server times before ``auto`` trusts an env's average.
_AUTO_WARMUP = 32


def _timed(cost: CallCost, fn: Callable[[], Any]) -> Any:
    t0 = time.perf_counter()
    try:
        return fn()
    finally:
        cost.add(time.perf_counter() - t0)  # a float store: safe from the worker thread
