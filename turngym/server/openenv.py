"""OpenEnv's wire format, so OpenEnv clients (``openenv-core``'s ``EnvClient``) drive turngym envs.

OpenEnv (0.3) speaks JSON frames over a WebSocket at ``{base}/ws``:

* client → ``{"type": "reset", "data": {"seed": 3, ...}}``, ``{"type": "step", "data": {"text": "..."}}``,
  ``{"type": "state"}``, ``{"type": "close"}``;
* server → ``{"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}``,
  ``{"type": "state", "data": {...}}`` or ``{"type": "error", "data": {"message", "code"}}``.

OpenEnv's observation has only ``done``, and its client drops top-level metadata, so the whole
turngym step goes *inside* ``observation``: the text, ``terminated``/``truncated``,
``signals``, ``state_key``, validity, ``infra_error`` and the final ``outcome``. An OpenEnv
user loses nothing by using this endpoint.

Actions are ``{"text": "..."}``; ``reset`` accepts ``seed``, ``episode_id`` and ``task``
(a task id) besides any family reset option, and ``env_id``: on a server of several envs,
``reset(env_id="turngym/Tools-v0")`` moves the connection to a fresh env of that id (one the
server serves), which is how OpenEnv's client, given one URL, picks an env. ``/openenv/<id>``
serves one id at its own URL (``GenericEnvClient(base_url="http://host:port/openenv/turngym/Math-v0")``).

Tools (OpenEnv's ``MCPToolClient``): for an env that offers tools (``env.tools``: Tools-v0, BFCL,
the MCP envs), a step ``{"type": "list_tools"}`` answers ``observation.tools`` (name, description,
``input_schema``) without playing a turn, and ``{"type": "call_tool", "tool_name": ..,
"arguments": {..}}`` plays the turn ``[{"name": .., "arguments": {..}}]`` in the env's own JSON
grammar, answering ``observation.tool_name`` and ``observation.result`` (the env's observation:
a bad call is the agent's, shown there and scored as an invalid action) with the turn's reward;
only an infrastructure failure is a ``transport_error``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from turngym.server.errors import ServerBusy
from turngym.server.handlers import do_reset, do_step
from turngym.server.protocol import dumps, loads
from turngym.server.sessions import Session, SessionManager
from turngym.server.sockets import accept_counted, attach, receive_first_frame, receive_frame, release

__all__ = ["openenv_routes", "ACTION_SCHEMA", "OBSERVATION_SCHEMA", "STATE_SCHEMA"]

_NUM = {"type": "number"}
_OPT_STR = {"anyOf": [{"type": "string"}, {"type": "null"}]}

ACTION_SCHEMA: dict[str, Any] = {
    "title": "TurngymAction",
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "the agent's action text, exactly as generated"},
        "metadata": {"type": "object", "description": "ignored by turngym"},
    },
    "required": ["text"],
    "additionalProperties": False,
}

OBSERVATION_SCHEMA: dict[str, Any] = {
    "title": "TurngymObservation",
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "the observation shown to the agent"},
        "turn": {"type": "integer"},
        "terminated": {"type": "boolean", "description": "the task ended (solved, failed, submitted)"},
        "truncated": {"type": "boolean", "description": "a budget ran out (turns)"},
        "signals": {"type": "object", "additionalProperties": _NUM, "description": "this turn's process signals"},
        "state_key": {"type": "string", "description": "canonical hash of the state without history"},
        "action_valid": {"type": "boolean"},
        "invalid_reason": _OPT_STR,
        "infra_error": _OPT_STR,
        "outcome": {"anyOf": [{"type": "object"}, {"type": "null"}], "description": "final turn only"},
        "task_id": _OPT_STR,
        "info": {"type": "object", "description": "the env's full info dict"},
        "done": {"type": "boolean"},
        "reward": {"anyOf": [_NUM, {"type": "null"}]},
    },
    "required": ["text", "turn", "signals", "state_key", "done"],
}

STATE_SCHEMA: dict[str, Any] = {
    "title": "TurngymState",
    "type": "object",
    "properties": {
        "episode_id": _OPT_STR,
        "step_count": {"type": "integer", "minimum": 0},
        "env_id": {"type": "string"},
        "task_id": _OPT_STR,
        "state_key": _OPT_STR,
        "done": {"type": "boolean"},
        "max_turns": {"type": "integer"},
    },
}


def _observation(obs: str, info: dict[str, Any], reward: float | None, terminated: bool, truncated: bool) -> dict[str, Any]:
    done = terminated or truncated
    observation = {
        "text": obs,
        "turn": info.get("turn", 0),
        "terminated": terminated,
        "truncated": truncated,
        "signals": info.get("signals", {}),
        "state_key": info.get("state_key", ""),
        "action_valid": info.get("action_valid", True),
        "invalid_reason": info.get("invalid_reason"),
        "infra_error": info.get("infra_error"),
        "outcome": info.get("outcome"),
        "task_id": info.get("task_id"),
        "info": info,
        "done": done,
        "reward": reward,
    }
    return {"type": "observation", "data": {"observation": observation, "reward": reward, "done": done}}


def _error(message: str, code: str, **extra: Any) -> str:
    return dumps({"type": "error", "data": {"message": message, "code": code, **extra}})


async def _state(mgr: SessionManager, session: Session) -> dict[str, Any]:
    data = await mgr.call(session, "state")
    return {"type": "state", "data": {"episode_id": session.episode_id, "env_id": session.env_id, **data}}


async def _switch(mgr: SessionManager, session: Session, ws: WebSocket, env_id: Any) -> Session:
    """``reset(env_id=...)``: close this connection's env and open a fresh one of ``env_id``."""
    if not isinstance(env_id, str) or env_id not in mgr.served():
        raise _Invalid(f"env_id {env_id!r} is not served here; this server serves: {', '.join(mgr.served())}")
    try:
        new = await mgr.open(env_id)
    except ServerBusy:  # at capacity: give up this env's slot for the new one
        await mgr.close(session)
        try:
            new = await mgr.open(env_id)
        except BaseException:
            session.broken = f"its env was closed to move to {env_id}, which could not be opened"
            raise
    else:
        await mgr.close(session)
    attach(new, ws)
    return new


