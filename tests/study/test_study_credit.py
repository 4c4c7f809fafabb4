"""The credit study: planning, the variance study's truth and scoring, the report, the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from turngym.core.errors import ConfigError
from turngym.study.credit import CLAIMS, StudyConfig, plan_runs, regenerate_command
from turngym.study.report import write_report
from turngym.study.variance import VarianceConfig, _score, run_variance_study


def test_plan_runs_covers_every_claim_and_seed() -> None:
    cfg = StudyConfig(seeds=2, envs=("household", "shop"), algos=("gigpo", "grpo"))
    runs = plan_runs(cfg)
    names = [r.name for r in runs]
    assert len(names) == len(set(names))
    assert {r.claim for r in runs} == set(CLAIMS) - {"variance"}
    assert len([r for r in runs if r.claim == "gigpo_vs_grpo"]) == 2 * 2 * 2
    farm = {r.arm: r.overrides["shaping_cap"] for r in runs if r.claim == "farming"}
    papo = [r for r in runs if r.claim == "papo"]
    assert {r.algo for r in papo} == {"papo", "grpo"} and len(papo) == 2 * 2
    assert all(set(r.overrides["reward_weights"].values()) == {0.0} for r in papo)  # outcome-only reward in both arms
    assert math.isinf(farm["naive"]) and farm["bounded"] < 1
    critic = {(r.name, r.algo) for r in runs if r.env == "household" and r.algo in ("gae", "grpo", "gigpo")}
    for s in range(2):  # PPO with both critics, and GRPO/GiGPO shared with claim 1 (same names, trained once)
        assert {(f"train/household-gae-s{s}", "gae"), (f"critic/household-gae_separate-s{s}", "gae"),
                (f"train/household-grpo-s{s}", "grpo"), (f"train/household-gigpo-s{s}", "gigpo")} <= critic
    sep = next(r for r in runs if r.arm == "gae_separate")
    assert sep.overrides == {"critic": "separate"}
    assert not plan_runs(StudyConfig(claims=("variance",)))


def test_config_rejects_unknown_names() -> None:
    with pytest.raises(ConfigError, match="unknown env"):
        StudyConfig(envs=("nope",))
    with pytest.raises(ConfigError, match="unknown algo"):
        StudyConfig(algos=("gea",))
    assert StudyConfig(algos=("gae", "grpo")).algos == ("gae", "grpo")  # PPO with the learned critic is an arm like any
    with pytest.raises(ConfigError, match="unknown env"):
        StudyConfig(critic_envs=("nope",))
    with pytest.raises(ConfigError, match="claim"):
        StudyConfig(claims=("magic",))


def test_regenerate_command_round_trips_through_the_cli_parser() -> None:
    import argparse
    import shlex

    from turngym.study.credit import config_from_args, setup_parser

    cfg = StudyConfig(seeds=2, budget=123, envs=("shop",), claims=("papo", "variance"), out="x/y")
    parser = argparse.ArgumentParser()
    setup_parser(parser)
    again = config_from_args(parser.parse_args(shlex.split(regenerate_command(cfg))[2:]))
    assert again.to_dict() == cfg.to_dict()


def test_score_is_zero_error_for_an_estimator_equal_to_the_truth_up_to_scale() -> None:
    gt = np.array([0.5, -0.5, 0.2, 0.2, -0.1])
    sa = ["a", "b", "c", "c", "d"]
    res = _score({"exact": list(3.0 * gt), "noisy": [1.0, -1.0, 1.0, -1.0, 0.0]}, gt, sa)["estimators"]
    assert res["exact"]["mse"] == pytest.approx(0.0, abs=1e-12)
    assert res["exact"]["corr"] == pytest.approx(1.0)
    assert res["exact"]["scale"] == pytest.approx(1 / 3)
    assert res["noisy"]["variance"] > 0  # the repeated (s,a) "c" got two different advantages
    assert res["noisy"]["rel_mse"] > res["exact"]["rel_mse"]


def test_variance_study_ground_truth_and_turn_level_baselines() -> None:
    vcfg = VarianceConfig(tasks=4, repeats=3, mc=8, critic_steps=4, critic_repeats=1)
    res = run_variance_study(vcfg)
    for shape in ("group", "tree"):
        est = res["shapes"][shape]["estimators"]
        assert set(est) == {"grpo", "gigpo", "turn_grpo", "tree", "gae_grouped", "critic_mc", "critic_td"}
        assert res["shapes"][shape]["critic_value"]["mae_vs_mc_value"] > 0
        assert all(-1 <= e["corr"] <= 1 for e in est.values())
    # in a group of independent episodes no turn has a sibling past the first: turn_grpo is mostly 0
    assert res["shapes"]["group"]["estimators"]["turn_grpo"]["zero_frac"] > res["shapes"]["tree"]["estimators"]["turn_grpo"]["zero_frac"]
    assert res["shapes"]["tree"]["branching"] == [2, 2, 2]
    again = run_variance_study(vcfg)
    again["critic_fit"]["seconds"] = res["critic_fit"]["seconds"]
    assert res == again | {"seconds": res["seconds"]}  # deterministic, the fitted critic included
    # the scored rollouts do not depend on the critic (it is fitted on rollouts of its own)
    plain = run_variance_study(VarianceConfig(tasks=4, repeats=3, mc=8, critic_steps=0))
    assert plain["shapes"]["group"]["estimators"]["grpo"] == res["shapes"]["group"]["estimators"]["grpo"]


def _fake_run(root, claim, env, arm, seed, success, turns, zero):  # a test double of a finished run's files
    name = f"{claim if claim in ('farming', 'papo') else 'train'}/{env}-{arm}-s{seed}"
    d = root / "runs" / name
    d.mkdir(parents=True)
    curve = [{"phase": "rl", "step": i + 1, "success": success, "episodes": 16, "mean_turns": turns + i, "zero_adv_frac": zero, "invalid_rate": 0.1,
              "mean_shaped_return": 1.0} for i in range(3)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))
    ev = {"success": success, "tool_calls": turns, "success_by_hops": {"1": success, "2": success / 2}}
    (d / "study.json").write_text(json.dumps({"name": name, "claim": claim, "env": env, "arm": arm, "algo": arm, "seed": seed, "steps": 3,
                                              "env_id": "e", "heldout_env_id": "e", "success_before": 0.1, "pool_eval": ev, "heldout_eval": ev}))


def test_report_numbers_come_from_the_metrics_files(tmp_path) -> None:
    for seed in range(3):
        _fake_run(tmp_path, "gigpo_vs_grpo", "shop", "gigpo", seed, 0.6 + 0.01 * seed, 3, 0.1)
        _fake_run(tmp_path, "gigpo_vs_grpo", "shop", "grpo", seed, 0.3 + 0.01 * seed, 3, 0.1)
        _fake_run(tmp_path, "papo", "math", "papo_outcome", seed, 0.5, 2, 0.1 + 0.01 * seed)
        _fake_run(tmp_path, "papo", "math", "grpo_outcome", seed, 0.5, 2, 0.6)
        _fake_run(tmp_path, "farming", "math", "naive", seed, 0.2, 5, 0.0)
        _fake_run(tmp_path, "farming", "math", "bounded", seed, 0.5, 2, 0.0)
        _fake_run(tmp_path, "info_gain", "search", "igpo", seed, 0.6 + 0.02 * seed, 3, 0.0)
        _fake_run(tmp_path, "info_gain", "search", "grpo", seed, 0.3, 3, 0.0)
    (tmp_path / "study_config.json").write_text(json.dumps(StudyConfig(envs=("shop",), seeds=3).to_dict()))
    for seed in range(3):  # claim 6: PPO + critic on household; its timings and critic EV come from the curves
        for arm, success, step_s in (("gae", 0.5, 3.0), ("gae_separate", 0.45, 4.5), ("grpo", 0.3 + 0.01 * seed, 2.0), ("gigpo", 0.4, 2.0)):
            _fake_run(tmp_path, "critic" if arm == "gae_separate" else "train", "household", arm, seed, success, 10, 0.0)
            d = next((tmp_path / "runs").glob(f"*/household-{arm}-s{seed}"))
            rows = [json.loads(x) | {"step_s": step_s} | ({"critic_ev_mc": 0.4, "value_loss": 0.01} if arm.startswith("gae") else {})
                    for x in (d / "metrics.jsonl").read_text().splitlines()]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    vcfg = VarianceConfig(tasks=2, repeats=2, mc=4, critic_steps=2, critic_repeats=1)
    (tmp_path / "variance.json").write_text(json.dumps(run_variance_study(vcfg)))
    text = write_report(tmp_path, command="turngym study credit --quick").read_text()
    assert "| train | shop | gigpo | 3 | 3 | 10.0 ± 0.0 | 61.0 ± 1.0 |" in text
    assert "**shop** — pool: **reproduced** (GiGPO − GRPO +30.0 points" in text
    # the summary table; paired by seed the difference is exactly 0.30 on every seed, so its s.e. is 0
    assert "| 1. GiGPO > GRPO (shop) | **reproduced** (+30.0 points of pool success, 2 s.e. 0.0) |" in text
    assert "| gigpo | 10.0 ± 0.0 → 61.0 ± 1.0 | 61.0 ± 1.0 | 3.000 ± 0.000 → 4.500 ± 0.000 | 10.0 ± 0.0% → 10.0 ± 0.0% |" in text
    assert "| papo (outcome reward + process term) | 11.0 ± 1.0% |" in text
    assert "zero-advantage turns, GRPO − PAPO +49.0 points" in text and "PAPO keeps a gradient" in text
    # 2-hop success is half the run's success: IGPO 30, 31, 32 vs GRPO 15 → +16.0 points
    assert "Verdict (held out, all multi-hop questions): **reproduced** (IGPO − GRPO +16.0 points" in text
    assert (tmp_path / "claim1_shop.png").stat().st_size > 1000
    # claim 6: PPO + critic − GiGPO = +10 points on every seed; cost ratio 3.0 / 2.0 s per step
    assert "| PPO + learned critic (shared head) | 10.0 ± 0.0 → 50.0 ± 0.0 | 50.0 ± 0.0 | 0.400 ± 0.000 | 0.010 ± 0.000 | 3.000 ± 0.000 | ×1.50 ± 0.00 |" in text
    assert "| 6. group statistics replace a learned critic (household) | **no**: PPO + critic beats GiGPO (+10.0 points" in text
    assert "learned critic (group rollouts" in text and "| critic_td |" in text
    assert (tmp_path / "claim6_household.png").stat().st_size > 1000
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["claims"]["gigpo_vs_grpo/shop"]["diff_pool"][0] == pytest.approx(0.3)
    # `--report-only` rewrites the same report from the same files
    from turngym.cli import main

    (tmp_path / "report.md").unlink()
    assert main(["study", "credit", "--report-only", "--out", str(tmp_path)]) == 0
    again = (tmp_path / "report.md").read_text()
    assert again.split("\n", 3)[3] == text.split("\n", 3)[3]  # all but the regenerate line (this test wrote its own)


def test_cli_lists_the_study_command(capsys) -> None:
    from turngym.cli import main

    with pytest.raises(SystemExit):
        main(["study", "credit", "--help"])
    assert "--budget" in capsys.readouterr().out


def test_quick_mode_runs_every_claim_end_to_end(tmp_path) -> None:
    """``turngym study credit --quick``, the CI smoke test of the whole study (1-2 min on 2 CPU cores)."""
    from turngym.study.credit import run_study

    report = run_study(StudyConfig.quick_config(out=tmp_path), log=lambda msg: None)
    text = report.read_text()
    for n in range(1, 7):
        assert f"## Claim {n}" in text
    assert len(list(tmp_path.glob("runs/*/*/study.json"))) == len(plan_runs(StudyConfig.quick_config())) == 10
    for n in (1, 3, 4, 5, 6):  # every trained claim produced numbers, not "Not run."
        section = text.split(f"## Claim {n}")[1].split("## Claim")[0]
        assert "Not run." not in section
    assert "turngym study credit" in text and "--quick" in text


def test_a_claim_without_runs_says_not_run(tmp_path) -> None:
    (tmp_path / "study_config.json").write_text(json.dumps(StudyConfig(envs=("shop",), seeds=3).to_dict()))
    text = write_report(tmp_path, command="turngym study credit").read_text()
    for n in range(1, 7):
        assert text.split(f"## Claim {n}")[1].split("## Claim")[0].strip().endswith("Not run.")


def test_arm_differences_are_paired_by_seed() -> None:
    """Arms of a seed share its warm start: the per-seed difference removes the seed spread."""
    from turngym.study.report import _arm_diff

    base = [0.1, 0.5, 0.9]
    a = [{"seed": s, "v": b + 0.05 + 0.01 * s} for s, b in enumerate(base)]
    b = [{"seed": s, "v": b} for s, b in enumerate(base)]
    mean, se, n = _arm_diff(a, b, lambda r: r["v"])
    assert (mean, n) == (pytest.approx(0.06), 3) and se == pytest.approx(0.01 / 3**0.5)
    unpaired_mean, unpaired_se, _ = _arm_diff(a, b[:2], lambda r: r["v"])  # seeds differ: unpaired
    assert unpaired_se > 0.2 and unpaired_mean == pytest.approx(np.mean([x["v"] for x in a]) - 0.3)


def test_pretrained_regenerate_command_round_trips() -> None:
    """A pretrained study's command spells out every default it took, so it reproduces the study
    even if ``pretrained_config``'s defaults change later."""
    import argparse
    import shlex

    from turngym.study.credit import config_from_args, setup_parser

    cfg = StudyConfig.pretrained_config("smollm2", seeds=3, envs=("math",), out="x/y", lora_layers=4, train_overrides={"warmup_lr": 1e-3})
    assert cfg.task_pool == 0 and cfg.shared_warm_start and cfg.claims == ("gigpo_vs_grpo",)
    parser = argparse.ArgumentParser()
    setup_parser(parser)
    command = regenerate_command(cfg)
    again = config_from_args(parser.parse_args(shlex.split(command)[2:]))
    assert again.to_dict() == cfg.to_dict()
    with pytest.raises(ConfigError, match="unknown StudyConfig field"):
        config_from_args(parser.parse_args(["credit", "--model", "smollm2", "--set", "lora_layer=3"]))


