"""Asynchronous training: a rollout worker keeps generating while the learner updates.

A synchronous step plays its episodes, then learns from them; the two never overlap. With
``TrainConfig(async_rollouts=True)`` (``turngym train --async``) a :class:`RolloutWorker` thread
plays the episodes of step ``k + 1`` (and up to ``async_lag`` steps ahead) on its own copy of
the weights while the learner updates on step ``k``'s, as verl's fully-async trainer, SkyRL,
prime-rl and TRL's AsyncGRPOTrainer do. By default the worker runs in a process of its own
(:mod:`turngym.trainers.worker_process`): decoding a small model is mostly Python, and a worker
*thread* took turns with the learner on the interpreter lock instead of overlapping with it
(measured in ``docs/async.md``). ``async_worker="thread"`` keeps it in the learner's process
(no start-up, no pickling; the same run, row for row).

**Policy versions.** Version ``v`` is the weights after ``v`` updates. The learner publishes
every version on a :class:`WeightBoard` (a copy of the trainable tensors); the worker reads them
only at a *safe point*, between two decode calls of the lockstep rollout, so a weight update
never races generation. The schedule is fixed by the config, not by timing, so a run is a
function of its seed and a killed run resumes exactly:

* step ``k``'s episodes start with version ``max(0, k − async_lag)``;
* at decode call ``async_swap_call`` of that batch they move on to the next version (if it is
  not published yet, the worker waits for it there): **partial rollouts** — an episode in
  flight continues with the new weights, nothing is re-generated.

``async_swap_call=0`` instead takes the newest published version at every decode call
(fastest, never waits, but then *which* turn got which version depends on timing: resume is
consistent, not bitwise exact). Every turn records the version that produced its tokens
(``Turn.policy_version``, the turn table's ``policy_version`` column) next to its sampling
log-probs (the behaviour log-probs).

**Credit across versions.** The learner consumes step ``k``'s batch at version ``k``; a turn of
version ``v`` is ``k − v`` versions stale. Turns staler than ``max_staleness`` follow
``stale_policy``: ``"is"`` keeps them, ``"drop"`` drops their episodes. Every kept token is
importance-corrected per turn: ``π_old`` is recomputed with the learner's weights and each token
weighted by ``min(π_old / π_behaviour, tis_cap)`` against the log-probs of the version that
sampled it (:func:`turngym.trainers.engine.tis_pg_loss`, the truncated IS the vLLM engine uses).
Which estimators stay exact under this, and why, is measured by
:mod:`turngym.study.async_bias` and stated in ``docs/async.md``.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.trainers.deadline import Progress, WorkerStalled, auto_deadline, await_batch

__all__ = ["AsyncBatch", "AsyncRollouts", "RolloutWorker", "VersionedPolicy", "WeightBoard", "prefix_behaviour", "staleness_stats", "trainable_tensors"]


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


def staleness_stats(episodes: Sequence[Any], version: int) -> dict[str, Any]:
    """Per-turn staleness of a batch consumed at ``version``: histogram, versions present."""
    versions = np.array([t.policy_version for ep in episodes for t in ep.turns if t.policy_version is not None], dtype=np.int64)
    if versions.size == 0:
        return {}
    stale = version - versions
    values, counts = np.unique(stale, return_counts=True)
    return {
        "staleness_hist": {str(int(v)): int(c) for v, c in zip(values, counts)},
        "staleness_mean": float(stale.mean()),
        "staleness_max": int(stale.max()),
        "versions_per_batch": len(np.unique(versions)),
        "mixed_version_episodes": int(sum(len({t.policy_version for t in ep.turns}) > 1 for ep in episodes)),
    }


def drop_stale(episodes: Sequence[Any], version: int, max_staleness: int) -> tuple[list[Any], int]:
    """The episodes none of whose turns is staler than ``max_staleness``, and how many were dropped."""
    keep = [ep for ep in episodes if all(t.policy_version is None or version - t.policy_version <= max_staleness for t in ep.turns)]
    return keep, len(episodes) - len(keep)


class AsyncRollouts:
    """The trainer's side of asynchronous training: the worker, the board, the per-step record.

    Args:
        config: the run (``async_lag``, ``async_swap_call``, ``max_staleness``, ``stale_policy``).
        learner: the :class:`~turngym.trainers.learner.Learner` (its model is copied for the worker
            once LoRA is added and a checkpoint loaded).
        make_producer: builds a :class:`~turngym.trainers.producer.RolloutProducer` sampling with the
            model it is given (``async_worker="process"``: in the worker process, so it must pickle:
            :class:`~turngym.trainers.worker_process.ProducerFactory`).
        first: the first RL step still to play (0, or the resumed step).
        behaviour: versions older than ``first`` that the schedule still samples with (from the
            checkpoint; an uninterrupted run published them itself).
        screen: ``screen(episodes)`` → the step's scored episodes and the row's infra-error
            fields (the trainer's ``max_infra_error_rate`` bound, run here in the learner's
            thread and in step order, so the run's count is the synchronous one); None: drop
            infrastructure failures and empty episodes, unbounded.
        launched: a worker interpreter started earlier
            (:class:`~turngym.trainers.worker_process.LaunchedWorker`) for ``async_worker="process"``.
    """

    def __init__(self, config: Any, learner: Any, make_producer: Callable[[Any], Any], *, first: int,
                 behaviour: dict[int, dict[str, Any]] | None = None,
                 screen: Callable[[list[Any]], tuple[list[Any], dict[str, Any]]] | None = None, launched: Any = None) -> None:
        import copy

        self.config = config
        self.learner = learner
        self.slowest_rollout_s = 0.0
        self.stalled = False
        self.screen = screen or (lambda eps: ([ep for ep in eps if not ep.infra_error and ep.turns], {}))
        self.board = WeightBoard(keep=config.async_lag + 1)
        for version, tensors in sorted((behaviour or {}).items()):
            self.board.publish(version, tensors)
        self.board.publish(first, trainable_tensors(learner.model))
        if config.async_worker == "process":
            from turngym.trainers.worker_process import ProcessRolloutWorker

            self.worker: Any = ProcessRolloutWorker(make_producer, learner.model, self.board, first=first, steps=config.steps,
                                                    lag=config.async_lag, swap_call=config.async_swap_call, threads=config.threads,
                                                    launched=launched)
            return
        model = copy.deepcopy(learner.model).eval()
        producer = make_producer(model)
        policy = VersionedPolicy(model, self.board, lambda seed: producer.policy(seed=seed))
        self.worker = RolloutWorker(lambda step, pol: producer.step_episodes(step, policy=pol), policy,
                                    lambda step: producer.step_tasks(step)[1], first=first, steps=config.steps,
                                    lag=config.async_lag, swap_call=config.async_swap_call)
        self.worker.start()

    def behaviour_versions(self, step: int) -> dict[int, dict[str, Any]]:
        """The versions before ``step`` that the worker still needs after a resume at ``step``."""
        return self.board.saved(range(max(0, step - self.config.async_lag), step))

    def step(self, step: int, opt: Any) -> dict[str, Any]:
        """RL step ``step`` from the worker's batch: staleness policy, the update, the new version."""
        cfg = self.config
        t0 = time.perf_counter()
        try:
            batch, waited = self.worker.next_batch(step, auto_deadline(cfg.worker_timeout_s, self.slowest_rollout_s))
        except WorkerStalled:
            self.stalled = True
            raise
        self.slowest_rollout_s = max(self.slowest_rollout_s, batch.rollout_s)
        episodes, infra = self.screen(batch.episodes)
        stale = staleness_stats(episodes, step)
        hist = stale.pop("staleness_hist", {})
        dropped = 0
        if cfg.stale_policy == "drop":
            episodes, dropped = drop_stale(episodes, step, cfg.max_staleness)
        if not episodes:
            raise ConfigError(f"every episode of step {step + 1} was staler than max_staleness={cfg.max_staleness} and dropped: "
                              f"raise max_staleness to async_lag ({cfg.async_lag}) or use stale_policy='is'")
        record = self.learner.learn(step, episodes, opt, off_policy=True, prefix_is=cfg.async_is == "prefix")
        self.board.publish(step + 1, trainable_tensors(self.learner.model))
        return {
            **record,
            **infra,
            **{f"staleness_{k}_turns": v for k, v in sorted(hist.items())},
            **stale,
            "dropped_episodes": dropped,
            "swap_wait_s": round(batch.swap_wait_s, 2),
            "queue_wait_s": round(waited, 2),
            "rollout_s": round(batch.rollout_s, 2),
            "step_s": round(time.perf_counter() - t0, 2),
        }

    def close(self) -> None:
        self.worker.stop()
        self.worker.join(timeout=1 if self.stalled else 30)  # a stalled worker will not finish: kill it (a process) now


def prefix_behaviour(old_logp: Any, behaviour_logp: Any, mask: Any) -> Any:
    """Behaviour log-probs that make :func:`~turngym.trainers.engine.tis_weights` the *prefix* ratio.

    Per-token TIS weights token ``i`` by ``π_old(a_i) / π_b(a_i)``: it corrects which action was
    taken, not how likely the learner was to reach the state it was taken in. When a batch's
    early turns come from an older version and the episode's course depends on them (its length,
    the states it visits), later turns are visited with the older policy's odds, and the
    gradient is biased (measured: :mod:`turngym.study.async_bias`). Per-decision importance
    sampling weights token ``i`` by the product of the ratios of every action token up to it,
    ``Π_{j ≤ i} π_old(a_j) / π_b(a_j)``. Returned as ``old − cumsum((old − b)·mask)``, so
    ``exp(old − returned)`` is that product, truncated at the same cap downstream. On turns
    whose prefix was all sampled by the learner's version the product is the per-token ratio.
    """
    import torch

    with torch.no_grad():
        return old_logp - torch.cumsum((old_logp - behaviour_logp) * (mask > 0), dim=1)
