"""Reuse warm sessions, and cap how fast new ones are created.

Creating a session is cheap for bubblewrap (a directory) and expensive for Docker (a
container: hundreds of ms and engine load). :class:`SandboxPool` hands out sessions, takes
them back wiped (``reset()``) when the backend guarantees nothing from the previous user can
survive (``sandbox.reusable_sessions``), and creates new ones through a :class:`RateLimiter`
so a burst of episodes cannot stampede the engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from turngym.core.errors import ConfigError
from turngym.sandbox.base import Sandbox, Session
from turngym.sandbox.errors import SandboxError
from turngym.sandbox.limits import Limits

__all__ = ["RateLimiter", "SandboxPool"]


class RateLimiter:
    """Token bucket: on average ``rate`` acquisitions per second, bursts of up to ``burst``.

    ``clock`` and ``sleep`` are injectable so tests can drive it without waiting.

    >>> t = [0.0]
    >>> rl = RateLimiter(rate=2.0, burst=1, clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s))
    >>> [rl.acquire() for _ in range(3)]   # seconds waited by each call
    [0.0, 0.5, 0.5]
    """

    def __init__(
        self,
        rate: float,
        burst: int = 1,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate > 0 or burst < 1:
            raise ConfigError(f"RateLimiter needs rate > 0 and burst >= 1, got rate={rate}, burst={burst}")
        self.rate, self.burst = float(rate), int(burst)
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; returns the seconds waited."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            wait = 0.0
            if self._tokens < 1.0:
                wait = (1.0 - self._tokens) / self.rate
                self._sleep(wait)
                self._last = self._clock()
                self._tokens = 1.0
            self._tokens -= 1.0
            return wait


class SandboxPool:
    """Hand out sessions of one sandbox, reusing warm ones where that is safe.

    Args:
        sandbox: the backend whose sessions are pooled.
        max_idle: warm sessions kept for reuse; more are closed on release.
        creation_rate: new sessions per second at most (average).
        burst: how many sessions may be created back to back before the rate applies.
        limits: limits of the pooled sessions (default: the sandbox's).

    >>> from turngym.sandbox import make_sandbox
    >>> pool = SandboxPool(make_sandbox("bubblewrap"), max_idle=2)
    >>> with pool.session() as s:
    ...     _ = s.run("touch left-behind")
    >>> with pool.session() as s:            # the same warm session, wiped
    ...     s.list_files(), pool.stats["reused"]
    ([], 1)
    >>> pool.close()
    """

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        max_idle: int = 8,
        creation_rate: float = 20.0,
        burst: int = 4,
        limits: Limits | None = None,
    ) -> None:
        if max_idle < 0:
            raise ConfigError(f"max_idle must be >= 0, got {max_idle}")
        self.sandbox = sandbox
        self.max_idle = max_idle
        self.limits = limits or sandbox.limits
        self.limiter = RateLimiter(creation_rate, burst)
        self._idle: list[Session] = []
        self._lock = threading.Lock()
        self._closed = False
        self.stats = {"created": 0, "reused": 0, "discarded": 0, "waited_s": 0.0}

    def acquire(self) -> Session:
        """A clean session: a warm one if available, else a new one (rate limited)."""
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        with self._lock:
            session = self._idle.pop() if self._idle else None
            if session is not None:
                self.stats["reused"] += 1
                return session
        waited = self.limiter.acquire()
        with self._lock:
            self.stats["waited_s"] += waited
            self.stats["created"] += 1
        return self.sandbox.open_session(self.limits)

    def release(self, session: Session) -> None:
        """Give a session back: wiped and kept warm if safe, else closed."""
        keep = not self._closed and not session.closed and self.sandbox.reusable_sessions
        if keep:
            try:
                session.reset()
            except (OSError, SandboxError):
                keep = False
        with self._lock:
            if keep and len(self._idle) < self.max_idle:
                self._idle.append(session)
                return
            self.stats["discarded"] += 1
        session.close()

    @contextmanager
    def session(self) -> Iterator[Session]:
        s = self.acquire()
        try:
            yield s
        finally:
            self.release(s)

    def close(self) -> None:
        """Close every idle session (sessions in use close when released)."""
        self._closed = True
        with self._lock:
            idle, self._idle = self._idle, []
        for s in idle:
            s.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