def test_pretrained_study_shares_one_evaluated_warm_start(tmp_path) -> None:
    """A pretrained model (here the tiny model's directory, so it runs in seconds; anything but
    ``"tiny"`` takes the pretrained path): LoRA runs, one warm start shared by the seeds, evaluated
    once (base model zero-shot and warm start, ``evals.json``) and that evaluation is every run's
    "before"; the report gets the held-out section."""
    from turngym.agents.tiny import build_tiny_model
    from turngym.study.credit import run_study, warm_start_dir

    cfg = StudyConfig.pretrained_config(
        str(build_tiny_model()), out=tmp_path, envs=("math",), seeds=2, budget=8, warmup_steps=2, demo_episodes=8,
        eval_episodes=4, heldout_episodes=4, groups_per_step=2, group_size=2, threads=1, lora_layers=1, max_new_tokens=8, max_turns=3,
        train_overrides={"warmup_batch_size": 4})
    report = run_study(cfg, log=lambda msg: None)
    assert warm_start_dir(cfg, "math", 0) == warm_start_dir(cfg, "math", 1) == tmp_path / "warm" / "math-s0"
    assert [p.name for p in (tmp_path / "warm").iterdir()] == ["math-s0"]
    evals = json.loads((tmp_path / "warm" / "math-s0" / "evals.json").read_text())
    runs = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("runs/*/*/study.json"))]
    assert len(runs) == 4 and {(r["algo"], r["seed"]) for r in runs} == {(a, s) for a in ("gigpo", "grpo") for s in (0, 1)}
    for r in runs:
        assert r["train_config"]["lora"] is True and r["train_config"]["lora_layers"] == 1
        assert r["success_before"] == evals["warm_eval"] == r["heldout_before"] and r["heldout_base"] == evals["base_heldout"]
        assert r["heldout_eval"] == r["pool_eval"]  # fresh training tasks: the trainer's final evaluation is on held-out seeds
        assert r["heldout_eval"]["episodes"] == 4
    text = report.read_text()
    assert "Held-out success of the pretrained model" in text and "with LoRA on its last 1 layers" in text
    assert (tmp_path / "heldout.png").stat().st_size > 1000 and "![held-out success](heldout.png)" in text


