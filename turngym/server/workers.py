"""Where session envs live and run: next to the server (threads) or in worker processes that can be killed.

An env step runs whatever the agent's action makes it run: a parser on 200 KB of tags, a
verifier on ``10**10**10``. Such work can hold the GIL for minutes, and no thread time-out
or executor can stop it, so an env inside the server process can freeze every other session
and the health check with it. The default executor therefore keeps envs in a small pool of
**worker processes**: each session is pinned to one worker, every call has a deadline, and a
call that overruns it gets its worker killed (SIGKILL works whatever the GIL is doing) and
a fresh worker started. The server's event loop only ever waits on pipes.

* :class:`EnvHost` is one session's env and its snapshots, wherever the env lives;
  :func:`run_op` is the table of what each protocol op does to it (the same code runs
  in-process for the thread/inline executors and inside a worker).
* :class:`ProcessPool` owns the workers, routes calls, enforces deadlines and reports the
  sessions that died with a killed worker, so the server can tell their clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import multiprocessing
import os
import pickle
import queue
import signal
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from turngym.core import errors as core_errors
from turngym.core.errors import ConfigError, SnapshotError, TurngymError
from turngym.server.errors import WorkerLost
from turngym.server.protocol import rng_from_wire, rng_to_wire, spec_to_wire, task_to_wire

__all__ = ["CallCost", "EnvHost", "ProcessPool", "RegistryFactory", "CallDeadline", "RemoteCallError", "run_op"]

log = logging.getLogger("turngym.server")


# ---------------------------------------------------------------------------- env hosting
@dataclass(eq=False)
class EnvHost:
    """One session's env and its snapshots, kept wherever the env runs (snapshots never cross a pipe)."""

    sid: str
    env_id: str
    env: Any
    snapshots: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    _handles: itertools.count = field(default_factory=itertools.count)

    def add_snapshot(self, snap: Any, limit: int) -> str:
        handle = f"{self.sid}:{next(self._handles)}"
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
                if owner != self.sid
                else "it was released or evicted (the server keeps the most recent --max-snapshots)"
            )
            raise SnapshotError(f"unknown snapshot handle {handle!r}: {why}") from None
        self.snapshots.move_to_end(handle)
        return snap


def _reset(h: EnvHost, seed: Any, options: dict[str, Any] | None) -> Any:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed must be an int or null, got {seed!r}")
    return h.env.reset(seed=seed, options=options)


def _restore(h: EnvHost, handle: str) -> dict[str, Any]:
    h.env.restore(h.get_snapshot(handle))
    return {"ok": True, "state_key": h.env._state_key(), "turn": h.env.turn, "done": h.env.done}


def _sample(h: EnvHost, rng_state: Mapping[str, Any]) -> dict[str, Any]:
    rng = rng_from_wire(rng_state)
    action = h.env.sample_action(rng)
    return {"ok": True, "action": action, "rng": rng_to_wire(rng)}


def _state(h: EnvHost) -> dict[str, Any]:
    env = h.env
    task = getattr(env, "task", None)
    return {
        "step_count": env.turn,
        "task_id": getattr(task, "id", None),
        "state_key": env._state_key() if task is not None else None,
        "done": env.done,
        "max_turns": env.max_turns,
    }


_OPS: dict[str, Callable[..., Any]] = {
    "reset": _reset,
    "step": lambda h, action: h.env.step(action),
    "snapshot": lambda h, limit: h.add_snapshot(h.env.snapshot(), limit),
    "restore": _restore,
    "release": lambda h, handle: h.snapshots.pop(handle, None) and None,
    "oracle_action": lambda h: h.env.oracle_action(),
    "sample_action": _sample,
    "render": lambda h: h.env.render(),
    "task": lambda h: task_to_wire(h.env.task),
    "state": _state,
    "spec": lambda h: spec_to_wire(h.env, h.env_id),
}


def run_op(host: EnvHost, op: str, args: tuple[Any, ...] = ()) -> Any:
    """Do protocol op ``op`` on ``host``'s env (see :mod:`turngym.server.protocol` for the ops)."""
    return _OPS[op](host, *args)


@dataclass(frozen=True)
class RegistryFactory:
    """A picklable ``make(env_id, **kwargs)``: what a worker process builds registered envs with."""

    env_id: str

    def __call__(self, **kwargs: Any) -> Any:
        from turngym.core.registry import make

        return make(self.env_id, **kwargs)


# --------------------------------------------------------------------------- errors across
class RemoteCallError(Exception):
    """An env exception that could not cross the pipe as itself: its class name and message survive."""

    def __init__(self, remote_type: str, message: str, remote_turngym: bool = False) -> None:
        super().__init__(message)
        self.remote_type = remote_type
        self.remote_turngym = remote_turngym


