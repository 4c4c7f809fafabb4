"""The ASGI app: turngym's WebSocket sessions, a stateless HTTP route, health, and OpenEnv's wire format.

Routes:

=============================================  ===================================================
``WS   /v1/session``                           a turngym session (see :mod:`turngym.server.protocol`)
``POST /v1/envs/{env_id}/episode``              stateless: reset, play the given actions, return every step
``GET  /v1/envs``                               the served envs and their specs (reward spec, max_turns…)
``GET  /health``                                liveness, sessions open, capacity (open without a token)
``WS   /ws``, ``GET /schema``, ``/metadata``    OpenEnv's protocol for the first served env
``WS   /openenv/{env_id}/ws`` (+ ``/schema``…)  OpenEnv's protocol for any served env
=============================================  ===================================================

Build one with :func:`create_app`; ``turngym serve`` runs it under uvicorn with the
connection guard of :mod:`turngym.server.guard`. A WebSocket counts toward ``max_sessions``
from the moment it is accepted, and must send its first frame within
``first_frame_timeout_s``: idle sockets can neither pile up nor hold the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from turngym.core.errors import ConfigError, TurngymError
from turngym.server.errors import ServerBusy
from turngym.server.guard import TokenGuard
from turngym.server.handlers import OPS, do_reset, do_step
from turngym.server.openenv import openenv_routes
from turngym.server.protocol import dumps, error_frame, loads
from turngym.server.sessions import EnvFactory, ServerConfig, Session, SessionManager
from turngym.server.sockets import accept_counted, attach, receive_first_frame, receive_frame, release

__all__ = ["create_app", "read_body"]

log = logging.getLogger("turngym.server")

_MAX_EPISODE_ACTIONS = 10_000


class _Json(JSONResponse):
    def render(self, content: Any) -> bytes:
        return dumps(content).encode()


async def _session_ws(ws: WebSocket) -> None:
    mgr: SessionManager = ws.app.state.manager
    if not await accept_counted(ws, mgr, lambda exc: dumps(error_frame(exc))):
        return
    session: Session | None = None
    pending = True
    try:
        raw = await receive_first_frame(ws, mgr)
        if raw is None:
            return
        try:
            first = loads(raw)
        except (ValueError, RecursionError):
            first = None
        if not isinstance(first, dict) or first.get("op") != "make":
            await ws.send_text(dumps({"ok": False, "error": {"type": "ConfigError", "turngym": True,
                                      "message": "the first frame of a session must be {'op': 'make', 'env_id': ...}"}}))
            await ws.close(code=1008)
            return
        env_id = str(first.get("env_id"))
        try:
            pending = False  # open() takes over the held slot, whatever happens
            session = await mgr.open(env_id, first.get("kwargs"), pending=True)
        except ServerBusy as exc:
            await ws.send_text(dumps(error_frame(exc)))
            await ws.close(code=1013, reason="server at capacity")
            return
        except Exception as exc:  # bad id or refused kwargs: tell the client what, then hang up
            await ws.send_text(dumps(error_frame(exc)))
            await ws.close(code=1008)
            return
        attach(session, ws)
        await ws.send_text(dumps({"ok": True, "session": session.id, "spec": session.spec}))
        while True:
            raw = await receive_frame(ws)
            try:
                msg = loads(raw)
                op = msg.get("op") if isinstance(msg, dict) else None
                if op == "close":
                    await ws.send_text(dumps({"ok": True}))
                    break
                handler = OPS.get(op)  # type: ignore[arg-type]
                if handler is None:
                    raise ValueError(f"unknown op {op!r}; expected one of {sorted(OPS)} or 'close'")
                text = dumps(await handler(mgr, session, msg))  # inside the try: unencodable info is an error too
            except Exception as exc:  # every failure becomes an error frame; the session lives on
                text = dumps(error_frame(exc))
            await ws.send_text(text)
            if session.broken:
                await ws.close(code=4504, reason=session.broken[:120])
                break
    except WebSocketDisconnect:
        pass
    except RuntimeError as exc:  # the socket was closed under us (idle timeout, shutdown)
        log.debug("session socket closed: %s", exc)
    finally:
        if pending:
            mgr.release_pending()
        await release(mgr, session, ws)


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The request body, refused past ``limit`` bytes or when it does not arrive within ``timeout`` s."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise ConfigError(f"request body larger than the server's limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ConfigError(f"request body larger than the server's limit of {limit} bytes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise ConfigError(f"request body did not arrive within {timeout:g} s") from None
    return b"".join(chunks)


async def _episode(request: Request) -> Response:
    """Stateless single-shot use: ``{"seed", "options", "actions", "kwargs"}`` → the whole episode."""
    mgr: SessionManager = request.app.state.manager
    env_id = request.path_params["env_id"]
    try:
        raw = await read_body(request, mgr.config.max_message_bytes, mgr.config.header_timeout_s)
        body = loads(raw or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        actions = body.get("actions") or []
        if not isinstance(actions, list) or len(actions) > _MAX_EPISODE_ACTIONS:
            raise ValueError(f"'actions' must be a list of at most {_MAX_EPISODE_ACTIONS} strings")
        session = await mgr.open(env_id, body.get("kwargs"))
    except ServerBusy as exc:
        return _Json(error_frame(exc), status_code=503, headers={"Retry-After": "1"})
    except Exception as exc:
        return _Json(error_frame(exc), status_code=404 if "does not serve" in str(exc) else 400)
    try:
        obs, info = await do_reset(mgr, session, body.get("seed"), body.get("options"))
        steps = []
        for action in actions:
            o, r, term, trunc, i = await do_step(mgr, session, action)
            steps.append({"obs": o, "reward": r, "terminated": term, "truncated": trunc, "info": i})
            if term or trunc:
                break
        return _Json({"ok": True, "obs": obs, "info": info, "steps": steps, "unused_actions": len(actions) - len(steps)})
    except TurngymError as exc:
        return _Json(error_frame(exc), status_code=400)
    except Exception as exc:  # an env bug: report it, keep serving
        return _Json(error_frame(exc), status_code=500)
    finally:
        await mgr.close(session)


async def _health(request: Request) -> Response:
    mgr: SessionManager = request.app.state.manager
    return _Json({
        "status": "healthy",
        "sessions": mgr.active,
        "max_sessions": mgr.config.max_sessions,
        "envs": list(mgr.served()),
        "pending": mgr.pending,
        "executors": {env_id: mgr.executor_of(env_id) for env_id in mgr.served()},
        "workers_alive": mgr.workers_alive(),
        "stats": mgr.stats,
    })


async def _envs(request: Request) -> Response:
    mgr: SessionManager = request.app.state.manager
    return _Json({"envs": [mgr.specs[i] for i in mgr.served() if i in mgr.specs]})


def create_app(
    env_ids: tuple[str, ...] | list[str] | None = None,
    *,
    config: ServerConfig | None = None,
    factories: Mapping[str, EnvFactory] | None = None,
    **config_kwargs: Any,
) -> Starlette:
    """An ASGI app serving ``env_ids`` (or ``config``).

    Args:
        env_ids: registered ids to serve.
        config: a full :class:`ServerConfig` instead of ``env_ids`` + keyword options.
        factories: ``{env_id: callable(**kwargs) -> env}`` for envs not in the registry
            (test doubles, envs built in code).
        **config_kwargs: :class:`ServerConfig` fields (``max_sessions=...``).

    >>> app = create_app(["turngym/Math-v0"], max_sessions=8)
    >>> app.state.manager.config.max_sessions
    8
    """
    if config is None:
        config = ServerConfig(env_ids=tuple(env_ids or factories or ()), **config_kwargs)
    manager = SessionManager(config, factories)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await manager.start()
        except Exception as exc:  # kept for whoever started the server (uvicorn only logs it)
            manager.startup_error = exc
            raise
        try:
            yield
        finally:
            await manager.shutdown()  # graceful: every open env is closed

    routes = [
        WebSocketRoute("/v1/session", _session_ws),
        Route("/v1/envs/{env_id:path}/episode", _episode, methods=["POST"]),
        Route("/v1/envs", _envs),
        Route("/health", _health),
        *openenv_routes(config.env_ids[0]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(TokenGuard, token=config.token)])
    app.state.manager = manager
    return app
