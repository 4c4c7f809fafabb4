"""``POST /v1/responses``: OpenAI's Responses API as a translation over the chat path.

openai-agents' default model (``OpenAIResponsesModel``) and other new clients speak the
Responses API. Nothing about capture differs: a Responses request is turned into the Chat
Completions body it means (:func:`to_chat`), answered by :meth:`CaptureProxy.chat` — so it is
threaded, recorded and refused exactly as a chat request — and the chat answer is turned back
into a Responses object (:func:`from_chat`) or its server-sent events (:func:`stream_events`).

The mapping:

=================================  ==========================================================
Responses                          Chat Completions
=================================  ==========================================================
``instructions``                   a leading ``system`` message
``input`` (a string)               one ``user`` message
``message`` items                  messages (``developer`` → ``system``; ``input_text`` /
                                   ``output_text`` parts → text)
``function_call`` items            ``tool_calls`` of one assistant message (with the
                                   assistant text just before them: one reply)
``function_call_output`` items     ``tool`` messages (``tool_call_id`` = ``call_id``)
``tools`` (flat function schema)   ``tools`` (``{"type": "function", "function": {...}}``)
``tool_choice``                    ``tool_choice`` (a named function nested the chat way)
``max_output_tokens``              ``max_tokens``
``include`` output_text.logprobs   ``logprobs: true``
``stop``, ``return_token_ids``     the same (extensions: Responses has no stop strings; a
                                   reply cut at ``max_output_tokens`` is ``incomplete``, which
                                   openai-agents raises on, so small models want a stop)
=================================  ==========================================================

Refused with an OpenAI-shaped 400 that names the alternative: ``previous_response_id`` and
``conversation`` (the proxy keeps no response store: send the whole conversation in ``input``,
as openai-agents does by default), hosted tools (web/file search, computer…), non-text input
parts and item types the model cannot render (reasoning, images). ``store``, ``metadata``,
``truncation``, ``reasoning`` and ``parallel_tool_calls`` are accepted and have no effect.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from turngym.proxy.service import CaptureProxy, ProxyError

__all__ = ["LOGPROBS_INCLUDE", "from_chat", "respond", "sse", "stream_events", "to_chat"]

LOGPROBS_INCLUDE = "message.output_text.logprobs"
"""The ``include`` entry that asks for each output token's log-prob."""

_NOT_STORED = ("the proxy keeps no stored responses: send the whole conversation in input (openai-agents does unless "
               "told to chain responses), or use /v1/chat/completions")
#: Request fields refused, with why (checked before anything is sampled).
_REFUSED = {
    "previous_response_id": _NOT_STORED,
    "conversation": _NOT_STORED,
    "prompt": "stored prompt templates are not supported: send instructions and input",
    "background": "background responses are not supported",
}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _bad(message: str, param: str | None = None) -> ProxyError:
    return ProxyError(400, message, code="unsupported_parameter" if param else "invalid_request", param=param)


def _text(content: Any, where: str) -> str:
    """An item's content as text: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") not in _TEXT_PARTS or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise _bad(f"{where}.content[{k}]: only text parts (input_text, output_text) are supported, got {kind!r}", "input")
            parts.append(part["text"])
        return "".join(parts)
    raise _bad(f"{where}: content must be a string or a list of text parts", "input")


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``instructions`` + ``input`` as chat messages."""
    out: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("instructions must be a string", "instructions")
        out.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise _bad("input must be a string or a non-empty list of items", "input")
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise _bad(f"{where} must be an object", "input")
        kind = item.get("type", "message")
        handler = _ITEMS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            raise _bad(f"{where}: items of type {kind!r} are not supported (message, function_call and "
                       "function_call_output are)", "input")
        handler(item, where, out)
    return out


