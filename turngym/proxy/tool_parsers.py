"""Generated text → OpenAI ``tool_calls``: one parser per model family, chosen from a table.

A model calls tools by writing text in the format its chat template taught it; the proxy turns
that text back into structured calls, as vLLM's ``--tool-call-parser`` does. Each parser also
says how to *start* a call (:meth:`ToolParser.forced_prefix`: the text fed instead of sampled
when ``tool_choice`` is ``required`` or names a function) and how to write one as text
(:meth:`ToolParser.render_calls`, for templates that do not render ``tool_calls`` themselves).

=================  ==========================================================================
``hermes``          ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks
                    (Hermes, Qwen 2/2.5/3, and the prompt :mod:`turngym.proxy.tools` injects for
                    templates that ignore tools: the tiny model, SmolLM2-Instruct)
``llama3_json``     a bare JSON object ``{"name": ..., "parameters": {...}}`` (Llama 3.1/3.2),
                    several separated by ``;``, optionally after ``<|python_tag|>``
=================  ==========================================================================

Parsing never raises: text that is not a well-formed call comes back as content, with
``attempted`` telling the proxy to count a parse failure.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TOOL_PARSERS", "HermesParser", "Llama3JsonParser", "ParsedReply", "ToolCall", "ToolParser", "detect_parser",
           "new_call_id", "CALL_ID"]

CALL_ID = re.compile(r"call_[0-9a-f]{24}")
"""The shape of a call id the proxy issues (distinctive enough to be found in a client's re-serialized history)."""


def new_call_id() -> str:
    """A fresh, unguessable call id (``call_`` + 24 hex digits)."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: ``arguments`` is a JSON object serialized as a string (OpenAI's shape)."""

    name: str
    arguments: str
    id: str = field(default_factory=new_call_id)

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ParsedReply:
    """A reply split into text and calls.

    Attributes:
        content: the text outside the calls (None when there is none).
        calls: the well-formed calls, in order.
        attempted: the text started a call (its opening marker) — a reply with ``attempted`` and
            no ``calls`` is a parse failure.
    """

    content: str | None
    calls: tuple[ToolCall, ...] = ()
    attempted: bool = False


def _call_from(obj: Any, arg_keys: Sequence[str]) -> ToolCall | None:
    """A call from a decoded JSON object, or None when it is not ``{"name": str, ARGS: object}``."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args: Any = next((obj[k] for k in arg_keys if k in obj), {})
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):  # generated text: nesting past the decoder's stack is no call
            return None
    if not isinstance(args, dict) or set(obj) - {"name", *arg_keys}:
        return None
    try:
        return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))
    except RecursionError:  # decoded near the stack's limit, re-encoded deeper in it
        return None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


class ToolParser:
    """How one model family writes tool calls. Subclasses set :attr:`name` and implement the methods."""

    name = ""
    stop: str | None = None
    """A string that ends one call (added as a stop string when ``parallel_tool_calls`` is false)."""
    instructions = ""
    """How to call, in words and an example (the injected system prompt's last paragraph)."""

    def parse(self, text: str) -> ParsedReply:
        raise NotImplementedError

    def forced_prefix(self, name: str | None) -> str:
        """The text a call begins with: with ``name``, up to where its arguments start."""
        raise NotImplementedError

    def render_calls(self, calls: Sequence[tuple[str, Any]]) -> str:
        """``(name, arguments object)`` pairs written as this family writes them."""
        raise NotImplementedError


class HermesParser(ToolParser):
    """``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks; text around them is content."""

    name = "hermes"
    stop = "</tool_call>"
    instructions = ('For each function call, return a json object with function name and arguments within '
                    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
                    '<args-json-object>}\n</tool_call>')
    _BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)

    def parse(self, text: str) -> ParsedReply:
        if "<tool_call>" not in text:
            return ParsedReply(text or None)
        calls = []
        for body in self._BLOCK.findall(text):
            call = _call_from(_loads(body.strip()), ("arguments", "parameters"))
            if call is None:
                return ParsedReply(text or None, (), True)  # one broken block: the whole reply is text
            calls.append(call)
        content = self._BLOCK.sub("", text).strip()
        return ParsedReply(content or None, tuple(calls), True)

    def forced_prefix(self, name: str | None) -> str:
        return '<tool_call>\n{"name": "' if name is None else f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": '

    def render_calls(self, calls: Sequence[tuple[str, Any]]) -> str:
        return "\n".join(f"<tool_call>\n{json.dumps({'name': n, 'arguments': a}, ensure_ascii=False)}\n</tool_call>"
                         for n, a in calls)


class Llama3JsonParser(ToolParser):
    """A reply that is JSON call objects (``;``-separated), as Llama 3.1's template asks; else content."""

    name = "llama3_json"
    instructions = ('To call a function, respond only with a JSON object of the form {"name": <function-name>, '
                    '"parameters": <args-json-object>}; for several calls, separate the objects with "; ".')

    def parse(self, text: str) -> ParsedReply:
        body = text.strip().removeprefix("<|python_tag|>").strip()
        if not body.startswith(("{", "[")):
            return ParsedReply(text or None)
        decoded = _loads(body)
        objs = decoded if isinstance(decoded, list) else [decoded] if decoded is not None else [
            _loads(part) for part in body.split(";") if part.strip()]
        calls = [_call_from(o, ("parameters", "arguments")) for o in objs]
        if not calls or any(c is None for c in calls):
            return ParsedReply(text or None, (), True)
        return ParsedReply(None, tuple(c for c in calls if c is not None), True)

    def forced_prefix(self, name: str | None) -> str:
        return '{"name": "' if name is None else f'{{"name": {json.dumps(name)}, "parameters": '

    def render_calls(self, calls: Sequence[tuple[str, Any]]) -> str:
        return "; ".join(json.dumps({"name": n, "parameters": a}, ensure_ascii=False) for n, a in calls)


TOOL_PARSERS: dict[str, Callable[[], ToolParser]] = {"hermes": HermesParser, "llama3_json": Llama3JsonParser}
"""``--tool-call-parser`` names → parser factories."""

_DETECT: tuple[tuple[str, str], ...] = (("<tool_call>", "hermes"), ("<|python_tag|>", "llama3_json"),
                                        ('"parameters": ', "llama3_json"))


def detect_parser(chat_template: str | None) -> str:
    """The parser a chat template's own tool format calls for; ``hermes`` when the template has none
    (then the proxy injects a system prompt teaching that format: :mod:`turngym.proxy.tools`)."""
    template = chat_template or ""
    return next((name for marker, name in _DETECT if marker in template), "hermes")
