"""The proxy's ASGI app (starlette): OpenAI-compatible routes plus turngym's outcome route.

=============================================  ====================================================
``POST /v1/chat/completions``                   chat completion (``stream: true`` answers as SSE)
``POST /v1/completions``                        text completion (a text or token-id prompt)
``GET  /v1/models``                             the one served model
``POST /turngym/episodes/{id}/outcome``          the episode's outcome (and per-turn rewards/signals)
``GET  /turngym/episodes``                       finished episodes, one JSON per line
``GET  /turngym/stats``                          counters: requests, tokens, branches, drops, errors
``GET  /health``                                 liveness (open without a token)
=============================================  ====================================================

An episode belongs to the client that opened it: requests and outcomes carry its key
(``X-Turngym-Episode-Key``, or the id ``NAME~KEY``; :mod:`turngym.proxy.guard`), and every body is
parsed strictly (depth, size, Unicode) before anything is touched.

With a token, every route but ``/health`` needs ``Authorization: Bearer TOKEN`` — what the
``openai`` client sends as its ``api_key`` (:class:`~turngym.server.guard.TokenGuard`).
Imported only by ``turngym proxy`` and :class:`~turngym.proxy.testing.ProxyThread`: starlette
is the ``server`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from turngym.proxy.guard import KEY_HEADER, Refused, loads
from turngym.proxy.service import EPISODE_HEADER, GROUP_HEADER, CaptureProxy, ProxyError
from turngym.server.guard import TokenGuard

__all__ = ["create_proxy_app"]

_BODY_TIMEOUT_S = 30.0


async def _body(request: Request, proxy: CaptureProxy) -> Any:
    """The request's JSON, refused (4xx, counted) past the size or depth limits or with invalid text."""
    from turngym.core.errors import ConfigError
    from turngym.server.app import read_body

    try:
        raw = await read_body(request, proxy.config.max_body_bytes, _BODY_TIMEOUT_S)
    except ConfigError as exc:
        proxy.store.errors["body_too_large"] += 1
        raise ProxyError(413, str(exc), code="body_too_large") from None
    try:
        return loads(raw, max_depth=proxy.config.max_json_depth)
    except Refused as exc:
        proxy.store.errors[exc.code] += 1
        raise ProxyError(exc.status, str(exc), code=exc.code, param=exc.param) from None


def _error(exc: ProxyError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _sse(response: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    """A finished chat completion as OpenAI's stream of chunks (the whole content in one delta)."""
    choice = response["choices"][0]
    base = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"], "model": response["model"]}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": choice["message"]["content"]},
                              "logprobs": choice["logprobs"], "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}]},
    ]
    if include_usage:
        chunks.append({**base, "choices": [], "usage": response["usage"]})

    async def gen() -> AsyncIterator[bytes]:
        for c in chunks:
            yield f"data: {json.dumps(c)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return gen()


def create_proxy_app(proxy: CaptureProxy, *, token: str | None = None, reap_every_s: float = 5.0) -> Starlette:
    """The ASGI app serving ``proxy``; ``token`` guards every route but ``/health``."""

    async def completions(request: Request) -> Response:
        chat = request.url.path.endswith("/chat/completions")
        try:
            body = await _body(request, proxy)
            header, group = request.headers.get(EPISODE_HEADER), request.headers.get(GROUP_HEADER)
            key = request.headers.get(KEY_HEADER)
            if chat:
                response, headers = await proxy.chat(body, header, group, key=key)
            else:
                response, headers = await proxy.completion(body, header, group, key=key)
        except ProxyError as exc:
            return _error(exc)
        if body.get("stream"):  # chat only: the proxy refused it on /v1/completions before sampling
            opts = body.get("stream_options") or {}
            include = bool(opts.get("include_usage")) if isinstance(opts, dict) else False
            return StreamingResponse(_sse(response, include), media_type="text/event-stream", headers=headers)
        return JSONResponse(response, headers=headers)

    async def outcome(request: Request) -> Response:
        try:
            body = await _body(request, proxy)
            key = request.headers.get(KEY_HEADER)
            return JSONResponse(await proxy.outcome(request.path_params["episode_id"], body, key=key))
        except ProxyError as exc:
            return _error(exc)

    async def episodes(request: Request) -> Response:
        return Response(proxy.finished.text(), media_type="application/x-ndjson")  # serialized when written

    async def stats(request: Request) -> Response:
        return JSONResponse(proxy.stats())

    async def models(request: Request) -> Response:
        return JSONResponse(proxy.models())

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True, "model": proxy.config.model_name, "episodes_open": len(proxy.store.open)})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def reaper() -> None:
            while True:
                await asyncio.sleep(reap_every_s)
                proxy.reap()

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()

    routes = [
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", models),
        Route("/turngym/episodes/{episode_id:path}/outcome", outcome, methods=["POST"]),
        Route("/turngym/episodes", episodes),
        Route("/turngym/stats", stats),
        Route("/health", health),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(TokenGuard, token=token)], lifespan=lifespan)
    app.state.proxy = proxy
    return app
