"""TRL's ``GRPOTrainer`` on turngym envs, multi-turn, with turngym's per-turn credit.

Three pieces (``pip install 'turngym[trl]'``; tested with TRL 1.16.0):

* :class:`TurngymRollout` — a ``rollout_func``: each prompt names a task (:func:`task_prompt`), and
  the trainer's own model plays that task's episode through turngym's rollout
  (:func:`~turngym.rollout.run_episodes` with an :class:`~turngym.agents.hf.HFPolicy`). The
  whole episode comes back as one completion: generated ids verbatim, observations in between
  under ``env_mask = 0`` (TRL keeps them out of the loss), sampling log-probs per token.
* :func:`episode_return` / :func:`episode_success` — reward functions reading the episode the
  rollout attached. An episode that ended in an infrastructure error scores ``None``; TRL then
  leaves it out of its group's baseline and gives it zero advantage (never scored 0).
* :class:`TurnCreditGRPOTrainer` — the documented subclass point for per-turn credit: it calls
  ``GRPOTrainer._generate_and_score_completions`` and replaces ``out["advantages"]`` (one number
  per completion) with a ``(B, T)`` tensor holding each turn's turngym advantage on that turn's
  tokens (TRL's loss accepts either shape). Any turngym estimator works (``"gigpo"``, ...).

>>> task_prompt("turngym/Math-v0", 7)
'turngym:turngym/Math-v0#7'
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.integrations.episodes import (
    CreditSettings,
    episode_from_json,
    episode_sequence,
    episode_to_json,
    sequence_advantages,
    turn_advantages,
)

__all__ = [
    "TurnCreditGRPOTrainer",  # noqa: F822 - built on first access (module __getattr__), so TRL loads only when used
    "TurngymRollout",
    "episode_return",
    "episode_success",
    "parse_task_prompt",
    "task_prompt",
    "trl_dataset",
]

_PREFIX = "turngym:"


def task_prompt(env_id: str, seed: int) -> str:
    """The dataset prompt naming one task: the env id and its reset seed."""
    return f"{_PREFIX}{env_id}#{int(seed)}"


def parse_task_prompt(prompt: Any) -> tuple[str, int]:
    """``(env_id, seed)`` back from :func:`task_prompt` (a bad prompt says how to make one)."""
    text = prompt if isinstance(prompt, str) else None
    if text is None or not text.startswith(_PREFIX) or "#" not in text:
        raise ConfigError(
            f"a turngym rollout prompt must be task_prompt(env_id, seed) (e.g. 'turngym:turngym/Math-v0#3'), got "
            f"{prompt!r}; build the dataset with turngym.integrations.trl.trl_dataset"
        )
    env_id, _, seed = text[len(_PREFIX) :].rpartition("#")
    try:
        return env_id, int(seed)
    except ValueError:
        raise ConfigError(f"the seed in {text!r} is not an integer") from None


def trl_dataset(env_id: str, seeds: Sequence[int]) -> Any:
    """A ``datasets.Dataset`` with one ``prompt`` per task seed, for ``GRPOTrainer(train_dataset=...)``."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [task_prompt(env_id, s) for s in seeds]})


