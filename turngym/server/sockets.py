"""Session sockets, for both wire protocols (turngym's ``/v1/session`` and OpenEnv's ``/ws``).

A WebSocket holds a session slot from the moment it is accepted, must send its first frame in
time, and is released the same way however it ends; both protocols' handlers use these helpers,
so the limits that keep idle or hostile sockets from holding the server apply to each alike.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from turngym.server.errors import ServerBusy
from turngym.server.sessions import Session, SessionManager

__all__ = ["accept_counted", "attach", "receive_first_frame", "receive_frame", "release"]


async def receive_frame(ws: WebSocket) -> str | bytes:
    """The next text or binary frame (both carry JSON); raises WebSocketDisconnect at the end."""
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    data = message.get("text")
    return data if data is not None else message.get("bytes") or b""


def attach(session: Session, ws: WebSocket) -> None:
    """Let the manager close this session's socket (idle timeout, shutdown)."""

    async def disconnect(code: int, reason: str) -> None:
        if ws.application_state == WebSocketState.CONNECTED:
            await ws.close(code=code, reason=reason)

    session.disconnect = disconnect


async def release(mgr: SessionManager, session: Session | None, ws: WebSocket) -> None:
    """End of a session socket, however it ended: free the session, close the socket if open."""
    if session is not None:
        await mgr.close(session)
    if ws.application_state == WebSocketState.CONNECTED:
        with contextlib.suppress(Exception):
            await ws.close()


async def receive_first_frame(ws: WebSocket, mgr: SessionManager) -> str | bytes | None:
    """The first frame within ``first_frame_timeout_s``; on time-out the socket is closed and None returned."""
    try:
        return await asyncio.wait_for(receive_frame(ws), mgr.config.first_frame_timeout_s)
    except TimeoutError:
        with contextlib.suppress(Exception):
            await ws.close(code=1008, reason=f"no first frame within {mgr.config.first_frame_timeout_s:g} s")
        return None


async def accept_counted(ws: WebSocket, mgr: SessionManager, busy_reply: Any) -> bool:
    """Accept ``ws`` holding a session slot (``max_sessions`` counts idle sockets too); False when full."""
    try:
        mgr.hold_pending()
    except ServerBusy as exc:
        await ws.accept()
        await ws.send_text(busy_reply(exc))
        await ws.close(code=1013, reason="server at capacity")
        return False
    try:
        await ws.accept()
    except BaseException:
        mgr.release_pending()
        raise
    return True
