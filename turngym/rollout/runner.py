"""Run many episodes in lockstep: one policy call per turn for every active env.

Batching every active env's prompt into one ``policy.act`` call is what makes model rollouts
fast (one batched generation per turn instead of one per env). Scripted agents go through the
same path, so what is measured with them is what runs with models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from turngym.agents.base import AgentInput, Policy
from turngym.core.errors import InfraError
from turngym.rollout.types import Episode, Turn

__all__ = ["run_episodes"]


def run_episodes(
    make_env: Callable[[], Any],
    policy: Policy,
    seeds: Sequence[int],
    *,
    batch_size: int = 32,
    env_id: str = "",
    tasks: Sequence[Any] | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """Play one episode per seed with ``policy``, ``batch_size`` envs in lockstep.

    Args:
        make_env: builds a fresh env (called ``min(batch_size, len(seeds))`` times; envs are reused).
        policy: any :class:`~turngym.agents.base.Policy`.
        seeds: one reset seed per episode; same seeds + same policy ⇒ same episodes.
        tasks: optional task (or task id) per episode, passed as ``options={"task": ...}``.
        on_episode: called as each episode finishes (progress bars, streaming writers).

    An env whose ``reset`` raises :class:`~turngym.core.errors.InfraError` (a remote env whose
    server is down) yields an unscored episode with ``meta["infra_error"]`` and the rollout
    goes on; infra errors during a step arrive as ``info["infra_error"]`` like any other.
    """
    if tasks is not None and len(tasks) != len(seeds):
        raise ValueError(f"got {len(tasks)} tasks for {len(seeds)} seeds")
    envs = [make_env() for _ in range(min(batch_size, len(seeds)))]
    results: list[Episode | None] = [None] * len(seeds)
    next_i = 0
    active: dict[int, tuple[int, Any, Episode, list[dict[str, str]], str]] = {}

    def start(slot: int) -> None:
        nonlocal next_i
        while next_i < len(seeds):
            i = next_i
            next_i += 1
            env = envs[slot]
            options = {"task": tasks[i]} if tasks is not None else None
            try:
                obs, info = env.reset(seed=seeds[i], options=options)
            except InfraError as exc:  # e.g. a remote env's server is gone: record it, go on
                ep = Episode(f"{env_id or type(getattr(env, 'unwrapped', env)).__name__}/{seeds[i]}/{i}", env_id, "", seeds[i], "")
                ep.outcome = {"reward": 0.0, "success": False, "reason": "infra_error"}
                ep.meta["infra_error"] = str(exc)
                results[i] = ep
                if on_episode is not None:
                    on_episode(ep)
                continue
            begin(slot, i, env, obs, info)
            return

    def begin(slot: int, i: int, env: Any, obs: str, info: dict[str, Any]) -> None:
        raw = getattr(env, "unwrapped", env)
        system = getattr(raw, "system_prompt", "")
        ep = Episode(
            episode_id=f"{env_id or type(raw).__name__}/{seeds[i]}/{i}",
            env_id=env_id,
            task_id=info.get("task_id", ""),
            seed=seeds[i],
            initial_observation=obs,
            system_prompt=system,
        )
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": obs}]
        active[slot] = (i, env, ep, msgs, info["state_key"])

    for slot in range(len(envs)):
        start(slot)
    while active:
        slots = list(active)
        batch = [AgentInput(messages=active[s][3], env=active[s][1], episode_id=active[s][2].episode_id) for s in slots]
        actions = policy.act(batch)
        for slot, action in zip(slots, actions, strict=True):
            i, env, ep, msgs, prev_key = active[slot]
            obs, reward, term, trunc, info = env.step(action.text)
            ep.turns.append(
                Turn(
                    index=len(ep.turns),
                    action=action.text,
                    observation=obs,
                    reward=reward,
                    terminated=term,
                    truncated=trunc,
                    signals=info["signals"],
                    state_key=info["state_key"],
                    prev_state_key=prev_key,
                    action_valid=info["action_valid"],
                    invalid_reason=info["invalid_reason"],
                    infra_error=info["infra_error"],
                    token_ids=action.token_ids,
                    logprobs=action.logprobs,
                    prompt_ids=action.prompt_ids,
                )
            )
            if term or trunc:
                ep.outcome = info.get("outcome", {})
                results[i] = ep
                del active[slot]
                if on_episode is not None:
                    on_episode(ep)
                start(slot)
            else:
                msgs.append({"role": "assistant", "content": action.text})
                msgs.append({"role": "user", "content": obs})
                active[slot] = (i, env, ep, msgs, info["state_key"])
    for env in envs:
        env.close()
    return [ep for ep in results if ep is not None]
