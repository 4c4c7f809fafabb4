"""``turngym proxy``: the capture proxy under uvicorn, and :class:`ProxyThread` for tests/notebooks.

Nothing here imports starlette, uvicorn or torch at module level: ``turngym --help`` works with
the core dependencies alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError
from turngym.rollout.types import DEFAULT_REWARD_RANGE
from turngym.server.testing import UvicornThread

__all__ = ["ProxyThread", "build_proxy", "run_command", "setup_parser"]


def build_proxy(model: str = "tiny", *, out: str | Path | None = None, served_name: str | None = None, temperature: float = 1.0,
                top_p: float = 1.0, seed: int = 0, device: str | None = None, **config: Any) -> Any:
    """A :class:`~turngym.proxy.service.CaptureProxy` over ``HFPolicy.from_pretrained(model)``."""
    from turngym.agents.hf import HFPolicy
    from turngym.proxy.service import CaptureProxy, ProxyConfig

    cfg = ProxyConfig(model_name=served_name or model, out=Path(out) if out is not None else None, **config)
    policy = HFPolicy.from_pretrained(model, device=device, temperature=temperature, top_p=top_p, seed=seed,
                                      max_batch_size=cfg.max_batch_size, name=f"hf:{model}")
    return CaptureProxy(policy, cfg)


class ProxyThread(UvicornThread):
    """Serve a :class:`~turngym.proxy.service.CaptureProxy` on a background thread (127.0.0.1):
    ``with ProxyThread(build_proxy("tiny")) as p:`` then point an OpenAI client at ``p.base_url``."""

    def __init__(self, proxy: Any, *, port: int | None = None, token: str | None = None) -> None:
        from turngym.proxy.app import create_proxy_app

        super().__init__(create_proxy_app(proxy, token=token), "proxy", port=port)
        self.proxy = proxy
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.url}/v1"


def setup_parser(p: argparse.ArgumentParser) -> None:
    """Arguments of ``turngym proxy``."""
    p.add_argument("--model", default="tiny", help="tiny (embedded, default), smollm2, or a local HF model directory")
    p.add_argument("--served-model-name", default=None, help="the model name clients ask for (default: --model)")
    p.add_argument("--out", type=Path, default=Path("captured"),
                   help="finished episodes are appended to OUT/episodes.jsonl (default: captured/)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-tokens", type=int, default=256, help="cap (and default) of one completion's max_tokens")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature (1.0 keeps the recorded log-probs the model's own, what training needs)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda when available)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads (0: torch's default; 1 is fastest for the tiny model on a busy machine)")
    p.add_argument("--outcome-timeout", type=float, default=600.0,
                   help="drop an episode whose outcome is not reported this many seconds after its last request")
    p.add_argument("--max-open-episodes", type=int, default=10_000)
    p.add_argument("--reward-range", type=float, nargs=2, default=DEFAULT_REWARD_RANGE, metavar=("LO", "HI"),
                   help="outcome rewards, per-turn rewards and signals outside [LO, HI] are refused (default: -1000 1000)")
    p.add_argument("--max-batch-size", type=int, default=64, help="concurrent requests sampled together")
    p.add_argument("--ignore-sampling-params", action="store_true",
                   help="accept requests whose temperature/top_p differ from the proxy's (ignored, counted) instead of refusing them")
    p.add_argument("--tool-call-parser", default=None, choices=["hermes", "llama3_json"],
                   help="how replies are parsed into tool_calls (default: from the chat template; hermes when it has no tool format)")
    p.add_argument("--token-file", default=None, metavar="PATH", help="require the bearer token in this file (the openai client's api_key)")
    p.add_argument("--token", default=None, help="the token itself (visible in `ps`: prefer --token-file)")
    p.add_argument("--log-level", default="warning")


def run_command(args: argparse.Namespace) -> int:
    import uvicorn

    from turngym.proxy.app import create_proxy_app
    from turngym.server.serve import read_token

    if args.temperature <= 0:
        raise ConfigError("--temperature must be > 0: greedy decoding has no log-probs a trainer can use")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    token = read_token(args.token, args.token_file)
    proxy = build_proxy(args.model, out=args.out, served_name=args.served_model_name, temperature=args.temperature, top_p=args.top_p,
                        seed=args.seed, device=args.device, max_tokens=args.max_tokens, outcome_timeout_s=args.outcome_timeout,
                        max_open_episodes=args.max_open_episodes, max_batch_size=args.max_batch_size,
                        ignore_sampling_params=args.ignore_sampling_params, tool_call_parser=args.tool_call_parser,
                        reward_range=tuple(args.reward_range))
    if not proxy.template_splices:
        print("turngym: warning: this model's chat template rewrites earlier turns (e.g. strips past reasoning), so no "
              "multi-turn prompt extends the one before it: every chat turn is recorded as an episode of its own "
              "(X-Turngym-Branched: template_mismatch)", flush=True)
    print(f"turngym: proxy for {proxy.config.model_name!r} on http://{args.host}:{args.port}/v1 "
          f"(episodes -> {args.out}/episodes.jsonl; headers X-Turngym-Episode and X-Turngym-Episode-Key, or NAME~KEY; "
          f"token {'required' if token else 'off'})", flush=True)
    uvicorn.run(create_proxy_app(proxy, token=token), host=args.host, port=args.port, log_level=args.log_level)
    return 0
