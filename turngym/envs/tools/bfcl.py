"""BFCL v4 multi-turn: its 800 tasks and stateful backends, driven directly.

The PyPI package ``bfcl-eval`` ships the tasks (``base``, ``long_context``, ``miss_func``,
``miss_param``; 200 each), the ground-truth calls per turn, the function docs, and the backend
classes (file system, vehicle control, trading, travel, messaging, posting, tickets, math).
Its own harness executes model output with ``eval``; this module never does. Ground-truth
strings such as ``"sort('final_report.pdf')"`` are parsed with :mod:`ast` (literal arguments
only; positional ones are named through the method's signature), and every call — gold or
agent — is a plain ``getattr(instance, name)(**arguments)``.

``bfcl-eval`` is needed only here, so it is imported lazily; install it without its (very
large) dependency list::

    pip install --no-deps "bfcl-eval==2026.3.23" mpmath

(``mpmath`` is the one import the math backend needs; everything else is the standard
library.)

**Process-wide state.** BFCL's backends were written for one task per process, and some of
their effects outlive an episode: ``TwitterAPI.post_tweet(content, tags=[], mentions=[])`` keeps
its *default list* in the tweet, and ``mention`` extends it (Python evaluates a default once, so
every later tweet without mentions starts with those names); ``MathAPI`` sets ``mpmath.mp.dps``
and the thread's ``decimal`` precision; the vehicle backend writes its temperature into the
module global ``LONG_WEATHER_EXTENSION``; the travel backend's long-context credit cards *are*
the module's ``CREDIT_CARD_EXTENSION`` dicts, so a booking charged to one changes it for every
later episode. :class:`BfclBackend` isolates each call (see :meth:`BfclBackend.call`), so an
episode's outcome never depends on what earlier episodes in the process did.
"""

from __future__ import annotations

import ast
import copy
import decimal
import importlib
import inspect
import json
import pickle
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from turngym.core.errors import TaskError, TurngymError
from turngym.envs.tools.backend import UNPRINTABLE, Backend, CallResult, format_result
from turngym.envs.tools.schema import Tool, bfcl_doc_to_tool
from turngym.envs.tools.tasks import ToolsTask

__all__ = [
    "BFCL_INSTALL",
    "BFCL_CATEGORIES",
    "BfclNotInstalled",
    "BfclBackend",
    "load_bfcl_tasks",
    "bfcl_task",
    "bfcl_tools",
    "parse_call_string",
    "MISSED_FUNCTION_PROMPT",
    "restored_process_state",
]

BFCL_INSTALL = 'pip install --no-deps "bfcl-eval==2026.3.23" mpmath'
BFCL_CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
#: What BFCL's harness says at a miss_func turn that reveals held-out functions.
MISSED_FUNCTION_PROMPT = "I have updated some more functions you can choose from. What about now?"


class BfclNotInstalled(TurngymError, ImportError):
    """``bfcl-eval`` (or ``mpmath``) is not installed; the message has the install command."""


@lru_cache(maxsize=1)
def _package() -> tuple[Path, dict[str, str], dict[str, str]]:
    """(data dir, class → module, class → func-doc file), importing bfcl-eval on first use."""
    try:
        import bfcl_eval
        from bfcl_eval.constants.executable_backend_config import (
            CLASS_FILE_PATH_MAPPING,
            MULTI_TURN_FUNC_DOC_FILE_MAPPING,
        )
    except ImportError as exc:
        raise BfclNotInstalled(
            f"the BFCL tool envs need the bfcl-eval package ({exc}); install it with: {BFCL_INSTALL}"
        ) from None
    return (
        Path(bfcl_eval.__file__).parent / "data",
        dict(CLASS_FILE_PATH_MAPPING),
        dict(MULTI_TURN_FUNC_DOC_FILE_MAPPING),
    )


@cache
def _backend_class(class_name: str) -> type:
    _, modules, _ = _package()
    if class_name not in modules:
        raise TaskError(f"unknown BFCL backend class {class_name!r}; known: {sorted(modules)}")
    try:
        module = importlib.import_module(modules[class_name])
    except ImportError as exc:  # mpmath for MathAPI
        raise BfclNotInstalled(
            f"BFCL backend {class_name} cannot be imported ({exc}); install: {BFCL_INSTALL}"
        ) from None
    return getattr(module, class_name)