def _message_item(item: Mapping[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    role = _ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
    if role is None:
        raise _bad(f"{where}: role must be one of {sorted(_ROLES)}, got {item.get('role')!r}", "input")
    out.append({"role": role, "content": _text(item.get("content"), where)})


def _function_call_item(item: Mapping[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not all(isinstance(v, str) for v in (call_id, name, arguments)):
        raise _bad(f"{where}: a function_call needs string call_id, name and arguments", "input")
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    prev = out[-1] if out else None
    if prev is not None and prev["role"] == "assistant":  # the text and the calls of one reply are one message
        prev.setdefault("tool_calls", []).append(call)
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _function_output_item(item: Mapping[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    call_id = item.get("call_id")
    if not isinstance(call_id, str):
        raise _bad(f"{where}: a function_call_output needs a string call_id", "input")
    out.append({"role": "tool", "tool_call_id": call_id, "content": _text(item.get("output"), where)})


#: Input item type → how it becomes chat messages (appended to the list so far).
_ITEMS = {"message": _message_item, "function_call": _function_call_item, "function_call_output": _function_output_item}


def _tools(tools: Any) -> list[dict[str, Any]]:
    """Responses' flat function tools as chat's nested ones."""
    if not isinstance(tools, list):
        raise _bad("tools must be a list", "tools")
    out = []
    for k, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            kind = tool.get("type") if isinstance(tool, Mapping) else type(tool).__name__
            raise _bad(f"tools[{k}]: only function tools are supported (no hosted tools), got {kind!r}", "tools")
        fn = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
        for key in ("description", "strict"):
            if tool.get(key) is not None:
                fn[key] = tool[key]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad(f"tool_choice must be auto, none, required or {{'type': 'function', 'name': ...}}, got {choice!r}", "tool_choice")


def to_chat(body: Any) -> dict[str, Any]:
    """The Chat Completions body a Responses request means (raises :class:`ProxyError` 400)."""
    if not isinstance(body, Mapping):
        raise ProxyError(400, "the request body must be a JSON object")
    for key, why in _REFUSED.items():
        if body.get(key) not in (None, False, ""):
            raise _bad(f"{key}: {why}", key)
    chat: dict[str, Any] = {"model": body.get("model"), "messages": _messages(body)}
    for src, dst in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                     ("user", "user"), ("return_token_ids", "return_token_ids"), ("stop", "stop")):
        if body.get(src) is not None:
            chat[dst] = body[src]
    include = body.get("include") or []
    if not isinstance(include, list):
        raise _bad("include must be a list", "include")
    if LOGPROBS_INCLUDE in include:
        chat["logprobs"] = True
    if body.get("top_logprobs"):
        chat["top_logprobs"] = body["top_logprobs"]  # the chat path says why it is refused
    if body.get("tools"):
        chat["tools"] = _tools(body["tools"])
        if body.get("parallel_tool_calls") is not None:
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    choice = body.get("tool_choice")
    if choice is not None:
        choice = _tool_choice(choice)
        if body.get("tools") or choice not in ("auto", "none"):  # without tools, auto/none mean nothing
            chat["tool_choice"] = choice
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), Mapping) else None
    if fmt is not None:
        chat["response_format"] = fmt  # text passes; a JSON schema is refused by the chat path, with its reason
    return chat


def _output_text(text: str, logprobs: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = [{"token": t["token"], "logprob": t["logprob"], "bytes": t["bytes"], "top_logprobs": []}
                            for t in logprobs.get("content") or []]
    return part


def from_chat(chat: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """The Responses object for a chat completion (``request``: the Responses request it answers).

    The reply's text becomes one ``message`` item; each tool call a ``function_call`` item (its
    ``call_id`` the chat call's id, so the next request's ``function_call_output`` threads back).
    ``length`` finishes are ``incomplete`` (``max_output_tokens``), as OpenAI reports them."""
    choice = chat["choices"][0]
    message = choice["message"]
    suffix = chat["id"].split("-", 1)[-1]
    output: list[dict[str, Any]] = []
    calls = message.get("tool_calls") or []
    if message.get("content") or not calls:
        msg: dict[str, Any] = {"id": f"msg_{suffix}", "type": "message", "status": "completed", "role": "assistant",
                               "content": [_output_text(message.get("content") or "", choice.get("logprobs"))]}
        if "token_ids" in choice:
            msg["token_ids"] = choice["token_ids"]
        output.append(msg)
    for k, call in enumerate(calls):
        fn = call["function"]
        output.append({"id": f"fc_{suffix}_{k}", "type": "function_call", "status": "completed", "call_id": call["id"],
                       "name": fn["name"], "arguments": fn["arguments"]})
    usage = chat["usage"]
    incomplete = choice.get("finish_reason") == "length"
    out: dict[str, Any] = {
        "id": f"resp_{suffix}", "object": "response", "created_at": chat["created"],
        "status": "incomplete" if incomplete else "completed", "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": request.get("instructions"), "max_output_tokens": request.get("max_output_tokens"),
        "model": chat["model"], "output": output, "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
        "previous_response_id": None, "temperature": request.get("temperature"), "top_p": request.get("top_p"),
        "tool_choice": request.get("tool_choice") or "auto", "tools": list(request.get("tools") or []),
        "text": {"format": {"type": "text"}}, "truncation": "disabled", "store": False, "metadata": {},
        "usage": {"input_tokens": usage["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": usage["total_tokens"]},
    }
    for key in ("turngym", "prompt_token_ids"):
        if key in chat:
            out[key] = chat[key]
    return out


def _item_events(item: Mapping[str, Any], index: int) -> Iterator[dict[str, Any]]:
    """One output item as added → its content (deltas, done) → done."""
    if item["type"] == "message":
        part = item["content"][0]
        empty = {**part, "text": ""} | ({"logprobs": []} if "logprobs" in part else {})
        yield {"type": "response.output_item.added", "output_index": index,
               "item": {**item, "status": "in_progress", "content": []}}
        ref = {"item_id": item["id"], "output_index": index, "content_index": 0}
        yield {"type": "response.content_part.added", **ref, "part": empty}
        yield {"type": "response.output_text.delta", **ref, "delta": part["text"], "logprobs": part.get("logprobs", [])}
        yield {"type": "response.output_text.done", **ref, "text": part["text"], "logprobs": part.get("logprobs", [])}
        yield {"type": "response.content_part.done", **ref, "part": part}
    else:
        yield {"type": "response.output_item.added", "output_index": index,
               "item": {**item, "status": "in_progress", "arguments": ""}}
        ref = {"item_id": item["id"], "output_index": index}
        yield {"type": "response.function_call_arguments.delta", **ref, "delta": item["arguments"]}
        yield {"type": "response.function_call_arguments.done", **ref, "name": item["name"], "arguments": item["arguments"]}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def stream_events(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A finished Responses object as the events a streaming client reads (each item's content in
    one delta), numbered by ``sequence_number``; the last is ``response.completed`` (or
    ``response.incomplete``) carrying the whole response."""
    pending = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": pending},
                                    {"type": "response.in_progress", "response": pending}]
    for index, item in enumerate(response["output"]):
        events.extend(_item_events(item, index))
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    events.append({"type": final, "response": dict(response)})
    return [{**e, "sequence_number": k} for k, e in enumerate(events)]


def sse(events: Sequence[Mapping[str, Any]]) -> Iterator[bytes]:
    """Events as server-sent events (``event:`` names the type, as OpenAI sends them)."""
    for e in events:
        yield f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()


async def respond(proxy: CaptureProxy, body: Any, episode_header: str | None = None, group: str | None = None,
                  **chat_options: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Answer a ``/v1/responses`` body through ``proxy``'s chat path; returns the Responses
    object and the response headers (the episode, turn and segment, as for chat).
    ``chat_options``: whatever else :meth:`CaptureProxy.chat` takes from the request."""
    proxy.store.counts["responses_requests"] += 1
    try:
        chat_body = to_chat(body)
    except ProxyError as exc:
        proxy.store.errors[exc.code] += 1  # refused before the chat path saw it: counted here
        raise
    chat, headers = await proxy.chat(chat_body, episode_header, group, **chat_options)
    return from_chat(chat, body), headers
