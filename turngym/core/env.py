"""The env base class every turngym environment derives from.

:class:`TurngymEnv` is a :class:`gymnasium.Env` whose observations and actions are text. It
owns what every family would otherwise re-implement, and get subtly wrong:

* the turn counter and ``max_turns`` truncation (``terminated`` and ``truncated`` are never both
  true: the task ending wins over the budget);
* the declared invalid-action policy (a malformed action is part of the episode, never an
  exception);
* the ``info`` contract: ``turn``, ``signals`` (every declared signal, every turn),
  ``state_key``, ``action_valid``, ``invalid_reason``, ``infra_error`` and, on the final turn,
  ``outcome``;
* task selection from the env's own seeded RNG or from ``options={"task": ...}``;
* exact ``snapshot()`` / ``restore()`` including the RNG, so branches from one turn continue
  identically.

* a fixed task pool (``tasks=``) with id lookup, and the task-type check on every reset (one
  error, :class:`~turngym.core.errors.TaskError`, whatever the family);
* the not-reset error (:class:`~turngym.core.errors.ResetNeeded`) for ``step`` and the oracle;
* the state signals (potentials such as ``progress``) on every turn a family steps, so no branch
  of ``_step`` can forget them;
* the terminal reward, taken from the outcome (a family writes it once, in ``outcome``).

The class is generic in the family's task and state types, ``TurngymEnv[MathTask, MathState]``,
so ``self.current_task`` and ``self.state`` are typed without casts. A family implements
:meth:`_reset`, :meth:`_step`, :meth:`_state_key` and :meth:`_oracle_action`; generated tasks
come from :meth:`_generate_task` / :meth:`_regenerate_task` (or only ``tasks=``); it may
override :meth:`_state_signals`, :meth:`_outcome_on_truncation`, and :meth:`_get_state` /
:meth:`_set_state` when a deep copy of ``self.state`` is not the cheapest exact copy
(``immutable_state = True`` makes a snapshot a reference).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar, cast

import gymnasium as gym
import numpy as np

from turngym.core.errors import ConfigError, InfraError, ResetNeeded, SnapshotError, TaskError
from turngym.core.spaces import TextSpace
from turngym.core.spec import RewardSpec
from turngym.core.task import Task

__all__ = ["TurngymEnv", "Transition", "EnvSnapshot", "InvalidActionPolicy", "INFO_KEYS", "TaskT", "StateT", "env_action_choices"]

#: The family's task type (a :class:`Task` subclass).
TaskT = TypeVar("TaskT", bound=Task)
#: The family's episode state type (what ``self.state`` holds).
StateT = TypeVar("StateT")

#: Keys present in every ``step`` info dict (``outcome`` is added on the final turn).
INFO_KEYS = ("turn", "signals", "state_key", "action_valid", "invalid_reason", "infra_error")


class InvalidActionPolicy(StrEnum):
    """What happens when the env cannot parse or apply an action.

    Whatever the policy, the turn counts towards ``max_turns``, the observation tells the
    agent what was wrong, and ``info["action_valid"]`` is False with ``info["invalid_reason"]``.
    """

    PENALIZE_AND_CONTINUE = "penalize_and_continue"
    """Add ``invalid_action_penalty`` to the turn's reward and keep going (the default)."""
    CONTINUE = "continue"
    """Keep going with no penalty (the budget is the only cost)."""
    TERMINATE = "terminate"
    """End the episode as failed, with the penalty."""


@dataclass(slots=True)
class Transition:
    """What a family's :meth:`TurngymEnv._step` returns for one turn.

    There is no reward field: the env's reward is the outcome's ``reward`` on the turn that
    carries an ``outcome`` (0 on every other turn), plus the invalid-action penalty, both added
    by the base class. Per-turn feedback goes in ``signals``.

    Attributes:
        obs: the observation text shown to the agent next.
        terminated: the task ended (solved, failed, bought, submitted).
        signals: this turn's event signals; state signals come from
            :meth:`TurngymEnv._state_signals`, declared-but-omitted ones are 0.
        valid: False if the action could not be parsed or applied.
        invalid_reason: why, in words the agent can act on.
        outcome: on the final turn, ``{"reward": r, "success": bool, ...components}``.
        infra_error: set when the *infrastructure* failed; the episode ends unscored.
    """

    obs: str
    terminated: bool = False
    signals: Mapping[str, float] | None = None
    valid: bool = True
    invalid_reason: str | None = None
    outcome: Mapping[str, Any] | None = None
    infra_error: str | None = None


@dataclass(frozen=True)
class EnvSnapshot:
    """An exact copy of an env's episode state, restorable into an env of the same class."""

    env_class: str
    task: Task | None
    turn: int
    done: bool
    last_obs: str
    rng_state: Mapping[str, Any]
    payload: Any = field(repr=False)


