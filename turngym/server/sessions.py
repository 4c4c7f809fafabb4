"""Sessions: one env per connection, with limits, idle timeouts and per-request timeouts.

The :class:`SessionManager` is the only thing in the server that owns envs. Both wire
formats (turngym's and OpenEnv's) open sessions through it, so ``max_sessions`` counts every
connection and graceful shutdown closes every env exactly once.

How env calls run (``executor``):

* ``"thread"``: on a thread pool. A slow env (a sandbox, a retriever) never stalls the event
  loop, and a call that overruns ``request_timeout_s`` is abandoned, answered with
  :class:`~turngym.server.errors.RequestTimeout`, and its session closed (the env is then in
  an unknown state).
* ``"inline"``: on the event loop. For envs whose steps take microseconds (``turngym/Math-v0``)
  this saves a thread hop per request, roughly doubling throughput, but nothing can time out.
* ``"auto"`` (default): per env id, the first calls run on the pool while their duration is
  measured (an exponential moving average); an env whose calls average under
  ``inline_below_ms`` moves inline, and moves back to the pool if it slows down. Env
  construction and ``close`` always use the pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from turngym.core.errors import ConfigError, SnapshotError
from turngym.core.registry import env_info, make
from turngym.server.errors import RequestTimeout, ServerBusy
from turngym.server.protocol import spec_to_wire

__all__ = ["ServerConfig", "Session", "SessionManager"]

log = logging.getLogger("turngym.server")

EnvFactory = Callable[..., Any]


@dataclass(frozen=True)
class ServerConfig:
    """How a turngym env server behaves.

    Attributes:
        env_ids: the ids this server serves (the first is OpenEnv's default at ``/ws``).
        max_sessions: open sessions (connections) at once; more are refused with ``ServerBusy``.
        idle_timeout_s: a session with no request for this long is closed (its env too).
        request_timeout_s: the longest one env call may take (thread executor only).
        executor: ``"auto"``, ``"thread"`` or ``"inline"`` (see the module docstring).
        inline_below_ms: ``auto`` runs an env inline while its calls average less than this.
        threads: size of the thread pool (``executor="thread"``).
        max_snapshots: snapshot handles kept per session; older ones are evicted first.
        env_kwargs: constructor arguments applied to every env (clients may add their own).
    """

    env_ids: tuple[str, ...]
    max_sessions: int = 1024
    idle_timeout_s: float = 300.0
    request_timeout_s: float = 60.0
    executor: Literal["auto", "thread", "inline"] = "auto"
    inline_below_ms: float = 1.0
    threads: int = 16
    max_snapshots: int = 1024
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.env_ids:
            raise ConfigError("ServerConfig.env_ids is empty: name at least one env id to serve")
        if self.max_sessions < 1:
            raise ConfigError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if self.idle_timeout_s <= 0 or self.request_timeout_s <= 0:
            raise ConfigError("idle_timeout_s and request_timeout_s must be > 0")
        if self.executor not in ("auto", "thread", "inline"):
            raise ConfigError(f"executor must be 'auto', 'thread' or 'inline', got {self.executor!r}")
        if self.threads < 1 or self.max_snapshots < 1:
            raise ConfigError("threads and max_snapshots must be >= 1")


@dataclass(eq=False)
class Session:
    """One connection's env and its server-side snapshot handles."""

    id: str
    env_id: str
    env: Any
    last_active: float
    snapshots: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    closed: bool = False
    #: Set when the env can no longer be trusted (a call overran its timeout).
    broken: str | None = None
    #: Env calls in flight (the idle reaper never closes an env under a running call).
    busy: int = 0
    #: Called by the manager to drop the connection (idle timeout, shutdown, request timeout).
    disconnect: Callable[[int, str], Any] | None = None
    episode_id: str | None = None
    _handles: itertools.count = field(default_factory=itertools.count)

    def add_snapshot(self, snap: Any, limit: int) -> str:
        handle = f"{self.id}:{next(self._handles)}"
        self.snapshots[handle] = snap
        while len(self.snapshots) > limit:
            self.snapshots.popitem(last=False)
        return handle

    def get_snapshot(self, handle: str) -> Any:
        try:
            snap = self.snapshots[handle]
        except KeyError:
            owner = handle.rsplit(":", 1)[0]
            why = (
                "it belongs to another session (snapshots die with their connection)"
                if owner != self.id
                else "it was released or evicted (the server keeps the most recent --max-snapshots)"
            )
            raise SnapshotError(f"unknown snapshot handle {handle!r}: {why}") from None
        self.snapshots.move_to_end(handle)
        return snap


class SessionManager:
    """Opens, times and closes sessions; runs env calls on the configured executor."""

    def __init__(self, config: ServerConfig, factories: Mapping[str, EnvFactory] | None = None) -> None:
        self.config = config
        self.factories: dict[str, EnvFactory] = dict(factories or {})
        for env_id in config.env_ids:
            if env_id not in self.factories:
                env_info(env_id)  # unknown ids fail here, with "did you mean"
                self.factories[env_id] = lambda _id=env_id, **kw: make(_id, **kw)
        self.sessions: dict[str, Session] = {}
        self.specs: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._cost: dict[str, _CallCost] = {}
        self.stats = {"opened": 0, "closed": 0, "refused": 0, "timeouts": 0, "idle_closed": 0}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.config.executor != "inline":
            self._pool = concurrent.futures.ThreadPoolExecutor(self.config.threads, thread_name_prefix="turngym-env")
        for env_id in self.config.env_ids:  # build each env once: bad ids/kwargs fail at startup
            env = await self.run(self.factories[env_id], **self.config.env_kwargs)
            self.specs[env_id] = spec_to_wire(env, env_id)
            env.close()
        self._reaper = asyncio.get_running_loop().create_task(self._reap_idle())

    async def shutdown(self) -> None:
        """Close every session (connections first, then envs) and stop the pool."""
        if self._reaper is not None:
            self._reaper.cancel()
        for session in list(self.sessions.values()):
            await self._drop(session, 1001, "server shutting down")
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ sessions
    @property
    def active(self) -> int:
        return len(self.sessions)

    def reserve(self, env_id: str) -> str:
        """Claim a session slot (synchronously, so the capacity check cannot race)."""
        if env_id not in self.factories:
            from turngym.core.errors import UnknownEnvError

            served = ", ".join(self.factories)
            raise UnknownEnvError(f"this server does not serve {env_id!r}; it serves: {served}")
        if len(self.sessions) >= self.config.max_sessions:
            self.stats["refused"] += 1
            raise ServerBusy(
                f"server at capacity ({self.config.max_sessions} sessions); retry later or start more servers"
            )
        # unique across workers and restarts: a snapshot handle never matches another session's
        sid = f"s{next(self._ids)}-{secrets.token_hex(6)}"
        self.sessions[sid] = Session(sid, env_id, None, time.monotonic())
        return sid

    async def open(self, env_id: str, kwargs: Mapping[str, Any] | None = None) -> Session:
        """A new session with a fresh env (raises ServerBusy at capacity)."""
        sid = self.reserve(env_id)
        session = self.sessions[sid]
        try:
            session.env = await self.run(self.factories[env_id], **{**self.config.env_kwargs, **(kwargs or {})})
        except BaseException:
            del self.sessions[sid]
            raise
        self.stats["opened"] += 1
        return session

    async def close(self, session: Session) -> None:
        """Forget the session and close its env (idempotent)."""
        if session.closed:
            return
        session.closed = True
        self.sessions.pop(session.id, None)
        session.snapshots.clear()
        self.stats["closed"] += 1
        if session.env is not None:
            try:
                await self.run(session.env.close, timeout=min(self.config.request_timeout_s, 10.0))
            except Exception:  # a failing close must not keep the slot or stop a shutdown
                log.exception("closing env of session %s failed", session.id)

    async def _drop(self, session: Session, code: int, reason: str) -> None:
        if session.disconnect is not None:
            try:
                await session.disconnect(code, reason)
            except Exception:  # the socket may already be gone; the session still closes
                log.debug("disconnect of %s failed", session.id, exc_info=True)
        await self.close(session)

    async def _reap_idle(self) -> None:
        limit = self.config.idle_timeout_s
        while True:
            await asyncio.sleep(min(limit / 4, 5.0))
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if session.env is not None and not session.busy and now - session.last_active > limit:
                    self.stats["idle_closed"] += 1
                    await self._drop(session, 4408, f"idle for more than {limit:g} s")

    # ------------------------------------------------------------------ env calls
    async def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Call ``fn`` on the executor, within the per-request timeout."""
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

    async def call(self, session: Session, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """An env call on behalf of ``session``; a timeout marks the session broken."""
        session.last_active = time.monotonic()
        session.busy += 1
        try:
            if self.config.executor == "auto":
                cost = self._cost.setdefault(session.env_id, _CallCost(self.config.inline_below_ms / 1e3))
                if cost.inline:
                    t0 = time.perf_counter()
                    try:
                        return fn(*args, **kwargs)
                    finally:
                        cost.add(time.perf_counter() - t0)
                return await self.run(_timed, cost, fn, *args, **kwargs)
            return await self.run(fn, *args, **kwargs)
        except RequestTimeout as exc:
            session.broken = str(exc)  # the handler answers, then ends the session
            raise
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()

    def executor_of(self, env_id: str) -> str:
        """Where ``env_id``'s calls run now: ``"inline"`` or ``"thread"``."""
        if self.config.executor != "auto":
            return self.config.executor
        cost = self._cost.get(env_id)
        return "inline" if cost is not None and cost.inline else "thread"

    def served(self) -> Sequence[str]:
        return tuple(self.factories)


class _CallCost:
    """Moving average of one env id's call durations, deciding ``auto``'s executor."""

    WARMUP = 32
    ALPHA = 0.05

    def __init__(self, inline_below_s: float) -> None:
        self.threshold = inline_below_s
        self.mean = 0.0
        self.n = 0
        self.inline = False

    def add(self, seconds: float) -> None:
        self.n += 1
        self.mean = seconds if self.n == 1 else self.mean + self.ALPHA * (seconds - self.mean)
        if self.n >= self.WARMUP:
            # hysteresis: leave the loop fast when slow, return only when clearly fast
            self.inline = self.mean < (self.threshold if self.inline else self.threshold / 2)


def _timed(cost: _CallCost, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        cost.add(time.perf_counter() - t0)  # a float store: safe from the worker thread