class CallDeadline(Exception):
    """A call ran past its deadline; its worker was killed (raised to the session manager only)."""


def _failure(exc: BaseException) -> tuple[str, str, bool]:
    return type(exc).__name__, str(exc), isinstance(exc, TurngymError)


def _rebuild(failure: tuple[str, str, bool]) -> BaseException:
    name, message, is_turngym = failure
    cls = getattr(core_errors, name, None)
    if is_turngym and name in core_errors.__all__ and isinstance(cls, type) and issubclass(cls, TurngymError):
        return cls(message)
    return RemoteCallError(name, message, is_turngym)


# ----------------------------------------------------------------------------- the worker
class CallCost:
    """Moving average of one env id's call durations, deciding whether its calls run inline.

    Both the server's ``auto`` executor and a worker process use it: a call that costs less
    than a thread hop is cheaper run where it arrives, a slow one must not block that place.
    Hysteresis (leave inline when the average reaches the threshold, return only below half
    of it) keeps an env whose cost hovers near the threshold from flapping.
    """

    ALPHA = 0.05

    def __init__(self, inline_below_s: float, *, warmup: int) -> None:
        self.threshold = inline_below_s
        self.warmup = warmup
        self.mean = 0.0
        self.n = 0
        self.inline = False

    def add(self, seconds: float) -> None:
        self.n += 1
        self.mean = seconds if self.n == 1 else self.mean + self.ALPHA * (seconds - self.mean)
        if self.n >= self.warmup:
            self.inline = self.mean < (self.threshold if self.inline else self.threshold / 2)


#: A worker's calls run on its reader thread while they average under this many seconds.
_WORKER_INLINE_BELOW_S = 0.001
#: Calls a worker times before it trusts the average.
_WORKER_WARMUP = 16


