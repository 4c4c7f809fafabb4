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

**Who is to blame when a worker dies.** Several sessions share a worker, so the death of one
worker ends several envs, and each session must be told the right story: the agent whose
action caused it scores a failure (training learns from it), every other session gets an
``infra_error`` (training drops the episode, it was not that agent's doing). The rule, by
evidence the server gathers itself:

* *Deadlines count from the call's actual start.* Each worker records in shared memory,
  for every thread, which call it runs, since when, and how much CPU the thread had used
  then. A call waiting in the worker's queue (behind another session's step, or unread
  because a step holds the worker's GIL) has not started and its deadline is not running.
* *A deadline kill charges the call that overran by burning the worker.* When a started
  call passes its deadline, the server reads each running call's thread CPU time from
  ``/proc/<pid>/task/<tid>/stat``. If another running call used much more CPU than the
  overdue one meanwhile, the overdue call was starved (a GIL-holding step runs alone) and
  the decision waits for the hog's own deadline; otherwise the overdue call is the culprit.
  The culprit's ``step`` is answered as the agent's failure (``step_timeout``); every
  other session on the worker gets :class:`WorkerLost`, an infrastructure error that says
  it was not its agent's fault.
* *A worker that dies by its own hand* (a crash signal such as SIGSEGV/SIGABRT/SIGBUS, a
  CPU or file-size rlimit signal, or an exit the server did not ask for) during calls is the
  failure of the call whose thread the crash report names (Python's ``faulthandler`` writes
  the crashing thread to a file the server reads), or of the only call running. If several
  were running and none is named, nobody is charged: all get ``infra_error``.
* *A worker that goes over its memory limit* (``memory_mb``, watched by the server from
  ``/proc/<pid>/statm``) is killed and charged to the running call that used the most CPU
  (allocating gigabytes costs CPU); with no call running, to nobody.
* *A worker killed from outside* (SIGKILL/SIGTERM with no limit hit: an operator, the
  kernel's OOM killer) is nobody's action: every session on it gets ``infra_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import itertools
import logging
import multiprocessing
import os
import pickle
import queue
import signal
import socket
import struct
import tempfile
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from turngym.core import errors as core_errors
from turngym.core.env import env_action_choices
from turngym.core.errors import ConfigError, SnapshotError, TurngymError
from turngym.core.infra import MAX_TRACEBACK_CHARS
from turngym.server.errors import WorkerLost
from turngym.server.protocol import choices_to_wire, rng_from_wire, rng_to_wire, spec_to_wire, task_to_wire

__all__ = ["CallCost", "EnvHost", "ProcessPool", "RegistryFactory", "CallDeadline", "RemoteCallError", "SECRET_ENV_VARS",
           "run_op", "scrub_environment"]

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


def _choices(h: EnvHost) -> list[str] | None:
    """The env's valid actions now (``action_choices()``), computed here, next to the env, as sent."""
    return choices_to_wire(env_action_choices(h.env), env_name=type(getattr(h.env, "unwrapped", h.env)).__qualname__)


def _reset(h: EnvHost, seed: Any, options: dict[str, Any] | None) -> Any:
    """``(obs, info, choices)``: the session manager keeps ``choices`` for the reply and strips it."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed must be an int or null, got {seed!r}")
    return (*h.env.reset(seed=seed, options=options), _choices(h))


def _step(h: EnvHost, action: Any) -> Any:
    """``(obs, reward, terminated, truncated, info, choices)``, as :func:`_reset`."""
    return (*h.env.step(action), _choices(h))


def _restore(h: EnvHost, handle: str) -> dict[str, Any]:
    h.env.restore(h.get_snapshot(handle))
    reply = {"ok": True, "state_key": h.env.state_key(), "turn": h.env.turn, "done": h.env.done}
    choices = _choices(h)  # the restored state's, not the last step's
    if choices is not None:
        reply["choices"] = choices
    return reply


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
        "state_key": env.state_key() if task is not None else None,
        "done": env.done,
        "max_turns": env.max_turns,
    }


def _tools(h: EnvHost) -> list[dict[str, Any]]:
    """The tools the env offers now, as OpenAI function schemas (``env.tools``; [] for an env without)."""
    tools = getattr(getattr(h.env, "unwrapped", h.env), "tools", None)
    return [dict(t) for t in tools] if isinstance(tools, list) else []


_OPS: dict[str, Callable[..., Any]] = {
    "reset": _reset,
    "step": _step,
    "snapshot": lambda h, limit: h.add_snapshot(h.env.snapshot(), limit),
    "restore": _restore,
    "release": lambda h, handle: h.snapshots.pop(handle, None) and None,
    "oracle_action": lambda h: h.env.oracle_action(),
    "sample_action": _sample,
    "render": lambda h: h.env.render(),
    "task": lambda h: task_to_wire(h.env.task),
    "state": _state,
    "spec": lambda h: spec_to_wire(h.env, h.env_id),
    "tools": _tools,
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

    def __init__(self, remote_type: str, message: str, remote_turngym: bool = False, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.remote_type = remote_type
        self.remote_turngym = remote_turngym
        self.remote_traceback = remote_traceback


class CallDeadline(Exception):
    """A call's worker was killed for the call's own doing (raised to the session manager only).

    ``reason`` says what the call did: ``"step_timeout"`` (ran past its deadline),
    ``"worker_crash"`` (its worker died by its own hand while only this call ran, or the crash
    report named this call's thread), ``"memory_limit"`` (its worker went over its memory limit).
    """

    def __init__(self, message: str, reason: str = "step_timeout") -> None:
        super().__init__(message)
        self.reason = reason


def _failure(exc: BaseException) -> tuple[str, str, bool, str]:
    """What crosses the pipe of a failed call: class name, message, whether it is turngym's, and (for an
    env bug, not a turngym error) the traceback, so whoever fixes the env can read where it raised."""
    is_turngym = isinstance(exc, TurngymError)
    tb = "" if is_turngym else "".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:]
    return type(exc).__name__, str(exc), is_turngym, tb


def _rebuild(failure: tuple[str, ...]) -> BaseException:
    name, message, is_turngym = failure[:3]
    cls = getattr(core_errors, name, None)
    if is_turngym and name in core_errors.__all__ and isinstance(cls, type) and issubclass(cls, TurngymError):
        return cls(message)
    return RemoteCallError(name, message, bool(is_turngym), str(failure[3]) if len(failure) > 3 else "")


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

# One slot of a worker's shared call table per thread that runs calls (the reader thread is slot 0):
# the call id (written last, -1 while the slot is rewritten), when it started (CLOCK_MONOTONIC ns,
# the same clock in every process), the thread's native id and its CPU time at the start (ns), when
# it ended (0 while running), and the thread's Python ident (what faulthandler prints).
_RID, _START, _TID, _CPU0, _END, _IDENT = range(6)
_SLOT = 6
#: Environment variables a worker (and whatever its envs start) must never see.
SECRET_ENV_VARS = ("TURNGYM_TOKEN", "TURNGYM_SERVER_CONFIG", "TURNGYM_TOKEN_FILE")


def _worker_main(conn: Any, factories: Mapping[str, Callable[..., Any]], threads: int,
                 slots: Any = None, crash_path: str | None = None) -> None:
    """A worker process: receive batches of ``(rid, sid, op, args)``, send batches of ``(rid, ok, value)``.

    Calls of envs that have proved cheap run right on the reader thread; the others on a
    thread pool, so sessions waiting on I/O (a sandbox, a retriever) overlap. Either way a
    runaway call is the server's to stop: it kills this process at the call's deadline. Each
    call is entered in the shared call table before it runs, so the server knows what runs
    where even while a step holds this process's GIL.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when workers stop
    for secret in SECRET_ENV_VARS:  # envs (and what they start) need none of them
        os.environ.pop(secret, None)
    if crash_path is not None:  # a crash names its thread here: the server charges that thread's call
        crash_file = open(crash_path, "w")  # noqa: SIM115 (open for the life of the process)
        faulthandler.enable(crash_file, all_threads=True)  # names the current thread
    hosts: dict[str, EnvHost] = {}
    costs: dict[str, CallCost] = {}
    replies: queue.SimpleQueue[Any] = queue.SimpleQueue()
    send_lock = threading.Lock()
    slot_of = threading.local()
    next_slot = itertools.count(1)

    def enter(rid: int) -> int:
        index = getattr(slot_of, "base", None)
        if index is None:
            index = slot_of.base = (0 if threading.current_thread() is threading.main_thread()
                                    else next(next_slot)) * _SLOT
        if slots is not None:
            slots[index + _RID] = -1
            slots[index + _START] = time.monotonic_ns()
            slots[index + _TID] = threading.get_native_id()
            slots[index + _CPU0] = time.thread_time_ns()
            slots[index + _END] = 0
            slots[index + _IDENT] = threading.get_ident()
            slots[index + _RID] = rid
        return index

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
        index = enter(rid)
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
        finally:
            if slots is not None:
                slots[index + _END] = time.monotonic_ns()
        return rid, True, value

    def pooled(rid: int, sid: str, op: str, args: tuple[Any, ...]) -> None:
        replies.put(handle(rid, sid, op, args))

    threading.Thread(target=send_loop, name="turngym-worker-send", daemon=True).start()
    send([(-1, True, "ready")])  # bootstrapped: the server's start() waits for this
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


@dataclass(eq=False)
class _Call:
    """One call sent to a worker, as the server tracks it (start and thread come from the shared table)."""

    rid: int
    sid: str
    op: str
    fut: asyncio.Future[Any]
    submitted: float
    started: float | None = None
    tid: int = 0
    cpu0: float = 0.0
    ident: int = 0
    ended: bool = False

    @property
    def running(self) -> bool:
        return self.started is not None and not self.ended


#: Deaths a process deals itself: a crash, or an rlimit it ran into (CPU time, file size).
_SELF_INFLICTED = frozenset(int(getattr(signal, n)) for n in (
    "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGSYS", "SIGTRAP", "SIGXCPU", "SIGXFSZ")
    if hasattr(signal, n))
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: A call is starved by another when that one used this share of the time they ran together, and twice its CPU
#: (low on purpose: a false "starved" only defers the decision to the other call's deadline).
_HOG_SHARE = 0.05
#: A started call's decision waits for a hog's deadline at most until this many deadlines after its start.
_MAX_STARVED = 3.0

_MAIN_GUARD_HINT = (
    "if your script starts the server at import time, put that code under `if __name__ == \"__main__\":` "
    "(env worker processes import your script to find env factories defined in it)"
)


class _Worker:
    """The server's side of one worker process: its socket on the event loop, and the calls pending on it.

    The loop never blocks on the worker: writes are buffered by the transport (a worker stalled
    by a GIL-holding step simply stops reading), and replies are read by the loop itself, so a
    call costs no thread hop on the server side. Calls submitted in one loop iteration go out
    in one write. What runs in the worker right now is read from the shared call table, which
    the worker writes without the server's help (and without its own GIL being free).
    """

    def __init__(self, index: int, ctx: Any, factories: Mapping[str, Any], threads: int,
                 loop: asyncio.AbstractEventLoop, on_exit: Callable[[_Worker, str, str | None], None]) -> None:
        self.index = index
        self.loop = loop
        self.on_exit = on_exit
        self.slots = ctx.RawArray("q", (threads + 1) * _SLOT)
        for i in range(threads + 1):
            self.slots[i * _SLOT + _RID] = -1
        fd, self.crash_path = tempfile.mkstemp(prefix=f"turngym-worker-{index}-", suffix=".crash")
        os.close(fd)
        parent, child = ctx.Pipe()  # duplex: a Unix socket pair
        self.proc = ctx.Process(target=_worker_main, args=(child, dict(factories), threads, self.slots, self.crash_path),
                                name=f"turngym-env-worker-{index}", daemon=True)
        try:
            _start_without_main(self.proc, factories)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            parent.close()
            self._remove_crash_file()
            raise ConfigError(
                f"an env factory cannot be sent to a worker process ({exc}); pass module-level callables, "
                "or serve with executor='thread'"
            ) from None
        finally:
            child.close()
        self._sock = socket.socket(fileno=os.dup(parent.fileno()))
        parent.close()
        self.calls: dict[int, _Call] = {}
        self.sessions: set[str] = set()
        self.alive = True
        self.why_dead = ""
        self.ready: asyncio.Future[None] = loop.create_future()
        self._ids = itertools.count()
        self._queued: list[tuple[int, str, str, tuple[Any, ...]]] = []
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None

    @property
    def pending(self) -> dict[int, _Call]:
        return self.calls

    async def connect(self, timeout: float = 60.0) -> None:
        """Connect to the worker and wait until it has bootstrapped (a script without a main guard never does)."""
        reader, self._writer = await asyncio.open_unix_connection(sock=self._sock, limit=1 << 22)
        self._reader_task = self.loop.create_task(self._read_loop(reader))
        try:
            await asyncio.wait_for(asyncio.shield(self.ready), timeout)
        except TimeoutError:
            self.fail("env worker process did not start in time")
            raise ConfigError(f"env worker process {self.index} did not start within {timeout:g} s; "
                              + _MAIN_GUARD_HINT) from None

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = _HEADER.unpack(await reader.readexactly(4))
                if size == -1:
                    (size,) = _BIG.unpack(await reader.readexactly(8))
                self._resolve_many(pickle.loads(await reader.readexactly(size)))
        except (asyncio.IncompleteReadError, ConnectionError, OSError, pickle.UnpicklingError, EOFError):
            pass
        if self.alive:  # died on its own: a crash, a limit, or a kill from outside; not a server kill
            await asyncio.to_thread(self.proc.join, 2.0)
            if not self.ready.done():
                self.ready.set_exception(ConfigError(
                    f"env worker process {self.index} exited while starting (code {self.proc.exitcode}); "
                    + _MAIN_GUARD_HINT))
                self.ready.exception()  # retrieved here too: nobody may be waiting any more
            if self.alive:
                self._died_alone()
        await asyncio.to_thread(self.proc.join, 5.0)  # reap it (no zombie)
        self._remove_crash_file()

    def _remove_crash_file(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.crash_path)

    def _resolve_many(self, batch: list[tuple[int, bool, Any]]) -> None:
        for rid, ok, value in batch:
            if rid == -1:
                if not self.ready.done():
                    self.ready.set_result(None)
                continue
            call = self.calls.pop(rid, None)
            if call is None or call.fut.done():
                continue
            if ok:
                call.fut.set_result(value)
            else:
                call.fut.set_exception(_rebuild(value))

    def submit(self, sid: str, op: str, args: tuple[Any, ...]) -> _Call:
        fut: asyncio.Future[Any] = self.loop.create_future()
        fut.add_done_callback(_retrieve)  # a failure nobody awaits any more (deadline passed) is not "never retrieved"
        rid = next(self._ids)
        call = _Call(rid, sid, op, fut, time.monotonic())
        if not self.alive:
            fut.set_exception(WorkerLost(self.why_dead))
            return call
        self.calls[rid] = call
        if not self._queued:
            self.loop.call_soon(self._flush)
        self._queued.append((rid, sid, op, args))
        return call

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

    # ------------------------------------------------------------------ evidence
    def scan(self) -> None:
        """Update the pending calls from the worker's shared call table (start, thread, CPU at start, end)."""
        slots = self.slots
        for base in range(0, len(slots), _SLOT):
            rid = slots[base + _RID]
            if rid < 0 or rid not in self.calls:
                continue
            start, tid, cpu0, end, ident = (slots[base + _START], slots[base + _TID], slots[base + _CPU0],
                                            slots[base + _END], slots[base + _IDENT])
            if slots[base + _RID] != rid:  # rewritten while read: the call has ended anyway
                continue
            call = self.calls[rid]
            call.started, call.tid, call.cpu0, call.ident = start / 1e9, tid, cpu0 / 1e9, ident
            call.ended = end != 0

    def cpu_used(self, call: _Call) -> float:
        """CPU seconds ``call``'s thread used since the call started (0 when /proc cannot tell)."""
        try:
            with open(f"/proc/{self.proc.pid}/task/{call.tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return max(0.0, (int(fields[11]) + int(fields[12])) / _TICK - call.cpu0)
        except (OSError, IndexError, ValueError):
            return 0.0

    def rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/statm", "rb") as f:
                return int(f.read().split()[1]) * _PAGE / (1 << 20)
        except (OSError, IndexError, ValueError):
            return 0.0

    def judge(self, call: _Call, timeout: float) -> float | None:
        """Decide about ``call`` at its deadline check: the next check time, or None after a kill.

        See the module docstring for the rule. Called only while ``call`` is still pending.
        """
        now = time.monotonic()
        self.scan()
        if call.started is None or call.ended:  # queued (its deadline has not begun), or done with its reply on the way
            if now - call.submitted > (_MAX_STARVED + 1) * timeout and not any(c.running for c in self.calls.values()):
                self.fail(f"not this agent's failure: env worker {self.index} stopped taking calls for "
                          f"{now - call.submitted:.0f} s (nothing running); this session's env was lost with it")
                return None
            return now + min(timeout, 0.5)
        if now < call.started + timeout:
            return call.started + timeout
        running = [c for c in self.calls.values() if c.running]
        cpu = {c.rid: self.cpu_used(c) for c in running}
        mine = cpu.get(call.rid, 0.0)
        culprit = call
        hogs = [c for c in running if c is not call
                and cpu[c.rid] > max(2 * mine, _HOG_SHARE * (now - max(c.started or now, call.started)), 0.02)]
        if hogs:
            hog = max(hogs, key=lambda c: cpu[c.rid])
            assert hog.started is not None
            if now < hog.started + timeout and now < call.started + _MAX_STARVED * timeout:
                return hog.started + timeout  # starved by the hog: the hog's deadline decides
            culprit = hog
        took = now - (culprit.started or now)
        self.kill_for(culprit, "step_timeout",
                      f"{culprit.op} ran longer than its {timeout:g} s deadline ({took:.1f} s since it started, "
                      f"{cpu.get(culprit.rid, 0.0):.1f} s CPU); its worker process was killed",
                      f"{culprit.op} ran past its {timeout:g} s deadline")
        return None

    def kill_for(self, culprit: _Call | None, reason: str, culprit_why: str, what: str) -> None:
        """Kill the worker for ``culprit``'s doing: it gets :class:`CallDeadline`, the others :class:`WorkerLost`."""
        if culprit is not None:
            self.calls.pop(culprit.rid, None)
            self.sessions.discard(culprit.sid)  # told by its own reply, not as a bystander
            if not culprit.fut.done():
                culprit.fut.set_exception(CallDeadline(culprit_why, reason))
        # first the words that matter: a WebSocket close reason (how idle sessions hear it) keeps ~120 bytes
        self.fail(f"not this agent's failure: env worker {self.index} was stopped because another session's {what}; "
                  "this session's env was lost with it", culprit_sid=culprit.sid if culprit else None)

    def _died_alone(self) -> None:
        """The worker exited without the server killing it: charge the call the evidence names, or nobody."""
        code = self.proc.exitcode
        self.scan()
        running = [c for c in self.calls.values() if c.running]
        self_inflicted = code is not None and (code >= 0 or -code in _SELF_INFLICTED)
        culprit: _Call | None = None
        if self_inflicted and running:
            named = _crashed_thread(self.crash_path)
            if named is not None:  # the report names the crashing thread: its call, if it ran one
                culprit = next((c for c in running if c.ident == named), None)
            elif len(running) == 1:
                culprit = running[0]
        how = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
               and -code in signal.Signals._value2member_map_ else f"exit code {code}")
        if culprit is not None:
            self.kill_for(culprit, "worker_crash",
                          f"the env's worker process died during this {culprit.op} ({how}); the action crashed it",
                          f"{culprit.op} crashed it ({how})")
        elif self_inflicted:
            self.fail(f"infrastructure error: env worker {self.index} crashed ({how}) with no single call to blame; "
                      "this session's env was lost with it")
        else:
            self.fail(f"infrastructure error: env worker {self.index} was killed from outside the server ({how}, "
                      "no server limit hit); this session's env was lost with it")

    def fail(self, why: str, culprit_sid: str | None = None) -> None:
        """Kill the process (if alive) and fail every pending call with :class:`WorkerLost`."""
        first = self.alive
        self.alive = False
        self.why_dead = self.why_dead or why
        with contextlib.suppress(Exception):
            self.proc.kill()
        if self._writer is not None:
            self._writer.close()
        pending, self.calls = self.calls, {}
        for call in pending.values():
            if not call.fut.done():
                call.fut.set_exception(WorkerLost(why))
        if first:
            self.on_exit(self, why, culprit_sid)

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
        self._remove_crash_file()


def _crashed_thread(path: str) -> int | None:
    """The Python ident of the thread faulthandler reported as crashing, if it wrote a report."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(65536)
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Current thread 0x"):
            with contextlib.suppress(ValueError, IndexError):
                return int(line.split()[2], 16)
    return None


_START_LOCK = threading.Lock()


def _start_without_main(proc: Any, factories: Mapping[str, Any]) -> None:
    """Start a worker without making it re-import the user's ``__main__`` script, unless a factory lives there.

    multiprocessing's forkserver and spawn children run the parent's main script again (as
    ``__mp_main__``) so that objects defined in it can be unpickled. A script that starts the
    server at import time would start it again in every worker: the classic missing-guard
    error. Worker factories are usually registry ids or importable classes, which need no
    main script, so it is left out; a factory defined in the script itself still needs it, and
    then a missing guard is reported with the fix (see :meth:`_Worker.connect`).
    """
    from multiprocessing import spawn

    if any(getattr(f, "__module__", None) == "__main__" for f in factories.values()):
        proc.start()
        return
    with _START_LOCK:
        original = spawn.get_preparation_data

        def without_main(name: str) -> dict[str, Any]:
            data = original(name)
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
            return data

        spawn.get_preparation_data = without_main  # type: ignore[assignment]
        try:
            proc.start()
        finally:
            spawn.get_preparation_data = original  # type: ignore[assignment]


def scrub_environment() -> None:
    """Remove the server's secrets from this process's environment, so no child process inherits them."""
    for name in SECRET_ENV_VARS:
        os.environ.pop(name, None)


class ProcessPool:
    """Session envs in ``size`` worker processes, each session pinned to one; calls with deadlines.

    Args:
        size: worker processes.
        factories: ``{env_id: picklable callable(**kwargs) -> env}``.
        threads: threads per worker (sessions on one worker run concurrently while they wait on I/O).
        on_lost: called with ``(session ids, why)`` when a worker dies with sessions on it.
        memory_mb: a worker whose resident memory passes this is killed and the running call that
            used the most CPU is charged (None: no limit).
    """

    def __init__(self, size: int, factories: Mapping[str, Any], threads: int,
                 on_lost: Callable[[set[str], str], None], memory_mb: float | None = None) -> None:
        self.size = size
        self.factories = dict(factories)
        self.threads = threads
        self.on_lost = on_lost
        self.memory_mb = memory_mb
        self.workers: list[_Worker | None] = [None] * size
        self.where: dict[str, _Worker] = {}
        self.kills = 0
        self._spawning: dict[int, asyncio.Task[None]] = {}
        self._watch: asyncio.Task[None] | None = None
        self._ctx = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        scrub_environment()  # before the forkserver starts: it (and every worker) copies this environment
        if self._ctx.get_start_method() == "forkserver":
            self._ctx.set_forkserver_preload(["turngym.server.workers", "turngym.envs"])
        for i in range(self.size):
            worker = await asyncio.to_thread(self._new, i)
            try:
                await worker.connect()
            except BaseException:
                await self.shutdown()
                raise
            self.workers[i] = worker
        if self.memory_mb is not None:
            self._watch = self._loop.create_task(self._watch_memory())

    async def _watch_memory(self) -> None:
        assert self.memory_mb is not None
        while True:
            await asyncio.sleep(0.1)
            for worker in list(self.workers):
                if worker is None or not worker.alive:
                    continue
                rss = worker.rss_mb()
                if rss <= self.memory_mb:
                    continue
                worker.scan()
                running = [c for c in worker.calls.values() if c.running]
                culprit = max(running, key=worker.cpu_used) if running else None
                log.warning("env worker %d over its memory limit (%.0f MB > %g MB): killed", worker.index, rss,
                            self.memory_mb)
                worker.kill_for(culprit, "memory_limit",
                                f"the env's worker process went over its {self.memory_mb:g} MB memory limit "
                                f"({rss:.0f} MB) during this {culprit.op if culprit else 'call'}; it was killed",
                                f"call took its worker over the {self.memory_mb:g} MB memory limit")

    def _new(self, index: int) -> _Worker:
        assert self._loop is not None
        return _Worker(index, self._ctx, self.factories, self.threads, self._loop, self._worker_exited)

    def _worker_exited(self, worker: _Worker, why: str, culprit_sid: str | None) -> None:
        self.kills += 1
        sessions = set(worker.sessions)
        for sid in sessions | ({culprit_sid} if culprit_sid else set()):
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
        call = worker.submit(sid, op, args)
        due = call.submitted + timeout  # the earliest the call can be overdue (if it started at once)
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(call.fut), max(0.0, due - time.monotonic()))
            except TimeoutError:
                pass
            if call.fut.done():
                continue  # answered meanwhile, or failed with its worker: the next wait returns it
            if not worker.alive:
                raise WorkerLost(worker.why_dead or "this session's env worker is gone; open a new session")
            next_due = worker.judge(call, timeout)
            due = next_due if next_due is not None else time.monotonic()

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
        if self._watch is not None:
            self._watch.cancel()
        for task in list(self._spawning.values()):
            task.cancel()
        workers = [w for w in self.workers if w is not None]
        self.workers = [None] * self.size
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
