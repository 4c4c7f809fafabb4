"""Run the env server under uvicorn: ``turngym serve ENV_ID... --port N``.

With ``--workers N > 1`` uvicorn forks N processes sharing the port; each keeps its own
sessions (a session lives on one connection, so it never needs another worker), and
``--max-sessions`` applies per worker. The configuration reaches the workers through the
``TURNGYM_SERVER_CONFIG`` environment variable, read by :func:`app_from_environ`.

The server binds 127.0.0.1 unless told otherwise. It is meant for trusted networks: on any
other, set a token (``--token`` or ``TURNGYM_TOKEN``) and keep the client-settable
constructor arguments to the declared safe ones (``--allow-kwarg`` opens more).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

from turngym.server.guard import uvicorn_options
from turngym.server.sessions import ServerConfig

__all__ = ["serve", "app_from_environ", "setup_parser", "run_command", "TOKEN_ENV_VAR"]

_ENV_VAR = "TURNGYM_SERVER_CONFIG"
#: The environment variable the server (and clients) read the bearer token from.
TOKEN_ENV_VAR = "TURNGYM_TOKEN"


def app_from_environ() -> Any:
    """The app for a uvicorn worker (``uvicorn --factory turngym.server.serve:app_from_environ``)."""
    from turngym.server.app import create_app

    raw = json.loads(os.environ[_ENV_VAR])
    raw["env_ids"] = tuple(raw["env_ids"])
    raw["allow_kwargs"] = tuple(raw.get("allow_kwargs") or ())
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
        timeout_graceful_shutdown=graceful_timeout_s,
        backlog=4096,
        **uvicorn_options(cfg),
    )


def setup_parser(p: argparse.ArgumentParser) -> None:
    """Arguments of ``turngym serve``."""
    p.add_argument("env_ids", nargs="+", metavar="ENV_ID", help="registered env ids to serve")
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address (default: loopback only; the server is for trusted networks, use --token)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-sessions", type=int, default=1024, help="open sessions per worker")
    p.add_argument("--idle-timeout", type=float, default=300.0, help="close sessions idle this many seconds")
    p.add_argument("--request-timeout", type=float, default=60.0,
                   help="deadline of one env call; a step past it ends its episode as an invalid action")
    p.add_argument("--executor", choices=("process", "auto", "thread", "inline"), default="process",
                   help="process (default): envs in worker processes, killed when a call overruns, so no action "
                   "can stall the server; thread / inline / auto (inline under --inline-below-ms): faster, "
                   "for trusted agents only")
    p.add_argument("--processes", type=int, default=None, help="env worker processes (process executor)")
    p.add_argument("--inline-below-ms", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=16, help="thread pool size (per env worker process)")
    p.add_argument("--token", default=None,
                   help=f"require this bearer token on every request but /health (default: ${TOKEN_ENV_VAR})")
    p.add_argument("--allow-kwarg", action="append", default=[], metavar="NAME",
                   help="let clients set this env constructor argument with any value (e.g. sandbox, tasks, "
                   "retriever); '*' trusts clients with all of them")
    p.add_argument("--header-timeout", type=float, default=10.0, help="seconds to send request headers")
    p.add_argument("--first-frame-timeout", type=float, default=10.0,
                   help="seconds for a WebSocket to send its first frame")
    p.add_argument("--max-connections", type=int, default=None,
                   help="open connections per worker (default: --max-sessions + 64)")
    p.add_argument("--max-per-client", type=int, default=None,
                   help="open connections per client address (default: --max-connections)")
    p.add_argument("--max-message-mb", type=float, default=8.0, help="largest WebSocket frame / HTTP body")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.add_argument("--log-level", default="warning")


def run_command(args: argparse.Namespace) -> int:
    from turngym.cli import _parse_kv

    token = args.token or os.environ.get(TOKEN_ENV_VAR) or None
    print(f"turngym: serving {', '.join(args.env_ids)} on ws://{args.host}:{args.port} "
          f"(max {args.max_sessions} sessions/worker, {args.workers} worker(s), {args.executor} executor, "
          f"token {'required' if token else 'off'})", flush=True)
    if token is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"turngym: warning: listening on {args.host} without a token; anyone who can reach it can "
              f"use it (set --token or ${TOKEN_ENV_VAR})", flush=True)
    extra = {"processes": args.processes} if args.processes is not None else {}
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
        allow_kwargs=tuple(args.allow_kwarg),
        token=token,
        header_timeout_s=args.header_timeout,
        first_frame_timeout_s=args.first_frame_timeout,
        max_connections=args.max_connections,
        max_per_client=args.max_per_client,
        max_message_bytes=int(args.max_message_mb * (1 << 20)),
        **extra,
    )
    return 0
