"""The server's door: who may connect, for how long, and how many at once.

* :class:`TokenGuard` (ASGI middleware): with a token configured, every HTTP request and
  WebSocket handshake must carry it (``Authorization: Bearer TOKEN``; ``?token=TOKEN`` for
  clients that cannot set headers; or as the password of HTTP Basic auth, which WebSocket
  clients send for a URL's user info — ``ws://turngym:TOKEN@host:port`` — and is the only way
  OpenEnv's client, which takes a URL and nothing else, can carry a token); the health checks
  stay open so orchestrators can probe. Tokens are compared in constant time.
* :class:`GuardedH11Protocol` (uvicorn's HTTP protocol, extended): a connection that has
  not sent complete request headers within ``header_timeout_s`` is cut (slowloris), and a
  connection arriving while the server already holds ``connection_limit`` connections, or
  ``per_client_limit`` from the same address, is cut on arrival. uvicorn alone times out
  neither headers nor idle upgrades.
* :func:`uvicorn_options`: the uvicorn settings that go with them (frame and header sizes).

The WebSocket first-frame deadline and the accounting of idle sockets toward
``max_sessions`` live with the session handlers (:mod:`turngym.server.app`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["TokenGuard", "GuardedH11Protocol", "uvicorn_options", "OPEN_PATHS"]

log = logging.getLogger("turngym.server")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Paths that answer without a token (liveness probes carry no secrets).
OPEN_PATHS = ("/health",)


def _is_open(path: str) -> bool:
    return path in OPEN_PATHS or (path.startswith("/openenv/") and path.endswith("/health"))


def _presented(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers") or ():
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return value[7:].strip()
        if name == b"authorization" and value[:6].lower() == b"basic ":
            try:
                return base64.b64decode(value[6:].strip(), validate=True).partition(b":")[2]
            except ValueError:  # binascii.Error: not base64, so no token
                return None
        if name == b"x-api-key":
            return value.strip()
    query = parse_qs((scope.get("query_string") or b"").decode("latin-1"))
    token = query.get("token")
    return token[0].encode("latin-1") if token else None


class TokenGuard:
    """Refuse every request but the health checks unless it carries the server's token."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self._digest = _digest(token.encode()) if token else None

    def allowed(self, scope: Scope) -> bool:
        if self._digest is None or _is_open(scope.get("path", "")):
            return True
        given = _presented(scope)
        # compare_digest on equal-length digests: time depends on neither the token nor the guess
        return given is not None and hmac.compare_digest(_digest(given), self._digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self.allowed(scope):
            if scope["type"] == "websocket":
                # before accept: uvicorn answers the handshake with HTTP 403
                await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong token"})
                return
            body = b'{"ok": false, "error": {"type": "Unauthorized", "turngym": false, ' \
                   b'"message": "missing or wrong token: send Authorization: Bearer TOKEN"}}'
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def _config_of(app: Any) -> Any:
    """The :class:`ServerConfig` behind a (possibly middleware-wrapped) turngym app, or None."""
    for _ in range(8):
        state = getattr(app, "state", None)
        manager = getattr(state, "manager", None) if state is not None else None
        if manager is not None:
            return manager.config
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and connection caps (total and per client)."""

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cfg = _config_of(self.app)
        self._header_timeout = cfg.header_timeout_s if cfg is not None else 10.0
        self._header_timer: Any = None
        if cfg is not None and not self._admit(cfg.connection_limit, cfg.per_client_limit):
            return
        self._arm_header_timer()

    def _admit(self, total: int, per_client: int) -> bool:
        # server_state.connections holds every live HTTP and WebSocket protocol of this server
        if len(self.connections) > total:
            why = f"{len(self.connections) - 1} connections open (limit {total})"
        else:
            host = self.client[0] if self.client else None
            same = sum(1 for c in self.connections if (getattr(c, "client", None) or (None,))[0] == host)
            if same <= per_client:
                return True
            why = f"{same - 1} connections already open from {host} (limit {per_client} per client)"
        log.warning("turngym server: refused a connection: %s", why)
        self.transport.close()
        return False

    def _arm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(self._header_timeout, self._header_deadline)

    def _header_deadline(self) -> None:
        self._header_timer = None
        transport = self.transport
        if transport.is_closing() or transport.get_protocol() is not self:
            return  # closed, or upgraded to a WebSocket (which has its own first-frame deadline)
        if self.cycle is not None and not self.cycle.response_complete:
            return  # the headers arrived: a request is being served
        log.info("turngym server: cut a connection that sent no complete request in %g s", self._header_timeout)
        transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_timer()  # the next request on a kept-alive connection gets the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        if getattr(self, "_header_timer", None) is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)


def uvicorn_options(config: Any) -> dict[str, Any]:
    """uvicorn settings for a turngym server with ``config`` (a :class:`ServerConfig`)."""
    return {
        "http": GuardedH11Protocol,
        "ws_max_size": int(config.max_message_bytes),
        "ws_ping_interval": None,  # sessions have their own idle timeout; pings cost CPU at 1,000s of sessions
        "h11_max_incomplete_event_size": 16 * 1024,  # request line + headers
        "timeout_keep_alive": 5,
        "access_log": False,
    }
