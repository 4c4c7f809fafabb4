"""Warm Python workers: ``run_python`` by ``fork`` inside a live sandbox.

Starting a bubblewrap sandbox and a fresh interpreter for every run pays namespace setup and
interpreter start again each time (``benchmarks/bench_sandbox.py`` measures both paths). A :class:`WarmPython` starts one interpreter per session inside the session's
sandbox (same namespaces, uid, limits and workdir) and runs each source in a forked child:
its own process group, per-run rlimits, a fresh ``__main__`` with the modules of a fresh
interpreter, output capped, the wall deadline enforced, and afterwards every process the run
left behind killed (``kill(-1)`` inside the PID namespace).

Where the session has a second, untrusted uid (bubblewrap as root), the worker is a trusted
launch (it keeps the capabilities to switch uids and to kill) and every run but a trusted one
drops to the untrusted uid with no capabilities: no run can signal, stop or read the worker,
so a worker lost with no limit hit was hit from outside and raises :class:`SandboxError`.

What differs from :meth:`Session.run_python`: the interpreter is forked, not started (so
``sys.flags``/``sys.argv[0]`` are the worker's), and per-run limits can only be lower than the
session's (rlimits cannot be raised from inside). Failures of the worker itself raise
:class:`SandboxError`; the next run starts a new worker.

The worker outlives runs, so whatever a run could leave in its namespace must not reach a
later user: after every run the worker kills leftover processes and removes SysV IPC objects,
and after every :meth:`Session.reset` it empties ``/tmp`` before the next run (a worker that
cannot is replaced). The wall deadline does not depend on the worker: the host kills the whole
sandbox (worker, PID namespace and all) if no answer came by the deadline plus a small slack,
and the session's cgroup or watchdog caps memory and tasks of worker and runs together.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import selectors
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources

from turngym.core.errors import ConfigError
from turngym.sandbox._proc import classify_failure
from turngym.sandbox.errors import SandboxError
from turngym.sandbox.inline import inside_prelude
from turngym.sandbox.limits import Limits, RunResult
from turngym.sandbox.local import UNTRUSTED_UID_ENV, BubblewrapSandbox, LocalSession, sandbox_env
from turngym.sandbox.watchdog import Watchdog, tree_pids

__all__ = ["WarmPython"]

_STARTUP_S = 10.0
#: Past a run's wall deadline, how long the host waits for the worker before killing it all.
_SLACK_S = 1.0


class _LimitKill(Exception):
    """The host's watchdog killed the sandbox for a limit."""

    def __init__(self, limit: str) -> None:
        super().__init__(limit)
        self.limit = limit


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


@lru_cache(maxsize=1)
def _worker_source() -> str:
    worker = resources.files("turngym.sandbox").joinpath("_warm_worker.py").read_text(encoding="utf-8")
    # The whole toolkit, though the worker uses only its hardening: the graders it forks (Code-v0's
    # harness and solution zygote) then find it loaded instead of compiling it on every run.
    return inside_prelude("codec", "framing", "hardening", "pipes") + worker + "\nmain()\n"


