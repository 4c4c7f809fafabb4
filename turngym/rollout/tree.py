"""Tree rollouts and per-turn branching from env snapshots.

A tree starts at a reset env. At depth ``d`` (the number of turns taken so far) every node is
expanded into ``branching[d]`` children — the policy samples that many actions from the *same*
prompt, and each child steps an env restored to the parent's :meth:`~turngym.TurngymEnv.snapshot`.
Past ``len(branching)`` every path continues with one child until its episode ends. So:

* ``branching=(G,)`` — G episodes sharing the initial state (a GRPO group, as a tree);
* ``branching=(1, 1, K)`` — per-turn branching: K continuations from the state after turn 2
  (the turn-level groups of turn-GRPO / SLATE);
* ``branching=(B,) * D`` — a full tree of branch factor B and depth D (Tree-GRPO / TreeRL).

Every root-to-leaf path is returned as an ordinary :class:`~turngym.rollout.types.Episode`
whose turns carry ``node`` (unique within the tree) and ``parent`` (-1 at the root). Paths
that share a prefix share its nodes, so the turn table (:func:`~turngym.rollout.to_turn_table`)
sees a shared turn once per leaf, always with the same node id. Every active path of every
tree is batched into one ``policy.act`` call per depth.

The envs live in a :class:`~turngym.rollout.steppers.Stepper` (an env factory means this
process; env servers and Ray actors work the same way), one slot per tree. Groups are named
as :func:`~turngym.rollout.run_episodes` names them, and infrastructure failures end paths
unscored in the same way.

>>> import turngym
>>> from turngym.agents import RandomAgent
>>> tree = run_tree(lambda: turngym.make("turngym/Math-v0"), RandomAgent(seed=1), [0], branching=(2, 2))
>>> len(tree.episodes), len({ep.turns[0].node for ep in tree.episodes})
(4, 2)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from turngym.agents.base import Action, AgentInput, Policy
from turngym.core.env import EnvSnapshot
from turngym.core.errors import ConfigError, InfraError
from turngym.core.infra import INFRA_OUTCOME
from turngym.rollout.runner import (
    agent_input,
    append_turn,
    failed_step,
    new_episode,
    policy_failure,
    reset_failure,
    unscored_episode,
)
from turngym.rollout.steppers import Stepper, as_stepper
from turngym.rollout.types import Episode, group_id

__all__ = ["TreeRollout", "run_tree"]


@dataclass
class TreeRollout:
    """The result of :func:`run_tree`.

    Attributes:
        episodes: one episode per leaf (root-to-leaf path), tree by tree.
        snapshots: with ``keep_snapshots=True``, ``(group, node) -> EnvSnapshot`` of the state
            *after* that node's turn, and ``(group, -1)`` for the root (the reset state).
    """

    episodes: list[Episode]
    snapshots: dict[tuple[str, int], EnvSnapshot] = field(default_factory=dict)


@dataclass
class _Path:
    tree: int
    episode: Episode
    snapshot: EnvSnapshot
    state_key: str
    node: int


def run_tree(
    envs: Callable[[], Any] | Stepper,
    policy: Policy,
    seeds: Sequence[int],
    *,
    branching: Sequence[int],
    history: int | None = None,
    env_id: str = "",
    tasks: Sequence[Any] | None = None,
    keep_snapshots: bool = False,
    max_leaves: int = 4096,
    on_episode: Callable[[Episode], None] | None = None,
) -> TreeRollout:
    """Grow one rollout tree per seed (one env per tree, restored from snapshots).

    Args:
        envs: an env factory (one env per tree) or a :class:`~turngym.rollout.steppers.Stepper`
            (one slot per tree; it must support ``snapshot``/``restore``).
        policy: any policy; it should sample (temperature > 0) or siblings will coincide.
        seeds: one reset seed (one tree) each.
        branching: children per node at each depth; depths past its end continue with 1.
        history: turns of history per prompt (see :func:`~turngym.rollout.run_episodes`).
        env_id: names the episodes and groups (:func:`~turngym.rollout.types.group_id`).
        tasks: optional task (or id) per seed.
        keep_snapshots: also return each node's env snapshot (tests, re-expansion).
        max_leaves: refuse trees larger than this (``prod(branching)`` leaves per tree).

    A tree whose reset raises :class:`~turngym.core.errors.InfraError` gives one unscored
    episode (``meta["infra_error"]``); a step's infra error ends that path like any other end.
    An env bug (an exception that is not turngym's out of reset, step, snapshot or restore) is
    an infra error too, its traceback in ``meta["infra_traceback"]``.
    """
    if not branching or any(int(k) < 1 for k in branching):
        raise ConfigError(f"branching must be a non-empty sequence of ints >= 1, got {tuple(branching)}")
    leaves = 1
    for k in branching:
        leaves *= int(k)
    if leaves > max_leaves:
        raise ConfigError(f"branching {tuple(branching)} gives {leaves} leaves per tree (> max_leaves={max_leaves})")
    if tasks is not None and len(tasks) != len(seeds):
        raise ConfigError(f"got {len(tasks)} tasks for {len(seeds)} seeds; pass one task per seed")
    if not seeds:
        return TreeRollout([])
    stepper = as_stepper(envs)
    stepper.open(len(seeds))
    try:
        return _grow(stepper, policy, seeds, branching, history, env_id, tasks, keep_snapshots, on_episode)
    finally:
        stepper.close()


def _grow(
    stepper: Stepper,
    policy: Policy,
    seeds: Sequence[int],
    branching: Sequence[int],
    history: int | None,
    env_id: str,
    tasks: Sequence[Any] | None,
    keep_snapshots: bool,
    on_episode: Callable[[Episode], None] | None,
) -> TreeRollout:
    groups: list[str] = []
    next_node = [0] * len(seeds)
    leaf_count = [0] * len(seeds)
    finished: list[list[Episode]] = [[] for _ in seeds]
    snapshots: dict[tuple[str, int], EnvSnapshot] = {}
    live: list[_Path] = []

    def done(t: int, ep: Episode) -> None:
        finished[t].append(ep)
        if on_episode is not None:
            on_episode(ep)

    for t, seed in enumerate(seeds):
        options = {"task": tasks[t]} if tasks is not None else None
        try:
            obs, info, gold = stepper.reset(t, seed, options)
        except Exception as exc:  # the env's host is gone, or an env bug: one unscored episode
            why, tb = reset_failure(exc)
            groups.append(group_id(env_id, seed))
            done(t, unscored_episode(groups[t], 0, env_id, seed, why, tb))
            continue
        group = group_id(env_id, seed, None if tasks is None else info.get("task_id", t))
        groups.append(group)
        ep = new_episode(
            stepper.env(t), obs, info, episode_id=f"{group}/root", env_id=env_id, seed=seed, group=group, gold=gold
        )
        root = stepper.snapshot(t)
        if keep_snapshots:
            snapshots[(group, -1)] = root
        live.append(_Path(t, ep, root, info["state_key"], -1))

    while live:
        requests: list[tuple[_Path, int, int]] = []  # (path, child index, children of the path)
        for path in live:
            depth = len(path.episode.turns)
            k = int(branching[depth]) if depth < len(branching) else 1
            requests += [(path, c, k) for c in range(k)]
        inputs = []
        for path, _, _ in requests:
            inp = agent_input(path.episode, stepper.env(path.tree), history)
            inp.episode_id = f"{groups[path.tree]}#{path.node}"
            inputs.append(inp)
        actions = _act(policy, inputs, stepper, [(p.tree, p.snapshot) for p, _, _ in requests])
        new_live: list[_Path] = []
        for (path, c, k), action in zip(requests, actions, strict=True):
            t = path.tree
            ep = path.episode if c == k - 1 else _fork(path.episode)  # the last child keeps the record
            node = next_node[t]
            next_node[t] += 1
            try:
                stepper.restore(t, path.snapshot)
                result = policy_failure(ep, stepper.env(t), action, path.state_key) or stepper.step([(t, action.text)])[0]
            except Exception as exc:  # the env's host is gone (restore cannot reach it), or restore's own bug
                why, tb = reset_failure(exc, where="restore")
                result = failed_step(ep, stepper.env(t), why, path.state_key)
                if tb:
                    result[4]["infra_traceback"] = tb
            turn, ended = append_turn(ep, action, result, path.state_key, node=node, parent=path.node)
            try:
                snap = stepper.snapshot(t) if not turn.infra_error and (not ended or keep_snapshots) else None
            except Exception as exc:  # cannot branch from here: the path ends unscored
                why, tb = reset_failure(exc, where="snapshot")
                turn.terminated, turn.infra_error, ended, snap = True, why, True, None
                ep.outcome = dict(INFRA_OUTCOME)
                if tb:
                    ep.meta["infra_traceback"] = tb
            if keep_snapshots and snap is not None:
                snapshots[(groups[t], node)] = snap
            if ended:
                ep.episode_id = f"{groups[t]}/{leaf_count[t]}"
                leaf_count[t] += 1
                done(t, ep)
            else:
                assert snap is not None
                new_live.append(_Path(t, ep, snap, turn.state_key, node))
        live = new_live
    return TreeRollout([ep for eps in finished for ep in eps], snapshots)


def _act(policy: Policy, inputs: list[AgentInput], stepper: Stepper, states: list[tuple[int, EnvSnapshot]]) -> list[Action]:
    """One batched call, except for privileged agents, which read the env itself.

    Model policies only read messages. Privileged agents (``policy.privileged``: oracle,
    random) read ``AgentInput.env``, and in a tree one env serves many paths, so they are
    called row by row with the env restored to that row's snapshot first.
    """
    if not getattr(policy, "privileged", False):
        return policy.act(inputs)
    actions: list[Action] = []
    for inp, (slot, snap) in zip(inputs, states, strict=True):
        try:
            stepper.restore(slot, snap)
        except InfraError:  # the agent gets a dead proxy; the step that follows reports the failure
            pass
        actions += policy.act([inp])
    return actions


def _fork(ep: Episode) -> Episode:
    """A new episode sharing ``ep``'s turns so far (the Turn records themselves are shared)."""
    return Episode(
        episode_id=ep.episode_id,
        env_id=ep.env_id,
        task_id=ep.task_id,
        seed=ep.seed,
        initial_observation=ep.initial_observation,
        system_prompt=ep.system_prompt,
        group=ep.group,
        turns=list(ep.turns),
        outcome=dict(ep.outcome),
        meta=dict(ep.meta),
    )
