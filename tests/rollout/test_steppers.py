"""One scheduler, three steppers: the same seeds and agent give the same episodes whether the envs
run in this process, on an env server (``turngym serve`` on loopback) or in Ray actors — groups,
rewards, trees and every kind of infrastructure failure included."""

from __future__ import annotations

import functools
import json
import sys
from typing import Any

import pytest

import turngym
from turngym.agents import OracleAgent, RandomAgent
from turngym.agents.base import Action
from turngym.core.errors import ConfigError, InfraError
from turngym.envs.math.env import MathEnv
from turngym.rollout import run_episodes, run_tree
from turngym.rollout.steppers import LocalStepper, RemoteStepper, as_stepper
from turngym.rollout.types import group_id

ray = pytest.importorskip("ray", reason="ray not installed (pip install 'turngym[ray]')")
pytest.importorskip("websockets", reason="the env server needs turngym[server]")

from turngym.core.registry import unregister  # noqa: E402
from turngym.rollout.ray_stepper import RayStepper  # noqa: E402
from turngym.server.testing import ServerThread  # noqa: E402

FLAKY = "turngym/FlakyMath-v0"
BUGGY = "turngym/BuggyMath-v0"
MAX_TURNS = 10


class FlakyMath(MathEnv):
    """Test double: the math env whose infrastructure fails on purpose.

    Seed 3 cannot even reset (its sandbox pool is exhausted); seed 5's second step loses its
    sandbox. Module-level, so the server's worker processes and Ray actors can build it.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"max_turns": MAX_TURNS, **kwargs})
        self.flaky = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed == 3:
            raise InfraError("sandbox pool exhausted")
        self.flaky = seed == 5
        return super().reset(seed=seed, options=options)

    def _step(self, action: str) -> Any:
        if self.flaky and self.turn == 2:  # counted before _step runs
            raise InfraError("sandbox died")
        return super()._step(action)


def _deep_bug(what: str) -> None:
    raise RecursionError(f"maximum recursion depth exceeded ({what}; test double)")


class BuggyMath(MathEnv):
    """Test double: the math env with bugs, exceptions that are not turngym's (unlike FlakyMath).

    Seed 4 cannot reset (a ``KeyError`` from a corrupted task table); seed 2's first step raises
    ``RecursionError`` (what a 40 KB expression did to Code-v0's ``compile()``).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"max_turns": MAX_TURNS, **kwargs})
        self.buggy = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed == 4:
            raise KeyError("task table corrupted")
        self.buggy = seed == 2
        return super().reset(seed=seed, options=options)

    def _step(self, action: str) -> Any:
        if self.buggy:
            _deep_bug("in _step")
        return super()._step(action)


@pytest.fixture(scope="module", autouse=True)
def _flaky_registered():
    """The test double is registered only while this module runs: suites that iterate over every
    registered env (check_env, fuzzing, the server's equality tests) must not meet it."""
    turngym.register(FLAKY, f"{__name__}:FlakyMath", description="math with failing infrastructure (test double)",
                     max_turns=MAX_TURNS, family="math")
    turngym.register(BUGGY, f"{__name__}:BuggyMath", description="math with env bugs (test double)",
                     max_turns=MAX_TURNS, family="math")
    yield
    unregister(FLAKY)
    unregister(BUGGY)


class ModelServerDown:
    """Test double: ``agent``, except that the model server fails on the first turn of ``episode``."""

    def __init__(self, agent: Any, episode: str) -> None:
        self.agent, self.episode, self.name, self.privileged = agent, episode, "flaky-model", True
        self.failed = False

    def act(self, batch: list[Any]) -> list[Action]:
        actions = self.agent.act(batch)
        for i, inp in enumerate(batch):
            if inp.episode_id == self.episode and not self.failed:
                self.failed = True
                actions[i] = Action("", meta={"infra_error": "model server unreachable"})
        return actions


@pytest.fixture(scope="module")
def local_ray():
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # actors build this module's test env
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def server():
    with ServerThread([FLAKY, BUGGY, "turngym/Math-v0"], factories={FLAKY: FlakyMath, BUGGY: BuggyMath}, max_sessions=64) as srv:
        yield srv


def _dicts(episodes):
    return [json.loads(json.dumps(ep.to_dict())) for ep in episodes]


def _steppers(server, env_id):
    factory = {FLAKY: FlakyMath, BUGGY: BuggyMath}.get(env_id) or functools.partial(turngym.make, env_id)
    return {
        "local": lambda: turngym.make(env_id),
        "remote": RemoteStepper(server.url, env_id, retries=0),
        "ray": RayStepper(factory, num_workers=2),
    }


@pytest.mark.parametrize("agent", ["oracle", "random"])
def test_every_stepper_plays_the_same_episodes(local_ray, server, agent):
    seeds = list(range(8))
    out = {}
    for name, envs in _steppers(server, FLAKY).items():
        inner = OracleAgent() if agent == "oracle" else RandomAgent(seed=3)
        policy = ModelServerDown(inner, f"{group_id(FLAKY, 6)}/1")
        finished = []
        out[name] = run_episodes(envs, policy, seeds, batch_size=5, group_size=2, env_id=FLAKY,
                                 on_episode=finished.append)
        assert len(finished) == 2 * len(seeds)
    assert _dicts(out["remote"]) == _dicts(out["local"])
    assert _dicts(out["ray"]) == _dicts(out["local"])

    eps = out["local"]
    assert [ep.group for ep in eps] == [group_id(FLAKY, s) for s in seeds for _ in range(2)]
    assert [ep.episode_id for ep in eps] == [f"{group_id(FLAKY, s)}/{g}" for s in seeds for g in range(2)]
    by_seed = {(ep.seed, ep.episode_id[-1]): ep for ep in eps}
    # a reset that failed: unscored, no turns; a step that failed: ends the episode, unscored
    assert all(by_seed[(3, g)].meta["infra_error"] == "sandbox pool exhausted" and not by_seed[(3, g)].turns
               for g in "01")
    for g in "01":  # (unless the agent answered at once)
        ep = by_seed[(5, g)]
        assert len(ep.turns) == (2 if agent == "oracle" else len(ep.turns)) and ep.turns[-1].terminated
        assert ep.turns[-1].infra_error == ("sandbox died" if len(ep.turns) == 2 else None)
    # the model server failed: that episode alone ends at once, unscored, the env never stepped
    down = by_seed[(6, "1")]
    assert [t.infra_error for t in down.turns] == ["policy: model server unreachable"]
    assert down.turns[0].state_key == down.turns[0].prev_state_key and down.outcome["reason"] == "infra_error"
    assert by_seed[(6, "0")].infra_error is None
    scored = [ep for ep in eps if ep.infra_error is None]
    assert len(scored) == 2 * len(seeds) - 3 - sum(len(by_seed[(5, g)].turns) == 2 for g in "01")
    if agent == "oracle":
        assert all(ep.success for ep in scored)


def test_every_stepper_grows_the_same_trees(local_ray, server):
    out = {}
    for name, envs in _steppers(server, "turngym/Math-v0").items():
        out[name] = run_tree(envs, RandomAgent(seed=1), [0, 1], branching=(2, 2), env_id="turngym/Math-v0").episodes
    assert 4 <= len(out["local"]) <= 8 and {ep.group for ep in out["local"]} == {group_id("turngym/Math-v0", s) for s in (0, 1)}
    assert _dicts(out["remote"]) == _dicts(out["local"])
    assert _dicts(out["ray"]) == _dicts(out["local"])


def test_ray_stepper_passes_env_kwargs_and_tasks(local_ray):
    env_id = "turngym/Math-v0"
    env = turngym.make(env_id)
    task_ids = [env.reset(seed=s)[1]["task_id"] for s in (5, 6, 7)]
    stepper = RayStepper(env_id, env_kwargs={"max_turns": 2}, num_workers=1)
    eps = run_episodes(stepper, RandomAgent(seed=0), [0, 1, 2], tasks=task_ids, env_id=env_id)
    assert [ep.task_id for ep in eps] == task_ids
    assert [ep.group for ep in eps] == [group_id(env_id, s, t) for s, t in zip([0, 1, 2], task_ids, strict=True)]
    assert all(len(ep.turns) <= 2 for ep in eps)


class _KillerOracle:
    """Test double: the oracle, except that at turn ``at`` it kills the actor behind the first env."""

    name = "killer-oracle"
    privileged = True

    def __init__(self, at: int) -> None:
        self.oracle = OracleAgent()
        self.turns = 0
        self.at = at

    def act(self, batch):
        self.turns += 1
        if self.turns == self.at:
            ray.kill(batch[0].env.worker, no_restart=True)
        return self.oracle.act(batch)


def test_a_dead_env_worker_is_an_infra_error_and_the_rollout_goes_on(local_ray):
    env_id = "turngym/Math-v0"
    seeds = list(range(12))
    eps = run_episodes(RayStepper(env_id, num_workers=2), _KillerOracle(at=3), seeds, batch_size=4, env_id=env_id)
    assert [ep.seed for ep in eps] == seeds
    lost = [ep for ep in eps if ep.infra_error]
    kept = [ep for ep in eps if not ep.infra_error]
    assert lost and kept
    assert all(ep.success for ep in kept)  # the live worker's episodes are scored as usual
    in_flight = [ep for ep in lost if ep.turns]
    assert in_flight and all(ep.turns[-1].state_key == ep.turns[-1].prev_state_key for ep in in_flight)
    local = {ep.seed: ep for ep in run_episodes(lambda: turngym.make(env_id), OracleAgent(), seeds, env_id=env_id)}
    assert _dicts(kept) == _dicts([local[ep.seed] for ep in kept])


def test_anything_else_is_refused_with_the_fix():
    assert isinstance(as_stepper(lambda: None), LocalStepper)
    with pytest.raises(ConfigError, match="env factory"):
        run_episodes("turngym/Math-v0", OracleAgent(), [0])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="num_workers"):
        RayStepper("turngym/Math-v0", num_workers=0)


