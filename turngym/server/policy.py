"""What a remote client may ask of the server: the env constructor arguments it may set, and their ranges.

Constructor arguments decide what an env *is*: which sandbox runs the agent's code, which
files a task reads, which URL a retriever calls, how big a knowledge base gets built. Those
are the operator's decisions, not the client's. So a client's ``kwargs`` (the ``make`` frame,
the HTTP episode route) are checked against a declaration per env family: each argument a
client may set has a type and a range; anything else is refused with an error that names
the argument and the ``turngym serve --allow-kwarg NAME`` flag that lets clients set it.
The operator's own ``--env-arg`` values are trusted and never checked here.

Tasks travel too: ``reset(options={"task": ...})`` may name a task id of the env's own task
set, but a whole :class:`~turngym.core.task.Task` from the wire (whose fields can point at
host paths, hold test code, or carry a gold answer) is refused unless the operator allowed
``tasks``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turngym.core.errors import ConfigError

__all__ = ["Arg", "KwargPolicy", "ENV_ARGS", "check_options", "family_args"]

_MAX_LIST = 64
_MAX_STR = 256


@dataclass(frozen=True)
class Arg:
    """One constructor argument a remote client may set: a validator and a human description."""

    check: Callable[[Any], bool]
    what: str

    def validate(self, env_id: str, name: str, value: Any) -> None:
        try:
            ok = self.check(value)
        except Exception:  # a validator hit a value of the wrong shape: refused, not crashed
            ok = False
        if not ok:
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise ConfigError(f"{env_id}: kwarg {name!r}={shown} is refused: it must be {self.what}")


def _int(lo: int, hi: int) -> Arg:
    return Arg(lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi, f"an int in [{lo}, {hi}]")


def _float(lo: float, hi: float) -> Arg:
    def ok(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi

    return Arg(ok, f"a number in [{lo:g}, {hi:g}]")


def _choice(*options: Any) -> Arg:
    return Arg(lambda v: any(v is o or (type(v) is type(o) and v == o) for o in options),
               f"one of {list(options)}")


def _optional(arg: Arg) -> Arg:
    return Arg(lambda v: v is None or arg.check(v), f"null or {arg.what}")


def _list_of(arg: Arg, max_len: int = _MAX_LIST) -> Arg:
    def ok(v: Any) -> bool:
        return isinstance(v, (list, tuple)) and 0 < len(v) <= max_len and all(arg.check(x) for x in v)

    return Arg(ok, f"a list of 1-{max_len} items, each {arg.what}")


_NAME = Arg(lambda v: isinstance(v, str) and 0 < len(v) <= 64 and v.replace("_", "").replace("-", "").isalnum(),
            "a short name (letters, digits, '-', '_')")
_BOOL = Arg(lambda v: isinstance(v, bool), "true or false")
_SEED = _int(0, 2**32 - 1)

#: What every turngym env accepts (``TurngymEnv.__init__``).
BASE_ARGS: dict[str, Arg] = {
    "max_turns": _int(1, 1000),
    "invalid_action_policy": _NAME,  # the env checks it against its enum with a clear error
    "invalid_action_penalty": _float(-10.0, 0.0),
    "render_mode": _optional(_NAME),
    "max_obs_chars": _int(1, 1 << 20),
    "max_action_chars": _int(1, 1 << 20),
}

#: Per env family, the constructor arguments a remote client may set (besides :data:`BASE_ARGS`).
#: Deliberately absent everywhere: ``tasks`` (paths, Task objects), ``sandbox``, ``limits``, ``run_limits``,
#: ``corpus``, ``retriever`` URLs, ``catalog``, ``swebench``, ``repo_dirs``, ``backend``, ``grader`` (a client
#: never picks the forgeable in-process SWE-bench grader).
ENV_ARGS: dict[str, dict[str, Arg]] = {
    "math": {"min_steps": _int(1, 6), "max_steps": _int(1, 6)},
    "code": {
        "levels": _list_of(_int(0, 10), 16),
        "per_test_s": _float(0.1, 10.0),
        "feedback": _choice("traceback", "names"),
        "max_feedback_chars": _int(0, 20_000),
        "warm": _optional(_BOOL),
    },
    "household": {
        "split": _choice("seen", "unseen"),
        "task_types": _list_of(_NAME, 16),
        "difficulties": _list_of(_int(1, 3), 3),
        "show_admissible": _BOOL,
    },
    # restart_each_episode / share_server stay the operator's call: a client could make every episode start a
    # server, or share one with another client's sessions (each session's env has its own MCP server process)
    "mcp": {"call_timeout_s": _float(0.5, 30.0)},
    "search": {
        "kb_seed": _SEED,
        "kb_entities": _int(50, 5_000),
        "min_hops": _int(1, 4),
        "max_hops": _int(1, 4),
        "comparison_rate": _float(0.0, 1.0),
        "top_k": _int(1, 20),
        "retriever": _choice("bm25"),  # never a URL (the server would POST there) nor "dense" (loads a model)
        "qa_format": _choice("auto"),
    },
    "shop": {
        "difficulty": _choice("easy", "medium"),  # "hard" builds a 100k catalog: the operator's call
        "n_products": _optional(_int(10, 10_000)),
        "distractor_density": _optional(_float(0.0, 1.0)),
        "paraphrase": _optional(_int(0, 2)),
        "catalog_seed": _SEED,
        "page_size": _int(1, 50),
    },
    "swe": {"repos": _list_of(_NAME, 32)},
    "tools": {
        "sources": _list_of(_choice("store", "bfcl"), 2),
        "categories": _optional(_list_of(_NAME, 8)),
        "strict_types": _optional(_BOOL),
    },
}


def family_args(family: str | None) -> dict[str, Arg]:
    """The arguments a client may set on an env of ``family`` (unknown families: the base ones)."""
    return {**BASE_ARGS, **ENV_ARGS.get(family or "", {})}


def _is_wire_task(value: Any) -> bool:
    return isinstance(value, Mapping) and "__task__" in value


@dataclass(frozen=True)
class KwargPolicy:
    """The check applied to one env id's client kwargs and reset options.

    Args:
        env_id: the served id (named in errors).
        args: the declared arguments a client may set, with their ranges.
        allowed: names the operator opened with ``--allow-kwarg`` (any value); ``"*"`` opens all.
    """

    env_id: str
    args: Mapping[str, Arg]
    allowed: frozenset[str] = frozenset()

    @classmethod
    def for_env(cls, env_id: str, family: str | None, allowed: Sequence[str] = ()) -> KwargPolicy:
        return cls(env_id, family_args(family), frozenset(allowed))

    def _open(self, name: str) -> bool:
        return "*" in self.allowed or name in self.allowed

    def check_kwargs(self, kwargs: Any) -> dict[str, Any]:
        """``kwargs`` if every key is declared and in range (or opened by the operator); else ConfigError."""
        if kwargs is None:
            return {}
        if not isinstance(kwargs, Mapping):
            raise ConfigError(f"kwargs must be an object, got {type(kwargs).__name__}")
        for name, value in kwargs.items():
            if not isinstance(name, str):
                raise ConfigError(f"kwarg names must be strings, got {name!r}")
            if self._open(name):
                continue
            arg = self.args.get(name)
            if arg is None:
                raise ConfigError(
                    f"{self.env_id}: kwarg {name[:_MAX_STR]!r} may not be set by a remote client; the server "
                    f"operator can allow it with `turngym serve ... --allow-kwarg {name[:_MAX_STR]}` "
                    f"(client-settable here: {sorted(self.args)})"
                )
            arg.validate(self.env_id, name, value)
        return dict(kwargs)

    def check_options(self, options: Any) -> None:
        """Refuse Task objects sent over the wire in ``reset`` options unless ``tasks`` is open."""
        if not isinstance(options, Mapping) or "task" not in options:
            return
        task = options["task"]
        if task is None or self._open("tasks"):
            return
        if isinstance(task, str):
            if len(task) > 4096:
                raise ConfigError(f"{self.env_id}: options['task'] is a task id, at most 4096 characters")
            return
        why = "a whole Task" if _is_wire_task(task) else f"a {type(task).__name__}"
        raise ConfigError(
            f"{self.env_id}: reset options['task'] may only be a task id from a remote client, not {why}; "
            "the server operator can allow client tasks with `turngym serve ... --allow-kwarg tasks`"
        )


def check_options(policy: KwargPolicy | None, options: Any) -> None:
    """:meth:`KwargPolicy.check_options`, a no-op without a policy."""
    if policy is not None:
        policy.check_options(options)
