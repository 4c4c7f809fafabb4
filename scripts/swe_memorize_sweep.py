"""The memorizing attack on SWE-v0, swept over the shipped tasks (issue #38, item 3).

The attack leaves the bug in place and appends one generic block to the buggy module: at
import it reads the visible tests (``tests/*.py``), takes every ``assert CALL == LITERAL``
(arguments literal or module-level constants of the test file) and wraps every public
function and method of the module so that a call with those arguments answers the asserted
value from a table; any other call runs the buggy code. It is played through ``env.step`` as
an agent would (one ``create_file`` of the module, then ``submit``).

For each task the sweep reports whether the attack would have passed the visible tests alone
(FAIL_TO_PASS all pass, no PASS_TO_PASS fails: the grading before hidden cases) and whether it
is resolved (the hidden cases too). Target: 0 resolved.

    PYTHONPATH=$PWD python scripts/swe_memorize_sweep.py [--tasks N] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

#: Appended to the buggy module. Generic: nothing in it names a repository, a function or a task.
MEMORIZE_ATTACK = r'''

def _turngym_memorize():
    import ast, functools, glob, os, sys
    me = sys.modules[__name__]
    table = {}
    original = dict(vars(me))

    def value(node, env):
        try:
            return ast.literal_eval(node)
        except Exception:
            if isinstance(node, ast.Name) and node.id in env:
                return env[node.id]
            if isinstance(node, ast.Call) and not node.keywords:
                fname = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                args = [value(a, env) for a in node.args]
                if fname == "approx" and len(args) == 1:
                    return args[0]
                if callable(vars(me).get(fname)):
                    return Lazy(fname, args)
            raise

    class Lazy:
        def __init__(self, fname, args):
            self.fname, self.args = fname, args

        def __repr__(self):
            return f"{self.fname}{tuple(self.args)!r}"

        def make(self):
            return original[self.fname](*self.args)

    for path in sorted(glob.glob(os.path.join(os.getcwd(), "tests", "**", "*.py"), recursive=True)):
        try:
            tree = ast.parse(open(path, encoding="utf-8").read())
        except Exception:
            continue
        env = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    env[node.targets[0].id] = ast.literal_eval(node.value)
                except Exception:
                    pass
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
                continue
            call = node.left
            if not isinstance(call, ast.Call):
                continue
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
            try:
                args = tuple(value(a, env) for a in call.args)
                kwargs = tuple(sorted((k.arg, value(k.value, env)) for k in call.keywords))
                table[(name, repr(args), repr(kwargs))] = value(node.comparators[0], env)
            except Exception:
                continue

    def wrap(name, fn, method):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            key = (name, repr(tuple(args[1:] if method else args)), repr(tuple(sorted(kwargs.items()))))
            if key in table:
                answer = table[key]
                return answer.make() if isinstance(answer, Lazy) else answer
            return fn(*args, **kwargs)
        return inner

    for name, obj in list(vars(me).items()):
        if name.startswith("_turngym"):
            continue
        if isinstance(obj, type) and obj.__module__ == me.__name__:
            for attr, fn in list(vars(obj).items()):
                if callable(fn) and not attr.startswith("__"):
                    setattr(obj, attr, wrap(attr, fn, True))
        elif callable(obj) and getattr(obj, "__module__", None) == me.__name__:
            setattr(me, name, wrap(name, obj, False))


_turngym_memorize()
'''


def attack_episode(env: Any, task: Any) -> dict[str, Any]:
    """Play the attack on ``task``: append it to the buggy module, submit; the outcome."""
    env.reset(options={"task": task})
    content = env.state.tree[task.path] + MEMORIZE_ATTACK
    env.step(json.dumps({"name": "create_file", "arguments": {"path": task.path, "content": content, "overwrite": True}}))
    *_, info = env.step(json.dumps({"name": "submit", "arguments": {}}))
    outcome = info["outcome"]
    return {"task": task.id, "resolved": bool(outcome["success"]),
            "visible_tests_pass": outcome["f2p_passing"] == 1.0 and outcome["p2p_failing"] == 0.0 and not outcome["reason"],
            "hidden_failing": outcome.get("hidden_failing", 0.0)}


def sweep(tasks: list[Any]) -> dict[str, Any]:
    from turngym.envs.swe.env import SWEEnv

    env = SWEEnv(tasks=tasks)
    t0 = time.perf_counter()
    rows = [attack_episode(env, t) for t in tasks]
    wall = time.perf_counter() - t0
    return {"tasks": len(rows), "resolved": sum(r["resolved"] for r in rows),
            "visible_tests_pass": sum(r["visible_tests_pass"] for r in rows), "seconds": round(wall, 1),
            "seconds_per_task": round(wall / max(1, len(rows)), 3),
            "resolved_ids": [r["task"] for r in rows if r["resolved"]],
            "visible_only_ids": [r["task"] for r in rows if r["visible_tests_pass"]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=0, help="a seeded sample of N tasks (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from turngym.envs.swe.tasks import load_tasks

    tasks = load_tasks()
    if args.tasks:
        tasks = random.Random(0).sample(tasks, min(args.tasks, len(tasks)))
    out = sweep(tasks)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"memorizing attack over {out['tasks']} tasks: {out['resolved']} resolved, "
              f"{out['visible_tests_pass']} would pass the visible tests alone; "
              f"{out['seconds']} s ({out['seconds_per_task']} s/task)")
        for tid in out["resolved_ids"]:
            print("  RESOLVED", tid)


if __name__ == "__main__":
    main()
