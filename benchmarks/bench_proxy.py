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
    turngym proxy --model tiny --port 8123 --threads 1 --out /tmp/cap & python benchmarks/bench_proxy.py --url http://127.0.0.1:8123

On a thread of the benchmark's own process the proxy's server, the client and ``generate`` share
one GIL; ``--url`` measures a proxy in its own process, as it is deployed.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import openai  # noqa: E402
import torch  # noqa: E402

from benchmarks._proxy_rounds import arguments, play_proxied, print_ratios, rounds, summarize  # noqa: E402
from turngym.agents.base import AgentInput  # noqa: E402
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


def answer(msgs: list[dict[str, str]], message, k: int) -> list[dict[str, str]]:
    return [*msgs, {"role": "assistant", "content": message.content}, {"role": "user", "content": f"<result>{k}</result>"}]


def proxied(url: str, client, model: str, episodes: int, turns: int, max_tokens: int, tag: str) -> tuple[float, int, int, float, float, float]:
    return play_proxied(url, client, model, episodes=episodes, turns=turns, max_tokens=max_tokens, tag=tag,
                        conversation=conversation, answer=answer)


def main() -> None:
    ap = arguments(__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="bench a proxy already running in its own process (e.g. http://127.0.0.1:8000) "
                                   "instead of one on a thread of this process")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    proxy = build_proxy(args.model, max_tokens=max(64, args.max_tokens))
    policy = proxy.policy
    with contextlib.ExitStack() as stack:
        if args.url:  # a proxy in its own process (`turngym proxy --model ...`); direct uses this process's copy
            url = args.url.rstrip("/").removesuffix("/v1")
        else:  # the same policy object behind a proxy on a thread of this process (shares the GIL with the client)
            url = stack.enter_context(ProxyThread(proxy)).url
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        model = client.models.list().data[0].id
        proxied(url, client, model, 1, 2, args.max_tokens, f"warmup-{time.time_ns()}")
        direct(policy, 1, 2, args.max_tokens)
        rows = rounds(args.rounds, args.episodes, lambda: direct(policy, args.episodes, args.turns, args.max_tokens),
                      lambda tag: proxied(url, client, model, args.episodes, args.turns, args.max_tokens, tag))
    summary = summarize(rows, args) | {"proxy": "process " + args.url if args.url else "thread"}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{args.model}: {args.episodes} episodes x {args.turns} turns, max_tokens={args.max_tokens}, median of {args.rounds} rounds, "
          f"proxy on a {summary['proxy']}")
    print_ratios(summary)
    print(f"  proxy overhead      : {summary['overhead_ms']:8.1f} ms/request beyond generate "
          f"(handler: {summary['handler_ms']:.2f} ms; the rest is HTTP, JSON and the client)")
    print(f"  outcome report      : {summary['outcome_ms_per_episode']:8.1f} ms/episode")


if __name__ == "__main__":
    main()
