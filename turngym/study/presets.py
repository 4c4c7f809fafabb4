"""The study's CPU-sized env presets and the one model every study run starts from.

Split from :mod:`turngym.study.credit` so that the studies built on them (credit, variance) import
this module instead of each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ENV_PRESETS", "EnvPreset", "study_model"]


@dataclass(frozen=True)
class EnvPreset:
    """A small, CPU-sized configuration of an env family and where its held-out tasks come from."""

    env_id: str
    env_kwargs: dict[str, Any]
    heldout_env_id: str | None = None
    """Env id of the held-out split (None = the same env on fresh task seeds)."""
    max_new_tokens: int = 24
    train: dict[str, Any] = field(default_factory=dict)
    """TrainConfig fields this env needs at CPU scale (the same for every algo of the env)."""
    pretrained_env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Env arguments added for a pretrained model."""
    pretrained_train: dict[str, Any] = field(default_factory=dict)
    """More of them for a pretrained model (applied last): its sequences cost ~100× the tiny model's."""


ENV_PRESETS: dict[str, EnvPreset] = {
    # ALFWorld's text without the admissible-action list: the list triples the sequence length
    # (1,194 → 369 tokens per demonstration), which a 2-core CPU pays for in every update.
    "household": EnvPreset("turngym/Household-v0", {"difficulties": [1], "max_turns": 12, "show_admissible": False},
                           heldout_env_id="turngym/Household-Unseen-v0", train={"micro_batch_size": 16},
                           # the study's own evaluation is on the unseen split; the seen split's fresh seeds would double the cost
                           pretrained_train={"warmup_steps": 12, "warmup_batch_size": 8, "eval_episodes": 0}),
    # WebShop pages are long: 1,503 tokens per demonstration with its 10 results per page,
    # 1,041 with 3 (the goal is still reachable by paging; the oracle solves every task). With
    # length-sorted micro-batches of 8 and a shorter, smaller-batch warm start a run fits in minutes.
    "shop": EnvPreset("turngym/Shop-v0", {"difficulty": "easy", "max_turns": 8, "page_size": 3},
                      train={"micro_batch_size": 8, "warmup_steps": 100, "warmup_batch_size": 16}),
    # A pretrained model's zero-shot episodes run to the turn limit: 5 turns leave room for the 3 a solution takes.
    "math": EnvPreset("turngym/Math-v0", {"min_steps": 1, "max_steps": 2}, pretrained_env_kwargs={"max_turns": 5}),
    # A pretrained model: at most two hops (~150-token episodes) and room for one wasted search per hop.
    "search": EnvPreset("turngym/SearchQA-v0", {"min_hops": 1, "max_hops": 3, "max_turns": 8},
                        pretrained_env_kwargs={"max_hops": 2, "max_turns": 6}),
}


def study_model() -> Path:
    """The one model every run starts from: the trainers' default 0.5M-parameter tiny
    architecture, its tokenizer trained on the study's envs only (so it does not depend on
    other families' infrastructure, e.g. the SWE sandbox, and compresses these envs' text)."""
    from turngym.agents.tiny import TinyModelConfig, build_tiny_model
    from turngym.trainers.config import TrainConfig

    return build_tiny_model(config=TinyModelConfig(**TrainConfig().tiny_model), env_ids=sorted({p.env_id for p in ENV_PRESETS.values()} | {"turngym/Household-Unseen-v0"}))
