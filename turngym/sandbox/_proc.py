"""Run one process tree under limits: rlimits, a wall deadline, an output cap, a group kill.

Shared by the local backends (bubblewrap and rlimit-only). The child starts in its own
session/process group; on the deadline or an output flood the whole group gets SIGKILL.
Exit is observed through a pidfd so the loop never busy-waits, and ``wait4`` gives the CPU
time of the tree.
"""

from __future__ import annotations

import json
import math
import os
import resource
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from turngym.sandbox.errors import SandboxError
from turngym.sandbox.inside.pipes import Pipes
from turngym.sandbox.limits import LimitName, Limits, RunResult
from turngym.sandbox.watchdog import Watchdog

__all__ = ["run_process", "rlimit_setter", "rlimit_argv", "classify_failure"]

_DRAIN_S = 0.5


def _rlimit_pairs(limits: Limits) -> list[tuple[int, str, tuple[int, int]]]:
    cpu = max(1, math.ceil(limits.cpu_s))
    return [
        (resource.RLIMIT_CPU, "--cpu", (cpu, cpu + 1)),
        (resource.RLIMIT_AS, "--as", (limits.memory_mb << 20,) * 2),
        (resource.RLIMIT_FSIZE, "--fsize", (limits.file_size_mb << 20,) * 2),
        (resource.RLIMIT_NPROC, "--nproc", (limits.processes,) * 2),
        (resource.RLIMIT_NOFILE, "--nofile", (limits.open_files,) * 2),
        (resource.RLIMIT_CORE, "--core", (0, 0)),
    ]


def rlimit_argv(prlimit: str, limits: Limits) -> list[str]:
    """A ``prlimit ... --`` prefix applying ``limits`` before exec-ing the launcher.

    Preferred over :func:`rlimit_setter`: a ``preexec_fn`` forces a full ``fork`` of this
    (large) interpreter, where an argv prefix lets ``subprocess`` use ``vfork`` — a few ms per run.

    >>> rlimit_argv("prlimit", Limits(cpu_s=1.5, memory_mb=1, processes=8))[:3]
    ['prlimit', '--cpu=2:3', '--as=1048576:1048576']
    """
    return [prlimit, *(f"{flag}={soft}:{hard}" for _, flag, (soft, hard) in _rlimit_pairs(limits)), "--"]


def rlimit_setter(limits: Limits) -> Callable[[], None]:
    """A ``preexec_fn`` applying ``limits`` as rlimits in the child (inherited by everything)."""
    pairs = [(which, value) for which, _, value in _rlimit_pairs(limits)]

    def apply() -> None:
        for which, value in pairs:
            resource.setrlimit(which, value)

    return apply


# What a program prints when an rlimit refused it something (tail of stderr, lower-cased).
_MEMORY_MARKERS = ("memoryerror", "cannot allocate memory", "std::bad_alloc", "out of memory")
_FSIZE_MARKERS = ("file too large", "[errno 27]")
_NPROC_MARKERS = ("resource temporarily unavailable", "fork: retry", "can't start new thread", "[errno 11]")
_DISK_MARKERS = ("no space left on device", "[errno 28]")


def classify_failure(sig: int | None, cpu_s: float, limits: Limits, stderr: str) -> LimitName | None:
    """Which limit most likely ended a run that failed on its own (best effort)."""
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= limits.cpu_s * 0.95):
        return "cpu"
    if sig == signal.SIGXFSZ:
        return "file_size"
    tail = stderr[-4000:].lower()
    if any(m in tail for m in _FSIZE_MARKERS):
        return "file_size"
    if any(m in tail for m in _DISK_MARKERS):
        return "disk"
    if any(m in tail for m in _MEMORY_MARKERS):
        return "memory"
    if any(m in tail for m in _NPROC_MARKERS):
        return "processes"
    return None


