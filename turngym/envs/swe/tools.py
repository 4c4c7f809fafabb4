"""The SWE agent's tools: JSON-schema declarations and their implementations over a Tree.

Each tool is a pure function ``(tree, args) -> ToolResult`` — it never touches the host file
system; edits return a new tree. Only ``run_tests`` executes code, through ``testing.run_pytest`` (the
agent's own tree as it stands, for the agent's eyes; the hidden evaluation is ``grading.evaluate``).
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import regex

from turngym.core.parsing import function_tool
from turngym.envs.swe.repos import Tree
from turngym.envs.swe.testing import run_pytest

__all__ = ["TOOLS", "ToolResult", "TOOL_FUNCS", "validate_args", "MAX_OBS_CHARS"]

MAX_OBS_CHARS = 6000
MAX_VIEW_LINES = 200
MAX_SEARCH_HITS = 50
#: Wall-clock budget of one regex search over the whole tree. The agent writes the pattern, and
#: a backtracking engine can take exponential time on one line (``(a+)+$``): the `regex`
#: package stops a match at a deadline and releases the GIL while it runs, so a hostile pattern
#: costs the episode at most this much and never freezes the process it steps in.
SEARCH_REGEX_S = 1.0


@dataclass(frozen=True)
class ToolResult:
    """What one tool call did: its output text, a new tree if it edited, and success."""

    output: str
    ok: bool = True
    tree: Tree | None = None
    edited: tuple[str, int, int] | None = None  # (path, first line, last line) of the edit
    submitted: bool = False


TOOLS: list[dict[str, Any]] = [
    function_tool("list_dir", "List a directory of the repository.", {"path": {"type": "string", "description": "directory, default '.'"}}, []),
    function_tool(
        "view_file",
        f"Show a file with line numbers (at most {MAX_VIEW_LINES} lines per call).",
        {"path": {"type": "string"}, "start": {"type": "integer", "description": "first line, 1-based"}, "end": {"type": "integer", "description": "last line, inclusive"}},
        ["path"],
    ),
    function_tool(
        "search",
        "Find lines containing a string (or a regex when regex=true) in the repository's files.",
        {"pattern": {"type": "string"}, "path": {"type": "string", "description": "limit to this file or directory"}, "regex": {"type": "boolean"}},
        ["pattern"],
    ),
    function_tool(
        "replace",
        "Replace the one occurrence of `old` in a file by `new` (`old` must occur exactly once).",
        {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
        ["path", "old", "new"],
    ),
    function_tool(
        "create_file",
        "Create a file with the given content (set overwrite=true to replace an existing file).",
        {"path": {"type": "string"}, "content": {"type": "string"}, "overwrite": {"type": "boolean"}},
        ["path", "content"],
    ),
    function_tool(
        "run_tests",
        "Run the test suite, or only the given test ids (e.g. 'tests/test_x.py::test_y').",
        {"tests": {"type": "array", "items": {"type": "string"}}},
        [],
    ),
    function_tool("submit", "Submit the current state of the repository as the fix. Ends the episode.", {}, []),
]

_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
_PY_TYPES = {"string": str, "integer": int, "boolean": bool, "array": list}


def validate_args(name: str, args: Mapping[str, Any]) -> str | None:
    """None if ``args`` fit the tool's schema, else what is wrong (addressed to the agent)."""
    schema = _SCHEMAS.get(name)
    if schema is None:
        return f"unknown tool {name!r}; available: {', '.join(_SCHEMAS)}"
    props = schema["properties"]
    missing = [k for k in schema["required"] if k not in args]
    if missing:
        return f"{name}: missing argument(s) {missing}"
    extra = [k for k in args if k not in props]
    if extra:
        return f"{name}: unknown argument(s) {extra}; expected {list(props)}"
    for key, value in args.items():
        want = _PY_TYPES[props[key]["type"]]
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            return f"{name}: argument {key!r} must be {props[key]['type']}, got {type(value).__name__}"
        if want is list and not all(isinstance(v, str) for v in value):
            return f"{name}: {key!r} must be a list of strings"
    return None


def _norm(path: str) -> str | None:
    p = posixpath.normpath(path.strip().lstrip("/")) if path.strip() else "."
    if p.startswith("..") or "\0" in p:
        return None
    return p


def truncate(text: str, limit: int = MAX_OBS_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... truncated: {len(text) - limit} more characters]"


def list_dir(tree: Tree, args: Mapping[str, Any]) -> ToolResult:
    path = _norm(args.get("path", "."))
    if path is None:
        return ToolResult("error: path escapes the repository", ok=False)
    prefix = "" if path == "." else path + "/"
    entries: set[str] = set()
    for f in tree:
        if f.startswith(prefix):
            rest = f[len(prefix) :]
            entries.add(rest.split("/", 1)[0] + ("/" if "/" in rest else ""))
    if not entries:
        return ToolResult(f"error: no directory {path!r}", ok=False)
    return ToolResult("\n".join(sorted(entries)))


