"""What each request does to a session's env: one function per ``op`` of the turngym protocol.

Kept apart from the transport so the WebSocket session, the stateless HTTP route and the
OpenEnv adapter all run the same code on the env.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.server.protocol import rng_from_wire, rng_to_wire, task_from_wire, task_to_wire
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


def _reset(env: Any, seed: Any, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed must be an int or null, got {seed!r}")
    return env.reset(seed=seed, options=options)


async def do_reset(mgr: SessionManager, s: Session, seed: Any, options: Any) -> tuple[str, dict[str, Any]]:
    return await mgr.call(s, _reset, s.env, seed, decode_options(options))


async def do_step(mgr: SessionManager, s: Session, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    return await mgr.call(s, s.env.step, action)


async def _op_reset(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    obs, info = await do_reset(mgr, s, msg.get("seed"), msg.get("options"))
    return {"ok": True, "obs": obs, "info": info}


async def _op_step(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    obs, reward, terminated, truncated, info = await do_step(mgr, s, msg.get("action"))
    return {"ok": True, "obs": obs, "reward": reward, "terminated": terminated, "truncated": truncated, "info": info}


async def _op_snapshot(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    snap = await mgr.call(s, s.env.snapshot)
    return {"ok": True, "handle": s.add_snapshot(snap, mgr.config.max_snapshots)}


def _restore(env: Any, snap: Any) -> dict[str, Any]:
    env.restore(snap)
    return {"ok": True, "state_key": env._state_key(), "turn": env.turn, "done": env.done}


async def _op_restore(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    snap = s.get_snapshot(str(msg.get("handle")))
    return await mgr.call(s, _restore, s.env, snap)


async def _op_release(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    s.snapshots.pop(str(msg.get("handle")), None)
    return {"ok": True}


async def _op_oracle_action(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    return {"ok": True, "action": await mgr.call(s, s.env.oracle_action)}


def _sample(env: Any, rng: np.random.Generator) -> dict[str, Any]:
    action = env.sample_action(rng)
    return {"ok": True, "action": action, "rng": rng_to_wire(rng)}


async def _op_sample_action(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    return await mgr.call(s, _sample, s.env, rng_from_wire(msg["rng"]))


async def _op_render(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    return {"ok": True, "render": await mgr.call(s, s.env.render)}


async def _op_task(mgr: SessionManager, s: Session, msg: Mapping[str, Any]) -> dict[str, Any]:
    return {"ok": True, "task": task_to_wire(s.env.task)}


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
