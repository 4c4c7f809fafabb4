"""Clients of the env server: :class:`RemoteEnv` (a gymnasium env) and :class:`AsyncRemoteEnv`.

``turngym.make(env_id, remote="ws://host:port")`` returns a :class:`RemoteEnv` that behaves
like the local env: same observations, rewards, ``info`` (signals, state keys, outcome),
same errors (a remote ``ResetNeeded`` is a ``ResetNeeded``), ``snapshot``/``restore`` (the
snapshot is a handle to state kept on the server), ``oracle_action`` and ``sample_action(rng)``
(drawn on the server from *your* generator's exact state, which then advances as it would
have locally), ``action_choices()`` (sent by the server with each reset, step and restore, so
reading it costs no round trip), so ``turngym.check_env`` passes on it and a seeded rollout is
identical, constrained decoding included.

Failures are infrastructure errors, never the agent's:

* connecting (or reconnecting, on ``reset``) retries with backoff, then raises
  :class:`~turngym.server.errors.ConnectionLost` or ``ServerBusy``;
* a connection lost mid-episode ends the episode: ``step`` returns ``terminated=True`` with
  ``info["infra_error"]`` set (as a local env does when its sandbox dies), and the next
  ``reset`` reconnects;
* scripted agents asking a dead session for ``oracle_action`` get ``""`` (the step that
  follows reports the infra error), so a lockstep rollout carries on with its other envs.

:class:`AsyncRemoteEnv` is the same client with ``async`` methods, for thousands of
concurrent sessions on one event loop. :class:`RemoteEnv` runs one on a shared background loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np

try:
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
except ImportError:  # pragma: no cover - depends on the installed extras
    from turngym.core.errors import MissingExtraError

    raise MissingExtraError("remote envs need websockets>=13: pip install 'turngym[server]'") from None

from turngym.core.errors import ConfigError, EnvCheckError, InfraError, ResetNeeded, SnapshotError
from turngym.core.infra import infra_step
from turngym.core.registry import env_info, set_remote_factory
from turngym.core.spaces import TextSpace
from turngym.core.spec import RewardSpec
from turngym.server.errors import ConnectionLost, RemoteEnvError, ServerBusy, error_class
from turngym.server.protocol import (
    choices_from_wire,
    dumps,
    loads,
    reward_spec_from_wire,
    rng_from_wire,
    rng_to_wire,
    task_from_wire,
    task_to_wire,
)

__all__ = ["AsyncRemoteEnv", "RemoteEnv", "RemoteSnapshot", "step_together"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RemoteSnapshot:
    """A handle to a snapshot kept by the server, valid for the session that made it."""

    session: str
    handle: str
    turn: int
    state_key: str


def _ws_url(url: str) -> str:
    url = url.rstrip("/")
    if url.startswith("http://"):
        url = "ws://" + url[len("http://"):]
    elif url.startswith("https://"):
        url = "wss://" + url[len("https://"):]
    if not url.startswith(("ws://", "wss://")):
        raise ConfigError(f"remote must be a ws://, wss://, http:// or https:// URL, got {url!r}")
    return url + "/v1/session"


class AsyncRemoteEnv:
    """An env running on a turngym server, with ``async`` methods.

    Args:
        url: the server, ``ws://host:port`` (``http://`` works too).
        env_id: a registered id the server serves.
        connect_timeout: seconds to open a connection.
        request_timeout: seconds to wait for any one reply (then the connection is dropped).
        retries: extra connection attempts (on connect and on ``reset``) before giving up.
        backoff: first retry delay in seconds, doubled each retry.
        token: the server's bearer token (default: the ``TURNGYM_TOKEN`` environment variable).
        **env_kwargs: constructor arguments for the env on the server (``max_turns=...``).

    Use ``async with AsyncRemoteEnv(url, id) as env:`` or call :meth:`close`.
    """

    def __init__(
        self,
        url: str,
        env_id: str,
        *,
        connect_timeout: float = 10.0,
        request_timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.25,
        token: str | None = None,
        **env_kwargs: Any,
    ) -> None:
        self.url = url
        token = token if token is not None else os.environ.get("TURNGYM_TOKEN") or None
        self._headers = {"Authorization": f"Bearer {token}"} if token else None
        self.env_id = env_id
        self.env_kwargs = env_kwargs
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.retries = retries
        self.backoff = backoff
        self._ws: ClientConnection | None = None
        self._ws_url = _ws_url(url)
        self._lock = asyncio.Lock()
        self.session: str | None = None
        self.spec_data: dict[str, Any] = {}
        self.reward_spec: RewardSpec | None = None
        self.turn = 0
        self.done = True
        self.state_key = ""
        self.task_id: str | None = None
        self.choices: tuple[str, ...] | None = None
        """The env's valid actions in its current state, from the last reply (see :meth:`action_choices`)."""
        self.lost: str | None = None
        """Why the current session was lost mid-episode (None while healthy)."""

    # ------------------------------------------------------------------ connection
    async def connect(self) -> AsyncRemoteEnv:
        """Open a session (retrying with backoff); a no-op when one is open."""
        if self._ws is not None:
            return self
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                await self._open()
                return self
            except (ConnectionLost, ServerBusy):
                if attempt == self.retries:
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def _open(self) -> None:
        try:
            ws = await connect(
                self._ws_url, open_timeout=self.connect_timeout, max_size=None, compression=None, ping_interval=None,
                additional_headers=self._headers,
            )
        except InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise ConfigError(
                    f"the env server at {self.url} refused the connection (HTTP {exc.response.status_code}): "
                    "it requires a token; pass token=... or set TURNGYM_TOKEN"
                ) from None
            raise ConnectionLost(f"cannot connect to the env server at {self.url}: {exc}") from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise ConnectionLost(f"cannot connect to the env server at {self.url}: {type(exc).__name__}: {exc}") from None
        except InvalidURI as exc:
            raise ConfigError(f"bad env server URL {self.url!r}: {exc}") from None
        try:
            await ws.send(dumps({"op": "make", "env_id": self.env_id, "kwargs": self.env_kwargs}))
            reply = loads(await asyncio.wait_for(ws.recv(), self.request_timeout))
        except (ConnectionClosed, OSError, TimeoutError) as exc:
            await ws.close()
            rcvd = getattr(exc, "rcvd", None)
            if rcvd is not None and rcvd.code == 1013:  # refused at accept: the server is full
                raise ServerBusy(f"the env server at {self.url} is at capacity ({rcvd.reason}); retry later") from None
            raise ConnectionLost(f"the env server at {self.url} closed the session while opening it: {exc}") from None
        if not reply.get("ok"):
            await ws.close()
            self._raise(reply)
        self._ws = ws
        self.session = reply["session"]
        self.spec_data = reply["spec"]
        self.reward_spec = reward_spec_from_wire(self.spec_data["reward_spec"])
        self.lost = None

    async def _drop(self, why: str) -> None:
        ws, self._ws = self._ws, None
        self.session = None
        if ws is not None:
            try:
                await ws.close()
            except Exception:  # already broken: nothing left to close
                pass
        if not self.done:
            self.lost = why

    def _raise(self, reply: dict[str, Any]) -> None:
        err = reply.get("error") or {}
        cls = error_class(str(err.get("type")), bool(err.get("turngym")))
        message = str(err.get("message", "unknown error"))
        if cls is EnvCheckError:
            cls = RemoteEnvError
        if cls is RemoteEnvError and not err.get("turngym"):
            message = f"{err.get('type')}: {message} (raised by {self.env_id} on the server)"
        exc = cls(message)
        if err.get("traceback"):
            exc.remote_traceback = str(err["traceback"])  # type: ignore[attr-defined]  # the server's, for infra_traceback
        raise exc

    async def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send one op and return its reply; turngym errors are re-raised as their own class."""
        async with self._lock:
            if self._ws is None:
                raise ConnectionLost(f"not connected to {self.url} (the session was lost: {self.lost or 'closed'})")
            try:
                async with asyncio.timeout(self.request_timeout):  # cheaper than wait_for: no extra task
                    await self._ws.send(dumps(msg))
                    reply = loads(await self._ws.recv())
            except (ConnectionClosed, OSError) as exc:
                await self._drop(f"connection to {self.url} lost: {exc}")
                raise ConnectionLost(f"connection to the env server at {self.url} lost: {exc}") from None
            except TimeoutError:
                await self._drop(f"no reply from {self.url} within {self.request_timeout:g} s")
                raise ConnectionLost(f"no reply from {self.url} within {self.request_timeout:g} s") from None
        if not reply.get("ok"):
            self._raise(reply)
        return reply

    # ------------------------------------------------------------------ env API
    @property
    def max_turns(self) -> int:
        return int(self.spec_data.get("max_turns", 0))

    @property
    def system_prompt(self) -> str:
        return str(self.spec_data.get("system_prompt", ""))

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode (reconnecting first if the session was lost)."""
        if options is not None:
            options = dict(options)
            if "task" in options:
                options["task"] = task_to_wire(options["task"])
        delay = self.backoff
        self.choices = None  # a failed reset leaves no state whose choices we know
        for attempt in range(self.retries + 1):
            await self.connect()
            try:
                reply = await self.request({"op": "reset", "seed": seed, "options": options})
                break
            except ConnectionLost:
                if attempt == self.retries:
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        info = reply["info"]
        self.turn, self.done, self.lost = 0, False, None
        self.state_key = info.get("state_key", "")
        self.task_id = info.get("task_id")
        self.choices = choices_from_wire(reply.get("choices"))
        return reply["obs"], info

    async def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One turn; a lost connection ends the episode with ``info["infra_error"]``."""
        if self.done:
            if self.lost:
                raise ResetNeeded(f"the episode ended when its session was lost ({self.lost}); call reset()")
            raise ResetNeeded("step() called on a finished episode (or before reset()); call env.reset() first")
        try:
            reply = await self.request({"op": "step", "action": action})
        except InfraError as exc:
            return self._infra_transition(str(exc))
        info = reply["info"]
        self.turn = info.get("turn", self.turn + 1)
        self.state_key = info.get("state_key", self.state_key)
        self.done = bool(reply["terminated"] or reply["truncated"])
        self.choices = choices_from_wire(reply.get("choices"))
        return reply["obs"], float(reply["reward"]), bool(reply["terminated"]), bool(reply["truncated"]), info

    def _infra_transition(self, why: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        self.done = True
        self.choices = None
        self.lost = why
        signals = self.reward_spec.zeros() if self.reward_spec is not None else {}
        return infra_step(why, turn=self.turn, state_key=self.state_key, signals=signals)

    async def snapshot(self) -> RemoteSnapshot:
        reply = await self.request({"op": "snapshot"})
        return RemoteSnapshot(self.session or "", reply["handle"], self.turn, self.state_key)

    async def restore(self, snap: RemoteSnapshot) -> None:
        if not isinstance(snap, RemoteSnapshot):
            raise SnapshotError(f"cannot restore a {type(snap).__name__} into a remote env; use its own snapshot()")
        if snap.session != self.session:
            raise SnapshotError(
                f"snapshot {snap.handle!r} belongs to session {snap.session!r}, but this env is now on "
                f"{self.session!r} (snapshots die with their connection); take a new snapshot"
            )
        reply = await self.request({"op": "restore", "handle": snap.handle})
        self.turn, self.done, self.state_key, self.lost = reply["turn"], reply["done"], reply["state_key"], None
        self.choices = choices_from_wire(reply.get("choices"))  # the restored state's, computed by the server

    def action_choices(self) -> tuple[str, ...] | None:
        """Every valid action now, as the env's ``action_choices()`` on the server; None when it lists none.

        Kept from the last reset/step/restore reply (no round trip). A server older than
        protocol version 2 sends none, so this is None there, as for an env that cannot
        enumerate its actions.
        """
        return self.choices

    async def release(self, snap: RemoteSnapshot) -> None:
        """Free a snapshot's server-side state early (sessions also keep a bounded number)."""
        if self._ws is not None and snap.session == self.session:
            await self.request({"op": "release", "handle": snap.handle})

    async def oracle_action(self) -> str:
        try:
            return (await self.request({"op": "oracle_action"}))["action"]
        except InfraError:
            if self._ws is None:
                return ""  # the session is gone: the next step reports the infra error
            raise

    async def sample_action(self, rng: np.random.Generator) -> str:
        """A random action drawn on the server from ``rng``'s exact state; ``rng`` advances as locally."""
        try:
            reply = await self.request({"op": "sample_action", "rng": rng_to_wire(rng)})
        except InfraError:
            if self._ws is None:
                rng.integers(2)  # still advance the caller's generator
                return ""
            raise
        rng.bit_generator.state = rng_from_wire(reply["rng"]).bit_generator.state
        return reply["action"]

    async def render(self) -> str | None:
        return (await self.request({"op": "render"}))["render"]

    async def task(self) -> Any:
        """The current task, rebuilt locally (None before the first reset)."""
        return task_from_wire((await self.request({"op": "task"}))["task"])

    async def close(self) -> None:
        """End the session (the server closes the env); safe to call twice."""
        ws, self._ws = self._ws, None
        self.session = None
        self.done = True
        if ws is None:
            return
        try:
            await ws.send(dumps({"op": "close"}))
            await asyncio.wait_for(ws.recv(), 5.0)
        except Exception:  # closing a broken connection: nothing more to say to it
            pass
        finally:
            await ws.close()

    async def __aenter__(self) -> AsyncRemoteEnv:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# ---------------------------------------------------------------------------- sync client
