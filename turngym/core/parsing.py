"""Shared action parsers: the only place turngym's action patterns live.

Three shapes cover the families: tag-delimited actions (``<answer>42</answer>``, Search-R1 and
most reasoning envs), JSON tool calls (OpenAI / Hermes style), and fenced code blocks. Each
parser returns a :class:`Parsed` — a value or a human-readable error that the env shows the
agent — and never raises on model text, because a malformed action is part of the episode.

Every parser here runs in time linear in the length of the text, whatever the text. The agent
is an adversary and an env steps inside a server that holds the GIL while it parses: a
backtracking regex such as ``<tag>(.*?)</tag>`` rescans the rest of the text from every
unclosed opening tag, so a message of repeated opening tags costs quadratic time and freezes
every session. The scans below use :meth:`str.find` and move forward only. Decoded JSON is
bounded in nesting depth before it is decoded, so a deeply nested action is an invalid action
with a reason, never a ``RecursionError`` in the decoder or in the code that walks the result.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate
from typing import Any, Generic, Literal, TypeVar

__all__ = [
    "Parsed",
    "TagAction",
    "ToolCall",
    "function_tool",
    "parse_tag",
    "parse_tool_calls",
    "parse_code_block",
    "MAX_JSON_DEPTH",
    "PYTHON_PARSE_ERRORS",
    "parse_python",
    "python_syntax_error",
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


@lru_cache(maxsize=256)
def _close_pattern(tag: str) -> re.Pattern[str]:
    # Possessive whitespace: a ``</tag`` not followed by ``>`` fails after one look at its run.
    return re.compile(re.escape(f"</{tag}") + r"\s*+>")


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
    # The leftmost complete action: for each tag, its first opening tag is the only one that
    # can start the leftmost complete pair (a closing tag after a later opening is also after
    # the first), and its body runs to the first closing tag after it.
    best: tuple[int, str, int, int] | None = None  # (open position, tag, body start, body end)
    first_open: tuple[int, str] | None = None
    for t in dict.fromkeys(tags):
        opener = f"<{t}>"
        o = text.find(opener)
        if o < 0:
            continue
        if first_open is None or o < first_open[0]:
            first_open = (o, t)
        if best is not None and o > best[0]:
            continue
        close = _close_pattern(t).search(text, o + len(opener))
        if close is not None and (best is None or o < best[0]):
            best = (o, t, o + len(opener), close.start())
    if best is None:
        if first_open is not None:
            t = first_open[1]
            return Parsed(error=f"unclosed <{t}> tag: write <{t}>...</{t}>")
        expected = ", ".join(f"<{t}>...</{t}>" for t in tags)
        return Parsed(error=f"no action found: expected one of {expected}")
    _, tag, b0, b1 = best
    body = text[b0:b1].strip()
    if not body and not allow_empty:
        return Parsed(error=f"empty <{tag}></{tag}>: put the content between the tags")
    if len(body) > max_body:
        return Parsed(error=f"<{tag}> body too long ({len(body)} > {max_body} characters)")
    return Parsed(TagAction(tag, body))


#: Deepest JSON nesting a tool call may have. Real tool arguments nest a few levels; the bound
#: keeps the decoder and every function that walks the arguments far from the recursion limit.
MAX_JSON_DEPTH = 64

_TOOL_OPEN, _TOOL_CLOSE = "<tool_call>", "</tool_call>"
_FENCE_MARK = "```"
#: The characters that matter to JSON nesting: brackets, and the quotes that hide them.
_BRACKET_OR_QUOTE = re.compile(r'[\[\]{}"]')
#: The rest of a JSON string after its opening quote: plain runs and backslash escapes, then ".
_STRING_REST = re.compile(r'[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = str.maketrans({"[": "\x02", "{": "\x02", "]": "\x00", "}": "\x00"})


def _tool_call_blocks(text: str) -> list[str]:
    """The bodies of every ``<tool_call>…</tool_call>`` in order (non-overlapping)."""
    blocks: list[str] = []
    i = 0
    while (s := text.find(_TOOL_OPEN, i)) >= 0:
        e = text.find(_TOOL_CLOSE, s + len(_TOOL_OPEN))
        if e < 0:  # no closing tag after this opening, so none after a later one either
            break
        blocks.append(text[s + len(_TOOL_OPEN) : e])
        i = e + len(_TOOL_CLOSE)
    return blocks


def _is_lang_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_+#.-"


def _fences(text: str) -> list[tuple[str, str]]:
    """Every fenced block as ``(language, body)`` in order (non-overlapping).

    A block is ```` ``` ````, optional spaces, a language word, the rest of that line, then a
    body up to the next ```` ``` ````. A fence with no newline after it, or no closing fence
    after that newline, ends the scan: no later fence can be complete either.
    """
    out: list[tuple[str, str]] = []
    n, i = len(text), 0
    while (s := text.find(_FENCE_MARK, i)) >= 0:
        j = s + len(_FENCE_MARK)
        while j < n and text[j] in " \t":
            j += 1
        k = j
        while k < n and _is_lang_char(text[k]):
            k += 1
        nl = text.find("\n", k)
        if nl < 0:
            break
        e = text.find(_FENCE_MARK, nl + 1)
        if e < 0:
            break
        out.append((text[j:k], text[nl + 1 : e]))
        i = e + len(_FENCE_MARK)
    return out


def _string_end(text: str, quote: int) -> int:
    """Index of the quote closing the JSON string opened at ``quote``, or -1.

    The pattern's quantifiers are possessive, so a string with no closing quote fails after one
    pass instead of backtracking through every split of its escapes.
    """
    m = _STRING_REST.match(text, quote + 1)
    return m.end() - 1 if m is not None else -1


def _scan_json(text: str, start: int, *, stop_at_close: bool) -> tuple[int, bool]:
    """Walk the brackets of ``text`` from ``start``, outside JSON strings, in one forward pass.

    Returns ``(close, too_deep)``: ``close`` is the index of the bracket that brings the depth
    back to zero (only looked for with ``stop_at_close``), else -1; ``too_deep`` is True as soon
    as the nesting passes :data:`MAX_JSON_DEPTH`, which ends the walk early.
    """
    depth, pos = 0, start
    search = _BRACKET_OR_QUOTE.search
    while (m := search(text, pos)) is not None:
        p = m.start()
        ch = text[p]
        if ch == '"':
            end = _string_end(text, p)
            if end < 0:
                return -1, False
            pos = end + 1
            continue
        if ch in "{[":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return -1, True
        else:
            depth -= 1
            if depth == 0 and stop_at_close:
                return p, False
        pos = p + 1
    return -1, False


def _too_deep(blob: str) -> bool:
    """True if ``blob`` nests brackets deeper than :data:`MAX_JSON_DEPTH` (strings respected).

    Every step runs in C: complete strings are cut out, the text is cut at an unclosed one
    (the decoder stops there too), and the deepest prefix of the brackets left is a running sum.
    """
    if blob.count("[") + blob.count("{") <= MAX_JSON_DEPTH:
        return False
    text = _JSON_STRING.sub("", blob)
    quote = text.find('"')
    if quote >= 0:
        text = text[:quote]
    brackets = _NOT_BRACKET.sub("", text).translate(_BRACKET_STEP).encode("latin-1")
    # an opening bracket counts 2, a closing one 0: depth after k brackets is (running sum - k)
    return max(map(operator.sub, accumulate(brackets), range(1, len(brackets) + 1)), default=0) > MAX_JSON_DEPTH


def _loads(blob: str, *, depth_checked: bool = False) -> tuple[Any, str | None]:
    """``json.loads`` bounded in depth, with every failure as a message instead of an exception."""
    if not depth_checked and _too_deep(blob):
        return None, f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)"
    try:
        return json.loads(blob), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at char {exc.pos})"
    except (ValueError, RecursionError) as exc:  # e.g. an integer literal past Python's digit limit
        return None, f"not valid JSON ({str(exc).split(';')[0][:120]})"


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
        if args.strip():
            args, error = _loads(args)
            if error is not None:
                return f'tool call "{name}": arguments are {error}'
        else:
            args = {}
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f'tool call "{name}": "arguments" must be a JSON object, got {type(args).__name__}'
    return ToolCall(name, args)


def _decode_calls(blob: str, max_calls: int, *, depth_checked: bool = False) -> list[ToolCall] | str:
    obj, error = _loads(blob, depth_checked=depth_checked)
    if error is not None:
        return f"tool call is {error}"
    objs = obj if isinstance(obj, list) else [obj]
    if not objs:
        return "empty list of tool calls"
    if len(objs) > max_calls:
        return f"too many tool calls in one turn ({len(objs)} > {max_calls})"
    calls: list[ToolCall] = []
    for o in objs:
        c = _call_from_obj(o)
        if isinstance(c, str):
            return c
        calls.append(c)
    return calls


def _first_json_value(text: str) -> tuple[str | None, bool]:
    """The first balanced top-level ``{…}`` or ``[…]`` span in ``text`` (strings respected), or
    None; and whether that value nests deeper than :data:`MAX_JSON_DEPTH` (then no span)."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None, False
    start = min(starts)
    close, too_deep = _scan_json(text, start, stop_at_close=True)
    return (text[start : close + 1] if close >= 0 else None), too_deep


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
    blocks = _tool_call_blocks(text)
    calls: list[ToolCall] = []
    if blocks:
        if len(blocks) > max_calls:
            return Parsed(error=f"too many tool calls in one turn ({len(blocks)} > {max_calls})")
        for blob in blocks:
            got = _decode_calls(blob.strip(), max_calls)
            if isinstance(got, str):
                return Parsed(error=got)
            calls.extend(got)
    else:
        fenced = [body for lang, body in _fences(text) if lang.lower() in ("json", "")]
        blob, too_deep = (fenced[0].strip(), False) if fenced else _first_json_value(text)
        if too_deep:
            return Parsed(error=f"tool call is JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)")
        if blob is None:
            return Parsed(error='no tool call found: write {"name": "...", "arguments": {...}}')
        # a span from _first_json_value was walked bracket by bracket already
        got = _decode_calls(blob, max_calls, depth_checked=not fenced)
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
    bodies = [body for lang, body in _fences(text) if lang.lower() in wanted]
    if not bodies:
        shown = next((lang for lang in languages if lang), "")
        return Parsed(error=f"no ```{shown} code block found")
    body = bodies[-1] if which == "last" else bodies[0]
    if not body.strip():
        return Parsed(error="the code block is empty")
    return Parsed(body)


