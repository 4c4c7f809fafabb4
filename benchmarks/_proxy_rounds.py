"""What the capture proxy's overhead benchmarks share (``bench_proxy.py``, ``bench_proxy_tools.py``):
their arguments, the proxied play of an episode set, the rounds that alternate it with direct play
(so machine load hits both alike), and the summary lines both print."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx

from turngym.proxy import episode_headers, report_outcome

__all__ = ["arguments", "play_proxied", "print_ratios", "rounds", "summarize"]

Direct = Callable[[], tuple[float, int, int]]
"""Direct play of the episode set: wall seconds, requests, generated tokens."""
Proxied = Callable[[str], tuple[float, int, int, float, float, float]]
"""Proxied play under an episode-id tag: wall, requests, tokens, generate_s, request_s, outcome seconds."""


def arguments(description: str) -> argparse.ArgumentParser:
    """The options every proxy overhead benchmark takes (a script adds its own before parsing)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--json", action="store_true")
    return ap


def play_proxied(url: str, client: Any, model: str, *, episodes: int, turns: int, max_tokens: int, tag: str,
                 conversation: Callable[[int], list[dict[str, Any]]],
                 answer: Callable[[list[dict[str, Any]], Any, int], list[dict[str, Any]]],
                 **create: Any) -> tuple[float, int, int, float, float, float]:
    """Play ``episodes`` of ``turns`` requests through the proxy with the ``openai`` client; ``answer``
    extends the messages by the reply (a ``ChatCompletionMessage``) and the environment's answer to
    turn ``k``. The outcome is reported once per episode and timed apart from the requests."""
    before = httpx.get(f"{url}/turngym/stats").json()
    n = tokens = 0
    outcome_s = 0.0
    t0 = time.perf_counter()
    for e in range(episodes):
        eid, msgs = f"{tag}/{e}", conversation(e)
        for k in range(turns):
            r = client.chat.completions.create(model=model, messages=msgs, max_tokens=max_tokens,
                                               extra_headers=episode_headers(eid), **create)
            n, tokens = n + 1, tokens + r.usage.completion_tokens
            msgs = answer(msgs, r.choices[0].message, k)
        t1 = time.perf_counter()
        report_outcome(url, eid, reward=0.0)
        outcome_s += time.perf_counter() - t1
    wall = time.perf_counter() - t0 - outcome_s
    after = httpx.get(f"{url}/turngym/stats").json()
    return wall, n, tokens, after["generate_s"] - before["generate_s"], after["request_s"] - before["request_s"], outcome_s


def rounds(n_rounds: int, episodes: int, direct: Direct, proxied: Proxied) -> list[dict[str, float]]:
    """``n_rounds`` rows of per-request figures, direct and proxied played in alternating order."""
    rows = []
    for r in range(n_rounds):
        row: dict[str, float] = {}
        for what in ("direct", "proxy") if r % 2 == 0 else ("proxy", "direct"):
            if what == "direct":
                wall, n, tok = direct()
                row |= {"direct_ms": 1000 * wall / n, "direct_ms_per_token": 1000 * wall / max(tok, 1)}
            else:
                wall, n, tok, gen_s, req_s, out_s = proxied(f"r{r}-{time.time_ns()}")
                row |= {"proxy_ms": 1000 * wall / n, "proxy_ms_per_token": 1000 * wall / max(tok, 1),
                        "overhead_ms": 1000 * (wall - gen_s) / n, "handler_ms": 1000 * req_s / n,
                        "outcome_ms_per_episode": 1000 * out_s / episodes}
        row["ratio"] = row["proxy_ms"] / row["direct_ms"]
        row["ratio_per_token"] = row["proxy_ms_per_token"] / row["direct_ms_per_token"]
        rows.append(row)
    return rows


def summarize(rows: list[dict[str, float]], args: argparse.Namespace) -> dict[str, Any]:
    """The median of each figure over the rounds, and the run's settings."""
    summary: dict[str, Any] = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
    return summary | {"model": args.model, "episodes": args.episodes, "turns": args.turns, "max_tokens": args.max_tokens,
                      "rounds": args.rounds}


def print_ratios(summary: dict[str, Any]) -> None:
    """The lines both benchmarks print: each path's time per request and their ratio."""
    print(f"  direct HFPolicy.act : {summary['direct_ms']:8.1f} ms/request  ({summary['direct_ms_per_token']:.2f} ms/token)")
    print(f"  through the proxy   : {summary['proxy_ms']:8.1f} ms/request  ({summary['proxy_ms_per_token']:.2f} ms/token)")
    print(f"  ratio proxy/direct  : {summary['ratio']:.3f} per request, {summary['ratio_per_token']:.3f} per token")
