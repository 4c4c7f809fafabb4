"""The asynchronous rollout worker's parts: the weight board, the versioned policy, the worker thread.

Split from :mod:`turngym.trainers.asynchronous` so that dependencies run one way: the worker
process (:mod:`turngym.trainers.worker_process`) runs these same parts in its own interpreter,
and :class:`~turngym.trainers.asynchronous.AsyncRollouts` (the trainer's side) picks the thread
or the process; neither of the two needs the other's module.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from turngym.core.errors import ConfigError
from turngym.trainers.deadline import Progress, await_batch

__all__ = ["AsyncBatch", "RolloutWorker", "VersionedPolicy", "WeightBoard", "WorkerStopped", "checked", "load_tensors",
           "trainable_tensors"]


def trainable_tensors(model: Any) -> dict[str, Any]:
    """A detached copy of the tensors an update changes (every weight, or the LoRA adapters)."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def load_tensors(model: Any, tensors: dict[str, Any]) -> None:
    """Copy published tensors into ``model``'s parameters of the same names (in place)."""
    import torch

    params = dict(model.named_parameters())
    missing = [name for name in tensors if name not in params]
    if missing:
        raise ConfigError(f"the published weights name parameters the worker's model lacks ({missing[:3]}): "
                          "the worker's copy must be made from the learner's model after LoRA is added")
    with torch.no_grad():
        for name, t in tensors.items():
            params[name].copy_(t)


class WorkerStopped(Exception):
    """The run ended (or failed) while the worker waited; it stops without a batch."""