def test_pretrained_heldout_table_compares_after_rl_with_the_base_model_and_the_warm_start(tmp_path) -> None:
    """The held-out row's numbers are the evaluations' own: 2 seeds pooled (10/40 + 14/40 = 30%),
    zero-shot 0/32, warm start 4/64; z by the pooled two-proportion test against each."""
    import math as _m

    from turngym.study.report import _pretrained_section

    (tmp_path / "warm" / "math-s0").mkdir(parents=True)
    (tmp_path / "warm" / "math-s0" / "evals.json").write_text(json.dumps(
        {"base_heldout_eval": {"episodes": 32, "success": 0.0}, "warm_heldout_eval": {"episodes": 64, "success": 0.0625}}))
    runs = [{"env": "math", "arm": "grpo", "seed": s, "warm_start": str(tmp_path / "warm" / "math-s0"), "heldout_before": 0.0625,
             "heldout_base": 0.0, "heldout_env_id": "turngym/Math-v0", "heldout_eval": {"episodes": 40, "success": k / 40}}
            for s, k in ((0, 10), (1, 14))]
    summary: dict = {}
    md = "\n".join(_pretrained_section({"model": "smollm2"}, runs, summary, tmp_path))

    def z(pa, na, pb, nb):
        p = (pa * na + pb * nb) / (na + nb)
        return (pa - pb) / _m.sqrt(p * (1 - p) * (1 / na + 1 / nb))

    z_base, z_warm = z(0.3, 80, 0.0, 32), z(0.3, 80, 0.0625, 64)
    assert f"| 30.0 [21, 41] | +30.0 ({z_base:+.2f}) | +23.8 ({z_warm:+.2f}) | 25.0, 35.0 |" in md
    z_imitation = z(0.0625, 64, 0.0, 32)  # the warm start against the base model: what imitation alone added
    assert f"| 6.2 [2, 15] ({z_imitation:+.2f}) | grpo |" in md
    row = summary["pretrained_heldout"]["math/grpo"]
    assert row["z_vs_zero_shot"] == pytest.approx(z_base) and row["z_vs_warm"] == pytest.approx(z_warm)
    assert row["z_warm_vs_zero_shot"] == pytest.approx(z_imitation)
    assert row["episodes"] == 80 and row["zero_shot_episodes"] == 32 and row["warm_start_episodes"] == 64


