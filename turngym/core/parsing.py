"""Shared action parsers: the only place turngym's action patterns live.

Three shapes cover the families: tag-delimited actions (``<answer>42</answer>``, Search-R1 and
most reasoning envs), JSON tool calls (OpenAI / Hermes style), and fenced code blocks. Each
parser returns a :class:`Parsed` — a value or a human-readable error that the env shows the
agent — and never raises on model text, because a malformed action is part of the episode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar

__all__ = [
    "Parsed",
    "TagAction",
    "ToolCall",
    "function_tool",
    "parse_tag",
    "parse_tool_calls",
    "parse_code_block",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Parsed(Generic[T]):
    """Either ``value`` (parse succeeded) or ``error`` (why it failed, addressed to the agent)."""

    value: T | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class TagAction:
    """``<tag>body</tag>``: the tag name and its stripped body."""

    tag: str
    body: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call: a name and its JSON arguments."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments)}


def function_tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A tool in the OpenAI function-calling format every chat template speaks; its parameters
    are closed (``additionalProperties: false``), so an argument the function does not take is
    an error the agent hears about, not something silently dropped."""
    params = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


@lru_cache(maxsize=64)
def _tag_pattern(tags: tuple[str, ...]) -> re.Pattern[str]:
    alts = "|".join(re.escape(t) for t in tags)
    # The first complete <tag>…</tag>; the body is non-greedy so two actions don't merge.
    return re.compile(rf"<({alts})>(.*?)</\1\s*>", re.DOTALL)


@lru_cache(maxsize=64)
def _open_pattern(tags: tuple[str, ...]) -> re.Pattern[str]:
    alts = "|".join(re.escape(t) for t in tags)
    return re.compile(rf"<({alts})>")


def parse_tag(
    text: str,
    tags: Sequence[str],
    *,
    allow_empty: bool = False,
    max_body: int = 10_000,
) -> Parsed[TagAction]:
    """Find the first complete ``<tag>…</tag>`` among ``tags``.

    Text before and after the action (reasoning, chatter) is allowed and ignored. The first
    complete action wins, as in Search-R1.

    >>> parse_tag("I'll compute. <calc>2*3</calc>", ["calc", "answer"]).value
    TagAction(tag='calc', body='2*3')
    >>> parse_tag("<answer>4", ["answer"]).error
    'unclosed <answer> tag: write <answer>...</answer>'
    >>> parse_tag("just text", ["calc", "answer"]).error
    'no action found: expected one of <calc>...</calc>, <answer>...</answer>'
    """
    if not isinstance(text, str):
        return Parsed(error=f"action must be a string, got {type(text).__name__}")
    key = tuple(tags)
    m = _tag_pattern(key).search(text)
    if m is None:
        opened = _open_pattern(key).search(text)
        if opened is not None:
            t = opened.group(1)
            return Parsed(error=f"unclosed <{t}> tag: write <{t}>...</{t}>")
        expected = ", ".join(f"<{t}>...</{t}>" for t in tags)
        return Parsed(error=f"no action found: expected one of {expected}")
    tag, body = m.group(1), m.group(2).strip()
    if not body and not allow_empty:
        return Parsed(error=f"empty <{tag}></{tag}>: put the content between the tags")
    if len(body) > max_body:
        return Parsed(error=f"<{tag}> body too long ({len(body)} > {max_body} characters)")
    return Parsed(TagAction(tag, body))


_TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)


def _call_from_obj(obj: Any) -> ToolCall | str:
    """Turn one decoded JSON object into a ToolCall, or an error string."""
    if not isinstance(obj, dict):
        return f"a tool call must be a JSON object, got {type(obj).__name__}"
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI tool_calls entry
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return 'a tool call needs a "name" string: {"name": "...", "arguments": {...}}'
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI sends arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return f'tool call "{name}": arguments are not valid JSON ({exc.msg})'
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f'tool call "{name}": "arguments" must be a JSON object, got {type(args).__name__}'
    return ToolCall(name, args)


