"""The server's side of one worker process: its pipe on the event loop, its pending calls, and the evidence.

:class:`WorkerHandle` sends calls to a worker process and resolves their replies, reads the worker's
shared call table and ``/proc`` to learn what runs there and what it costs, and applies the
blame rule of :mod:`turngym.server.workers` when a call overruns its deadline or the worker
dies. It is split from :class:`~turngym.server.workers.ProcessPool` (which owns several workers
and routes sessions to them) because one worker's bookkeeping is a unit of its own, and from
:mod:`turngym.server.worker_process` (what runs in the child), which it imports and never the
other way: the child must not load the server's event-loop side.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import signal
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from turngym.core import errors as core_errors
from turngym.core.errors import ConfigError, TurngymError
from turngym.server.errors import WorkerLost
from turngym.server.worker_process import (
    SLOT_CPU0,
    SLOT_END,
    SLOT_IDENT,
    SLOT_RID,
    SLOT_SIZE,
    SLOT_START,
    SLOT_TID,
    call_failure,
    worker_main,
)

__all__ = ["CallDeadline", "RemoteCallError", "WorkerHandle"]


# --------------------------------------------------------------------------- errors across
class RemoteCallError(Exception):
    """An env exception that could not cross the pipe as itself: its class name and message survive."""

    def __init__(self, remote_type: str, message: str, remote_turngym: bool = False,
                 remote_traceback: str = "") -> None:
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


def _rebuild(failure: tuple[str, ...]) -> BaseException:
    name, message, is_turngym = failure[:3]
    cls = getattr(core_errors, name, None)
    if is_turngym and name in core_errors.__all__ and isinstance(cls, type) and issubclass(cls, TurngymError):
        return cls(message)
    return RemoteCallError(name, message, bool(is_turngym), str(failure[3]) if len(failure) > 3 else "")


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


class WorkerHandle:
    """The server's side of one worker process: its socket on the event loop, and the calls pending on it.

    The loop never blocks on the worker: writes are buffered by the transport (a worker stalled
    by a GIL-holding step simply stops reading), and replies are read by the loop itself, so a
    call costs no thread hop on the server side. Calls submitted in one loop iteration go out
    in one write. What runs in the worker right now is read from the shared call table, which
    the worker writes without the server's help (and without its own GIL being free).
    """

    def __init__(self, index: int, ctx: Any, factories: Mapping[str, Any], threads: int,
                 loop: asyncio.AbstractEventLoop, on_exit: Callable[[WorkerHandle, str, str | None], None]) -> None:
        self.index = index
        self.loop = loop
        self.on_exit = on_exit
        self.slots = ctx.RawArray("q", (threads + 1) * SLOT_SIZE)
        for i in range(threads + 1):
            self.slots[i * SLOT_SIZE + SLOT_RID] = -1
        fd, self.crash_path = tempfile.mkstemp(prefix=f"turngym-worker-{index}-", suffix=".crash")
        os.close(fd)
        parent, child = ctx.Pipe()  # duplex: a Unix socket pair
        self.proc = ctx.Process(target=worker_main, args=(child, dict(factories), threads, self.slots, self.crash_path),
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
                    self._resolve_many([(msg[0], False, call_failure(exc))])
            data = _frame(good) if good else b""
        if data:
            self._writer.write(data)

    # ------------------------------------------------------------------ evidence
    def scan(self) -> None:
        """Update the pending calls from the worker's shared call table (start, thread, CPU at start, end)."""
        slots = self.slots
        for base in range(0, len(slots), SLOT_SIZE):
            rid = slots[base + SLOT_RID]
            if rid < 0 or rid not in self.calls:
                continue
            start, tid, cpu0, end, ident = (slots[base + SLOT_START], slots[base + SLOT_TID], slots[base + SLOT_CPU0],
                                            slots[base + SLOT_END], slots[base + SLOT_IDENT])
            if slots[base + SLOT_RID] != rid:  # rewritten while read: the call has ended anyway
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

        See :mod:`turngym.server.workers` for the rule. Called only while ``call`` is still pending.
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
    then a missing guard is reported with the fix (see :meth:`WorkerHandle.connect`).
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
