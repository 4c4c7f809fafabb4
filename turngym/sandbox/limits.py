"""Resource limits and the result of one sandboxed run."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from turngym.core.errors import ConfigError

__all__ = ["Limits", "RunResult", "LimitName", "LIMIT_NAMES"]

LimitName = Literal["wall", "cpu", "memory", "output", "file_size", "processes", "disk"]
LIMIT_NAMES: tuple[str, ...] = ("wall", "cpu", "memory", "output", "file_size", "processes", "disk")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one run may use. Every limit is per run (per command), not per session.

    Attributes:
        wall_s: wall-clock seconds before the whole process tree is killed (the PID namespace
            with it, whatever signals the program ignores).
        cpu_s: CPU seconds per process (``RLIMIT_CPU``; SIGXCPU, then SIGKILL a second later).
        memory_mb: RAM of the whole sandbox where the backend can count it (local backends: a
            cgroup, else a polling watchdog): every process's pages, memfd/shared memory, and
            files in its tmpfs mounts (``/tmp``, ``/dev/shm`` and, when the working dir is a
            tmpfs, the working dir) -- so keep it above ``disk_mb``. Also the address space
            per process (``RLIMIT_AS``): interpreters reserve far more virtual memory than they
            touch: numpy needs ~300 MB, torch-like code >= 1 GB.
        output_bytes: stdout + stderr kept; the run is killed once it writes more.
        file_size_mb: largest file a process may write (``RLIMIT_FSIZE``).
        processes: processes/threads the sandbox may have at once (``RLIMIT_NPROC`` for its uid
            and, where a cgroup is available, the pids controller for the whole sandbox).
        open_files: file descriptors per process (``RLIMIT_NOFILE``).
        disk_mb: size of the working dir, enforced while the program writes (a tmpfs of that
            size, or a watchdog that kills the run), reported as ``disk``.
        tmp_mb: size of the private ``/tmp`` and ``/dev/shm`` (tmpfs, where the backend
            provides them).
        cpu_cores: cores the whole sandbox may keep busy at once, however many processes it
            runs (local backends: its cgroup's CPU quota over 100 ms periods, with a
            scheduling weight in proportion; Docker: the container's ``nano_cpus``). A burn
            in one sandbox then cannot starve the others. Where no cgroup is writable
            (bubblewrap without root or a delegated cgroup), it is not enforced -- a warning
            says so once -- and a run's CPU is bounded only by ``cpu_s`` per process times
            ``processes``.
    """

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 2048
    output_bytes: int = 1 << 20
    file_size_mb: int = 64
    processes: int = 64
    open_files: int = 256
    disk_mb: int = 256
    tmp_mb: int = 64
    cpu_cores: float = 1.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                raise ConfigError(f"Limits.{f.name} must be a positive finite number, got {v!r}")
        if self.processes < 4:
            raise ConfigError(f"Limits.processes must be >= 4 (the sandbox's own launcher needs some), got {self.processes}")

    def replace(self, **changes: Any) -> Limits:
        """A copy with some limits changed (unknown names are an error)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What happened when a command ran in the sandbox.

    Attributes:
        stdout, stderr: decoded output (UTF-8, undecodable bytes replaced), each cut at the
            output limit.
        exit_code: the process's exit status; ``None`` when it was killed by a signal.
        signal: the signal number that ended it, if any.
        limit_hit: which limit ended or spoiled the run (``wall``, ``cpu``, ``memory``,
            ``output``, ``file_size``, ``processes``, ``disk``), or ``None``. Wall, output and
            disk are enforced by the sandbox, and memory/processes too where a cgroup or the
            watchdog counted them; otherwise they are read from the death signal or the
            error the program printed (MemoryError, EFBIG, EAGAIN on fork, ENOSPC). A limit
            hit is the program's failure, never an infrastructure error.
        duration_s: wall time of the run.
        cpu_s: CPU time of the process tree the sandbox waited for.
        output_truncated: stdout/stderr were cut.
        backend: name of the backend that ran it.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None = None
    limit_hit: LimitName | None = None
    duration_s: float = 0.0
    cpu_s: float = 0.0
    output_truncated: bool = False
    backend: str = ""

    @property
    def ok(self) -> bool:
        """Exited with status 0 and within every limit."""
        return self.exit_code == 0 and self.limit_hit is None

    @property
    def timed_out(self) -> bool:
        return self.limit_hit in ("wall", "cpu")

    def summary(self, max_chars: int = 2000) -> str:
        """A short human-readable account (status, then the tail of stderr/stdout)."""
        if self.limit_hit:
            status = f"killed: {self.limit_hit} limit exceeded"
        elif self.signal is not None:
            status = f"killed by signal {self.signal}"
        else:
            status = f"exit code {self.exit_code}"
        text = (self.stdout + ("\n" + self.stderr if self.stderr else "")).strip()
        if len(text) > max_chars:
            text = "..." + text[-max_chars:]
        return f"[{status}]\n{text}" if text else f"[{status}]"
