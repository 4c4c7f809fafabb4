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

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.trainers.atomic import ArtifactError
from turngym.trainers.deadline import WorkerStalled, auto_deadline
from turngym.trainers.rollout_worker import (
    AsyncBatch,
    RolloutWorker,
    VersionedPolicy,
    WeightBoard,
    WorkerStopped,
    trainable_tensors,
)
from turngym.trainers.worker_process import LaunchedWorker, ProcessRolloutWorker, ProducerFactory

__all__ = ["AsyncBatch", "AsyncRollouts", "RolloutWorker", "VersionedPolicy", "WeightBoard", "WorkerStopped", "drop_stale",
           "launch_worker", "load_behaviour", "save_behaviour", "start_rollouts", "staleness_stats", "trainable_tensors"]

BEHAVIOUR_FILE = "behaviour.pt"
"""A checkpoint's policy versions older than its step that the worker still samples with after a resume there."""


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

    def step(self, step: int) -> dict[str, Any]:
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
        record = self.learner.learn(step, episodes, off_policy=True, prefix_is=cfg.async_is == "prefix")
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


def launch_worker(config: Any) -> LaunchedWorker | None:
    """Start the worker's interpreter at the run's beginning (``async_worker="process"``), so that
    its imports (torch, transformers) overlap the trainer's warm start; None for any other run."""
    if config.async_rollouts and config.async_worker == "process":
        return LaunchedWorker()
    return None


def start_rollouts(config: Any, learner: Any, *, first: int, behaviour: dict[int, dict[str, Any]],
                   screen: Callable[[list[Any]], tuple[list[Any], dict[str, Any]]], launched: Any) -> AsyncRollouts:
    """The run's :class:`AsyncRollouts` from RL step ``first``, its worker building producers with
    the learner's tokenizer (:class:`~turngym.trainers.worker_process.ProducerFactory`)."""
    return AsyncRollouts(config, learner, ProducerFactory(config, learner.tokenizer), first=first, behaviour=behaviour,
                         screen=screen, launched=launched)


def save_behaviour(tmp: Path, rollouts: AsyncRollouts | None, step: int) -> None:
    """Write into the checkpoint directory ``tmp`` the older versions the worker still samples with
    after a resume at ``step`` (none when no worker runs yet)."""
    import torch

    behaviour = rollouts.behaviour_versions(step) if rollouts is not None else {}
    torch.save(behaviour, tmp / BEHAVIOUR_FILE)


def load_behaviour(source: Path, device: Any, fix: str) -> dict[int, dict[str, Any]]:
    """The versions :func:`save_behaviour` wrote into the checkpoint ``source``; :class:`ArtifactError`
    (saying ``fix``) when the file is missing (a checkpoint of a synchronous run) or damaged."""
    import torch

    file = source / BEHAVIOUR_FILE
    try:
        return torch.load(file, map_location=device)
    except Exception as exc:  # missing (a checkpoint of a synchronous run) or damaged
        raise ArtifactError(f"{file} cannot be loaded ({type(exc).__name__}: {exc}); {fix}") from exc