def view_file(tree: Tree, args: Mapping[str, Any]) -> ToolResult:
    path = _norm(args["path"])
    if path is None or path not in tree:
        return ToolResult(f"error: no file {args['path']!r} (use list_dir)", ok=False)
    lines = tree[path].splitlines()
    start = max(1, args.get("start", 1))
    end = min(len(lines), args.get("end", start + MAX_VIEW_LINES - 1), start + MAX_VIEW_LINES - 1)
    if start > max(len(lines), 1):
        return ToolResult(f"error: {path} has only {len(lines)} lines", ok=False)
    body = "\n".join(f"{i:>4} | {lines[i - 1]}" for i in range(start, end + 1))
    note = f"\n[showing lines {start}-{end} of {len(lines)}]" if (start > 1 or end < len(lines)) else ""
    return ToolResult(truncate(f"{path}\n{body}{note}"))


def search(tree: Tree, args: Mapping[str, Any]) -> ToolResult:
    pattern = args["pattern"]
    if not pattern:
        return ToolResult("error: empty pattern", ok=False)
    where = _norm(args.get("path", "."))
    if where is None:
        return ToolResult("error: path escapes the repository", ok=False)
    if args.get("regex"):
        try:
            rx = regex.compile(pattern)
        except (regex.error, OverflowError, RecursionError) as exc:
            return ToolResult(f"error: bad regex: {exc}", ok=False)
        deadline = time.monotonic() + SEARCH_REGEX_S

        def match(line: str) -> bool:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            return rx.search(line, timeout=left, concurrent=True) is not None
    else:
        match: Callable[[str], bool] = lambda line: pattern in line  # type: ignore[no-redef]  # noqa: E731
    hits = []
    try:
        for f in tree:
            if where != "." and not (f == where or f.startswith(where + "/")):
                continue
            for i, line in enumerate(tree[f].splitlines(), 1):
                if match(line):
                    hits.append(f"{f}:{i}: {line.strip()}")
    except TimeoutError:
        return ToolResult(f"error: the regex search took more than {SEARCH_REGEX_S:g} s; use a simpler pattern "
                          "(no nested quantifiers such as (a+)+) or a plain-text search", ok=False)
    if not hits:
        return ToolResult(f"no matches for {pattern!r}")
    more = f"\n[{len(hits) - MAX_SEARCH_HITS} more matches not shown]" if len(hits) > MAX_SEARCH_HITS else ""
    return ToolResult(truncate("\n".join(hits[:MAX_SEARCH_HITS]) + more))


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def replace(tree: Tree, args: Mapping[str, Any]) -> ToolResult:
    path = _norm(args["path"])
    if path is None or path not in tree:
        return ToolResult(f"error: no file {args['path']!r}", ok=False)
    old, new = args["old"], args["new"]
    if not old:
        return ToolResult("error: `old` is empty", ok=False)
    text = tree[path]
    count = text.count(old)
    if count != 1:
        return ToolResult(f"error: `old` occurs {count} times in {path}; it must occur exactly once (add context)", ok=False)
    at = text.index(old)
    new_text = text[:at] + new + text[at + len(old) :]
    first = _line_of(text, at)
    last = first + max(old.count("\n"), new.count("\n"))
    return ToolResult(f"replaced 1 occurrence in {path} (line {first})", tree=tree.with_file(path, new_text), edited=(path, first, last))


def create_file(tree: Tree, args: Mapping[str, Any]) -> ToolResult:
    path = _norm(args["path"])
    if path is None or path == "." or path.endswith("/"):
        return ToolResult("error: bad path", ok=False)
    parents = path.split("/")
    if any("/".join(parents[:i]) in tree for i in range(1, len(parents))) or any(f.startswith(path + "/") for f in tree):
        return ToolResult(f"error: {path} would put a file where a directory is (or the reverse)", ok=False)
    if path in tree and not args.get("overwrite", False):
        return ToolResult(f"error: {path} exists; pass overwrite=true to replace it", ok=False)
    content = args["content"]
    if len(content) > 200_000:
        return ToolResult("error: file too large (200,000 characters max)", ok=False)
    return ToolResult(f"wrote {path} ({content.count(chr(10)) + 1} lines)", tree=tree.with_file(path, content), edited=(path, 1, content.count("\n") + 1))


def run_tests(tree: Tree, args: Mapping[str, Any]) -> ToolResult:
    tests = args.get("tests") or None
    if tests and any(not t.startswith("tests/") or ".." in t for t in tests):
        return ToolResult("error: test ids look like 'tests/test_x.py::test_name'", ok=False)
    run = run_pytest(tree, tests)
    if run.timed_out:
        return ToolResult("tests timed out", ok=False)
    if run.problem:
        return ToolResult(truncate(f"error: {run.problem}\n" + run.output[-3000:]), ok=False)
    if run.collection_error:
        return ToolResult(truncate("error: the tests could not be collected (import error?)\n" + run.output[-3000:]), ok=False)
    lines = [f"{len(run.passed)} passed, {len(run.failed)} failed"]
    for tid, msg in run.messages[:10]:
        lines.append(f"FAILED {tid}\n    " + "\n    ".join(msg.splitlines()[:6]))
    if len(run.messages) > 10:
        lines.append(f"[{len(run.messages) - 10} more failures not shown]")
    return ToolResult(truncate("\n".join(lines)))


def submit(tree: Tree, args: Mapping[str, Any]) -> ToolResult:
    return ToolResult("submitted", submitted=True)


TOOL_FUNCS: dict[str, Callable[[Tree, Mapping[str, Any]], ToolResult]] = {
    "list_dir": list_dir,
    "view_file": view_file,
    "search": search,
    "replace": replace,
    "create_file": create_file,
    "run_tests": run_tests,
    "submit": submit,
}