class TurngymRollout:
    """A ``rollout_func`` for ``GRPOTrainer``: every prompt is one turngym episode, played by the trainer's model.

    Args:
        max_new_tokens: generation cap per action (not per episode; the env's turn limit bounds
            the episode).
        temperature: sampling temperature; ``None`` uses the trainer's (``args.temperature``).
        env_kwargs: constructor overrides for the env (``max_turns=...``).
        remote: a ``turngym serve`` URL to run the envs there instead of in this process.

    TRL hands over the prompts with each task repeated ``num_generations`` times in a row; each
    run of equal prompts becomes one turngym group (same seed: same task and initial state).
    The policy wrapper switches the model to eval mode for sampling; the rollout restores the
    mode it found, because TRL reads ``model.training`` to tell training from evaluation.
    """

    def __init__(
        self,
        *,
        max_new_tokens: int = 64,
        temperature: float | None = None,
        env_kwargs: dict[str, Any] | None = None,
        remote: str | None = None,
    ) -> None:
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.env_kwargs = dict(env_kwargs or {})
        self.remote = remote
        self.last_episodes: list[Any] = []
        """The episodes of the latest call, in prompt order (for logging and tests)."""

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        from turngym.agents.hf import HFPolicy
        from turngym.agents.render import ChatRenderer
        from turngym.integrations.episodes import make_env
        from turngym.rollout import run_episodes

        tasks = [parse_task_prompt(p) for p in prompts]
        runs = _runs(tasks)
        sizes = {n for _, n in runs}
        if len(sizes) != 1 or len({t[0] for t in tasks}) != 1:
            raise ConfigError(
                "a rollout batch must hold one env id and equal-size runs of repeated prompts (TRL's sampler makes "
                f"them); got runs of sizes {sorted(sizes)} over env ids {sorted({t[0] for t in tasks})}"
            )
        env_id, group_size = tasks[0][0], sizes.pop()
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = trainer.processing_class
        temperature = self.temperature if self.temperature is not None else float(getattr(trainer, "temperature", 1.0))
        seed = int(getattr(trainer.args, "seed", 0)) * 1_000_003 + int(trainer.state.global_step)
        was_training = model.training  # read before HFPolicy, which switches the model to eval mode
        try:
            policy = HFPolicy(model, tokenizer, temperature=temperature, max_new_tokens=self.max_new_tokens, seed=seed)
            episodes = run_episodes(
                lambda: make_env(env_id, remote=self.remote, env_kwargs=self.env_kwargs),
                policy,
                [s for (_, s), _ in runs],
                batch_size=len(tasks),
                group_size=group_size,
                env_id=env_id,
            )
        finally:
            model.train(was_training)
        renderer = ChatRenderer(tokenizer)
        out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
        out.update({"turngym_episode": [], "turngym_spans": []})
        for ep in episodes:
            if not ep.turns:  # the env failed at reset: one masked-out token, scored None
                ids = renderer.prompt_ids([{"role": "user", "content": ep.initial_observation or "-"}])
                out["prompt_ids"].append(ids)
                out["completion_ids"].append([renderer.eos_id if renderer.eos_id is not None else ids[-1]])
                out["logprobs"].append([0.0])
                out["env_mask"].append([0])
                spans: list[tuple[int, int]] = []
            else:
                seq = episode_sequence(ep, renderer)
                out["prompt_ids"].append(seq.prompt_ids)
                out["completion_ids"].append(seq.response_ids)
                out["logprobs"].append(seq.response_logprobs)
                out["env_mask"].append(seq.response_mask)
                spans = seq.turn_spans
            out["turngym_episode"].append(episode_to_json(ep))
            out["turngym_spans"].append(json.dumps(spans))
        self.last_episodes = episodes
        return out


def _runs(tasks: Sequence[tuple[str, int]]) -> list[tuple[tuple[str, int], int]]:
    runs: list[tuple[tuple[str, int], int]] = []
    for t in tasks:
        if runs and runs[-1][0] == t:
            runs[-1] = (t, runs[-1][1] + 1)
        else:
            runs.append((t, 1))
    return runs


def episode_return(completions: list[Any], turngym_episode: list[str], **_: Any) -> list[float | None]:
    """Reward function: the episode's return (sum of its per-turn rewards); ``None`` for infra failures."""
    eps = [episode_from_json(e) for e in turngym_episode]
    return [None if (ep.infra_error or not ep.turns) else ep.total_reward for ep in eps]


def episode_success(completions: list[Any], turngym_episode: list[str], **_: Any) -> list[float | None]:
    """Reward function: 1.0 if the task was solved, 0.0 if not; ``None`` for infra failures."""
    eps = [episode_from_json(e) for e in turngym_episode]
    return [None if (ep.infra_error or not ep.turns) else float(ep.success) for ep in eps]


