"""Hostile actions: what an adversarial agent sends to break an env's ``step``, by kind.

Every env must answer each of these with a transition (``action_valid=False`` with a reason, or
a failed verdict) in bounded time, never an exception and never an ``infra_error``: the agent is
an adversary, and one action must not take a rollout down. The attacks target what env code does
with agent text — ``compile()``/``ast.parse`` (a 40 KB ``1+1+…+1`` is a ``RecursionError`` inside
the compiler, a long unary chain a ``MemoryError``), ``json.loads`` (deep nesting, a 5,000-digit
integer is a ``ValueError`` past Python's digit limit), regexes (quadratic rescans), ``int()`` /
``float()`` / sympy on giant literals, and text that is not valid UTF-8 (lone surrogates, NULs).

:data:`ATTACKS` builds a payload of a given size per kind; :func:`deliveries` wraps a payload in
the env's own grammar (its tags, tool names, commands, the oracle's action with the payload in
place of each JSON string), so the payload reaches the parser and verifier behind the grammar
instead of stopping at "no action found". ``tests/core/test_hostile_actions.py`` drives every
registered env with them under hypothesis; ``benchmarks/bench_fuzz.py`` counts escapes per env.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["ATTACKS", "MEGABYTE", "Delivery", "deliveries", "payload"]

MEGABYTE = 1_000_000

_BRACKETS = {"()": ("(", ")"), "[]": ("[", "]"), "{}": ("{", "}"), "<>": ("<", ">"), '""': ('"', '"'), "''": ("'", "'")}
_BINARY = ("+", "*", "**", "^", "/", "-", "<", "==", " and ", ",", ".", "|", "@")
_UNARY = ("-", "~", "not ", "!", "+")


def _nest(open_: str, close: str) -> Callable[[int], str]:
    return lambda n: open_ * n + "1" + close * n


def _binary(op: str) -> Callable[[int], str]:
    return lambda n: ("x" if op == "." else "1") + (op + ("x" if op == "." else "1")) * n


def _unary(op: str) -> Callable[[int], str]:
    return lambda n: op * n + "1"


#: Payload builders by attack name: ``ATTACKS[name](n)`` is about ``n`` units big (depth, chain
#: length, digits), so a generator can grow an attack from small to 10⁵ and past.
ATTACKS: dict[str, Callable[[int], str]] = {
    **{f"nest {k}": _nest(o, c) for k, (o, c) in _BRACKETS.items()},
    "nest json objects": lambda n: '{"a":' * n + "1" + "}" * n,
    "nest latex": lambda n: "\\frac{" * n + "1" + "}{2}" * n,
    **{f"chain {op.strip() or 'space'}": _binary(op) for op in _BINARY},
    **{f"unary {op.strip()}": _unary(op) for op in _UNARY},
    "huge int": lambda n: "9" * n,
    "huge negative int": lambda n: "-" + "9" * n,
    "huge float": lambda n: "1." + "9" * n + "e" + "9" * min(n, 40),
    "huge exponent": lambda n: "1e" + "9" * min(n, 400),
    "huge hex": lambda n: "0x" + "f" * n,
    "power tower": lambda n: "**".join(["9"] * min(n, 60)),
    "latex power tower": lambda n: "^{".join(["9"] * min(n, 60)) + "}" * (min(n, 60) - 1),
    "factorial": lambda n: "9" * min(n, 12) + "!" * min(n, 8),
    "NULs": lambda n: "a\x00" * n,
    "lone surrogates": lambda n: "\ud800x\udfff" * n,
    "controls and bidi": lambda n: "\x1b[2J\u202e\u2028\ufeff\x7f" * n,
    "1 MB": lambda n: "A" * MEGABYTE,
    "1 MB of open tags": lambda n: "<run><calc><tool_call>" * (MEGABYTE // 22),
    "json unterminated string": lambda n: '{"name": "' + "\\" * n,
    "json deep arguments": lambda n: '{"name": "x", "arguments": ' + "[" * n,
    "json huge int argument": lambda n: '{"name": "x", "arguments": {"a": ' + "9" * max(n, 5000) + "}}",
    "json non-finite": lambda n: '{"name": "x", "arguments": {"a": NaN, "b": -Infinity, "c": 1e999}}',
    "json many calls": lambda n: "[" + ",".join(['{"name": "x", "arguments": {}}'] * min(n, 20_000)) + "]",
    "json string-encoded deep": lambda n: json.dumps({"name": "x", "arguments": '{"a":' * n}),
    "json wrong types": lambda n: '{"name": ' + "9" * min(n, 5000) + ', "arguments": [' + "null," * min(n, 1000) + "null]}",
}

#: A wrapped payload: the actions to send, in order (most deliveries are one action).
Delivery = Callable[[str], list[str]]

_FAMILY: dict[str, tuple[Callable[[str], str], ...]] = {
    "math": (lambda p: f"<calc>{p}</calc>", lambda p: f"<answer>{p}</answer>", lambda p: f"<answer>\\boxed{{{p}}}</answer>"),
    "search": (lambda p: f"<search>{p}</search>", lambda p: f"<answer>{p}</answer>"),
    "code": (
        lambda p: f"<run>\nx = {p}\n</run>",
        lambda p: f"```python\nx = {p}\n```",
        lambda p: f"```python\ndef f():\n    return {p}\n```\n<submit/>",
        lambda p: f"<run>{p}</run>",
    ),
    "shop": (lambda p: f"search[{p}]", lambda p: f"click[{p}]"),
    "household": (lambda p: f"go to {p}", lambda p: f"take {p} from {p}", lambda p: f"put {p} in/on {p}", lambda p: f"open {p}"),
    "swe": (),
    "tools": (),
}
_ANY = (lambda p: p, lambda p: f"<tool_call>{p}</tool_call>", lambda p: f"```json\n{p}\n```")


def _raw(env: Any) -> Any:
    return getattr(env, "unwrapped", env)


def _tool_deliveries(env: Any) -> list[Delivery]:
    """One tool call per tool of the env, every argument set to the payload (as JSON text)."""
    out: list[Delivery] = []
    for tool in list(getattr(_raw(env), "tools", None) or [])[:12]:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        name = fn.get("name")
        props = list((fn.get("parameters") or {}).get("properties") or {}) or ["x"]
        if isinstance(name, str):
            out.append(lambda p, name=name, props=props: [json.dumps({"name": name, "arguments": dict.fromkeys(props, p)})])
            out.append(lambda p, name=name, props=props: [f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {{{json.dumps(props[0])}: {p}}}}}</tool_call>'])
    return out


def _swe_deliveries(env: Any) -> list[Delivery]:
    """The task's own file rewritten with the payload, then edited again (what parses the file)."""
    path = getattr(getattr(_raw(env), "task", None), "path", None)
    if not isinstance(path, str):
        return []

    def create(content: str) -> str:
        return json.dumps({"name": "create_file", "arguments": {"path": path, "content": content, "overwrite": True}})

    return [
        lambda p: [create(f"x = {p}\n"), create("x = 1\n")],
        lambda p: [create(p), create("x = 1\n")],
    ]


