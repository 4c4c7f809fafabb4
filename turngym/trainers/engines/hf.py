"""``engine="hf"``: the trained torch model samples its own rollouts (the default)."""

from __future__ import annotations

from typing import Any, ClassVar

from turngym.trainers.engines.base import Engine

__all__ = ["HFEngine"]


class HFEngine(Engine):
    """The learner's model samples through :class:`~turngym.agents.hf.HFPolicy`: on-policy, no
    weights to move, and every trainer feature works (constrained choices, async, saved episodes)."""

    name = "hf"
    off_policy = False
    refuses: ClassVar[dict[str, str]] = {}

    def policy(self, *, seed: int) -> Any:
        from turngym.agents.hf import HFPolicy

        cfg = self.host.config
        return HFPolicy(
            self.host.model(),
            self.host.tokenizer,
            temperature=cfg.temperature,
            max_new_tokens=cfg.max_new_tokens,
            seed=seed,
            max_batch_size=256,
            constrain_choices=cfg.constrain_choices,
            name=f"hf:{cfg.model}",
        )
