"""The capture proxy's overhead per request **with tools**, as a same-run ratio against calling the policy directly.

The same multi-turn tool conversations (a store request, then ``turns`` assistant replies each
followed by a ``tool`` result) are played twice per round, in alternating order so machine load
hits both alike:

* **direct** — ``HFPolicy.act`` in-process on the conversation as the proxy renders it for a
  template without tool support (the tools as the injected Hermes system prompt,
  :func:`turngym.proxy.tools.tools_system_prompt`), the call opening forced as
  ``tool_choice: "required"`` forces it (``force_action_prefix``), the reply parsed by the same parser;
* **proxy** — the real ``openai`` client over HTTP to the proxy on the same policy object with
  ``tools`` and ``tool_choice: "required"`` (tool validation, template/injection, forced prefix,
  parsing, call-id recognition in the history, recording, JSON, uvicorn, the client).

Reported: milliseconds per request of each, their ratio (per request and per generated token),
and the proxy's overhead per request beyond its ``generate`` calls. The tiny model writes no
parseable call, so its replies come back as text (counted as parse failures): the parse and
render work is done either way.

    python benchmarks/bench_proxy_tools.py                 # tiny model, 8 episodes x 4 turns, 3 rounds
    python benchmarks/bench_proxy_tools.py --json --rounds 5
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import openai  # noqa: E402
import torch  # noqa: E402

from benchmarks._proxy_rounds import arguments, play_proxied, print_ratios, rounds, summarize  # noqa: E402
from turngym.agents.base import AgentInput  # noqa: E402
from turngym.envs.tools.store import STORE_TOOLS  # noqa: E402
from turngym.proxy.serve import ProxyThread, build_proxy  # noqa: E402
from turngym.proxy.tools import tools_system_prompt  # noqa: E402

TOOLS = list(STORE_TOOLS[:3])


def conversation(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You help store customers."},
            {"role": "user", "content": f"Where is my order O{1000 + i}? My email is c{i}@example.com."}]


def direct(policy, parser, episodes: int, turns: int, max_tokens: int) -> tuple[float, int, int]:
    """In-process: the tools as the injected system prompt, the call opening forced, the reply parsed."""
    n = tokens = 0
    prefix = parser.forced_prefix(None)
    t0 = time.perf_counter()
    for e in range(episodes):
        msgs, ids = conversation(e), []
        msgs[0] = {"role": "system", "content": f"{msgs[0]['content']}\n\n{tools_system_prompt(TOOLS, parser)}"}
        for k in range(turns):
            [a] = policy.act([AgentInput(msgs, action_token_ids=ids, max_new_tokens=max_tokens, action_prefix=prefix)])
            parser.parse(a.text)
            n, tokens = n + 1, tokens + len(a.token_ids)
            msgs = [*msgs, {"role": "assistant", "content": a.text}, {"role": "tool", "content": f'{{"status": "shipped", "k": {k}}}'}]
            ids = [*ids, a.token_ids]
    return time.perf_counter() - t0, n, tokens


def answer(msgs: list[dict[str, Any]], message, k: int) -> list[dict[str, Any]]:
    calls = [c.model_dump() for c in message.tool_calls or []]
    return [*msgs, {"role": "assistant", "content": message.content, **({"tool_calls": calls} if calls else {})},
            {"role": "tool", "tool_call_id": calls[0]["id"] if calls else "none", "content": f'{{"status": "shipped", "k": {k}}}'}]


def proxied(url: str, client, model: str, episodes: int, turns: int, max_tokens: int, tag: str) -> tuple[float, int, int, float, float, float]:
    return play_proxied(url, client, model, episodes=episodes, turns=turns, max_tokens=max_tokens, tag=tag,
                        conversation=conversation, answer=answer, tools=TOOLS, tool_choice="required")


def main() -> None:
    ap = arguments(__doc__.split("\n\n")[0])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    proxy = build_proxy(args.model, max_tokens=max(64, args.max_tokens))
    policy, parser = proxy.policy, proxy.tool_parser
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(ProxyThread(proxy)).url
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        proxied(url, client, args.model, 1, 2, args.max_tokens, f"warmup-{time.time_ns()}")

        def play_direct(episodes: int = args.episodes, turns: int = args.turns) -> tuple[float, int, int]:
            policy.force_action_prefix = True  # as tool_choice: "required" forces the call's opening
            try:
                return direct(policy, parser, episodes, turns, args.max_tokens)
            finally:
                policy.force_action_prefix = False

        play_direct(1, 2)
        rows = rounds(args.rounds, args.episodes, play_direct,
                      lambda tag: proxied(url, client, args.model, args.episodes, args.turns, args.max_tokens, tag))
    stats = proxy.stats()
    summary = summarize(rows, args) | {"tools": len(TOOLS), "tool_calls": stats.get("tool_calls", 0),
                                       "tool_parse_failures": stats.get("tool_parse_failures", 0), "branches": stats["branches"]}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{args.model}: {args.episodes} episodes x {args.turns} turns, {len(TOOLS)} tools, tool_choice=required, "
          f"max_tokens={args.max_tokens}, median of {args.rounds} rounds")
    print_ratios(summary)
    print(f"  proxy overhead      : {summary['overhead_ms']:8.1f} ms/request beyond generate")
    print(f"  replies parsed      : {summary['tool_calls']} calls, {summary['tool_parse_failures']} parse failures; "
          f"branches {summary['branches']}")


if __name__ == "__main__":
    main()