def _trainer_base() -> type:
    try:
        from trl import GRPOTrainer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("TurnCreditGRPOTrainer needs TRL: pip install 'turngym[trl]'") from exc
    return GRPOTrainer


def __getattr__(name: str) -> Any:
    # The subclass is built on first use, so importing this module does not import TRL.
    if name == "TurnCreditGRPOTrainer":
        cls = _make_turn_credit_trainer(_trainer_base())
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def _make_turn_credit_trainer(base: type) -> type:
    class TurnCreditGRPOTrainer(base):  # type: ignore[misc, valid-type]
        """``GRPOTrainer`` with turngym's per-turn advantages on each turn's tokens.

        Args (beside ``GRPOTrainer``'s):
            turngym_algo: a turngym estimator name (``"gigpo"``, ``"turn_grpo"``, ``"grpo"``...).
            turngym_algo_params: its parameters (``{"omega": 1.0}``); unknown ones are rejected.
            turngym_credit: reward shaping and provider settings (default: ``turngym train``'s);
                the trainer's model and tokenizer are filled in, so estimators whose inputs
                score with the policy (``igpo``'s ``info_gain``) work here too.

        Use with :class:`TurngymRollout` as ``rollout_func``. Groups are the runs of repeated
        prompts; with several processes the episodes are gathered so every group is whole.
        """

        def __init__(
            self,
            *args: Any,
            turngym_algo: str = "gigpo",
            turngym_algo_params: dict[str, Any] | None = None,
            turngym_credit: CreditSettings | None = None,
            **kwargs: Any,
        ) -> None:
            from turngym.trainers.advantages import ESTIMATORS
            from turngym.trainers.providers import missing_inputs

            if turngym_algo not in ESTIMATORS:
                raise ConfigError(f"unknown turngym estimator {turngym_algo!r}; known: {', '.join(sorted(ESTIMATORS))}")
            lacking = missing_inputs(turngym_algo)
            if lacking:
                raise ConfigError(
                    f"estimator {turngym_algo!r} reads {lacking}, which no provider fills: register one with "
                    "turngym.trainers.providers.register_provider"
                )
            super().__init__(*args, **kwargs)
            self.turngym_algo = turngym_algo
            self.turngym_algo_params = dict(turngym_algo_params or {})
            self.turngym_credit = turngym_credit if turngym_credit is not None else CreditSettings()
            self.last_turn_advantages: list[np.ndarray] = []

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            import torch

            out = super()._generate_and_score_completions(inputs)
            if "turngym_episode" not in inputs[0]:
                raise ConfigError("TurnCreditGRPOTrainer needs rollout_func=TurngymRollout(...) (no turngym episode in the batch)")
            local = [(inp["turngym_episode"], inp["turngym_spans"]) for inp in inputs]
            gathered = local
            n_proc = self.accelerator.num_processes
            if n_proc > 1:
                from accelerate.utils import gather_object

                gathered = gather_object(local)
            episodes = [episode_from_json(e) for e, _ in gathered]
            for i, ep in enumerate(episodes):  # unique ids across processes and steps
                ep.episode_id = f"{ep.group}/{i}"
            credit = self.turngym_credit
            if credit.model is None:  # the policy being trained scores the episodes (IGPO's info_gain)
                credit = dataclasses.replace(
                    credit, model=self.accelerator.unwrap_model(self.model), tokenizer=self.processing_class
                )
            per_turn = turn_advantages(self.turngym_algo, episodes, credit=credit, engine="TRL", **self.turngym_algo_params)
            start = self.accelerator.process_index * len(local)
            mine = per_turn[start : start + len(local)]
            width = out["completion_ids"].shape[1]
            adv = np.stack([sequence_advantages(a, json.loads(s), width) for a, (_, s) in zip(mine, local)])
            out["advantages"] = torch.as_tensor(adv, dtype=torch.float32, device=out["completion_ids"].device)
            self.last_turn_advantages = mine
            return out

    TurnCreditGRPOTrainer.__module__ = __name__
    return TurnCreditGRPOTrainer
