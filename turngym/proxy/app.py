"""The proxy's ASGI app (starlette): OpenAI-compatible routes plus turngym's outcome route.

=============================================  ====================================================
``POST /v1/chat/completions``                   chat completion (``stream: true`` answers as SSE)
``POST /v1/completions``                        text completion (a text or token-id prompt)
``POST /v1/responses``                          Responses API over the chat path (``stream: true``: its events)
``GET  /v1/models``                             the one served model
``POST /turngym/episodes/{id}/outcome``          the episode's outcome (and per-turn rewards/signals)
``GET  /turngym/episodes``                       finished episodes, one JSON per line
``GET  /turngym/stats``                          counters: requests, tokens, branches, drops, errors
``GET  /health``                                 liveness (open without a token)
=============================================  ====================================================

With a token, every route but ``/health`` needs ``Authorization: Bearer TOKEN`` — what the
``openai`` client sends as its ``api_key`` (:class:`~turngym.server.guard.TokenGuard`).
Imported only by ``turngym proxy`` and :class:`~turngym.proxy.testing.ProxyThread`: starlette
is the ``server`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from turngym.proxy.responses import respond, sse, stream_events
from turngym.proxy.service import EPISODE_HEADER, GROUP_HEADER, CaptureProxy, ProxyError
from turngym.server.guard import TokenGuard

__all__ = ["create_proxy_app"]

_MAX_BODY = 16 << 20
_BODY_TIMEOUT_S = 30.0


async def _body(request: Request) -> Any:
    from turngym.core.errors import ConfigError
    from turngym.server.app import read_body

    try:
        raw = await read_body(request, _MAX_BODY, _BODY_TIMEOUT_S)
    except ConfigError as exc:
        raise ProxyError(413, str(exc), code="body_too_large") from None
    try:
        return json.loads(raw or b"{}")
    except (ValueError, RecursionError):  # nesting deeper than the decoder's stack is not a body we serve
        raise ProxyError(400, "the request body is not valid JSON (or nests too deep)", code="invalid_json") from None


def _error(exc: ProxyError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


_ROUTES = "POST /v1/chat/completions, /v1/completions, /v1/responses; GET /v1/models; /turngym/..."


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no such route, a method the route does not take) as OpenAI-shaped
    JSON, like every other answer of the proxy: OpenAI clients read ``error.message``."""
    assert isinstance(exc, HTTPException)
    where = f"{request.method} {request.url.path}"
    message = {404: f"no route {where}; this proxy serves {_ROUTES}",
               405: f"{where}: method not allowed (allowed: {exc.headers.get('Allow', '?') if exc.headers else '?'})"}
    code = {404: "unknown_route", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    err = ProxyError(exc.status_code, message.get(exc.status_code, f"{where}: {exc.detail}"), code=code)
    return JSONResponse(err.body(), status_code=exc.status_code, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    """An unexpected failure: a 500 in OpenAI's shape (the traceback stays in the server's log)."""
    err = ProxyError(500, f"internal error ({type(exc).__name__}) while serving {request.method} {request.url.path}",
                     code="internal_error")
    return JSONResponse(err.body(), status_code=500)


def _sse(response: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    """A finished chat completion as OpenAI's stream of chunks: the whole content in one delta, then one
    delta per tool call (``delta.tool_calls[0]`` with its index, id, name and whole arguments)."""
    choice = response["choices"][0]
    base = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"], "model": response["model"]}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": choice["message"]["content"]},
                              "logprobs": choice["logprobs"], "finish_reason": None}]},
        *({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, **call}]}, "logprobs": None,
                                "finish_reason": None}]} for i, call in enumerate(choice["message"].get("tool_calls", ()))),
        {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}]},
    ]
    if include_usage:
        chunks.append({**base, "choices": [], "usage": response["usage"]})

    async def gen() -> AsyncIterator[bytes]:
        for c in chunks:
            yield f"data: {json.dumps(c)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return gen()


async def _aiter(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def create_proxy_app(proxy: CaptureProxy, *, token: str | None = None, reap_every_s: float = 5.0) -> Starlette:
    """The ASGI app serving ``proxy``; ``token`` guards every route but ``/health``."""

    async def completions(request: Request) -> Response:
        chat = request.url.path.endswith("/chat/completions")
        try:
            body = await _body(request)
            header, group = request.headers.get(EPISODE_HEADER), request.headers.get(GROUP_HEADER)
            if chat:
                response, headers = await proxy.chat(body, header, group)
            else:
                response, headers = await proxy.completion(body, header, group)
        except ProxyError as exc:
            return _error(exc)
        if body.get("stream"):  # chat only: the proxy refused it on /v1/completions before sampling
            opts = body.get("stream_options") or {}
            include = bool(opts.get("include_usage")) if isinstance(opts, dict) else False
            return StreamingResponse(_sse(response, include), media_type="text/event-stream", headers=headers)
        return JSONResponse(response, headers=headers)

    async def responses(request: Request) -> Response:
        try:
            body = await _body(request)
            response, headers = await respond(proxy, body, request.headers.get(EPISODE_HEADER), request.headers.get(GROUP_HEADER))
        except ProxyError as exc:
            return _error(exc)
        if body.get("stream"):
            return StreamingResponse(_aiter(sse(stream_events(response))), media_type="text/event-stream", headers=headers)
        return JSONResponse(response, headers=headers)

    async def outcome(request: Request) -> Response:
        try:
            body = await _body(request)
            return JSONResponse(await proxy.outcome(request.path_params["episode_id"], body))
        except ProxyError as exc:
            return _error(exc)

    async def episodes(request: Request) -> Response:
        lines = "".join(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n" for ep in proxy.finished)
        return Response(lines, media_type="application/x-ndjson")

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
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/models", models),
        Route("/turngym/episodes/{episode_id:path}/outcome", outcome, methods=["POST"]),
        Route("/turngym/episodes", episodes),
        Route("/turngym/stats", stats),
        Route("/health", health),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(TokenGuard, token=token)], lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error, Exception: _server_error})
    app.state.proxy = proxy
    return app
