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
import re
import shlex
import shutil
import signal
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from turngym.envs.mcp.client import MCPClient, ServerLost
from turngym.sandbox import BubblewrapSandbox, Limits, LocalSession, WorkdirSnapshot
from turngym.sandbox.local import sandbox_env
from turngym.sandbox.watchdog import tree_pids

__all__ = ["MCPServer", "SandboxedServer", "SERVER_LIMITS", "DEADLINE_ENV", "mount_points", "holds_files"]

#: A server lives for many calls: CPU is capped per call by the env's deadline, not by
#: ``RLIMIT_CPU`` (which would count the server's whole life); the world is small.
SERVER_LIMITS = Limits(wall_s=3600, cpu_s=100_000, memory_mb=1024, file_size_mb=16, disk_mb=32, processes=32)

#: The environment variable that tells a server the env's per-call deadline in seconds (a server
#: that can stop its own work in time -- SQLite's progress handler -- answers instead of hanging).
DEADLINE_ENV = "TURNGYM_CALL_DEADLINE_S"

_FD = "3"
_WORLD_MARK = "{world}"


@dataclass(frozen=True)
class MCPServer:
    """How to run one MCP server over stdio in the sandbox: everything a family declares.

    Attributes:
        command: the server's command line inside the sandbox; ``{world}`` in any item is
            replaced by the world file's path there (e.g. ``("node", ".../dist/index.js")``).
        world_file: the world's file name in the server's one writable directory.
        env: environment variables of the server (``{world}`` replaced too); the sandbox's
            minimal environment (``PATH``, ``HOME``, ``TMPDIR``, Python's) is underneath, and
            :data:`DEADLINE_ENV` is set to the env's call deadline.
        ro_binds: host directories the server reads (a ``node_modules``, a venv): shown
            read-only at the same paths.
        memory_mb: resident memory of the whole sandbox (its cgroup, or a polling watchdog).
        address_space_mb: ``RLIMIT_AS`` per process. Interpreters reserve far more virtual
            memory than they use: node's V8 dies at start under ~1.3 GB, so node servers need
            a few GB here while ``memory_mb`` stays small.
        processes: processes/threads of the sandbox (node starts ~10 threads).
        excluded_tools: tools never offered, each with the reason (calling one is forbidden).
    """

    command: tuple[str, ...]
    world_file: str = "world"
    env: Mapping[str, str] = field(default_factory=dict)
    ro_binds: tuple[str, ...] = ()
    memory_mb: int = 1024
    address_space_mb: int = 1024
    processes: int = 32
    excluded_tools: Mapping[str, str] = field(default_factory=dict)

    def argv(self, workdir: str) -> list[str]:
        """The command line for a sandbox whose writable dir is ``workdir``."""
        return [a.replace(_WORLD_MARK, f"{workdir}/{self.world_file}") for a in self.command]

    def environ(self, workdir: str) -> dict[str, str]:
        """The server's own environment variables for ``workdir``."""
        return {k: v.replace(_WORLD_MARK, f"{workdir}/{self.world_file}") for k, v in self.env.items()}

    def limits(self) -> Limits:
        """The sandbox's limits (resident memory is ``memory_mb``)."""
        return SERVER_LIMITS.replace(memory_mb=self.memory_mb, processes=self.processes)


