"""The worker process's side of the process executor: the loop a worker runs, and what it sends back.

Everything here runs in the child (a forkserver or spawn child started by
:class:`turngym.server.workers.ProcessPool`), which finds :func:`worker_main` by its module
path; so this module imports only what a worker needs (the env ops of
:mod:`turngym.server.envhost`), never the server's side. The server's side
(:mod:`turngym.server.worker_handle`) imports from here the layout of the shared call table the
two sides share, and the form in which a failed call crosses the pipe.
"""

from __future__ import annotations

import contextlib
import faulthandler
import itertools
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from turngym.core.errors import TurngymError
from turngym.core.infra import MAX_TRACEBACK_CHARS
from turngym.server.envhost import CallCost, EnvHost, run_op
from turngym.server.protocol import spec_to_wire

__all__ = ["SECRET_ENV_VARS", "SLOT_CPU0", "SLOT_END", "SLOT_IDENT", "SLOT_RID", "SLOT_SIZE", "SLOT_START", "SLOT_TID",
           "call_failure", "scrub_environment", "worker_main"]

#: A worker's calls run on its reader thread while they average under this many seconds.
_WORKER_INLINE_BELOW_S = 0.001
#: Calls a worker times before it trusts the average.
_WORKER_WARMUP = 16

#: One slot of a worker's shared call table per thread that runs calls (the reader thread is slot 0):
#: the call id (written last, -1 while the slot is rewritten), when it started (CLOCK_MONOTONIC ns,
#: the same clock in every process), the thread's native id and its CPU time at the start (ns), when
#: it ended (0 while running), and the thread's Python ident (what faulthandler prints).
SLOT_RID, SLOT_START, SLOT_TID, SLOT_CPU0, SLOT_END, SLOT_IDENT = range(6)
SLOT_SIZE = 6
#: Environment variables a worker (and whatever its envs start) must never see.
SECRET_ENV_VARS = ("TURNGYM_TOKEN", "TURNGYM_SERVER_CONFIG", "TURNGYM_TOKEN_FILE")


def scrub_environment() -> None:
    """Remove the server's secrets from this process's environment, so no child process inherits them."""
    for name in SECRET_ENV_VARS:
        os.environ.pop(name, None)


def call_failure(exc: BaseException) -> tuple[str, str, bool, str]:
    """What crosses the pipe of a failed call: class name, message, whether it is turngym's, and (for an
    env bug, not a turngym error) the traceback, so whoever fixes the env can read where it raised."""
    is_turngym = isinstance(exc, TurngymError)
    tb = "" if is_turngym else "".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:]
    return type(exc).__name__, str(exc), is_turngym, tb


def worker_main(conn: Any, factories: Mapping[str, Callable[..., Any]], threads: int,
                 slots: Any = None, crash_path: str | None = None) -> None:
    """A worker process: receive batches of ``(rid, sid, op, args)``, send batches of ``(rid, ok, value)``.

    Calls of envs that have proved cheap run right on the reader thread; the others on a
    thread pool, so sessions waiting on I/O (a sandbox, a retriever) overlap. Either way a
    runaway call is the server's to stop: it kills this process at the call's deadline. Each
    call is entered in the shared call table before it runs, so the server knows what runs
    where even while a step holds this process's GIL.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when workers stop
    scrub_environment()  # envs (and what they start) need none of the server's secrets
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
                                    else next(next_slot)) * SLOT_SIZE
        if slots is not None:
            slots[index + SLOT_RID] = -1
            slots[index + SLOT_START] = time.monotonic_ns()
            slots[index + SLOT_TID] = threading.get_native_id()
            slots[index + SLOT_CPU0] = time.thread_time_ns()
            slots[index + SLOT_END] = 0
            slots[index + SLOT_IDENT] = threading.get_ident()
            slots[index + SLOT_RID] = rid
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
                            conn.send([(rid, False, call_failure(exc))])
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
                costs.setdefault(host.env_id, CallCost(_WORKER_INLINE_BELOW_S, warmup=_WORKER_WARMUP)).add(
                    time.perf_counter() - t0)
        except BaseException as exc:  # every failure is a reply; the worker lives on
            return rid, False, call_failure(exc)
        finally:
            if slots is not None:
                slots[index + SLOT_END] = time.monotonic_ns()
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
