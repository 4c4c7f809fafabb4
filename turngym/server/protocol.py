"""The turngym wire format: what crosses the network, and how values survive the trip.

One WebSocket connection is one *session*: it holds one env for as long as it stays open (any
number of episodes, as with a local env). Every client frame is a JSON object with an ``op``;
the server answers each one, in order, with ``{"ok": true, ...}`` or
``{"ok": false, "error": {"type": ..., "message": ...}}``:

======================  ==========================================================  ======================================
op                      request fields                                              reply fields
======================  ==========================================================  ======================================
``make``                ``env_id``, ``kwargs``                                      ``session``, ``spec`` (see :func:`spec_to_wire`)
``reset``               ``seed``, ``options``                                       ``obs``, ``info``
``step``                ``action``                                                  ``obs``, ``reward``, ``terminated``, ``truncated``, ``info``
``snapshot``            —                                                           ``handle`` (a server-side snapshot id)
``restore``             ``handle``                                                  ``state_key``, ``turn``, ``done``
``release``             ``handle``                                                  —
``oracle_action``       —                                                           ``action``
``sample_action``       ``rng`` (the caller's generator state, see :func:`rng_to_wire`)  ``action``, ``rng`` (advanced)
``render``              —                                                           ``render``
``task``                —                                                           ``task`` (see :func:`task_to_wire`)
``close``               —                                                           — (the server then closes the socket)
======================  ==========================================================  ======================================

``info`` is the env's own info dict, whole: ``signals``, ``state_key``, ``action_valid``,
``invalid_reason``, ``infra_error`` and ``outcome``. Error ``type`` names a
:mod:`turngym.core.errors` class, so the client raises what the local env would have raised.

Why snapshots stay on the server: a snapshot is arbitrary Python state, and shipping it to the
client would mean unpickling client bytes on the server (remote code execution). Handles are
cheap and exact; they die with the session.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError, TaskError, TurngymError
from turngym.core.spec import RewardSpec, Signal
from turngym.core.task import Task

__all__ = [
    "PROTOCOL_VERSION",
    "dumps",
    "loads",
    "jsonable",
    "spec_to_wire",
    "reward_spec_from_wire",
    "task_to_wire",
    "task_from_wire",
    "rng_to_wire",
    "rng_from_wire",
    "error_frame",
]

PROTOCOL_VERSION = 1

try:  # orjson is 3-5x faster at the sizes we send; the stdlib is the always-there fallback.
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only where orjson is missing
    _orjson = None


def jsonable(value: Any) -> Any:
    """Turn the non-JSON values envs put in ``info`` (numpy scalars, tuples, sets, Tasks) into JSON."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Task):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot send a {type(value).__name__} over the wire")