async def _list_tools(mgr: SessionManager, session: Session) -> dict[str, Any]:
    tools = [t.get("function", t) for t in await mgr.call(session, "tools")]
    state = await mgr.call(session, "state")
    listed = [{"name": f.get("name", ""), "description": f.get("description") or "",
               "input_schema": f.get("parameters") or {"type": "object", "properties": {}}} for f in tools]
    observation = {"tools": listed, "text": "", "turn": state["step_count"], "signals": {},
                   "state_key": state["state_key"] or "", "done": state["done"], "reward": None}
    return {"type": "observation", "data": {"observation": observation, "reward": None, "done": state["done"]}}


def _tool_call_action(data: dict[str, Any]) -> str:
    """A ``call_tool`` step as the tool envs' JSON action (the env judges the name and arguments)."""
    return json.dumps([{"name": data.get("tool_name"), "arguments": data.get("arguments", {})}], ensure_ascii=False)


def _tool_result(reply: dict[str, Any], tool_name: Any) -> dict[str, Any]:
    observation = reply["data"]["observation"]
    observation["tool_name"] = tool_name if isinstance(tool_name, str) else ""
    observation["result"] = observation["text"]
    infra = observation.get("infra_error")
    observation["error"] = {"error_type": "transport_error", "message": infra} if infra else None
    return reply


