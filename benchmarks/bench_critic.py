"""Cost and quality of the learned critic: PPO + GAE (shared head, separate trunk) vs critic-free GiGPO.

Usage:
    python benchmarks/bench_critic.py --update-only      # household: the update alone, interleaved (cheap)
    python benchmarks/bench_critic.py                    # household, 6 RL steps per arm
    python benchmarks/bench_critic.py --env math --steps 4 --json

``--ev`` fits each kind of critic to a known value function (the deterministic Math oracle,
``V* = γ^(turns left)``, γ = ½; 64 training and 32 held-out episodes; 40 minibatches of 8) and
reports the held-out explained variance beside that of the best turn-index-only predictor.

``--update-only`` times just what the critic changes — one PPO update of a batch of rendered
episodes (noisy-oracle demonstrations, as in ``bench_train.py``): GiGPO's policy loss alone,
the shared head (the extra values pass + the value loss read off the policy's own pass), the
separate trunk (values pass + the trunk's forward/backward) — interleaved over ``--repeats``
so machine noise hits every arm alike; the rollout, identical code for every arm, is left out.

One warm start (imitation of noisy oracle demonstrations, the credit study's env preset), then
the same RL run — same seed, tasks, batch and update — once per arm: ``gigpo`` (no critic),
``gae`` with the ``shared`` value head, ``gae`` with the ``separate`` trunk. Per arm: the mean
wall seconds of an RL step (rollout + update) and of its update alone (``step_s − rollout_s``),
each as a ratio to GiGPO's, and the critic's explained variance against the Monte-Carlo
returns (second half of the steps). Runs one after the other in this process, so a machine
whose load changes during the benchmark shifts the ratios: rerun on a quiet machine to compare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ARMS = (("gigpo", {"algo": "gigpo", "algo_params": {"gamma": 0.95}}),
        ("gae_shared", {"algo": "gae", "critic": "shared", "algo_params": {"gamma": 0.95, "lam": 0.95}}),
        ("gae_separate", {"algo": "gae", "critic": "separate", "algo_params": {"gamma": 0.95, "lam": 0.95}}))


def run(env: str, steps: int, seed: int, groups: int, group_size: int, warmup_steps: int | None = None) -> dict[str, Any]:
    from turngym.study.plan import RunSpec, StudyConfig, train_config
    from turngym.study.presets import ENV_PRESETS
    from turngym.trainers.loop import Trainer

    preset = ENV_PRESETS[env]
    study = StudyConfig(envs=(env,), groups_per_step=groups, group_size=group_size, eval_episodes=0)
    base = replace(train_config(study, RunSpec("bench", env, "grpo", seed), steps), eval_episodes=0)
    if warmup_steps is not None:  # a shorter warm start: the cost per step hardly depends on how good the policy is
        base = replace(base, warmup_steps=warmup_steps)
    out: dict[str, Any] = {"env": preset.env_id, "steps": steps, "seed": seed, "episodes_per_step": groups * group_size, "arms": {}}
    with tempfile.TemporaryDirectory() as tmp:
        warm = Trainer(base, Path(tmp) / "warm", progress=False, log=None).warm_start_only(Path(tmp) / "warm-model")
        for name, over in ARMS:
            cfg = replace(base, model=str(warm), warmup_steps=0, **over)
            print(f"{name}: {steps} RL steps", file=sys.stderr)
            Trainer(cfg, Path(tmp) / name, progress=True, log=None).run()
            rows = [json.loads(x) for x in (Path(tmp) / name / "metrics.jsonl").read_text().splitlines()]
            rl = [r for r in rows if r.get("phase") == "rl"]
            late = rl[len(rl) // 2 :]
            out["arms"][name] = {
                "step_s": float(np.mean([r["step_s"] for r in rl])),
                "update_s": float(np.mean([r["step_s"] - r["rollout_s"] for r in rl])),
                "critic_ev_mc": float(np.mean([r["critic_ev_mc"] for r in late])) if "critic_ev_mc" in rl[0] else None,
                "critic_ev": float(np.mean([r["critic_ev"] for r in late])) if "critic_ev" in rl[0] else None,
            }
    ref = out["arms"]["gigpo"]
    for arm in out["arms"].values():
        arm["step_ratio_vs_gigpo"] = arm["step_s"] / ref["step_s"]
        arm["update_ratio_vs_gigpo"] = arm["update_s"] / ref["update_s"]
    return out


def update_cost(env: str, *, batch: int, micro: int, repeats: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from turngym.study.presets import study_model
    from turngym.trainers.batch import collate, token_logprobs
    from turngym.trainers.critic import TurnCritic, TurnTargets, turn_positions
    from turngym.trainers.losses import clipped_pg_loss

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_train import _samples

    torch.set_num_threads(1)
    path = study_model()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    samples = _samples(env, batch, tok)
    pad = tok.pad_token_id
    rng = np.random.default_rng(0)
    adv = [rng.normal(size=len(s.input_ids)).tolist() for s in samples]
    order = np.argsort([len(s.input_ids) for s in samples], kind="stable")
    chunks = np.array_split(order, max(1, len(order) // micro))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    critics = {"gae_shared": TurnCritic(model, kind="shared"), "gae_separate": TurnCritic(model, kind="separate")}

    def update(critic: Any) -> float:
        t0 = time.perf_counter()
        targets = None
        if critic is not None:
            values = critic.values(model, samples, pad_id=pad, device="cpu", micro_batch_size=micro)
            targets = [TurnTargets(turn_positions(s), v, v + 0.1) for s, v in zip(samples, values)]
            critic.zero_grad()
        opt.zero_grad(set_to_none=True)
        for chunk in chunks:
            b = collate([samples[i] for i in chunk], [adv[i] for i in chunk], pad)
            with critic.reading(model) if critic is not None else contextlib.nullcontext():
                logp = token_logprobs(model, b)
                loss, _ = clipped_pg_loss(logp, b.old_logp_next, b.adv_next, b.mask_next)
                if critic is not None:
                    loss = loss + 0.5 * critic.loss(model, b, [targets[i] for i in chunk])[0]
            loss.backward()
        opt.step()
        if critic is not None:
            critic.step()
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"gigpo": [], "gae_shared": [], "gae_separate": []}
    for _ in range(repeats):
        for name in times:
            times[name].append(update(critics.get(name)))
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"env": env, "episodes": len(samples), "micro_batch": micro, "repeats": repeats,
            "tokens_per_episode": float(np.mean([len(s.input_ids) for s in samples])), "update_s": med,
            "update_ratio_vs_gigpo": {k: v / med["gigpo"] for k, v in med.items()}}


def known_value_ev(steps: int = 40, batch: int = 8) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import turngym
    from turngym.agents.render import ChatRenderer, render_episode
    from turngym.agents.tiny import TinyModelConfig, build_tiny_model
    from turngym.rollout import run_episodes
    from turngym.trainers.config import TrainConfig
    from turngym.trainers.critic import TurnCritic, explained_variance, fit_critic
    from turngym.trainers.imitation import NoisyOracle

    torch.set_num_threads(1)
    path = build_tiny_model(config=TinyModelConfig(**TrainConfig().tiny_model))
    tok = AutoTokenizer.from_pretrained(path)
    eps = run_episodes(lambda: turngym.make("turngym/Math-v0", min_steps=1, max_steps=3), NoisyOracle(0.0, seed=0), list(range(96)), batch_size=96)
    renderer = ChatRenderer(tok)
    samples = [render_episode(e, renderer, train_text_actions=True) for e in eps]
    returns = [np.array([0.5 ** (len(e.turns) - 1 - t) * e.turns[-1].reward for t in range(len(e.turns))]) for e in eps]
    by_turn: dict[int, list[float]] = {}
    for r in returns[:64]:
        for t, g in enumerate(r):
            by_turn.setdefault(t, []).append(float(g))
    truth = np.concatenate(returns[64:])
    out: dict[str, Any] = {"position_only": explained_variance(np.concatenate([[np.mean(by_turn[t]) for t in range(len(r))] for r in returns[64:]]), truth)}
    for kind in ("shared", "separate"):
        model = AutoModelForCausalLM.from_pretrained(path)
        critic = TurnCritic(model, kind=kind, lr=1e-3, seed=0)
        popt = torch.optim.AdamW(model.parameters(), lr=1e-3) if kind == "shared" else None
        t0 = time.perf_counter()
        fit_critic(critic, model, samples[:64], returns[:64], steps=steps, batch_size=batch, pad_id=tok.pad_token_id, policy_optimizer=popt)
        values = critic.values(model, samples[64:], pad_id=tok.pad_token_id, device="cpu")
        out[kind] = {"ev_heldout": explained_variance(np.concatenate(values), truth), "fit_s": time.perf_counter() - t0}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="household", help="a credit-study env preset (household, shop, math, search)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--warmup-steps", type=int, default=None, help="imitation steps of the warm start (default: the study's)")
    ap.add_argument("--update-only", action="store_true", help="time one PPO update per arm on fixed episodes (no RL runs)")
    ap.add_argument("--repeats", type=int, default=3, help="--update-only: interleaved repeats (the median is reported)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ev", action="store_true", help="held-out explained variance of each critic kind on a known value function")
    args = ap.parse_args()
    if args.ev:
        print(json.dumps(known_value_ev(), indent=1))
        return
    if args.update_only:
        res = update_cost(args.env, batch=args.groups * args.group_size, micro=16, repeats=args.repeats)
        if args.json:
            print(json.dumps(res, indent=1))
        else:
            print(f"{res['env']}: one PPO update of {res['episodes']} episodes ({res['tokens_per_episode']:.0f} tokens each), median of {res['repeats']}")
            for k, v in res["update_s"].items():
                print(f"{k:<14}{v:>8.2f} s  ×{res['update_ratio_vs_gigpo'][k]:.2f} GiGPO")
        return
    res = run(args.env, args.steps, args.seed, args.groups, args.group_size, args.warmup_steps)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{res['env']}: {res['steps']} RL steps of {res['episodes_per_step']} episodes per arm, seed {res['seed']}")
    print(f"{'arm':<14}{'s/step':>9}{'× GiGPO':>9}{'update s':>10}{'× GiGPO':>9}{'EV (MC)':>9}")
    for name, a in res["arms"].items():
        ev = f"{a['critic_ev_mc']:.2f}" if a["critic_ev_mc"] is not None else "—"
        print(f"{name:<14}{a['step_s']:>9.2f}{a['step_ratio_vs_gigpo']:>9.2f}{a['update_s']:>10.2f}{a['update_ratio_vs_gigpo']:>9.2f}{ev:>9}")


if __name__ == "__main__":
    main()
