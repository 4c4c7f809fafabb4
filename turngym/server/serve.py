"""Run the env server under uvicorn: ``turngym serve ENV_ID... --port N``.

With ``--workers N > 1`` uvicorn forks N processes sharing the port; each keeps its own
sessions (a session lives on one connection, so it never needs another worker), and
``--max-sessions`` applies per worker. The configuration reaches the workers through the
``TURNGYM_SERVER_CONFIG`` environment variable, read by :func:`app_from_environ`; the token
never does (it travels in a private file, removed when the server stops).

The server binds 127.0.0.1 unless told otherwise. It is meant for trusted networks: on any
other, set a token and keep the client-settable constructor arguments to the declared safe
ones (``--allow-kwarg`` opens more).

The token is a secret the env worker processes (which run code the agent's actions drive)
must not be able to read. Pass it with ``--token-file PATH`` or the ``TURNGYM_TOKEN``
environment variable: the server reads it, removes the variable from its environment before
any worker process starts (children copy the environment), and overwrites it in its own
original environment block and command line, which ``/proc/<pid>/environ`` and ``ps`` show.
``--token TOKEN`` still works but shows in ``ps`` until the server has started (and in shell
history), so it prints a warning. Code running as the server's own user can always read the
server's memory; that is what the sandboxes around agent code are for.

Scripts that call :func:`serve` (or start a :class:`~turngym.server.testing.ServerThread`)
work without an ``if __name__ == "__main__":`` guard when their envs come from the registry
or an importable module; worker processes then never import the script. An env factory
defined in the script itself makes workers import it, and a script without the guard is
then stopped with an error that names the fix instead of starting a server per worker.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from turngym.core.errors import ConfigError
from turngym.server.sessions import ServerConfig

__all__ = ["serve", "app_from_environ", "setup_parser", "run_command", "read_token", "hide_secret",
           "refuse_in_worker_bootstrap", "TOKEN_ENV_VAR"]

_ENV_VAR = "TURNGYM_SERVER_CONFIG"
#: The environment variable the server (and clients) read the bearer token from.
TOKEN_ENV_VAR = "TURNGYM_TOKEN"


def refuse_in_worker_bootstrap(what: str) -> None:
    """Raise a clear error when called while a child process is importing the user's script (no main guard)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ConfigError(
            f"{what} was called while a worker process was importing your script: put the code that starts "
            "the server under `if __name__ == \"__main__\":` (worker processes import the script to find "
            "objects defined in it)"
        )


def hide_secret(secret: str) -> None:
    """Overwrite ``secret`` in this process's original command line and environment block.

    Those two areas are what ``ps`` and ``/proc/<pid>/{cmdline,environ}`` show to other
    processes; ``os.environ`` changes do not reach them. Best effort (Linux ``/proc/self/mem``);
    does nothing elsewhere.
    """
    needle = secret.encode()
    if len(needle) < 8:
        return
    sys.argv[:] = ["*" * len(a) if a == secret else a for a in sys.argv]
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        areas = [(int(fields[45]), int(fields[46])), (int(fields[47]), int(fields[48]))]  # arg_*, env_*
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            for lo, hi in areas:
                mem.seek(lo)
                data = mem.read(hi - lo)
                if needle in data:
                    mem.seek(lo)
                    mem.write(data.replace(needle, b"*" * len(needle)))
    except (OSError, IndexError, ValueError):
        pass


def read_token(token: str | None = None, token_file: str | None = None) -> str | None:
    """The server's token: from ``token_file``, else ``token``, else ``$TURNGYM_TOKEN`` (then removed).

    Whichever way it came, it is removed from the environment and overwritten in this
    process's command line and environment block (see the module docstring).
    """
    from_env = os.environ.pop(TOKEN_ENV_VAR, None) or None
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {token_file!r}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"the token file {token_file!r} is empty; write the token in it")
    elif token is None:
        token = from_env
    for secret in {token, from_env} - {None}:
        hide_secret(secret)  # type: ignore[arg-type]
    return token