class _NsWatcher:
    """Reads bubblewrap's JSON status stream and holds a pidfd on the namespace's init.

    The pidfd is normally opened while bubblewrap still runs (so it names the right process);
    if the stream is only read after bubblewrap exited, the wait is bounded by a timeout.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self._buf = b""
        self.init_pidfd: int | None = None
        self.init_pid = 0
        self.child_seen = False  # bubblewrap reported the program's start
        self.closed = False

    def feed(self) -> bool:
        """Consume what is available; False once there is nothing more to read for now."""
        try:
            data = os.read(self.fd, 4096)
        except BlockingIOError:
            return False
        if not data:
            self.closed = True
            return False
        self._buf += data
        while b"\n" in self._buf and self.init_pidfd is None:
            line, self._buf = self._buf.split(b"\n", 1)
            try:
                pid = json.loads(line).get("child-pid")
            except (ValueError, AttributeError):
                continue
            if isinstance(pid, int):
                self.child_seen = True
                try:
                    self.init_pidfd, self.init_pid = os.pidfd_open(pid), pid
                except OSError:  # already gone: nothing to wait for
                    pass
        return True

    def _alone(self) -> bool:
        """True if nothing but the init itself is left in the namespace.

        Every process of a PID namespace descends from its init, and orphans are reparented
        to it, so an init without children is alone. Checked while the init is provably
        alive (its pidfd not yet readable), so the pid cannot have been reused.
        """
        assert self.init_pidfd is not None
        if select.select([self.init_pidfd], [], [], 0)[0]:
            return True  # the init has exited: the kernel already killed everything else
        try:
            with open(f"/proc/{self.init_pid}/task/{self.init_pid}/children", "rb") as fh:
                return not fh.read().strip()
        except OSError:  # no CONFIG_PROC_CHILDREN: assume the worst
            return False

    def wait_gone(self, timeout: float) -> None:
        """Kill the namespace init and, if anything else lived in the namespace, block until
        the kernel has killed it too.

        Waiting for the init's exit is the slow part (tearing down the mount namespace waits
        for an RCU grace period: tens of ms on a busy machine), so it is skipped when the init
        is provably alone.
        """
        while self.init_pidfd is None and self.feed():
            pass
        try:
            if self.init_pidfd is not None:
                alone = self._alone()
                try:
                    signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
                except OSError:  # already exited
                    pass
                if not alone:
                    select.select([self.init_pidfd], [], [], timeout)
        finally:
            if self.init_pidfd is not None:
                os.close(self.init_pidfd)
            os.close(self.fd)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    stdin: bytes | None,
    limits: Limits,
    preexec: Callable[[], None] | None,
    backend: str,
    signal_in_exit_code: bool = False,
    user: int | None = None,
    status_pipe: tuple[int, int] | None = None,
    pass_fds: Sequence[int] = (),
    watchdog: Watchdog | None = None,
) -> RunResult:
    """Run ``argv`` to completion or until a limit; never raises for the program's failures.

    Args:
        signal_in_exit_code: the launcher reports a child killed by signal N as exit 128+N
            (bubblewrap does); decode it back into ``signal``.
        user: uid/gid to switch to before exec (rlimit backend running as root).
        status_pipe: ``(read_fd, write_fd)`` of bubblewrap's ``--json-status-fd``. Its
            ``child-pid`` is the sandbox's PID-namespace init; the run only counts as over once
            that process is gone, because bubblewrap reports the command's exit before the
            kernel has finished killing what else lived in the namespace (daemons).
            Both fds are closed by this function.
        pass_fds: more fds the launcher inherits (e.g. bubblewrap's ``--seccomp`` program);
            closed here once it started.
        watchdog: polled while the run is in progress; a limit it reports kills the tree.
    Raises:
        SandboxError: the launcher itself could not be started, or bubblewrap exited
            without ever starting the program (nothing the program did can cause that).
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
            pass_fds=(*pass_fds, status_pipe[1]) if status_pipe else tuple(pass_fds),
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
        )
    except OSError as exc:
        if status_pipe:
            os.close(status_pipe[0])
        raise SandboxError(f"{backend}: could not start {argv[0]!r}: {exc}") from exc
    finally:
        if status_pipe:
            os.close(status_pipe[1])
        for fd in pass_fds:
            os.close(fd)
    pgid = proc.pid
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError as exc:  # pragma: no cover - Linux < 5.3
        _killpg(pgid)
        proc.wait()
        raise SandboxError(f"{backend}: pidfd_open failed ({exc}); Linux >= 5.3 is required") from exc

    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    stdin_file = proc.stdin
    pipes = Pipes(sel, (proc.stdout.fileno(), proc.stderr.fileno()), None if stdin_file is None else stdin_file.fileno(),
                  stdin, limits.output_bytes, close=lambda _fd: stdin_file.close())  # type: ignore[union-attr]
    sel.register(pidfd, selectors.EVENT_READ)
    ns_watch = _NsWatcher(status_pipe[0]) if status_pipe else None
    if ns_watch is not None:
        sel.register(ns_watch.fd, selectors.EVENT_READ)

    killed_for: LimitName | None = None
    exited = False
    deadline = start + limits.wall_s

    try:
        while not exited or pipes.open:
            now = time.monotonic()
            if exited:  # the child is gone: give stragglers holding the pipes a moment
                timeout = min(_DRAIN_S, deadline - now)
            else:
                timeout = deadline - now
                if watchdog is not None:
                    if watchdog.due(now) <= 0:
                        killed_for = watchdog.check(proc.pid)
                        if killed_for:
                            break
                    timeout = min(timeout, watchdog.due(time.monotonic()))
            if timeout <= 0 and deadline - now <= 0:
                if not exited:
                    killed_for = "wall"
                break
            events = sel.select(timeout)
            if not events and exited:
                break
            for key, mask in events:
                fd = key.fd
                if ns_watch is not None and fd == ns_watch.fd:
                    ns_watch.feed()
                    if ns_watch.closed or ns_watch.init_pidfd is not None:
                        sel.unregister(fd)
                elif fd == pidfd:
                    exited = True
                    sel.unregister(pidfd)
                    _killpg(pgid)  # nothing from the run may outlive it
                elif pipes.handle(fd, mask) and pipes.truncated:
                    killed_for = "output"
                    break
            if killed_for:
                break
    finally:
        _killpg(pgid)
        pipes.close_stdin()
        sel.close()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError as exc:  # pragma: no cover - someone else reaped it
        raise SandboxError(f"{backend}: lost track of the child process ({exc})") from exc
    finally:
        os.close(pidfd)
    proc.returncode = 0  # reaped by wait4; stop Popen.__del__ from waiting again
    started = True
    if ns_watch is not None:
        ns_watch.wait_gone(timeout=2.0)
        started = ns_watch.child_seen
    duration = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime

    sig: int | None = None
    code: int | None
    if os.WIFSIGNALED(status):
        sig, code = os.WTERMSIG(status), None
    else:
        code = os.WEXITSTATUS(status)
        if signal_in_exit_code and code > 128 and code - 128 < signal.NSIG:
            sig, code = code - 128, None
    stdout_b, stderr_b = (bytes(b) for b in pipes.bufs.values())  # stdout first
    stderr = stderr_b.decode("utf-8", "replace")
    if not started and killed_for is None:
        raise SandboxError(f"{backend}: the sandbox did not start the program (exit status {status}): {stderr.strip()[-2000:]}")
    limit: LimitName | None = killed_for
    if limit is None and (code != 0):
        limit = classify_failure(sig, cpu, limits, stderr)
    return RunResult(
        stdout=stdout_b.decode("utf-8", "replace"),
        stderr=stderr,
        exit_code=code,
        signal=sig,
        limit_hit=limit,
        duration_s=duration,
        cpu_s=cpu,
        output_truncated=pipes.truncated,
        backend=backend,
    )
