"""An MCP server process in a bubblewrap session: its world is the session's working dir.

The server is untrusted in the same way agent code is: the agent's arguments reach it, and a
published server is code we did not write. So it runs where turngym runs agent code — a
:class:`~turngym.sandbox.BubblewrapSandbox` session: no network, a read-only view of the
Python install, its own uid, rlimits and cgroup, and one writable directory, the session's
working dir, which holds the world (the SQLite file). The env reads and rewrites that world
from the host through the session's link-safe file access (:meth:`LocalSession.snapshot` /
:meth:`~LocalSession.restore`); the server cannot reach anything the grader keeps.

The sandbox's launch line (``cgroup join → prlimit → bwrap --seccomp FD … → setpriv → argv``)
hands bubblewrap its seccomp program through an inherited pipe; the ``mcp`` SDK starts the
server without passing file descriptors, so the program is kept in a private file and a
``/bin/sh`` trampoline opens it as fd 3 just before it execs the launch line. The trampoline
also writes its pid (bubblewrap's, after the execs, and its process group's: the SDK starts
a new session), so a hung server is killed at once instead of after the SDK's polite wait.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import tempfile
from collections.abc import Callable, Sequence
from typing import IO, Any

from turngym.envs.mcp.client import MCPClient, ServerLost
from turngym.sandbox import BubblewrapSandbox, Limits, LocalSession, WorkdirSnapshot
from turngym.sandbox.local import sandbox_env

__all__ = ["SandboxedServer", "SERVER_LIMITS"]

#: A server lives for many calls: CPU is capped per call by the env's deadline, not by
#: ``RLIMIT_CPU`` (which would count the server's whole life); the world is small.
SERVER_LIMITS = Limits(wall_s=3600, cpu_s=100_000, memory_mb=1024, file_size_mb=16, disk_mb=32, processes=32)

_FD = "3"


class SandboxedServer:
    """Start, stop and restart one MCP server whose writable world is a sandbox session.

    Args:
        argv: the server's command line, given the working dir as the sandbox shows it.
        sandbox: the bubblewrap sandbox (default: a new one, closed with this object).
        limits: the session's limits (see :data:`SERVER_LIMITS`).
        start_timeout_s: deadline for start-up and the tool listing.
    """

    def __init__(
        self,
        argv: Callable[[str], Sequence[str]],
        *,
        sandbox: BubblewrapSandbox | None = None,
        limits: Limits = SERVER_LIMITS,
        start_timeout_s: float = 30.0,
    ) -> None:
        self._argv = argv
        self._own_sandbox = sandbox is None
        self.sandbox = sandbox if sandbox is not None else BubblewrapSandbox(limits)
        self.limits = limits
        self.start_timeout_s = start_timeout_s
        self.session: LocalSession = self.sandbox.open_session(limits)
        self._private = tempfile.mkdtemp(prefix="turngym-mcp-")
        # Append mode: the server's fd writes at the end, so trim_log() can empty the file under it.
        self._errlog: IO[str] = open(os.path.join(self._private, "stderr.log"), "a+", encoding="utf-8")  # noqa: SIM115
        self.client: MCPClient | None = None
        #: How many times the server was started (the first start counts).
        self.starts = 0

    # -- the process -----------------------------------------------------------------------
    def start(self) -> list[Any]:
        """(Re)start the server on the current world; its MCP tools. :class:`ServerLost` on failure."""
        self.stop()
        sb, session = self.sandbox, self.session
        session.prepare(self.limits)
        env = {**sandbox_env(session.workdir), **sb.python.env()}
        full, fds = sb.launch(session, list(self._argv(session.workdir)), self.limits)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self._private, "server.pid"))
        try:
            full = self._with_seccomp_file(full, fds)
        finally:
            for fd in fds:
                os.close(fd)
        self._errlog.seek(0)
        self._errlog.truncate()
        client = MCPClient(full[0], full[1:], env=env, cwd=session.host_dir, errlog=self._errlog,
                           start_timeout_s=self.start_timeout_s)
        self.starts += 1
        try:
            tools = client.start()
        except ServerLost as exc:
            raise ServerLost(f"{exc}{self._stderr_tail()}") from None
        self.client = client
        return tools

    def _with_seccomp_file(self, full: list[str], fds: Sequence[int]) -> list[str]:
        """The launch line behind a ``/bin/sh`` trampoline that records its pid and, when the
        sandbox uses seccomp, opens the program (moved from its pipe to a private file) as fd 3."""
        pidfile = os.path.join(self._private, "server.pid")
        script = f"echo $$ > {shlex.quote(pidfile)} && "
        if "--seccomp" in full:
            i = full.index("--seccomp")
            fd = int(full[i + 1])
            if fd not in fds:
                raise ServerLost(f"the sandbox's launch line names seccomp fd {fd}, which it did not hand over")
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            path = os.path.join(self._private, "seccomp.bpf")
            with open(path, "wb") as fh:
                fh.write(b"".join(chunks))
            full = [*full[: i + 1], _FD, *full[i + 2 :]]
            script += f"exec {_FD}< {shlex.quote(path)} && "
        return ["/bin/sh", "-c", script + 'exec "$@"', "sh", *full]

    def _pid(self) -> int | None:
        try:
            with open(os.path.join(self._private, "server.pid"), encoding="ascii") as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        """The server's sandbox process is alive (not exited, not a zombie awaiting the SDK).

        A server that died between calls would otherwise cost the next call its full deadline:
        the SDK notices a closed pipe only for requests already in flight.
        """
        pid = self._pid() if self.client is not None else None
        if pid is None:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
        except (OSError, IndexError):
            return False

    def kill(self) -> None:
        """SIGKILL the running server's sandbox (a hung server: no polite shutdown)."""
        pid = self._pid() if self.client is not None else None
        if pid is not None:
            with contextlib.suppress(OSError):  # already gone: stop() reaps what is left
                os.killpg(pid, signal.SIGKILL)

    def stop(self) -> None:
        """Stop the server if it runs (the world stays)."""
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def trim_log(self, max_bytes: int = 1 << 20) -> None:
        """Empty the server's stderr log past ``max_bytes`` (servers log every failed call;
        a shared server lives as long as the process)."""
        if os.fstat(self._errlog.fileno()).st_size > max_bytes:
            self._errlog.truncate(0)

    def _stderr_tail(self, n: int = 800) -> str:
        self._errlog.flush()
        self._errlog.seek(0)
        text = self._errlog.read()[-n:].strip()
        return f"; server stderr: {text}" if text else ""

    def close(self) -> None:
        """Stop the server, remove the session and the private files."""
        self.stop()
        self._errlog.close()
        self.session.close()
        if self._own_sandbox:
            self.sandbox.close()
        shutil.rmtree(self._private, ignore_errors=True)

    # -- the world ---------------------------------------------------------------------------
    def snapshot(self) -> WorkdirSnapshot:
        """Every file of the world (read on the host, links not followed)."""
        return self.session.snapshot()

    def restore(self, snap: WorkdirSnapshot) -> None:
        """Make the world exactly ``snap`` (call between tool calls: the server is idle then)."""
        self.session.restore(snap)