def _decode_calls(blob: str) -> list[ToolCall] | str:
    try:
        obj = json.loads(blob)
    except json.JSONDecodeError as exc:
        return f"tool call is not valid JSON ({exc.msg} at char {exc.pos})"
    objs = obj if isinstance(obj, list) else [obj]
    if not objs:
        return "empty list of tool calls"
    calls: list[ToolCall] = []
    for o in objs:
        c = _call_from_obj(o)
        if isinstance(c, str):
            return c
        calls.append(c)
    return calls


def _first_json_value(text: str) -> str | None:
    """The first balanced top-level ``{…}`` or ``[…]`` span in ``text`` (strings respected)."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    start = min(starts)
    depth, in_str, esc = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def parse_tool_calls(text: str, *, max_calls: int = 16) -> Parsed[tuple[ToolCall, ...]]:
    """Parse one or several JSON tool calls from model text.

    Accepted, in order of precedence: Hermes/Qwen ``<tool_call>{…}</tool_call>`` blocks (one
    call each, several allowed); a fenced ```json block; otherwise the first bare JSON object
    or array in the text. A call is ``{"name": …, "arguments": {…}}``; an OpenAI
    ``{"function": {…}}`` wrapper and string-encoded arguments are accepted too.

    >>> parse_tool_calls('<tool_call>{"name": "ls", "arguments": {}}</tool_call>').value
    (ToolCall(name='ls', arguments={}),)
    >>> parse_tool_calls('[{"name": "a", "arguments": {"x": 1}}, {"name": "b"}]').value
    (ToolCall(name='a', arguments={'x': 1}), ToolCall(name='b', arguments={}))
    >>> parse_tool_calls("no json here").error
    'no tool call found: write {"name": "...", "arguments": {...}}'
    """
    if not isinstance(text, str):
        return Parsed(error=f"action must be a string, got {type(text).__name__}")
    blocks = _TOOL_CALL_TAG.findall(text)
    calls: list[ToolCall] = []
    if blocks:
        for blob in blocks:
            got = _decode_calls(blob.strip())
            if isinstance(got, str):
                return Parsed(error=got)
            calls.extend(got)
    else:
        fenced = [body for lang, body in _FENCE.findall(text) if lang.lower() in ("json", "")]
        blob = fenced[0].strip() if fenced else _first_json_value(text)
        if blob is None:
            return Parsed(error='no tool call found: write {"name": "...", "arguments": {...}}')
        got = _decode_calls(blob)
        if isinstance(got, str):
            return Parsed(error=got)
        calls = got
    if len(calls) > max_calls:
        return Parsed(error=f"too many tool calls in one turn ({len(calls)} > {max_calls})")
    return Parsed(tuple(calls))


def parse_code_block(
    text: str,
    languages: Sequence[str] = ("python", "py", "python3", ""),
    *,
    which: Literal["first", "last"] = "last",
) -> Parsed[str]:
    """Extract a fenced code block in one of ``languages`` ("" = no language tag).

    The last block wins by default: models draft, then write the final version.

    >>> parse_code_block("x\\n```python\\nprint(1)\\n```\\n").value
    'print(1)\\n'
    >>> parse_code_block("```js\\nx\\n```", ["python"]).error
    'no ```python code block found'
    """
    if not isinstance(text, str):
        return Parsed(error=f"action must be a string, got {type(text).__name__}")
    wanted = {lang.lower() for lang in languages}
    bodies = [body for lang, body in _FENCE.findall(text) if lang.lower() in wanted]
    if not bodies:
        shown = next((lang for lang in languages if lang), "")
        return Parsed(error=f"no ```{shown} code block found")
    body = bodies[-1] if which == "last" else bodies[0]
    if not body.strip():
        return Parsed(error="the code block is empty")
    return Parsed(body)