@cache
def _public_methods(class_name: str) -> tuple[str, ...]:
    cls = _backend_class(class_name)
    return tuple(n for n, m in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_"))


@cache
def _signature_params(class_name: str, method: str) -> tuple[str, ...]:
    fn = getattr(_backend_class(class_name), method)
    return tuple(p for p in inspect.signature(fn).parameters if p != "self")


@cache
def _class_tools(class_name: str) -> tuple[Tool, ...]:
    data, _, docs = _package()
    path = data / "multi_turn_func_doc" / docs[class_name]
    with open(path, encoding="utf-8") as fh:
        return tuple(bfcl_doc_to_tool(json.loads(line)) for line in fh if line.strip())


def _owners(classes: Sequence[str]) -> dict[str, str]:
    """Function name → owning class, later classes winning a clash (as in BFCL's executor)."""
    owner: dict[str, str] = {}
    for c in classes:
        for name in _public_methods(c):
            owner[name] = c
    return owner


def bfcl_tools(task: ToolsTask, *, include_excluded: bool = False) -> dict[str, Tool]:
    """Every tool of the task's classes except (by default) the excluded ones, by name (doc order)."""
    excluded = set() if include_excluded else set(task.excluded)
    tools: dict[str, Tool] = {}
    for c in task.classes:
        for tool in _class_tools(c):
            name = tool["function"]["name"]
            if name not in excluded:
                tools[name] = tool
    return tools


def parse_call_string(text: str, classes: Sequence[str], owners: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Parse a BFCL ground-truth call string into ``{"name", "arguments"}`` without eval.

    Arguments must be Python literals; positional ones are named from the method signature,
    and tuples become lists (what a JSON tool call would carry).

    >>> parse_call_string("sort('final_report.pdf')", ["GorillaFileSystem"])
    {'name': 'sort', 'arguments': {'file_name': 'final_report.pdf'}}
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise TaskError(f"BFCL call {text!r} is not valid Python: {exc.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise TaskError(f"BFCL call {text!r} is not a plain function call")
    name = node.func.id
    owner = (owners or _owners(classes)).get(name)
    if owner is None:
        raise TaskError(f"BFCL call {text!r}: no function {name!r} in {list(classes)}")
    try:
        positional = [_jsonable(ast.literal_eval(a)) for a in node.args]
        keywords = {k.arg: _jsonable(ast.literal_eval(k.value)) for k in node.keywords if k.arg}
    except ValueError:
        raise TaskError(f"BFCL call {text!r} has non-literal arguments") from None
    params = _signature_params(owner, name)
    if len(positional) > len(params):
        raise TaskError(f"BFCL call {text!r}: too many positional arguments for {name}{params}")
    arguments = dict(zip(params, positional))
    arguments.update(keywords)
    return {"name": name, "arguments": arguments}


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@cache
def _load_category(category: str) -> tuple[ToolsTask, ...]:
    if category not in BFCL_CATEGORIES:
        raise TaskError(f"unknown BFCL category {category!r}; expected one of {BFCL_CATEGORIES}")
    data, _, _ = _package()
    questions = _read_jsonl(data / f"BFCL_v4_multi_turn_{category}.json")
    answers = {
        row["id"]: row["ground_truth"]
        for row in _read_jsonl(data / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json")
    }
    tasks = []
    for entry in questions:
        classes = tuple(entry["involved_classes"])
        owners = _owners(classes)
        truth = answers[entry["id"]]
        gold = tuple(tuple(parse_call_string(s, classes, owners) for s in turn) for turn in truth)
        turns = tuple(
            "\n".join(m["content"] for m in msgs if m.get("role") == "user") if msgs else MISSED_FUNCTION_PROMPT
            for msgs in entry["question"]
        )
        if len(turns) != len(gold):
            raise TaskError(f"BFCL {entry['id']}: {len(turns)} turns but {len(gold)} ground-truth turns")
        tasks.append(
            ToolsTask(
                id=f"bfcl/{entry['id']}",
                prompt=turns[0],
                gold=gold,
                meta={"source": "bfcl", "bfcl_id": entry["id"], "path": list(entry.get("path", ()))},
                source="bfcl",
                category=category,
                turns=turns,
                answers=tuple(() for _ in turns),
                initial=entry["initial_config"],
                classes=classes,
                missed={k: tuple(v) for k, v in entry.get("missed_function", {}).items()},
                excluded=tuple(entry.get("excluded_function", ())),
                check_results=True,
            )
        )
    return tuple(tasks)


def load_bfcl_tasks(categories: Sequence[str] = BFCL_CATEGORIES) -> tuple[ToolsTask, ...]:
    """The BFCL v4 multi-turn tasks of ``categories`` (200 each), in file order."""
    out: list[ToolsTask] = []
    for c in categories:
        out.extend(_load_category(c))
    return tuple(out)


@cache
def _by_id() -> dict[str, ToolsTask]:
    return {t.id: t for t in load_bfcl_tasks()}


def bfcl_task(task_id: str) -> ToolsTask:
    """Look up ``bfcl/multi_turn_base_0`` (the ``bfcl/`` prefix is optional)."""
    key = task_id if task_id.startswith("bfcl/") else f"bfcl/{task_id}"
    try:
        return _by_id()[key]
    except KeyError:
        raise TaskError(f"unknown BFCL task {task_id!r}; ids look like 'bfcl/multi_turn_base_0'") from None


#: Arguments that make a BFCL backend compute for minutes (``power(9, 10**9)`` builds a
#: billion-digit integer; mpmath at ``precision=10**8`` digits): refused above these bounds so
#: one call cannot hang a rollout worker. Every ground-truth value is far below them.
_ARGUMENT_BOUNDS = {
    ("power", "exponent"): 10_000,
    ("logarithm", "precision"): 10_000,
    ("square_root", "precision"): 10_000,
}


#: Module globals that a BFCL method writes in place, by (class, method): each call of that
#: method writes into a fresh copy of the first-seen value, dropped after the call, so no call
#: sees another's write (read from bfcl-eval 2026.3.23's source;
#: ``test_bfcl_calls_leave_no_process_state`` fuzzes every backend and fails on any write not
#: listed here).
_WRITTEN_GLOBALS: dict[tuple[str, str], tuple[str, ...]] = {
    ("VehicleControlAPI", "get_outside_temperature_from_google"): ("LONG_WEATHER_EXTENSION",),
}
#: Serializes BFCL calls: ``mpmath.mp`` and the globals above are shared by every thread, and a
#: server runs sessions in a thread pool. A call takes microseconds (arguments are bounded).
_CALL_LOCK = threading.RLock()
_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, range)


def _immutable(value: Any) -> bool:
    if isinstance(value, (tuple, frozenset)):
        return all(_immutable(v) for v in value)
    return isinstance(value, _IMMUTABLE)


@dataclass(frozen=True)
class _ClassGuard:
    """What one backend class needs to run a call without touching process-wide state.

    Attributes:
        defaults: method → {parameter: pristine copy of its default}, for every parameter whose
            default is a mutable object (``post_tweet``'s ``tags=[]``, ``mentions=[]``).
        module: the class's module (whose namespace the methods read their globals from).
        written: (method → {global name: pristine copy}) for :data:`_WRITTEN_GLOBALS`.
    """

    defaults: Mapping[str, Mapping[str, Any]]
    module: ModuleType
    written: Mapping[str, Mapping[str, Any]]


@cache
def _class_guard(class_name: str) -> _ClassGuard:
    """Snapshot the class's mutable defaults and written globals (before its first call)."""
    cls = _backend_class(class_name)
    defaults: dict[str, dict[str, Any]] = {}
    for method in _public_methods(class_name):
        params = inspect.signature(getattr(cls, method)).parameters.values()
        mutable = {p.name: copy.deepcopy(p.default) for p in params if p.default is not p.empty and not _immutable(p.default)}
        if mutable:
            defaults[method] = mutable
    module = sys.modules[cls.__module__]
    written = {
        method: {name: copy.deepcopy(vars(module)[name]) for name in names}
        for (owner, method), names in _WRITTEN_GLOBALS.items()
        if owner == class_name
    }
    return _ClassGuard(defaults, module, written)


#: Where bfcl-eval's backend modules live (their globals are what a backend can leak into).
_BACKEND_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"


@contextmanager
def restored_process_state(classes: Sequence[str] = ()) -> Iterator[None]:
    """Undo, on exit, every process-wide change BFCL's code can make inside the block.

    For code that runs BFCL's backends *not* through :class:`BfclBackend` — BFCL's own
    checker, which :mod:`.agreement` runs in-process and which calls them through ``eval``:
    the data globals of every backend module are put back in place (same objects, the old
    contents), every backend method's defaults too, and mpmath's and decimal's precision.
    Costs two pickles of those globals (about 2 ms each), so :meth:`BfclBackend.call`
    uses its cheaper per-call guard instead. ``classes`` are imported first, so that a module
    the block would import is restored too.
    """
    for name in classes:
        _backend_class(name)
    modules = [m for name, m in sorted(sys.modules.items()) if name.startswith(_BACKEND_PACKAGE) and m is not None]
    shared = {  # by identity: a module imports the long-context lists of another
        id(value): value
        for module in modules
        for key, value in vars(module).items()
        if not key.startswith("__") and isinstance(value, (dict, list, set))
    }
    data = [(value, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)) for value in shared.values()]
    functions = [
        (fn, copy.deepcopy(fn.__defaults__), copy.deepcopy(fn.__kwdefaults__))
        for module in modules
        for cls in vars(module).values()
        if isinstance(cls, type) and cls.__module__ == module.__name__
        for fn in vars(cls).values()
        if inspect.isfunction(fn)
    ]
    mpmath = sys.modules.get("mpmath")
    prec = mpmath.mp.prec if mpmath is not None else None
    try:
        with _CALL_LOCK, decimal.localcontext():
            yield
    finally:
        for value, saved in data:
            if pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL) == saved:
                continue
            value.clear()
            if isinstance(value, list):
                value.extend(pickle.loads(saved))
            else:
                value.update(pickle.loads(saved))
        for fn, defaults, kwdefaults in functions:
            fn.__defaults__, fn.__kwdefaults__ = defaults, kwdefaults
        if prec is not None:
            mpmath.mp.prec = prec


def _pickle_copy(instances: dict[str, Any]) -> dict[str, Any]:
    # A pickle round trip copies these object graphs (directory trees with parent links,
    # RNG states) about twice as fast as copy.deepcopy, and just as exactly.
    return pickle.loads(pickle.dumps(instances, protocol=pickle.HIGHEST_PROTOCOL))


class BfclBackend(Backend):
    """BFCL's backend instances for one task, called by method, compared by BFCL's rule."""

    def __init__(self, instances: dict[str, Any], owners: Mapping[str, str]) -> None:
        self.instances = instances
        self._owners = owners  # shared between copies; never mutated

    @classmethod
    def create(cls, task: ToolsTask) -> BfclBackend:
        """Instantiate and load the task's classes exactly as BFCL's executor does."""
        long_context = "long_context" in task.category
        instances: dict[str, Any] = {}
        for name in task.classes:
            _class_guard(name)  # snapshot its defaults before any instance can call
            inst = _backend_class(name)()
            if hasattr(inst, "_load_scenario") and name != "MathAPI":
                inst._load_scenario(copy.deepcopy(task.initial.get(name, {})), long_context=long_context)
            instances[name] = inst
        # Loading a long-context scenario puts module globals into the state (the travel
        # backend's extension cards are CREDIT_CARD_EXTENSION's own dicts): a copy detaches them.
        return cls(_pickle_copy(instances), _owners(task.classes))

    def __deepcopy__(self, memo: dict[int, Any]) -> BfclBackend:
        return BfclBackend(_pickle_copy(self.instances), self._owners)

    def knows(self, name: str) -> bool:
        """True if some involved class has a public method ``name``."""
        return name in self._owners

    def call(self, name: str, arguments: Mapping[str, Any]) -> CallResult:
        """Run one call with no effect outside this backend's instances.

        The arguments are fresh copies, and so is the default of every omitted argument whose
        default is mutable; the call holds :data:`_CALL_LOCK`, runs in a local ``decimal``
        context, gets mpmath's precision back afterwards, and writes its
        :data:`_WRITTEN_GLOBALS` into a copy that is dropped after it. Costs a few
        microseconds a call (``benchmarks/bench_tools.py --isolation``).
        """
        for arg, value in arguments.items():
            bound = _ARGUMENT_BOUNDS.get((name, arg))
            if bound is not None and isinstance(value, (int, float)) and abs(value) > bound:
                return CallResult(f"Error during execution: {arg}={value!r} is too large (at most {bound})", error=True)
        owner = self._owners[name]
        method = getattr(self.instances[owner], name)
        guard = _class_guard(owner)
        # A fresh copy: backends keep references to argument lists (a tweet's mentions),
        # which must not alias the caller's (or the task's gold) objects. An omitted argument
        # whose default is mutable gets a fresh copy of it too, never the function's own.
        kwargs = copy.deepcopy(dict(arguments))
        for param, default in guard.defaults.get(name, {}).items():
            if param not in kwargs:
                kwargs[param] = copy.deepcopy(default)
        with _CALL_LOCK, decimal.localcontext():  # square_root sets the thread's decimal precision
            namespace = vars(guard.module)
            written = guard.written.get(name, {})
            saved = {g: namespace[g] for g in written}
            for global_name, pristine in written.items():  # the method writes into a copy
                namespace[global_name] = copy.deepcopy(pristine)
            mpmath = sys.modules.get("mpmath")
            prec = mpmath.mp.prec if mpmath is not None else None  # logarithm sets mpmath.mp.dps
            try:
                result = method(**kwargs)
            except Exception as exc:  # the backend's own failure on the agent's call: part of the episode
                return CallResult(f"Error during execution: {exc}", error=True)
            finally:
                namespace.update(saved)
                if prec is not None:
                    mpmath.mp.prec = prec
        content = format_result(result)
        return CallResult(content, error=(isinstance(result, dict) and "error" in result) or content.startswith(UNPRINTABLE))

    def state_roots(self) -> Mapping[str, Any]:
        return self.instances

    def same_state(self, other: Backend) -> bool:
        """BFCL's ``state_checker``: every public attribute of every instance is equal."""
        if not isinstance(other, BfclBackend) or self.instances.keys() != other.instances.keys():
            return False
        for name, gold in other.instances.items():
            mine = self.instances[name]
            for attr, value in vars(gold).items():
                if not attr.startswith("_") and getattr(mine, attr) != value:
                    return False
        return True
