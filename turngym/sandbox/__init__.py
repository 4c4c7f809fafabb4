"""Run untrusted code: one interface, three backends.

>>> from turngym.sandbox import make_sandbox, Limits
>>> sb = make_sandbox()                       # bubblewrap where it works
>>> sb.run_python("print(6 * 7)").stdout
'42\\n'
>>> sb.run_python("while True: pass", limits=Limits(wall_s=0.5)).limit_hit
'wall'
>>> with sb.open_session() as s:              # files persist across commands
...     s.write_files({"a.txt": "hi"})
...     s.run("cat a.txt && echo !>> a.txt").stdout, s.read_file("a.txt")
('hi', b'hi!\\n')
>>> sb.close()

Backends: :class:`BubblewrapSandbox` (namespaces + rlimits, the default),
:class:`DockerSandbox` (one container per session, when an engine answers) and
:class:`RlimitSandbox` (limits only, **not isolated**). :class:`WarmPython` runs Python by
forking a warm interpreter inside a bubblewrap session (~1–2 ms instead of ~15). Failures of the sandbox itself raise
:class:`SandboxError`, an :class:`~turngym.core.errors.InfraError`.
"""

from turngym.sandbox.base import PythonRuntime, Sandbox, Session, WorkdirSnapshot
from turngym.sandbox.errors import CpuLimitWarning, NotIsolatedWarning, SandboxError, SandboxUnavailable, SessionClosed
from turngym.sandbox.factory import BACKENDS, available_backends, make_sandbox
from turngym.sandbox.limits import LIMIT_NAMES, Limits, RunResult
from turngym.sandbox.local import DEFAULT_HIDDEN_PATHS, BubblewrapSandbox, Enforcement, LocalSession, RlimitSandbox
from turngym.sandbox.pool import RateLimiter, SandboxPool
from turngym.sandbox.warm import WarmPython

__all__ = [
    "Sandbox",
    "Session",
    "LocalSession",
    "Limits",
    "RunResult",
    "LIMIT_NAMES",
    "PythonRuntime",
    "WorkdirSnapshot",
    "BubblewrapSandbox",
    "RlimitSandbox",
    "DEFAULT_HIDDEN_PATHS",
    "Enforcement",
    "DockerSandbox",
    "SandboxPool",
    "RateLimiter",
    "WarmPython",
    "make_sandbox",
    "available_backends",
    "BACKENDS",
    "SandboxError",
    "SandboxUnavailable",
    "SessionClosed",
    "NotIsolatedWarning",
    "CpuLimitWarning",
]


def __getattr__(name: str):  # the docker SDK is imported only when Docker is asked for
    if name == "DockerSandbox":
        from turngym.sandbox.docker import DockerSandbox

        return DockerSandbox
    raise AttributeError(f"module 'turngym.sandbox' has no attribute {name!r}")
