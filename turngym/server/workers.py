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

The pieces live in four modules, imported one way (this one at the top):
:mod:`turngym.server.envhost` (what an op does to an env, wherever it lives),
:mod:`turngym.server.worker_process` (what a worker process runs),
:mod:`turngym.server.worker_handle` (the server's side of one worker, where the rule above is
applied), and this one (:class:`ProcessPool`, and the names the rest of the server imports).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from turngym.server.envhost import CallCost, EnvHost, RegistryFactory, run_op
from turngym.server.errors import WorkerLost
from turngym.server.worker_handle import CallDeadline, RemoteCallError, WorkerHandle
from turngym.server.worker_process import SECRET_ENV_VARS, scrub_environment

__all__ = ["CallCost", "EnvHost", "ProcessPool", "RegistryFactory", "CallDeadline", "RemoteCallError",
           "SECRET_ENV_VARS", "run_op", "scrub_environment"]

log = logging.getLogger("turngym.server")


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
        self.workers: list[WorkerHandle | None] = [None] * size
        self.where: dict[str, WorkerHandle] = {}
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

    def _new(self, index: int) -> WorkerHandle:
        assert self._loop is not None
        return WorkerHandle(index, self._ctx, self.factories, self.threads, self._loop, self._worker_exited)

    def _worker_exited(self, worker: WorkerHandle, why: str, culprit_sid: str | None) -> None:
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

    async def _pick(self) -> WorkerHandle:
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

    async def _await(self, worker: WorkerHandle, sid: str, op: str, args: tuple[Any, ...], timeout: float) -> Any:
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
