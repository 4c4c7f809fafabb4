"""The math oracle: replay the gold expressions in order, then answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turngym.envs.math.env import MathEnv

__all__ = ["oracle_action"]


def oracle_action(env: MathEnv) -> str:
    """Compute the first gold step not yet hit; answer once every step is hit.

    Works from any state (also after a random agent's turns): it reads which gold values the
    episode has already produced and continues from there.
    """
    task, state = env.task, env.state
    if task is None or state is None:
        raise RuntimeError("oracle_action() needs an episode: call env.reset() first")
    for i, expr in enumerate(task.exprs):
        if not (state.hit >> i) & 1:
            return f"<calc>{expr}</calc>"
    return f"<answer>{task.gold}</answer>"
