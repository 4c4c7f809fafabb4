"""The base env's contract: info keys, invalid-action policies, budgets, snapshots, errors."""

import gymnasium
import numpy as np
import pytest

import turngym
from turngym.core import (
    INFO_KEYS,
    ConfigError,
    InvalidActionPolicy,
    ResetNeeded,
    RewardSpec,
    Signal,
    SnapshotError,
    Task,
    Transition,
    TurngymEnv,
)
from turngym.core.errors import InfraError, TaskError


class CounterEnv(TurngymEnv):
    """A test double: count to a target with "+1"; "boom" simulates infrastructure failure."""

    reward_spec = RewardSpec(
        signals=(Signal("closer", 0, 1, "verifiable", "moved towards the target"),),
        outcome="1 if the count reaches the target",
    )
    default_max_turns = 6

    def _sample_task(self, rng):
        return Task(id=f"count/{int(rng.integers(2, 5))}", prompt="count", gold=None)

    def _task_from_id(self, task_id):
        return Task(id=task_id, prompt="count")

    def _reset(self, task, options):
        self.state = {"n": 0, "target": int(task.id.split("/")[1])}
        return "0"

    def _step(self, action):
        if action == "boom":
            raise InfraError("worker died")
        if action != "+1":
            return Transition(obs="say +1", valid=False, invalid_reason="only '+1' is understood")
        self.state["n"] += 1
        done = self.state["n"] >= self.state["target"]
        return Transition(
            obs=str(self.state["n"]),
            terminated=done,
            signals={"closer": 1.0},
            outcome={"reward": 1.0, "success": True} if done else None,
        )

    def _state_key(self):
        return f"n={self.state['n']}"

    def _oracle_action(self):
        return "+1"


def test_counter_double_passes_check_env():
    turngym.check_env(CounterEnv())


def test_info_keys_and_outcome_only_on_final_turn():
    env = CounterEnv()
    env.reset(options={"task": "count/2"})
    _, r, term, trunc, info = env.step("+1")
    assert set(INFO_KEYS) <= set(info) and "outcome" not in info
    assert (r, term, trunc) == (0.0, False, False)
    _, r, term, trunc, info = env.step("+1")
    assert (r, term, trunc) == (1.0, True, False)
    assert info["outcome"] == {"reward": 1.0, "success": True}


@pytest.mark.parametrize(
    ("policy", "reward", "terminated"),
    [("penalize_and_continue", -0.5, False), ("continue", 0.0, False), ("terminate", -0.5, True)],
)
def test_invalid_action_policies(policy, reward, terminated):
    env = CounterEnv(invalid_action_policy=policy, invalid_action_penalty=-0.5)
    env.reset(options={"task": "count/3"})
    obs, r, term, trunc, info = env.step("hello")
    assert (r, term, trunc) == (reward, terminated, False)
    assert info["action_valid"] is False and "only '+1'" in info["invalid_reason"]
    assert obs == "say +1"
    if terminated:
        assert info["outcome"]["success"] is False


def test_non_string_action_is_invalid_not_an_exception():
    env = CounterEnv()
    env.reset(seed=0)
    *_, info = env.step(123)  # type: ignore[arg-type]
    assert info["action_valid"] is False


def test_budget_truncates_and_never_both_flags():
    env = CounterEnv(max_turns=2)
    env.reset(options={"task": "count/4"})
    env.step("x")
    _, r, term, trunc, info = env.step("+1")
    assert (term, trunc) == (False, True)
    assert info["outcome"]["success"] is False and info["outcome"]["reason"] == "max_turns"
    # reaching the target on the last allowed turn is a termination, not a truncation
    env.reset(options={"task": "count/2"})
    env.step("+1")
    _, _, term, trunc, _ = env.step("+1")
    assert (term, trunc) == (True, False)


def test_step_after_end_raises_reset_needed():
    env = CounterEnv()
    with pytest.raises(ResetNeeded):
        env.step("+1")
    env.reset(options={"task": "count/2"})
    env.step("+1")
    env.step("+1")
    with pytest.raises(ResetNeeded, match="reset"):
        env.step("+1")


def test_infra_error_ends_episode_unscored():
    env = CounterEnv()
    env.reset(options={"task": "count/3"})
    obs, r, term, trunc, info = env.step("boom")
    assert term and r == 0.0
    assert info["infra_error"] == "worker died"
    assert info["outcome"]["reason"] == "infra_error"


