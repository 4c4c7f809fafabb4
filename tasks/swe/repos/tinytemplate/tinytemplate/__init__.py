"""A tiny template engine: ``{{ expr|filter }}``, ``{% if %}``, ``{% for %}``, HTML escaping.

Templates compile once into a small tree of nodes; rendering walks the tree with a context
dict. Expressions are dotted names (``user.name``, ``items.0``) — no Python is evaluated.
"""

from __future__ import annotations

import html
import re
from typing import Any

__all__ = ["Template", "TemplateError", "render", "FILTERS"]

_TOKEN = re.compile(r"({{.*?}}|{%.*?%})", re.DOTALL)


class TemplateError(Exception):
    """Malformed template or an unknown filter."""


def _title(s: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in s.split(" "))


FILTERS = {
    "upper": lambda v: str(v).upper(),
    "lower": lambda v: str(v).lower(),
    "title": lambda v: _title(str(v)),
    "strip": lambda v: str(v).strip(),
    "length": lambda v: len(v),
    "first": lambda v: v[0] if v else "",
    "last": lambda v: v[-1] if v else "",
    "join": lambda v: ", ".join(str(x) for x in v),
}


def resolve(name: str, context: dict[str, Any]) -> Any:
    """Look up a dotted name; missing parts resolve to ``""``."""
    value: Any = context
    for part in name.split("."):
        if isinstance(value, dict):
            if part not in value:
                return ""
            value = value[part]
        elif isinstance(value, (list, tuple)) and part.lstrip("-").isdigit():
            idx = int(part)
            if not -len(value) <= idx < len(value):
                return ""
            value = value[idx]
        else:
            value = getattr(value, part, "")
    return value


def _eval(expr: str, context: dict[str, Any]) -> Any:
    name, *filters = [p.strip() for p in expr.split("|")]
    if not name:
        raise TemplateError("empty expression")
    if name.startswith(("'", '"')) and name.endswith(name[0]) and len(name) >= 2:
        value: Any = name[1:-1]
    elif name.lstrip("-").isdigit():
        value = int(name)
    else:
        value = resolve(name, context)
    for f in filters:
        if f not in FILTERS:
            raise TemplateError(f"unknown filter {f!r}")
        value = FILTERS[f](value)
    return value


def _truthy(expr: str, context: dict[str, Any]) -> bool:
    expr = expr.strip()
    negate = expr.startswith("not ")
    if negate:
        expr = expr[4:]
    for op in ("==", "!="):
        if op in expr:
            left, right = (p.strip() for p in expr.split(op, 1))
            result = str(_eval(left, context)) == str(_eval(right, context))
            if op == "!=":
                result = not result
            break
    else:
        result = bool(_eval(expr, context))
    return not result if negate else result


class _Node:
    def render(self, context: dict[str, Any], out: list[str], autoescape: bool) -> None:
        raise NotImplementedError


class _Text(_Node):
    def __init__(self, text: str) -> None:
        self.text = text

    def render(self, context, out, autoescape):
        out.append(self.text)


class _Var(_Node):
    def __init__(self, expr: str) -> None:
        self.raw = expr.endswith("|safe")
        self.expr = expr[: -len("|safe")] if self.raw else expr

    def render(self, context, out, autoescape):
        value = _eval(self.expr, context)
        text = "" if value is None else str(value)
        out.append(html.escape(text) if autoescape and not self.raw else text)


class _If(_Node):
    def __init__(self, cond: str) -> None:
        self.cond = cond
        self.body: list[_Node] = []
        self.orelse: list[_Node] = []

    def render(self, context, out, autoescape):
        branch = self.body if _truthy(self.cond, context) else self.orelse
        for node in branch:
            node.render(context, out, autoescape)


class _For(_Node):
    def __init__(self, var: str, seq: str) -> None:
        self.var, self.seq = var, seq
        self.body: list[_Node] = []
        self.orelse: list[_Node] = []

    def render(self, context, out, autoescape):
        items = _eval(self.seq, context) or []
        if not items:
            for node in self.orelse:
                node.render(context, out, autoescape)
            return
        items = list(items)
        for i, item in enumerate(items):
            scope = dict(context)
            scope[self.var] = item
            scope["loop"] = {"index": i + 1, "index0": i, "first": i == 0, "last": i == len(items) - 1}
            for node in self.body:
                node.render(scope, out, autoescape)


class Template:
    """A compiled template. ``Template(src).render(**context)``."""

    def __init__(self, source: str, autoescape: bool = True) -> None:
        self.autoescape = autoescape
        self.nodes = self._compile(source)

    @staticmethod
    def _compile(source: str) -> list[_Node]:
        root: list[_Node] = []
        stack: list[tuple[_Node, list[_Node]]] = []
        current = root
        for token in _TOKEN.split(source):
            if not token:
                continue
            if token.startswith("{{"):
                current.append(_Var(token[2:-2].strip()))
            elif token.startswith("{%"):
                words = token[2:-2].split()
                if not words:
                    raise TemplateError("empty tag")
                kind = words[0]
                if kind == "if":
                    node = _If(" ".join(words[1:]))
                    current.append(node)
                    stack.append((node, current))
                    current = node.body
                elif kind == "for":
                    if len(words) != 4 or words[2] != "in":
                        raise TemplateError("for tag must be '{% for x in items %}'")
                    node = _For(words[1], words[3])
                    current.append(node)
                    stack.append((node, current))
                    current = node.body
                elif kind == "else":
                    if not stack:
                        raise TemplateError("else outside of if/for")
                    current = stack[-1][0].orelse  # type: ignore[attr-defined]
                elif kind in ("endif", "endfor"):
                    if not stack:
                        raise TemplateError(f"unexpected {kind}")
                    node, parent = stack.pop()
                    expected = "endif" if isinstance(node, _If) else "endfor"
                    if kind != expected:
                        raise TemplateError(f"expected {expected}, got {kind}")
                    current = parent
                else:
                    raise TemplateError(f"unknown tag {kind!r}")
            else:
                current.append(_Text(token))
        if stack:
            raise TemplateError("unclosed block")
        return root

    def render(self, **context: Any) -> str:
        out: list[str] = []
        for node in self.nodes:
            node.render(context, out, self.autoescape)
        return "".join(out)


def render(source: str, **context: Any) -> str:
    return Template(source).render(**context)
