"""Errors of the env server and its clients.

Network failures are :class:`~turngym.core.errors.InfraError`\\ s: they are never the agent's
fault, so a rollout records them as ``info["infra_error"]`` and trainers drop the episode
instead of scoring it 0.
"""

from __future__ import annotations

from turngym.core import errors as core_errors
from turngym.core.errors import InfraError, TurngymError

__all__ = ["ConnectionLost", "ServerBusy", "RequestTimeout", "RemoteEnvError", "WorkerLost", "error_class"]


class ConnectionLost(InfraError):
    """The connection to the env server failed or closed; the session and its snapshots are gone."""


class ServerBusy(InfraError):
    """The server is at ``--max-sessions``; retry later or start more servers."""


class RequestTimeout(InfraError):
    """The env took longer than the per-request timeout; the server closed the session."""


class WorkerLost(InfraError):
    """The server stopped the worker process hosting this session (another session's step overran its
    deadline, or the worker crashed); this session's env and snapshots are gone: open a new session."""


class RemoteEnvError(TurngymError, RuntimeError):
    """The env raised an exception that is not a turngym error (a bug in the env) on the server.

    ``remote_traceback`` holds the server-side traceback (empty if the server sent none). A
    rollout (:class:`~turngym.rollout.steppers.RemoteStepper`) records it as that episode's
    infra error, as for an env bug in-process.
    """

    remote_traceback: str = ""


_SERVER_ERRORS = {cls.__name__: cls for cls in (ConnectionLost, ServerBusy, RequestTimeout, RemoteEnvError, WorkerLost)}


def error_class(name: str, is_turngym: bool) -> type[TurngymError]:
    """The local class for an error the server reported by name."""
    if name in _SERVER_ERRORS:
        return _SERVER_ERRORS[name]
    cls = getattr(core_errors, name, None) if is_turngym else None
    if isinstance(cls, type) and issubclass(cls, TurngymError) and name in core_errors.__all__:
        return cls
    return RemoteEnvError
