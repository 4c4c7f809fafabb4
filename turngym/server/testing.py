"""Run an env server inside the current process, on a background thread (tests, notebooks).

>>> from turngym.server.testing import ServerThread
>>> with ServerThread(["turngym/Math-v0"]) as server:
...     server.url.startswith("ws://127.0.0.1:")
True
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from turngym.core.errors import InfraError

__all__ = ["ServerThread", "free_port", "GilHoldingTestEnv"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _math_env() -> Any:
    from turngym.envs.math.env import MathEnv

    return MathEnv


class GilHoldingTestEnv(_math_env()):  # type: ignore[misc]
    """Test double: the math env, plus a ``<hold>SECONDS</hold>`` action that holds the GIL that long.

    A stand-in for the actions that freeze a server from inside one step (a quadratic
    parser, a verifier on an astronomically large number): it raises the interpreter's
    switch interval and spins, so no other thread of its process runs meanwhile, which is
    what no thread time-out can interrupt. Module-level, so worker processes can build it.
    """

    def step(self, action: Any) -> Any:
        if isinstance(action, str) and action.startswith("<hold>") and action.endswith("</hold>"):
            seconds = float(action[len("<hold>"):-len("</hold>")])
            old = sys.getswitchinterval()
            sys.setswitchinterval(max(seconds * 2, 1.0))
            try:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    pass
            finally:
                sys.setswitchinterval(old)
            action = "<calc>1+1</calc>"
        return super().step(action)


class ServerThread:
    """A uvicorn env server on 127.0.0.1 in a daemon thread; ``stop()`` shuts it down gracefully.

    Args:
        env_ids: ids to serve (or the keys of ``factories``).
        factories: ``{env_id: callable(**kwargs) -> env}`` for envs not in the registry.
        **config: :class:`~turngym.server.sessions.ServerConfig` fields.
    """

    def __init__(
        self,
        env_ids: Sequence[str] | None = None,
        *,
        factories: Mapping[str, Any] | None = None,
        port: int | None = None,
        **config: Any,
    ) -> None:
        import uvicorn

        from turngym.server.app import create_app
        from turngym.server.guard import uvicorn_options

        self.app = create_app(tuple(env_ids or ()), factories=factories, **config)
        self.port = port or free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.http_url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="error",
            timeout_graceful_shutdown=5, lifespan="on", **uvicorn_options(self.app.state.manager.config),
        )
        self.server = uvicorn.Server(cfg)
        self._thread = threading.Thread(target=self.server.run, name=f"turngym-server-{self.port}", daemon=True)

    @property
    def manager(self) -> Any:
        return self.app.state.manager

    def start(self, timeout: float = 20.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise InfraError(f"the test server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
