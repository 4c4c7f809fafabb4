"""scripts/gpu_study.py's CPU path: the tiny configuration, one RL step per arm, end to end."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_study.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_study", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dry_run_writes_the_study_and_its_diagnostics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpu_study = _load()
    assert gpu_study.main(["--dry-run", "--out", str(tmp_path), "--json"]) == 0
    result = json.loads((tmp_path / "gpu_study.json").read_text())
    assert json.loads(capsys.readouterr().out) == result
    assert sorted(result["arms"]) == ["math/gigpo", "math/grpo"] and len(result["runs"]) == 2
    for arm in result["arms"].values():
        assert arm["n"] == 4 and 0 <= arm["success"] <= 1 and arm["wilson95"][0] <= arm["success"] <= arm["wilson95"][1]
        d = arm["diagnostics"]
        assert d["rl_steps"] == 1 and d["entropy"] > 0 and 0 <= d["confident_frac"] <= 1 and "uniform_reward_frac" in d
    assert result["warm_start"]["math"]["n"] == 4 and result["config"]["train_overrides"]["dynamic_sampling"] is True
    md = (tmp_path / "gpu_study.md").read_text()
    assert "| math/gigpo | 1 |" in md and "entropy" in md
    here = gpu_study.arithmetic(gpu_study.study_config(gpu_study.parser().parse_args(["--dry-run", "--out", str(tmp_path)])))
    assert result["machine"]["arithmetic"] == here and f"Trained in {here}." in md
    # a second call finds every run done and only rewrites the summary
    assert gpu_study.main(["--dry-run", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "gpu_study.json").read_text())["timings"]["run_s"] == []


def test_the_engine_option_reaches_every_run(tmp_path: Path) -> None:
    gpu_study = _load()
    args = gpu_study.parser().parse_args(["--engine", "vllm", "--out", str(tmp_path)])
    assert gpu_study.study_config(args).train_overrides["engine"] == "vllm"
    assert gpu_study.study_config(gpu_study.parser().parse_args([])).train_overrides["engine"] == "hf"
    with pytest.raises(SystemExit):
        gpu_study.parser().parse_args(["--engine", "sglang"])


def test_the_cpu_size_keeps_the_recipe_and_shrinks_the_step() -> None:
    gpu_study = _load()
    gpu = gpu_study.study_config(gpu_study.parser().parse_args([]))
    cpu = gpu_study.study_config(gpu_study.parser().parse_args(["--size", "cpu", "--engine", "vllm"]))
    assert (gpu.groups_per_step, gpu.group_size) == (16, 8) and (cpu.groups_per_step, cpu.group_size) == (4, 8)
    assert cpu.threads == 2 and cpu.heldout_episodes == gpu.heldout_episodes == 256
    same = {k: v for k, v in cpu.train_overrides.items() if k not in ("engine", "save_every")}
    assert same == {k: v for k, v in gpu.train_overrides.items() if k not in ("engine", "save_every")}
    assert cpu.train_overrides["save_every"] == 1 and "save_every" not in gpu.train_overrides  # a CPU run resumes from its last step
    assert cpu.train_overrides["cpu_bf16"] is True


def test_two_families_each_against_its_own_warm_start(tmp_path: Path) -> None:
    gpu_study = _load()
    assert gpu_study.main(["--dry-run", "--envs", "math", "search", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "gpu_study.json").read_text())
    assert sorted(result["warm_start"]) == ["math", "search"]
    assert sorted(result["arms"]) == ["math/gigpo", "math/grpo", "search/gigpo", "search/grpo"]
    for r in result["runs"]:  # each run's z is against its own family's warm start
        w = result["warm_start"][r["env"]]
        expected = gpu_study._z((r["k"], r["n"]), (w["k"], w["n"]))
        assert r["z_vs_warm"] == round(expected, 2)


def test_the_imitation_control_trains_on_and_every_arm_is_judged_against_it(tmp_path: Path) -> None:
    gpu_study = _load()
    args = gpu_study.parser().parse_args(["--dry-run", "--control", "--steps", "1", "--out", str(tmp_path)])
    cfg = gpu_study.study_config(args)
    ctl = gpu_study.control_config(cfg, 3)  # 3 RL steps of 2 minibatches: 6 more imitation steps, 6 batches more demonstrations
    assert ctl.out == tmp_path / "control" and ctl.warmup_steps == cfg.warmup_steps + 6
    assert ctl.demo_episodes == cfg.demo_episodes + 6 * cfg.train_overrides["warmup_batch_size"]
    assert gpu_study.main(["--dry-run", "--control", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "gpu_study.json").read_text())
    control = result["imitation_control"]["math"]
    warm = result["warm_start"]["math"]
    assert control["n"] == warm["n"] == 4 and control["imitation_steps"] == cfg.warmup_steps + 2  # 1 step × 2 minibatches
    assert control["z_vs_warm"] == round(gpu_study._z((control["k"], control["n"]), (warm["k"], warm["n"])), 2)
    evals = json.loads((tmp_path / "control" / "warm" / "math-s0" / "evals.json").read_text())
    assert "base_heldout" not in evals  # the base model is measured once, with the warm start
    for arm in result["arms"].values():
        assert arm["z_vs_control"] == round(gpu_study._z((arm["k"], arm["n"]), (control["k"], control["n"])), 2)
    assert "Imitation control" in (tmp_path / "gpu_study.md").read_text()
    assert (tmp_path / "gpu_study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_paired_z_is_the_mean_task_difference_over_its_standard_error() -> None:
    gpu_study = _load()
    a, b = {"1": 1.0, "2": 1.0, "3": 0.0, "4": 1.0, "9": 1.0}, {"1": 0.0, "2": 1.0, "3": 0.0, "4": 0.0}
    # differences on the shared tasks 1-4: 1, 0, 0, 1 (task 9 is not shared); mean 0.5, sd 0.577, se 0.289
    assert gpu_study._paired_z(a, b) == 1.73 and gpu_study._paired_z(b, a) == -1.73
    assert gpu_study._paired_z(a, a) is None and gpu_study._paired_z(a, {"1": 0.0}) is None
    assert gpu_study._mean_outcomes([{"1": 1.0, "2": 0.0}, {"1": 0.0}]) == {"1": 0.5, "2": 0.0}


def test_every_arm_is_paired_task_by_task_with_the_warm_start(tmp_path: Path) -> None:
    gpu_study = _load()
    assert gpu_study.main(["--dry-run", "--out", str(tmp_path)]) == 0
    evals_path = tmp_path / "warm" / "math-s0" / "evals.json"
    evals = json.loads(evals_path.read_text())
    warm = evals["heldout_outcomes"]
    assert len(warm) == 4 and set(warm.values()) <= {0, 1} and sum(warm.values()) / 4 == evals["warm_heldout"]
    result = json.loads((tmp_path / "gpu_study.json").read_text())
    for arm, v in result["arms"].items():
        runs = [gpu_study._run_outcomes(tmp_path / "runs" / r["name"]) for r in result["runs"] if f"{r['env']}/{r['algo']}" == arm]
        assert sorted(runs[0]) == sorted(warm)  # the same held-out tasks as the warm start's
        expected = gpu_study._paired_z(gpu_study._mean_outcomes(runs), {k: float(x) for k, x in warm.items()})
        assert v.get("paired_z_vs_warm") == expected
    # a warm start evaluated before outcomes were kept gets them from a second evaluation, its success beside the first's
    del evals["heldout_outcomes"]
    evals_path.write_text(json.dumps(evals))
    assert gpu_study.main(["--dry-run", "--out", str(tmp_path)]) == 0
    again = json.loads(evals_path.read_text())
    assert len(again["heldout_outcomes"]) == 4 and 0 <= again["outcomes_success"] <= 1
    assert again["warm_heldout"] == evals["warm_heldout"]  # the first evaluation's figure stays


def test_the_arithmetic_follows_the_learners_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """cpu_bf16 trains in bf16 only on a CPU with native bf16: the same study config is bf16 on one
    machine and float32 on another."""
    import torch

    from turngym.trainers import learner

    if torch.cuda.is_available():
        pytest.skip("the CPU rule; on CUDA the config's bf16 decides")
    gpu_study = _load()
    cfg = gpu_study.study_config(gpu_study.parser().parse_args(["--size", "cpu", "--engine", "vllm"]))
    monkeypatch.setattr(learner, "native_bf16_cpu", lambda: True)
    assert gpu_study.arithmetic(cfg) == "bf16"
    monkeypatch.setattr(learner, "native_bf16_cpu", lambda: False)
    assert gpu_study.arithmetic(cfg) == "float32"
    no_bf16 = gpu_study.replace(cfg, train_overrides={**cfg.train_overrides, "cpu_bf16": False})
    monkeypatch.setattr(learner, "native_bf16_cpu", lambda: True)
    assert gpu_study.arithmetic(no_bf16) == "float32"


def test_a_study_adds_no_runs_in_other_arithmetic_than_its_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A session ends, the next machine lacks native bf16: continuing would pool float32 runs with bf16
    ones as one arm. Refused with the fix, before anything is trained or rewritten."""
    gpu_study = _load()
    cfg = gpu_study.study_config(gpu_study.parser().parse_args(["--dry-run", "--out", str(tmp_path)]))
    here = gpu_study.arithmetic(cfg)
    other = {"bf16": "float32", "float32": "bf16"}[here]
    (tmp_path / "machine.json").write_text(json.dumps({"arithmetic": other, "device": "cpu"}))
    assert gpu_study.main(["--dry-run", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"trained in {other}" in err and f"this machine trains in {here}" in err and "--mixed-arithmetic" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["machine.json"]  # no warm start, no runs, no config rewritten
    assert json.loads((tmp_path / "machine.json").read_text()) == {"arithmetic": other, "device": "cpu"}
    # --mixed-arithmetic goes on, and the record and the report say the runs are mixed
    rec = gpu_study.check_arithmetic(tmp_path, cfg, mixed=True)
    assert rec["arithmetic"] == other and rec["mixed"] == [here]
    assert json.loads((tmp_path / "machine.json").read_text()) == rec
    assert f"Mixed: later runs in {here}" in gpu_study._arithmetic_line(rec)
    # the same arithmetic again: nothing to refuse, the record unchanged
    (tmp_path / "machine.json").write_text(json.dumps({"arithmetic": here, "device": "cpu"}))
    assert gpu_study.check_arithmetic(tmp_path, cfg) == {"arithmetic": here, "device": "cpu"}