def _oracle_deliveries(env: Any) -> list[Delivery]:
    """The oracle's next action with the payload spliced into its middle, and (for JSON actions)
    with the payload as every string value: the env's exact grammar around hostile content."""
    base = _raw(env).oracle_action()
    if not isinstance(base, str) or not base:
        return []
    out: list[Delivery] = [lambda p: [base[: len(base) // 2] + p + base[len(base) // 2 :]]]
    try:
        decoded = json.loads(base)
    except ValueError:
        return out

    def leaves(obj: Any, p: str) -> Any:
        if isinstance(obj, dict):
            return {k: leaves(v, p) for k, v in obj.items()}
        if isinstance(obj, list):
            return [leaves(v, p) for v in obj]
        return p if isinstance(obj, str) and obj not in _tool_names(env) else obj

    out.append(lambda p: [json.dumps(leaves(decoded, p))])
    return out


def _tool_names(env: Any) -> set[str]:
    names = set()
    for tool in list(getattr(_raw(env), "tools", None) or []):
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


def deliveries(env: Any, family: str) -> list[Delivery]:
    """Ways to wrap a payload in ``env``'s grammar (env just reset): its family's tags and
    commands first (index 0 is the family's main action), then its tools, the oracle's action,
    and grammar-free forms (the payload bare, in a ``<tool_call>``, in a JSON fence)."""
    own: list[Delivery] = [lambda p, w=w: [w(p)] for w in _FAMILY.get(family, ())]
    if family == "swe":
        own = _swe_deliveries(env) + own
    return own + _tool_deliveries(env) + _oracle_deliveries(env) + [lambda p, w=w: [w(p)] for w in _ANY]


def payload(attack: str, n: int) -> str:
    """``ATTACKS[attack](n)``, cut to a megabyte (the largest action the attacks send)."""
    return ATTACKS[attack](n)[:MEGABYTE]