def test_public_state_key_reads_the_family_hook_and_matches_info():
    env = CounterEnv()  # implements only the _state_key hook, as docs/write_your_own_env.md shows
    _, info = env.reset(options={"task": "count/3"})
    assert env.state_key() == info["state_key"] == "n=0"
    *_, info = env.step("+1")
    assert env.state_key() == info["state_key"] == env._state_key() == "n=1"


def test_snapshot_restore_is_exact_and_reusable():
    env = CounterEnv()
    env.reset(seed=1, options={"task": "count/4"})
    env.step("+1")
    snap = env.snapshot()
    env.step("+1")
    env.step("+1")
    env.restore(snap)
    assert env.turn == 1 and env.state["n"] == 1
    env.step("+1")
    env.restore(snap)  # the snapshot was not aliased by the steps after the first restore
    assert env.state["n"] == 1
    # the RNG travels with the snapshot: draws after restore repeat
    a = env.np_random.random()
    env.restore(snap)
    assert env.np_random.random() == a


def test_restore_into_other_env_class_fails():
    from turngym.envs.math.env import MathEnv

    math_env = MathEnv()
    math_env.reset(seed=0)
    env = CounterEnv()
    env.reset(seed=0)
    with pytest.raises(SnapshotError, match="MathEnv"):
        env.restore(math_env.snapshot())


def test_reset_validates_options_and_config():
    env = CounterEnv()
    with pytest.raises(ConfigError, match="unknown option"):
        env.reset(options={"tsk": "count/2"})
    with pytest.raises(ConfigError, match="Task or a task id"):
        env.reset(options={"task": 3})
    with pytest.raises(ConfigError, match="max_turns"):
        CounterEnv(max_turns=0)
    with pytest.raises(ConfigError, match="invalid_action_policy"):
        CounterEnv(invalid_action_policy="explode")
    assert CounterEnv(invalid_action_policy=InvalidActionPolicy.TERMINATE).invalid_action_policy.value == "terminate"


