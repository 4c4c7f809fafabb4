"""Red team for real SWE-bench instances' grading, played through ``env.step`` as an agent would.

The instance is a SWE-bench-format row over a real git clone (``tests/envs/swebench_fixture.py``),
loaded with ``SWEEnv(swebench=..., backend="local")``. Every attack leaves the bug in place and
tries to make the grader say ``resolved``: by the tree (a ``conftest.py``, ``sitecustomize``, a
top-level ``__init__.py``), or by the code under test, which the instance's tests import (walk
the heap to the runner's recorder and report passes through it, write MAC'd records to the
result pipe with ``ctypes``, disable the integrity checks and patch pytest, answer values that
equal anything, kill the reporter, fake the console and ``os._exit(0)``).

Before this file, SWE-bench instances were graded by the in-process runner (pytest beside the
code under test), and the heap/``ctypes`` forgeries resolved the instance: that runner is still
there behind ``grader="inprocess"``, and :func:`test_the_forgeries_resolve_under_the_in_process_grader`
keeps showing that they are real. The default, split grader runs the tests and the verdict in a
process the agent's code never shares; each attack there must end as the agent's failure
(reward 0, no ``infra_error``), while the gold patch still resolves.
"""

import json
import warnings

import pytest

from tests.envs.swebench_fixture import PATH, buggy_source, make_instance, package_path
from tests.security.test_swe_grader import FORCE_PASS_HOOK, FORGERIES, IMPORT_TIME
from turngym.core.errors import ConfigError
from turngym.envs.swe import testing
from turngym.envs.swe.env import SWEEnv
from turngym.envs.swe.grading import grading_tree

_ANY = (
    "class _Any:\n"
    "    def __eq__(self, other):\n        return True\n"
    "    def __ne__(self, other):\n        return False\n"
    "    def __bool__(self):\n        return True\n"
    "    __hash__ = object.__hash__\n"
)

#: Code-under-test payloads (appended to the buggy module) that forge a pass in the in-process
#: runner: its recorder and result pipe live in the process that runs them.
FORGED_IN_PROCESS = {
    name: FORGERIES[name]
    for name in ("gc_walk_to_the_recorder", "ctypes_write_to_the_result_channel", "disable_the_checks_then_monkeypatch_pytest")
} | {"values_that_equal_anything": _ANY + "Interval.length = property(lambda self: _Any())\n"}

#: Payloads the in-process runner's checks already caught: kept to show the split path does too.
CAUGHT_IN_PROCESS = {
    name: IMPORT_TIME[name]
    for name in ("exit0_after_forging_report", "kill_the_grader_parent", "forge_on_every_channel", "stack_walk_to_the_reporter")
}

#: A pytest plugin that reports every test passed except the grader's canary (which must fail).
FORCE_PASS_SPARING_THE_CANARY = (
    "import gc, pytest, _pytest.config\n"
    "class _Evil:\n"
    "    @pytest.hookimpl(hookwrapper=True)\n"
    "    def pytest_runtest_makereport(self, item, call):\n"
    "        outcome = yield\n"
    "        rep = outcome.get_result()\n"
    "        if 'canary' not in rep.nodeid:\n"
    "            rep.outcome, rep.longrepr = 'passed', None\n"
    "for _o in gc.get_objects():\n"
    "    if isinstance(_o, _pytest.config.Config):\n"
    "        _o.pluginmanager.register(_Evil(), 'evil')\n"
)

#: Files in the tree (the package left buggy).
TREE_ATTACKS = {
    "conftest_force_pass": {"conftest.py": FORCE_PASS_HOOK, "tests/conftest.py": FORCE_PASS_HOOK},
    "sitecustomize_and_pth": {"sitecustomize.py": FORCE_PASS_SPARING_THE_CANARY, "evil.pth": "import sitecustomize\n"},
    "helper_in_the_tests_dir": {"tests/helpers/__init__.py": FORCE_PASS_SPARING_THE_CANARY,
                                "tests/test_zz_extra.py": "import helpers\n\ndef test_x():\n    pass\n"},
}


@pytest.fixture(scope="module")
def instance(tmp_path_factory):
    return make_instance(tmp_path_factory.mktemp("swebench"))


@pytest.fixture(scope="module")
def env(instance):
    """The default: how a user loads SWE-bench instances."""
    data, repo = instance
    return SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo})


@pytest.fixture(scope="module")
def inprocess_env(instance):
    data, repo = instance
    with pytest.warns(UserWarning, match="forge"):
        return SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo}, grader="inprocess")