def _worker_main(conn: Any, factories: Mapping[str, Callable[..., Any]], threads: int) -> None:
    """A worker process: receive batches of ``(rid, sid, op, args)``, send batches of ``(rid, ok, value)``.

    Calls of envs that have proved cheap run right on the reader thread; the others on a
    thread pool, so sessions waiting on I/O (a sandbox, a retriever) overlap. Either way a
    runaway call is the server's to stop: it kills this process at the call's deadline.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when workers stop
    for secret in ("TURNGYM_TOKEN", "TURNGYM_SERVER_CONFIG"):  # envs (and what they start) need neither
        os.environ.pop(secret, None)
    hosts: dict[str, EnvHost] = {}
    costs: dict[str, CallCost] = {}
    replies: queue.SimpleQueue[Any] = queue.SimpleQueue()
    send_lock = threading.Lock()

    def send(batch: list[tuple[int, bool, Any]]) -> None:
        with send_lock:
            try:
                try:
                    conn.send(batch)
                except (pickle.PicklingError, TypeError, AttributeError):  # one value cannot cross: find it
                    for rid, ok, value in batch:
                        try:
                            conn.send([(rid, ok, value)])
                        except (pickle.PicklingError, TypeError, AttributeError) as exc:
                            conn.send([(rid, False, _failure(exc))])
            except OSError:  # the server is gone
                os._exit(0)

    def send_loop() -> None:  # replies of pooled calls, batched
        while True:
            batch = [replies.get()]
            while True:
                try:
                    batch.append(replies.get_nowait())
                except queue.Empty:
                    break
            send(batch)

    def handle(rid: int, sid: str, op: str, args: tuple[Any, ...]) -> tuple[int, bool, Any]:
        t0 = time.perf_counter()
        host = hosts.get(sid)
        try:
            if op == "make":
                env_id, kwargs = args
                env = factories[env_id](**kwargs)
                host = hosts[sid] = EnvHost(sid, env_id, env)
                value: Any = spec_to_wire(host.env, env_id)
            elif op == "close":
                hosts.pop(sid, None)
                value = None
                if host is not None:
                    host.env.close()
            else:
                if host is None:
                    raise KeyError(f"no env for session {sid} in this worker")
                value = run_op(host, op, args)
                costs.setdefault(host.env_id, CallCost(_WORKER_INLINE_BELOW_S, warmup=_WORKER_WARMUP)).add(time.perf_counter() - t0)
        except BaseException as exc:  # every failure is a reply; the worker lives on
            return rid, False, _failure(exc)
        return rid, True, value

    def pooled(rid: int, sid: str, op: str, args: tuple[Any, ...]) -> None:
        replies.put(handle(rid, sid, op, args))

    threading.Thread(target=send_loop, name="turngym-worker-send", daemon=True).start()
    with ThreadPoolExecutor(threads, thread_name_prefix="turngym-worker") as pool:
        while True:
            try:
                batch = conn.recv()
            except (EOFError, OSError):
                break
            if batch is None:
                break
            done = []
            for rid, sid, op, args in batch:
                host = hosts.get(sid)
                cost = costs.get(host.env_id) if host is not None and op not in ("make", "close") else None
                if cost is not None and cost.inline:
                    done.append(handle(rid, sid, op, args))
                else:
                    pool.submit(pooled, rid, sid, op, args)
            if done:
                send(done)
        for host in hosts.values():
            with contextlib.suppress(Exception):
                host.env.close()
    os._exit(0)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


_HEADER = struct.Struct("!i")  # multiprocessing.Connection's framing: a 4-byte size, then the pickle
_BIG = struct.Struct("!Q")


def _frame(obj: Any) -> bytes:
    buf = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    if len(buf) > 0x7FFFFFFF:
        return _HEADER.pack(-1) + _BIG.pack(len(buf)) + buf
    return _HEADER.pack(len(buf)) + buf


class _Worker:
    """The server's side of one worker process: its socket on the event loop, and the calls pending on it.

    The loop never blocks on the worker: writes are buffered by the transport (a worker stalled
    by a GIL-holding step simply stops reading), and replies are read by the loop itself, so a
    call costs no thread hop on the server side. Calls submitted in one loop iteration go out
    in one write.
    """

    def __init__(self, index: int, ctx: Any, factories: Mapping[str, Any], threads: int,
                 loop: asyncio.AbstractEventLoop, on_exit: Callable[[_Worker, str], None]) -> None:
        self.index = index
        self.loop = loop
        self.on_exit = on_exit
        parent, child = ctx.Pipe()  # duplex: a Unix socket pair
        self.proc = ctx.Process(target=_worker_main, args=(child, dict(factories), threads),
                                name=f"turngym-env-worker-{index}", daemon=True)
        try:
            self.proc.start()
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            parent.close()
            raise ConfigError(
                f"an env factory cannot be sent to a worker process ({exc}); pass module-level callables, "
                "or serve with executor='thread'"
            ) from None
        finally:
            child.close()
        self._sock = socket.socket(fileno=os.dup(parent.fileno()))
        parent.close()
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.sessions: set[str] = set()
        self.alive = True
        self.why_dead = ""
        self._ids = itertools.count()
        self._queued: list[tuple[int, str, str, tuple[Any, ...]]] = []
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        reader, self._writer = await asyncio.open_unix_connection(sock=self._sock, limit=1 << 22)
        self._reader_task = self.loop.create_task(self._read_loop(reader))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = _HEADER.unpack(await reader.readexactly(4))
                if size == -1:
                    (size,) = _BIG.unpack(await reader.readexactly(8))
                self._resolve_many(pickle.loads(await reader.readexactly(size)))
        except (asyncio.IncompleteReadError, ConnectionError, OSError, pickle.UnpicklingError, EOFError):
            pass
        if self.alive:  # died on its own (OOM killer, a crash): not a deadline kill
            await asyncio.to_thread(self.proc.join, 1.0)
            self.fail(f"env worker process {self.index} exited unexpectedly (code {self.proc.exitcode})")
        await asyncio.to_thread(self.proc.join, 5.0)  # reap it (no zombie)

    def _resolve_many(self, batch: list[tuple[int, bool, Any]]) -> None:
        for rid, ok, value in batch:
            fut = self.pending.pop(rid, None)
            if fut is None or fut.done():
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(_rebuild(value))

    def submit(self, sid: str, op: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = self.loop.create_future()
        fut.add_done_callback(_retrieve)  # a failure nobody awaits any more (deadline passed) is not "never retrieved"
        if not self.alive:
            fut.set_exception(WorkerLost(self.why_dead))
            return fut
        rid = next(self._ids)
        self.pending[rid] = fut
        if not self._queued:
            self.loop.call_soon(self._flush)
        self._queued.append((rid, sid, op, args))
        return fut

    def _flush(self) -> None:
        batch, self._queued = self._queued, []
        if not batch or not self.alive or self._writer is None:
            return
        try:
            data = _frame(batch)
        except Exception:  # an argument that cannot be pickled: find it, fail that call only
            good = []
            for msg in batch:
                try:
                    pickle.dumps(msg)
                    good.append(msg)
                except Exception as exc:
                    self._resolve_many([(msg[0], False, _failure(exc))])
            data = _frame(good) if good else b""
        if data:
            self._writer.write(data)

    def fail(self, why: str) -> None:
        """Kill the process (if alive) and fail every pending call with :class:`WorkerLost`."""
        first = self.alive
        self.alive = False
        self.why_dead = self.why_dead or why
        with contextlib.suppress(Exception):
            self.proc.kill()
        if self._writer is not None:
            self._writer.close()
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(WorkerLost(why))
        if first:
            self.on_exit(self, why)

    async def stop(self) -> None:
        """Ask the worker to close its envs and exit; kill it if it does not within a few seconds."""
        self.alive = False
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.write(_frame(None))
        await asyncio.to_thread(self.proc.join, 3.0)
        if self.proc.is_alive():
            self.proc.kill()
            await asyncio.to_thread(self.proc.join, 1.0)
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()


class ProcessPool:
    """Session envs in ``size`` worker processes, each session pinned to one; calls with deadlines.

    Args:
        size: worker processes.
        factories: ``{env_id: picklable callable(**kwargs) -> env}``.
        threads: threads per worker (sessions on one worker run concurrently while they wait on I/O).
        on_lost: called with ``(session ids, why)`` when a worker dies with sessions on it.
    """

    def __init__(self, size: int, factories: Mapping[str, Any], threads: int,
                 on_lost: Callable[[set[str], str], None]) -> None:
        self.size = size
        self.factories = dict(factories)
        self.threads = threads
        self.on_lost = on_lost
        self.workers: list[_Worker | None] = [None] * size
        self.where: dict[str, _Worker] = {}
        self.kills = 0
        self._spawning: dict[int, asyncio.Task[None]] = {}
        self._ctx = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._ctx.get_start_method() == "forkserver":
            self._ctx.set_forkserver_preload(["turngym.server.workers", "turngym.envs"])
        for i in range(self.size):
            worker = await asyncio.to_thread(self._new, i)
            await worker.connect()
            self.workers[i] = worker

    def _new(self, index: int) -> _Worker:
        assert self._loop is not None
        return _Worker(index, self._ctx, self.factories, self.threads, self._loop, self._worker_exited)

    def _worker_exited(self, worker: _Worker, why: str) -> None:
        sessions = set(worker.sessions)
        for sid in sessions:
            self.where.pop(sid, None)
        if self.workers[worker.index] is worker:
            self.workers[worker.index] = None
            self._respawn(worker.index)
        if sessions:
            self.on_lost(sessions, why)

    def _respawn(self, index: int) -> None:
        async def spawn() -> None:
            try:
                worker = await asyncio.to_thread(self._new, index)
                await worker.connect()
                self.workers[index] = worker
            except Exception:
                log.exception("could not restart env worker %d", index)
            finally:
                self._spawning.pop(index, None)

        if index not in self._spawning and self._loop is not None and not self._loop.is_closed():
            self._spawning[index] = self._loop.create_task(spawn())

    async def _pick(self) -> _Worker:
        for _ in range(600):  # while every worker restarts (seconds at most), wait for one
            alive = [w for w in self.workers if w is not None and w.alive]
            if alive:
                return min(alive, key=lambda w: len(w.sessions))
            await asyncio.sleep(0.05)
        raise WorkerLost("no env worker process could be started")

    async def open(self, sid: str, env_id: str, kwargs: Mapping[str, Any], timeout: float) -> Any:
        """Build ``env_id`` on the least-loaded worker; returns its wire spec."""
        worker = await self._pick()
        worker.sessions.add(sid)
        self.where[sid] = worker
        try:
            return await self._await(worker, sid, "make", (env_id, dict(kwargs)), timeout)
        except BaseException:
            worker.sessions.discard(sid)
            self.where.pop(sid, None)
            raise

    async def call(self, sid: str, op: str, args: tuple[Any, ...], timeout: float) -> Any:
        worker = self.where.get(sid)
        if worker is None:
            raise WorkerLost("this session's env worker is gone; open a new session")
        return await self._await(worker, sid, op, args, timeout)

    async def _await(self, worker: _Worker, sid: str, op: str, args: tuple[Any, ...], timeout: float) -> Any:
        fut = worker.submit(sid, op, args)
        t0 = time.monotonic()
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            self.kills += 1
            worker.sessions.discard(sid)  # this session is told by its own reply, not as a bystander
            self.where.pop(sid, None)
            worker.fail(
                f"env worker {worker.index} was stopped because another session's {op} ran past its "
                f"{timeout:g} s deadline; this session's env was lost with it"
            )
            raise CallDeadline(f"{op} ran longer than its {timeout:g} s deadline "
                               f"({time.monotonic() - t0:.1f} s); its worker process was killed") from None

    def close(self, sid: str) -> None:
        """Close a session's env without waiting (a worker busy with a runaway step must not hold the caller)."""
        worker = self.where.pop(sid, None)
        if worker is None:
            return
        worker.sessions.discard(sid)
        worker.submit(sid, "close", ())

    def alive(self) -> int:
        return sum(1 for w in self.workers if w is not None and w.alive)

    async def shutdown(self) -> None:
        for task in list(self._spawning.values()):
            task.cancel()
        workers = [w for w in self.workers if w is not None]
        self.workers = [None] * self.size
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
