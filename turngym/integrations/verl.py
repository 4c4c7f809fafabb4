"""turngym envs and per-turn credit inside verl (tested with verl 0.9.1).

Importing this module (verl does it in each of its processes when told to, see below):

* registers :class:`TurngymAgentLoop` as verl agent loop ``"turngym"``: it plays a turngym env
  (locally, or against ``turngym serve``) with verl's rollout servers, token-faithfully (the ids as
  generated, ``response_mask`` 1 on them and 0 on observations), and carries the episode — per-turn
  rewards, signals, state keys, ``infra_error`` — into the batch as ``extra_fields``;
* registers every turngym advantage estimator in verl's registry as ``turngym_<name>``
  (``algorithm.adv_estimator=turngym_gigpo``), parameters from ``$TURNGYM_ALGO_PARAMS``
  (``'{"omega": 1.0}'``; only these, so turngym's defaults hold unless you set them) and reward
  shaping from ``$TURNGYM_CREDIT`` (``'{"reward_weights": {"progress": 0.5}, "shaping_cap": 0.5}'``,
  the fields of :class:`~turngym.integrations.episodes.CreditSettings` but the model);
* wraps ``verl.trainer.ppo.ray_trainer.compute_advantage`` so that, for ``turngym_*`` names, the
  estimator also receives the batch's ``non_tensor_batch`` (verl passes estimators only tensors and
  ``uid``; the per-turn data cannot ride in a tensor). Other estimators are untouched.

Each turn's advantage lands on that turn's action tokens (0 on observations), the rule turngym's
own trainer uses; groups are verl's ``uid``. An episode that ended in an infrastructure error
gets all-zero advantages and is left out of its group's statistics (never scored 0).

How verl finds it: set ``VERL_USE_EXTERNAL_MODULES=turngym.integrations.verl`` in the launching
environment (verl imports the listed modules on ``import verl``, in the trainer and every worker),
use the legacy trainer loop (``trainer.use_v1=false``: the V1 loop fetches a fixed set of fields
for the advantage step, so per-turn data cannot reach it), and point
``actor_rollout_ref.rollout.agent.default_agent_loop=turngym`` at a dataset from
:func:`verl_dataset`. ``docs/engines.md`` has the full recipe.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
    from verl.trainer.ppo import core_algos
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "turngym.integrations.verl needs verl (which pins transformers<5.11: give it its own venv): "
        "pip install 'turngym[verl]'"
    ) from exc

from turngym.agents.render import ChatRenderer
from turngym.integrations.episodes import (
    CreditSettings,
    episode_from_json,
    episode_sequence,
    episode_to_json,
    make_env,
    play_episode,
    sequence_advantages,
    turn_advantages,
)
from turngym.rollout.types import group_id

__all__ = [
    "AGENT_NAME",
    "CREDIT_ENV",
    "ESTIMATOR_PREFIX",
    "PARAMS_ENV",
    "TurngymAgentLoop",
    "batch_advantages",
    "install",
    "register_verl_estimators",
    "verl_dataset",
]

AGENT_NAME = "turngym"
ESTIMATOR_PREFIX = "turngym_"
_EPISODE, _SPANS = "turngym_episode", "turngym_spans"
#: Environment variable holding the estimator parameters (JSON), read where the advantage is computed.
PARAMS_ENV = "TURNGYM_ALGO_PARAMS"
#: Environment variable holding the reward shaping settings (JSON, :class:`CreditSettings` fields).
CREDIT_ENV = "TURNGYM_CREDIT"
_CREDIT_FIELDS = ("reward_weights", "shaping_cap", "process_weights")
_ENGINE = "verl (its advantage step runs on the driver, which holds no policy)"


# ---------------------------------------------------------------------------------- agent loop
@register(AGENT_NAME)
class TurngymAgentLoop(AgentLoopBase):
    """A verl agent loop that plays one turngym episode per sample.

    Per-sample fields come from the dataset's ``extra_info`` (:func:`verl_dataset` writes them):
    ``env_id``, ``seed`` and optionally ``env_kwargs`` and ``remote`` (a ``turngym serve`` URL).
    Keyword arguments (from an ``agent_loop_config_path`` entry) give defaults for the same keys
    and ``max_tokens_per_turn``.

    The episode's response is everything after the first prompt — actions and observations —
    within ``rollout.response_length``: when the next action would not fit, the episode ends
    truncated (the agent's failure). A rollout server that fails ends the episode unscored.
    """

    def __init__(
        self,
        *args: Any,
        env_id: str | None = None,
        remote: str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        max_tokens_per_turn: int = 256,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.env_id = env_id
        self.remote = remote
        self.env_kwargs = dict(env_kwargs or {})
        self.max_tokens_per_turn = int(max_tokens_per_turn)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.renderer = ChatRenderer(self.tokenizer)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = dict(kwargs.get("extra_info") or {})
        env_id = info.get("env_id") or self.env_id
        if not env_id or info.get("seed") is None:
            raise ConfigError(
                "a turngym sample needs extra_info with 'env_id' and 'seed'; write the dataset with "
                "turngym.integrations.verl.verl_dataset(env_id, seeds, path)"
            )
        seed = int(info["seed"])
        remote = info.get("remote") or self.remote
        env_kwargs = {**self.env_kwargs, **dict(info.get("env_kwargs") or {})}
        env = await asyncio.to_thread(make_env, env_id, remote=remote, env_kwargs=env_kwargs)

        async def generate(prompt: list[int], stop: tuple[str, ...], max_tokens: int) -> tuple[list[int], list[float] | None]:
            params = {**sampling_params, "max_tokens": max_tokens}
            if stop:  # the env's stop strings end an action; keep them in the ids (token-faithful)
                params.update(stop=list(stop), include_stop_str_in_output=True)
            out = await self.server_manager.generate(request_id=uuid.uuid4().hex, prompt_ids=prompt, sampling_params=params)
            return list(out.token_ids), (list(out.log_probs) if out.log_probs else None)

        try:
            episode = await play_episode(
                env,
                generate,
                self.renderer,
                seed=seed,
                group=group_id(env_id, seed),
                index=int(info.get("index", 0)),
                env_id=env_id,
                max_tokens_per_turn=self.max_tokens_per_turn,
                max_response_tokens=self.response_length,
            )
        finally:
            await asyncio.to_thread(env.close)
        return self._output(episode)

    def _output(self, episode: Any) -> AgentLoopOutput:
        infra = episode.infra_error or ""
        if episode.turns:
            seq = episode_sequence(episode, self.renderer, max_response_tokens=self.response_length)
            prompt, response, mask, spans = seq.prompt_ids, seq.response_ids, seq.response_mask, seq.turn_spans
            have_lps = all(t.logprobs is not None for t in episode.turns if t.token_ids is not None)
            logprobs = seq.response_logprobs if have_lps else None
        else:  # the env failed at reset: one masked token, no turns, never scored
            prompt = self.renderer.prompt_ids([{"role": "user", "content": f"[environment infrastructure error: {infra}]"}])
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else prompt[-1]
            response, mask, spans, logprobs = [pad], [0], [], [0.0]
        if len(prompt) > self.prompt_length:
            raise ConfigError(
                f"the turngym prompt of {episode.env_id!r} has {len(prompt)} tokens but rollout.prompt_length is "
                f"{self.prompt_length}; raise data.max_prompt_length"
            )
        return AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=response,
            response_mask=mask,
            response_logprobs=logprobs,
            reward_score=0.0 if infra else float(episode.total_reward),
            num_turns=1 + 2 * len(episode.turns),
            metrics={},
            extra_fields={
                _EPISODE: episode_to_json(episode),
                _SPANS: json.dumps(spans),
                "turngym_infra_error": infra,
                "turngym_success": bool(episode.success),
                "turngym_return": float(episode.total_reward),
                "turngym_num_turns": len(episode.turns),
            },
        )


# ---------------------------------------------------------------------------------- estimators
def batch_advantages(
    name: str,
    episodes_json: Sequence[str],
    spans_json: Sequence[str],
    width: int,
    index: Sequence[Any] | None = None,
    *,
    credit: CreditSettings | None = None,
    **params: Any,
) -> np.ndarray:
    """``(batch, width)`` token advantages of a verl batch from its turngym ``extra_fields``.

    Row ``i`` is sample ``i``'s response; ``index`` (verl's ``uid``) groups the samples, as GRPO
    and GiGPO groups do in verl (default: the episodes' own groups, ``env_id/seed``). Rewards
    are shaped and declared inputs filled as turngym's trainer does (``credit``, default
    ``turngym train``'s settings). verl computes advantages on its driver, where the policy is
    not: an estimator whose inputs need it (``igpo``'s ``info_gain``) is refused, saying so;
    ``papo``'s ``process`` needs only the env's signals and works.
    """
    episodes = [episode_from_json(e) for e in episodes_json]
    for i, ep in enumerate(episodes):
        if index is not None:
            ep.group = str(index[i])
        ep.episode_id = f"{ep.group}/{i}"  # unique within the batch
    per_turn = turn_advantages(name, episodes, credit=credit, engine=_ENGINE, **params)
    rows = [sequence_advantages(a, json.loads(s), width) for a, s in zip(per_turn, spans_json)]
    return np.stack(rows) if rows else np.zeros((0, width))


def _params(config: Any = None) -> dict[str, Any]:
    """Estimator parameters from ``$TURNGYM_ALGO_PARAMS`` (a JSON object, e.g. ``{"omega": 1.0}``).

    verl builds ``algorithm`` into a closed dataclass (an extra ``algorithm.turngym`` key is
    rejected), so the parameters travel in the environment, which verl's Ray workers inherit.
    """
    raw = os.environ.get(PARAMS_ENV, "").strip()
    if not raw:
        return {}
    try:
        params = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"${PARAMS_ENV} must be a JSON object such as '{{\"omega\": 1.0}}': {exc}") from None
    if not isinstance(params, dict):
        raise ConfigError(f"${PARAMS_ENV} must be a JSON object such as '{{\"omega\": 1.0}}', got {raw!r}")
    return params


def _credit() -> CreditSettings:
    """Shaping settings from ``$TURNGYM_CREDIT`` (a JSON object of :class:`CreditSettings` fields).

    Like the estimator parameters, they travel in the environment (verl's ``algorithm`` config
    is closed); the policy fields are not settable: verl's advantage step has no policy.
    """
    raw = os.environ.get(CREDIT_ENV, "").strip()
    if not raw:
        return CreditSettings()
    example = '{"reward_weights": {"progress": 0.5}, "shaping_cap": 0.5}'
    try:
        fields = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"${CREDIT_ENV} must be a JSON object such as '{example}': {exc}") from None
    if not isinstance(fields, dict) or set(fields) - set(_CREDIT_FIELDS):
        raise ConfigError(f"${CREDIT_ENV} takes a JSON object with the keys {list(_CREDIT_FIELDS)} (e.g. '{example}'), got {raw!r}")
    return CreditSettings(**fields)


def _verl_estimator(name: str) -> Any:
    def estimator(
        token_level_rewards: Any,
        response_mask: Any,
        config: Any = None,
        index: Any = None,
        non_tensor_batch: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> tuple[Any, Any]:
        import torch

        if non_tensor_batch is None or _EPISODE not in non_tensor_batch:
            raise ConfigError(
                f"advantage estimator {ESTIMATOR_PREFIX}{name} needs the batch's turngym episodes: roll out with the "
                f"'{AGENT_NAME}' agent loop, launch with VERL_USE_EXTERNAL_MODULES=turngym.integrations.verl and "
                "trainer.use_v1=false (the V1 trainer does not hand non-tensor fields to the advantage step)"
            )
        adv = batch_advantages(
            name,
            non_tensor_batch[_EPISODE],
            non_tensor_batch[_SPANS],
            int(response_mask.shape[1]),
            index,
            credit=_credit(),
            **_params(config),
        )
        out = torch.as_tensor(adv, dtype=torch.float32, device=response_mask.device) * response_mask
        return out, out

    estimator.__name__ = estimator.__qualname__ = f"{ESTIMATOR_PREFIX}{name}"
    estimator.__doc__ = f"turngym's {name!r} estimator: per-turn advantages on each turn's action tokens."
    return estimator


_REGISTERED: dict[str, Any] = {}


def register_verl_estimators() -> list[str]:
    """Register every turngym estimator (including ones added with ``register_estimator``) in verl.

    Idempotent; returns the verl names (``turngym_<name>``).
    """
    from turngym.trainers.advantages import ESTIMATORS

    for name in ESTIMATORS:
        key = f"{ESTIMATOR_PREFIX}{name}"
        if key not in _REGISTERED:
            _REGISTERED[key] = _verl_estimator(name)
        core_algos.register_adv_est(key)(_REGISTERED[key])
    return sorted(_REGISTERED)


def _wrap_compute_advantage() -> None:
    from verl.trainer.ppo import ray_trainer

    original = ray_trainer.compute_advantage
    if getattr(original, "__turngym_original__", None) is not None:
        return

    def compute_advantage(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(adv_estimator, "value", adv_estimator)
        if not (isinstance(name, str) and name.startswith(ESTIMATOR_PREFIX)):
            return original(data, adv_estimator, *args, **kwargs)
        config = kwargs.get("config", args[5] if len(args) > 5 else None)
        if "response_mask" not in data.batch.keys():
            data.batch["response_mask"] = ray_trainer.compute_response_mask(data)
        fn = core_algos.get_adv_estimator_fn(name)
        adv, ret = fn(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            config=config,
            index=data.non_tensor_batch.get("uid"),
            non_tensor_batch=data.non_tensor_batch,
        )
        data.batch["advantages"] = adv
        data.batch["returns"] = ret
        return data

    compute_advantage.__turngym_original__ = original  # type: ignore[attr-defined]
    compute_advantage.__doc__ = original.__doc__
    ray_trainer.compute_advantage = compute_advantage


def install() -> list[str]:
    """Register the estimators and wrap ``compute_advantage`` (done on import; idempotent)."""
    names = register_verl_estimators()
    _wrap_compute_advantage()
    return names


# ---------------------------------------------------------------------------------- dataset
def verl_dataset(
    env_id: str,
    seeds: Sequence[int],
    path: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    remote: str | None = None,
) -> str:
    """Write a parquet dataset verl's ``RLHFDataset`` reads: one row per task seed, played by the agent loop.

    The ``prompt`` column only names the task (verl requires one); the agent loop renders the
    env's real system prompt and first observation itself.
    """
    import pandas as pd

    rows = []
    for i, seed in enumerate(seeds):
        extra: dict[str, Any] = {"env_id": env_id, "seed": int(seed), "index": i}
        if env_kwargs:
            extra["env_kwargs"] = dict(env_kwargs)
        if remote:
            extra["remote"] = remote
        rows.append(
            {
                "data_source": "turngym",
                "prompt": [{"role": "user", "content": f"{env_id} task {int(seed)}"}],
                "agent_name": AGENT_NAME,
                "ability": "agent",
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": extra,
            }
        )
    pd.DataFrame(rows).to_parquet(path)
    return path


install()
