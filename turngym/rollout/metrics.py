"""Summaries of a set of episodes: what ``turngym eval`` reports.

Episodes that ended in an infrastructure error are counted but excluded from every score:
they say nothing about the agent, and scoring them 0 would blame it for a dead sandbox or server
(or for a bug in the env: see :mod:`turngym.core.infra`). Their share is reported
(``EvalSummary.infra_error_rate``) and bounded (:func:`check_infra_error_rate`): past the bound
the scored episodes are no longer a fair sample, and a run stops rather than report or train on
the survivors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from turngym.core.errors import ConfigError, TooManyInfraErrors
from turngym.rollout.types import Episode

__all__ = ["DEFAULT_MAX_INFRA_ERROR_RATE", "EvalSummary", "check_infra_error_rate", "summarize", "wilson_interval"]

#: The share of infra-error episodes a run accepts by default (``max_infra_error_rate``).
DEFAULT_MAX_INFRA_ERROR_RATE = 0.1


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (sane at 0% and 100%).

    >>> lo, hi = wilson_interval(200, 200); round(lo, 3), round(hi, 3)
    (0.981, 1.0)
    """
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes == 0 else max(0.0, centre - half)  # exact ends: no 0.9999999999999999
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return (lo, hi)


@dataclass
class EvalSummary:
    """Aggregate scores of an evaluation run."""

    env_id: str
    agent: str
    episodes: int
    scored_episodes: int
    infra_errors: int
    success_rate: float
    success_ci95: tuple[float, float]
    mean_return: float
    mean_turns: float
    invalid_action_rate: float
    signal_means: dict[str, float] = field(default_factory=dict)
    infra_error_rate: float = 0.0
    """``infra_errors / episodes``: the share dropped from every score above."""
    faithfulness: float | None = None
    faithfulness_n: int = 0
    mean_generated_tokens: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    episodes: Sequence[Episode],
    *,
    env_id: str = "",
    agent: str = "",
    faithfulness: Callable[[Episode], float | None] | None = None,
) -> EvalSummary:
    """Success rate (with a 95% CI), return, turns, invalid-action rate and signal means.

    Args:
        faithfulness: the env family's per-episode figure (``env.faithfulness``); the summary
            reports its mean over the episodes where it applies (it returns a number).

    With groups of G > 1 episodes per task, ``extra["pass@G"]`` is the fraction of groups with
    at least one success. The CI treats episodes as independent, which groups are not: read it
    as a lower bound on the uncertainty there.
    """
    scored = [ep for ep in episodes if ep.infra_error is None]
    n = len(scored)
    wins = sum(ep.success for ep in scored)
    turns = [t for ep in scored for t in ep.turns]
    sig_sum: dict[str, float] = {}
    for t in turns:
        for k, v in t.signals.items():
            sig_sum[k] = sig_sum.get(k, 0.0) + float(v)
    faith = [f for f in (faithfulness(ep) for ep in scored) if f is not None] if faithfulness else []
    gen = [len(t.token_ids) for t in turns if t.token_ids is not None]
    extra: dict[str, Any] = {}
    groups: dict[str, list[bool]] = {}
    for ep in scored:
        groups.setdefault(ep.group or ep.episode_id, []).append(ep.success)
    sizes = {len(g) for g in groups.values()}
    if len(sizes) == 1 and (size := sizes.pop()) > 1:
        extra[f"pass@{size}"] = sum(any(g) for g in groups.values()) / len(groups)
    return EvalSummary(
        env_id=env_id,
        agent=agent,
        episodes=len(episodes),
        scored_episodes=n,
        infra_errors=len(episodes) - n,
        success_rate=wins / n if n else 0.0,
        success_ci95=wilson_interval(wins, n),
        mean_return=sum(ep.total_reward for ep in scored) / n if n else 0.0,
        mean_turns=len(turns) / n if n else 0.0,
        invalid_action_rate=sum(not t.action_valid for t in turns) / len(turns) if turns else 0.0,
        signal_means={k: v / len(turns) for k, v in sig_sum.items()},
        infra_error_rate=(len(episodes) - n) / len(episodes) if episodes else 0.0,
        faithfulness=sum(faith) / len(faith) if faith else None,
        faithfulness_n=len(faith),
        mean_generated_tokens=sum(gen) / len(gen) if gen else None,
        extra=extra,
    )


def check_infra_error_rate(
    episodes: Sequence[Episode], max_rate: float, *, what: str = "the run", option: str = "max_infra_error_rate",
    infra: int | None = None, total: int | None = None,
) -> float:
    """The share of ``episodes`` that ended in an infra error; raises past ``max_rate``.

    Args:
        episodes: the episodes to judge (their first infra error is quoted in the message).
        max_rate: the largest accepted share, in [0, 1] (1 accepts anything).
        what: names the episodes in the message (``"evaluation"``, ``"the run"``).
        option: the setting that raises the bound, named in the message.
        infra, total: counts to judge instead of ``episodes``' own (a run's running totals);
            ``episodes`` then only supplies the example.

    Raises:
        TooManyInfraErrors: the share is above ``max_rate`` (the message quotes the first error
            and says where its traceback is).

    >>> check_infra_error_rate([], 0.1)
    0.0
    """
    if not 0.0 <= max_rate <= 1.0:
        raise ConfigError(f"{option} must be in [0, 1], got {max_rate}")
    bad = [ep for ep in episodes if ep.infra_error is not None]
    infra = len(bad) if infra is None else infra
    total = len(episodes) if total is None else total
    rate = infra / total if total else 0.0
    if rate > max_rate:
        example = bad[0] if bad else None
        first = f"; the first ({example.episode_id}): {example.infra_error}" if example is not None else ""
        where = " (its traceback is in the episode's meta['infra_traceback'])" if example is not None and example.meta.get("infra_traceback") else ""
        raise TooManyInfraErrors(
            f"{infra} of {total} episodes of {what} ({rate:.1%}) ended in infrastructure errors, above "
            f"{option}={max_rate:g}{first}{where}. Infra-error episodes are dropped, so the rest are no longer a fair "
            f"sample: fix the env or its infrastructure, or raise {option} to accept more"
        )
    return rate
