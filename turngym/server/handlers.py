"""What each request does to a session's env: one function per ``op`` of the turngym protocol.

Kept apart from the transport so the WebSocket session, the stateless HTTP route and the
OpenEnv adapter all run the same code on the env. The env itself may live in a worker
process, so handlers name ops (:func:`turngym.server.workers.run_op`) instead of calling env
methods; what crosses from the client (reset options) is checked against the operator's
policy here, before it reaches the env.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from turngym.core.errors import ConfigError
from turngym.server.policy import check_options
from turngym.server.protocol import task_from_wire
from turngym.server.sessions import Session, SessionManager

__all__ = ["OPS", "decode_options", "do_reset", "do_step"]

Handler = Callable[[SessionManager, Session, Mapping[str, Any]], Awaitable[dict[str, Any]]]


def decode_options(options: Any) -> dict[str, Any] | None:
    if options is None:
        return None
    if not isinstance(options, dict):
        raise ConfigError(f"reset options must be an object, got {type(options).__name__}")
    options = dict(options)
    if "task" in options:
        options["task"] = task_from_wire(options["task"])
    return options


async def do_reset(mgr: SessionManager, s: Session, seed: Any, options: Any) -> tuple[str, dict[str, Any]]:
    check_options(mgr.policy(s.env_id), options)
    return await mgr.call(s, "reset", seed, decode_options(options))


async def do_step(mgr: SessionManager, s: Session, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    return await mgr.call(s, "step", action)


def _with_choices(reply: dict[str, Any], s: Session) -> dict[str, Any]:
    """Add the env's action choices (computed server-side, see :attr:`Session.choices`) when it lists any."""
    if s.choices is not None:
        reply["choices"] = s.choices
    return reply


async def _op_reset(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    obs, info = await do_reset(mgr, s, msg.get("seed"), msg.get("options"))
    return _with_choices({"ok": True, "obs": obs, "info": info}, s)


async def _op_step(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    obs, reward, terminated, truncated, info = await do_step(mgr, s, msg.get("action"))
    reply = {"ok": True, "obs": obs, "reward": reward, "terminated": terminated, "truncated": truncated, "info": info}
    return _with_choices(reply, s)


async def _op_snapshot(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    return {"ok": True, "handle": await mgr.call(s, "snapshot", mgr.config.max_snapshots)}


async def _op_restore(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    return await mgr.call(s, "restore", str(msg.get("handle")))


async def _op_release(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    await mgr.call(s, "release", str(msg.get("handle")))
    return {"ok": True}


async def _op_oracle_action(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    return {"ok": True, "action": await mgr.call(s, "oracle_action")}


async def _op_sample_action(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    rng = msg.get("rng")
    if not isinstance(rng, dict):
        raise ConfigError("sample_action needs 'rng': the generator state from rng_to_wire")
    return await mgr.call(s, "sample_action", rng)


async def _op_render(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    return {"ok": True, "render": await mgr.call(s, "render")}


async def _op_task(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    return {"ok": True, "task": await mgr.call(s, "task")}


OPS: dict[str, Handler] = {
    "reset": _op_reset,
    "step": _op_step,
    "snapshot": _op_snapshot,
    "restore": _op_restore,
    "release": _op_release,
    "oracle_action": _op_oracle_action,
    "sample_action": _op_sample_action,
    "render": _op_render,
    "task": _op_task,
}
"""Every op a session accepts besides ``make`` and ``close`` (which the transport handles)."""