async def _serve(ws: WebSocket, env_id: str) -> None:
    mgr: SessionManager = ws.app.state.manager
    busy = lambda exc: _error(str(exc), "CAPACITY_REACHED", max_sessions=mgr.config.max_sessions)  # noqa: E731
    if not await accept_counted(ws, mgr, busy):
        return
    session: Session | None = None
    pending = True
    try:
        # the env is built on the first frame, which must come in time: an idle socket holds no env
        raw: str | bytes | None = await receive_first_frame(ws, mgr)
        if raw is None:
            return
        try:
            pending = False  # open() takes over the held slot, whatever happens
            session = await mgr.open(env_id, pending=True)
        except ServerBusy as exc:
            await ws.send_text(busy(exc))
            return
        except Exception as exc:
            await ws.send_text(_error(str(exc), "FACTORY_ERROR", factory_name=env_id))
            return
        attach(session, ws)
        while True:
            if raw is None:
                raw = await receive_frame(ws)
            frame: str | bytes = raw
            raw = None
            try:
                msg = loads(frame)
            except (ValueError, RecursionError) as exc:  # nested past the decoder's stack: bad JSON, not a hang-up
                await ws.send_text(_error(f"Invalid JSON: {exc}", "INVALID_JSON"))
                continue
            kind = msg.get("type") if isinstance(msg, dict) else None
            data = msg.get("data") or {} if isinstance(msg, dict) else {}
            try:
                if kind == "reset":
                    if not isinstance(data, dict):
                        raise _Invalid("reset data must be an object")
                    data = dict(data)
                    switch = data.pop("env_id", None)
                    if switch is not None and switch != session.env_id:
                        session = await _switch(mgr, session, ws, switch)
                    seed = data.pop("seed", None)
                    episode_id = data.pop("episode_id", None)
                    session.episode_id = None if episode_id is None else str(episode_id)[:256]
                    obs, info = await do_reset(mgr, session, seed, data or None)
                    reply = _observation(obs, info, None, False, False)
                elif kind == "step":
                    if not isinstance(data, dict):
                        raise _Invalid("step data must be an object like {'text': '...'}")
                    if data.get("type") == "list_tools":
                        reply = await _list_tools(mgr, session)
                    else:
                        call = data.get("type") == "call_tool"
                        action = _tool_call_action(data) if call else data.get("text", data.get("action", data.get("message")))
                        obs, reward, term, trunc, info = await do_step(mgr, session, action)
                        reply = _observation(obs, info, reward, term, trunc)
                        if call:
                            reply = _tool_result(reply, data.get("tool_name"))
                elif kind == "state":
                    reply = await _state(mgr, session)
                elif kind == "close":
                    break
                else:
                    await ws.send_text(_error(f"Unknown message type: {kind}", "UNKNOWN_TYPE"))
                    continue
                text = dumps(reply)  # inside the try: unencodable info is an error frame too
            except _Invalid as exc:
                await ws.send_text(_error(str(exc), "VALIDATION_ERROR"))
                continue
            except Exception as exc:  # env errors (reset before step…) go back as error frames
                name = getattr(exc, "remote_type", None) or type(exc).__name__
                await ws.send_text(_error(f"{name}: {exc}", "EXECUTION_ERROR"))
                if session.broken:
                    break
                continue
            await ws.send_text(text)
            if session.broken:  # a step past its deadline was answered; its env is gone
                break
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        if pending:
            mgr.release_pending()
        await release(mgr, session, ws)


class _Invalid(ValueError):
    pass


def openenv_routes(default_env_id: str) -> list[BaseRoute]:
    """OpenEnv's endpoints: at the root for ``default_env_id``, under ``/openenv/{env_id}`` for any."""

    async def ws_default(ws: WebSocket) -> None:
        await _serve(ws, default_env_id)

    async def ws_any(ws: WebSocket) -> None:
        await _serve(ws, ws.path_params["env_id"])

    async def schema(request: Request) -> Response:
        return JSONResponse({"action": ACTION_SCHEMA, "observation": OBSERVATION_SCHEMA, "state": STATE_SCHEMA})

    async def metadata(request: Request) -> Response:
        mgr: SessionManager = request.app.state.manager
        env_id = request.path_params.get("env_id", default_env_id)
        spec = mgr.specs.get(env_id)
        if spec is None:
            return JSONResponse({"message": f"not served: {env_id}"}, status_code=404)
        return JSONResponse({
            "name": env_id,
            "description": spec["system_prompt"] or env_id,
            "readme_content": None,
            "version": env_id.rsplit("-", 1)[-1],
            "author": "turngym",
            "documentation_url": None,
        })

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "healthy"})

    return [
        WebSocketRoute("/ws", ws_default),
        Route("/schema", schema),
        Route("/metadata", metadata),
        WebSocketRoute("/openenv/{env_id:path}/ws", ws_any),
        Route("/openenv/{env_id:path}/schema", schema),
        Route("/openenv/{env_id:path}/metadata", metadata),
        Route("/openenv/{env_id:path}/health", health),
    ]
