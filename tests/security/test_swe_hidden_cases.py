"""SWE-v0's hidden cases (issue #38, item 3): a fix that only memorizes the visible tests is not resolved.

The memorizing attack (``scripts/swe_memorize_sweep.py``) reads ``tests/*.py`` and answers
every asserted call from a table, leaving the bug in place. On the seed-0 task it passes every
visible test (it was resolved, reward 1.0, before the hidden cases); the hidden cases, inputs
the tree never shows checked against the gold package, must turn it down there and on a
sample of tasks (the full sweep: ``python scripts/swe_memorize_sweep.py``). The hidden inputs
must never reach the tree, the grader's command line, or what the agent's ``run_tests`` shows;
a package that dies or stalls on them fails them without touching the tests' verdicts.
"""

import importlib.util
import json
import random
from pathlib import Path

import pytest

from turngym.envs.swe import testing
from turngym.envs.swe.env import SWEEnv
from turngym.envs.swe.grading import hidden_cases_of
from turngym.envs.swe.hidden import agree, hidden_spec
from turngym.envs.swe.repos import load_repo
from turngym.envs.swe.tasks import load_tasks
from turngym.envs.swe.verifier import measure

_SWEEP = Path(__file__).resolve().parents[2] / "scripts" / "swe_memorize_sweep.py"
_spec = importlib.util.spec_from_file_location("swe_memorize_sweep", _SWEEP)
assert _spec is not None and _spec.loader is not None
sweep_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep_script)

SEED0_TASK = "swe/unitconv/_from_celsius/flip_comparison/2242"

#: Appended to the buggy module: marks (prints, or dies) only when called by the hidden cases' driver.
_IN_HIDDEN = (
    "\nimport sys as _s\n"
    "def _in_hidden():\n"
    "    f = _s._getframe()\n"
    "    while f is not None:\n"
    "        if f.f_globals.get('__name__') == '_turngym_hidden':\n"
    "            return True\n"
    "        f = f.f_back\n"
    "    return False\n"
    "_orig_convert = convert\n"
    "def convert(value, src, dst):\n"
    "    if _in_hidden():\n"
    "        {action}\n"
    "    return _orig_convert(value, src, dst)\n"
)


@pytest.fixture(scope="module")
def tasks():
    return load_tasks()


@pytest.fixture(scope="module")
def seed0(tasks):
    return next(t for t in tasks if t.id == SEED0_TASK)


def test_the_memorizing_attack_passes_the_visible_tests_and_is_not_resolved(seed0):
    env = SWEEnv()
    env.reset(seed=0)
    assert env.task.id == SEED0_TASK  # the seed
    row = sweep_script.attack_episode(env, seed0)
    assert row["visible_tests_pass"], row  # what made it reward 1.0 before
    assert not row["resolved"] and row["hidden_failing"] > 0, row


def test_the_memorizing_attack_resolves_none_of_a_sample(tasks):
    sample = random.Random(38).sample(tasks, 10)
    out = sweep_script.sweep(sample)
    assert out["resolved"] == 0, out["resolved_ids"]


def test_every_shipped_task_has_hidden_cases(tasks):
    assert all(hidden_cases_of(t) is not None for t in tasks)


def test_hidden_cases_are_derived_from_the_seed():
    assert hidden_spec("inifile") == hidden_spec("inifile")
    assert hidden_spec("inifile", seed=1)["cases"] != hidden_spec("inifile")["cases"]


def test_floats_agree_within_a_relative_tolerance_and_nothing_else_does():
    assert agree([1.0, "a", {"k": [0.1 + 0.2]}], [1.0, "a", {"k": [0.3]}])
    assert not agree([0.3], [0.31]) and not agree([1], [True]) and not agree(["1"], [1]) and not agree([1, 2], [1])


class RecordingExecutor:
    """Test double around the real executor: records what each run got (tree, config, stdin)."""

    def __init__(self, inner):
        self.inner = inner
        self.seen: list[tuple[dict, dict, bytes]] = []

    def __call__(self, tree, config, stdin, timeout):
        self.seen.append((dict(tree.items()), dict(config), stdin))
        return self.inner(tree, config, stdin, timeout)


def test_hidden_inputs_travel_only_on_the_graders_stdin(seed0):
    spec = hidden_spec(seed0.repo)
    recorder = RecordingExecutor(testing.SandboxExecutor())
    tree = load_repo(seed0.repo).with_file("marker.py", "# a fresh tree: nothing cached\n")
    with testing.use_executor(recorder, scope="recording"):
        progress = measure(seed0, tree, tree)
    assert progress.resolved
    case_text = json.dumps(spec["cases"][7], sort_keys=True)
    assert any(case_text in stdin.decode() for _, _, stdin in recorder.seen)  # it did travel, on stdin
    for files, config, _ in recorder.seen:
        argv = json.dumps(config)
        assert "def run(" not in argv and case_text not in argv
        assert not any("def run(pkg, case)" in text or case_text in text for text in files.values())


def test_run_tests_shows_nothing_the_package_printed_during_the_hidden_cases(seed0):
    env = SWEEnv(tasks=[seed0])
    env.reset(options={"task": seed0})
    fixed = load_repo(seed0.repo)[seed0.path] + _IN_HIDDEN.replace("{action}", "print('SAW-A-HIDDEN-CASE', value, src, dst)")
    env.step(json.dumps({"name": "create_file", "arguments": {"path": seed0.path, "content": fixed, "overwrite": True}}))
    assert env.state.progress.resolved  # printing changes no answer
    obs, *_ = env.step(json.dumps({"name": "run_tests", "arguments": {}}))
    assert "SAW-A-HIDDEN-CASE" not in obs and "passed" in obs


@pytest.mark.parametrize("action", ["import os; os._exit(0)", "return 0.0", "return 'x' * (1 << 22)",
                                    pytest.param("while True: pass", marks=pytest.mark.slow)])  # waits out the deadline
def test_a_package_that_cheats_on_the_hidden_cases_fails_them_and_only_them(seed0, action):
    tree = load_repo(seed0.repo).with_file(seed0.path, load_repo(seed0.repo)[seed0.path] + _IN_HIDDEN.replace("{action}", action))
    progress = measure(seed0, tree, tree)
    assert progress.f2p_passing == 1.0 and progress.p2p_failing == 0.0 and progress.imports_ok, progress
    assert progress.hidden_failing > 0 and not progress.resolved
