"""Episodes → a flat, columnar turn table: what advantage estimators consume.

``compute_advantages(name, to_turn_table(episodes))`` is the whole interface between rollouts
and trainers: one row per (episode, turn), plain numpy columns, no rollout types. Rows are in
episode order, turns in order within an episode. This is the one place a turn table is built
from episodes: the trainer, the viewer and :meth:`TurnTable.from_episodes
<turngym.trainers.advantages.TurnTable.from_episodes>` all call it.

States are named by when they hold: ``state_before`` is the state the turn's action was taken
in (GiGPO's anchor: ``Turn.prev_state_key``, the ``info["state_key"]`` of the reset or of the
previous step), ``state_after`` the state it led to (``Turn.state_key``, this step's
``info["state_key"]``). There is no column called plain ``state_key``; estimators refuse one.

Columns:

=================  =======  ===============================================================
column             dtype    meaning
=================  =======  ===============================================================
episode            int64    episode index (position in the input list)
episode_id         object   ``Episode.episode_id``
group              int64    group index; episodes of a group share the task and initial state
turn               int64    0-based turn index in its episode
reward             float64  the turn's reward (an episode's return is the sum over its turns)
episode_return     float64  the episode's env return, repeated on each of its rows
state_before       object   env state the turn's action was taken in (GiGPO anchor state)
state_after        object   env state after the turn
node, parent       int64    tree node of the turn and of the previous turn (-1 = root),
                            unique across the whole table; shared prefixes share nodes
terminated         bool     the task ended on this turn
truncated          bool     the turn budget ran out on this turn
last               bool     final turn of its episode
action_valid       bool     the env could parse/apply the action
infra_error        bool     the episode ended in an infrastructure failure (drop, never score)
correct            bool     the episode succeeded (``outcome["success"]``), on every row
num_tokens         int64    generated tokens of the action (0 for scripted agents)
policy_version     int64    the policy version that sampled the turn (-1: not recorded; set by
                            asynchronous training, where a batch mixes versions)
sample             int64    with ``samples``: index of the rendered sequence holding the turn
token_start/_end   int64    with ``samples``: the action's token span in that sequence
signal/<name>      float64  every process signal the env emitted (0.0 where absent)
=================  =======  ===============================================================

In a tree rollout a shared turn appears once per leaf whose path contains it, always with
the same ``node``; estimators that need one row per node deduplicate on ``node``.

>>> import turngym
>>> from turngym.agents import OracleAgent
>>> from turngym.rollout import run_episodes
>>> eps = run_episodes(lambda: turngym.make("turngym/Math-v0"), OracleAgent(), [0, 1], group_size=2)
>>> table = to_turn_table(eps)
>>> bool((table["episode_return"] == 1.0).all()), sorted(set(table["group"].tolist()))
(True, [0, 1])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from turngym.core.errors import ConfigError
from turngym.rollout.types import Episode

if TYPE_CHECKING:
    from turngym.agents.render import TokenSample

__all__ = ["to_turn_table"]


def to_turn_table(
    episodes: Sequence[Episode],
    *,
    samples: Sequence[TokenSample] | None = None,
    drop_infra: bool = False,
    rewards: Sequence[Sequence[float]] | None = None,
) -> dict[str, np.ndarray]:
    """One row per turn, as a dict of equal-length numpy arrays (see the module docstring).

    Args:
        episodes: rollouts (from :func:`run_episodes` or :func:`run_tree`).
        samples: optional rendered sequences; either one per episode
            (:func:`~turngym.agents.render.render_episode`) or the flattened per-turn samples
            of all episodes (:func:`~turngym.agents.render.render_turns`), to add token spans.
        drop_infra: leave out every episode that ended in an infrastructure error.
        rewards: per-turn rewards to use instead of the env's (shaped rewards,
            :mod:`turngym.rewards`), one sequence per episode of ``episodes``.
    """
    if rewards is not None and len(rewards) != len(episodes):
        raise ConfigError(f"{len(rewards)} reward lists for {len(episodes)} episodes; pass one per episode")
    keep = [i for i, ep in enumerate(episodes) if not (drop_infra and ep.infra_error)]
    eps = [episodes[i] for i in keep]
    turn_rewards = [[t.reward for t in ep.turns] for ep in eps] if rewards is None else [list(rewards[i]) for i in keep]
    for ep, rs in zip(eps, turn_rewards):
        if len(rs) != len(ep.turns):
            raise ConfigError(f"episode {ep.episode_id!r}: {len(rs)} rewards for {len(ep.turns)} turns")
    signal_names: list[str] = []
    for ep in eps:
        for t in ep.turns:
            signal_names += [k for k in t.signals if k not in signal_names]
    n = sum(len(ep.turns) for ep in eps)
    spans = _spans(eps, samples, n)
    group_ids: dict[str, int] = {}
    node_ids: dict[tuple[str, int], int] = {}

    def node_id(group: str, node: int) -> int:
        if node < 0:
            return -1
        return node_ids.setdefault((group, node), len(node_ids))

    cols: dict[str, list] = {
        k: []
        for k in (
            "episode",
            "episode_id",
            "group",
            "turn",
            "reward",
            "episode_return",
            "state_before",
            "state_after",
            "node",
            "parent",
            "terminated",
            "truncated",
            "last",
            "action_valid",
            "infra_error",
            "correct",
            "num_tokens",
            "policy_version",
        )
    }
    signals: dict[str, list[float]] = {k: [] for k in signal_names}
    for e, (ep, rs) in enumerate(zip(eps, turn_rewards)):
        group = ep.group or ep.episode_id
        g = group_ids.setdefault(group, len(group_ids))
        ret, ok, infra = ep.total_reward, ep.success, ep.infra_error is not None
        for i, t in enumerate(ep.turns):
            node = t.node if t.node >= 0 else i  # records without node ids: a linear chain
            parent = t.parent if t.node >= 0 else i - 1
            key = group if t.node >= 0 else f"{group}\x00{ep.episode_id}"
            cols["episode"].append(e)
            cols["episode_id"].append(ep.episode_id)
            cols["group"].append(g)
            cols["turn"].append(t.index)
            cols["reward"].append(float(rs[i]))
            cols["episode_return"].append(ret)
            cols["state_before"].append(t.prev_state_key)
            cols["state_after"].append(t.state_key)
            cols["node"].append(node_id(key, node))
            cols["parent"].append(node_id(key, parent))
            cols["terminated"].append(t.terminated)
            cols["truncated"].append(t.truncated)
            cols["last"].append(i == len(ep.turns) - 1)
            cols["action_valid"].append(t.action_valid)
            cols["infra_error"].append(infra)
            cols["correct"].append(ok)
            cols["num_tokens"].append(len(t.token_ids) if t.token_ids is not None else 0)
            cols["policy_version"].append(-1 if t.policy_version is None else t.policy_version)
            for k in signal_names:
                signals[k].append(float(t.signals.get(k, 0.0)))
    table: dict[str, np.ndarray] = {}
    for k, v in cols.items():
        if k in ("episode_id", "state_before", "state_after"):
            table[k] = np.array(v, dtype=object)
        elif k in ("reward", "episode_return"):
            table[k] = np.array(v, dtype=np.float64)
        elif k in ("terminated", "truncated", "last", "action_valid", "infra_error", "correct"):
            table[k] = np.array(v, dtype=bool)
        else:
            table[k] = np.array(v, dtype=np.int64)
    table.update(spans)
    for k, v in signals.items():
        table[f"signal/{k}"] = np.array(v, dtype=np.float64)
    return table


def _spans(eps: Sequence[Episode], samples: Sequence[TokenSample] | None, n: int) -> dict[str, np.ndarray]:
    sample = np.full(n, -1, dtype=np.int64)
    start = np.full(n, -1, dtype=np.int64)
    end = np.full(n, -1, dtype=np.int64)
    if samples is not None:
        where: dict[tuple[str, int], tuple[int, int, int]] = {}
        for s, smp in enumerate(samples):
            for turn, (a, b) in smp.turn_spans.items():
                where[(smp.episode_id, turn)] = (s, a, b)
        row = 0
        for ep in eps:
            for t in ep.turns:
                hit = where.get((ep.episode_id, t.index))
                if hit is None:
                    raise ConfigError(
                        f"no rendered sample covers turn {t.index} of {ep.episode_id!r}; pass the samples "
                        "rendered from these same episodes"
                    )
                sample[row], start[row], end[row] = hit
                row += 1
    return {"sample": sample, "token_start": start, "token_end": end}
