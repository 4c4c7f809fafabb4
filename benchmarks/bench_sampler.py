"""One draw per row from a policy's token distribution: ``turngym.agents.hf.draw`` vs ``torch.multinomial``.

Usage:
    python benchmarks/bench_sampler.py            # the tiny model's (128 × 4,096) and SmolLM2's (16 × 49,152) shapes
    python benchmarks/bench_sampler.py --json

``torch.multinomial`` draws a single sample by an exponential race (an exponential variate, a log,
for every vocabulary entry); ``draw`` by the inverse CDF (a float64 cumulative sum, one uniform per
row, a binary search). Both are timed in the same run, one torch thread, and the ratio reported.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from turngym.agents.hf import draw


def _time(fn, repeats: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats * 1e3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for n, vocab in ((128, 4096), (16, 49152), (256, 49152)):
        probs = torch.softmax(torch.randn(n, vocab, generator=torch.Generator().manual_seed(0)) * 3, dim=-1)
        g = torch.Generator().manual_seed(0)
        multinomial = _time(lambda probs=probs, g=g: torch.multinomial(probs, 1, generator=g), args.repeats)
        inverse_cdf = _time(lambda probs=probs, g=g: draw(probs, g), args.repeats)
        rows.append({"rows": n, "vocab": vocab, "multinomial_ms": round(multinomial, 3), "draw_ms": round(inverse_cdf, 3),
                     "speedup": round(multinomial / inverse_cdf, 2)})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            print(f"{r['rows']:4d} × {r['vocab']:6d}: multinomial {r['multinomial_ms']:7.3f} ms, draw {r['draw_ms']:7.3f} ms ({r['speedup']}×)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