def test_runs_start_as_soon_as_their_own_warm_start_is_ready() -> None:
    """With --jobs, a key's runs are queued when *its* first job is done: here the fast key's run
    finishes while the slow key's warm start still runs (a barrier after every warm start would
    put it after); a key with no first job starts at once. Sleeps stand in for the jobs."""
    import time

    from turngym.study.credit import _pipeline

    first = {"fast": (time.sleep, (0.1,)), "slow": (time.sleep, (6.0,))}
    then = {"fast": [(time.sleep, (0.1,))], "slow": [(time.sleep, (0.1,))], "ready": [(time.sleep, (0.1,))]}
    events = [(kind, key) for kind, key, _ in _pipeline(first, then, jobs=2)]
    assert sorted(events) == sorted([("first", "fast"), ("first", "slow"), ("then", "fast"), ("then", "slow"), ("then", "ready")])
    assert events.index(("then", "fast")) < events.index(("first", "slow")) < events.index(("then", "slow"))
    assert events.index(("first", "fast")) < events.index(("then", "fast"))
    # one job at a time: in order, a key's first before its runs
    assert [(k, key) for k, key, _ in _pipeline(first | {"slow": (time.sleep, (0.0,))}, then, jobs=1)] == [
        ("first", "fast"), ("then", "fast"), ("first", "slow"), ("then", "slow"), ("then", "ready")]


