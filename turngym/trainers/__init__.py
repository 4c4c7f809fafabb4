"""Turn-level credit-assignment trainers.

* :mod:`turngym.trainers.advantages` — the estimators (pure NumPy; no torch needed).
* :class:`TrainConfig`, :class:`Trainer`, :func:`train` — the training loop behind
  ``turngym train`` (torch and transformers are imported when a run starts).
"""

from turngym.trainers.atomic import ArtifactError
from turngym.trainers.config import TrainConfig
from turngym.trainers.loop import Trainer, TrainResult, train

__all__ = ["ArtifactError", "TrainConfig", "TrainResult", "Trainer", "train"]
