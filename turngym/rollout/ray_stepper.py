"""A stepper whose envs live in Ray actors (``pip install 'turngym[ray]'``).

The policy stays in the driver (one batched ``policy.act`` per turn, in
:func:`~turngym.rollout.run_episodes`); the envs are spread over ``num_workers`` Ray actors,
and each turn's steps go to every actor at once, so env time is paid in parallel across
cores and machines. The schedule is ``run_episodes``' own, so the episodes (groups included)
are exactly those of an in-process rollout for the same seeds and policy; privileged agents
(oracle, random) reach the actor-side envs through :class:`ActorEnv` proxies, the random
agent's generator included.

A dead actor (a node lost) is an infrastructure error, not a crash: its in-flight episodes
end with ``info["infra_error"]``, its slots are retired (:meth:`RayStepper.alive`), and the
episodes queued behind them go to the live actors' slots, so a lost node costs only what it was
playing. Every remote call has a deadline (``call_timeout_s``): an actor that does not answer in
time (a hung node, a stopped process) is killed and counted dead like one that crashed, so a
lockstep turn never waits longer than that. An env that raises in ``step`` (an
env bug) is caught inside the actor (:func:`~turngym.core.infra.guarded_step`): that episode
ends as an infra error with its traceback, the actor's other slots step on.

>>> import ray  # doctest: +SKIP
>>> from turngym.agents import OracleAgent  # doctest: +SKIP
>>> eps = run_episodes(RayStepper("turngym/Math-v0", num_workers=4), OracleAgent(), range(64), group_size=4)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from turngym.core.env import env_action_choices
from turngym.core.errors import ConfigError, InfraError
from turngym.core.infra import guarded_step, infra_step
from turngym.rollout.steppers import Stepper, StepResult, task_gold

__all__ = ["ActorEnv", "EnvWorker", "RayStepper"]

Choices = tuple[str, ...] | None
"""An env's valid actions in its current state (``env.action_choices()``), None where it cannot list them."""


def _build(env: str | Callable[[], Any], env_kwargs: Mapping[str, Any] | None) -> Any:
    if isinstance(env, str):
        import turngym

        return turngym.make(env, **dict(env_kwargs or {}))
    return env()


def _get(ref: Any, timeout: float | None) -> Any:
    """``ray.get`` with a deadline, raising what the env raised (an env's ``InfraError`` is the env's,
    not Ray's); a call past its deadline raises ``GetTimeoutError``."""
    import ray

    try:
        return ray.get(ref, timeout=timeout)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, Exception):
            raise exc.cause from None
        raise


class EnvWorker:
    """Holds ``n_slots`` envs inside a Ray actor; every method is one remote call."""

    def __init__(self, env: str | Callable[[], Any], n_slots: int, env_kwargs: Mapping[str, Any] | None = None) -> None:
        self.envs = [_build(env, env_kwargs) for _ in range(n_slots)]

    def describe(self) -> dict[str, Any]:
        env = getattr(self.envs[0], "unwrapped", self.envs[0])
        return {
            "system_prompt": getattr(env, "system_prompt", ""),
            "stop_strings": tuple(getattr(env, "stop_strings", ())),
            "max_new_tokens": getattr(env, "max_new_tokens", None),
            "action_prefix": getattr(env, "action_prefix", ""),
            "max_turns": env.max_turns,
            "reward_spec": env.reward_spec,
        }

    def reset(self, slot: int, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any], str | None, Choices]:
        obs, info = self.envs[slot].reset(seed=seed, options=options)
        return obs, info, task_gold(self.envs[slot]), self._choices(slot)

    def step_many(self, items: Sequence[tuple[int, str]]) -> list[tuple[StepResult, Choices]]:
        # guarded: one env's bug is that episode's infra error, not the loss of every slot of this actor
        return [(guarded_step(self.envs[slot], action), self._choices(slot)) for slot, action in items]

    def snapshot(self, slot: int) -> Any:
        return self.envs[slot].snapshot()

    def restore(self, slot: int, snap: Any) -> Choices:
        self.envs[slot].restore(snap)
        return self._choices(slot)

    def _choices(self, slot: int) -> Choices:
        """The env's valid actions now, computed where the env lives and sent with the reply that
        changed them (no extra round trip per turn)."""
        return env_action_choices(self.envs[slot])

    def oracle_action(self, slot: int) -> str:
        return self.envs[slot].oracle_action()

    def sample_action(self, slot: int, rng: np.random.Generator) -> tuple[str, dict[str, Any]]:
        action = self.envs[slot].sample_action(rng)
        return action, rng.bit_generator.state

    def close(self) -> None:
        for env in self.envs:
            env.close()


