"""Household tasks: ALFWorld's six task types over seeded, generated rooms.

A task is plain data: the room's receptacles (``cabinet 3``), its objects (``apple 1``) and
where each starts, the desk lamps, and the goal (task type, object type, goal receptacle
type, how many). Nothing here simulates; ``world.py`` compiles a task into the fast engine.

**Generation.** ``generate_task(seed, task_type, split, difficulty)`` is a pure function of
its arguments, and the task id (``household/{split}/{task_type}/{difficulty}/{seed}``) encodes
all of them, so an id alone regenerates the task bit for bit. Difficulty (1–3) grows the
layout (more cabinets, drawers, shelves…), the number of distractor objects, and the chance
that the target hides in a closed container.

**Splits.** As ALFWorld's in-distribution ("seen") and out-of-distribution ("unseen") sets:
a fixed, hash-chosen quarter of the (task type, object, goal receptacle) combinations and
two of the ten layouts of every room are held out. ``seen`` tasks use neither; ``unseen``
tasks use a held-out combination *in* a held-out layout, so an agent trained on ``seen``
meets both new goals and new rooms.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from functools import cache

from turngym.core.errors import ConfigError, TaskError
from turngym.core.task import Task
from turngym.envs.household.catalog import LAMP_HOSTS, OBJECTS, RECEPTACLES, ROOMS

__all__ = [
    "HouseholdTask",
    "TASK_TYPES",
    "ALFWORLD_NAMES",
    "SPLITS",
    "N_LAYOUTS",
    "UNSEEN_LAYOUTS",
    "generate_task",
    "generate_tasks",
    "eval_tasks",
    "EVAL_SEED_BASE",
    "task_from_id",
    "combos",
    "recep_type",
]

#: The six task types, in ALFWorld's order (short names; see :data:`ALFWORLD_NAMES`).
TASK_TYPES: tuple[str, ...] = (
    "pick_place",
    "pick_clean_place",
    "pick_heat_place",
    "pick_cool_place",
    "look_in_light",
    "pick_two_place",
)
ALFWORLD_NAMES: dict[str, str] = {
    "pick_place": "pick_and_place_simple",
    "pick_clean_place": "pick_clean_then_place_in_recep",
    "pick_heat_place": "pick_heat_then_place_in_recep",
    "pick_cool_place": "pick_cool_then_place_in_recep",
    "look_in_light": "look_at_obj_in_light",
    "pick_two_place": "pick_two_obj_and_place",
}
SPLITS: tuple[str, ...] = ("seen", "unseen")
N_LAYOUTS = 10
UNSEEN_LAYOUTS: frozenset[int] = frozenset({8, 9})
_DIFFICULTIES = (1, 2, 3)

#: Which appliance and object flag each state-changing task type needs.
_PROPERTY_TASK = {"pick_clean_place": ("clean", "sinkbasin"), "pick_heat_place": ("heat", "microwave"), "pick_cool_place": ("cool", "fridge")}

_PARAPHRASES: dict[str, tuple[str, ...]] = {
    "pick_place": (
        "put {a} {o} {p} {r}.",
        "put some {o} {p} {r}.",
        "find {a} {o} and put it {p} {r}.",
        "place {a} {o} {p} {r}.",
        "move {a} {o} to the {r}.",
    ),
    "pick_clean_place": (
        "put a clean {o} {p} {r}.",
        "clean some {o} and put it {p} {r}.",
        "wash {a} {o}, then put it {p} {r}.",
        "rinse {a} {o} and place it {p} the {r}.",
    ),
    "pick_heat_place": (
        "put a hot {o} {p} {r}.",
        "heat some {o} and put it {p} {r}.",
        "warm up {a} {o}, then put it {p} {r}.",
        "microwave {a} {o} and place it {p} the {r}.",
    ),
    "pick_cool_place": (
        "put a cool {o} {p} {r}.",
        "cool some {o} and put it {p} {r}.",
        "chill {a} {o}, then put it {p} {r}.",
        "put {a} {o} in the fridge to cool it, then place it {p} the {r}.",
    ),
    "look_in_light": (
        "look at {o} under the desklamp.",
        "examine the {o} with the desklamp.",
        "pick up the {o} and turn on the desklamp to look at it.",
        "inspect {a} {o} by the light of the desklamp.",
    ),
    "pick_two_place": (
        "put two {os} {p} {r}.",
        "find two {os} and put them {p} {r}.",
        "place two {os} {p} the {r}.",
        "collect two {os} and put them {p} {r}.",
    ),
}

_ID_RE = re.compile(r"^household/(seen|unseen)/([a-z_]+)/([123])/(\d+)$")


def recep_type(name: str) -> str:
    """``"cabinet 3"`` -> ``"cabinet"`` (the type of a receptacle or object instance name)."""
    return name.rsplit(" ", 1)[0]


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _plural(word: str) -> str:
    """English plural of an object type (``knife`` -> ``knives``, ``box`` -> ``boxes``)."""
    if word.endswith("fe"):
        return word[:-2] + "ves"
    if word.endswith(("x", "s", "ch", "sh")) or word in ("potato", "tomato"):
        return word + "es"
    return word + "s"


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class HouseholdTask(Task):
    """One generated household episode: the room, where everything starts, and the goal.

    Attributes:
        task_type: one of :data:`TASK_TYPES`.
        room: ``kitchen``, ``livingroom``, ``bedroom`` or ``bathroom``.
        layout: layout id (0–9) of the room; ids in :data:`UNSEEN_LAYOUTS` are held out.
        difficulty: 1–3.
        receptacles: instance names in the room (``"cabinet 3"``), in the order the room lists them.
        objects: takeable object instance names (``"apple 1"``).
        object_starts: for each object, the index in ``receptacles`` it starts in.
        lamps: for each desk lamp (``"desklamp 1"``…), the receptacle it stands on.
        target: the object type the goal is about.
        goal_receptacle: the receptacle type it must end in (None for look_in_light).
        count: how many target objects must end there (2 for pick_two_place, else 1).
    """

    task_type: str = "pick_place"
    room: str = ""
    layout: int = 0
    difficulty: int = 1
    receptacles: tuple[str, ...] = ()
    objects: tuple[str, ...] = ()
    object_starts: tuple[int, ...] = ()
    lamps: tuple[int, ...] = ()
    target: str = ""
    goal_receptacle: str | None = None
    count: int = 1


# ----------------------------------------------------------------------------- combinations
@cache
def _all_combos(task_type: str) -> tuple[tuple[str, str | None, tuple[str, ...]], ...]:
    """Every (object type, goal receptacle type, rooms) a task type can be generated for."""
    out = []
    for obj in OBJECTS.values():
        if task_type == "look_in_light":
            if obj.lookable:
                rooms = tuple(
                    r for r in obj.rooms if any(h in ROOMS[r] for h in LAMP_HOSTS) and _spawnable(obj.name, None, ROOMS[r])
                )
                if rooms:
                    out.append((obj.name, None, rooms))
            continue
        prop = _PROPERTY_TASK.get(task_type)
        if prop is not None and not getattr(obj, prop[0]):
            continue
        for goal in obj.found_in:
            if prop is not None and goal == prop[1]:
                continue  # "put a clean apple in the sinkbasin" is not a task
            rooms = tuple(
                r
                for r in obj.rooms
                if goal in ROOMS[r] and (prop is None or prop[1] in ROOMS[r]) and _spawnable(obj.name, goal, ROOMS[r])
            )
            if rooms:
                out.append((obj.name, goal, rooms))
    return tuple(out)


def _spawnable(obj: str, goal: str | None, spec: dict[str, tuple[int, int]]) -> bool:
    return any(t in spec and t != goal for t in OBJECTS[obj].found_in)


@cache
def combos(task_type: str, split: str) -> tuple[tuple[str, str | None, tuple[str, ...]], ...]:
    """The (object, goal receptacle, rooms) combinations of ``task_type`` in ``split``.

    A combination is held out (unseen) when a stable hash of it is 0 mod 4; the two splits
    partition the combinations and both are non-empty for every task type.

    >>> seen, unseen = combos("pick_heat_place", "seen"), combos("pick_heat_place", "unseen")
    >>> len(seen) > len(unseen) > 0 and not {c[:2] for c in seen} & {c[:2] for c in unseen}
    True
    """
    _check_split(split)
    every = _all_combos(task_type)
    held = [c for c in every if _stable_hash(f"{task_type}/{c[0]}/{c[1]}") % 4 == 0]
    if not held:  # never leave a split empty
        held = [min(every, key=lambda c: _stable_hash(f"{task_type}/{c[0]}/{c[1]}"))]
    held_set = set(held)
    return tuple(held) if split == "unseen" else tuple(c for c in every if c not in held_set)


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")


# ----------------------------------------------------------------------------- layouts
@cache
def _layout(room: str, layout: int, difficulty: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Receptacle names and desk-lamp hosts of a room layout (a pure function of its args)."""
    rng = random.Random(f"household-layout/{room}/{layout}/{difficulty}")
    names: list[str] = []
    for rtype, (lo, hi) in ROOMS[room].items():
        n = rng.randint(lo, hi)
        extra = RECEPTACLES[rtype].repeat * (difficulty - 1)
        if extra and n:
            n += rng.randint(extra // 2, extra)
        names.extend(f"{rtype} {i}" for i in range(1, n + 1))
    rng.shuffle(names)
    hosts = [n for n in names if recep_type(n) in LAMP_HOSTS]
    lamp_hosts = tuple(rng.sample(hosts, 1 + (difficulty == 3 and len(hosts) > 1))) if hosts else ()
    return tuple(names), lamp_hosts


def _ensure(names: list[str], rtype: str) -> None:
    if not any(recep_type(n) == rtype for n in names):
        names.append(f"{rtype} 1")


# ----------------------------------------------------------------------------- generation
def generate_task(seed: int, task_type: str, split: str = "seen", difficulty: int = 1) -> HouseholdTask:
    """Generate the task ``household/{split}/{task_type}/{difficulty}/{seed}``.

    >>> t = generate_task(7, "pick_clean_place")
    >>> t.id, t.count, t.target in {o.rsplit(" ", 1)[0] for o in t.objects}
    ('household/seen/pick_clean_place/1/7', 1, True)
    >>> generate_task(7, "pick_clean_place") == t
    True
    """
    if task_type not in TASK_TYPES:
        raise TaskError(f"unknown task_type {task_type!r}; expected one of {TASK_TYPES}")
    _check_split(split)
    if difficulty not in _DIFFICULTIES:
        raise TaskError(f"difficulty must be 1, 2 or 3, got {difficulty!r}")
    task_id = f"household/{split}/{task_type}/{difficulty}/{seed}"
    rng = random.Random(task_id)
    target, goal, rooms = rng.choice(combos(task_type, split))
    room = rng.choice(rooms)
    layouts = sorted(UNSEEN_LAYOUTS) if split == "unseen" else [i for i in range(N_LAYOUTS) if i not in UNSEEN_LAYOUTS]
    layout = rng.choice(layouts)
    base, lamp_hosts = _layout(room, layout, difficulty)
    names = list(base)
    if goal is not None:
        _ensure(names, goal)
    prop = _PROPERTY_TASK.get(task_type)
    if prop is not None:
        _ensure(names, prop[1])
    types = [recep_type(n) for n in names]

    # Targets start anywhere they can be found except in a goal receptacle; harder layouts
    # favour closed containers.
    spots = [i for i, t in enumerate(types) if t in OBJECTS[target].found_in and t != goal]
    if not spots:
        spawn = next(t for t in OBJECTS[target].found_in if t in ROOMS[room] and t != goal)
        names.append(f"{spawn} {sum(t == spawn for t in types) + 1}")
        types.append(spawn)
        spots = [len(names) - 1]
    weights = [difficulty if RECEPTACLES[types[i]].openable else 1 for i in spots]
    n_targets = 2 + rng.randint(0, difficulty - 1) if task_type == "pick_two_place" else 1 + (rng.random() < 0.2 * difficulty)
    placed: list[tuple[str, int]] = [(target, rng.choices(spots, weights)[0]) for _ in range(n_targets)]

    # Distractors: other object types that belong in this room's receptacles.
    lo, hi = ((3, 6), (7, 12), (12, 20))[difficulty - 1]
    present = set(types)
    others = sorted(o.name for o in OBJECTS.values() if o.name != target and room in o.rooms and present & set(o.found_in))
    for _ in range(rng.randint(lo, hi)):
        kind = rng.choice(others)
        where = [i for i, t in enumerate(types) if t in OBJECTS[kind].found_in]
        placed.append((kind, rng.choice(where)))

    placed.sort(key=lambda p: p[0])
    counts: dict[str, int] = {}
    objects, starts = [], []
    for kind, where in placed:
        counts[kind] = counts.get(kind, 0) + 1
        objects.append(f"{kind} {counts[kind]}")
        starts.append(where)
    lamps = tuple(names.index(h) for h in lamp_hosts)

    template = rng.choice(_PARAPHRASES[task_type])
    p = RECEPTACLES[goal].prep if goal else ""
    goal_text = template.format(a=_article(target), o=target, os=_plural(target), p=p, r=goal or "")
    seen = ", ".join(f"{_article(n)} {n}" for n in names)
    prompt = (
        "-= Welcome to TextWorld, ALFRED! =-\n\n"
        f"You are in the middle of a room. Looking quickly around you, you see {seen}.\n\n"
        f"Your task is to: {goal_text}"
    )
    count = 2 if task_type == "pick_two_place" else 1
    return HouseholdTask(
        id=task_id,
        prompt=prompt,
        gold={"task_type": task_type, "object": target, "receptacle": goal, "count": count},
        meta={
            "split": split,
            "difficulty": difficulty,
            "room": room,
            "layout": layout,
            "alfworld_type": ALFWORLD_NAMES[task_type],
            "goal_text": goal_text,
        },
        task_type=task_type,
        room=room,
        layout=layout,
        difficulty=difficulty,
        receptacles=tuple(names),
        objects=tuple(objects),
        object_starts=tuple(starts),
        lamps=lamps,
        target=target,
        goal_receptacle=goal,
        count=count,
    )


def generate_tasks(
    n: int,
    *,
    seed: int = 0,
    split: str = "seen",
    task_types: tuple[str, ...] = TASK_TYPES,
    difficulties: tuple[int, ...] = _DIFFICULTIES,
) -> list[HouseholdTask]:
    """``n`` tasks cycling over ``task_types`` and ``difficulties``, seeds ``seed, seed+1, …``.

    >>> [t.task_type for t in generate_tasks(3, task_types=("pick_place", "look_in_light"))]
    ['pick_place', 'look_in_light', 'pick_place']
    """
    return [
        generate_task(seed + i, task_types[i % len(task_types)], split, difficulties[(i // len(task_types)) % len(difficulties)])
        for i in range(n)
    ]


#: Seeds of the fixed evaluation sets start here; samplers draw training seeds below it.
EVAL_SEED_BASE = 1 << 31
_EVAL_SIZES = {"seen": 140, "unseen": 134}  # ALFWorld's valid_seen / valid_unseen sizes


def eval_tasks(split: str = "unseen", n: int | None = None) -> list[HouseholdTask]:
    """The fixed evaluation set of ``split`` (140 seen / 134 unseen tasks, as ALFWorld's).

    Seeds start at :data:`EVAL_SEED_BASE`, above every seed an env samples for training, so
    evaluation tasks never appear in training.

    >>> tasks = eval_tasks("unseen")
    >>> len(tasks), tasks[0].id
    (134, 'household/unseen/pick_place/1/2147483648')
    """
    _check_split(split)
    return generate_tasks(_EVAL_SIZES[split] if n is None else n, seed=EVAL_SEED_BASE, split=split)


def task_from_id(task_id: str) -> HouseholdTask:
    """Regenerate a task from its id (``household/{split}/{task_type}/{difficulty}/{seed}``)."""
    m = _ID_RE.match(task_id)
    if m is None or m.group(2) not in TASK_TYPES:
        raise TaskError(
            f"unknown household task id {task_id!r}; expected 'household/{{seen|unseen}}/{{task_type}}/{{1-3}}/{{seed}}' "
            f"with task_type in {TASK_TYPES}"
        )
    return generate_task(int(m.group(4)), m.group(2), m.group(1), int(m.group(3)))
