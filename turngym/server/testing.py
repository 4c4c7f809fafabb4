"""Run an env server inside the current process, on a background thread (tests, notebooks).

>>> from turngym.server.testing import ServerThread
>>> with ServerThread(["turngym/Math-v0"]) as server:
...     server.url.startswith("ws://127.0.0.1:")
True
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from turngym.core.errors import InfraError

__all__ = ["ServerThread", "UvicornThread", "free_port", "GilHoldingTestEnv"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _math_env() -> Any:
    from turngym.envs.math.env import MathEnv

    return MathEnv


def _arg(action: Any, tag: str) -> str | None:
    if isinstance(action, str) and action.startswith(f"<{tag}>") and action.endswith(f"</{tag}>"):
        return action[len(tag) + 2:-len(tag) - 3]
    return None


class GilHoldingTestEnv(_math_env()):  # type: ignore[misc]
    """Test double: the math env, plus actions that play what a hostile action can make a step do.

    * ``<hold>SECONDS</hold>`` holds the GIL that long: a stand-in for the actions that freeze
      a server from inside one step (a quadratic parser, a verifier on an astronomically
      large number). It raises the interpreter's switch interval and spins, so no other
      thread of its process runs meanwhile, which is what no thread time-out can interrupt.
    * ``<sleep>SECONDS</sleep>`` waits without the GIL (a step waiting on a sandbox).
    * ``<crash>SIGNAL</crash>`` crashes the process with that signal (``SIGSEGV``, ``SIGABRT``),
      ``<exit>CODE</exit>`` exits it: a step whose input breaks the env's process.
    * ``<alloc>MB</alloc>`` allocates (and keeps) that much memory.
    * ``<peek>NEEDLE</peek>`` answers where in its own and its parents' environment and
      command line (``/proc``) NEEDLE appears, as ``<found>...</found>``.

    Module-level, so worker processes can build it. Never serve it to real agents.
    """

    _kept: list[bytearray] = []

    def step(self, action: Any) -> Any:
        if (hold := _arg(action, "hold")) is not None:
            seconds = float(hold)
            old = sys.getswitchinterval()
            sys.setswitchinterval(max(seconds * 2, 1.0))
            try:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    pass
            finally:
                sys.setswitchinterval(old)
            action = "<calc>1+1</calc>"
        elif (nap := _arg(action, "sleep")) is not None:
            time.sleep(float(nap))
            action = "<calc>1+1</calc>"
        elif (sig := _arg(action, "crash")) is not None:
            signal.pthread_kill(threading.get_ident(), getattr(signal, sig))  # on this thread, as a real fault
            time.sleep(5)
        elif (code := _arg(action, "exit")) is not None:
            os._exit(int(code))
        elif (mb := _arg(action, "alloc")) is not None:
            block = bytearray(int(float(mb) * (1 << 20)))
            block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page: resident, not just reserved
            self._kept.append(block)
            action = "<calc>1+1</calc>"
        elif (needle := _arg(action, "peek")) is not None:
            return f"<found>{','.join(_where_visible(needle.encode()))}</found>", 0.0, False, False, {}
        return super().step(action)


def _where_visible(needle: bytes) -> list[str]:
    """The ``/proc`` files of this process and its ancestors (up to 4) that contain ``needle``."""
    found = []
    pid = os.getpid()
    for _ in range(5):
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    if needle in f.read():
                        found.append(f"{pid}/{name}")
            except OSError:
                pass
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
    return found


_T = TypeVar("_T", bound="UvicornThread")


class UvicornThread:
    """An ASGI app under uvicorn on 127.0.0.1 in a daemon thread; ``stop()`` shuts it down
    gracefully. The part the env server's and the capture proxy's in-process runners share.

    Args:
        app: the ASGI app.
        what: names the server in the error raised when it does not start.
        port: the port (default: a free one).
        **options: more :class:`uvicorn.Config` options.
    """

    def __init__(self, app: Any, what: str, *, port: int | None = None, **options: Any) -> None:
        import uvicorn

        self.app, self._what = app, what
        self.port = port or free_port()
        cfg = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", timeout_graceful_shutdown=5,
                             lifespan="on", **options)
        self.server = uvicorn.Server(cfg)
        self._thread = threading.Thread(target=self.server.run, name=f"turngym-{what.replace(' ', '-')}-{self.port}", daemon=True)

    def _startup_error(self) -> BaseException | None:
        """Why the app failed to start, when it knows (raised instead of the generic error)."""
        return None

    def start(self: _T, timeout: float = 20.0) -> _T:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                error = self._startup_error()
                if error is not None:
                    raise error
                raise InfraError(f"the {self._what} on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self: _T) -> _T:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerThread(UvicornThread):
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
        from turngym.server.app import create_app
        from turngym.server.guard import uvicorn_options
        from turngym.server.serve import refuse_in_worker_bootstrap

        refuse_in_worker_bootstrap("ServerThread()")

        app = create_app(tuple(env_ids or ()), factories=factories, **config)
        super().__init__(app, "test server", port=port, **uvicorn_options(app.state.manager.config))
        self.url = f"ws://127.0.0.1:{self.port}"
        self.http_url = f"http://127.0.0.1:{self.port}"

    @property
    def manager(self) -> Any:
        return self.app.state.manager

    def _startup_error(self) -> BaseException | None:
        return self.manager.startup_error
