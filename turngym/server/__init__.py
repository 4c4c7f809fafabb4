"""Environments over the network: an ASGI env server, its clients, and OpenEnv's wire format.

Serve: ``turngym serve turngym/Math-v0 --port 8000`` (or :func:`create_app` in your own ASGI
stack). Use: ``turngym.make("turngym/Math-v0", remote="ws://127.0.0.1:8000")`` returns a
:class:`RemoteEnv` that behaves like the local env; :class:`AsyncRemoteEnv` is its ``async``
twin for thousands of concurrent sessions. OpenEnv clients connect to ``ws://host:port``
unchanged.

Names are imported lazily: a client never imports the server's web stack.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "AsyncRemoteEnv",
    "ConnectionLost",
    "RemoteEnv",
    "RemoteEnvError",
    "RemoteSnapshot",
    "RequestTimeout",
    "ServerBusy",
    "ServerConfig",
    "create_app",
    "serve",
]

_WHERE = {
    "AsyncRemoteEnv": "client",
    "RemoteEnv": "client",
    "RemoteSnapshot": "client",
    "ConnectionLost": "errors",
    "RemoteEnvError": "errors",
    "RequestTimeout": "errors",
    "ServerBusy": "errors",
    "ServerConfig": "sessions",
    "create_app": "app",
    "serve": "serve",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'turngym.server' has no attribute {name!r}")
    from turngym.core.extras import require_extra

    with require_extra(f"turngym.server.{name}", "server"):
        return getattr(importlib.import_module(f"turngym.server.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
