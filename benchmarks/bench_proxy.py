"""The capture proxy's overhead per request, as a same-run ratio against calling the policy directly.

The same multi-turn conversations (a question, then ``turns`` assistant replies each followed by
a tool result) are played twice per round, in alternating order so machine load hits both alike:

* **direct** — ``HFPolicy.act`` in-process (turngym's own path: prefix-cached, ids spliced);
* **proxy** — the real ``openai`` client over HTTP to ``turngym proxy`` on the same policy object
  (threading, rendering, recording, JSON, uvicorn, the client), outcome reported at the end.

Reported: milliseconds per request of each, their ratio, and the proxy's overhead per request
(proxy wall time less the time its ``generate`` calls took), of which the part spent inside the
handler (validation, rendering, recording). Tokens sampled differ between the two (sampling is
random), so per-request times are also given per generated token.

    python benchmarks/bench_proxy.py                     # tiny model, 8 episodes x 4 turns, 3 rounds
    python benchmarks/bench_proxy.py --json --rounds 5 --max-tokens 16
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import openai  # noqa: E402
import torch  # noqa: E402

from turngym.agents.base import AgentInput  # noqa: E402
from turngym.proxy import episode_headers, report_outcome  # noqa: E402
from turngym.proxy.serve import ProxyThread, build_proxy  # noqa: E402


def conversation(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Use <calc>EXPR</calc>, then <answer>N</answer>."},
            {"role": "user", "content": f"Ann has {i + 3} bags of {i + 5} apples. How many apples?"}]


def direct(policy, episodes: int, turns: int, max_tokens: int) -> tuple[float, int, int]:
    n = tokens = 0
    t0 = time.perf_counter()
    for e in range(episodes):
        msgs, ids = conversation(e), []
        for k in range(turns):
            [a] = policy.act([AgentInput(msgs, action_token_ids=ids, max_new_tokens=max_tokens)])
            n, tokens = n + 1, tokens + len(a.token_ids)
            msgs = [*msgs, {"role": "assistant", "content": a.text}, {"role": "user", "content": f"<result>{k}</result>"}]
            ids = [*ids, a.token_ids]
    return time.perf_counter() - t0, n, tokens


def proxied(server, client, episodes: int, turns: int, max_tokens: int, tag: str) -> tuple[float, int, int, float, float]:
    proxy = server.proxy
    gen0, req0 = proxy.stats()["generate_s"], proxy.request_s
    n = tokens = 0
    t0 = time.perf_counter()
    for e in range(episodes):
        eid, msgs = f"{tag}/{e}", conversation(e)
        for k in range(turns):
            r = client.chat.completions.create(model=proxy.config.model_name, messages=msgs, max_tokens=max_tokens,
                                               extra_headers=episode_headers(eid))
            n, tokens = n + 1, tokens + r.usage.completion_tokens
            msgs = [*msgs, {"role": "assistant", "content": r.choices[0].message.content},
                    {"role": "user", "content": f"<result>{k}</result>"}]
        report_outcome(server.url, eid, reward=0.0)
    wall = time.perf_counter() - t0
    return wall, n, tokens, proxy.stats()["generate_s"] - gen0, proxy.request_s - req0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    proxy = build_proxy(args.model, max_tokens=max(64, args.max_tokens))
    policy = proxy.policy
    rows = []
    with ProxyThread(proxy) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        proxied(server, client, 1, 2, args.max_tokens, "warmup")
        direct(policy, 1, 2, args.max_tokens)
        for r in range(args.rounds):
            order = ("direct", "proxy") if r % 2 == 0 else ("proxy", "direct")
            row: dict[str, float] = {}
            for what in order:
                if what == "direct":
                    wall, n, tok = direct(policy, args.episodes, args.turns, args.max_tokens)
                    row |= {"direct_ms": 1000 * wall / n, "direct_ms_per_token": 1000 * wall / max(tok, 1)}
                else:
                    wall, n, tok, gen_s, req_s = proxied(server, client, args.episodes, args.turns, args.max_tokens, f"r{r}")
                    row |= {"proxy_ms": 1000 * wall / n, "proxy_ms_per_token": 1000 * wall / max(tok, 1),
                            "overhead_ms": 1000 * (wall - gen_s) / n, "handler_ms": 1000 * req_s / n}
            row["ratio"] = row["proxy_ms"] / row["direct_ms"]
            row["ratio_per_token"] = row["proxy_ms_per_token"] / row["direct_ms_per_token"]
            rows.append(row)
    summary = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
    summary |= {"model": args.model, "episodes": args.episodes, "turns": args.turns, "max_tokens": args.max_tokens,
                "rounds": args.rounds, "stats": proxy.stats()}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{args.model}: {args.episodes} episodes x {args.turns} turns, max_tokens={args.max_tokens}, median of {args.rounds} rounds")
    print(f"  direct HFPolicy.act : {summary['direct_ms']:8.1f} ms/request  ({summary['direct_ms_per_token']:.2f} ms/token)")
    print(f"  through the proxy   : {summary['proxy_ms']:8.1f} ms/request  ({summary['proxy_ms_per_token']:.2f} ms/token)")
    print(f"  ratio proxy/direct  : {summary['ratio']:.3f} per request, {summary['ratio_per_token']:.3f} per token")
    print(f"  proxy overhead      : {summary['overhead_ms']:8.1f} ms/request beyond generate "
          f"(handler: {summary['handler_ms']:.2f} ms; the rest is HTTP, JSON and the client)")


if __name__ == "__main__":
    main()