def test_movement_section_reads_the_step_diagnostics_and_the_halves_of_the_curve() -> None:
    """Two seeds of 4 steps (16 episodes each): the diagnostics are the mean over the 8 steps; the
    first half is steps 1-2 of both seeds (0+4+2+2 = 8 of 64 successes), the second steps 3-4 (24/64)."""
    from turngym.study.report import _movement_section

    def curve(successes: list[int], kl: float) -> list[dict]:
        return [{"step": i + 1, "success": k / 16, "episodes": 16, "approx_kl": kl, "ratio_std": 0.1, "clip_frac": 0.01,
                 "grad_norm": 0.2, "zero_adv_frac": 0.5} for i, k in enumerate(successes)]

    runs = [{"env": "math", "arm": "gigpo", "seed": 0, "curve": curve([0, 4, 6, 6], 0.002)},
            {"env": "math", "arm": "gigpo", "seed": 1, "curve": curve([2, 2, 6, 6], 0.004)},
            {"env": "math", "arm": "grpo", "seed": 0, "curve": [{"step": 1, "success": 0.5, "episodes": 16}]}]  # logged before approx_kl
    summary: dict = {}
    md = "\n".join(_movement_section(runs, summary))
    row = summary["movement"]["math/gigpo"]
    assert row["approx_kl"] == pytest.approx(0.003) and row["seeds"] == 2 and row["steps"] == 4
    assert row["success_first_half"] == pytest.approx(8 / 64) and row["success_second_half"] == pytest.approx(24 / 64)
    assert "| math/gigpo | 2 × 4 | 3.00e-03 | 0.100 | 0.010 | 0.200 | 0.500 | 12.5 [6, 23] | 37.5 [27, 50] |" in md
    assert "math/grpo" not in summary["movement"]
    assert _movement_section(runs[2:], {}) == []  # an older study's report gains no empty section


