"""``engine="vllm"``: a vLLM engine samples; the trainer's weights are pushed into it after updates."""

from __future__ import annotations

from typing import Any, ClassVar

from turngym.trainers.engines.base import Engine

__all__ = ["VLLMEngine"]


class VLLMEngine(Engine):
    """A :class:`~turngym.trainers.engine.RolloutEngine` (``vllm.LLM`` in this process), started on
    first use from the base model directory, synced whenever the model's weights changed."""

    name = "vllm"
    off_policy = True
    refuses: ClassVar[dict[str, str]] = {
        "constrain_choices": "the vLLM engine does not return the allowed-token sets the update renormalizes over",
        "async_rollouts": "a vLLM engine takes its weights between steps only",
        "episodes": "saved episodes are not sampled",
    }

    def policy(self, *, seed: int) -> Any:
        cfg = self.host.config
        self.sync()
        return self.running.policy(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=seed, name=f"vllm:{cfg.model}")

    def sync(self) -> Any:
        """Start the vLLM rollout engine on first use and push the model's weights into it if they
        changed since the last push (after an update, the warm start, a resumed checkpoint).
        Returns the push's :class:`~turngym.trainers.engine.SyncStats`, or None when up to date."""
        from turngym.trainers.engine import RolloutEngine, sync_if_stale

        if self.running is None:
            self.running = RolloutEngine(self.host.model_path(), seed=self.host.config.seed, engine_kwargs=self.host.config.engine_kwargs)
            self.host.log(f"vLLM engine started in {self.running.start_seconds:.0f} s")
        return sync_if_stale(self.running, self.host.model())