class _ChoiceRecorder:
    """Test double policy: records each input's choices and plays a fixed pick among them."""

    name = "choice-recorder"

    def __init__(self) -> None:
        self.seen: list[tuple[str, ...] | None] = []

    def act(self, batch):
        for inp in batch:
            self.seen.append(inp.choices)
        return [Action(inp.choices[len(self.seen) % len(inp.choices)] if inp.choices else "look") for inp in batch]


def test_ray_actors_report_each_envs_choices(local_ray):
    env_id = "turngym/Household-v0"
    made = functools.partial(turngym.make, env_id, max_turns=4)
    out, seen = {}, {}
    for name, envs in {"local": made, "ray": RayStepper(made, num_workers=2)}.items():
        policy = _ChoiceRecorder()
        out[name] = run_episodes(envs, policy, [0, 1, 2], batch_size=3)
        tree_policy = _ChoiceRecorder()  # restored branches: the restored state's choices
        out[name] += run_tree(envs if name == "local" else RayStepper(made, num_workers=2), tree_policy, [4],
                              branching=(2, 2), env_id=env_id).episodes
        seen[name] = policy.seen + tree_policy.seen
    assert len(seen["ray"]) >= 12 and all(seen["ray"])
    assert seen["ray"] == seen["local"]
    assert _dicts(out["ray"]) == _dicts(out["local"])
    assert all(t.action_valid for ep in out["ray"] for t in ep.turns)