class _LoopThread:
    """One event loop on a daemon thread, shared by every :class:`RemoteEnv` of the process."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="turngym-remote", daemon=True).start()
                cls._loop = loop
            return cls._loop


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run_coroutine_threadsafe(coro, _LoopThread.loop()).result()


def step_together(
    steps: Sequence[tuple[RemoteEnv, Any]], *, return_exceptions: bool = False
) -> list[tuple[str, float, bool, bool, dict[str, Any]]] | list[Any]:
    """Step several remote envs at once: one round trip of wall time for all, results in order.

    Each env answers exactly as its own ``step`` would (a lost connection is that env's infra step).
    An env that raised (a :class:`~turngym.server.errors.RemoteEnvError`: a bug in the env on the
    server) raises here, after every step has finished; with ``return_exceptions=True`` its
    exception takes its place in the list instead, so one env's bug does not cost the others'
    results (:class:`~turngym.rollout.steppers.RemoteStepper` turns it into an infra step).
    """

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*(env._async.step(action) for env, action in steps), return_exceptions=True))

    results = _run(gather())
    if not return_exceptions:
        for r in results:
            if isinstance(r, BaseException):
                raise r
    return results


class RemoteEnv(gym.Env[str, str]):
    """A gymnasium env whose state lives on a turngym env server (see the module docstring).

    Args: as :class:`AsyncRemoteEnv`. Prefer ``turngym.make(env_id, remote=url, **kwargs)``.
    """

    def __init__(self, url: str, env_id: str, **kwargs: Any) -> None:
        client_keys = ("connect_timeout", "request_timeout", "retries", "backoff", "token")
        client_opts = {k: kwargs.pop(k) for k in client_keys if k in kwargs}
        self._client_opts = client_opts
        self._env_kwargs = dict(kwargs)
        self._async = AsyncRemoteEnv(url, env_id, **client_opts, **kwargs)
        _run(self._async.connect())
        data = self._async.spec_data
        self.env_id = env_id
        self.url = url
        self.reward_spec: RewardSpec = self._async.reward_spec  # type: ignore[assignment]
        self.max_turns: int = data["max_turns"]
        self.system_prompt: str = data["system_prompt"]
        self.metadata = dict(data["metadata"])
        self.render_mode = data["render_mode"]
        self.reset_options = tuple(data["reset_options"])
        self.observation_space = TextSpace(data["max_obs_chars"])
        self.action_space = TextSpace(data["max_action_chars"])
        # what a generating policy reads from the env (AgentInput.stop/max_new_tokens/action_prefix);
        # a version-1 server sends none of them: the base env's defaults
        self.stop_strings: tuple[str, ...] = tuple(data.get("stop_strings") or ())
        self.max_new_tokens: int | None = data.get("max_new_tokens")
        self.action_prefix: str = str(data.get("action_prefix") or "")
        info = env_info(env_id)
        self.family = info.family
        # gymnasium's checker builds more envs from the spec: make them remote too.
        self.spec = dataclasses.replace(
            gym.spec(env_id),
            entry_point=functools.partial(RemoteEnv, url, env_id, **client_opts),
            kwargs=dict(kwargs),
        )

    # --- state mirrored from the server
    @property
    def turn(self) -> int:
        return self._async.turn

    @property
    def done(self) -> bool:
        return self._async.done

    @property
    def session(self) -> str | None:
        return self._async.session

    @property
    def task(self) -> Any:
        return _run(self._async.task())

    def state_key(self) -> str:
        """The state key of the current state (as ``TurngymEnv.state_key``), from the last reply."""
        return self._async.state_key

    #: The name before ``state_key()`` was public; kept so callers written against it still work.
    _state_key = state_key

    # --- gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)  # keeps a local np_random in step with the seeds, as gymnasium expects
        return _run(self._async.reset(seed=seed, options=options))

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return _run(self._async.step(action))

    def render(self) -> str | None:
        return _run(self._async.render())

    def close(self) -> None:
        _run(self._async.close())

    # --- turngym API
    def snapshot(self) -> RemoteSnapshot:
        return _run(self._async.snapshot())

    def restore(self, snap: RemoteSnapshot) -> None:
        _run(self._async.restore(snap))

    def release(self, snap: RemoteSnapshot) -> None:
        _run(self._async.release(snap))

    def oracle_action(self) -> str:
        return _run(self._async.oracle_action())

    def sample_action(self, rng: np.random.Generator) -> str:
        return _run(self._async.sample_action(rng))

    def action_choices(self) -> tuple[str, ...] | None:
        """The env's valid actions now (see :meth:`AsyncRemoteEnv.action_choices`); None when it lists none."""
        return self._async.action_choices()

    def __repr__(self) -> str:
        return f"RemoteEnv({self.env_id!r} at {self.url}, session={self.session})"

    def __del__(self) -> None:  # best effort: free the server-side session promptly
        a = getattr(self, "_async", None)
        if a is not None and a._ws is not None and _LoopThread._loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(a.close(), _LoopThread._loop)
            except RuntimeError:  # loop already closed at interpreter exit
                pass


set_remote_factory(RemoteEnv)  # turngym.make(env_id, remote=url) builds a RemoteEnv