def _play(env: SWEEnv, files: dict[str, str]) -> dict:
    """One turn: write every file (overwriting), then submit; returns the final info with the reward."""
    env.reset(seed=0)
    calls = [{"name": "create_file", "arguments": {"path": p, "content": c, "overwrite": True}} for p, c in files.items()]
    obs, reward, terminated, _, info = env.step(json.dumps([*calls, {"name": "submit", "arguments": {}}]))
    assert terminated and info["action_valid"], obs
    return {"reward": reward, **info}


def _assert_not_resolved(info: dict) -> None:
    assert info["infra_error"] is None, info["infra_error"]  # the agent's failure, never a dropped episode
    assert info["reward"] == 0.0 and info["outcome"]["success"] is False, info["outcome"]
    assert info["signals"]["resolved"] == 0.0 and info["signals"]["f2p_passing"] < 1.0


@pytest.mark.parametrize("name", sorted(FORGED_IN_PROCESS))
def test_the_forgeries_resolve_under_the_in_process_grader(inprocess_env, name):
    """Today's in-process runner (the old default for SWE-bench) falls to each: the attacks are real."""
    testing._CACHE.clear()  # a split run of the same tree (another test) would answer the in-process question
    info = _play(inprocess_env, {PATH: buggy_source() + FORGED_IN_PROCESS[name]})
    assert info["reward"] == 1.0 and info["outcome"]["reason"] == "", info["outcome"]


@pytest.mark.parametrize("name", sorted(FORGED_IN_PROCESS) + [
    pytest.param(n, marks=pytest.mark.slow) for n in sorted(CAUGHT_IN_PROCESS)])  # SWE-v0's red team runs these in CI
def test_the_code_under_test_cannot_forge_an_swebench_verdict(env, name):
    payload = FORGED_IN_PROCESS.get(name) or CAUGHT_IN_PROCESS[name]
    _assert_not_resolved(_play(env, {PATH: buggy_source() + payload}))


@pytest.mark.parametrize("name", sorted(TREE_ATTACKS))
def test_the_tree_cannot_configure_the_swebench_grader(env, name):
    _assert_not_resolved(_play(env, TREE_ATTACKS[name]))


def test_gold_resolves_and_noop_does_not_under_the_split_grader(env):
    fixed = buggy_source().replace("return self.start - self.end", "return self.end - self.start")
    info = _play(env, {PATH: fixed})
    assert info["reward"] == 1.0 and info["infra_error"] is None, info["outcome"]
    info = _play(env, {"NOTES.md": "looked at it\n"})
    assert info["reward"] == 0.0 and info["signals"]["imports_ok"] == 1.0, info["outcome"]
    # a real fix carrying a forgery still resolves: the payload finds nothing to forge, and harms nothing
    info = _play(env, {PATH: fixed + FORGED_IN_PROCESS["gc_walk_to_the_recorder"]})
    assert info["reward"] == 1.0 and info["infra_error"] is None, info["outcome"]


def test_a_top_level_init_never_runs_in_the_judging_process(tmp_path):
    """With ``tests/__init__.py`` pytest imports the tests as a package and walks up: an agent's
    top-level ``__init__.py`` would be imported by the split grader itself while collecting
    (a forged pass before either layer below). The graded tree never holds one, and the runner
    given such a tree anyway refuses to import it (nothing of the tree outside the tests)."""
    data, repo = make_instance(tmp_path, layout="tests_package")
    env = SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo})
    task = env.tasks[0]
    start = env.start_tree(task)
    attack = {"__init__.py": FORCE_PASS_SPARING_THE_CANARY}
    raw = start.with_file(*next(iter(attack.items())))
    testing._CACHE.clear()
    run = testing.run_pytest(raw, sorted({*task.fail_to_pass, *task.pass_to_pass}), canary=True, split=True,
                             test_dirs=("tests",))
    assert not run.passed, (run.problem, sorted(run.passed))
    assert "__init__.py" not in grading_tree(task, raw, start)
    _assert_not_resolved(_play(env, attack))


def test_a_top_level_module_named_like_the_tests_package_is_dropped(tmp_path):
    """``tests.py`` beside a ``tests/`` package would be served from the code's process in its
    place (the suite breaks: an honest fix would fail); the graded tree never holds it."""
    data, repo = make_instance(tmp_path, layout="tests_package")
    env = SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo})
    fixed = buggy_source().replace("return self.start - self.end", "return self.end - self.start")
    assert _play(env, {PATH: fixed, "tests.py": "x = 1\n"})["reward"] == 1.0
    _assert_not_resolved(_play(env, {"tests.py": FORCE_PASS_SPARING_THE_CANARY}))


