"""The learner's deadline on its rollout worker, and the worker's record of what it last did.

An asynchronous learner waits for each step's batch. A worker that is stopped (``SIGSTOP``, a
debugger, a swapped-out host) or stuck (an env step that never returns, a deadlock) neither
sends a batch nor dies, so a wait on the batch alone waits forever; checking that the worker is
*alive* does not help, a stopped process is alive. The worker therefore reports its progress
(:class:`Progress`: the step, the decode call, the env steps after it, a wait for weights) and
the learner gives up when nothing new was reported for the deadline while it waited
(:func:`await_batch`), with an error that names the worker and what it last did.

The deadline counts silence, not a whole step, so it can be short next to a long step: the
worker reports at least once per decode call. The clock starts when the learner begins to wait
(a worker that was waiting for the learner's update is not late).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["AUTO_FACTOR", "AUTO_FLOOR_S", "Progress", "WorkerStalled", "auto_deadline", "await_batch"]

AUTO_FLOOR_S = 300.0
"""The automatic deadline before any step has been timed (model loading and the first batch
included), and its floor after: long enough for a slow env step, short next to "forever"."""

AUTO_FACTOR = 5.0
"""The automatic deadline is this many times the slowest step's rollout so far (the silence
between two reports is at most one rollout), when that is above :data:`AUTO_FLOOR_S`."""


class WorkerStalled(RuntimeError):
    """The rollout worker reported nothing for the deadline while the learner waited for a batch."""


class Progress:
    """What the worker last did and when (``time.monotonic``): written by the worker, read by the learner.

    ``step`` prefixes every phase (the step whose batch the worker plays, 1-based as in logs).
    """

    def __init__(self, phase: str = "starting") -> None:
        self._lock = threading.Lock()
        self._phase = phase
        self._at = time.monotonic()
        self.step = 0

    def report(self, phase: str) -> None:
        """Record ``phase`` (prefixed with the step being played) as done now."""
        self.set(f"step {self.step}: {phase}" if self.step else phase)

    def set(self, phase: str) -> None:
        """Record ``phase`` verbatim (a report relayed from a worker process)."""
        with self._lock:
            self._phase, self._at = phase, time.monotonic()

    def last(self) -> tuple[str, float]:
        """(the last phase, when it was reported)."""
        with self._lock:
            return self._phase, self._at


def auto_deadline(configured_s: float, slowest_rollout_s: float) -> float:
    """``configured_s`` if set (> 0); otherwise :data:`AUTO_FACTOR` × the slowest rollout, at least :data:`AUTO_FLOOR_S`."""
    if configured_s > 0:
        return configured_s
    return max(AUTO_FLOOR_S, AUTO_FACTOR * slowest_rollout_s)


def await_batch(batches: queue.Queue[Any], *, step: int, deadline_s: float, progress: Progress,
                describe: Callable[[], str], alive: Callable[[], bool], poll_s: float = 0.1) -> Any:
    """The next item of ``batches``, waiting while the worker reports progress.

    Raises :class:`WorkerStalled` once the worker has reported nothing for ``deadline_s`` since
    the later of its last report and the start of this wait; returns None if ``alive()`` turns
    false with nothing queued (the caller says how the worker ended). ``describe()`` names the
    worker (kind, pid, process state) for the error.
    """
    t0 = time.monotonic()
    while True:
        try:
            return batches.get(timeout=poll_s)
        except queue.Empty:
            pass
        if not alive():
            try:
                return batches.get_nowait()
            except queue.Empty:
                return None
        phase, at = progress.last()
        now = time.monotonic()
        if now - max(at, t0) > deadline_s:
            raise WorkerStalled(
                f"{describe()} reported nothing for {now - max(at, t0):.1f} s while the learner waited for step {step + 1}'s "
                f"episodes (deadline {deadline_s:g} s); what it last did, {now - at:.1f} s ago: {phase!r}. It is stopped "
                "(SIGSTOP, a debugger) or stuck (an env step or a decode that never returns); a step that is just slow "
                "needs a longer deadline: --set worker_timeout_s=SECONDS")
