"""The rollout producer: which tasks a run plays, with which policy, and the episodes that come back.

:class:`RolloutProducer` turns the run's seed into the tasks of every RL step (step ``k``'s draw
is seeded by ``(seed, k)``, so a resumed run plays exactly the tasks an uninterrupted one would),
builds the policy that plays them — the HF model it is given, or the vLLM engine with the
learner's weights pushed into it — and plays them (:func:`turngym.rollout.run_episodes`: exact
token ids and log-probs). With ``TrainConfig.episodes`` it plays nothing: every step's episodes
are the saved ones (:mod:`turngym.trainers.saved`). It also plays the oracle demonstrations of the warm start and the
evaluation episodes. It never changes a weight: that is :mod:`turngym.trainers.learner`'s job.

The synchronous trainer hands it the learner's own model; the asynchronous one
(:mod:`turngym.trainers.asynchronous`) runs one in a worker thread on a copy of the weights that
is swapped between decode calls.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from turngym.trainers.config import TrainConfig
from turngym.trainers.engines import Engine, engine_class
from turngym.trainers.rng import seeded_rng

__all__ = ["DEMO_SEED", "EVAL_SEED", "TRAIN_SEED", "RolloutProducer", "make_env", "success_rate"]

EVAL_SEED = 10_000_000
"""First task seed of the held-out evaluation tasks (``task_pool=0``); studies evaluate on the same ones."""
DEMO_SEED = 20_000_000
TRAIN_SEED = 30_000_000


def make_env(config: TrainConfig, env_id: str | None = None) -> Any:
    """A fresh env of the run (``env_id``: another one, e.g. a held-out split), as the policy sees it."""
    import turngym

    env = turngym.make(env_id or config.env_id, **config.env_kwargs)
    if not config.show_system_prompt:
        env.unwrapped.system_prompt = ""
    return env


class RolloutProducer:
    """Plays a run's episodes (see the module docstring).

    Args:
        config: the run.
        model: returns the torch model that samples (the learner's, or a worker's copy); called
            for every rollout, since the learner replaces its model object (warm start, LoRA).
        tokenizer: its tokenizer.
        model_path: returns the run's base model directory (where the vLLM engine starts from).
        log: one-line status messages.
        bar: a progress bar factory ``bar(total, desc)``.
        saved: the run's saved training episodes (``config.episodes``), returned by every
            :meth:`step_episodes` instead of a rollout; None: play the env.
    """

    def __init__(self, config: TrainConfig, model: Callable[[], Any], tokenizer: Any, *, model_path: Callable[[], Path],
                 log: Callable[[str], None], bar: Callable[..., Any], saved: list[Any] | None = None) -> None:
        self.config = config
        self.saved = saved
        self.model = model
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.log = log
        self._bar = bar
        self.rollout_engine: Engine = engine_class(config.engine)(self)
        """The run's rollout engine (``config.engine``, from :data:`~turngym.trainers.engines.ENGINES`)."""
        self.edge: Any = self._edge_pool()
        """The edge-of-ability task pool (``edge_pool`` > 0), or None."""

    # ---------------------------------------------------------------------- what is played
    def step_tasks(self, step: int, extra: int = 0) -> tuple[list[int], int]:
        """The task seeds of RL step ``step`` and the seed of the policy that plays them (``extra``:
        of dynamic sampling's ``extra``-th additional round; from the edge pool when it is on)."""
        cfg = self.config
        rng = seeded_rng(cfg.seed, 2, step) if not extra else seeded_rng(cfg.seed, 5, step, extra)
        if self.edge is not None:
            seeds = self.edge.draw(rng, cfg.groups_per_step)
        elif cfg.task_pool:
            seeds = [int(s) for s in rng.choice(cfg.task_pool, size=cfg.groups_per_step, replace=cfg.groups_per_step > cfg.task_pool)]
        else:
            seeds = [int(s) for s in rng.integers(TRAIN_SEED, 2**31 - 1, size=cfg.groups_per_step)]
        return seeds, int(rng.integers(2**31))

    def step_batch(self, step: int, screen: Callable[[list[Any]], tuple[list[Any], dict[str, Any]]]) -> tuple[list[Any], dict[str, Any]]:
        """The episodes RL step ``step`` trains on and its row fields: one rollout of
        :meth:`step_tasks`, or, with ``edge_pool`` / ``dynamic_sampling``
        (:mod:`turngym.trainers.sampling`), from the edge pool and with further rounds until the
        batch holds ``groups_per_step`` informative groups. ``screen`` drops each rollout's
        infrastructure failures (and counts them); the row sums its ``infra_errors``."""
        from turngym.trainers.sampling import dynamic_batch

        cfg = self.config
        row: dict[str, Any] = {}
        if self.edge is not None:
            row |= self.edge.update(step)
            row["pool_size"] = len(self.edge.kept)
        infra = {"infra_errors": 0, "infra_error_rate": 0.0}

        def play(extra: int) -> list[Any]:
            seeds, policy_seed = self.step_tasks(step, extra)
            kept, found = screen(self.rollout(seeds, group_size=cfg.group_size, policy_seed=policy_seed))
            infra["infra_errors"] += found["infra_errors"]
            infra["infra_error_rate"] = found["infra_error_rate"]
            return kept

        if self.saved is not None:
            episodes, infra = screen(list(self.saved))
        elif cfg.dynamic_sampling:
            episodes, sampled = dynamic_batch(play(0), play, groups=cfg.groups_per_step, rounds=cfg.dynamic_rounds)
            row |= sampled
        else:
            episodes = play(0)
        return episodes, row | infra

    def _edge_pool(self) -> Any:
        """The run's :class:`~turngym.trainers.sampling.EdgePool` (``edge_pool`` > 0), else None."""
        cfg = self.config
        if not cfg.edge_pool or self.saved is not None:
            return None
        from turngym.trainers.sampling import EdgePool

        def candidates(step: int) -> list[int]:
            rng = seeded_rng(cfg.seed, 4, step)
            if cfg.task_pool:
                return sorted(int(s) for s in rng.choice(cfg.task_pool, size=min(cfg.edge_pool, cfg.task_pool), replace=False))
            return [int(s) for s in rng.integers(TRAIN_SEED, 2**31 - 1, size=cfg.edge_pool)]

        def score(seeds: list[int], step: int) -> list[Any]:
            episodes = self.rollout(seeds, group_size=cfg.edge_k, policy_seed=int(seeded_rng(cfg.seed, 6, step).integers(2**31)))
            return [ep for ep in episodes if not ep.infra_error and ep.turns]  # an infra failure is never a failure to solve

        return EdgePool(candidates, score, refresh=cfg.edge_refresh)

    def demo_seeds(self) -> list[int]:
        cfg = self.config
        if cfg.task_pool:
            return [i % cfg.task_pool for i in range(cfg.demo_episodes)]
        return [DEMO_SEED + cfg.seed * 100_003 + i for i in range(cfg.demo_episodes)]

    def eval_seeds(self, n: int, env_id: str | None = None) -> list[int]:
        pool = self.config.task_pool if env_id is None else 0
        return [i % pool for i in range(n)] if pool else [EVAL_SEED + i for i in range(n)]

    # ---------------------------------------------------------------------- playing
    def step_episodes(self, step: int, policy: Any = None) -> list[Any]:
        """Every episode of RL step ``step``, infrastructure failures included: the trainer counts
        them against ``max_infra_error_rate`` and drops them (they are never scored). ``policy``:
        play with it instead of a fresh one. Saved episodes (``config.episodes``): the same batch
        every step."""
        if self.saved is not None:
            return list(self.saved)
        cfg = self.config
        seeds, policy_seed = self.step_tasks(step)
        return self.rollout(seeds, group_size=cfg.group_size, policy_seed=policy_seed, policy=policy)

    def demonstrations(self) -> list[Any]:
        """The warm start's noisy-oracle demonstrations."""
        from turngym.rollout import run_episodes
        from turngym.trainers.imitation import NoisyOracle

        cfg = self.config
        return run_episodes(lambda: make_env(cfg), NoisyOracle(cfg.demo_noise, seed=cfg.seed), self.demo_seeds(), batch_size=256,
                            env_id=cfg.env_id)

    def evaluation(self, n: int, env_id: str | None = None) -> list[Any]:
        """``n`` evaluation episodes (see :meth:`turngym.trainers.Trainer.evaluate`)."""
        seeds = self.eval_seeds(n, env_id)
        return self.rollout(seeds, group_size=1, policy_seed=self.config.seed + EVAL_SEED, desc="evaluate", env_id=env_id)

    @property
    def engine(self) -> Any:
        """What the rollout engine runs of its own once started (``engine="vllm"``: the
        :class:`~turngym.trainers.engine.RolloutEngine`), else None."""
        return self.rollout_engine.running

    def policy(self, *, seed: int) -> Any:
        """The policy that samples: the HF model, or the vLLM engine holding the model's weights."""
        return self.rollout_engine.policy(seed=seed)

    def rollout(self, seeds: list[int], *, group_size: int, policy_seed: int, desc: str | None = None, env_id: str | None = None,
                policy: Any = None) -> list[Any]:
        """Play ``group_size`` episodes per seed (on ``env_id``, default the run's env); ``desc``
        shows a progress bar (episodes, turns), since evaluating a pretrained model on a CPU takes minutes."""
        from turngym.rollout import run_episodes

        self.model().eval()
        env_id = env_id or self.config.env_id
        callbacks: dict[str, Any] = {}
        if desc:
            bar, turns = self._bar(len(seeds) * group_size, desc), [0]

            def on_turn(_ep: Any, _turn: Any) -> None:
                turns[0] += 1
                if turns[0] % 8 == 0:
                    bar.set_postfix(turns=turns[0], refresh=True)

            callbacks = {"on_episode": lambda _ep: bar.update(1), "on_turn": on_turn}
        try:
            return run_episodes(
                lambda: make_env(self.config, env_id),
                policy if policy is not None else self.policy(seed=policy_seed),
                seeds,
                batch_size=len(seeds) * group_size,
                group_size=group_size,
                history=self.config.history,
                env_id=env_id,
                **callbacks,
            )
        finally:
            if desc:
                bar.close()

    def sync(self) -> Any:
        """Bring the rollout engine up to the model's weights (after an update, the warm start, a
        resumed checkpoint). Returns the push's :class:`~turngym.trainers.engine.SyncStats`, or
        None when nothing moved (always, for the hf engine: it samples with the model itself)."""
        return self.rollout_engine.sync()


def success_rate(episodes: list[Any]) -> float:
    """Share of the scored episodes (infrastructure failures dropped) that succeeded; NaN if none."""
    scored = [e for e in episodes if not e.infra_error]
    return float(np.mean([e.success for e in scored])) if scored else float("nan")
