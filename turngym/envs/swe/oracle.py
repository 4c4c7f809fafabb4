"""The SWE oracle: look at the buggy function, apply the gold patch with one ``replace``,
run the failing tests, submit. From any state: files the episode changed are restored."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turngym.envs.swe.env import SWEEnv

__all__ = ["oracle_action"]


def _call(name: str, **arguments: object) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def oracle_action(env: SWEEnv) -> str:
    task, state = env.task, env.state
    if task is None or state is None:
        raise RuntimeError("oracle_action() needs an episode: call env.reset() first")
    original = env.gold_tree(task)
    tree = state.tree
    if task.path not in state.viewed:
        first, last = task.func_lines
        if first:
            return _call("view_file", path=task.path, start=first, end=last)
        return _call("view_file", path=task.path)
    if tree.get(task.path) != original[task.path]:
        text = tree.get(task.path, "")
        if task.gold_old and text.count(task.gold_old) == 1:
            return _call("replace", path=task.path, old=task.gold_old, new=task.gold_new)
        return _call("create_file", path=task.path, content=original[task.path], overwrite=True)
    for path in sorted(set(tree) | set(original)):
        if path in original and tree.get(path) != original[path]:
            return _call("create_file", path=path, content=original[path], overwrite=True)
    if not state.tested:
        return _call("run_tests", tests=list(task.fail_to_pass))
    return _call("submit")
