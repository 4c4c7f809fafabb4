"""One session's env and what each protocol op does to it, the same code wherever the env lives.

The server runs envs in three places: on its own event loop (``inline``), on a thread pool
(``thread``), or in worker processes (``process``, :mod:`turngym.server.workers`). What an op
does to an env must not depend on which: this module is that one definition, imported by the
session manager for the in-process executors and by the worker process
(:mod:`turngym.server.worker_process`) for its own. It depends on neither, so a worker process
needs none of the server's event-loop machinery to run an env. :class:`CallCost` sits here for
the same reason: the server's ``auto`` executor and a worker both decide with it whether a call
is cheap enough to run where it arrives.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from turngym.core.env import env_action_choices
from turngym.core.errors import ConfigError, SnapshotError
from turngym.server.protocol import choices_to_wire, rng_from_wire, rng_to_wire, spec_to_wire, task_to_wire

__all__ = ["CallCost", "EnvHost", "RegistryFactory", "run_op"]


@dataclass(eq=False)
class EnvHost:
    """One session's env and its snapshots, kept wherever the env runs (snapshots never cross a pipe)."""

    sid: str
    env_id: str
    env: Any
    snapshots: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    _handles: itertools.count = field(default_factory=itertools.count)

    def add_snapshot(self, snap: Any, limit: int) -> str:
        handle = f"{self.sid}:{next(self._handles)}"
        self.snapshots[handle] = snap
        while len(self.snapshots) > limit:
            self.snapshots.popitem(last=False)
        return handle

    def get_snapshot(self, handle: str) -> Any:
        try:
            snap = self.snapshots[handle]
        except KeyError:
            owner = handle.rsplit(":", 1)[0]
            why = (
                "it belongs to another session (snapshots die with their connection)"
                if owner != self.sid
                else "it was released or evicted (the server keeps the most recent --max-snapshots)"
            )
            raise SnapshotError(f"unknown snapshot handle {handle!r}: {why}") from None
        self.snapshots.move_to_end(handle)
        return snap


def _choices(h: EnvHost) -> list[str] | None:
    """The env's valid actions now (``action_choices()``), computed here, next to the env, as sent."""
    return choices_to_wire(env_action_choices(h.env), env_name=type(getattr(h.env, "unwrapped", h.env)).__qualname__)


def _reset(h: EnvHost, seed: Any, options: dict[str, Any] | None) -> Any:
    """``(obs, info, choices)``: the session manager keeps ``choices`` for the reply and strips it."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed must be an int or null, got {seed!r}")
    return (*h.env.reset(seed=seed, options=options), _choices(h))


def _step(h: EnvHost, action: Any) -> Any:
    """``(obs, reward, terminated, truncated, info, choices)``, as :func:`_reset`."""
    return (*h.env.step(action), _choices(h))


def _restore(h: EnvHost, handle: str) -> dict[str, Any]:
    h.env.restore(h.get_snapshot(handle))
    reply = {"ok": True, "state_key": h.env.state_key(), "turn": h.env.turn, "done": h.env.done}
    choices = _choices(h)  # the restored state's, not the last step's
    if choices is not None:
        reply["choices"] = choices
    return reply


def _sample(h: EnvHost, rng_state: Mapping[str, Any]) -> dict[str, Any]:
    rng = rng_from_wire(rng_state)
    action = h.env.sample_action(rng)
    return {"ok": True, "action": action, "rng": rng_to_wire(rng)}


def _state(h: EnvHost) -> dict[str, Any]:
    env = h.env
    task = getattr(env, "task", None)
    return {
        "step_count": env.turn,
        "task_id": getattr(task, "id", None),
        "state_key": env.state_key() if task is not None else None,
        "done": env.done,
        "max_turns": env.max_turns,
    }


def _tools(h: EnvHost) -> list[dict[str, Any]]:
    """The tools the env offers now, as OpenAI function schemas (``env.tools``; [] for an env without)."""
    tools = getattr(getattr(h.env, "unwrapped", h.env), "tools", None)
    return [dict(t) for t in tools] if isinstance(tools, list) else []


_OPS: dict[str, Callable[..., Any]] = {
    "reset": _reset,
    "step": _step,
    "snapshot": lambda h, limit: h.add_snapshot(h.env.snapshot(), limit),
    "restore": _restore,
    "release": lambda h, handle: h.snapshots.pop(handle, None) and None,
    "oracle_action": lambda h: h.env.oracle_action(),
    "sample_action": _sample,
    "render": lambda h: h.env.render(),
    "task": lambda h: task_to_wire(h.env.task),
    "state": _state,
    "spec": lambda h: spec_to_wire(h.env, h.env_id),
    "tools": _tools,
}


def run_op(host: EnvHost, op: str, args: tuple[Any, ...] = ()) -> Any:
    """Do protocol op ``op`` on ``host``'s env (see :mod:`turngym.server.protocol` for the ops)."""
    return _OPS[op](host, *args)


@dataclass(frozen=True)
class RegistryFactory:
    """A picklable ``make(env_id, **kwargs)``: what a worker process builds registered envs with."""

    env_id: str

    def __call__(self, **kwargs: Any) -> Any:
        from turngym.core.registry import make

        return make(self.env_id, **kwargs)


class CallCost:
    """Moving average of one env id's call durations, deciding whether its calls run inline.

    Both the server's ``auto`` executor and a worker process use it: a call that costs less
    than a thread hop is cheaper run where it arrives, a slow one must not block that place.
    Hysteresis (leave inline when the average reaches the threshold, return only below half
    of it) keeps an env whose cost hovers near the threshold from flapping.
    """

    ALPHA = 0.05

    def __init__(self, inline_below_s: float, *, warmup: int) -> None:
        self.threshold = inline_below_s
        self.warmup = warmup
        self.mean = 0.0
        self.n = 0
        self.inline = False

    def add(self, seconds: float) -> None:
        self.n += 1
        self.mean = seconds if self.n == 1 else self.mean + self.ALPHA * (seconds - self.mean)
        if self.n >= self.warmup:
            self.inline = self.mean < (self.threshold if self.inline else self.threshold / 2)
