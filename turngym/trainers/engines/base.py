"""What a rollout engine of ``turngym train`` is: the policy that samples, the weight sync, the flags.

``TrainConfig(engine=NAME)`` picks a class from :data:`turngym.trainers.engines.ENGINES`; the
:class:`~turngym.trainers.producer.RolloutProducer` builds one around itself and asks it for the
policy of every rollout, the trainer asks it to sync after every update and reads
:attr:`Engine.off_policy` to decide whether the update importance-corrects against the
engine's log-probs. The config's checks read :attr:`Engine.refuses`. So an engine (SGLang, a
remote OpenAI-compatible server returning token ids, llama.cpp) is one subclass, and no other
file names it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

__all__ = ["Engine", "EngineHost"]


class EngineHost(Protocol):
    """What an engine reads from the producer that owns it."""

    config: Any
    """The run's :class:`~turngym.trainers.config.TrainConfig`."""
    tokenizer: Any
    model: Callable[[], Any]
    """Returns the torch model being trained (the learner replaces the object: warm start, LoRA)."""
    model_path: Callable[[], Path]
    """Returns the run's base model directory (where an engine of its own loads the weights from)."""
    log: Callable[[str], None]


class Engine:
    """One way of sampling a run's rollouts (a subclass per engine, registered by name).

    Args:
        host: the producer that plays the run's episodes (its config, model, tokenizer, log).
    """

    name: ClassVar[str]
    """The ``TrainConfig.engine`` / ``turngym train --engine`` value."""
    off_policy: ClassVar[bool]
    """The episodes are sampled by another copy of the weights (another dtype, kernels, numerics):
    the update weights each token by the truncated ratio to the engine's log-probs
    (:func:`turngym.trainers.engine.tis_pg_loss`)."""
    refuses: ClassVar[Mapping[str, str]] = {
        "constrain_choices": "the engine does not return the allowed-token sets the update renormalizes over",
        "async_rollouts": "the engine takes its weights between steps only",
        "episodes": "saved episodes are not sampled",
    }
    """The :class:`~turngym.trainers.config.TrainConfig` features this engine cannot run, and why
    (the config's error says it). An engine outside the trainer's process refuses all three."""

    def __init__(self, host: EngineHost) -> None:
        self.host = host
        self.running: Any = None
        """The engine's own running server or handle once started (None: nothing of its own runs)."""

    def policy(self, *, seed: int) -> Any:
        """The :class:`~turngym.agents.base.Policy` that samples the next rollout (with the current weights)."""
        raise NotImplementedError

    def sync(self) -> Any:
        """Bring the engine up to the trained model's weights after an update; returns a
        :class:`~turngym.trainers.engine.SyncStats` when weights moved, None otherwise."""
        return None
