"""The code oracle: test the reference solution, then submit once every test passes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turngym.envs.code.env import CodeEnv

__all__ = ["oracle_action"]


def oracle_action(env: CodeEnv) -> str:
    """Submit if the current solution passes everything; otherwise test the reference.

    Works from any state (also after a random agent's turns).
    """
    task, state = env.task, env.state
    if task is None or state is None:
        raise RuntimeError("oracle_action() needs an episode: call env.reset() first")
    if state.passed is not None and all(state.passed):
        return "All tests pass. <submit/>"
    code = task.gold if task.gold.endswith("\n") else task.gold + "\n"
    return f"```python\n{code}```"
