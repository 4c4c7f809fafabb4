"""Graders in a sandbox with one uid: the judged code must not stall or stop them.

Bubblewrap in a user namespace (not root), or as root with a ``setpriv`` too old to hand a
grader the capabilities for a second uid, runs a grader and the code it judges under one uid.
The grader then runs as its sandbox's PID-namespace init: signals from inside the namespace
(the judged code's ``kill(ppid, SIGSTOP)``, ``killpg``, ``kill(-1, ...)``) never reach it.
Before that, a SIGSTOP stalled the step to the run's whole wall budget.

Here the one-uid configuration is made explicitly (``splits_uids = False``, what the sandbox
falls back to by itself in those two setups), so the tests run as root too.
"""

from __future__ import annotations

import json
import time

import pytest

try:
    from test_code_grader import DAEMON_STOPPER
except ModuleNotFoundError:  # loaded by path from tests/docker (which reuses these cases): tests/security is not on sys.path
    from tests.security.test_code_grader import DAEMON_STOPPER

import turngym
from turngym.envs.code.runner import Problem, evaluate_many
from turngym.envs.code.tasks import CodeTask
from turngym.sandbox import BubblewrapSandbox, Limits, SandboxUnavailable

#: The solution stops every ancestor and its process group, then every process it may signal,
#: and answers wrongly: the step must end at per-test speed with all tests failed.
STOP_EVERYTHING = (
    "import os, signal\n"
    "def _ancestors():\n"
    "    pid, out = os.getpid(), []\n"
    "    while pid > 1:\n"
    "        with open(f'/proc/{pid}/stat') as fh:\n"
    "            pid = int(fh.read().rsplit(')', 1)[1].split()[1])\n"
    "        out.append(pid)\n"
    "    return out\n"
    "def _stop_all():\n"
    "    for pid in _ancestors():\n"
    "        for act in (lambda: os.kill(pid, signal.SIGSTOP),\n"
    "                    lambda: os.getpgid(pid) not in (0, os.getpgrp()) and os.killpg(os.getpgid(pid), signal.SIGSTOP)):\n"
    "            try:\n"
    "                act()\n"
    "            except OSError:\n"
    "                pass\n"
    "    try:\n"
    "        os.kill(-1, signal.SIGSTOP)\n"
    "    except OSError:\n"
    "        pass\n"
    "def f(x):\n"
    "    _stop_all()\n"
    "    return -1\n"
)


@pytest.fixture(scope="module")
def one_uid():
    try:
        sb = BubblewrapSandbox(Limits(wall_s=4.0, cpu_s=4.0))
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    sb.splits_uids = False  # what rootless bubblewrap (and an old setpriv as root) gives
    yield sb
    sb.close()


@pytest.mark.parametrize("warm", [True, False])
def test_a_solution_cannot_stop_its_grader_with_one_uid(one_uid, warm):
    task = CodeTask(id="stop", prompt="", gold="def f(x):\n    return x\n", entry_point="f",
                    tests=tuple((f"t{i}", f"candidate({i})", str(i)) for i in range(10)))
    env = turngym.make("turngym/Code-v0", sandbox=one_uid, tasks=[task], per_test_s=0.5, warm=warm)
    try:
        env.reset(options={"task": "stop"})
        t = time.monotonic()
        obs, _, _, _, info = env.step(f"```python\n{STOP_EVERYTHING}```")
        took = time.monotonic() - t
        assert info["infra_error"] is None and info["signals"]["pass_rate"] == 0.0, obs
        assert "got -1" in obs, obs  # the grader judged the answers; it was not cut off
        assert took < 4.0, took  # the run's wall budget is 2 + 0.5 * 12 = 8 s (17 s with the warm retry)
        obs, reward, _, _, info = env.step(f"<submit>\n```python\n{task.gold}```")
        assert reward == 1.0 and info["infra_error"] is None, obs
    finally:
        env.close()


def test_a_daemon_cannot_stop_the_next_solutions_of_a_batch_with_one_uid(one_uid):
    """Problem A leaves daemons that SIGSTOP everything they may, over and over: the grader (the
    namespace's init) kills them between problems and wakes the zygote; B and C pass promptly."""
    tests = tuple((f"t{i}", f"f({i})", str(i)) for i in range(5))
    good = "def f(x):\n    return x\n"
    t = time.monotonic()
    evs = evaluate_many(one_uid, [Problem("a", DAEMON_STOPPER, "f", tests), Problem("b", good, "f", tests),
                                  Problem("c", good, "f", tests)], per_test_s=0.5)
    took = time.monotonic() - t
    assert [e.n_passed for e in evs[1:]] == [5, 5], [(e.n_passed, e.load_error) for e in evs]
    assert took < 6.0, took


def test_the_swe_package_cannot_stop_its_grader_with_one_uid(one_uid):
    """SWE-v0's split grader: the package SIGSTOPs its grader (its parent) and everything else
    at import: the buggy tree still fails and the fix still resolves, each well inside the
    grader's wall budget (30 s + 5)."""
    from turngym.envs.swe import testing
    from turngym.envs.swe.env import SWEEnv
    from turngym.envs.swe.tasks import load_tasks

    task = next(t for t in load_tasks() if t.id == "swe/lrucache/CacheStats.hit_rate/swap_operator/689")
    attack = ("\nimport os as _os, signal as _signal\n_os.kill(_os.getppid(), _signal.SIGSTOP)\n"
              "try:\n    _os.kill(-1, _signal.SIGSTOP)\nexcept OSError:\n    pass\n")
    env = SWEEnv(tasks=[task])
    with testing.use_executor(testing.SandboxExecutor(one_uid), scope="one-uid-bubblewrap"):
        for source, reward in ((task.buggy_source, 0.0), (task.buggy_source.replace(task.gold_old, task.gold_new, 1), 1.0)):
            env.reset(options={"task": task})
            t = time.monotonic()
            call = {"name": "create_file", "arguments": {"path": task.path, "content": source + attack, "overwrite": True}}
            obs, got, terminated, _, info = env.step(json.dumps([call, {"name": "submit", "arguments": {}}]))
            took = time.monotonic() - t
            assert terminated and info["infra_error"] is None and got == reward, (obs, info.get("outcome"))
            assert info["signals"]["imports_ok"] == 1.0, info["outcome"]
            assert took < 15, took


#: A right solution whose daemon sends SIGALRM to the namespace's init (the grader) nonstop.
ALARM_SPAMMER = (
    "import os, signal, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    end = time.time() + 3\n"
    "    while time.time() < end:\n"
    "        try:\n"
    "            os.kill(1, signal.SIGALRM)\n"
    "        except OSError:\n"
    "            pass\n"
    "        time.sleep(0.001)\n"
    "    os._exit(0)\n"
    "def f(x):\n"
    "    time.sleep(0.02)\n"
    "    return x\n"
)


def test_a_solution_cannot_time_out_its_grader_with_sigalrm_with_one_uid(one_uid):
    """The grader handles SIGALRM (its per-test timer), so as init it still receives one the
    solution sends: only its own timer, run out, may end a test. Every test is judged on the
    answers (all right here), not cut off at the moment the solution chose."""
    tests = tuple((f"t{i}", f"f({i})", str(i)) for i in range(8))
    (ev,) = evaluate_many(one_uid, [Problem("a", ALARM_SPAMMER, "f", tests)], per_test_s=0.5)
    assert ev.n_passed == 8, (ev.n_passed, ev.load_error, ev.results)
