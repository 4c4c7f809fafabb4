"""One named random draw of a run, keyed by ``(seed, phase, step, ...)``.

Its own module because both the learner (minibatch order, warm-up batches) and the rollout
producer (task seeds, policy seeds) draw from it, and neither should import the other for it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["seeded_rng"]


def seeded_rng(seed: int, *keys: int) -> np.random.Generator:
    """The generator of one named random draw of a run (``(seed, phase, step, ...)``): a resumed
    run draws exactly what the uninterrupted one drew, whatever ran before it."""
    return np.random.default_rng([seed, *keys])
