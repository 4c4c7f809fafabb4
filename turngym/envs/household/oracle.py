"""The household oracle: a privileged planner that reads where everything is.

It replans from the current state every turn, so it also finishes episodes that another
policy started (a random prefix, a branch restored from a snapshot). The plan is the shortest
macro-sequence under the room's cost model (every ``go to`` costs one turn, wherever from):

1. free the hands if they hold something useless (put it down here, or where the target is);
2. fetch the cheapest target object: go to its receptacle, open it if closed, take it —
   "cheapest" counts the turns still needed for *that* object (already here? inside a closed
   container? already cleaned/heated/cooled? lying next to the appliance or the lamp?);
3. apply the required change at the appliance (``clean``/``heat``/``cool``), or go to the lamp
   and switch it on (look_in_light);
4. go to a goal receptacle (preferring one that needs no opening), open it if needed, put.

pick_two_place repeats 2–4 for a second object. Every step is necessary and the choices
minimise the remaining turns, so the plan is optimal whenever the agent starts empty-handed
in the middle of the room (the generated start); the tests check this against breadth-first
search on small rooms.
"""

from __future__ import annotations

from turngym.envs.household.world import HouseholdState, World

__all__ = ["oracle_action"]

_PROP = {"pick_clean_place": ("clean", "clean"), "pick_heat_place": ("hot", "heat"), "pick_cool_place": ("cold", "cool")}


def _closed(w: World, s: HouseholdState, r: int) -> bool:
    return bool((w.openable >> r) & 1 and not (s.opened >> r) & 1)


def _in_goal(w: World, s: HouseholdState, o: int) -> bool:
    at = s.objloc[o]
    return at >= 0 and bool((w.goal_mask >> at) & 1)


def _pick(options: list[int], prefer_here: int, s: HouseholdState, w: World) -> int:
    """The receptacle to use among ``options``: the current one, else one that needs no opening."""
    if prefer_here in options:
        return prefer_here
    for r in options:
        if not _closed(w, s, r):
            return r
    return options[0]


def _goal_receptacle(w: World, s: HouseholdState) -> int:
    return _pick([r for r in range(len(w.rnames)) if (w.goal_mask >> r) & 1], s.loc, s, w)


def _lamp_receptacle(w: World, s: HouseholdState) -> int:
    lit = [w.lamp_at[k] for k in range(len(w.lamp_at)) if (s.lamp_on >> k) & 1]
    if lit:
        return s.loc if s.loc in lit else lit[0]
    return s.loc if s.loc in w.lamp_at else w.lamp_at[0]


def _fetch_cost(w: World, s: HouseholdState, o: int, prop: str | None) -> int:
    """Turns still needed to deliver object ``o`` (fetch, change, bring)."""
    r = s.objloc[o]
    cost = (r != s.loc) + _closed(w, s, r) + 1  # go, open, take
    if w.task_type == "look_in_light":
        return cost + (r not in w.lamp_at or not any((s.lamp_on >> k) & 1 for k in w.lamps_here[r])) + 1
    if prop is not None and not (getattr(s, prop) >> o) & 1:
        cost += (r not in w.appliances) + 1  # go to the appliance, apply
    return cost


def _go_or_open(w: World, s: HouseholdState, r: int) -> str | None:
    if s.loc != r:
        return w.go_cmds[r]
    if _closed(w, s, r):
        return f"open {w.rnames[r]}"
    return None


def oracle_action(w: World, s: HouseholdState) -> str:
    """The next command of a shortest plan from ``s`` (see the module docstring)."""
    tt = w.task_type
    held = s.held
    prop, verb = _PROP.get(tt, (None, None))
    holds_target = held >= 0 and bool((w.target_mask >> held) & 1)

    if holds_target:
        if tt == "look_in_light":
            r = _lamp_receptacle(w, s)
            if s.loc != r:
                return w.go_cmds[r]
            k = next(k for k in w.lamps_here[r] if not (s.lamp_on >> k) & 1)
            return f"use {w.lamp_names[k]}"
        if prop is not None and not (getattr(s, prop) >> held) & 1:
            a = _pick(list(w.appliances), s.loc, s, w)
            if s.loc != a:
                return w.go_cmds[a]
            return f"{verb} {w.onames[held]} with {w.rnames[a]}"
        g = _goal_receptacle(w, s)
        return _go_or_open(w, s, g) or f"put {w.onames[held]} in/on {w.rnames[g]}"

    candidates = [o for o in w.targets if s.objloc[o] >= 0 and not (tt == "pick_two_place" and _in_goal(w, s, o))]
    best = min(candidates, key=lambda o: (_fetch_cost(w, s, o, prop), o))
    r = s.objloc[best]
    if held >= 0:  # hands full of something useless: put it down here, or where the target is
        if s.loc >= 0 and not _closed(w, s, s.loc):
            return f"put {w.onames[held]} in/on {w.rnames[s.loc]}"
        return _go_or_open(w, s, r) or f"put {w.onames[held]} in/on {w.rnames[r]}"
    return _go_or_open(w, s, r) or f"take {w.onames[best]} from {w.rnames[r]}"