class ActorEnv:
    """What a policy sees as ``AgentInput.env``: a proxy to one env in an actor."""

    def __init__(self, worker: Any, slot: int, describe: Mapping[str, Any], timeout: float | None = None) -> None:
        self.worker = worker
        self.slot = slot
        self.timeout = timeout
        self.system_prompt: str = describe["system_prompt"]
        self.stop_strings: tuple[str, ...] = tuple(describe.get("stop_strings", ()))
        self.max_new_tokens: int | None = describe.get("max_new_tokens")
        self.action_prefix: str = describe.get("action_prefix", "")
        self.max_turns: int = describe["max_turns"]
        self.reward_spec = describe["reward_spec"]
        self.dead: str | None = None
        self.turn = 0  # of the env's current episode, for the infra step of a dead actor
        self.choices: Choices = None

    def action_choices(self) -> Choices:
        """The env's valid actions in its current state (as the actor last reported them), or None."""
        return self.choices

    @property
    def unwrapped(self) -> ActorEnv:
        return self

    def call(self, method: str, *args: Any) -> Any:
        """``worker.method(*args)``; a dead or unanswering actor raises :class:`InfraError` (and stays dead)."""
        import ray

        if self.dead:
            raise InfraError(self.dead)
        try:
            return _get(getattr(self.worker, method).remote(*args), self.timeout)
        except ray.exceptions.RayActorError as exc:
            self.dead = f"env worker died: {exc}"
        except ray.exceptions.GetTimeoutError:
            self.dead = f"env worker did not answer {method} within {self.timeout:g} s (killed)"
            ray.kill(self.worker, no_restart=True)
        raise InfraError(self.dead)

    def oracle_action(self) -> str:
        try:
            return self.call("oracle_action", self.slot)
        except InfraError:
            return ""  # the actor is gone: the step that follows reports the infra error

    def sample_action(self, rng: np.random.Generator) -> str:
        try:
            action, state = self.call("sample_action", self.slot, rng)
        except InfraError:
            return ""
        rng.bit_generator.state = state  # advance the caller's generator exactly as locally
        return action