class TurngymEnv(gym.Env[str, str], Generic[TaskT, StateT]):
    """Base class of every turngym environment (text in, text out, signals every turn).

    Arguments accepted by every env:
        max_turns: turn budget; reaching it truncates the episode. Defaults to the class's
            ``default_max_turns``.
        invalid_action_policy: one of :class:`InvalidActionPolicy` (or its string value).
        invalid_action_penalty: reward added on an invalid turn under the penalizing policies.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the last observation).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}
    reward_spec: ClassVar[RewardSpec]
    #: The task class this env plays; ``reset`` refuses any other (TaskError).
    task_type: ClassVar[type[Task]] = Task
    #: True when ``self.state`` is never mutated in place (frozen dataclasses): a snapshot is
    #: then a reference, not a copy.
    immutable_state: ClassVar[bool] = False
    default_max_turns: ClassVar[int] = 20
    #: Instructions for the agent: the action grammar, with examples. Agents put this in the
    #: system message; ``turngym play`` prints it.
    system_prompt: str = ""
    #: Key/value options ``reset`` accepts in addition to ``task``.
    reset_options: ClassVar[tuple[str, ...]] = ()
    #: Strings that end an action in this env's grammar (e.g. ``("</calc>", "</answer>")``).
    #: Generating policies stop as soon as one appears and keep it in the action, so one
    #: model call produces exactly one action instead of rambling past it.
    stop_strings: ClassVar[tuple[str, ...]] = ()
    #: At most this many episodes of this env train the embedded tiny model's tokenizer (None:
    #: the builder's default). Envs whose steps run sandboxed code set it: the corpus is played
    #: on every cold machine before the first ``turngym train``.
    corpus_episodes: ClassVar[int | None] = None

    def __init__(
        self,
        *,
        max_turns: int | None = None,
        invalid_action_policy: InvalidActionPolicy | str = InvalidActionPolicy.PENALIZE_AND_CONTINUE,
        invalid_action_penalty: float = -0.1,
        render_mode: str | None = None,
        max_obs_chars: int = 1 << 20,
        max_action_chars: int = 1 << 20,
    ) -> None:
        if max_turns is None:
            max_turns = self.default_max_turns
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"max_turns must be a positive int, got {max_turns!r}")
        try:
            self.invalid_action_policy = InvalidActionPolicy(invalid_action_policy)
        except ValueError:
            allowed = [p.value for p in InvalidActionPolicy]
            raise ConfigError(
                f"invalid_action_policy must be one of {allowed}, got {invalid_action_policy!r}"
            ) from None
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ConfigError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.max_turns = max_turns
        #: A step limit below ``max_turns`` (``turngym.make(id, max_episode_steps=N)``): the episode
        #: is truncated there, with the outcome, without changing the budget the agent is told.
        self.max_episode_steps: int | None = None
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.render_mode = render_mode
        self.observation_space = TextSpace(max_obs_chars)
        self.action_space = TextSpace(max_action_chars)
        self.task: TaskT | None = None
        #: The fixed task pool (``tasks=``), or None when tasks are generated.
        self.tasks: tuple[TaskT, ...] | None = None
        self._by_id: dict[str, TaskT] = {}
        self.state: StateT
        self.turn = 0
        self._done = True
        self._last_obs = ""
        self._zero_signals = self.reward_spec.zeros()

    # ------------------------------------------------------------------ tasks
    def _set_task_pool(self, tasks: Iterable[Task] | None, *, empty: str = "tasks is empty") -> None:
        """Play only ``tasks`` (None: generate tasks); ``empty`` is the error for an empty pool."""
        if tasks is None:
            self.tasks, self._by_id = None, {}
            return
        pool = tuple(tasks)
        if not pool:
            raise ConfigError(empty)
        wrong = next((t for t in pool if not isinstance(t, self.task_type)), None)
        if wrong is not None:
            raise ConfigError(
                f"tasks= must hold {self.task_type.__name__} objects for {type(self).__name__}, got {type(wrong).__name__}"
            )
        self.tasks = cast(tuple[TaskT, ...], pool)
        self._by_id = {t.id: t for t in self.tasks}

    def _sample_task(self, rng: np.random.Generator) -> TaskT:
        """A task drawn with ``rng`` only: from the pool if there is one, else generated."""
        if self.tasks is not None:
            return self.tasks[int(rng.integers(len(self.tasks)))]
        return self._generate_task(rng)

    def _task_from_id(self, task_id: str) -> TaskT:
        """The pool's task called ``task_id``, else :meth:`_regenerate_task`."""
        task = self._by_id.get(task_id)
        return task if task is not None else self._regenerate_task(task_id)

    def _unknown_task(self, task_id: str) -> TaskError:
        """The error for a task id this env cannot look up or regenerate."""
        example = f" (this env has {len(self.tasks)} tasks, e.g. {self.tasks[0].id!r})" if self.tasks else ""
        return TaskError(f"{type(self).__name__}: unknown task id {task_id!r}{example}")

    @property
    def current_task(self) -> TaskT:
        """The task of the episode in progress (:class:`ResetNeeded` before the first reset)."""
        if self.task is None:
            raise ResetNeeded(f"{type(self).__name__} has no episode yet: call env.reset() first")
        return self.task

    # ------------------------------------------------------------------ hooks for families
    def _generate_task(self, rng: np.random.Generator) -> TaskT:
        """Generate a task using only ``rng`` (families without a generator need ``tasks=``)."""
        raise ConfigError(f"{type(self).__name__} does not generate tasks: pass tasks=")

    def _regenerate_task(self, task_id: str) -> TaskT:
        """Rebuild the task called ``task_id`` that is not in the pool; TaskError if unknown."""
        raise self._unknown_task(task_id)

    def _reset(self, task: TaskT, options: Mapping[str, Any]) -> str:
        """Set ``self.state`` for a fresh episode on ``task``; return the first observation."""
        raise NotImplementedError

    def _step(self, action: str) -> Transition:
        """Apply one action to ``self.state``."""
        raise NotImplementedError

    def _state_signals(self) -> Mapping[str, float]:
        """The signals that are a function of the state alone (potentials such as ``progress``).

        Read after every turn the family steps (valid or not) and sent with the turn's event
        signals, which override them. Default: none.
        """
        return {}

    def _state_key(self) -> str:
        """A canonical key of the current state without history (see core.hashing).

        The family's implementation hook; callers use the public :meth:`state_key`.
        """
        raise NotImplementedError

    def _outcome_on_truncation(self) -> dict[str, Any]:
        """The outcome when the turn budget runs out before the task ends."""
        return {"reward": 0.0, "success": False, "reason": "max_turns"}

    def _get_state(self) -> StateT:
        """An exact, independent copy of the family state (default: deep copy)."""
        return self.state if self.immutable_state else copy.deepcopy(self.state)

    def _set_state(self, payload: StateT) -> None:
        """Install a copy made by :meth:`_get_state` (must not alias the snapshot)."""
        self.state = payload if self.immutable_state else copy.deepcopy(payload)

    def _oracle_action(self) -> str:
        """The oracle's next action (called only during an episode)."""
        raise NotImplementedError

    def state_key(self) -> str:
        """A canonical key of the current state without history (``info["state_key"]``).

        The public name of the family's :meth:`_state_key` hook (families implement the hook, as
        they implement ``_reset`` behind ``reset``): two states with the same key are the same state,
        whatever path led there, which is what checkers, GiGPO anchors and variance studies compare.
        """
        return self._state_key()

    def oracle_action(self) -> str:
        """The next action of a scripted policy that solves the current task.

        Raises :class:`ResetNeeded` before the first ``reset``.
        """
        if self.task is None:
            raise ResetNeeded("oracle_action() needs an episode: call env.reset() first")
        return self._oracle_action()

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random action drawn from the family's grammar (for random agents and checks).

        Must draw only from ``rng``. The default is random printable text; families override
        it with actions from their grammar so random agents are a meaningful baseline.
        """
        n = int(rng.integers(0, 40))
        return "".join(chr(int(c)) for c in rng.integers(32, 127, size=n))

    def action_choices(self) -> tuple[str, ...] | None:
        """Every valid action now, when the family can enumerate them; None (the default) when not.

        A generating policy may then decode exactly one of them (``HFPolicy(constrain_choices=True)``),
        which makes a small model's actions valid by construction. Families whose grammar is open
        (free text, code, queries) keep None; the rollout passes it as ``AgentInput.choices``.
        """
        return None

    def faithfulness(self, episode: Any) -> float | None:
        """How faithfully a *successful* episode used its tools, in [0, 1], or None.

        Accuracy can hide unfaithful tool use (a right answer guessed without the evidence).
        Families that can tell override this: ``episode`` is a ``turngym.rollout.Episode``
        (read its ``turns[i].signals`` and ``outcome``); return None where the figure does
        not apply (failed episodes, families without tools). ``turngym eval`` reports the mean
        over the episodes that return a number.
        """
        return None

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"task", *self.reset_options})
        if unknown:
            raise ConfigError(
                f"{type(self).__name__}.reset: unknown option(s) {unknown}; "
                f"accepted: {['task', *self.reset_options]}"
            )
        task = options.get("task")
        if task is None:
            task = self._sample_task(self.np_random)
        elif isinstance(task, str):
            task = self._task_from_id(task)
        elif not isinstance(task, Task):
            raise ConfigError(f"options['task'] must be a Task or a task id string, got {type(task).__name__}")
        if not isinstance(task, self.task_type):
            raise TaskError(f"{type(self).__name__} needs a {self.task_type.__name__}, got {type(task).__name__}")
        self.task = cast(TaskT, task)
        self.turn = 0
        self._done = False
        obs = self._reset(self.task, options)
        self._last_obs = obs
        return obs, {"turn": 0, "task_id": task.id, "state_key": self.state_key()}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise ResetNeeded(
                "step() called on a finished episode (or before reset()); call env.reset() first"
            )
        self.turn += 1
        signals = dict(self._zero_signals)
        if not isinstance(action, str):
            t = Transition(
                obs=f"Invalid action: expected text, got {type(action).__name__}.",
                valid=False,
                invalid_reason=f"action must be str, got {type(action).__name__}",
            )
        else:
            try:
                t = self._step(action)
            except InfraError as exc:
                t = Transition(obs=f"[environment infrastructure error: {exc}]", terminated=True, infra_error=str(exc))
            else:
                signals.update(self._state_signals())

        terminated = t.terminated
        outcome = t.outcome
        reward = float(outcome.get("reward", 0.0)) if outcome is not None else 0.0
        if not t.valid:
            if self.invalid_action_policy is not InvalidActionPolicy.CONTINUE:
                reward += self.invalid_action_penalty
            if self.invalid_action_policy is InvalidActionPolicy.TERMINATE and not terminated:
                terminated = True
                outcome = {"reward": 0.0, "success": False, "reason": "invalid_action"}
        truncated = not terminated and (self.turn >= self.max_turns or self.turn >= (self.max_episode_steps or self.max_turns))

        if t.signals:
            signals.update(t.signals)
        info: dict[str, Any] = {
            "turn": self.turn,
            "signals": signals,
            "state_key": self.state_key(),
            "action_valid": t.valid,
            "invalid_reason": t.invalid_reason,
            "infra_error": t.infra_error,
        }
        if terminated or truncated:
            self._done = True
            if outcome is None:
                outcome = (
                    {"reward": 0.0, "success": False, "reason": "infra_error"}
                    if t.infra_error
                    else self._outcome_on_truncation()
                )
                reward += float(outcome.get("reward", 0.0))
            info["outcome"] = dict(outcome)
        self._last_obs = t.obs
        return t.obs, float(reward), terminated, truncated, info

    def truncate(self) -> dict[str, Any]:
        """End the episode now, as the turn budget would, and return its outcome.

        For a truncation decided outside the env (gymnasium's ``TimeLimit``, a runner's step
        limit): the outcome, and with it the final reward, must still arrive
        (:class:`~turngym.core.truncation.OutcomeOnTruncation`).
        """
        if self._done:
            raise ResetNeeded("truncate() called on a finished episode (or before reset()); call env.reset() first")
        self._done = True
        return dict(self._outcome_on_truncation())

    def render(self) -> str | None:
        return self._last_obs if self.render_mode == "ansi" else None

    # ------------------------------------------------------------------ branching
    @property
    def done(self) -> bool:
        """True when the episode has ended (or no episode has started)."""
        return self._done

    def snapshot(self) -> EnvSnapshot:
        """An exact copy of the episode state (including the RNG) to :meth:`restore` later."""
        return EnvSnapshot(
            env_class=type(self).__qualname__,
            task=self.task,
            turn=self.turn,
            done=self._done,
            last_obs=self._last_obs,
            rng_state=copy.deepcopy(self.np_random.bit_generator.state),
            payload=self._get_state(),
        )

    def restore(self, snap: EnvSnapshot) -> None:
        """Return to the state captured by :meth:`snapshot`; the snapshot stays reusable."""
        if not isinstance(snap, EnvSnapshot) or snap.env_class != type(self).__qualname__:
            got = snap.env_class if isinstance(snap, EnvSnapshot) else type(snap).__name__
            raise SnapshotError(f"cannot restore a {got} snapshot into {type(self).__qualname__}")
        self.task = cast("TaskT | None", snap.task)
        self.turn = snap.turn
        self._done = snap.done
        self._last_obs = snap.last_obs
        self.np_random.bit_generator.state = copy.deepcopy(dict(snap.rng_state))
        self._set_state(cast(StateT, snap.payload))


def env_action_choices(env: Any) -> tuple[str, ...] | None:
    """``env``'s valid actions now (:meth:`TurngymEnv.action_choices` through any wrappers), or None.

    One reading for every place that asks — the rollout building a policy's input, the env
    server's worker and a Ray actor computing them next to the env — so they cannot disagree;
    a plain gymnasium env (no such method) lists none.
    """
    enumerate_choices = getattr(getattr(env, "unwrapped", env), "action_choices", None)
    choices = enumerate_choices() if callable(enumerate_choices) else None
    return None if choices is None else tuple(choices)
