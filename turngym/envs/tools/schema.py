"""JSON-schema tools: convert BFCL function docs, validate call arguments.

Tools are described in the OpenAI function-calling format every chat template speaks::

    {"type": "function", "function": {"name": ..., "description": ..., "parameters": {JSON schema}}}

BFCL's docs use a Python-flavoured dialect (``"dict"``, ``"float"``, ``"tuple"``, ``"any"``);
:func:`bfcl_doc_to_tool` maps it onto JSON Schema. :func:`validate_arguments` checks a call
against the subset of JSON Schema the tools use (``type``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``enum``). It is a few dozen lines instead of the
``jsonschema`` package because it runs on every call of every step (the env's latency budget
is a millisecond per call) and its error messages are addressed to the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Tool", "bfcl_doc_to_tool", "validate_arguments", "check_structure", "tool_name", "oversized_integer", "MAX_INT_BITS"]

#: Integers in tool arguments fit in 64 bits: IDs, counts and amounts do, and a JSON literal of
#: thousands of digits would make the backends build numbers too large to print or hash.
MAX_INT_BITS = 63

Tool = dict[str, Any]

_BFCL_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "integer": "integer",
    "string": "string",
    "boolean": "boolean",
    "array": "array",
    "number": "number",
    "object": "object",
}


def _convert(node: Any) -> Any:
    """Recursively rewrite a BFCL parameter schema into JSON Schema."""
    if isinstance(node, list):
        return [_convert(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str):
            if value != "any":  # "any": no type constraint at all
                out["type"] = _BFCL_TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: _convert(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _convert(value)
        else:
            out[key] = value
    return out


def bfcl_doc_to_tool(doc: Mapping[str, Any]) -> Tool:
    """Turn one BFCL function doc into an OpenAI-format tool with a JSON-schema.

    Top-level parameters are closed (``additionalProperties: false``): an argument the function
    does not take is an error the agent should hear about, not something silently dropped.

    >>> doc = {"name": "cd", "description": "Change directory.", "parameters": {"type": "dict",
    ...        "properties": {"folder": {"type": "string", "description": "where"}}, "required": ["folder"]}}
    >>> tool = bfcl_doc_to_tool(doc)
    >>> tool["function"]["parameters"]["type"], tool["function"]["parameters"]["additionalProperties"]
    ('object', False)
    """
    params = _convert(dict(doc.get("parameters") or {"type": "dict", "properties": {}}))
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    params.setdefault("required", [])
    params["additionalProperties"] = False
    return {
        "type": "function",
        "function": {"name": doc["name"], "description": doc.get("description", ""), "parameters": params},
    }


def tool_name(tool: Tool) -> str:
    """The function name of an OpenAI-format tool."""
    return tool["function"]["name"]


def _type_ok(value: Any, typ: str) -> bool:
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "array":
        return isinstance(value, (list, tuple))
    if typ == "object":
        return isinstance(value, dict)
    if typ == "null":
        return value is None
    return True  # an unknown type name constrains nothing


_JSON_NAMES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
    "NoneType": "null",
}


def _check(value: Any, schema: Mapping[str, Any], where: str) -> str | None:
    typ = schema.get("type")
    if typ is not None:
        types = typ if isinstance(typ, list) else [typ]
        if not any(_type_ok(value, t) for t in types):
            got = _JSON_NAMES.get(type(value).__name__, type(value).__name__)
            return f"{where} must be {' or '.join(types)}, got {got} {_short(value)}"
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        return f"{where} must be one of {enum}, got {_short(value)}"
    if isinstance(value, dict):
        problem = _names(value, schema, where)
        if problem:
            return problem
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name in value:
                err = _check(value[name], sub, f"{where}.{name}" if where != "arguments" else name)
                if err:
                    return err
    elif isinstance(value, (list, tuple)) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            err = _check(item, schema["items"], f"{where}[{i}]")
            if err:
                return err
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validate_arguments(arguments: Mapping[str, Any], parameters: Mapping[str, Any]) -> str | None:
    """Check call arguments against a tool's parameter schema; an error for the agent, or None.

    >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
    ...           "additionalProperties": False}
    >>> validate_arguments({"n": 3}, schema) is None
    True
    >>> validate_arguments({"n": "3"}, schema)
    "n must be integer, got string '3'"
    >>> validate_arguments({"m": 3}, schema)
    "arguments has unknown argument(s) ['m']; allowed: n; arguments is missing required argument(s) ['n']"
    """
    return _check(dict(arguments), parameters, "arguments")


def check_structure(arguments: Mapping[str, Any], parameters: Mapping[str, Any]) -> str | None:
    """Only the argument *names*: required ones present, no unknown ones (types not checked).

    BFCL's harness never checks types, and its ground truth has a call that breaks its own
    schema (``close_ticket(ticket_id='ticket_001')`` where the doc says integer), so the BFCL
    variants reject only structural errors and execute type mismatches as BFCL would.

    >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
    ...           "additionalProperties": False}
    >>> check_structure({"n": "3"}, schema) is None, check_structure({"m": 3}, schema)
    (True, "arguments has unknown argument(s) ['m']; allowed: n; arguments is missing required argument(s) ['n']")
    """
    return _names(arguments, parameters, "arguments")


def oversized_integer(arguments: Mapping[str, Any]) -> str | None:
    """Why an integer in ``arguments`` (at any depth) is refused, or None.

    Walks with an explicit stack (the parser bounds the nesting, but a walk that cannot recurse
    needs no such argument) over the values only; the path is spelled out once one is found.

    >>> oversized_integer({"a": [1, {"b": 2**70}]})
    'arguments.a[1].b is too large (integers must fit in 64 bits)'
    >>> oversized_integer({"a": 2**62, "b": 1e300}) is None
    True
    """
    stack: list[Any] = [arguments]
    while stack:
        value = stack.pop()
        if type(value) is int:
            if value.bit_length() > MAX_INT_BITS:
                return f"{_path_to(arguments, value)} is too large (integers must fit in 64 bits)"
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return None


def _path_to(arguments: Mapping[str, Any], target: int) -> str:
    """Where ``target`` (an object in ``arguments``) sits, as ``arguments.a[1].b``."""
    stack: list[tuple[Any, str]] = [(arguments, "arguments")]
    while stack:
        value, where = stack.pop()
        if value is target:
            return where
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}") for k, v in reversed(value.items()))
        elif isinstance(value, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(value))))
    return "an argument"


def _names(value: Mapping[str, Any], schema: Mapping[str, Any], where: str) -> str | None:
    """Unknown keys (when closed) and missing required keys, in one message."""
    props = schema.get("properties") or {}
    problems = []
    if schema.get("additionalProperties") is False:
        extra = sorted(k for k in value if k not in props)
        if extra:
            problems.append(f"{where} has unknown argument(s) {extra}; allowed: {', '.join(props) or 'none'}")
    missing = [n for n in schema.get("required") or () if n not in value]
    if missing:
        problems.append(f"{where} is missing required argument(s) {missing}")
    return "; ".join(problems) or None
