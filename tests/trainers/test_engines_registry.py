"""Rollout engines come from a table: a registered class is what the run samples, syncs and corrects with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from turngym.core.errors import ConfigError
from turngym.trainers.engines import ENGINES, Engine, engine_class
from turngym.trainers.engines.hf import HFEngine
from turngym.trainers.engines.vllm import VLLMEngine


def test_the_table_names_each_engine_once_with_its_flags() -> None:
    assert ENGINES == {"hf": HFEngine, "vllm": VLLMEngine}
    assert engine_class("hf").off_policy is False and dict(engine_class("hf").refuses) == {}
    assert engine_class("vllm").off_policy is True
    assert set(engine_class("vllm").refuses) == {"constrain_choices", "async_rollouts", "episodes"}
    with pytest.raises(ConfigError, match=r"engine must be 'hf' or 'vllm', got 'vlm' \(did you mean 'vllm'\?\)"):
        engine_class("vlm")


class RecordingEngineTestDouble(HFEngine):
    """Samples with the hf engine's policy, counts the calls, and says its episodes are off-policy."""

    name = "recording-test-double"
    off_policy = True
    refuses: ClassVar[dict[str, str]] = {"constrain_choices": "this double keeps no allowed-token sets"}
    calls: ClassVar[dict[str, int]] = {}

    def policy(self, *, seed: int) -> Any:
        self.calls["policy"] = self.calls.get("policy", 0) + 1
        return super().policy(seed=seed)

    def sync(self) -> Any:
        self.calls["sync"] = self.calls.get("sync", 0) + 1
        return None


def test_config_checks_read_what_the_engine_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    from turngym.trainers import TrainConfig

    monkeypatch.setitem(ENGINES, RecordingEngineTestDouble.name, RecordingEngineTestDouble)
    with pytest.raises(ConfigError, match=r"this double keeps no allowed-token sets.*drop --engine recording-test-double"):
        TrainConfig(engine=RecordingEngineTestDouble.name, constrain_choices=True)
    TrainConfig(engine=RecordingEngineTestDouble.name, async_rollouts=True)  # not refused: allowed
    with pytest.raises(ConfigError, match=r"a vLLM engine takes its weights between steps only\): drop --engine vllm or --async"):
        TrainConfig(engine="vllm", async_rollouts=True)


def test_a_registered_engine_samples_syncs_and_sets_off_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_run import tiny_config

    from turngym.trainers import Trainer

    monkeypatch.setitem(ENGINES, RecordingEngineTestDouble.name, RecordingEngineTestDouble)
    monkeypatch.setattr(RecordingEngineTestDouble, "calls", {})
    runs = {}
    for name in ("hf", RecordingEngineTestDouble.name):
        out = tmp_path / name
        trainer = Trainer(tiny_config(engine=name, steps=2, warmup_steps=0, eval_episodes=0), out, progress=False)
        trainer.run()
        assert isinstance(trainer.producer.rollout_engine, ENGINES[name]) and trainer.engine is None
        runs[name] = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r.get("phase") == "rl"]
    assert RecordingEngineTestDouble.calls == {"policy": 2, "sync": 2}  # one rollout and one sync per RL step
    assert all("mismatch_abs_mean" not in r for r in runs["hf"])  # on-policy: no correction against the engine
    off = runs[RecordingEngineTestDouble.name]
    assert len(off) == 2 and all(r["mismatch_abs_mean"] < 1e-4 for r in off)  # off-policy, same weights sampled: ratio 1


def test_engine_base_refuses_every_in_process_feature() -> None:
    assert set(Engine.refuses) == {"constrain_choices", "async_rollouts", "episodes"}
