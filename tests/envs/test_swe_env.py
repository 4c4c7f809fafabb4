"""SWE env: mutation operators, the test runner, task validity, tools, signals, oracle, loader."""

import json
import random

import numpy as np
import pytest

import turngym
from tests.envs.swebench_fixture import make_instance
from turngym.agents import OracleAgent
from turngym.core.errors import ConfigError, InfraError, TaskError
from turngym.envs.swe import swebench
from turngym.envs.swe.env import SWEEnv
from turngym.envs.swe.grading import validate_task
from turngym.envs.swe.mutations import OPERATORS, propose_mutations
from turngym.envs.swe.repos import REPO_NAMES, Tree, load_repo, repos_dir
from turngym.envs.swe.tasks import load_tasks
from turngym.envs.swe.testing import SandboxExecutor, run_pytest, use_executor
from turngym.envs.swe.tools import validate_args
from turngym.rollout import run_episodes
from turngym.sandbox import BubblewrapSandbox, Limits, SandboxUnavailable

SAMPLE = '''\
def clamp(x, lo=0, hi=10):
    """Keep x in [lo, hi]."""
    if lo > hi:
        raise ValueError("empty range")
    if x < lo:
        return lo
    elif x > hi:
        return hi
    else:
        return x


def total(xs):
    return sum(xs) + len(xs) - 1 if xs and True else max(0, 1)
'''


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


@pytest.fixture(scope="module")
def tasks():
    return load_tasks()


def test_mutation_operators_make_minimal_valid_edits():
    muts = propose_mutations("m.py", SAMPLE)
    ops = {m.operator for m in muts}
    assert {"flip_comparison", "off_by_one", "remove_guard", "drop_branch", "wrong_default", "swap_operator", "swap_arguments"} <= ops
    assert ops <= set(OPERATORS)
    for m in muts:
        buggy = m.apply(SAMPLE)
        assert buggy != SAMPLE
        compile(buggy, "m.py", "exec")
        assert '"""Keep x in [lo, hi]."""' in buggy  # docstrings are never mutated
        first, last = m.func_lines
        assert first in (1, 13)
    flip = next(m for m in muts if m.operator == "flip_comparison" and "x <= lo" in m.apply(SAMPLE))
    assert flip.apply(SAMPLE).count("\n") == SAMPLE.count("\n")
    guard = next(m for m in muts if m.operator == "remove_guard" and "empty range" not in m.apply(SAMPLE))
    assert "if lo > hi" not in guard.apply(SAMPLE)
    default = next(m for m in muts if m.operator == "wrong_default")
    assert "hi=11" in default.apply(SAMPLE) or "lo=1" in default.apply(SAMPLE)


def test_every_shipped_repo_passes_its_suite():
    for name in REPO_NAMES:
        run = run_pytest(load_repo(name))
        assert run.imports_ok and not run.failed and len(run.passed) >= 20, name


def test_runner_reports_failures_collection_errors_and_timeouts():
    tree = load_repo("lrucache")
    path = "lrucache/__init__.py"
    broken = tree.with_file(path, tree[path].replace("if total else 0.0", "if total else 1.0"))
    run = run_pytest(broken)
    assert run.failed == {"tests/test_lrucache.py::test_hit_rate_empty"}
    assert "assert 1.0 == 0.0" in dict(run.messages)["tests/test_lrucache.py::test_hit_rate_empty"]
    assert not run_pytest(tree.with_file(path, tree[path] + "\nthis is not python(\n")).imports_ok
    loop = tree.with_file("tests/test_loop.py", "def test_forever():\n    while True:\n        pass\n")
    run = run_pytest(loop, ["tests/test_loop.py"], timeout=2)
    assert run.timed_out and not run.imports_ok


def test_tree_digest_and_copy_on_write():
    a = Tree({"x.py": "1", "y.py": "2"})
    b = a.with_file("x.py", "1")
    c = a.with_file("x.py", "3")
    assert a.digest == b.digest != c.digest and a["x.py"] == "1"


