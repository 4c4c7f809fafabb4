"""A synchronous handle on one MCP server, over the ``mcp`` SDK's own stdio transport.

Gymnasium envs are synchronous; the ``mcp`` SDK is async (anyio). :class:`MCPClient` runs the
SDK's :func:`mcp.client.stdio.stdio_client` and :class:`mcp.ClientSession` on a private event
loop in a daemon thread, so an env steps with plain blocking calls and never touches (or
requires) an event loop of its caller's — a notebook's or a server's loop keeps running.

The transport's context managers must be entered and left by one task, so one long-lived
task holds the session for the server's whole life; each call is a separate coroutine sent
to the loop, waited on with a deadline from the calling thread.

Failures are sorted by *who* caused them, the env's job with them:

* :class:`ServerLost` (an :class:`~turngym.core.errors.InfraError`): the server did not start,
  exited, or broke the protocol.
* :class:`CallTimeout` (also an ``InfraError`` until the env decides otherwise): a call got
  no answer in time. A slow call can be the agent's doing (a query that never ends), so the
  env restarts the server and retries before it blames anyone (see :mod:`.env`).

A tool that *runs* and reports an error (bad SQL, a missing table) is neither: it is a normal
:class:`ToolReply` with ``is_error`` set, the agent's failure.
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.metadata
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TextIO

from turngym.core.errors import ConfigError, InfraError

__all__ = ["MCPClient", "ToolReply", "ServerLost", "CallTimeout", "mcp_tools_to_openai"]

#: How long closing may take: the SDK closes stdin, waits 2 s for the server, then kills it.
_CLOSE_S = 6.0


class ServerLost(InfraError):
    """The MCP server could not be started, exited, or stopped answering the protocol."""


class CallTimeout(InfraError):
    """A tool call got no answer within its deadline (the server may be hung or just busy)."""


@dataclass(frozen=True, slots=True)
class ToolReply:
    """What one ``tools/call`` returned.

    Attributes:
        text: the text content blocks joined by newlines (non-text blocks named by type).
        is_error: the server flagged the result as an error (MCP's ``isError``).
    """

    text: str
    is_error: bool


def _sdk_major() -> int:
    """The installed ``mcp`` SDK's major version (1 and 2 differ in names, not in the protocol)."""
    try:
        return int(importlib.metadata.version("mcp").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 1


def _field(obj: Any, camel: str, snake: str) -> Any:
    """A result field under its 1.x (camelCase) or 2.x (snake_case) name."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel, None)


def _import_mcp() -> Any:
    try:
        import mcp
        from mcp.client.stdio import stdio_client
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(
            f"MCP envs need the mcp SDK and a server ({exc}); install them with pip install -e \".[mcp]\""
        ) from None
    return mcp, stdio_client


def mcp_tools_to_openai(tools: Any) -> dict[str, dict[str, Any]]:
    """MCP ``Tool`` objects → OpenAI-format tools by name (the grammar Tools-v0 speaks).

    The top-level parameters are closed (``additionalProperties: false``) unless the server
    says otherwise: an argument a tool does not take is an error the agent should hear about.
    """
    out: dict[str, dict[str, Any]] = {}
    for t in tools:
        params = dict(_field(t, "inputSchema", "input_schema") or {})
        params.setdefault("type", "object")
        params.setdefault("properties", {})
        params.setdefault("required", [])
        params.setdefault("additionalProperties", False)
        out[t.name] = {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": params},
        }
    return out


class MCPClient:
    """One MCP server process over stdio, driven synchronously.

    Args:
        command, args, env, cwd: how to start the server (the SDK's ``StdioServerParameters``).
        errlog: where the server's stderr goes (a real file: it is the child's fd 2).
        start_timeout_s: deadline for start-up, ``initialize`` and ``tools/list`` together.
    """

    def __init__(
        self,
        command: str,
        args: list[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        errlog: TextIO,
        start_timeout_s: float = 30.0,
    ) -> None:
        mcp, self._stdio_client = _import_mcp()
        self._v2 = _sdk_major() >= 2
        self._mcp = mcp
        self._params = mcp.StdioServerParameters(command=command, args=list(args), env=dict(env or {}), cwd=cwd)
        self._session_cls = mcp.ClientSession
        self._errlog = errlog
        self._start_timeout_s = start_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="turngym-mcp-client", daemon=True)
        self._thread.start()
        self._session: Any = None
        self._stop: asyncio.Event | None = None
        self._main: Future[None] | None = None
        self.tools: list[Any] = []

    # -- lifetime ------------------------------------------------------------------------
    def start(self) -> list[Any]:
        """Start the server, ``initialize``, and list its tools (all pages); returns them."""
        ready: Future[list[Any]] = Future()
        self._main = asyncio.run_coroutine_threadsafe(self._hold(ready), self._loop)
        try:
            self.tools = ready.result(timeout=self._start_timeout_s)
        except FutureTimeout:
            self.close()
            raise ServerLost(f"the MCP server did not initialize within {self._start_timeout_s:g} s") from None
        except Exception as exc:
            self.close()
            raise ServerLost(f"the MCP server failed to start: {_describe(exc)}") from None
        return self.tools

    async def _hold(self, ready: Future[list[Any]]) -> None:
        """The one task that owns the transport and the session for the server's whole life."""
        self._stop = asyncio.Event()
        try:
            async with self._stdio_client(self._params, errlog=self._errlog) as (read, write):
                async with self._session_cls(read, write) as session:
                    await session.initialize()
                    tools: list[Any] = []
                    cursor = None
                    while True:
                        if not cursor:
                            page = await session.list_tools()
                        elif self._v2:
                            page = await session.list_tools(params=self._mcp.types.PaginatedRequestParams(cursor=cursor))
                        else:
                            page = await session.list_tools(cursor)
                        tools.extend(page.tools)
                        cursor = _field(page, "nextCursor", "next_cursor")
                        if not cursor:
                            break
                    self._session = session
                    ready.set_result(tools)
                    await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                raise
        finally:
            self._session = None

    @property
    def alive(self) -> bool:
        """The session is up (the server may still have died since the last call)."""
        return self._session is not None and self._main is not None and not self._main.done()

    def close(self) -> None:
        """Stop the server (the SDK's shutdown: close stdin, wait, then kill) and the loop."""
        if self._main is not None and not self._main.done():
            if self._stop is not None:
                self._loop.call_soon_threadsafe(self._stop.set)
            try:
                self._main.result(timeout=_CLOSE_S)
            except Exception:  # noqa: BLE001 - a server dying on the way out changes nothing
                self._main.cancel()
        self._main = None
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=_CLOSE_S)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> MCPClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls ---------------------------------------------------------------------------
    def call(self, name: str, arguments: Mapping[str, Any], timeout_s: float) -> ToolReply:
        """Call one tool; :class:`CallTimeout` past ``timeout_s``, :class:`ServerLost` if gone."""
        session = self._session
        if session is None or not self.alive:
            raise ServerLost("the MCP server is not running")
        # 1.x takes the read timeout as a timedelta, 2.x as seconds
        timeout: Any = float(timeout_s) if self._v2 else datetime.timedelta(seconds=timeout_s)
        coro = session.call_tool(name, dict(arguments), read_timeout_seconds=timeout)
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            result = fut.result(timeout=timeout_s + 1.0)
        except FutureTimeout:
            fut.cancel()
            raise CallTimeout(f"{name}: no answer within {timeout_s:g} s") from None
        except Exception as exc:
            if _is_timeout(exc):
                raise CallTimeout(f"{name}: no answer within {timeout_s:g} s") from None
            raise ServerLost(f"{name}: the MCP server stopped answering ({_describe(exc)})") from None
        return ToolReply(text=_text_of(result.content), is_error=bool(_field(result, "isError", "is_error")))


def _text_of(content: Any) -> str:
    parts = []
    for block in content or ():
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')} block]")
    return "\n".join(parts)


def _is_timeout(exc: BaseException) -> bool:
    error = getattr(exc, "error", None)
    return getattr(error, "code", None) == 408 or "timed out" in str(exc).lower()


def _describe(exc: BaseException) -> str:
    """An exception (groups flattened to their first leaf) in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
