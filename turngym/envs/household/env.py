"""``turngym/Household-v0``: ALFWorld-style household tasks in a generated text world."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from turngym.core.env import Transition, TurngymEnv
from turngym.core.errors import ConfigError
from turngym.core.hashing import state_hash
from turngym.core.spec import RewardSpec, Signal
from turngym.envs.household import MAX_TURNS, oracle, verifier
from turngym.envs.household.parsing import normalize
from turngym.envs.household.tasks import EVAL_SEED_BASE, SPLITS, TASK_TYPES, HouseholdTask, generate_task, task_from_id
from turngym.envs.household.world import (
    READ_ONLY,
    HouseholdState,
    World,
    admissible,
    apply,
    compile_world,
    explain_invalid,
    initial_state,
    lookup,
)

__all__ = ["HouseholdEnv", "SYSTEM_PROMPT"]

SYSTEM_PROMPT = """\
You are in a household. Complete the task by writing one command per message, copied exactly from
the "Admissible actions" list, and nothing else. Commands:
  go to RECEPTACLE | open RECEPTACLE | close RECEPTACLE | examine RECEPTACLE
  take OBJECT from RECEPTACLE | put OBJECT in/on RECEPTACLE
  clean OBJECT with sinkbasin N | heat OBJECT with microwave N | cool OBJECT with fridge N
  use desklamp N | examine OBJECT | inventory | look
