"""Pure verdicts: which goal conditions hold, and this turn's process signals.

Each task type's goal is a short list of **conditions** (ALFWorld's goal-condition success,
made explicit). The outcome is "all conditions hold"; the per-turn signals are facts about
how a turn moved them, checked against the world state, never guessed:

===================  ===============================================================
task type            conditions (in order)
===================  ===============================================================
pick_place           a target object is in a goal receptacle
pick_clean_place     a target object is clean; a clean target object is in a goal receptacle
pick_heat_place      … hot …; a hot target object is in a goal receptacle
pick_cool_place      … cool …; a cool target object is in a goal receptacle
look_in_light        the agent holds a target object; … while a lamp here is on
pick_two_place       one target object is in a goal receptacle; two are
===================  ===============================================================
"""

from __future__ import annotations

from turngym.envs.household.world import HouseholdState, World

__all__ = ["conditions", "n_conditions", "full_mask", "condition_names", "required_changes", "step_signals"]

_N = {"pick_place": 1, "pick_clean_place": 2, "pick_heat_place": 2, "pick_cool_place": 2, "look_in_light": 2, "pick_two_place": 2}
_PROP = {"pick_clean_place": "clean", "pick_heat_place": "hot", "pick_cool_place": "cold"}
_NAMES = {
    "pick_place": ("placed",),
    "pick_clean_place": ("cleaned", "placed"),
    "pick_heat_place": ("heated", "placed"),
    "pick_cool_place": ("cooled", "placed"),
    "look_in_light": ("holding", "in_light"),
    "pick_two_place": ("placed_one", "placed_two"),
}


def n_conditions(task_type: str) -> int:
    """How many goal conditions ``task_type`` has."""
    return _N[task_type]


def full_mask(task_type: str) -> int:
    """The condition bitmask meaning "goal reached"."""
    return (1 << _N[task_type]) - 1


def condition_names(task_type: str) -> tuple[str, ...]:
    """Short names of the conditions, in bit order."""
    return _NAMES[task_type]


def _in_goal(w: World, s: HouseholdState, o: int) -> bool:
    at = s.objloc[o]
    return at >= 0 and (w.goal_mask >> at) & 1 == 1


def conditions(w: World, s: HouseholdState) -> int:
    """Bitmask of the goal conditions that hold in ``s`` (bit i = condition i)."""
    tt = w.task_type
    if tt == "pick_place":
        return int(any(_in_goal(w, s, o) for o in w.targets))
    if tt == "pick_two_place":
        n = sum(_in_goal(w, s, o) for o in w.targets)
        return (n >= 1) | ((n >= 2) << 1)
    if tt == "look_in_light":
        if s.held < 0 or not (w.target_mask >> s.held) & 1:
            return 0
        lit = s.loc >= 0 and any((s.lamp_on >> k) & 1 for k in w.lamps_here[s.loc])
        return 1 | (lit << 1)
    prop = getattr(s, _PROP[tt]) & w.target_mask
    if not prop:
        return 0
    placed = any((prop >> o) & 1 and _in_goal(w, s, o) for o in w.targets)
    return 1 | (placed << 1)


def required_changes(w: World, s: HouseholdState) -> int:
    """Bitmask of required state changes present in ``s``: target objects with the task's
    property (clean/hot/cool), and bit ``len(objects)`` if a lamp is on (look_in_light)."""
    tt = w.task_type
    prop = _PROP.get(tt)
    if prop is not None:
        return getattr(s, prop) & w.target_mask
    if tt == "look_in_light" and s.lamp_on:
        return 1 << len(w.onames)
    return 0


def step_signals(
    w: World,
    before: tuple[int, int, int, int],
    after: tuple[int, int, int, int],
    world_changed: bool,
    revisit: bool,
) -> dict[str, float]:
    """The process signals of one valid turn (the env's RewardSpec says what each means).

    ``before`` and ``after`` are the episode memory ``(seen, picked, changed, conds)``
    around the turn: objects ever seen, ever picked up, required changes ever made (see
    :func:`required_changes`) and the goal conditions holding.
    """
    n = _N[w.task_type]
    tmask = w.target_mask
    seen0, picked0, changed0, conds0 = before
    seen1, picked1, changed1, conds1 = after
    seen_before = (seen0 & tmask).bit_count()
    new_seen = seen_before < w.count and (seen1 & tmask).bit_count() > seen_before
    gained = conds1 & ~conds0
    lost = conds0 & ~conds1
    return {
        "target_seen": 1.0 if new_seen else 0.0,
        "target_picked": 1.0 if (picked1 & ~picked0) & tmask else 0.0,
        "state_changed": 1.0 if changed1 != changed0 else 0.0,
        "goal_condition": gained.bit_count() / n,
        "regression": lost.bit_count() / n,
        "progress": conds1.bit_count() / n,
        "noop": 0.0 if world_changed else 1.0,
        "revisit": 1.0 if revisit else 0.0,
    }
