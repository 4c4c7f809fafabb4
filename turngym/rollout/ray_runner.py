"""Lockstep rollouts whose envs live in Ray actors (``pip install 'turngym[ray]'``).

The policy stays in the driver (one batched ``policy.act`` per turn, as in
:func:`~turngym.rollout.run_episodes`); the envs are spread over ``num_workers`` Ray actors,
and each turn's steps go to every actor at once, so env time is paid in parallel across
cores and machines. The episodes are exactly those :func:`~turngym.rollout.run_episodes`
plays for the same seeds and policy: the same slots start the same seeds in the same order,
and privileged agents (oracle, random) reach the actor-side envs through proxies, the
random agent's generator included.

A dead actor (a node lost) is an infrastructure error, not a crash: its in-flight episodes
end with ``info["infra_error"]``, its later episodes are recorded unscored with
``meta["infra_error"]``, and the other actors carry on.

>>> import ray  # doctest: +SKIP
>>> from turngym.agents import OracleAgent  # doctest: +SKIP
>>> eps = run_episodes_ray("turngym/Math-v0", OracleAgent(), range(64), num_workers=4)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from turngym.agents.base import Policy
from turngym.core.errors import ConfigError, InfraError
from turngym.rollout.runner import agent_input, new_episode, record_turn, task_gold, unscored_episode
from turngym.rollout.types import Episode

__all__ = ["EnvWorker", "ActorEnv", "run_episodes_ray"]


class EnvWorker:
    """Holds ``n_slots`` envs of one id inside a Ray actor; every method is one remote call."""

    def __init__(self, env_id: str, n_slots: int, env_kwargs: Mapping[str, Any] | None = None) -> None:
        import turngym

        self.envs = [turngym.make(env_id, **dict(env_kwargs or {})) for _ in range(n_slots)]

    def describe(self) -> dict[str, Any]:
        env = self.envs[0]
        return {
            "system_prompt": env.system_prompt,
            "stop_strings": tuple(getattr(env, "stop_strings", ())),
            "max_turns": env.max_turns,
            "reward_spec": env.reward_spec,
        }

    def reset(self, slot: int, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any], str | None]:
        obs, info = self.envs[slot].reset(seed=seed, options=options)
        return obs, info, task_gold(self.envs[slot])  # the gold travels with the episode, as in run_episodes

    def step_many(self, items: Sequence[tuple[int, str]]) -> list[tuple[str, float, bool, bool, dict[str, Any]]]:
        return [self.envs[slot].step(action) for slot, action in items]

    def oracle_action(self, slot: int) -> str:
        return self.envs[slot].oracle_action()

    def sample_action(self, slot: int, rng: np.random.Generator) -> tuple[str, dict[str, Any]]:
        action = self.envs[slot].sample_action(rng)
        return action, rng.bit_generator.state

    def close(self) -> None:
        for env in self.envs:
            env.close()


class ActorEnv:
    """What a privileged agent sees as ``AgentInput.env``: a proxy to one env in an actor."""

    def __init__(self, worker: Any, slot: int, describe: Mapping[str, Any]) -> None:
        self.worker = worker
        self.slot = slot
        self.system_prompt: str = describe["system_prompt"]
        self.stop_strings: tuple[str, ...] = tuple(describe.get("stop_strings", ()))
        self.max_turns: int = describe["max_turns"]
        self.reward_spec = describe["reward_spec"]
        self.dead: str | None = None

    @property
    def unwrapped(self) -> ActorEnv:
        return self

    def oracle_action(self) -> str:
        import ray

        if self.dead:
            return ""  # the actor is gone: the step that follows reports the infra error
        try:
            return ray.get(self.worker.oracle_action.remote(self.slot))
        except ray.exceptions.RayActorError as exc:
            self.dead = f"env worker died: {exc}"
            return ""

    def sample_action(self, rng: np.random.Generator) -> str:
        import ray

        if self.dead:
            return ""
        try:
            action, state = ray.get(self.worker.sample_action.remote(self.slot, rng))
        except ray.exceptions.RayActorError as exc:
            self.dead = f"env worker died: {exc}"
            return ""
        rng.bit_generator.state = state  # advance the caller's generator exactly as locally
        return action


class _Stepped:
    """An env stand-in whose ``step`` returns a result the actor already computed."""

    def __init__(self, result: tuple[str, float, bool, bool, dict[str, Any]]) -> None:
        self.result = result

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self.result


def _infra_step(why: str, turn: int, zeros: dict[str, float]) -> tuple[str, float, bool, bool, dict[str, Any]]:
    info = {
        "turn": turn, "signals": dict(zeros), "state_key": "", "action_valid": True, "invalid_reason": None,
        "infra_error": why, "outcome": {"reward": 0.0, "success": False, "reason": "infra_error"},
    }
    return f"[environment infrastructure error: {why}]", 0.0, True, False, info


def _alive(proxies: Sequence[ActorEnv], num_workers: int) -> list[bool]:
    return [not proxies[w].dead for w in range(num_workers)]


def run_episodes_ray(
    env_id: str,
    policy: Policy,
    seeds: Sequence[int],
    *,
    num_workers: int = 2,
    batch_size: int = 32,
    env_kwargs: Mapping[str, Any] | None = None,
    tasks: Sequence[Any] | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    worker_options: Mapping[str, Any] | None = None,
) -> list[Episode]:
    """Play one episode per seed with envs in ``num_workers`` Ray actors (see the module docstring).

    Args:
        env_id: a registered id (built inside each actor with ``turngym.make``).
        policy: any :class:`~turngym.agents.base.Policy`; it runs in this process.
        seeds: one reset seed per episode; same seeds + same policy ⇒ the same episodes as
            :func:`~turngym.rollout.run_episodes`.
        num_workers: env actors; slot ``s`` lives on actor ``s % num_workers``.
        batch_size: envs in lockstep (as in ``run_episodes``).
        env_kwargs: constructor overrides for every env.
        tasks: optional task (or task id) per episode.
        on_episode: called as each episode finishes.
        worker_options: Ray actor options (``num_cpus``, ``resources``, ``runtime_env``…).

    Ray is initialised locally when no cluster is connected (``ray.init()`` first to join one).
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("run_episodes_ray needs Ray: pip install 'turngym[ray]'") from None
    if tasks is not None and len(tasks) != len(seeds):
        raise ConfigError(f"got {len(tasks)} tasks for {len(seeds)} seeds")
    if num_workers < 1 or batch_size < 1:
        raise ConfigError("num_workers and batch_size must be >= 1")
    if not seeds:
        return []
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)

    n_slots = min(batch_size, len(seeds))
    num_workers = min(num_workers, n_slots)
    actor_cls = ray.remote(**{"num_cpus": 0.5, **dict(worker_options or {})})(EnvWorker)
    counts = [len(range(w, n_slots, num_workers)) for w in range(num_workers)]
    workers = [actor_cls.remote(env_id, counts[w], env_kwargs) for w in range(num_workers)]
    describe = ray.get(workers[0].describe.remote())
    zeros = describe["reward_spec"].zeros()
    proxies = [ActorEnv(workers[s % num_workers], s // num_workers, describe) for s in range(n_slots)]
    results: list[Episode | None] = [None] * len(seeds)
    next_i = 0
    active: dict[int, tuple[int, ActorEnv, Episode, str, int]] = {}

    def finish(ep: Episode, i: int) -> None:
        results[i] = ep
        if on_episode is not None:
            on_episode(ep)

    prefix = env_id or "episode"
    node_counter: dict[str, int] = {}

    def start(slot: int) -> None:
        nonlocal next_i
        proxy = proxies[slot]
        while next_i < len(seeds):
            i = next_i
            next_i += 1
            options = {"task": tasks[i]} if tasks is not None else None
            try:
                if proxy.dead:
                    raise InfraError(proxy.dead)
                obs, info, gold = ray.get(proxy.worker.reset.remote(proxy.slot, seeds[i], options))
            except (InfraError, ray.exceptions.RayActorError) as exc:
                proxy.dead = proxy.dead or f"env worker died: {exc}"
                finish(unscored_episode(f"{prefix}/{seeds[i]}", 0, env_id, seeds[i], proxy.dead), i)
                continue
            # ids and groups exactly as run_episodes names them (group_size=1)
            group = f"{prefix}/{seeds[i]}" if tasks is None else f"{prefix}/{seeds[i]}/{info.get('task_id', i)}"
            ep = new_episode(proxy, obs, info, episode_id=f"{group}/0", env_id=env_id, seed=seeds[i], group=group, gold=gold)
            active[slot] = (i, proxy, ep, info["state_key"], -1)
            return

    try:
        for slot in range(n_slots):
            start(slot)
        while active:
            slots = list(active)
            actions = policy.act([agent_input(active[s][2], active[s][1], None) for s in slots])
            # dispatch: one step_many per actor, all in flight at once
            by_worker: dict[int, list[int]] = {}
            for slot in slots:
                by_worker.setdefault(slot % num_workers, []).append(slot)
            text = {slot: a.text for slot, a in zip(slots, actions, strict=True)}
            refs = {
                w: workers[w].step_many.remote([(proxies[s].slot, text[s]) for s in ss])
                for w, ss in by_worker.items()
                if not proxies[ss[0]].dead
            }
            stepped: dict[int, tuple[str, float, bool, bool, dict[str, Any]]] = {}
            for w, ss in by_worker.items():
                try:
                    if w not in refs:
                        raise InfraError(proxies[ss[0]].dead or "env worker died")
                    outs = ray.get(refs[w])
                except (InfraError, ray.exceptions.RayActorError) as exc:
                    why = proxies[ss[0]].dead or f"env worker died: {exc}"
                    for s in ss:
                        proxies[s].dead = why
                    outs = [_infra_step(why, len(active[s][2].turns) + 1, zeros) for s in ss]
                stepped.update(zip(ss, outs))
            for slot, action in zip(slots, actions, strict=True):
                i, proxy, ep, prev_key, parent = active[slot]
                node = node_counter.get(ep.group, 0)
                node_counter[ep.group] = node + 1
                turn, ended = record_turn(ep, _Stepped(stepped[slot]), action, prev_key, node=node, parent=parent)
                if ended:
                    del active[slot]
                    finish(ep, i)
                    start(slot)
                else:
                    active[slot] = (i, proxy, ep, turn.state_key, node)
    finally:
        closing = [w.close.remote() for w, alive in zip(workers, _alive(proxies, num_workers)) if alive]
        try:
            ray.get(closing, timeout=30)
        except (ray.exceptions.RayError, TimeoutError):  # best effort; the kill below frees them
            pass
        for w in workers:
            ray.kill(w)
    return [ep for ep in results if ep is not None]
