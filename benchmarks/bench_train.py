"""Time one training micro-batch (forward + backward of the token log-probs) on real episodes.

Usage:
    python benchmarks/bench_train.py                       # Household, Shop and Math demonstrations
    python benchmarks/bench_train.py --envs household --repeats 5 --json

Episodes are the warm-start demonstrations of the credit study's env presets (noisy oracle,
rendered as one sequence each), so the share of policy tokens is what training sees: a few
percent in Household and Shop, where the observations are long. Three variants of
:func:`turngym.trainers.batch.token_logprobs`, timed in the same process as ratios:

* ``full``: the vocabulary projection and softmax at every position, with the padding mask;
* ``masked``: the projection only at the policy's tokens (the default);
* ``masked, sorted``: also the micro-batches of a minibatch grouped by length, as the trainer does.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np


def _samples(env: str, episodes: int, tokenizer: Any) -> list[Any]:
    import turngym
    from turngym.agents.render import ChatRenderer, render_episode
    from turngym.rollout import run_episodes
    from turngym.study.credit import ENV_PRESETS
    from turngym.trainers.imitation import NoisyOracle

    preset = ENV_PRESETS[env]

    def make() -> Any:
        e = turngym.make(preset.env_id, **preset.env_kwargs)
        e.unwrapped.system_prompt = ""
        return e

    eps = run_episodes(make, NoisyOracle(0.3, seed=0), list(range(episodes)), batch_size=episodes)
    renderer = ChatRenderer(tokenizer)
    return [render_episode(ep, renderer, train_text_actions=True) for ep in eps]


def _step(model: Any, samples: list[Any], chunks: list[np.ndarray], pad_id: int, *, only_masked: bool, padding_mask: bool) -> float:
    import torch

    from turngym.trainers.batch import collate, token_logprobs
    from turngym.trainers.losses import token_nll

    t0 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    for chunk in chunks:
        batch = collate([samples[i] for i in chunk], None, pad_id)
        if padding_mask:  # the previous path: every position, with the padding mask
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
            logp = torch.log_softmax(logits, -1).gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        else:
            logp = token_logprobs(model, batch, only_masked=only_masked)
        token_nll(logp, batch.mask_next).backward()
    return time.perf_counter() - t0


def bench(env: str, *, batch: int, micro: int, repeats: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from turngym.study.presets import study_model

    torch.set_num_threads(1)
    path = study_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    samples = _samples(env, batch, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    idx = np.arange(len(samples))
    n_chunks = math.ceil(len(idx) / micro)
    plain = np.array_split(idx, n_chunks)
    by_len = np.array_split(idx[np.argsort([len(s.input_ids) for s in samples], kind="stable")], n_chunks)
    variants = {
        "full": dict(chunks=plain, only_masked=False, padding_mask=True),
        "masked": dict(chunks=plain, only_masked=True, padding_mask=False),
        "masked, sorted": dict(chunks=by_len, only_masked=True, padding_mask=False),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeats):  # interleaved, so machine noise hits every variant alike
        for name, kw in variants.items():
            times[name].append(_step(model, samples, pad_id=pad_id, **kw))
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {
        "env": env,
        "episodes": len(samples),
        "micro_batch": micro,
        "tokens_per_episode": float(np.mean([len(s.input_ids) for s in samples])),
        "policy_token_share": float(np.sum([sum(s.loss_mask) for s in samples]) / np.sum([len(s.input_ids) for s in samples])),
        "seconds": med,
        "speedup_vs_full": {k: med["full"] / v for k, v in med.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["household", "shop", "math"])
    parser.add_argument("--batch", type=int, default=32, help="episodes per minibatch")
    parser.add_argument("--micro", type=int, default=8, help="episodes per micro-batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    results = [bench(env, batch=args.batch, micro=args.micro, repeats=args.repeats) for env in args.envs]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        print(f"{r['env']}: {r['episodes']} episodes of {r['tokens_per_episode']:.0f} tokens ({100 * r['policy_token_share']:.1f}% policy), "
              f"micro-batches of {r['micro_batch']}")
        for name, sec in r["seconds"].items():
            print(f"  {name:<16} {sec:6.2f} s   ×{r['speedup_vs_full'][name]:.2f}")


if __name__ == "__main__":
    main()