@pytest.mark.parametrize("where", ["local", "remote", "ray"])
def test_an_env_bug_ends_only_its_episode_as_an_infra_error_with_its_traceback(local_ray, server, where):
    """An exception out of one env's step or reset (an env bug) ends that episode unscored, keeps
    the traceback, and the batch goes on, on every stepper; the run's rate is reported and bounded."""
    from turngym.core.errors import TooManyInfraErrors
    from turngym.rollout import check_infra_error_rate, summarize

    seeds = list(range(8))
    eps = run_episodes(_steppers(server, BUGGY)[where], OracleAgent(), seeds, batch_size=4, env_id=BUGGY)
    assert [ep.seed for ep in eps] == seeds
    by_seed = {ep.seed: ep for ep in eps}
    stepped = by_seed[2]
    assert len(stepped.turns) == 1 and stepped.outcome["reason"] == "infra_error"
    assert stepped.turns[0].infra_error.startswith("env bug: step() raised")
    assert "RecursionError" in stepped.turns[0].infra_error
    assert "_deep_bug" in stepped.meta["infra_traceback"]  # the env's own frames, from wherever it ran
    reset = by_seed[4]
    assert not reset.turns and "KeyError" in reset.infra_error and reset.meta["infra_traceback"]
    others = [ep for s, ep in by_seed.items() if s not in (2, 4)]
    assert all(ep.success and ep.infra_error is None for ep in others)  # the batch went on, scored as usual
    summary = summarize(eps)
    assert (summary.infra_errors, summary.infra_error_rate, summary.scored_episodes) == (2, 0.25, 6)
    assert check_infra_error_rate(eps, 0.25) == 0.25
    with pytest.raises(TooManyInfraErrors, match=r"2 of 8 episodes .*above max_infra_error_rate=0.1; the first .*/2/0.*infra_traceback"):
        check_infra_error_rate(eps, 0.1)


