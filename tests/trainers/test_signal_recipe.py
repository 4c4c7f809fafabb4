"""Issue 37's signal metrics and recipe options: batch_signal, dynamic sampling, the edge pool,
LoRA targets and the watched warm start."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from turngym.core.errors import ConfigError
from turngym.rollout.types import Episode, Turn
from turngym.trainers.sampling import EdgePool, dynamic_batch, edge_tasks
from turngym.trainers.signal import batch_signal, group_episodes


def _ep(group: str, i: int, actions: list[tuple[int, ...]], reward: float, logps: list[list[float]] | None = None,
        seed: int = 0) -> Episode:
    turns = [Turn(index=k, action=str(a), observation="", reward=reward if k == len(actions) - 1 else 0.0, terminated=k == len(actions) - 1,
                  truncated=False, signals={}, state_key="", prev_state_key="", token_ids=list(a),
                  logprobs=(logps[k] if logps else [-0.5] * len(a))) for k, a in enumerate(actions)]
    return Episode(f"{group}/{i}", "env", "t", seed, "", group=group, turns=turns, outcome={"success": reward > 0})


def test_batch_signal_by_hand() -> None:
    eps = [
        # group a: identical actions, equal rewards (uninformative, identical)
        _ep("a", 0, [(1, 2)], 1.0, [[math.log(0.995), math.log(0.5)]]),
        _ep("a", 1, [(1, 2)], 1.0, [[math.log(0.999), math.log(0.995)]]),
        # group b: different actions, equal rewards (uninformative, not identical)
        _ep("b", 0, [(3,)], 0.0, [[math.log(0.2)]]),
        _ep("b", 1, [(4,)], 0.0, [[math.log(0.999)]]),
        # group c: different rewards (informative), three members
        _ep("c", 0, [(5,), (6,)], 1.0, [[math.log(0.9)], [math.log(0.999)]]),
        _ep("c", 1, [(5,), (7,)], 0.0, [[math.log(0.9)], [math.log(0.1)]]),
        _ep("c", 2, [(5,), (6,)], 1.0, [[math.log(0.9)], [math.log(0.999)]]),
    ]
    logps = [math.log(p) for p in (0.995, 0.5, 0.999, 0.995, 0.2, 0.999, 0.9, 0.999, 0.9, 0.1, 0.9, 0.999)]
    got = batch_signal(eps)
    assert got["entropy"] == pytest.approx(-sum(logps) / 12)
    assert got["confident_frac"] == pytest.approx(6 / 12)  # 0.995, 0.999, 0.995, 0.999, 0.999, 0.999
    assert got["identical_group_frac"] == pytest.approx(1 / 3)
    assert got["uniform_reward_frac"] == pytest.approx(2 / 3)
    assert got["informative_episodes"] == 3
    empty = batch_signal([])
    assert math.isnan(empty["entropy"]) and empty["informative_episodes"] == 0


def _group(name: str, rewards: list[float], seed: int = 0) -> list[Episode]:
    return [_ep(name, i, [(i,)], r, seed=seed) for i, r in enumerate(rewards)]


def test_dynamic_sampling_fills_the_batch_with_informative_groups() -> None:
    first = _group("u1", [1, 1]) + _group("i1", [1, 0]) + _group("u2", [0, 0])
    rounds = {1: _group("u3", [0, 0]) + _group("i2", [0, 1]), 2: _group("i3", [1, 0]) + _group("i4", [0, 1]), 3: _group("i5", [1, 0])}
    calls: list[int] = []

    def more(k: int) -> list[Episode]:
        calls.append(k)
        return rounds[k]

    batch, row = dynamic_batch(first, more, groups=3, rounds=5)
    assert [g[0].group for g in group_episodes(batch)] == ["i1", "i2", "i3"]
    assert calls == [1, 2]  # stopped as soon as three informative groups were in hand
    assert row == {"sample_rounds": 2, "sampled_groups": 7, "sampled_uniform_frac": round(3 / 7, 4)}


def test_dynamic_sampling_stops_after_its_bound_and_keeps_the_batch_size() -> None:
    first = _group("u1", [1, 1]) + _group("i1", [1, 0]) + _group("u2", [0, 0])
    calls: list[int] = []

    def more(k: int) -> list[Episode]:
        calls.append(k)
        return _group(f"u{k + 10}", [0, 0])

    batch, row = dynamic_batch(first, more, groups=3, rounds=2)
    assert calls == [1, 2]
    assert [g[0].group for g in group_episodes(batch)] == ["i1", "u1", "u2"]  # filled from the first round
    assert row["sample_rounds"] == 2 and row["sampled_groups"] == 5
    batch, row = dynamic_batch(first, more, groups=1, rounds=2)  # enough already: no extra round
    assert [g[0].group for g in group_episodes(batch)] == ["i1"] and row["sample_rounds"] == 0 and calls == [1, 2]


def test_the_edge_pool_keeps_only_tasks_solved_sometimes(tmp_path: Path) -> None:
    k = 4
    solved = {10: 0, 11: 1, 12: 2, 13: 3, 14: 4}
    eps = [e for s, n in solved.items() for e in _group(f"g{s}", [1.0] * n + [0.0] * (k - n), seed=s)]
    kept, row = edge_tasks(eps)
    assert kept == [11, 12, 13]
    assert row == {"pool_candidates": 5, "pool_kept": 3, "pool_solve_rate": 0.5, "pool_unsolved_frac": 0.2}

    scored: list[int] = []

    def score(seeds: list[int], step: int) -> list[Episode]:
        scored.append(step)
        return [e for s in seeds for e in _group(f"g{s}-{step}", [1.0] * solved[s] + [0.0] * (k - solved[s]), seed=s)]

    pool = EdgePool(lambda step: sorted(solved), score, refresh=3)
    assert pool.update(0)["pool_kept"] == 3 and pool.update(1) == {} and pool.update(2) == {}
    draws = pool.draw(np.random.default_rng(0), 8)
    assert set(draws) <= {11, 12, 13} and len(draws) == 8
    assert pool.update(4)["pool_kept"] == 3 and scored == [0, 3]  # step 4 belongs to the refresh of step 3
    pool.save(tmp_path)
    again = EdgePool(lambda step: [], score, refresh=3)
    assert again.load(tmp_path) and again.update(5) == {} and again.kept == [11, 12, 13] and scored == [0, 3]
    assert not EdgePool(lambda s: [], score, refresh=3).load(tmp_path / "nothing")


def test_recipe_options_are_validated() -> None:
    from turngym.trainers import TrainConfig

    with pytest.raises(ConfigError, match="edge_k"):
        TrainConfig(edge_pool=8, edge_k=1)
    with pytest.raises(ConfigError, match="async"):
        TrainConfig(dynamic_sampling=True, async_rollouts=True)
    with pytest.raises(ConfigError, match="warmup_holdout"):
        TrainConfig(warmup_patience=2)
    with pytest.raises(ConfigError, match="leaves none"):
        TrainConfig(warmup_holdout=1000, demo_episodes=1000)


# ---------------------------------------------------------------------- with the tiny model
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_run import metric_rows, tiny_config  # noqa: E402

from turngym.trainers import Trainer  # noqa: E402
from turngym.trainers.tracking import metric_scalars  # noqa: E402


def test_a_run_logs_the_signal_and_samples_dynamically(tmp_path: Path) -> None:
    cfg = tiny_config(steps=2, warmup_steps=0, eval_episodes=0, group_size=3, dynamic_sampling=True, dynamic_rounds=2)
    Trainer(cfg, tmp_path, progress=False, log=None).run()
    rows = [r for r in metric_rows(tmp_path) if r["phase"] == "rl"]
    for r in rows:
        assert 0 <= r["confident_frac"] <= 1 and r["entropy"] > 0 and 0 <= r["identical_group_frac"] <= 1
        assert 0 <= r["sample_rounds"] <= 2 and r["sampled_groups"] == 2 * (1 + r["sample_rounds"])
        assert r["episodes"] == cfg.groups_per_step * cfg.group_size  # the batch keeps its size
        assert r["informative_episodes"] == round((1 - r["uniform_reward_frac"]) * r["episodes"])
        assert {"rl/entropy", "rl/confident_frac", "rl/identical_group_frac", "rl/sample_rounds"} <= set(metric_scalars(r)[2])  # TB / W&B


def _kill_at(name: str):
    def hook(event: str) -> None:
        if event == name:
            raise KeyboardInterrupt(event)
    return hook


def test_the_edge_pool_resumes_exactly(tmp_path: Path) -> None:
    cfg = tiny_config(steps=3, warmup_steps=0, eval_episodes=0, task_pool=6, edge_pool=6, edge_k=2, edge_refresh=2, group_size=2)
    Trainer(cfg, tmp_path / "whole", progress=False, log=None).run()
    whole = metric_rows(tmp_path / "whole")
    assert [r.get("pool_candidates") for r in whole if r["phase"] == "rl"] == [6, None, 6]  # scored at steps 0 and 2
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, tmp_path / "cut", progress=False, log=None, hook=_kill_at("rl@2")).run()
    Trainer(cfg, tmp_path / "cut", resume=True, progress=False, log=None).run()
    assert metric_rows(tmp_path / "cut") == whole  # a pool rescored on resume would add pool_* fields to step 2's row


def test_lora_targets_choose_the_adapted_modules(tmp_path: Path) -> None:
    from turngym.trainers.learner import Learner

    def adapted(targets: str) -> set[str]:
        learner = Learner(tiny_config(lora=True, lora_targets=targets), metric=lambda r: None, log=lambda m: None, bar=None)
        trainer = Trainer(tiny_config(), tmp_path / targets.replace(",", "_"), progress=False, log=None)
        learner.setup(trainer._model_path(), trainer._make_env)
        model = learner.add_lora(learner.model)
        return {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if "lora_A" in n}

    everything = adapted("all-linear")
    assert {"q_proj", "v_proj", "down_proj"} <= everything
    assert adapted("q_proj,v_proj") == {"q_proj", "v_proj"}


def test_the_warm_start_stops_at_the_entropy_floor(tmp_path: Path) -> None:
    cfg = tiny_config(steps=1, warmup_steps=12, demo_episodes=12, warmup_holdout=4, warmup_check_every=3, warmup_entropy_floor=100.0,
                      eval_episodes=0)
    Trainer(cfg, tmp_path, progress=False, log=None).run()
    checks = [r for r in metric_rows(tmp_path) if r["phase"] == "warmup" and "heldout_nll" in r]
    assert len(checks) == 1 and checks[0]["step"] == 3 and "floor" in checks[0]["stopped"]  # the first check stops it
    assert 0 < checks[0]["heldout_entropy"] < 100 and checks[0]["heldout_nll"] > 0
    cfg = tiny_config(steps=1, warmup_steps=12, demo_episodes=12, warmup_holdout=4, warmup_check_every=3, eval_episodes=0)
    Trainer(cfg, tmp_path / "watched", progress=False, log=None).run()
    checks = [r for r in metric_rows(tmp_path / "watched") if r["phase"] == "warmup" and "heldout_nll" in r]
    assert [r["step"] for r in checks] == [3, 6, 9, 12] and not any("stopped" in r for r in checks)  # no rule: it only watches


def test_the_small_pretrained_recipe_is_a_valid_config_and_a_cli_choice() -> None:
    from turngym.cli import build_parser
    from turngym.trainers import TrainConfig
    from turngym.trainers.recipe import RECIPES, recipe

    cfg = TrainConfig(**recipe("small-pretrained"), model="smollm2")
    assert cfg.use_lora and cfg.lora_layers == 0 and cfg.lora_targets == "all-linear" and cfg.group_size >= 8 and cfg.dynamic_sampling
    assert cfg.kl_coef == 0 and cfg.warmup_holdout > 0
    args = build_parser().parse_args(["train", "--recipe", "small-pretrained"])
    assert args.recipe == "small-pretrained"
    assert set(RECIPES) == {a for a in build_parser()._subparsers._group_actions[0].choices["train"]._option_string_actions["--recipe"].choices}
    with pytest.raises(KeyError, match="known"):
        recipe("huge")
