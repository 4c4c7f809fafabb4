"""Engine-neutral pieces of the integrations: play an episode through any token generator, turn it
into one (prompt, response, mask) sequence, and put turngym's per-turn advantages on its tokens.

Engines own generation (verl's rollout servers, TRL's model) and the loss; turngym owns the env
loop, the token bookkeeping and the credit. This module is the seam, written once so the verl and
TRL paths cannot drift from each other or from turngym's own trainer:

* :func:`play_episode` drives a local env (or ``turngym.make(..., remote=url)``) with an ``async``
  ``generate(prompt_ids, stop, max_tokens)``; the prompts come from the same
  :class:`~turngym.agents.render.ChatRenderer` the trainer uses and each turn is recorded by
  :func:`~turngym.rollout.record_turn`, so an episode played here is the episode turngym's own
  rollout would have recorded for the same samples.
* :func:`episode_sequence` renders it with :func:`~turngym.agents.render.render_episode`
  (generated ids spliced in verbatim, mask on policy tokens only) and splits it where the first
  action starts, which is the split engines want (prompt / response).
* :func:`turn_advantages` and :func:`sequence_advantages` run
  :func:`~turngym.trainers.advantages.compute_advantages` on the rollout turn table and spread
  each turn's advantage over that turn's action tokens with
  :func:`~turngym.trainers.batch.token_advantages`, exactly as the trainer does: on the same
  shaped rewards (the env's signals under its :class:`~turngym.rewards.RewardSpec` weights,
  :class:`CreditSettings`), with the columns an estimator declares (``requires=``) filled by
  turngym's providers (:mod:`turngym.trainers.providers`) from what the engine can hand over.

Nothing here imports an engine.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from turngym.agents.base import Action
from turngym.agents.render import ChatRenderer, RenderError, render_episode
from turngym.core.errors import ConfigError, InfraError
from turngym.rollout.runner import new_episode, record_turn, unscored_episode
from turngym.rollout.types import Episode

__all__ = [
    "CreditSettings",
    "EpisodeSequence",
    "Generate",
    "episode_from_json",
    "episode_sequence",
    "episode_to_json",
    "make_env",
    "play_episode",
    "sequence_advantages",
    "turn_advantages",
]

#: ``await generate(prompt_ids, stop_strings, max_tokens) -> (token_ids, logprobs or None)``.
#: Raising means the *model server* failed: the episode ends unscored (``infra_error``).
Generate = Callable[[list[int], tuple[str, ...], int], Awaitable[tuple[list[int], list[float] | None]]]

# Tokens kept free after the last action for the template's end-of-turn framing, so a rendered
# episode never exceeds the engine's response budget.
_FOOTER_MARGIN = 4


def make_env(env_id: str, *, remote: str | None = None, env_kwargs: Mapping[str, Any] | None = None) -> Any:
    """A turngym env, local or served by ``turngym serve`` at ``remote`` (``ws://host:port``)."""
    import turngym

    return turngym.make(env_id, remote=remote, **dict(env_kwargs or {}))


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking env call off the event loop (engines run many episodes concurrently)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


async def play_episode(
    env: Any,
    generate: Generate,
    renderer: ChatRenderer,
    *,
    seed: int | None,
    group: str,
    index: int = 0,
    env_id: str = "",
    options: Mapping[str, Any] | None = None,
    max_tokens_per_turn: int = 256,
    max_response_tokens: int | None = None,
) -> Episode:
    """Play one episode of ``env`` with ``generate``; the episode records ids and log-probs as sampled.

    Args:
        env: a turngym env (local, or a ``RemoteEnv``); its calls run in a worker thread.
        generate: the engine's sampler (see :data:`Generate`).
        renderer: builds each turn's prompt from the episode so far (all turns of history).
        seed: the reset seed; episodes of a group share it (same task, same initial state).
        group: the group id (GRPO/GiGPO groups); the episode id is ``f"{group}/{index}"``.
        max_tokens_per_turn: generation cap per action.
        max_response_tokens: the engine's budget for everything after the first prompt (actions
            *and* observations). When the next action would not fit, the episode ends there,
            truncated (``outcome["reason"] == "response_budget"``): the agent ran out of room,
            which is the agent's failure, not an infrastructure error.

    An env whose ``reset`` raises :class:`InfraError` gives an unscored episode without turns; a
    ``generate`` that raises ends the episode unscored (``infra_error`` on the last turn).
    """
    if max_tokens_per_turn < 1:
        raise ConfigError(f"max_tokens_per_turn must be >= 1, got {max_tokens_per_turn}")
    try:
        obs, info = await _call(env.reset, seed=seed, options=dict(options) if options else None)
    except InfraError as exc:
        return unscored_episode(group, index, env_id, seed, str(exc))
    ep = new_episode(env, obs, info, episode_id=f"{group}/{index}", env_id=env_id, seed=seed, group=group)
    stop = tuple(getattr(getattr(env, "unwrapped", env), "stop_strings", ()))
    prev_key = info["state_key"]
    first_prompt: int | None = None
    while True:
        messages, action_ids = ep.context()
        prompt = renderer.prompt_ids(messages, action_ids)
        first_prompt = len(prompt) if first_prompt is None else first_prompt
        budget = max_tokens_per_turn
        if max_response_tokens is not None:
            budget = min(budget, max_response_tokens - (len(prompt) - first_prompt) - _FOOTER_MARGIN)
            if budget < 1:
                _end_for_budget(ep)
                return ep
        try:
            token_ids, logprobs = await generate(list(prompt), stop, budget)
            action = Action(
                renderer.tokenizer.decode(token_ids, skip_special_tokens=True),
                token_ids=list(token_ids),
                logprobs=None if logprobs is None else [float(x) for x in logprobs],
                prompt_ids=list(prompt),
            )
        except Exception as exc:  # the model server failed: not the agent's doing
            action = Action("", meta={"infra_error": f"{type(exc).__name__}: {exc}"})
        n = len(ep.turns)
        turn, ended = await _call(record_turn, ep, env, action, prev_key, node=n, parent=n - 1)
        if ended:
            return ep
        prev_key = turn.state_key


def _end_for_budget(ep: Episode) -> None:
    if not ep.turns:  # the first prompt alone fills the budget: nothing was played
        ep.outcome = {"reward": 0.0, "success": False, "reason": "response_budget"}
        return
    ep.turns[-1].truncated = True
    ep.outcome = {"reward": ep.total_reward, "success": False, "reason": "response_budget"}


@dataclass
class EpisodeSequence:
    """One episode as an engine's (prompt, response) pair.

    Attributes:
        prompt_ids: everything before the first action (system prompt, task, assistant header).
        response_ids: the rest: actions (generated ids verbatim) and observations.
        response_mask: 1 on generated tokens, 0 on observation/template tokens.
        response_logprobs: sampling log-prob of each generated token, 0.0 elsewhere.
        turn_spans: per turn, in turn order, ``(start, end)`` of its action in ``response_ids``.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    turn_spans: list[tuple[int, int]]


def episode_sequence(episode: Episode, renderer: ChatRenderer, *, max_response_tokens: int | None = None) -> EpisodeSequence:
    """Render ``episode`` once and split it at its first action.

    Checks that every turn's recorded prompt is a prefix of the rendered sequence: the ids the
    model was conditioned on are the ids training sees (a template that rewrites history, or a
    different tokenizer, is refused here instead of training on sequences never sampled).
    ``max_response_tokens`` cuts the response (and the spans) to the engine's budget.
    """
    sample = render_episode(episode, renderer)
    spans = [sample.turn_spans[t.index] for t in episode.turns]
    for turn, (start, _) in zip(episode.turns, spans):
        if turn.prompt_ids is not None and sample.input_ids[:start] != list(turn.prompt_ids):
            raise RenderError(
                f"turn {turn.index} of {episode.episode_id!r}: the rendered episode does not extend the prompt the "
                "model saw; use the tokenizer the episode was generated with and a prefix-stable chat template"
            )
    cut = spans[0][0]
    out = EpisodeSequence(
        prompt_ids=sample.input_ids[:cut],
        response_ids=sample.input_ids[cut:],
        response_mask=sample.loss_mask[cut:],
        response_logprobs=sample.logprobs[cut:],
        turn_spans=[(a - cut, b - cut) for a, b in spans],
    )
    if max_response_tokens is not None and len(out.response_ids) > max_response_tokens:
        m = max_response_tokens
        out.response_ids, out.response_mask = out.response_ids[:m], out.response_mask[:m]
        out.response_logprobs = out.response_logprobs[:m]
        out.turn_spans = [(min(a, m), min(b, m)) for a, b in out.turn_spans]
    return out


@dataclass
class CreditSettings:
    """What turngym's trainer reads beside the episodes when it computes advantages.

    The defaults are ``turngym train``'s, so an engine's advantages equal the built-in
    trainer's on the same episodes.

    Attributes:
        reward_weights: per-signal shaping weights overriding the env spec's (``{"progress": 0.5}``).
        shaping_cap: bound on an episode's cumulative shaping.
        process_weights: weights of the ``process`` column (PAPO); ``None`` = the env spec's.
        model: the policy, for providers that score with it (``info_gain``: IGPO). An engine
            whose advantage step has no model at hand (verl's driver) leaves it ``None``, and an
            estimator that needs it fails saying so.
        tokenizer: the policy's tokenizer (with ``model``).
    """

    reward_weights: Mapping[str, float] = field(default_factory=dict)
    shaping_cap: float = 0.5
    process_weights: Mapping[str, float] | None = None
    model: Any = None
    tokenizer: Any = None


class _ProviderHost:
    """Stands where turngym's providers expect the trainer: hands out only what the engine gave.

    A provider that reads something the engine cannot supply (the policy, on verl's driver)
    gets a :class:`ConfigError` naming the estimator, the missing piece and the way out,
    instead of an ``AttributeError`` deep inside the provider.
    """

    def __init__(self, algo: str, engine: str, **available: Any) -> None:
        self._algo, self._engine = algo, engine
        self._available = {k: v for k, v in available.items() if v is not None}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._available[name]
        except KeyError:
            raise ConfigError(
                f"estimator {self._algo!r} declares inputs whose provider needs the trainer's {name!r}, which "
                f"{self._engine} does not hand to turngym's advantage step; use an estimator without such inputs, "
                f"train it with turngym's own trainer, or fill the column yourself with "
                f"turngym.trainers.providers.register_provider"
            ) from None


def _spec(env_id: str) -> Any:
    from turngym.core.registry import env_info, load_entry_point

    try:
        return load_entry_point(env_info(env_id).entry_point).reward_spec
    except Exception as exc:
        raise ConfigError(
            f"cannot shape the rewards of {env_id!r} like turngym's trainer: its reward spec is not available here "
            f"({type(exc).__name__}: {exc}); register the env in this process (turngym.register)"
        ) from None


def turn_advantages(
    name: str,
    episodes: Sequence[Episode],
    *,
    credit: CreditSettings | None = None,
    engine: str = "this engine",
    **params: Any,
) -> list[np.ndarray]:
    """Per episode, one advantage per turn, as turngym's trainer computes them.

    The trainer's steps, in its order: shape each episode's rewards with its env's reward spec
    (``credit``: weights and cap), build the rollout turn table on them, fill the columns the
    estimator declares that the table lacks through turngym's providers, and run
    ``compute_advantages`` with ``params``. ``engine`` names the caller in errors.

    Episodes that ended in an infrastructure error (or have no turns) are left out of the table,
    so they never move a group's baseline, and get all-zero advantages (they are never scored).
    """
    from turngym.rewards import RewardShaper
    from turngym.rollout.table import to_turn_table
    from turngym.trainers.advantages import compute_advantages
    from turngym.trainers.providers import fill_inputs

    credit = credit if credit is not None else CreditSettings()
    keep = [i for i, ep in enumerate(episodes) if ep.turns and not ep.infra_error]
    out = [np.zeros(len(ep.turns)) for ep in episodes]
    if not keep:
        return out
    kept = [episodes[i] for i in keep]
    specs = {env_id: _spec(env_id) for env_id in dict.fromkeys(ep.env_id for ep in kept)}
    shapers = {
        env_id: RewardShaper(spec, gamma=1.0, weights=dict(credit.reward_weights), cap=credit.shaping_cap)
        for env_id, spec in specs.items()
    }
    table = to_turn_table(kept, rewards=[shapers[ep.env_id].shape_episode(ep).total for ep in kept])
    process_shaper = None
    if len(specs) == 1:  # the process column is per env; a mixed batch has no single one
        (spec,) = specs.values()
        process_shaper = RewardShaper(spec, gamma=1.0, weights=dict(credit.process_weights or {}), cap=credit.shaping_cap)
    host = _ProviderHost(name, engine, model=credit.model, tokenizer=credit.tokenizer, process_shaper=process_shaper)
    model = credit.model
    was_training = getattr(model, "training", None)
    try:
        fill_inputs(name, kept, table, host)
    finally:  # a provider may switch the policy to eval mode; the engine reads the mode it left
        if was_training is not None:
            model.train(was_training)
    adv = compute_advantages(name, table, **params)
    row = 0
    for i in keep:
        n = len(episodes[i].turns)
        out[i] = np.asarray(adv[row : row + n], dtype=np.float64)
        row += n
    return out


def sequence_advantages(
    turn_adv: Sequence[float], turn_spans: Sequence[tuple[int, int]], length: int, offset: int = 0
) -> np.ndarray:
    """Token advantages of a sequence of ``length``: each turn's value on its action span, 0 elsewhere.

    The same rule as :func:`turngym.trainers.batch.token_advantages` (which the trainer uses on
    whole rendered episodes); ``offset`` shifts spans given in another coordinate (an engine's
    response, which starts after the prompt).
    """
    from turngym.trainers.batch import token_advantages

    spans = {t: (max(0, a - offset), max(0, b - offset)) for t, (a, b) in enumerate(turn_spans)}
    sample = SimpleNamespace(input_ids=range(length), turn_spans=spans, episode_id="")
    return np.asarray(token_advantages(sample, list(turn_adv)), dtype=np.float64)


_HEAVY = ("token_ids", "logprobs", "prompt_ids")


def episode_to_json(episode: Episode) -> str:
    """The episode without its token fields (they travel as the engine's tensors), as JSON.

    Engines move per-sample extras between processes as opaque objects; a JSON string survives
    any of their batching, padding-free concatenation and serialization unchanged.
    """
    data = episode.to_dict()
    for t in data["turns"]:
        for k in _HEAVY:
            t[k] = None
    return json.dumps(data, ensure_ascii=False)


def episode_from_json(text: str) -> Episode:
    return Episode.from_dict(json.loads(text))

