"""Run the env server under uvicorn: ``turngym serve ENV_ID... --port N``.

With ``--workers N > 1`` uvicorn forks N processes sharing the port; each keeps its own
sessions (a session lives on one connection, so it never needs another worker), and
``--max-sessions`` applies per worker. The configuration reaches the workers through the
``TURNGYM_SERVER_CONFIG`` environment variable, read by :func:`app_from_environ`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

from turngym.server.sessions import ServerConfig

__all__ = ["serve", "app_from_environ", "setup_parser", "run_command"]

_ENV_VAR = "TURNGYM_SERVER_CONFIG"


def app_from_environ() -> Any:
    """The app for a uvicorn worker (``uvicorn --factory turngym.server.serve:app_from_environ``)."""
    from turngym.server.app import create_app

    raw = json.loads(os.environ[_ENV_VAR])
    raw["env_ids"] = tuple(raw["env_ids"])
    return create_app(config=ServerConfig(**raw))


def serve(
    env_ids: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    log_level: str = "warning",
    graceful_timeout_s: float = 10.0,
    **config: Any,
) -> None:
    """Serve ``env_ids`` until SIGINT/SIGTERM; on shutdown every open env is closed."""
    import uvicorn

    cfg = ServerConfig(env_ids=tuple(env_ids), **config)  # validate before forking workers
    from turngym.core.registry import env_info

    for env_id in cfg.env_ids:
        env_info(env_id)
    os.environ[_ENV_VAR] = json.dumps({**dataclasses.asdict(cfg), "env_kwargs": dict(cfg.env_kwargs)})
    uvicorn.run(
        "turngym.server.serve:app_from_environ",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        ws_max_size=64 << 20,
        ws_ping_interval=None,  # sessions have their own idle timeout; pings cost CPU at 1,000s of sessions
        timeout_graceful_shutdown=graceful_timeout_s,
        backlog=4096,
        access_log=False,
    )


def setup_parser(p: argparse.ArgumentParser) -> None:
    """Arguments of ``turngym serve``."""
    p.add_argument("env_ids", nargs="+", metavar="ENV_ID", help="registered env ids to serve")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-sessions", type=int, default=1024, help="open sessions per worker")
    p.add_argument("--idle-timeout", type=float, default=300.0, help="close sessions idle this many seconds")
    p.add_argument("--request-timeout", type=float, default=60.0, help="longest env call (thread executor)")
    p.add_argument("--executor", choices=("auto", "thread", "inline"), default="auto",
                   help="env calls on a thread pool (timeouts enforced), on the event loop (fastest), "
                   "or auto: inline for envs whose calls average under --inline-below-ms")
    p.add_argument("--inline-below-ms", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=16, help="thread pool size per worker")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.add_argument("--log-level", default="warning")


def run_command(args: argparse.Namespace) -> int:
    from turngym.cli import _parse_kv

    print(f"turngym: serving {', '.join(args.env_ids)} on ws://{args.host}:{args.port} "
          f"(max {args.max_sessions} sessions/worker, {args.workers} worker(s), {args.executor} executor)", flush=True)
    serve(
        args.env_ids,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout,
        request_timeout_s=args.request_timeout,
        executor=args.executor,
        inline_below_ms=args.inline_below_ms,
        threads=args.threads,
        env_kwargs=_parse_kv(args.env_arg),
    )
    return 0