def test_shipped_tasks_are_many_and_diverse(tasks):
    assert len(tasks) >= 200
    assert {t.repo for t in tasks} == set(REPO_NAMES)
    assert len({t.operator for t in tasks}) >= 5
    for t in tasks:
        assert t.fail_to_pass and t.gold.startswith("--- a/")
        assert t.buggy_source.count(t.gold_old) == 1
        assert "```" in t.prompt


def test_problem_statements_come_from_behaviour_not_the_diff(tasks):
    for t in tasks[:50]:
        assert t.fail_to_pass[0] in t.prompt
        # the diff's changed lines never appear verbatim in the statement
        changed = [ln[1:].strip() for ln in t.gold.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---")) and len(ln.strip()) > 12]
        assert not any(c in t.prompt for c in changed), t.id


def test_sample_of_tasks_validates(tasks):
    for t in random.Random(0).sample(tasks, 6):
        assert validate_task(t) == [], t.id


@pytest.mark.slow
def test_every_task_validates(tasks):
    bad = {t.id: p for t in tasks if (p := validate_task(t))}
    assert not bad


def test_tools_and_schema_validation(tasks):
    assert validate_args("replace", {"path": "a", "old": "b"}) == "replace: missing argument(s) ['new']"
    assert "unknown tool" in validate_args("rm", {})
    assert "must be integer" in validate_args("view_file", {"path": "a", "start": "1"})
    assert "unknown argument" in validate_args("list_dir", {"path": ".", "x": 1})
    env = SWEEnv(tasks=tasks[:5])
    env.reset(options={"task": tasks[0]})
    obs, _, _, _, info = env.step(call("list_dir"))
    assert "tests/" in obs and info["signals"]["tool_ok"] == 1.0
    obs, _, _, _, info = env.step(call("view_file", path=tasks[0].path, start=1, end=3))
    assert "   1 | " in obs and "[showing lines 1-3" in obs
    obs, _, _, _, info = env.step(call("view_file", path="../etc/passwd"))
    assert info["signals"]["tool_ok"] == 0.0 and info["action_valid"]
    obs, _, _, _, info = env.step(call("search", pattern="def "))
    assert f"{tasks[0].path}:" in obs
    obs, _, _, _, info = env.step(call("replace", path=tasks[0].path, old="def ", new="def  "))
    assert "exactly once" in obs and info["signals"]["tool_ok"] == 0.0
    obs, _, _, _, info = env.step("please fix it")
    assert info["action_valid"] is False
    obs, _, _, _, info = env.step(call("view_file"))
    assert info["action_valid"] is False and "missing" in info["invalid_reason"]


def test_a_file_where_a_directory_is_is_a_failed_call_not_a_crash(tasks):
    env = SWEEnv(tasks=tasks[:1])
    env.reset(options={"task": tasks[0]})
    *_, info = env.step(call("create_file", path="notes", content="x"))
    obs, *_, info = env.step(call("create_file", path="notes/more.txt", content="y"))
    assert info["signals"]["tool_ok"] == 0.0 and "directory" in obs
    obs, *_, info = env.step(call("create_file", path="tests", content="z", overwrite=True))
    assert info["signals"]["tool_ok"] == 0.0 and info["infra_error"] is None


def test_signals_follow_the_repair(tasks):
    task = next(t for t in tasks if len(t.fail_to_pass) >= 1 and t.pass_to_pass)
    env = SWEEnv(tasks=[task])
    _, info = env.reset(options={"task": task})
    start_key = info["state_key"]
    # an unrelated edit: the tree changes, the bug stays, no localization
    other = next(p for p in env.state.tree if p.startswith("tests/"))
    *_, info = env.step(call("create_file", path="NOTES.md", content="hi"))
    assert info["state_key"] != start_key and info["signals"]["touched_buggy_function"] == 0.0
    assert info["signals"]["f2p_passing"] == 0.0 and info["signals"]["imports_ok"] == 1.0
    # the gold fix: localized, all FAIL_TO_PASS pass, no regression
    *_, info = env.step(call("replace", path=task.path, old=task.gold_old, new=task.gold_new))
    assert info["signals"]["touched_buggy_function"] == 1.0
    assert info["signals"]["f2p_passing"] == 1.0 and info["signals"]["p2p_failing"] == 0.0
    # breaking the package: imports_ok drops, regressions appear
    snap = env.snapshot()
    *_, info = env.step(call("create_file", path=task.path, content="raise ImportError('x')\n", overwrite=True))
    assert info["signals"]["imports_ok"] == 0.0 and info["signals"]["p2p_failing"] == 1.0
    env.restore(snap)
    _, r, term, _, info = env.step(call("submit"))
    assert (r, term, info["signals"]["resolved"]) == (1.0, True, 1.0)
    assert other  # the repo has tests


def test_check_env():
    turngym.check_env(turngym.make("turngym/SWE-v0"), n_garbage=60)


def test_oracle_resolves_and_do_nothing_does_not(tasks):
    sample = random.Random(1).sample(tasks, 8)
    env = SWEEnv(tasks=sample)
    eps = run_episodes(lambda: env, OracleAgent(), list(range(8)), batch_size=1, tasks=sample)
    assert all(ep.success for ep in eps) and all(len(ep.turns) == 4 for ep in eps)
    for t in sample[:6]:
        env.reset(options={"task": t})
        *_, r, term, _, info = env.step(call("submit"))
        assert term and r == 0.0 and not info["outcome"]["success"]


@pytest.mark.slow
def test_oracle_resolves_200_tasks(tasks):
    sample = random.Random(2).sample(tasks, min(200, len(tasks)))
    env = SWEEnv(tasks=sample)
    eps = run_episodes(lambda: env, OracleAgent(), list(range(len(sample))), batch_size=1, tasks=sample)
    assert sum(ep.success for ep in eps) == len(sample)


def test_config_errors(tasks, tmp_path):
    with pytest.raises(ConfigError):
        SWEEnv(tasks=tasks, repos=["nope"])
    with pytest.raises(TaskError):
        SWEEnv(tasks=tmp_path / "missing.jsonl")


# ------------------------------------------------------------------ SWE-bench loader
@pytest.fixture()
def swebench_instance(tmp_path):
    """A hand-made SWE-bench instance against a local git repo built from `intervals`."""
    return make_instance(tmp_path)


def test_swebench_local_backend_end_to_end(swebench_instance):
    data, repo = swebench_instance
    inst = swebench.load_swebench(data)[0]
    assert inst.fail_to_pass == ("tests/test_length.py::test_length",) and inst.extra == {"version": "0.1"}
    env = SWEEnv(swebench=data, backend="local", repo_dirs={"local/intervals": repo})
    obs, info = env.reset(seed=0)
    assert obs == "Interval.length is negative for Interval(2, 5)."
    *_, info = env.step(call("list_dir", path="tests"))
    assert info["signals"]["f2p_passing"] == 0.0 and info["signals"]["p2p_failing"] == 0.0
    for _ in range(6):
        *_, term, trunc, info = env.step(env.oracle_action())
        if term:
            break
    assert info["outcome"]["success"] is True


def test_swebench_clear_errors(swebench_instance, tmp_path):
    data, repo = swebench_instance
    with pytest.raises(ConfigError, match="repo_dirs"):
        SWEEnv(swebench=data, backend="local")
    with pytest.raises((InfraError, ConfigError), match="Docker"):
        SWEEnv(swebench=data, backend="docker")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"instance_id": "x"}) + "\n")
    with pytest.raises(TaskError, match="missing SWE-bench field"):
        swebench.load_swebench(bad)


