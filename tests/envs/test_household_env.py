"""turngym/Household-v0: the contract, the action grammar, and the signals on hand-built rooms."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import turngym
from turngym.core.errors import ConfigError
from turngym.envs.household.env import HouseholdEnv
from turngym.envs.household.tasks import HouseholdTask

ENV_IDS = ("turngym/Household-v0", "turngym/Household-Unseen-v0")


def _task(task_type: str, target: str, goal: str | None, receptacles, objects, starts, lamps=(), count=1) -> HouseholdTask:
    return HouseholdTask(
        id=f"test/{task_type}/{len(receptacles)}/{len(objects)}",
        prompt=f"Your task is to: {task_type} {target}.",
        task_type=task_type,
        room="kitchen",
        receptacles=tuple(receptacles),
        objects=tuple(objects),
        object_starts=tuple(starts),
        lamps=tuple(lamps),
        target=target,
        goal_receptacle=goal,
        count=count,
    )


KITCHEN = ("countertop 1", "cabinet 1", "microwave 1", "fridge 1", "diningtable 1", "sinkbasin 1")
HEAT = _task("pick_heat_place", "apple", "diningtable", KITCHEN, ("apple 1", "apple 2", "mug 1"), (0, 1, 0))
TWO = _task("pick_two_place", "apple", "diningtable", KITCHEN, ("apple 1", "apple 2", "mug 1"), (0, 1, 0), count=2)
LOOK = _task("look_in_light", "book", None, ("desk 1", "drawer 1", "bed 1"), ("book 1", "pen 1"), (2, 0), lamps=(0,))


def _env(task: HouseholdTask, **kwargs) -> HouseholdEnv:
    env = HouseholdEnv(**kwargs)
    env.reset(seed=0, options={"task": task})
    return env


def _step(env: HouseholdEnv, action: str) -> tuple[str, float, bool, bool, dict]:
    out = env.step(action)
    assert out[4]["action_valid"], (action, out[4]["invalid_reason"])
    return out


# ----------------------------------------------------------------------------- contract
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_passes(env_id: str) -> None:
    turngym.check_env(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_make_and_checker(env_id: str) -> None:
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id)
    assert env.spec.max_episode_steps is None and env.unwrapped.max_turns == 50
    check_env(env.unwrapped, skip_render_check=True)


def test_split_is_chosen_by_constructor_or_id() -> None:
    assert turngym.make("turngym/Household-v0").split == "seen"
    assert turngym.make("turngym/Household-Unseen-v0").split == "unseen"
    env = turngym.make("turngym/Household-v0", split="unseen")
    _, info = env.reset(seed=1)
    assert info["task_id"].startswith("household/unseen/")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"split": "train"}, "split"),
        ({"task_types": ("juggle",)}, "task_types"),
        ({"task_types": ()}, "task_types"),
        ({"difficulties": (0,)}, "difficulties"),
        ({"tasks": []}, "tasks is empty"),
    ],
)
def test_bad_config_raises(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        HouseholdEnv(**kwargs)


def test_same_seed_same_episode_and_task_ids_replay() -> None:
    env = HouseholdEnv()
    obs1, info1 = env.reset(seed=42)
    obs2, info2 = env.reset(seed=42)
    assert (obs1, info1) == (obs2, info2)
    obs3, _ = env.reset(options={"task": info1["task_id"]})
    assert obs3 == obs1


def test_task_types_and_difficulties_restrict_sampling() -> None:
    env = HouseholdEnv(task_types=("look_in_light",), difficulties=(3,))
    for seed in range(5):
        _, info = env.reset(seed=seed)
        assert info["task_id"].startswith("household/seen/look_in_light/3/")


def test_fixed_task_list() -> None:
    env = HouseholdEnv(tasks=[HEAT, LOOK])
    ids = {env.reset(seed=s)[1]["task_id"] for s in range(10)}
    assert ids == {HEAT.id, LOOK.id}


# ----------------------------------------------------------------------------- actions
def test_observation_lists_exactly_the_admissible_actions() -> None:
    env = _env(HEAT)
    obs, *_ = _step(env, "go to countertop 1")
    listed = obs.split("Admissible actions: ", 1)[1].split(", ")
    assert listed == env.admissible_actions()
    assert "take apple 1 from countertop 1" in listed and "take mug 1 from countertop 1" in listed
    assert "go to countertop 1" not in listed and "go to fridge 1" in listed


def test_every_admissible_action_is_valid_and_others_are_not() -> None:
    env = _env(HEAT)
    _step(env, "go to countertop 1")
    snap = env.snapshot()
    for action in env.admissible_actions():
        env.restore(snap)
        assert env.step(action)[4]["action_valid"], action
    for action in ("take apple 2 from cabinet 1", "open countertop 1", "heat apple 1 with microwave 1", "use desklamp 1"):
        env.restore(snap)
        assert not env.step(action)[4]["action_valid"], action


def test_show_admissible_false_hides_the_list() -> None:
    env = HouseholdEnv(show_admissible=False)
    obs, _ = env.reset(options={"task": HEAT})
    assert "Admissible" not in obs
    obs, *_ = env.step("go to fridge 1")
    assert obs == "You arrive at fridge 1. The fridge 1 is closed."
    assert env.admissible_actions()  # still available to code


@pytest.mark.parametrize(
    "action",
    [
        "Go To Countertop 1.",
        "  go   to countertop 1 ",
        "> go to countertop 1",
        "I should look there. <action>go to countertop 1</action>",
        "go to the countertop 1",
        "walk to countertop 1",
    ],
)
def test_spelling_variants_are_accepted(action: str) -> None:
    env = _env(HEAT)
    obs, _, _, _, info = env.step(action)
    assert info["action_valid"], info["invalid_reason"]
    assert obs.startswith("You arrive at countertop 1.")


@pytest.mark.parametrize("put", ["put apple 1 in/on countertop 1", "put apple 1 on countertop 1", "move apple 1 to countertop 1", "place apple 1 on the countertop 1"])
def test_put_aliases(put: str) -> None:
    env = _env(HEAT)
    _step(env, "go to countertop 1")
    _step(env, "pick up apple 1 from countertop 1")
    obs, *_ = _step(env, put)
    assert obs.startswith("You put the apple 1 on the countertop 1.")


GOT_APPLE = ("go to countertop 1", "take apple 1 from countertop 1")


@pytest.mark.parametrize(
    "actions, bad, reason",
    [
        ((), "take apple 1 from countertop 1", "You are not at countertop 1: go to countertop 1 first."),
        ((), "fly to the moon", "Unknown command 'fly to the moon'"),
        ((), "go to cabinet 9", "There is no cabinet 9 here."),
        ((), "", "Empty command"),
        ((), "go to apple 1", "go to a receptacle"),
        (("go to cabinet 1",), "take apple 2 from cabinet 1", "The cabinet 1 is closed: open it first."),
        (("go to cabinet 1", "open cabinet 1"), "open cabinet 1", "already open"),
        (("go to countertop 1",), "open countertop 1", "cannot be opened"),
        (("go to countertop 1",), "take apple 2 from countertop 1", "There is no apple 2 on the countertop 1."),
        (GOT_APPLE, "take mug 1 from countertop 1", "already carrying the apple 1"),
        (GOT_APPLE, "put mug 1 in/on countertop 1", "You are not carrying the mug 1."),
        (GOT_APPLE, "heat apple 1 with countertop 1", "only heat something with a microwave"),
        (GOT_APPLE + ("go to microwave 1",), "heat mug 1 with microwave 1", "not carrying the mug 1"),
        ((), "use desklamp 1", "There is no desklamp 1 here."),
        (("go to countertop 1",), "examine mug 1", "Take the mug 1 first"),
        (("go to countertop 1",), "go to countertop 1", "already at countertop 1"),
    ],
)
def test_invalid_actions_are_part_of_the_episode(actions: tuple[str, ...], bad: str, reason: str) -> None:
    env = _env(HEAT)
    for a in actions:
        _step(env, a)
    key = env.state_key()
    obs, reward, term, trunc, info = env.step(bad)
    assert not info["action_valid"] and reason in info["invalid_reason"]
    assert obs.startswith("Nothing happens.")
    assert reward == pytest.approx(-0.1) and not term and not trunc
    assert info["signals"]["invalid_action"] == 1.0
    assert info["state_key"] == key


def test_one_object_at_a_time_and_closed_containers_hide_contents() -> None:
    env = _env(HEAT)
    obs, *_ = _step(env, "go to cabinet 1")
    assert obs.startswith("You arrive at cabinet 1. The cabinet 1 is closed.")
    assert "take apple 2 from cabinet 1" not in env.admissible_actions()
    obs, *_ = _step(env, "open cabinet 1")
    assert "In it, you see an apple 2." in obs
    _step(env, "take apple 2 from cabinet 1")
    assert not any(a.startswith("take ") for a in env.admissible_actions())
    obs, *_ = _step(env, "inventory")
    assert obs.startswith("You are carrying: an apple 2.")


# ----------------------------------------------------------------------------- signals
def test_signals_along_a_heat_task_with_an_undo() -> None:
    env = _env(HEAT)
    sig = lambda a: _step(env, a)[4]["signals"]  # noqa: E731
    s = sig("go to cabinet 1")
    assert s["target_seen"] == 0.0 and s["noop"] == 0.0  # closed: nothing seen
    assert sig("open cabinet 1")["target_seen"] == 1.0
    assert sig("go to countertop 1")["target_seen"] == 0.0  # apple 1: the one apple needed was already seen
    assert sig("go to cabinet 1")["revisit"] == 1.0  # back to the world right after opening it: a loop
    s = sig("take apple 2 from cabinet 1")
    assert s["target_picked"] == 1.0 and s["goal_condition"] == 0.0
    sig("go to microwave 1")
    s = sig("heat apple 2 with microwave 1")
    assert (s["state_changed"], s["goal_condition"], s["progress"]) == (1.0, 0.5, 0.5)
    s = sig("heat apple 2 with microwave 1")  # again: nothing changes
    assert (s["noop"], s["state_changed"], s["goal_condition"]) == (1.0, 0.0, 0.0)
    sig("go to fridge 1")
    s = sig("cool apple 2 with fridge 1")  # undoes "heated"
    assert (s["regression"], s["progress"], s["goal_condition"]) == (0.5, 0.0, 0.0)
    sig("go to microwave 1")
    s = sig("heat apple 2 with microwave 1")
    assert (s["goal_condition"], s["state_changed"], s["revisit"]) == (0.5, 0.0, 1.0)  # back to a known state
    sig("go to diningtable 1")
    obs, reward, term, trunc, info = _step(env, "put apple 2 in/on diningtable 1")
    assert term and not trunc and reward == 1.0
    assert info["signals"]["goal_condition"] == 0.5 and info["signals"]["progress"] == 1.0
    assert info["outcome"] == {"reward": 1.0, "success": True, "goal_condition_rate": 1.0, "task_type": "pick_heat_place"}


def test_taking_a_placed_object_back_is_a_regression() -> None:
    env = _env(TWO)
    for a in ("go to countertop 1", "take apple 1 from countertop 1", "go to diningtable 1"):
        _step(env, a)
    s = _step(env, "put apple 1 in/on diningtable 1")[4]["signals"]
    assert s["goal_condition"] == 0.5 and s["progress"] == 0.5
    s = _step(env, "take apple 1 from diningtable 1")[4]["signals"]
    assert s["regression"] == 0.5 and s["target_picked"] == 0.0 and s["progress"] == 0.0
    s = _step(env, "put apple 1 in/on diningtable 1")[4]["signals"]
    assert s["goal_condition"] == 0.5 and s["revisit"] == 1.0


def test_look_in_light_signals_and_lamp_toggle() -> None:
    env = _env(LOOK)
    s = _step(env, "go to desk 1")[4]["signals"]
    obs = env.step("look")[0]
    assert obs.startswith("You are at desk 1. On the desk 1, you see a desklamp 1, and a pen 1.")
    s = _step(env, "use desklamp 1")[4]["signals"]
    assert s["state_changed"] == 1.0 and s["progress"] == 0.0
    obs, _, _, _, info = _step(env, "use desklamp 1")
    assert obs.startswith("You turn off the desklamp 1.")
    assert info["signals"]["revisit"] == 1.0 and info["signals"]["state_changed"] == 0.0
    s = _step(env, "go to bed 1")[4]["signals"]
    assert s["target_seen"] == 1.0
    s = _step(env, "take book 1 from bed 1")[4]["signals"]
    assert s["goal_condition"] == 0.5 and s["target_picked"] == 1.0
    s = _step(env, "put book 1 in/on bed 1")[4]["signals"]
    assert s["regression"] == 0.5
    _step(env, "take book 1 from bed 1")
    _step(env, "go to desk 1")
    obs, reward, term, _, info = _step(env, "use desklamp 1")
    assert term and reward == 1.0 and info["outcome"]["success"]


def test_read_only_commands_are_noops_with_unchanged_state() -> None:
    env = _env(HEAT)
    _step(env, "go to countertop 1")
    key = env.state_key()
    for action in ("look", "inventory", "examine countertop 1"):
        _, _, _, _, info = _step(env, action)
        assert info["signals"]["noop"] == 1.0 and info["signals"]["revisit"] == 0.0
        assert info["state_key"] == key


def test_examine_reports_object_state() -> None:
    env = _env(HEAT)
    for a in ("go to countertop 1", "take apple 1 from countertop 1", "go to sinkbasin 1", "clean apple 1 with sinkbasin 1"):
        _step(env, a)
    assert _step(env, "examine apple 1")[0].startswith("You look at the apple 1. It is clean.")


def test_truncation_reports_goal_condition_rate() -> None:
    env = _env(HEAT, max_turns=8)
    for a in ("go to countertop 1", "take apple 1 from countertop 1", "go to microwave 1", "heat apple 1 with microwave 1"):
        _step(env, a)
    info = {}
    for _ in range(4):
        _, reward, term, trunc, info = env.step("look")
    assert trunc and not term and reward == 0.0
    assert info["outcome"]["goal_condition_rate"] == 0.5 and info["outcome"]["success"] is False


# ----------------------------------------------------------------------------- state keys, snapshots
def test_state_key_ignores_history() -> None:
    a, b = _env(HEAT), _env(HEAT)
    for act in ("go to cabinet 1", "open cabinet 1", "go to fridge 1", "go to countertop 1"):
        _step(a, act)
    for act in ("go to cabinet 1", "open cabinet 1", "go to countertop 1"):
        _step(b, act)
    assert a.state_key() == b.state_key()  # different paths (and memories), same world
    c = _env(HEAT)
    _step(c, "go to countertop 1")
    assert c.state_key() != a.state_key()  # cabinet 1 still closed
    _step(c, "go to cabinet 1")
    key = c.state_key()
    _step(c, "open cabinet 1")
    assert c.state_key() != key
    _step(c, "close cabinet 1")
    assert c.state_key() == key


def test_snapshot_restore_is_exact_and_isolated() -> None:
    env = HouseholdEnv()
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(5):
        env.step(env.sample_action(rng))
    snap = env.snapshot()
    key, actions = env.state_key(), env.admissible_actions()
    runs = []
    for _ in range(2):
        env.restore(snap)
        assert env.state_key() == key and env.admissible_actions() == actions
        r = np.random.default_rng(7)
        runs.append([env.step(env.sample_action(r))[::2] for _ in range(10)])
    assert runs[0] == runs[1]
    env.restore(snap)  # the snapshot survived two branches
    assert env.state_key() == key and env.admissible_actions() == actions


def test_restore_into_another_task_env() -> None:
    env1, env2 = _env(HEAT), _env(LOOK)
    _step(env1, "go to countertop 1")
    snap = env1.snapshot()
    env2.restore(snap)
    assert env2.admissible_actions() == env1.admissible_actions()
    assert env2.step("take apple 1 from countertop 1")[4]["signals"]["target_picked"] == 1.0


def test_sample_action_draws_admissible_actions() -> None:
    env = HouseholdEnv()
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(30):
        action = env.sample_action(rng)
        assert action in env.admissible_actions()
        *_, term, trunc, info = env.step(action)
        assert info["action_valid"]
        if term or trunc:
            break


def test_snapshots_pickle_for_other_processes() -> None:
    import pickle

    env = _env(HEAT)
    for a in ("go to cabinet 1", "open cabinet 1", "take apple 2 from cabinet 1"):
        _step(env, a)
    snap = pickle.loads(pickle.dumps(env.snapshot()))
    other = HouseholdEnv()
    other.restore(snap)
    assert other.state_key() == env.state_key()
    assert other.admissible_actions() == env.admissible_actions()
    assert other.step("examine apple 2")[0] == env.step("examine apple 2")[0]


def test_envs_in_threads_do_not_interfere() -> None:
    from concurrent.futures import ThreadPoolExecutor

    def play(worker: int) -> list[bool]:
        env = HouseholdEnv()
        wins = []
        for seed in range(30):
            env.reset(seed=1000 * worker + seed)
            for _ in range(env.max_turns):
                *_, term, trunc, info = env.step(env.oracle_action())
                if term or trunc:
                    break
            wins.append(info["outcome"]["success"])
        return wins

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(play, range(4)))
    assert all(all(r) for r in results)


@pytest.mark.parametrize("task_type", ["pick_place", "pick_heat_place", "look_in_light", "pick_two_place"])
def test_invariants_under_random_play(task_type: str) -> None:
    """Conservation laws every step: one place per object, Σ(gained − undone) = progress."""
    env = HouseholdEnv(task_types=(task_type,), difficulties=(1,), max_turns=150)
    rng = np.random.default_rng(3)
    for seed in range(15):
        env.reset(seed=seed)
        net = 0.0
        for _ in range(env.max_turns):
            *_, term, trunc, info = env.step(env.sample_action(rng))
            s, sig = env.state, info["signals"]
            carried = [o for o, at in enumerate(s.objloc) if at == -1]
            assert carried == ([s.held] if s.held >= 0 else [])
            assert all(-1 <= at < len(env.world.rnames) for at in s.objloc)
            net += sig["goal_condition"] - sig["regression"]
            assert net == pytest.approx(sig["progress"])
            assert not (sig["noop"] and sig["revisit"])
            if term or trunc:
                break