You can carry one object at a time; closed receptacles must be opened first.
Example (task: put a mug on the desk):
You: go to countertop 1
Reply: You arrive at countertop 1. On the countertop 1, you see a mug 1. Admissible actions: ...
You: take mug 1 from countertop 1
Reply: You pick up the mug 1 from the countertop 1. Admissible actions: ...
You: go to desk 1
Reply: You arrive at desk 1. ... Admissible actions: ...
You: put mug 1 in/on desk 1"""

_SIGNALS = (
    Signal("target_seen", 0, 1, "verifiable", "a not-yet-seen object of the goal type came into view (up to the number needed)", weight=0.05),
    Signal("target_picked", 0, 1, "verifiable", "an object of the goal type was picked up for the first time this episode", weight=0.1),
    Signal("state_changed", 0, 1, "verifiable", "the required change was first made: a target cleaned/heated/cooled, or the lamp switched on", weight=0.1),
    Signal("goal_condition", 0, 1, "verifiable", "fraction of the goal's conditions that became true this turn", weight=0.2),
    Signal("regression", 0, 1, "verifiable", "fraction of the goal's conditions that became false this turn (undone)", weight=-0.2),
    Signal("progress", 0, 1, "verifiable", "fraction of the goal's conditions holding now", potential=True),
    Signal("noop", 0, 1, "verifiable", "a valid command that left the world unchanged (look, inventory, examine, re-cleaning…)", weight=-0.01),
    Signal("revisit", 0, 1, "verifiable", "the world changed back into a state already reached this episode (a loop)", weight=-0.02),
    Signal("invalid_action", 0, 1, "verifiable", "the command was not admissible here (nothing happened)"),
)


class HouseholdEnv(TurngymEnv[HouseholdTask, HouseholdState | None]):
    """ALFWorld-style household tasks in a seeded, generated text world.

    ## Description
    The agent stands in a kitchen, living room, bedroom or bathroom full of receptacles
    (fridge, microwave, sinkbasin, countertops, cabinets, drawers, shelves, desks…) and objects,
    and must reach a goal in ALFWorld's six task types: put an object somewhere; clean, heat
    or cool it first; look at it under a desk lamp; or put two of them somewhere. It is a
    re-implementation of ALFWorld's text interaction (same commands, same feedback) that
    needs no download, no game engine and no planner, steps in microseconds and forks for free.

    ## Task Distribution
    Generated (see :mod:`turngym.envs.household.tasks`): a task type (uniform over
    ``task_types``), a difficulty (uniform over ``difficulties``: more receptacles,
    distractors and closed containers as it grows) and a seed. ``split="unseen"`` draws held-out
    object–receptacle goals in held-out room layouts, as ALFWorld's out-of-distribution set.
    For a fixed benchmark pass ``tasks=eval_tasks("seen" | "unseen")`` (140 / 134 tasks, as
    ALFWorld's valid_seen / valid_unseen; their seeds are never sampled for training).

    ## Action Space
    One ALFWorld command per turn, e.g. ``go to cabinet 3``, ``open fridge 1``,
    ``take apple 1 from countertop 2``, ``put apple 1 in/on fridge 1``,
    ``heat apple 1 with microwave 1``, ``use desklamp 1``, ``examine apple 1``,
    ``inventory``, ``look``. Case, extra spaces, a trailing period, an ``<action>…</action>``
    wrapper and aliases (``put X in R``, ``move X to R``) are accepted. A command that is not
    admissible now (unknown, or impossible here: the object is elsewhere, the fridge is
    closed, the hands are full) is invalid: nothing happens.

    ## Observation
    ALFWorld's feedback ("You arrive at fridge 1. The fridge 1 is closed.") followed, when
    ``show_admissible`` is True, by ``Admissible actions: …``, every command possible now.
    :meth:`admissible_actions` returns the same list.

    ## Rewards
    Outcome: 1 when every goal condition holds (the episode then terminates), else 0.
    ``info["outcome"]["goal_condition_rate"]`` is ALFWorld's goal-condition success.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | target_seen | 0–1 | valid turns | a new object of the goal type came into view (≤ the number needed) |
    | target_picked | 0–1 | valid turns | a goal-type object picked up for the first time |
    | state_changed | 0–1 | valid turns | required change first made (cleaned/heated/cooled target, lamp on) |
    | goal_condition | 0–1 | valid turns | fraction of goal conditions newly satisfied |
    | regression | 0–1 | valid turns | fraction of goal conditions undone |
    | progress | 0–1 | every turn | fraction of goal conditions holding (a potential) |
    | noop | 0–1 | valid turns | the world did not change |
    | revisit | 0–1 | valid turns | the world returned to a state seen earlier this episode |
    | invalid_action | 0–1 | invalid turns | the command was not admissible |

    ## Starting State
    The agent in the middle of the room, hands empty, every container closed, every object
    neither clean, hot nor cool; the task drawn by the env's RNG or
    ``options={"task": HouseholdTask | task_id}``.

    ## Episode End
    Terminated when the goal holds; truncated after ``max_turns`` (default 50, as ALFWorld).

    ## Arguments
    ``split`` ("seen" | "unseen"), ``task_types`` (subset of :data:`TASK_TYPES`),
    ``difficulties`` (subset of 1, 2, 3), ``tasks`` (a fixed list of tasks instead of
    generation), ``show_admissible`` (list the admissible commands in each observation).

    >>> import turngym
    >>> env = turngym.make("turngym/Household-v0", task_types=("pick_heat_place",), difficulties=(1,))
    >>> obs, info = env.reset(seed=3)
    >>> obs.splitlines()[-3]
    'Your task is to: put a hot egg in fridge.'
    >>> for _ in range(20):
    ...     obs, reward, terminated, truncated, info = env.step(env.oracle_action())
    ...     if terminated:
    ...         break
    >>> reward, info["turn"], info["outcome"]["success"]
    (1.0, 7, True)

    ## Oracle
    A privileged planner that replans from any state (see :mod:`.oracle`): fetch the
    cheapest target, change it, deliver it; optimal from the generated start.

    ## Version History
    * v0: initial release.
    """

    reward_spec = RewardSpec(
        signals=_SIGNALS,
        outcome="1 when every goal condition of the task holds (the episode then terminates), else 0",
    )
    default_max_turns = MAX_TURNS
    task_type = HouseholdTask
    system_prompt = SYSTEM_PROMPT
    #: ALFWorld commands are one line: generation stops at the end of it
    stop_strings = ("\n",)
    max_new_tokens = 24  # one command line, e.g. "put mug 1 in/on desk 1"

    def __init__(
        self,
        *,
        split: str = "seen",
        task_types: Sequence[str] | None = None,
        difficulties: Sequence[int] = (1, 2, 3),
        tasks: Sequence[HouseholdTask] | None = None,
        show_admissible: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        types = tuple(task_types) if task_types is not None else TASK_TYPES
        bad = [t for t in types if t not in TASK_TYPES]
        if bad or not types:
            raise ConfigError(f"task_types must be a non-empty subset of {TASK_TYPES}, got {types!r}")
        diffs = tuple(difficulties)
        if not diffs or any(d not in (1, 2, 3) for d in diffs):
            raise ConfigError(f"difficulties must be a non-empty subset of (1, 2, 3), got {diffs!r}")
        self.split, self.task_types, self.difficulties = split, types, diffs
        self._set_task_pool(tasks, empty="tasks is empty: pass at least one HouseholdTask, or None to generate")
        self.show_admissible = bool(show_admissible)
        self.world: World | None = None
        self.state = None
        self._full = 1

    # -- tasks -------------------------------------------------------------------------------
    def _generate_task(self, rng: np.random.Generator) -> HouseholdTask:
        task_type = self.task_types[int(rng.integers(len(self.task_types)))]
        difficulty = self.difficulties[int(rng.integers(len(self.difficulties)))]
        return generate_task(int(rng.integers(EVAL_SEED_BASE)), task_type, self.split, difficulty)

    def _regenerate_task(self, task_id: str) -> HouseholdTask:
        return task_from_id(task_id)

    # -- episode -----------------------------------------------------------------------------
    def _reset(self, task: HouseholdTask, options: Mapping[str, Any]) -> str:
        self.world = w = compile_world(task)
        self.state = initial_state(w)
        self._full = verifier.full_mask(w.task_type)
        return self._with_actions(task.prompt)

    def _with_actions(self, text: str) -> str:
        if not self.show_admissible:
            return text
        return f"{text}\n\nAdmissible actions: {', '.join(self.admissible_actions())}"

    def _state_signals(self) -> dict[str, float]:
        w, s = self.world, self.state
        assert w is not None and s is not None
        return {"progress": s.conds.bit_count() / verifier.n_conditions(w.task_type)}

    def _step(self, action: str) -> Transition:
        w, s = self.world, self.state
        assert w is not None and s is not None
        command = normalize(action, aliases=False)
        op = lookup(w, s, command)
        if op is None:
            command = normalize(action)
            op = lookup(w, s, command)
        if op is None:
            reason = explain_invalid(w, s, command)
            return Transition(
                obs=self._with_actions(f"Nothing happens. {reason}"),
                valid=False,
                invalid_reason=reason,
                signals={"invalid_action": 1.0},
            )
        before = (s.seen, s.picked, s.changed, s.conds)
        key0 = s.world_key()
        text = apply(w, s, op)
        revisit = False
        if op[0] in READ_ONLY:
            changed_world = False
        else:
            key1 = s.world_key()
            changed_world = key1 != key0
            if changed_world:
                if key1 in s.visits:
                    revisit = True
                else:
                    s.visits = s.visits | {key1}
            s.conds = verifier.conditions(w, s)
            s.changed |= verifier.required_changes(w, s)
        signals = verifier.step_signals(w, before, (s.seen, s.picked, s.changed, s.conds), changed_world, revisit)
        if s.conds == self._full:
            outcome = {"reward": 1.0, "success": True, "goal_condition_rate": 1.0, "task_type": w.task_type}
            return Transition(obs=text, terminated=True, signals=signals, outcome=outcome)
        return Transition(obs=self._with_actions(text), signals=signals)

    def _outcome_on_truncation(self) -> dict[str, Any]:
        w, s = self.world, self.state
        assert w is not None and s is not None
        rate = s.conds.bit_count() / verifier.n_conditions(w.task_type)
        return {"reward": 0.0, "success": False, "reason": "max_turns", "goal_condition_rate": rate, "task_type": w.task_type}

    def _state_key(self) -> str:
        s = self.state
        if s is None:
            return state_hash("household/none")
        if s.key is None:
            s.key = state_hash(repr((self.task.id if self.task else "", s.world_key())))
        return s.key

    def _get_state(self) -> HouseholdState | None:
        return self.state.copy() if self.state is not None else None

    def _set_state(self, payload: HouseholdState | None) -> None:
        self.state = payload.copy() if payload is not None else None
        task = self.task
        if not isinstance(task, HouseholdTask):
            self.world = None
        elif self.world is None or self.world.task is not task:
            self.world = compile_world(task)
            self._full = verifier.full_mask(task.task_type)

    # -- policies ----------------------------------------------------------------------------
    def admissible_actions(self) -> list[str]:
        """Every command that is possible now (the list the observation shows)."""
        if self.world is None or self.state is None:
            return []
        return admissible(self.world, self.state)

    def action_choices(self) -> tuple[str, ...] | None:
        """The admissible commands: the complete set of valid actions this turn (the env enumerates them)."""
        actions = self.admissible_actions()
        return tuple(actions) if actions else None

    def _oracle_action(self) -> str:
        assert self.world is not None and self.state is not None
        return oracle.oracle_action(self.world, self.state)

    def sample_action(self, rng: np.random.Generator) -> str:
        """A uniformly random admissible command (what a random ALFWorld agent plays)."""
        actions = self.admissible_actions()
        if not actions:
            return "look"
        return actions[int(rng.integers(len(actions)))]
