"""Household task generation: determinism, ids, splits, difficulty, solvable starts."""

from __future__ import annotations

import statistics

import pytest

from turngym.core.errors import TaskError
from turngym.envs.household.catalog import OBJECTS, RECEPTACLES
from turngym.envs.household.tasks import (
    SPLITS,
    TASK_TYPES,
    UNSEEN_LAYOUTS,
    HouseholdTask,
    combos,
    generate_task,
    generate_tasks,
    recep_type,
    task_from_id,
)


def _tasks(split: str, n: int = 40) -> list[HouseholdTask]:
    return [generate_task(seed, tt, split, 1 + seed % 3) for tt in TASK_TYPES for seed in range(n)]


@pytest.mark.parametrize("split", SPLITS)
def test_generation_is_deterministic_and_ids_regenerate(split: str) -> None:
    for task in _tasks(split, 10):
        assert generate_task(int(task.id.rsplit("/", 1)[1]), task.task_type, split, task.difficulty) == task
        assert task_from_id(task.id) == task


def test_different_seeds_give_different_tasks() -> None:
    tasks = [generate_task(s, "pick_place") for s in range(50)]
    assert len({(t.receptacles, t.objects, t.object_starts) for t in tasks}) > 45


def test_task_round_trips_through_dict() -> None:
    task = generate_task(11, "pick_two_place", "unseen", 3)
    assert HouseholdTask.from_dict(task.to_dict()) == task


@pytest.mark.parametrize("bad", ["household/seen/pick_place/1", "household/seen/fly/1/3", "household/other/pick_place/1/3", "x"])
def test_bad_task_ids_raise_task_error(bad: str) -> None:
    with pytest.raises(TaskError, match="expected"):
        task_from_id(bad)


def test_bad_arguments_raise() -> None:
    with pytest.raises(TaskError, match="task_type"):
        generate_task(0, "juggle")
    with pytest.raises(TaskError, match="difficulty"):
        generate_task(0, "pick_place", difficulty=4)


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_splits_partition_combinations(task_type: str) -> None:
    seen = {c[:2] for c in combos(task_type, "seen")}
    unseen = {c[:2] for c in combos(task_type, "unseen")}
    assert seen and unseen
    assert not seen & unseen


def test_unseen_tasks_use_held_out_combinations_and_layouts() -> None:
    held = {tt: {c[:2] for c in combos(tt, "unseen")} for tt in TASK_TYPES}
    for task in _tasks("seen"):
        assert task.layout not in UNSEEN_LAYOUTS
        assert (task.target, task.goal_receptacle) not in held[task.task_type]
    for task in _tasks("unseen"):
        assert task.layout in UNSEEN_LAYOUTS
        assert (task.target, task.goal_receptacle) in held[task.task_type]


@pytest.mark.parametrize("split", SPLITS)
def test_tasks_are_well_formed(split: str) -> None:
    for task in _tasks(split):
        types = [recep_type(r) for r in task.receptacles]
        assert len(set(task.receptacles)) == len(task.receptacles)
        assert len(set(task.objects)) == len(task.objects)
        assert len(task.objects) == len(task.object_starts)
        assert all(t in RECEPTACLES for t in types)
        targets = [i for i, o in enumerate(task.objects) if recep_type(o) == task.target]
        assert len(targets) >= task.count
        for i, o in enumerate(task.objects):
            assert types[task.object_starts[i]] in OBJECTS[recep_type(o)].found_in, (task.id, o)
        # the goal does not hold at the start: no target starts in a goal receptacle
        assert all(types[task.object_starts[i]] != task.goal_receptacle for i in targets)
        if task.goal_receptacle is not None:
            assert task.goal_receptacle in types
        if task.task_type == "look_in_light":
            assert task.lamps and task.goal_receptacle is None
        if task.task_type in ("pick_clean_place", "pick_heat_place", "pick_cool_place"):
            appliance = {"pick_clean_place": "sinkbasin", "pick_heat_place": "microwave", "pick_cool_place": "fridge"}
            assert appliance[task.task_type] in types
        assert task.prompt.startswith("-= Welcome to TextWorld, ALFRED! =-")
        assert task.meta["goal_text"] in task.prompt
        assert task.gold == {"task_type": task.task_type, "object": task.target, "receptacle": task.goal_receptacle, "count": task.count}


def test_difficulty_grows_the_room_and_the_clutter() -> None:
    by_difficulty = {d: [generate_task(s, "pick_place", "seen", d) for s in range(60)] for d in (1, 2, 3)}
    receptacles = [statistics.mean(len(t.receptacles) for t in by_difficulty[d]) for d in (1, 2, 3)]
    objects = [statistics.mean(len(t.objects) for t in by_difficulty[d]) for d in (1, 2, 3)]
    assert receptacles[0] < receptacles[1] < receptacles[2]
    assert objects[0] < objects[1] < objects[2]


def test_goals_are_paraphrased() -> None:
    goals = {generate_task(s, "pick_heat_place").meta["goal_text"].split(" ")[0] for s in range(60)}
    assert len(goals) >= 3  # "put", "heat", "warm", "microwave"


def test_generate_tasks_cycles_types_and_difficulties() -> None:
    tasks = generate_tasks(12, seed=5, task_types=("pick_place", "look_in_light"), difficulties=(1, 3))
    assert [t.task_type for t in tasks[:4]] == ["pick_place", "look_in_light"] * 2
    assert [t.difficulty for t in tasks[:4]] == [1, 1, 3, 3]
    assert len({t.id for t in tasks}) == 12


@pytest.mark.parametrize("split, size", [("seen", 140), ("unseen", 134)])
def test_eval_sets_are_fixed_and_cover_every_type(split: str, size: int) -> None:
    from turngym.envs.household.tasks import EVAL_SEED_BASE, eval_tasks

    tasks = eval_tasks(split)
    assert len(tasks) == size and tasks == eval_tasks(split)
    assert {t.task_type for t in tasks} == set(TASK_TYPES)
    assert {t.difficulty for t in tasks} == {1, 2, 3}
    assert all(int(t.id.rsplit("/", 1)[1]) >= EVAL_SEED_BASE for t in tasks)


def test_training_sampler_never_draws_eval_seeds() -> None:
    from turngym.envs.household.env import HouseholdEnv
    from turngym.envs.household.tasks import EVAL_SEED_BASE

    env = HouseholdEnv()
    for seed in range(200):
        _, info = env.reset(seed=seed)
        assert int(info["task_id"].rsplit("/", 1)[1]) < EVAL_SEED_BASE