def app_from_environ() -> Any:
    """The app for a uvicorn worker (``uvicorn --factory turngym.server.serve:app_from_environ``).

    The configuration comes from ``$TURNGYM_SERVER_CONFIG``, the token from the file named in
    it (``token_file``) or ``$TURNGYM_TOKEN``; both variables are removed from the environment
    here, before any env worker process can inherit them.
    """
    from turngym.server.app import create_app

    raw = json.loads(os.environ.pop(_ENV_VAR))
    raw["env_ids"] = tuple(raw["env_ids"])
    raw["allow_kwargs"] = tuple(raw.get("allow_kwargs") or ())
    token_file = raw.pop("token_file", None)
    raw["token"] = read_token(raw.get("token"), token_file)
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
    """Serve ``env_ids`` until SIGINT/SIGTERM; on shutdown every open env is closed.

    Needs no ``if __name__ == "__main__":`` guard in the calling script (see the module
    docstring); called while a worker process imports the script, it raises a clear error.
    """
    refuse_in_worker_bootstrap("turngym.server.serve()")
    from turngym.core.extras import require_extra

    with require_extra("turngym serve", "server"):
        import uvicorn

        from turngym.server.guard import uvicorn_options

    cfg = ServerConfig(env_ids=tuple(env_ids), **config)  # validate before forking workers
    from turngym.core.registry import env_info

    for env_id in cfg.env_ids:
        env_info(env_id)
    options = dict(host=host, port=port, log_level=log_level, timeout_graceful_shutdown=graceful_timeout_s,
                   backlog=4096, **uvicorn_options(cfg))
    if workers <= 1:  # the app is built here: the configuration (and its token) never enters the environment
        from turngym.server.app import create_app

        uvicorn.run(create_app(config=cfg), **options)
        return
    raw: dict[str, Any] = {**dataclasses.asdict(cfg), "env_kwargs": dict(cfg.env_kwargs), "token": None}
    with tempfile.TemporaryDirectory(prefix="turngym-serve-") as private:  # mode 0700
        if cfg.token is not None:
            raw["token_file"] = os.path.join(private, "token")
            fd = os.open(raw["token_file"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(cfg.token)
        os.environ[_ENV_VAR] = json.dumps(raw)
        try:
            uvicorn.run("turngym.server.serve:app_from_environ", factory=True, workers=workers, **options)
        finally:
            os.environ.pop(_ENV_VAR, None)


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
    p.add_argument("--token-file", default=None, metavar="PATH",
                   help="require the bearer token in this file on every request but /health")
    p.add_argument("--token", default=None,
                   help=f"the token itself (visible in `ps` while starting: prefer --token-file or ${TOKEN_ENV_VAR})")
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
    p.add_argument("--worker-memory-mb", type=float, default=None,
                   help="kill an env worker process over this resident memory and charge the step that used the "
                   "most CPU (default: half the machine's memory; 0: no limit)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.add_argument("--log-level", default="warning")


def run_command(args: argparse.Namespace) -> int:
    from turngym.cli_args import parse_kv

    if args.token is not None and args.token_file is None:
        print("turngym: warning: --token shows in `ps` and shell history; prefer --token-file PATH or "
              f"${TOKEN_ENV_VAR}", file=sys.stderr, flush=True)
    token = read_token(args.token, args.token_file)
    print(f"turngym: serving {', '.join(args.env_ids)} on ws://{args.host}:{args.port} "
          f"(max {args.max_sessions} sessions/worker, {args.workers} worker(s), {args.executor} executor, "
          f"token {'required' if token else 'off'})", flush=True)
    if token is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"turngym: warning: listening on {args.host} without a token; anyone who can reach it can "
              f"use it (set --token or ${TOKEN_ENV_VAR})", flush=True)
    extra: dict[str, Any] = {"processes": args.processes} if args.processes is not None else {}
    if args.worker_memory_mb is not None:
        extra["worker_memory_mb"] = args.worker_memory_mb
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
        env_kwargs=parse_kv(args.env_arg),
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