class RayStepper(Stepper):
    """Env slots spread over ``num_workers`` Ray actors (slot ``s`` on actor ``s % num_workers``).

    Args:
        env: a registered id (built in each actor with ``turngym.make(env, **env_kwargs)``) or a
            picklable env factory.
        num_workers: env actors (at most one per slot).
        env_kwargs: constructor overrides when ``env`` is an id.
        worker_options: Ray actor options (``num_cpus``, ``resources``, ``runtime_env``…).
        call_timeout_s: deadline of every remote call (a reset, one turn's steps on an actor,
            a snapshot); an actor past it is killed and its slots retired. Size it above the
            slowest env step (SWE tests, MCP calls); None waits for Ray's failure detector.

    Ray is initialised locally when no cluster is connected (``ray.init()`` first to join one).
    """

    def __init__(
        self,
        env: str | Callable[[], Any],
        *,
        num_workers: int = 2,
        env_kwargs: Mapping[str, Any] | None = None,
        worker_options: Mapping[str, Any] | None = None,
        call_timeout_s: float | None = 300.0,
    ) -> None:
        if num_workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got {num_workers}")
        if call_timeout_s is not None and call_timeout_s <= 0:
            raise ConfigError(f"call_timeout_s must be > 0 (or None), got {call_timeout_s}")
        self.call_timeout_s = call_timeout_s
        if env_kwargs and not isinstance(env, str):
            raise ConfigError("env_kwargs apply to an env id; bind them into the factory instead")
        self.env_spec = env
        self.num_workers = num_workers
        self.env_kwargs = dict(env_kwargs or {})
        self.worker_options = dict(worker_options or {})
        self.workers: list[Any] = []
        self.proxies: list[ActorEnv] = []

    def open(self, n_slots: int) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("RayStepper needs Ray: pip install 'turngym[ray]'") from None
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        n = min(self.num_workers, n_slots)
        actor_cls = ray.remote(**{"num_cpus": 0.5, **self.worker_options})(EnvWorker)
        self.workers = [
            actor_cls.remote(self.env_spec, len(range(w, n_slots, n)), self.env_kwargs) for w in range(n)
        ]
        describe = _get(self.workers[0].describe.remote(), self.call_timeout_s)
        self.zeros = describe["reward_spec"].zeros()
        self.proxies = [ActorEnv(self.workers[s % n], s // n, describe, self.call_timeout_s) for s in range(n_slots)]

    def env(self, slot: int) -> ActorEnv:
        return self.proxies[slot]

    def alive(self, slot: int) -> bool:
        return not self.proxies[slot].dead

    def reset(self, slot: int, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any], str | None]:
        proxy = self.proxies[slot]
        proxy.choices = None
        obs, info, gold, proxy.choices = proxy.call("reset", proxy.slot, seed, options)
        proxy.turn = 0
        return obs, info, gold

    def step(self, actions: Sequence[tuple[int, str]]) -> list[StepResult]:
        import ray

        by_worker: dict[int, list[tuple[int, str]]] = {}
        for slot, action in actions:
            by_worker.setdefault(slot % len(self.workers), []).append((slot, action))
        refs = {  # one step_many per live actor, all in flight at once
            w: self.workers[w].step_many.remote([(self.proxies[s].slot, a) for s, a in items])
            for w, items in by_worker.items()
            if not self.proxies[items[0][0]].dead
        }
        out: dict[int, StepResult] = {}
        deadline = None if self.call_timeout_s is None else time.monotonic() + self.call_timeout_s
        for w, items in by_worker.items():
            slots = [s for s, _ in items]
            try:
                if w not in refs:
                    raise InfraError(self.proxies[slots[0]].dead or "env worker died")
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                results, choices = zip(*_get(refs[w], left), strict=True)
                for s, c in zip(slots, choices, strict=True):
                    self.proxies[s].choices = c
            except (InfraError, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
                why = self.proxies[slots[0]].dead or f"env worker died: {exc}"
                if isinstance(exc, ray.exceptions.GetTimeoutError):
                    why = f"env worker did not answer step within {self.call_timeout_s:g} s (killed)"
                    ray.kill(self.workers[w], no_restart=True)
                for p in self.proxies:  # every slot of that actor is gone, not only those stepped now
                    if p.worker is self.workers[w]:
                        p.dead = p.dead or why
                results = []
                for s in slots:
                    p = self.proxies[s]
                    p.choices = None
                    # the runner records the last state key it saw
                    results.append(infra_step(why, turn=p.turn + 1, state_key="", signals=self.zeros))
            for s, result in zip(slots, results, strict=True):
                self.proxies[s].turn = result[4]["turn"]
                out[s] = result
        return [out[slot] for slot, _ in actions]

    def snapshot(self, slot: int) -> Any:
        return self.proxies[slot].call("snapshot", self.proxies[slot].slot)

    def restore(self, slot: int, snap: Any) -> None:
        proxy = self.proxies[slot]
        proxy.choices = proxy.call("restore", proxy.slot, snap)
        proxy.turn = snap.turn

    def close(self) -> None:
        import ray

        alive = {id(p.worker): p.worker for p in self.proxies if not p.dead}
        try:
            ray.get([w.close.remote() for w in alive.values()], timeout=30)
        except (ray.exceptions.RayError, TimeoutError):  # best effort; the kill below frees them
            pass
        for w in self.workers:
            ray.kill(w)