class SandboxedServer:
    """Start, stop and restart one MCP server whose writable world is a sandbox session.

    Args:
        spec: the server's command, binds, limits and environment.
        limits: the sandbox's limits instead of the spec's (``spec.limits()``); processes keep
            ``spec.address_space_mb`` as their per-process address space either way.
        sandbox: the bubblewrap sandbox (default: a new one with the spec's binds, closed with this object).
        extra_env: more environment variables (the env's call deadline).
        start_timeout_s: deadline for start-up and the tool listing.
    """

    def __init__(
        self,
        spec: MCPServer,
        *,
        sandbox: BubblewrapSandbox | None = None,
        extra_env: Mapping[str, str] | None = None,
        start_timeout_s: float = 30.0,
        limits: Limits | None = None,
    ) -> None:
        self.spec = spec
        self.limits = limits if limits is not None else spec.limits()
        #: More environment variables, read at every (re)start.
        self.extra_env = dict(extra_env or {})
        self._own_sandbox = sandbox is None
        self.sandbox = sandbox if sandbox is not None else BubblewrapSandbox(self.limits, ro_binds=spec.ro_binds)
        self.start_timeout_s = start_timeout_s
        self.session: LocalSession = self.sandbox.open_session(self.limits)
        self._private = tempfile.mkdtemp(prefix="turngym-mcp-")
        # Append mode: the server's fd writes at the end, so trim_log() can empty the file under it.
        self._errlog: IO[str] = open(os.path.join(self._private, "stderr.log"), "a+", encoding="utf-8")  # noqa: SIM115
        self.client: MCPClient | None = None
        #: How many times the server was started (the first start counts).
        self.starts = 0
        self._mounts: frozenset[str] | None = None  # the running sandbox's mount points (scratch_used)

    # -- the process -----------------------------------------------------------------------
    def start(self) -> list[Any]:
        """(Re)start the server on the current world; its MCP tools. :class:`ServerLost` on failure."""
        self.stop()
        sb, session = self.sandbox, self.session
        session.prepare(self.limits)
        env = {**sandbox_env(session.workdir), **sb.python.env(), **self.spec.environ(session.workdir),
               **self.extra_env}
        full, fds = sb.launch(session, self.spec.argv(session.workdir), self.limits,
                              rlimits=self.limits.replace(memory_mb=self.spec.address_space_mb))
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
        self._mounts = None
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

    def scratch_used(self) -> bool:
        """Whether the server's private ``/tmp`` or ``/dev/shm`` holds anything (``VACUUM INTO
        '/tmp/x'``): they live as long as the sandbox, so a file there would outlive the call's
        episode. Read from the host through a sandboxed process's root (listing only, no
        link followed); a sandbox that cannot be inspected counts as used. What the sandbox put
        there itself (an interpreter or venv under the host's ``/tmp``, shown at its own path,
        and the directories made to hold it) is not the server's: counted, it made every call
        of a venv in ``/tmp`` restart the server."""
        pid = self._pid() if self.client is not None else None
        if pid is None:
            return False
        own = os.readlink("/proc/self/ns/mnt")
        for p in tree_pids(pid):
            try:
                if os.readlink(f"/proc/{p}/ns/mnt") == own:
                    continue
                if self._mounts is None:  # fixed for the sandbox's life (it cannot mount): read once per start
                    self._mounts = mount_points(p)
                return any(holds_files(f"/proc/{p}/root", d, self._mounts) for d in ("/tmp", "/dev/shm"))
            except OSError:
                continue
        return True

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


def mount_points(pid: int) -> frozenset[str]:
    """The mount points process ``pid`` sees, as paths under its own root (``/proc/PID/mountinfo``)."""
    with open(f"/proc/{pid}/mountinfo", "rb") as fh:
        fields = [line.split() for line in fh]
    # the kernel writes space, tab, newline and backslash in a path as octal escapes
    return frozenset(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), f[4]).decode("utf-8", "surrogateescape")
                     for f in fields if len(f) > 4)


def holds_files(root: str, path: str, mounts: frozenset[str]) -> bool:
    """Whether ``path`` (read under ``root``, a process's ``/proc/PID/root``) holds anything but
    the sandbox's own mount points and the directories made to hold them.

    A directory that leads to a mount point is walked (the server may write there when the
    sandbox runs in a user namespace); links are never followed (``lstat``), and anything
    else, file, link or directory, counts.
    """
    for name in os.listdir(root + path):
        sub = f"{path}/{name}"
        if sub in mounts:
            continue
        if any(m.startswith(sub + "/") for m in mounts) and stat.S_ISDIR(os.lstat(root + sub).st_mode):
            if holds_files(root, sub, mounts):
                return True
            continue
        return True
    return False