def dumps(obj: Any) -> str:
    """Encode one frame (JSON text)."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj, default=jsonable, option=_orjson.OPT_SERIALIZE_NUMPY).decode()
        except TypeError:  # ints beyond 64 bits and other rarities: the stdlib copes
            pass
    return json.dumps(obj, default=jsonable, ensure_ascii=False, allow_nan=True)


def loads(data: str | bytes) -> Any:
    """Decode one frame."""
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError:
            pass  # NaN/Infinity, which orjson rejects and the stdlib accepts
    return json.loads(data)


def error_frame(exc: BaseException) -> dict[str, Any]:
    """The reply for a failed request: the error's class name, whether it is turngym's, and its message.

    The client re-raises turngym errors as the same class (a remote ``ResetNeeded`` is a
    ``ResetNeeded``); anything else an env raised arrives as :class:`RemoteEnvError`.
    """
    name = getattr(exc, "remote_type", None) or type(exc).__name__  # an env error from a worker process
    is_turngym = bool(getattr(exc, "remote_turngym", False)) or isinstance(exc, TurngymError)
    return {"ok": False, "error": {"type": name, "turngym": is_turngym, "message": str(exc)}}


# ------------------------------------------------------------------------------- env spec
def spec_to_wire(env: Any, env_id: str) -> dict[str, Any]:
    """What a client needs to behave like the env without running it."""
    return {
        "protocol": PROTOCOL_VERSION,
        "env_id": env_id,
        "env_class": type(env).__qualname__,
        "max_turns": env.max_turns,
        "system_prompt": env.system_prompt,
        "metadata": dict(env.metadata),
        "render_mode": env.render_mode,
        "reset_options": list(env.reset_options),
        "max_obs_chars": env.observation_space.max_length,
        "max_action_chars": env.action_space.max_length,
        "reward_spec": {
            "signals": [dataclasses.asdict(s) for s in env.reward_spec.signals],
            "outcome": env.reward_spec.outcome,
            "outcome_range": list(env.reward_spec.outcome_range),
            "success_threshold": env.reward_spec.success_threshold,
        },
    }


def reward_spec_from_wire(data: Mapping[str, Any]) -> RewardSpec:
    """Rebuild the :class:`RewardSpec` an env declared (equal to the server's)."""
    return RewardSpec(
        signals=tuple(Signal(**s) for s in data["signals"]),
        outcome=data["outcome"],
        outcome_range=tuple(data["outcome_range"]),  # type: ignore[arg-type]
        success_threshold=data["success_threshold"],
    )


# ---------------------------------------------------------------------------------- tasks
def task_to_wire(task: Any) -> Any:
    """``options["task"]`` for the wire: an id string as is, a Task as its class and fields."""
    if task is None or isinstance(task, str):
        return task
    if isinstance(task, Task):
        cls = type(task)
        return {"__task__": f"{cls.__module__}:{cls.__qualname__}", "data": task.to_dict()}
    raise ConfigError(f"options['task'] must be a Task or a task id string, got {type(task).__name__}")


def task_from_wire(value: Any) -> Any:
    """Inverse of :func:`task_to_wire`. Only Task subclasses inside ``turngym`` are rebuilt.

    The class path comes from the client; importing arbitrary modules on its say-so would let
    a client run code on the server, so anything outside the package is refused.
    """
    if not isinstance(value, dict) or "__task__" not in value:
        return value
    path = str(value["__task__"])
    module, _, name = path.partition(":")
    if not (module == "turngym" or module.startswith("turngym.")) or not name.isidentifier():
        raise TaskError(f"task class {path!r} is not a turngym task; send the task id instead")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TaskError(f"{path!r} is not a turngym Task class")
    return cls.from_dict(value["data"])


# ------------------------------------------------------------------------------------ RNG
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _encode_state(value: Any) -> Any:
    # JSON numbers lose precision past 2**53 and orjson refuses ints past 2**64: send big ints as text.
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, np.integer)):
        v = int(value)
        return v if -(2**53) < v < 2**53 else {"__int__": str(v)}
    if isinstance(value, np.ndarray):
        return {"__array__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, dict):
        return {k: _encode_state(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError("generator state holds a non-finite float")
    return value


def _decode_state(value: Any) -> Any:
    if isinstance(value, dict):
        if "__int__" in value:
            return int(value["__int__"])
        if "__array__" in value:
            return np.asarray(value["__array__"], dtype=value["dtype"])
        return {k: _decode_state(v) for k, v in value.items()}
    return value


def rng_to_wire(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy Generator's exact state, as JSON (so the server draws what the client would)."""
    return _encode_state(rng.bit_generator.state)


def rng_from_wire(data: Mapping[str, Any]) -> np.random.Generator:
    """Rebuild a Generator in exactly the state :func:`rng_to_wire` captured."""
    state = _decode_state(dict(data))
    name = state.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise ConfigError(f"unsupported bit generator {name!r}; expected one of {_BIT_GENERATORS}")
    bitgen = getattr(np.random, name)()
    bitgen.state = state
    return np.random.Generator(bitgen)
