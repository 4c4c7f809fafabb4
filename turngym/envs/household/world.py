"""The household engine: a task compiled into lookup tables, and a tiny mutable state.

Speed is the point of this module (a tree rollout steps and forks constantly), so:

* :class:`World` is everything that never changes in an episode — names, types, which
  receptacles open, the "go to" commands — compiled once per task and cached.
* :class:`HouseholdState` is a dozen ``__slots__`` fields, each an int, a tuple or a
  frozenset: immutable values, so a snapshot is a shallow copy of one small object (about a
  microsecond) and a restored state never aliases a live one. Sets of receptacles or objects
  (open, clean, hot, cold, seen…) are int bitmasks.
* The admissible commands at the current location are computed once after each step, kept
  on the state, and reused to validate the next action (one dict lookup) and to list them.

An *op* is a small tuple ``(opcode, arg, arg)``; :func:`apply` dispatches on the opcode
through a table of functions, each returning the observation text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from turngym.envs.household.catalog import APPLIANCE, RECEPTACLES
from turngym.envs.household.parsing import VERBS, split_command
from turngym.envs.household.tasks import HouseholdTask, recep_type

__all__ = [
    "World",
    "HouseholdState",
    "compile_world",
    "initial_state",
    "local_actions",
    "admissible",
    "lookup",
    "apply",
    "describe",
    "visible_objects",
    "READ_ONLY",
    "explain_invalid",
]

MIDDLE = -1  # the agent's location before its first "go to"
HELD = -1  # an object's location while the agent carries it

# opcodes
GO, OPEN, CLOSE, TAKE, PUT, CLEAN, HEAT, COOL, USE, EXAMINE_R, EXAMINE_O, INVENTORY, LOOK = range(13)
_VERB_OP = {"clean": CLEAN, "heat": HEAT, "cool": COOL}
_APPLIANCE_VERB = {v: k for k, v in APPLIANCE.items()}


@dataclass(frozen=True, slots=True, eq=False)
class World:
    """The static part of an episode, compiled from a :class:`HouseholdTask`."""

    task: HouseholdTask
    rnames: tuple[str, ...]
    rtypes: tuple[str, ...]
    openable: int  # bitmask over receptacles
    preps: tuple[str, ...]
    verbs: tuple[str | None, ...]  # "clean"/"heat"/"cool" for appliances, else None
    onames: tuple[str, ...]
    otypes: tuple[str, ...]
    lamp_names: tuple[str, ...]
    lamp_at: tuple[int, ...]
    lamps_here: tuple[tuple[int, ...], ...]  # per receptacle, the lamps standing on it
    go_cmds: tuple[str, ...]  # "go to <r>" for every receptacle, by index
    go_ops: dict[str, tuple[int, int]]
    targets: tuple[int, ...]  # objects of the target type
    target_mask: int
    goal_mask: int  # receptacles of the goal type
    task_type: str
    count: int
    appliances: tuple[int, ...]  # receptacles whose verb the task needs (sinkbasin for clean…)


_CACHE: dict[str, World] = {}
_CACHE_SIZE = 4096
_CACHE_LOCK = threading.Lock()  # envs in threads share the cache; misses are rare, so lock them


def compile_world(task: HouseholdTask) -> World:
    """Build the lookup tables of ``task``, cached by task id (reset pays this once per task)."""
    w = _CACHE.get(task.id)
    if w is not None and (w.task is task or w.task == task):
        return w
    w = _compile(task)
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))  # oldest first
        _CACHE[task.id] = w
    return w


def _compile(task: HouseholdTask) -> World:
    rnames = task.receptacles
    rtypes = tuple(recep_type(n) for n in rnames)
    otypes = tuple(recep_type(o) for o in task.objects)
    openable = sum(1 << i for i, t in enumerate(rtypes) if RECEPTACLES[t].openable)
    lamp_names = tuple(f"desklamp {i + 1}" for i in range(len(task.lamps)))
    lamps_here = tuple(tuple(k for k, at in enumerate(task.lamps) if at == r) for r in range(len(rnames)))
    go_cmds = tuple(f"go to {n}" for n in rnames)
    targets = tuple(i for i, t in enumerate(otypes) if t == task.target)
    need = {"pick_clean_place": "clean", "pick_heat_place": "heat", "pick_cool_place": "cool"}.get(task.task_type)
    verbs = tuple(_APPLIANCE_VERB.get(t) for t in rtypes)
    return World(
        task=task,
        rnames=rnames,
        rtypes=rtypes,
        openable=openable,
        preps=tuple(RECEPTACLES[t].prep for t in rtypes),
        verbs=verbs,
        onames=task.objects,
        otypes=otypes,
        lamp_names=lamp_names,
        lamp_at=task.lamps,
        lamps_here=lamps_here,
        go_cmds=go_cmds,
        go_ops={c: (GO, i) for i, c in enumerate(go_cmds)},
        targets=targets,
        target_mask=sum(1 << i for i in targets),
        goal_mask=sum(1 << i for i, t in enumerate(rtypes) if t == task.goal_receptacle),
        task_type=task.task_type,
        count=task.count,
        appliances=tuple(i for i, v in enumerate(verbs) if v is not None and v == need),
    )


class HouseholdState:
    """The dynamic state of an episode: the world (keyed) plus the episode's memory (not keyed).

    World fields (``world_key``): ``loc`` (receptacle index, or -1 in the middle of the
    room), ``held`` (object index or -1), ``objloc`` (per object: receptacle index, or -1 when
    held), bitmasks ``opened`` (receptacles), ``clean``/``hot``/``cold`` (objects),
    ``lamp_on`` (lamps).

    Episode memory (signals only, never in the state key): ``seen``/``picked``/``changed``
    bitmasks of objects ever seen, ever picked up and ever given the required change
    (bit ``len(objects)`` stands for "a lamp was switched on"), ``visits`` (world keys reached
    so far), ``conds`` (bitmask of satisfied goal conditions), and ``local`` (the admissible
    commands here, computed once per step).
    """

    __slots__ = (
        "loc", "held", "objloc", "opened", "clean", "hot", "cold", "lamp_on",
        "seen", "picked", "changed", "visits", "conds", "local", "key",
    )  # fmt: skip

    loc: int
    held: int
    objloc: tuple[int, ...]
    opened: int
    clean: int
    hot: int
    cold: int
    lamp_on: int
    seen: int
    picked: int
    changed: int
    visits: frozenset[tuple[object, ...]]
    conds: int
    local: dict[str, tuple[int, ...]]
    key: str | None

    def world_key(self) -> tuple[object, ...]:
        """Everything that defines the world now, nothing about how it got here."""
        return (self.loc, self.held, self.objloc, self.opened, self.clean, self.hot, self.cold, self.lamp_on)

    def copy(self) -> HouseholdState:
        """An independent copy (every field is immutable, so shallow is exact)."""
        new = HouseholdState.__new__(HouseholdState)
        for name in HouseholdState.__slots__:
            setattr(new, name, getattr(self, name))
        return new

    def __repr__(self) -> str:
        return f"HouseholdState(loc={self.loc}, held={self.held}, objloc={self.objloc}, opened={self.opened:#b})"


def initial_state(w: World) -> HouseholdState:
    """Everything closed and neutral, the agent in the middle of the room, hands empty."""
    s = HouseholdState.__new__(HouseholdState)
    s.loc = MIDDLE
    s.held = -1
    s.objloc = w.task.object_starts
    s.opened = s.clean = s.hot = s.cold = s.lamp_on = 0
    s.seen = s.picked = s.changed = 0
    s.conds = 0
    s.visits = frozenset((s.world_key(),))
    s.key = None
    s.local = local_actions(w, s)
    return s


# ----------------------------------------------------------------------------- queries
def visible_objects(w: World, s: HouseholdState, r: int) -> list[int]:
    """Objects the agent can see in receptacle ``r`` (none while it is closed)."""
    if (w.openable >> r) & 1 and not (s.opened >> r) & 1:
        return []
    return [o for o, at in enumerate(s.objloc) if at == r]


def _a(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _listing(names: list[str]) -> str:
    if not names:
        return "nothing"
    if len(names) == 1:
        return _a(names[0])
    return ", ".join(_a(n) for n in names[:-1]) + f", and {_a(names[-1])}"


def describe(w: World, s: HouseholdState, r: int) -> str:
    """What the agent sees at receptacle ``r``: closed, or its contents (and lamps)."""
    name = w.rnames[r]
    if (w.openable >> r) & 1:
        if not (s.opened >> r) & 1:
            return f"The {name} is closed."
        items = [w.onames[o] for o in visible_objects(w, s, r)]
        return f"The {name} is open. In it, you see {_listing(items)}."
    items = [w.lamp_names[k] for k in w.lamps_here[r]] + [w.onames[o] for o in visible_objects(w, s, r)]
    if w.preps[r] == "in":
        return f"In the {name}, you see {_listing(items)}."
    return f"On the {name}, you see {_listing(items)}."


def local_actions(w: World, s: HouseholdState) -> dict[str, tuple[int, ...]]:
    """The admissible commands other than "go to", mapped to their ops."""
    acts: dict[str, tuple[int, ...]] = {}
    loc, held = s.loc, s.held
    if loc >= 0:
        name = w.rnames[loc]
        closed = False
        if (w.openable >> loc) & 1:
            if (s.opened >> loc) & 1:
                acts[f"close {name}"] = (CLOSE, loc)
            else:
                acts[f"open {name}"] = (OPEN, loc)
                closed = True
        if not closed:
            if held < 0:
                onames = w.onames
                for o, at in enumerate(s.objloc):
                    if at == loc:
                        acts[f"take {onames[o]} from {name}"] = (TAKE, o, loc)
            else:
                acts[f"put {w.onames[held]} in/on {name}"] = (PUT, held, loc)
        verb = w.verbs[loc]
        if verb is not None and held >= 0:
            acts[f"{verb} {w.onames[held]} with {name}"] = (_VERB_OP[verb], held, loc)
        for k in w.lamps_here[loc]:
            acts[f"use {w.lamp_names[k]}"] = (USE, k)
        acts[f"examine {name}"] = (EXAMINE_R, loc)
    if held >= 0:
        acts[f"examine {w.onames[held]}"] = (EXAMINE_O, held)
    acts["inventory"] = (INVENTORY,)
    acts["look"] = (LOOK,)
    return acts


def admissible(w: World, s: HouseholdState) -> list[str]:
    """Every admissible command, "go to" commands first (all but the current location)."""
    go = w.go_cmds
    loc = s.loc
    head = list(go) if loc < 0 else [*go[:loc], *go[loc + 1 :]]
    head.extend(s.local)
    return head


def lookup(w: World, s: HouseholdState, command: str) -> tuple[int, ...] | None:
    """The op of an admissible ``command``, or None if it is not admissible now."""
    op = s.local.get(command)
    if op is not None:
        return op
    op = w.go_ops.get(command)
    if op is not None and op[1] != s.loc:
        return op
    return None


# ----------------------------------------------------------------------------- transitions
def _see(w: World, s: HouseholdState, r: int) -> None:
    for o in visible_objects(w, s, r):
        s.seen |= 1 << o


def _go(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    r = op[1]
    s.loc = r
    _see(w, s, r)
    return f"You arrive at {w.rnames[r]}. {describe(w, s, r)}"


def _open(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    r = op[1]
    s.opened |= 1 << r
    _see(w, s, r)
    name = w.rnames[r]
    items = [w.onames[o] for o in visible_objects(w, s, r)]
    return f"You open the {name}. The {name} is open. In it, you see {_listing(items)}."


def _close(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    s.opened &= ~(1 << op[1])
    return f"You close the {w.rnames[op[1]]}."


def _take(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    o, r = op[1], op[2]
    locs = list(s.objloc)
    locs[o] = HELD
    s.objloc = tuple(locs)
    s.held = o
    s.picked |= 1 << o
    return f"You pick up the {w.onames[o]} from the {w.rnames[r]}."


def _put(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    o, r = op[1], op[2]
    locs = list(s.objloc)
    locs[o] = r
    s.objloc = tuple(locs)
    s.held = -1
    return f"You put the {w.onames[o]} {w.preps[r]} the {w.rnames[r]}."


def _clean(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    s.clean |= 1 << op[1]
    return f"You clean the {w.onames[op[1]]} using the {w.rnames[op[2]]}."


def _heat(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    bit = 1 << op[1]
    s.hot |= bit
    s.cold &= ~bit
    return f"You heat the {w.onames[op[1]]} using the {w.rnames[op[2]]}."


def _cool(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    bit = 1 << op[1]
    s.cold |= bit
    s.hot &= ~bit
    return f"You cool the {w.onames[op[1]]} using the {w.rnames[op[2]]}."


def _use(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    bit = 1 << op[1]
    s.lamp_on ^= bit
    return f"You turn {'on' if s.lamp_on & bit else 'off'} the {w.lamp_names[op[1]]}."


def _examine_r(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    return describe(w, s, op[1])


def _examine_o(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    o = op[1]
    bit = 1 << o
    adjs = [a for a, mask in (("clean", s.clean), ("hot", s.hot), ("cool", s.cold)) if mask & bit]
    lit = any((s.lamp_on >> k) & 1 for k in w.lamps_here[s.loc]) if s.loc >= 0 else False
    light = " under the light of the desklamp" if lit else ""
    if adjs:
        return f"You look at the {w.onames[o]}{light}. It is {' and '.join(adjs)}."
    return f"You look at the {w.onames[o]}{light}. There's nothing special about it."


def _inventory(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    if s.held < 0:
        return "You are not carrying anything."
    return f"You are carrying: {_a(w.onames[s.held])}."


def _look(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    if s.loc < 0:
        return f"You are in the middle of a room. Looking quickly around you, you see {_listing(list(w.rnames))}."
    return f"You are at {w.rnames[s.loc]}. {describe(w, s, s.loc)}"


_HANDLERS: tuple[Callable[[World, HouseholdState, tuple[int, ...]], str], ...] = (
    _go, _open, _close, _take, _put, _clean, _heat, _cool, _use, _examine_r, _examine_o, _inventory, _look,
)  # fmt: skip

#: Opcodes that never change the world (their turn is a no-op by construction).
READ_ONLY = frozenset({EXAMINE_R, EXAMINE_O, INVENTORY, LOOK})


def apply(w: World, s: HouseholdState, op: tuple[int, ...]) -> str:
    """Apply an admissible op to ``s`` in place; return the observation text.

    Refreshes ``s.local`` (the next turn's admissible commands) and clears the cached key.
    """
    text = _HANDLERS[op[0]](w, s, op)
    if op[0] not in READ_ONLY:
        s.local = local_actions(w, s)
        s.key = None
    return text


# ----------------------------------------------------------------------------- invalid commands
def explain_invalid(w: World, s: HouseholdState, command: str) -> str:
    """Why ``command`` (normalized, not admissible) does nothing, in words an agent can act on."""
    shown = command if len(command) <= 60 else command[:57] + "..."
    if not command:
        return "Empty command: type one of the admissible actions."
    parts = split_command(command)
    if parts is None:
        return f"Unknown command {shown!r}: commands start with {', '.join(VERBS)}."
    verb, names = parts[0], parts[1:]
    known = {**{n: "r" for n in w.rnames}, **{n: "o" for n in w.onames}, **{n: "l" for n in w.lamp_names}}
    for name in names:
        if name not in known:
            return f"There is no {name} here."
    here = w.rnames[s.loc] if s.loc >= 0 else None
    held = w.onames[s.held] if s.held >= 0 else None
    recep = next((n for n in names if known[n] == "r"), None)
    obj = next((n for n in names if known[n] == "o"), None)
    if verb == "go to":
        if recep is None:
            return f"You cannot go to the {names[0]}: go to a receptacle."
        return f"You are already at {recep}." if recep == here else f"{shown!r} is not possible now."
    if verb == "use":
        if known[names[0]] != "l":
            return f"You cannot use the {names[0]}: only a desklamp can be used."
        host = w.rnames[w.lamp_at[w.lamp_names.index(names[0])]]
        return f"The {names[0]} is on the {host}: go to {host} first."
    if verb == "examine" and obj is not None:
        return f"Take the {obj} first to examine it." if obj != held else f"{shown!r} is not possible now."
    if recep is None or (verb in ("take", "put", "clean", "heat", "cool") and obj is None):
        return f"{shown!r} does not fit: see the admissible actions for the right form."
    if recep != here:
        return f"You are not at {recep}: go to {recep} first."
    r = w.rnames.index(recep)
    openable, is_open = (w.openable >> r) & 1, (s.opened >> r) & 1
    if verb in ("open", "close"):
        if not openable:
            return f"The {recep} cannot be opened or closed."
        return f"The {recep} is already {'open' if is_open else 'closed'}."
    if verb in ("clean", "heat", "cool"):
        appliance = APPLIANCE[verb]
        if w.rtypes[r] != appliance:
            return f"You can only {verb} something with a {appliance}."
        return f"You are not carrying the {obj}." if obj != held else f"{shown!r} is not possible now."
    if openable and not is_open:
        return f"The {recep} is closed: open it first."
    if verb == "take":
        if held is not None:
            return f"You are already carrying the {held}: put it somewhere first."
        return f"There is no {obj} {w.preps[r]} the {recep}."
    if verb == "put" and obj != held:
        return f"You are not carrying the {obj}."
    return f"{shown!r} is not possible now: choose one of the admissible actions."
