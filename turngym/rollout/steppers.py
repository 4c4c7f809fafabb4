"""Where a lockstep rollout's envs live: in this process, in Ray actors, or on an env server.

:func:`~turngym.rollout.run_episodes` and :func:`~turngym.rollout.run_tree` own the schedule
(which seed starts in which slot, one batched ``policy.act`` per turn, groups, node ids, what an
infrastructure failure does to an episode). A :class:`Stepper` only owns a fixed number of env
*slots* and answers reset/step/snapshot/restore for them, so the same seeds and policy give the
same episodes on every stepper, and a new place to run envs is one small class.

* :class:`LocalStepper` — envs built by a factory in this process (any gymnasium-style env,
  including ``turngym.make(id, remote=url)`` ones). Passing a plain factory to the runners
  means this stepper.
* :class:`RemoteStepper` — envs on a turngym env server; each turn's steps go out together,
  so env time on the server is paid in parallel.
* :class:`~turngym.rollout.ray_stepper.RayStepper` — envs in Ray actors (``turngym[ray]``).

Contract: :meth:`Stepper.reset` raises :class:`~turngym.core.errors.InfraError` when the env's
infrastructure is gone. If :meth:`Stepper.alive` then says the slot is gone for good (a dead Ray
actor), the runner retires the slot and hands its episode back to the queue for a live slot;
otherwise it records an unscored episode and goes on. :meth:`Stepper.step` never
raises for one, it returns :func:`~turngym.core.infra.infra_step` for that slot instead.
:meth:`Stepper.step` does not raise for an env *bug* either: an exception out of one env's
``step`` ends that episode as an infra error with the traceback in
``info["infra_traceback"]`` (:func:`~turngym.core.infra.guarded_step`), the other slots'
steps go on. An action can never take a batch down, and an env bug is never the agent's
failure.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

from turngym.core.errors import ConfigError
from turngym.core.infra import env_bug_step, guarded_step

__all__ = ["LocalStepper", "RemoteStepper", "StepResult", "Stepper", "as_stepper", "task_gold"]

#: What ``env.step`` returns: ``(obs, reward, terminated, truncated, info)``.
StepResult = tuple[str, float, bool, bool, dict[str, Any]]


def task_gold(env: Any) -> str | None:
    """The gold answer of the task ``env`` was just reset to, as text (None if it has none).

    Structured golds are written with tuples as lists, so the text is the same whether the task
    was built here or came over a wire (JSON has no tuples): episodes match on every stepper.
    """
    gold = getattr(getattr(getattr(env, "unwrapped", env), "task", None), "gold", None)
    return None if gold is None else str(_lists(gold))


def _lists(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value


class Stepper(abc.ABC):
    """A fixed set of env slots that a runner resets and steps (see the module docstring)."""

    @abc.abstractmethod
    def open(self, n_slots: int) -> None:
        """Make ``n_slots`` envs ready (called once, before anything else)."""

    @abc.abstractmethod
    def env(self, slot: int) -> Any:
        """What policies see as ``AgentInput.env`` for ``slot``: the env or a proxy to it.

        It has ``system_prompt`` and ``stop_strings``, and privileged agents call its
        ``oracle_action()``/``sample_action(rng)``.
        """

    @abc.abstractmethod
    def reset(self, slot: int, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any], str | None]:
        """Reset ``slot``: ``(obs, info, gold answer or None)``; raises ``InfraError`` if it cannot."""

    @abc.abstractmethod
    def step(self, actions: Sequence[tuple[int, str]]) -> list[StepResult]:
        """Step each ``(slot, action)``; one result per item, in order (infra failures as infra steps)."""

    def alive(self, slot: int) -> bool:
        """False once ``slot``'s envs are gone for good (its Ray actor died): the runner retires it.

        A slot whose reset failed but that may serve again (an env server restarting) stays alive.
        """
        return True

    def snapshot(self, slot: int) -> Any:
        """The env state of ``slot`` (tree rollouts), restorable with :meth:`restore`."""
        raise NotImplementedError(f"{type(self).__name__} does not support snapshots (tree rollouts)")

    def restore(self, slot: int, snap: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support snapshots (tree rollouts)")

    @abc.abstractmethod
    def close(self) -> None:
        """Release every env (called once, also after an error)."""


class LocalStepper(Stepper):
    """Envs built by ``make_env`` in this process, stepped one after another."""

    def __init__(self, make_env: Callable[[], Any]) -> None:
        self.make_env = make_env
        self.envs: list[Any] = []

    def open(self, n_slots: int) -> None:
        self.envs = [self.make_env() for _ in range(n_slots)]

    def env(self, slot: int) -> Any:
        return self.envs[slot]

    def reset(self, slot: int, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any], str | None]:
        env = self.envs[slot]
        obs, info = env.reset(seed=seed, options=options)
        return obs, info, task_gold(env)

    def step(self, actions: Sequence[tuple[int, str]]) -> list[StepResult]:
        return [guarded_step(self.envs[slot], action) for slot, action in actions]

    def snapshot(self, slot: int) -> Any:
        return self.envs[slot].snapshot()

    def restore(self, slot: int, snap: Any) -> None:
        self.envs[slot].restore(snap)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class RemoteStepper(LocalStepper):
    """Envs on a turngym env server (``turngym serve``), one session per slot.

    Args:
        url: the server, ``ws://host:port``.
        env_id: a registered id the server serves.
        **kwargs: client options (``retries``, ``token``…) and env constructor overrides, as
            for ``turngym.make(env_id, remote=url, **kwargs)``.

    Each turn's steps are sent together, so the server steps the envs of a turn in parallel
    instead of one round trip after another. An env that raised on the server (its client
    raises :class:`~turngym.server.errors.RemoteEnvError`) ends that episode as an infra
    error, as in-process; the other slots' steps go on.
    """

    def __init__(self, url: str, env_id: str, **kwargs: Any) -> None:
        from turngym.server.client import RemoteEnv  # needs the server extra only when used

        super().__init__(lambda: RemoteEnv(url, env_id, **kwargs))
        self.url = url
        self.env_id = env_id

    def step(self, actions: Sequence[tuple[int, str]]) -> list[StepResult]:
        from turngym.server.client import step_together

        envs = [self.envs[slot] for slot, _ in actions]
        results = step_together([(env, action) for env, (_, action) in zip(envs, actions, strict=True)], return_exceptions=True)
        out: list[StepResult] = []
        for env, result in zip(envs, results, strict=True):
            if isinstance(result, BaseException):  # the env raised on the server (an env bug)
                if not isinstance(result, Exception):
                    raise result
                result = env_bug_step(result, turn=env.turn + 1, state_key="", signals=env.reward_spec.zeros())
            out.append(result)
        return out


def as_stepper(envs: Stepper | Callable[[], Any]) -> Stepper:
    """``envs`` itself when it is a :class:`Stepper`, else a :class:`LocalStepper` over the factory."""
    if isinstance(envs, Stepper):
        return envs
    if not callable(envs):
        raise ConfigError(
            f"expected an env factory (e.g. lambda: turngym.make(env_id)) or a Stepper, got {type(envs).__name__}"
        )
    return LocalStepper(envs)
