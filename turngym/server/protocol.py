"""The turngym wire format: what crosses the network, and how values survive the trip.

One WebSocket connection is one *session*: it holds one env for as long as it stays open (any
number of episodes, as with a local env). Every client frame is a JSON object with an ``op``;
the server answers each one, in order, with ``{"ok": true, ...}`` or
``{"ok": false, "error": {"type": ..., "message": ...}}``:

======================  ==========================================================  ======================================
op                      request fields                                              reply fields
======================  ==========================================================  ======================================
``make``                ``env_id``, ``kwargs``                                      ``session``, ``spec`` (see :func:`spec_to_wire`)
``reset``               ``seed``, ``options``                                       ``obs``, ``info``, [``choices``]
``step``                ``action``                                                  ``obs``, ``reward``, ``terminated``, ``truncated``, ``info``, [``choices``]
``snapshot``            —                                                           ``handle`` (a server-side snapshot id)
``restore``             ``handle``                                                  ``state_key``, ``turn``, ``done``, [``choices``]
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

``choices`` (since protocol version 2) is the env's ``action_choices()`` in the state the reply
leaves it in (after the reset, the step, or the restored snapshot), computed by the server next
to the env; the key is left out when the env cannot enumerate its actions, so replies of most
envs stay as small as before. Nothing a client sends can set it. A list past the caps of
:func:`choices_to_wire` is sent as absent (the policy then decodes freely, exactly as for an env
without choices) rather than cut short, since a partial list would forbid valid actions. The
client treats a missing key as None, so a client of a version-1 server gets None.

Versioning: ``spec["protocol"]`` is the server's version. Versions only add optional reply
fields, so clients accept any version and read what an older server leaves out as absent.

Why snapshots stay on the server: a snapshot is arbitrary Python state, and shipping it to the
client would mean unpickling client bytes on the server (remote code execution). Handles are
cheap and exact; they die with the session.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import math
import traceback
from collections.abc import Mapping
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError, TaskError, TurngymError
from turngym.core.infra import MAX_TRACEBACK_CHARS
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
    "MAX_CHOICES",
    "MAX_CHOICE_CHARS",
    "MAX_CHOICES_TOTAL_CHARS",
    "choices_to_wire",
    "choices_from_wire",
]

log = logging.getLogger("turngym.server")

PROTOCOL_VERSION = 2
"""1: the first wire format; 2: ``choices`` in ``reset``/``step``/``restore`` replies, and the env's
``stop_strings``, ``max_new_tokens`` and ``action_prefix`` in its spec."""

#: The most action choices a reply carries (ALFWorld-style admissible lists hold tens).
MAX_CHOICES = 1024
#: The longest single choice, in characters.
MAX_CHOICE_CHARS = 1024
#: All choices together, in characters: bounds the reply whatever the mix of count and length.
MAX_CHOICES_TOTAL_CHARS = 256 * 1024

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
    """Encode one frame (JSON text) that is valid UTF-8 whatever strings ``obj`` holds.

    An agent's action (and the observation that echoes it) may hold lone surrogates
    (``"\\ud800"``): as raw text they cannot be sent (the socket's UTF-8 encode raises and the
    connection drops, an ``infra_error`` the agent provoked), so such a frame is sent with them
    escaped (``\\ud800``), which :func:`loads` decodes back to the same string.
    """
    if _orjson is not None:
        try:
            return _orjson.dumps(obj, default=jsonable, option=_orjson.OPT_SERIALIZE_NUMPY).decode()
        except TypeError:  # ints beyond 64 bits, lone surrogates and other rarities: the stdlib copes
            pass
    text = json.dumps(obj, default=jsonable, ensure_ascii=False, allow_nan=True)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (an agent's action can hold one) is no UTF-8: the
        # frame could not be sent and the connection would drop (an infra error the agent caused);
        # as a JSON escape it travels, and the stdlib's ``loads`` on the other side restores it
        return json.dumps(obj, default=jsonable, ensure_ascii=True, allow_nan=True)
    return text


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
    ``ResetNeeded``); anything else an env raised arrives as :class:`RemoteEnvError`, with the
    server-side traceback (``error["traceback"]``) as its ``remote_traceback``.
    """
    name = getattr(exc, "remote_type", None) or type(exc).__name__  # an env error from a worker process
    is_turngym = bool(getattr(exc, "remote_turngym", False)) or isinstance(exc, TurngymError)
    error: dict[str, Any] = {"type": name, "turngym": is_turngym, "message": str(exc)}
    if not is_turngym:  # an env bug: where it raised, for the client's infra_traceback
        tb = getattr(exc, "remote_traceback", None) or "".join(traceback.format_exception(exc))
        error["traceback"] = tb[-MAX_TRACEBACK_CHARS:]
    return {"ok": False, "error": error}


# -------------------------------------------------------------------------------- choices
_warned_choices: set[str] = set()


def _choices_problem(choices: Any) -> str | None:
    """Why ``choices`` may not travel (not a list of strings, or past a cap), or None when it may."""
    if isinstance(choices, (str, bytes)) or not isinstance(choices, (list, tuple)):
        return f"action_choices() returned a {type(choices).__name__}, not a tuple of strings"
    if len(choices) > MAX_CHOICES:
        return f"{len(choices)} action choices (more than {MAX_CHOICES})"
    if not all(isinstance(c, str) for c in choices):
        return "action_choices() holds a non-string"
    if any(len(c) > MAX_CHOICE_CHARS for c in choices):
        return f"an action choice longer than {MAX_CHOICE_CHARS} characters"
    if sum(map(len, choices)) > MAX_CHOICES_TOTAL_CHARS:
        return f"action choices longer than {MAX_CHOICES_TOTAL_CHARS} characters in all"
    return None


def choices_to_wire(choices: Any, *, env_name: str = "env") -> list[str] | None:
    """The server's side: ``env.action_choices()`` as sent, or None when it is None or past the caps.

    Caps (:data:`MAX_CHOICES` entries, :data:`MAX_CHOICE_CHARS` per entry,
    :data:`MAX_CHOICES_TOTAL_CHARS` in all) keep one reply bounded whatever an env returns. A
    list over them, or one holding anything but strings, is dropped whole (logged once per env
    class): a truncated list would make a constrained policy refuse valid actions.
    """
    if choices is None:
        return None
    why = _choices_problem(choices)
    if why is not None:
        if env_name not in _warned_choices:
            _warned_choices.add(env_name)
            log.warning("%s: %s; sent as no choices (the policy decodes freely)", env_name, why)
        return None
    return list(choices)


def choices_from_wire(value: Any) -> tuple[str, ...] | None:
    """The client's side: a reply's ``choices`` as ``action_choices()`` returns it (None when absent).

    The same checks as the server's: anything but a (JSON) list of strings within the caps reads
    as None, so a misbehaving server cannot hand the policy an unbounded or ill-typed constraint.
    """
    if not isinstance(value, list) or _choices_problem(value) is not None:
        return None
    return tuple(value)


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
        # how a generating policy shapes one action (stop at a closing tag, token budget, forced start)
        "stop_strings": list(getattr(env, "stop_strings", ())),
        "max_new_tokens": getattr(env, "max_new_tokens", None),
        "action_prefix": getattr(env, "action_prefix", ""),
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