def test_random_agent_rarely_resolves(tasks):
    env = SWEEnv(tasks=tasks[:40], max_turns=6)
    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(4):
        env.reset(seed=seed)
        while True:
            *_, term, trunc, info = env.step(env.sample_action(rng))
            if term or trunc:
                break
        wins += info["outcome"]["success"]
    assert wins <= 1
    assert repos_dir().name == "repos"


def test_agent_code_runs_sandboxed(tasks, tmp_path):
    """Tests the agent writes run in the sandbox: the host file system stays untouched."""
    marker = tmp_path / "pwned"
    evil = (
        "import pathlib\n\n"
        "def test_escape():\n"
        f"    pathlib.Path({str(marker)!r}).write_text('x')\n"
    )
    env = SWEEnv(tasks=tasks[:1])
    env.reset(options={"task": tasks[0]})
    env.step(call("create_file", path="tests/test_evil.py", content=evil))
    obs, *_ = env.step(call("run_tests", tests=["tests/test_evil.py"]))
    assert "1 failed" in obs
    assert not marker.exists()


def test_search_with_a_catastrophic_regex_is_a_failed_call_within_its_deadline():
    import time

    from turngym.envs.swe.tools import SEARCH_REGEX_S, search

    tree = Tree({"a.py": "a" * 5000 + "b\n", "b.py": "x = 1\n"})
    start = time.perf_counter()
    res = search(tree, {"pattern": "(a|aa)+$", "regex": True})  # exponential for a backtracking engine
    # Unbounded, this pattern runs for ages on 5,000 characters; the slack only absorbs a loaded CI machine.
    assert time.perf_counter() - start < SEARCH_REGEX_S + 20.0
    assert not res.ok and "simpler pattern" in res.output
    ok = search(tree, {"pattern": r"x\s*=", "regex": True})  # ordinary patterns still work
    assert ok.ok and "b.py:1: x = 1" in ok.output
    assert not search(tree, {"pattern": "(", "regex": True}).ok


