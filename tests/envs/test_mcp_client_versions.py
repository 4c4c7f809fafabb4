"""The MCP client reads the SDK's 1.x (camelCase) and 2.x (snake_case) result shapes alike.

The test doubles below are plain objects shaped like each SDK's ``Tool`` / ``CallToolResult``;
the real 1.x SDK is exercised by every MCP env test.
"""

from __future__ import annotations

from types import SimpleNamespace

from turngym.envs.mcp.client import _field, mcp_tools_to_openai

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def test_tools_of_either_sdk_become_the_same_openai_tools():
    v1_double = SimpleNamespace(name="read", description="d", inputSchema=SCHEMA)
    v2_double = SimpleNamespace(name="read", description="d", input_schema=SCHEMA)
    assert mcp_tools_to_openai([v1_double]) == mcp_tools_to_openai([v2_double])
    assert mcp_tools_to_openai([v2_double])["read"]["function"]["parameters"]["required"] == ["q"]


def test_result_fields_under_either_name():
    assert _field(SimpleNamespace(isError=True), "isError", "is_error") is True
    assert _field(SimpleNamespace(is_error=True), "isError", "is_error") is True
    assert _field(SimpleNamespace(next_cursor=None), "nextCursor", "next_cursor") is None
    assert _field(SimpleNamespace(), "nextCursor", "next_cursor") is None