def test_a_bad_task_at_reset_is_still_the_callers_error():
    """Only env bugs become infra errors: a turngym error at reset (a bad task) is the caller's, raised."""
    with pytest.raises(ConfigError):
        run_episodes(lambda: turngym.make("turngym/Math-v0"), OracleAgent(), [0], tasks=[{"nonsense": 1}], env_id="m")


def test_eval_reports_and_bounds_the_infra_error_rate(tmp_path, capsys):
    from turngym.cli import main

    out = tmp_path / "eval"
    assert main(["eval", BUGGY, "--episodes", "8", "--quiet", "--out", str(out)]) == 3  # 2 of 8 > 0.1
    assert "2 of 8 episodes of this evaluation (25.0%)" in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["infra_error_rate"] == 0.25  # written before failing
    assert main(["eval", BUGGY, "--episodes", "8", "--quiet", "--max-infra-error-rate", "0.25"]) == 0
    assert "2 infra errors, excluded: 25.0%" in capsys.readouterr().out


def test_training_logs_and_bounds_the_runs_infra_error_rate(tmp_path):
    from turngym.core.errors import TooManyInfraErrors
    from turngym.trainers import TrainConfig, Trainer

    eps = run_episodes(lambda: turngym.make(BUGGY), OracleAgent(), list(range(8)), env_id=BUGGY)
    trainer = Trainer(TrainConfig(max_infra_error_rate=0.3), tmp_path / "run", log=None)
    assert trainer._count_infra_errors(eps) == (2, 0.25)
    fine = [ep for ep in eps if not ep.infra_error]
    assert trainer._count_infra_errors(fine) == (0, 2 / 14)  # the run's share so far, not the batch's
    with pytest.raises(TooManyInfraErrors, match="this run's RL rollouts"):
        trainer._count_infra_errors([ep for ep in eps if ep.infra_error] * 2)  # 6 of 18
    with pytest.raises(TooManyInfraErrors, match="nothing is left to train on"):
        Trainer(TrainConfig(max_infra_error_rate=1.0), tmp_path / "run2", log=None)._count_infra_errors([eps[2]])
    with pytest.raises(ConfigError, match="max_infra_error_rate"):
        TrainConfig(max_infra_error_rate=1.5)


def test_an_env_bug_in_a_tree_ends_only_its_paths():
    tree = run_tree(lambda: turngym.make(BUGGY), RandomAgent(seed=0), [2, 0, 4], branching=(2,), env_id=BUGGY)
    by_seed: dict[int, list] = {}
    for ep in tree.episodes:
        by_seed.setdefault(ep.seed, []).append(ep)
    assert len(by_seed[2]) == 2 and all("RecursionError" in ep.infra_error and "_deep_bug" in ep.meta["infra_traceback"] for ep in by_seed[2])
    assert by_seed[0] and all(ep.infra_error is None for ep in by_seed[0])  # the other tree grew as usual
    assert len(by_seed[4]) == 1 and "KeyError" in by_seed[4][0].infra_error  # its reset failed: one unscored episode