def test_a_multi_paragraph_note_stays_inside_the_quote(tmp_path) -> None:
    (tmp_path / "study_config.json").write_text(json.dumps(StudyConfig(envs=("math",), seeds=1).to_dict()))
    (tmp_path / "note.md").write_text("The diagnosis.\n\n| lr | kl |\n|---|---|\n| 1e-3 | 0.003 |\n")
    text = write_report(tmp_path, command="turngym study credit").read_text()
    assert "> **Note.** The diagnosis.\n>\n> | lr | kl |\n> |---|---|\n> | 1e-3 | 0.003 |\n" in text


def test_a_run_stopped_mid_way_continues_from_its_checkpoint(tmp_path, monkeypatch) -> None:
    """A study stopped inside a run (a session's end) resumes that run exactly from its newest
    checkpoint, not from its first step: the continued run logs the rows an uninterrupted one does."""
    import turngym.trainers.loop as loop
    from turngym.agents.tiny import build_tiny_model
    from turngym.study.credit import RunSpec, run_one

    def cfg(out):
        return StudyConfig.pretrained_config(
            str(build_tiny_model()), out=out, envs=("math",), seeds=1, budget=8, warmup_steps=2, demo_episodes=8, eval_episodes=4,
            heldout_episodes=4, groups_per_step=2, group_size=2, threads=1, lora_layers=1, max_new_tokens=8, max_turns=3,
            train_overrides={"warmup_batch_size": 4, "save_every": 1})  # the study's default saves at the end only

    spec = RunSpec("gigpo_vs_grpo", "math", "gigpo", 0)

    def rows(out):
        return [{k: v for k, v in json.loads(x).items() if k not in ("rollout_s", "step_s", "sync_s")}
                for x in (out / "runs" / spec.name / "metrics.jsonl").read_text().splitlines()]

    straight = run_one(cfg(tmp_path / "a"), spec, 3)

    class Stopped(Exception):
        pass

    real, events = loop.Trainer, []

    class StopsAfterStep2(real):  # test double: the real trainer, stopped as a session's end would stop it
        def _event(self, name: str) -> None:
            events.append(name)
            super()._event(name)
            if name == "checkpoint committed@2":
                raise Stopped

    monkeypatch.setattr(loop, "Trainer", StopsAfterStep2)
    with pytest.raises(Stopped):
        run_one(cfg(tmp_path / "b"), spec, 3)
    events.clear()
    resumed = run_one(cfg(tmp_path / "b"), spec, 3)
    assert "rl@1" not in events and "rl@2" not in events and "rl@3" in events  # continued, not redone
    assert rows(tmp_path / "b") == rows(tmp_path / "a")
    assert resumed["heldout_eval"] == straight["heldout_eval"]