def test_limits_argument_reaches_the_env_test_runs():
    # a memory limit too small for the grader: the run dies of it, an infra error (never a graded 0). Well below
    # what the grader needs: near it (~20-32 MB) the outcome turns on where the address space runs out, and a
    # C extension that fails to map reaches the grader as an ImportError, which names no limit.
    env = turngym.make("turngym/SWE-v0", limits=Limits(memory_mb=16, disk_mb=8, tmp_mb=8)).unwrapped
    try:
        env.reset(seed=0)
        infra = None
        while infra is None and not env.done:
            *_, info = env.step(env.oracle_action())
            infra = info["infra_error"]
        assert infra is not None and "limit memory" in infra
    finally:
        env.close()


class LimitsRecordingSandbox(BubblewrapSandbox):
    """Test double: the real bubblewrap sandbox, recording the limits each session opened with."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[Limits | None] = []

    def open_session(self, limits=None):
        self.opened.append(limits)
        return super().open_session(limits)


def test_sandbox_executor_runs_under_its_limits_cpu_cores_included():
    try:
        sb = LimitsRecordingSandbox()
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    executor = SandboxExecutor(sb, limits=Limits(memory_mb=1536, processes=48, cpu_cores=0.5))
    try:
        with use_executor(executor, scope="limits-recording"):
            run_pytest(load_repo("intervals").with_file("marker_limits.py", "# fresh: nothing cached\n"), timeout=60)
    finally:
        executor.close()
    assert sb.opened, "no test run opened a session"
    for lim in sb.opened:
        assert (lim.memory_mb, lim.processes, lim.cpu_cores) == (1536, 48, 0.5)
        assert lim.wall_s == lim.cpu_s == 65  # the run's timeout + 5 replaces the limits' own


def test_sandbox_executor_old_limit_names_still_work_with_a_warning():
    with pytest.warns(DeprecationWarning, match="limits=Limits"):
        executor = SandboxExecutor(memory_mb=1000, processes=40)
    assert (executor.limits.memory_mb, executor.limits.processes) == (1000, 40)
    assert (executor.memory_mb, executor.processes) == (1000, 40)
    assert SandboxExecutor().limits == Limits(memory_mb=2048, processes=64)  # the default, unchanged
