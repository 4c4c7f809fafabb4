"""Sandbox errors: every failure of the sandbox itself is an :class:`InfraError`.

A program that crashes, loops or floods its output inside the sandbox is *not* an error: it is
a :class:`~turngym.sandbox.result.RunResult` with a non-zero exit or a ``limit_hit``. These
exceptions are for the machinery (bubblewrap missing, Docker engine down, a workdir that
cannot be created), so envs report them as ``info["infra_error"]`` instead of scoring 0.
"""

from __future__ import annotations

from turngym.core.errors import InfraError

__all__ = ["SandboxError", "SandboxUnavailable", "SessionClosed", "NotIsolatedWarning", "CpuLimitWarning"]


class SandboxError(InfraError):
    """The sandbox failed to run a command (not the command's own failure)."""


class SandboxUnavailable(SandboxError):
    """A backend cannot work on this machine (binary missing, no engine, no namespaces)."""


class SessionClosed(SandboxError):
    """A session was used after :meth:`~turngym.sandbox.base.Session.close`."""


class NotIsolatedWarning(UserWarning):
    """The chosen backend enforces resource limits only: code can read the host and network."""


class CpuLimitWarning(UserWarning):
    """``Limits.cpu_cores`` cannot be enforced here (no writable cgroup with a cpu controller)."""
