"""How an agent message is read: tool calls, or a reply to the user that ends the turn.

Tool calls are parsed by the shared :func:`turngym.core.parsing.parse_tool_calls` (a JSON
object or list, ```json fences, or Hermes/Qwen ``<tool_call>`` blocks; OpenAI's
``{"function": ...}`` wrapper and string-encoded arguments too; Mistral's ``[TOOL_CALLS]`` and
Llama's ``<|python_tag|>`` markers are dropped first). A message that holds no tool
call is a reply to the user and ends the agent's turn — BFCL's harness uses the same rule (a
response that decodes to no function call ends the turn). A message that *tries* to call a
tool (it has a ``<tool_call>`` tag or a ``"name"`` key) but does not parse is an invalid
action, so a broken call is never mistaken for the end of the turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from turngym.core.parsing import Parsed, ToolCall, parse_tool_calls

__all__ = ["Reply", "parse_message", "MAX_CALLS_PER_MESSAGE"]

#: BFCL's longest gold turn has 34 calls; a message may carry that many and more.
MAX_CALLS_PER_MESSAGE = 64

_ATTEMPT = re.compile(r"<tool_call>|\"name\"\s*:")
#: Markers some chat templates put before native tool calls (Mistral, Llama 3.1); the JSON after
#: them is what counts, and Mistral's bracketed marker would otherwise read as a JSON list.
_NATIVE_MARKERS = re.compile(r"\[TOOL_CALLS\]|<\|python_tag\|>")


@dataclass(frozen=True, slots=True)
class Reply:
    """A message to the user (no tool calls): it ends the agent's turn."""

    text: str


def parse_message(text: str) -> Parsed[tuple[ToolCall, ...] | Reply]:
    """Tool calls, a :class:`Reply`, or an error for a broken tool call.

    >>> parse_message('{"name": "ls", "arguments": {"a": true}}').value
    (ToolCall(name='ls', arguments={'a': True}),)
    >>> parse_message("All done: the file is in temp.").value
    Reply(text='All done: the file is in temp.')
    >>> parse_message('{"name": "ls", "arguments": {').error
    'the tool call is not complete JSON (unbalanced braces or brackets)'
    """
    parsed = parse_tool_calls(_NATIVE_MARKERS.sub(" ", text), max_calls=MAX_CALLS_PER_MESSAGE)
    if parsed.ok:
        return parsed  # type: ignore[return-value]
    error = parsed.error or ""
    if _ATTEMPT.search(text) or error.startswith("too many tool calls"):
        if error.startswith("no tool call found"):
            error = "the tool call is not complete JSON (unbalanced braces or brackets)"
        return Parsed(error=error)
    return Parsed(Reply(text.strip()))