#: The package rewrites the data a test reads while it runs, or swaps the tests' directory for a
#: copy with forged data (a test reads files by path after the grader imported it).
DATA_ATTACKS = {
    "rewrite_the_expected_data": ("try:\n    open('tests/expected_length.txt', 'w').write('-3\\n')\n"
                                  "except OSError:\n    pass\n"),
    "swap_the_tests_directory": ("import os as _os, shutil as _sh\ntry:\n    _os.rename('tests', '_t')\n"
                                 "    _sh.copytree('_t', 'tests')\n    open('tests/expected_length.txt', 'w').write('-3\\n')\n"
                                 "except OSError:\n    pass\n"),
}


@pytest.fixture(scope="module")
def data_env(tmp_path_factory):
    data, repo = make_instance(tmp_path_factory.mktemp("swebench-data"), layout="data")
    return SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo})


@pytest.mark.parametrize("name", sorted(DATA_ATTACKS))
def test_the_package_cannot_rewrite_what_the_tests_read(data_env, name):
    _assert_not_resolved(_play(data_env, {PATH: buggy_source() + DATA_ATTACKS[name]}))


@pytest.mark.parametrize("name", sorted(DATA_ATTACKS))
def test_with_one_uid_the_package_still_cannot_rewrite_what_the_tests_read(data_env, name):
    """The split runner as one uid (a plain subprocess, as in Docker or a user namespace, where
    file permissions do not stand between the package and the tests' files): the package's
    process is Landlocked to write only to its temporary directory and /dev, so both attacks fail."""
    env = data_env
    task = env.tasks[0]
    start = env.start_tree(task)
    tree = grading_tree(task, start.with_file(PATH, buggy_source() + DATA_ATTACKS[name]), start)
    tests = sorted({*task.fail_to_pass, *task.pass_to_pass})
    with testing.use_executor(testing.subprocess_executor, scope="one-uid"):
        run = testing.run_pytest(tree, tests, canary=True, split=True, test_dirs=("tests",))
        honest = testing.run_pytest(grading_tree(task, env.gold_tree(task), start), tests, canary=True, split=True,
                                    test_dirs=("tests",))
    assert not set(task.fail_to_pass) & run.passed, run.output[-800:]
    assert set(tests) <= honest.passed, honest.problem


def test_a_package_reached_through_a_conftest_path_never_runs_in_the_judging_process(tmp_path):
    """The repository's own conftest puts ``src/`` on ``sys.path``: the tests' ``import intervals``
    would load the agent's code into the judging process (where it registers a force-pass plugin).
    The grader imports nothing of the tree but the tests and conftests, so the suite cannot even
    import the package there: the instance is refused at load, and an attacked tree passes nothing."""
    data, repo = make_instance(tmp_path, layout="src")
    with pytest.raises(ConfigError, match="gold patch does not resolve"):
        SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo}, grader="inprocess")
    task, path = env.tasks[0], package_path("src")
    start = env.start_tree(task)
    tree = start.with_file(path, start[path] + FORCE_PASS_SPARING_THE_CANARY)
    testing._CACHE.clear()
    run = testing.run_pytest(tree, sorted({*task.fail_to_pass, *task.pass_to_pass}), canary=True, split=True)
    assert not run.passed, (run.problem, sorted(run.passed))


def test_instances_the_split_grader_cannot_serve_are_refused_with_the_way_out(tmp_path):
    """Tests inside the package or a repository that is a package (refused before any run), and a
    suite that subclasses the package's class (the gold patch does not resolve through the
    proxies): each refusal names ``grader="inprocess"``, which then loads and grades the gold."""
    for layout, why in (("inside", "inside the package"), ("top_package", "top level is a package"),
                        ("subclass", "gold patch does not resolve")):
        data, repo = make_instance(tmp_path / layout, layout=layout)
        with pytest.raises(ConfigError, match=why) as err:
            SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo})
        assert 'grader="inprocess"' in str(err.value)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env = SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo}, grader="inprocess")
        assert any("forge" in str(w.message) for w in caught)
        fixed = buggy_source().replace("return self.start - self.end", "return self.end - self.start")
        assert _play(env, {PATH: fixed})["reward"] == 1.0
    with pytest.raises(ConfigError, match="grader must be one of"):
        SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo}, grader="trusted")
