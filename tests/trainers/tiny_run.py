"""The tiny training run the trainer tests share (imported by test_train_loop.py and test_resume.py).

One definition, so the loop tests and the resume tests exercise the same run shape: a
change to what "tiny" means reaches both instead of letting them drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turngym.trainers import TrainConfig

#: Metrics fields that carry wall-clock time: they differ between otherwise identical runs.
TIMING_FIELDS = ("rollout_s", "step_s")


def tiny_config(**overrides: Any) -> TrainConfig:
    """A ``TrainConfig`` for the embedded tiny model that runs in seconds; ``overrides`` win."""
    from turngym.trainers import TrainConfig  # torch-backed: imported only when a test asks

    base: dict[str, Any] = dict(
        env_kwargs={"min_steps": 1, "max_steps": 1, "max_turns": 2},
        groups_per_step=2,
        group_size=2,
        max_new_tokens=6,
        warmup_steps=2,
        warmup_batch_size=4,
        demo_episodes=6,
        eval_episodes=2,
        task_pool=4,
        lr=1e-3,
    )
    base.update(overrides)
    return TrainConfig(**base)


def metric_rows(out: Path) -> list[dict]:
    """The run's ``metrics.jsonl`` rows without their timing fields, so two runs compare equal."""
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in rows]