class WeightBoard:
    """The versions the learner published, for the worker to take at its safe points.

    Holds the newest ``keep`` versions (the worker never needs an older one than
    ``k − async_lag``, and a checkpoint saves those for an exact resume).
    """

    def __init__(self, keep: int) -> None:
        self._cond = threading.Condition()
        self._versions: dict[int, dict[str, Any]] = {}
        self._keep = max(1, keep)
        self._closed = False
        self._listeners: list[Callable[[int, dict[str, Any]], None]] = []

    def publish(self, version: int, tensors: dict[str, Any]) -> None:
        with self._cond:
            self._versions[version] = tensors
            for old in sorted(self._versions)[: -self._keep]:
                del self._versions[old]
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener(version, tensors)

    def subscribe(self, listener: Callable[[int, dict[str, Any]], None]) -> None:
        """Call ``listener(version, tensors)`` on every later publish (a worker process's pipe)."""
        with self._cond:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[int, dict[str, Any]], None]) -> None:
        with self._cond:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def newest(self) -> int:
        with self._cond:
            return max(self._versions, default=-1)

    def get(self, version: int) -> tuple[dict[str, Any], float]:
        """The tensors of ``version`` (waiting until it is published) and the seconds waited."""
        t0 = time.perf_counter()
        with self._cond:
            self._cond.wait_for(lambda: self._closed or version in self._versions or self._newest() > version)
            if self._closed:
                raise WorkerStopped
            if version not in self._versions:
                raise ConfigError(f"policy version {version} is no longer held (newest {self._newest()}): the schedule "
                                  "still samples with it, so it must come from the checkpoint's behaviour.pt on resume")
            return self._versions[version], time.perf_counter() - t0

    def _newest(self) -> int:
        return max(self._versions, default=-1)

    def saved(self, versions: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The held tensors of ``versions`` (for a checkpoint)."""
        with self._cond:
            return {v: self._versions[v] for v in versions if v in self._versions}

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class VersionedPolicy:
    """The worker's HF policy, moved between policy versions at safe points.

    Before every ``act`` (one decode call of the lockstep rollout: no generation is running),
    it loads the version the schedule names into the worker's model; every action it returns
    carries ``meta["policy_version"]``, recorded on the turn.
    """

    def __init__(self, model: Any, board: WeightBoard, make_inner: Callable[[int], Any]) -> None:
        self.model = model
        self.board = board
        self.make_inner = make_inner
        self.version = -1
        self.inner: Any = None
        self.calls = 0
        self.wait_s = 0.0
        self.progress = Progress()
        """What the worker last did (the learner's deadline names it: :mod:`turngym.trainers.deadline`)."""
        self._plan: tuple[int, int, int, bool] = (0, 0, 0, False)

    def begin(self, seed: int, start: int, swap_to: int, swap_call: int) -> None:
        """A new batch: a fresh sampler seeded for it, starting at ``start``; at decode call
        ``swap_call`` move to ``swap_to`` (``swap_call=0``: at every call, the newest published
        version up to ``swap_to``)."""
        self.inner = self.make_inner(seed)
        self.calls = 0
        self.wait_s = 0.0
        self._plan = (start, swap_to, swap_call, swap_call == 0)
        self._move_to(start)

    def _move_to(self, version: int) -> None:
        if version == self.version:
            return
        self.progress.report(f"waiting for policy version {version}")
        tensors, waited = self.board.get(version)
        self.wait_s += waited
        load_tensors(self.model, tensors)
        self.version = version
        self.progress.report(f"loaded policy version {version}")

    @property
    def name(self) -> str:
        return getattr(self.inner, "name", "hf")

    def act(self, batch: Sequence[Any]) -> list[Any]:
        start, swap_to, swap_call, free = self._plan
        if free:
            newest = min(self.board.newest(), swap_to)
            if newest > self.version:
                self._move_to(newest)
        elif self.calls == swap_call and swap_to != self.version:
            self._move_to(swap_to)
        self.calls += 1
        self.progress.report(f"decode call {self.calls} ({len(batch)} episodes, policy version {self.version})")
        actions = self.inner.act(batch)
        self.progress.report(f"env steps after decode call {self.calls}")
        for action in actions:
            action.meta["policy_version"] = self.version
        return actions


@dataclass
class AsyncBatch:
    """One step's episodes from the worker, with how they were made."""

    step: int
    episodes: list[Any]
    rollout_s: float
    """Seconds the worker spent playing them (waits for weights included)."""
    swap_wait_s: float
    """Seconds the worker waited at its safe points for a version not yet published."""
    error: BaseException | None = None


def checked(batch: AsyncBatch, step: int) -> AsyncBatch:
    """``batch`` if it is step ``step``'s episodes; the worker's error, raised here, if it failed."""
    if batch.error is not None:
        raise batch.error
    if batch.step != step:
        raise ConfigError(f"the rollout worker produced step {batch.step} when the learner expected {step}")
    return batch


class RolloutWorker(threading.Thread):
    """Plays steps ``first .. steps − 1`` in order on its own model, ``lag`` steps ahead at most.

    Args:
        play: ``play(step, policy)`` → every episode of the step, infrastructure failures included
            (the learner screens them; :meth:`~turngym.trainers.producer.RolloutProducer.step_episodes`).
        policy: the worker's :class:`VersionedPolicy`.
        seed_of: the sampling seed of a step's policy.
        first, steps: the steps to play.
        lag, swap_call: the version schedule (module docstring).
    """

    def __init__(self, play: Callable[[int, Any], list[Any]], policy: VersionedPolicy, seed_of: Callable[[int], int], *,
                 first: int, steps: int, lag: int, swap_call: int) -> None:
        super().__init__(name="turngym-rollout-worker", daemon=True)
        self.play, self.policy, self.seed_of = play, policy, seed_of
        self.first, self.steps, self.lag, self.swap_call = first, steps, lag, swap_call
        self.batches: queue.Queue[AsyncBatch] = queue.Queue(maxsize=max(1, lag))
        self._halt = threading.Event()

    def schedule(self, step: int) -> tuple[int, int]:
        """(start version, version after the swap) of ``step``'s batch."""
        start = max(0, step - self.lag)
        return start, step if self.swap_call == 0 else min(step, start + 1)

    def run(self) -> None:
        for step in range(self.first, self.steps):
            if self._halt.is_set():
                return
            t0 = time.perf_counter()
            self.policy.progress.step = step + 1
            self.policy.progress.report("starting its batch")
            try:
                start, swap_to = self.schedule(step)
                self.policy.begin(self.seed_of(step), start, swap_to, self.swap_call)
                episodes = self.play(step, self.policy)
                batch = AsyncBatch(step, episodes, time.perf_counter() - t0, self.policy.wait_s)
            except WorkerStopped:
                return
            except BaseException as exc:  # handed to the learner, which raises it in the main thread
                batch = AsyncBatch(step, [], time.perf_counter() - t0, 0.0, error=exc)
            self.policy.progress.report("batch played" if batch.error is None else f"failed: {type(batch.error).__name__}")
            while not self._halt.is_set():
                try:
                    self.batches.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if batch.error is not None:
                return

    @property
    def progress(self) -> Progress:
        return self.policy.progress

    def next_batch(self, step: int, deadline_s: float = float("inf")) -> tuple[AsyncBatch, float]:
        """Step ``step``'s batch (waiting for it) and the seconds the learner waited; raises
        :class:`~turngym.trainers.deadline.WorkerStalled` after ``deadline_s`` without progress."""
        t0 = time.perf_counter()
        batch = await_batch(self.batches, step=step, deadline_s=deadline_s, progress=self.progress,
                            describe=lambda: f"the rollout worker thread {self.name!r} of pid {os.getpid()}", alive=self.is_alive)
        if batch is None:
            raise ConfigError("the rollout worker stopped without producing a batch")
        return checked(batch, step), time.perf_counter() - t0

    def stop(self) -> None:
        self._halt.set()
        self.policy.board.close()
