"""Named sets of :class:`~turngym.trainers.config.TrainConfig` fields: the recipe a user of a small
pretrained model would pick (``turngym train --recipe small-pretrained``, then ``--set`` on top).

The trainer's own defaults are those of the embedded tiny model's default run, whose measured
result (README) they reproduce; a pretrained model wants other choices, each from issue 37's
reading of what made RL add on small models, and each a field documented in ``TrainConfig``:

- LoRA on every layer and every linear module (``lora_layers=0``, ``lora_targets="all-linear"``),
  rank 16, alpha 32, at lr 3e-4, two minibatches per step so the second sees the first's update
  (``approx_kl`` is then non-zero and readable). ``docs/study/smollm2-rl-cpu``'s sweep chose 1e-3
  for adapters on the top 8 of 30 layers (approx KL 4e-4–9e-3 per step; 3e-3 overshot at up to
  0.2); on all 30 layers the same first batch of SmolLM2 moved it by approx KL 0.10 at 1e-3 and
  0.019 at 3e-4 (``docs/study/smollm2-rl-recipe-cpu``);
- groups of 8 and 16 tasks per step (128 episodes, the scale of every small-model success the
  issue cites), dynamic sampling with two extra rounds at most;
- temperature 1.0 (the recorded log-probs are the policy's own), no KL term;
- a watched warm start: 32 demonstrations held out, imitation stopped after two checks without a
  lower held-out NLL;
- on a CPU with native bf16, the update in bf16 autocast (``cpu_bf16``): 0.62× float32's time for
  SmolLM2's forward and backward (the weights and the optimizer stay float32; a GPU ignores it).

The edge-of-ability pool (``edge_pool``) is not in the recipe: on fresh math tasks dynamic
sampling already selects the informative groups at no extra scoring cost; it is for fixed task
sets (``task_pool``) where some tasks stay always solved or never solved.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RECIPES", "SMALL_PRETRAINED", "recipe"]

SMALL_PRETRAINED: dict[str, Any] = {
    "lora": True,
    "lora_layers": 0,
    "lora_targets": "all-linear",
    "lora_rank": 16,
    "lora_alpha": 32,
    "lr": 3e-4,
    "minibatches": 2,
    "group_size": 8,
    "groups_per_step": 16,
    "dynamic_sampling": True,
    "dynamic_rounds": 2,
    "temperature": 1.0,
    "kl_coef": 0.0,
    "warmup_holdout": 32,
    "warmup_check_every": 4,
    "warmup_patience": 2,
    "cpu_bf16": True,
}

RECIPES: dict[str, dict[str, Any]] = {"small-pretrained": SMALL_PRETRAINED}
"""Every named recipe (``turngym train --recipe NAME``)."""


def recipe(name: str) -> dict[str, Any]:
    """A copy of the named recipe's fields (``KeyError`` names the known ones)."""
    if name not in RECIPES:
        raise KeyError(f"unknown recipe {name!r}; known: {', '.join(sorted(RECIPES))}")
    return dict(RECIPES[name])