class WarmPython:
    """A forking Python worker living in a bubblewrap session.

    >>> from turngym.sandbox import BubblewrapSandbox
    >>> sb = BubblewrapSandbox()
    >>> with sb.open_session() as s, WarmPython(s) as py:
    ...     s.write_files({"data.txt": "21"})
    ...     py.run("print(2 * int(open('data.txt').read()))").stdout
    '42\\n'
    >>> sb.close()
    """

    def __init__(self, session: LocalSession) -> None:
        if not isinstance(session.sandbox, BubblewrapSandbox):
            raise ConfigError(f"WarmPython needs a bubblewrap session, got a {session.sandbox.name} one")
        self.session = session
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._generation = session.generation  # the session reset() count the worker's /tmp matches
        self._worker_pid: int | None = None  # the worker's host pid (to tell a stopped worker)
        #: Why the last worker was lost: "died", "stopped" (by a signal from outside: runs
        #: cannot reach it), "slow" (no answer, still running) or "garbled".
        self._lost: str | None = None

    # -- lifetime ------------------------------------------------------------------------
    def _start(self) -> subprocess.Popen[bytes]:
        sb: BubblewrapSandbox = self.session.sandbox  # type: ignore[assignment]
        lim = self.session.limits
        # The worker's own ceiling: the session's limits, but no CPU cap on the (idle) worker;
        # each run lowers its own limits after the fork.
        ceiling = lim.replace(cpu_s=10**7)
        self.session.prepare(lim)
        fds: list[int] = []
        split = self.session.run_uid is not None
        env = {**sandbox_env(self.session.workdir), **sb.python.env()}
        if split:
            env[UNTRUSTED_UID_ENV] = str(self.session.run_uid)
        try:
            argv, fds = sb.launch(self.session, [*sb.python.argv(), "-c", _worker_source()], lim, rlimits=ceiling,
                                  trusted=split)
            proc = subprocess.Popen(
                argv,
                cwd=self.session.host_dir,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=fds,
            )
        except OSError as exc:
            raise SandboxError(f"warm worker: could not start bubblewrap: {exc}") from exc
        finally:
            for fd in fds:
                os.close(fd)
        self._proc, self._buf = proc, b""
        self._generation = self.session.generation
        # An abandoned worker (its owner never closed) dies when this object is collected.
        self._finalizer = weakref.finalize(self, _kill_group, proc.pid)
        if not json.loads(self._read_line(_STARTUP_S)).get("ready"):
            self.close()
            raise SandboxError("warm worker: did not report ready")
        self._worker_pid = self._find_worker(proc.pid)
        return proc

    def _find_worker(self, root: int) -> int | None:
        """The worker's host pid: the one process of the session's uid in the sandbox's tree
        right after it reported ready (it has started nothing yet)."""
        for pid in tree_pids(root):
            try:
                if os.stat(f"/proc/{pid}").st_uid == self.session.uid:
                    return pid
            except OSError:
                continue
        return None

    def _worker_stopped(self) -> bool:
        """The worker (or bubblewrap above it) is stopped (state T): a job-control stop that,
        with runs under their own uid, came from outside the sandbox."""
        if self._proc is None:
            return False
        for pid in {self._proc.pid, *tree_pids(self._proc.pid)[:3], *([self._worker_pid] if self._worker_pid else [])}:
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state in (b"T", b"t"):
                return True
        return False

    def close(self) -> None:
        """Stop the worker (and with its PID namespace, everything it started)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            self._finalizer.detach()
            _kill_group(proc.pid)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            proc.wait()

    def __enter__(self) -> WarmPython:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- protocol ------------------------------------------------------------------------
    def _read_line(self, timeout: float, watchdog: Watchdog | None = None) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                now = time.monotonic()
                left = deadline - now
                if watchdog is not None and left > 0:
                    if watchdog.due(now) <= 0:
                        hit = watchdog.check(self._proc.pid)
                        if hit:
                            self.close()
                            raise _LimitKill(hit)
                    left = min(left, watchdog.due(time.monotonic()))
                    if not sel.select(left):
                        continue
                elif left <= 0 or not sel.select(left):
                    self._lost = "stopped" if self._worker_stopped() else "slow"
                    self.close()
                    raise SandboxError(f"warm worker: no answer within {timeout:.1f} s")
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self._lost = "died"
                    self.close()
                    raise SandboxError("warm worker: died")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def run(
        self,
        source: str,
        *,
        args: Sequence[str] = (),
        stdin: str | bytes | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        trusted: bool = False,
    ) -> RunResult:
        """Run Python ``source`` in the session's workdir; same result as :meth:`Session.run_python`.

        Runs are the session's untrusted uid where it has one (they cannot signal, stop or
        read the worker); ``trusted=True`` (a grader) keeps the worker's uid and the
        capabilities to start the code it judges as the untrusted uid (see
        :meth:`LocalSession.run_trusted`).
        """
        session = self.session
        session._check_open()
        top = self.session.limits
        lim = limits or top
        lim = lim.replace(**{f: min(getattr(lim, f), getattr(top, f)) for f in ("memory_mb", "file_size_mb", "open_files")})
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        req = {
            "source": source,
            "args": list(args),
            "stdin": base64.b64encode(data).decode(),
            "env": {**sandbox_env(session.workdir), **session.sandbox.python.env(), **(env or {})},
            "limits": dataclasses.asdict(lim),
            "trusted": bool(trusted),
        }
        if trusted and session.run_uid is not None:
            req["env"][UNTRUSTED_UID_ENV] = str(session.run_uid)
        session.prepare(lim)
        with self._lock:
            if self._proc is not None and self._generation != session.generation:
                req["wipe_tmp"] = True  # the session was reset: nothing of the last user may stay
            started = time.monotonic()
            self._lost = None
            try:
                proc = self._proc or self._start()
            except SandboxError:
                # A worker that cannot start because the session's cgroup is full (files its
                # runs left in its tmpfs) failed for the agent's reasons, not the sandbox's.
                hit = session.cgroup.limit_hit() if session.cgroup is not None else None
                if hit is None:
                    raise
                return RunResult(stdout="", stderr=f"[sandbox] {hit} limit reached before the program could start\n",
                                 exit_code=None, signal=signal.SIGKILL, limit_hit=hit,  # type: ignore[arg-type]
                                 duration_s=time.monotonic() - started, backend="bubblewrap-warm")
            assert proc.stdin is not None
            try:
                for _attempt in range(2):
                    proc.stdin.write(json.dumps(req).encode() + b"\n")
                    proc.stdin.flush()
                    resp = json.loads(self._read_line(lim.wall_s + _SLACK_S, session.watchdog(lim)))
                    if not resp.get("restart"):
                        break
                    # The worker could not empty /tmp: a fresh sandbox has a fresh one.
                    self.close()
                    req.pop("wipe_tmp", None)
                    proc = self._start()
                    assert proc.stdin is not None
                self._generation = session.generation
            except _LimitKill as exc:
                return session.settle(RunResult(
                    stdout="", stderr=f"[sandbox] killed: {exc.limit} limit exceeded\n", exit_code=None,
                    signal=signal.SIGKILL, limit_hit=exc.limit,  # type: ignore[arg-type]
                    duration_s=time.monotonic() - started, backend="bubblewrap-warm",
                ), lim)
            except (OSError, SandboxError, ValueError) as exc:
                lost = self._lost or ("garbled" if isinstance(exc, ValueError) else "died")
                self.close()
                hit = session.cgroup.limit_hit() if session.cgroup is not None else None
                if session.run_uid is not None and hit is None and lost != "slow":
                    # Runs cannot signal, stop or write to the worker (another uid), and no
                    # limit fired: something outside the sandbox killed or stopped it.
                    raise SandboxError(f"warm worker: {lost} mid-run with no limit hit ({exc})") from exc
                # A limit the session hit (the OOM killer may pick the worker), a run that
                # outlasted its deadline and starved the worker, or -- where runs share the
                # worker's uid -- a run that killed or stopped it: the program's failure, not
                # the sandbox's (otherwise code could turn any bad episode into an infra error).
                return session.settle(RunResult(
                    stdout="", stderr=f"[sandbox] the program killed or stalled its interpreter ({exc})\n",
                    exit_code=None, signal=signal.SIGKILL, limit_hit=hit or ("wall" if lost in ("slow", "stopped") else None),  # type: ignore[arg-type]
                    duration_s=time.monotonic() - started, backend="bubblewrap-warm",
                ), lim)
        status = int(resp["status"])
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = None if sig is not None else os.WEXITSTATUS(status)
        stderr = base64.b64decode(resp["stderr"]).decode("utf-8", "replace")
        limit = resp["killed_for"] or (classify_failure(sig, resp["cpu_s"], lim, stderr) if code != 0 else None)
        return session.settle(RunResult(
            stdout=base64.b64decode(resp["stdout"]).decode("utf-8", "replace"),
            stderr=stderr,
            exit_code=code,
            signal=sig,
            limit_hit=limit,
            duration_s=float(resp["duration_s"]),
            cpu_s=float(resp["cpu_s"]),
            output_truncated=bool(resp["truncated"]),
            backend="bubblewrap-warm",
        ), lim)