#: What ``compile()`` / ``ast.parse`` raise on hostile source, besides a plain ``SyntaxError``:
#: ``ValueError`` (NUL bytes; ``UnicodeEncodeError`` for a lone surrogate such as ``"\ud800"``),
#: ``RecursionError`` (a 40 KB chain ``1+1+…+1``: the compiler recurses once per operator),
#: ``MemoryError`` (a long unary chain ``------…1``: CPython's parser reports its stack
#: overflow so) and ``OverflowError``. Every one is the agent's doing: catch all of them.
PYTHON_PARSE_ERRORS: tuple[type[BaseException], ...] = (
    SyntaxError, ValueError, RecursionError, MemoryError, OverflowError,
)


def _python_error(exc: BaseException) -> str:
    if isinstance(exc, RecursionError | MemoryError):
        return f"SyntaxError: the code is nested or chained too deeply to compile ({type(exc).__name__})"
    if isinstance(exc, UnicodeError):
        return "SyntaxError: the code is not valid Unicode text (a lone surrogate?)"
    return f"{type(exc).__name__}: {exc}"


def parse_python(source: str, *, filename: str = "<unknown>", mode: Literal["exec", "eval"] = "exec") -> Parsed[ast.AST]:
    """``ast.parse(source)`` for text an agent wrote: a tree, or why it does not parse. Never raises.

    >>> parse_python("x = 1").ok
    True
    >>> parse_python("x = " + "-" * 100_000 + "1").error
    'SyntaxError: the code is nested or chained too deeply to compile (MemoryError)'
    """
    if not isinstance(source, str):
        return Parsed(error=f"source must be a string, got {type(source).__name__}")
    try:
        return Parsed(ast.parse(source, filename, mode))
    except PYTHON_PARSE_ERRORS as exc:
        return Parsed(error=_python_error(exc))


def python_syntax_error(source: str, *, filename: str = "<unknown>", mode: Literal["exec", "eval"] = "exec") -> str | None:
    """The compiler's complaint about ``source`` (as ``"SyntaxError: ..."``), or None if it compiles.

    ``compile()``, not just ``ast.parse``: some errors (``return`` outside a function, a
    constant too large for the compiler's folding) are only found while compiling.

    >>> python_syntax_error("def f(:\\n    pass", filename="solution.py")
    'SyntaxError: invalid syntax (solution.py, line 1)'
    >>> python_syntax_error("x = " + "1+" * 20_000 + "1")
    'SyntaxError: the code is nested or chained too deeply to compile (RecursionError)'
    >>> python_syntax_error("x = '\\ud800'")
    'SyntaxError: the code is not valid Unicode text (a lone surrogate?)'
    """
    if not isinstance(source, str):
        return f"TypeError: source must be a string, got {type(source).__name__}"
    try:
        compile(source, filename, mode, dont_inherit=True)
    except PYTHON_PARSE_ERRORS as exc:
        return _python_error(exc)
    return None
