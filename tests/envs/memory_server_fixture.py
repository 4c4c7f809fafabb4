"""The pinned ``@modelcontextprotocol/server-memory`` for the tests that run it (the MCP-Memory env, the doc's example).

Installed into the cache by the same function a user runs (``python -m turngym.envs.mcp.memory_env --install``)
when it is missing; without node/npm the caller skips, except where ``TURNGYM_REQUIRE_NODE=1`` (CI) makes that a
failure.
"""

from __future__ import annotations

import os
import shutil

import pytest

from turngym.envs.mcp.memory_env import PACKAGE, VERSION
from turngym.envs.mcp.npm import npm_entry, npm_install


def require_memory_server() -> None:
    """Skip (or fail, under ``TURNGYM_REQUIRE_NODE=1``) without node/npm; install the package if it is missing."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        if os.environ.get("TURNGYM_REQUIRE_NODE") == "1":
            pytest.fail("node and npm are required here (TURNGYM_REQUIRE_NODE=1)")
        pytest.skip("node/npm not installed")
    if not npm_entry(PACKAGE, VERSION, "dist/index.js").is_file():
        npm_install(PACKAGE, VERSION)