def test_signal_and_spec_validation():
    with pytest.raises(ConfigError, match="snake_case"):
        Signal("Bad Name", 0, 1, "verifiable", "x")
    with pytest.raises(ConfigError, match="kind"):
        Signal("x", 0, 1, "guess", "x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="low <= high"):
        Signal("x", 1, 0, "verifiable", "x")
    with pytest.raises(ConfigError, match="twice"):
        RewardSpec(signals=(Signal("a", 0, 1, "verifiable", ""), Signal("a", 0, 1, "verifiable", "")), outcome="")
    spec = CounterEnv.reward_spec
    assert spec.violations({"closer": 2.0}) == ["signal closer=2.0 outside [0, 1]"]
    assert spec.violations({"closer": 0.5}) == []
    assert any("undeclared" in v for v in spec.violations({"closer": 0, "x": 1}))
    assert any("missing" in v for v in spec.violations({}))
    assert any("outside" in v for v in spec.violations({"closer": float("nan")}))


def test_checker_catches_broken_envs():
    class NonDeterministic(CounterEnv):
        def _reset(self, task, options):
            super()._reset(task, options)
            return str(np.random.random())  # global RNG: forbidden

    class BadSignals(CounterEnv):
        def _step(self, action):
            t = super()._step(action)
            t.signals = {"closer": 5.0}
            return t

    class DoubleReward(CounterEnv):  # pays the outcome twice on the final turn
        def step(self, action):
            obs, r, term, trunc, info = super().step(action)
            return obs, r + (info["outcome"]["reward"] if "outcome" in info else 0.0), term, trunc, info

    class OutOfRange(CounterEnv):
        def _step(self, action):
            t = super()._step(action)
            if t.outcome is not None:
                t.outcome = {"reward": 3.0, "success": True}
            return t

    with pytest.raises(turngym.EnvCheckError, match="not the outcome's reward"):
        turngym.check_env(DoubleReward(), gymnasium_checks=False)
    with pytest.raises(turngym.EnvCheckError, match="outside the declared outcome_range"):
        turngym.check_env(OutOfRange(), gymnasium_checks=False)
    with pytest.raises(turngym.EnvCheckError, match="different episodes"):
        turngym.check_env(NonDeterministic(), gymnasium_checks=False)
    with pytest.raises(turngym.EnvCheckError, match="outside"):
        turngym.check_env(BadSignals(), gymnasium_checks=False)


def test_text_space_contains_any_unicode():
    env = CounterEnv()
    assert env.observation_space.contains("héllo 🙂")
    assert not env.observation_space.contains(b"bytes")
    assert isinstance(env.action_space.sample(), str)
    assert isinstance(env.action_space, gymnasium.spaces.Text)


class _WordTask(Task):
    """A task type of its own, to exercise the base's task-type check."""


class PoolEnv(TurngymEnv[_WordTask, dict]):
    """A test double: a fixed task pool, a state signal ("progress") and an outcome reward of 0.5."""

    reward_spec = RewardSpec(
        signals=(
            Signal("progress", 0, 1, "verifiable", "letters typed so far", potential=True),
            Signal("typed", 0, 1, "verifiable", "a letter was typed"),
        ),
        outcome="0.5 when the word is typed",
        outcome_range=(0.0, 0.5),
        success_threshold=0.5,
    )
    task_type = _WordTask
    default_max_turns = 8

    def __init__(self, words=("ab", "abc"), **kwargs):
        super().__init__(**kwargs)
        self._set_task_pool([_WordTask(id=f"word/{w}", prompt=w, gold=w) for w in words] if words is not None else None)

    def _reset(self, task, options):
        self.state = {"n": 0}
        return task.prompt

    def _state_signals(self):
        return {"progress": self.state["n"] / len(self.current_task.gold)}

    def _step(self, action):
        word = self.current_task.gold
        if action != word[self.state["n"]]:
            return Transition(obs="wrong letter", valid=False, invalid_reason=f"type {word[self.state['n']]!r}")
        self.state["n"] += 1
        if self.state["n"] == len(word):
            return Transition(obs="done", terminated=True, signals={"typed": 1.0}, outcome={"reward": 0.5, "success": True})
        return Transition(obs="ok", signals={"typed": 1.0})

    def _state_key(self):
        return f"{self.current_task.id}:{self.state['n']}"

    def _oracle_action(self):
        return self.current_task.gold[self.state["n"]]


def test_pool_env_passes_check_env():
    turngym.check_env(PoolEnv())


def test_task_pool_lookup_and_unknown_ids():
    env = PoolEnv()
    obs, info = env.reset(options={"task": "word/abc"})
    assert obs == "abc" and info["task_id"] == "word/abc"
    with pytest.raises(TaskError, match=r"unknown task id 'word/zz' \(this env has 2 tasks"):
        env.reset(options={"task": "word/zz"})
    with pytest.raises(ConfigError, match="tasks is empty"):
        PoolEnv(words=())
    with pytest.raises(ConfigError, match="does not generate tasks"):
        PoolEnv(words=None).reset(seed=0)


def test_wrong_task_type_is_one_task_error():
    env = PoolEnv()
    with pytest.raises(TaskError, match="PoolEnv needs a _WordTask, got Task"):
        env.reset(options={"task": Task(id="x", prompt="x")})
    with pytest.raises(ConfigError, match="must hold _WordTask"):
        env._set_task_pool([Task(id="x", prompt="x")])


def test_oracle_and_current_task_before_reset_raise_reset_needed():
    env = PoolEnv()
    with pytest.raises(ResetNeeded, match="reset"):
        env.oracle_action()
    with pytest.raises(ResetNeeded, match="reset"):
        _ = env.current_task


def test_state_signals_on_every_stepped_turn_and_reward_from_outcome():
    env = PoolEnv(invalid_action_penalty=-0.25)
    env.reset(options={"task": "word/ab"})
    _, r, *_, info = env.step("a")
    assert info["signals"] == {"progress": 0.5, "typed": 1.0} and r == 0.0
    _, r, *_, info = env.step("x")  # invalid: the family sent no signals, the state signal is still there
    assert info["signals"] == {"progress": 0.5, "typed": 0.0} and r == -0.25
    _, r, term, _, info = env.step("b")
    assert term and info["signals"]["progress"] == 1.0
    assert r == info["outcome"]["reward"] == 0.5  # written once, in the outcome
