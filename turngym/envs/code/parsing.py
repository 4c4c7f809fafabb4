"""The code env's action grammar (the only place its patterns live).

* a fenced ```python block: **test** it as the solution (hidden tests run, feedback returned);
* ``<run>`` + a fenced block (or bare code) + ``</run>``: **run** a snippet; the current
  solution is importable as ``solution``;
* ``<submit/>``, optionally with a fenced block: **submit** (that block, else the last tested
  code) as final; the episode ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from turngym.core.parsing import Parsed, parse_code_block

__all__ = ["CodeAction", "parse_code_action", "ActionKind"]

ActionKind = Literal["test", "run", "submit"]

_RUN_CLOSE_TAIL = re.compile(r"\s*>")
_SUBMIT = re.compile(r"<submit\s*/?>")
MAX_CODE_CHARS = 50_000


@dataclass(frozen=True, slots=True)
class CodeAction:
    kind: ActionKind
    code: str | None = None


def parse_code_action(text: str) -> Parsed[CodeAction]:
    """Read one action; errors are addressed to the agent.

    >>> parse_code_action("Here:\\n```python\\ndef f():\\n    return 1\\n```").value
    CodeAction(kind='test', code='def f():\\n    return 1\\n')
    >>> parse_code_action("<run>print(2 + 2)</run>").value
    CodeAction(kind='run', code='print(2 + 2)')
    >>> parse_code_action("Done. <submit/>").value
    CodeAction(kind='submit', code=None)
    >>> parse_code_action("def f(): pass").error
    'no ```python code block found; write the solution in a ```python block, <run>code</run> to run a snippet, or <submit/> to finish'
    """
    if not isinstance(text, str):
        return Parsed(error=f"action must be a string, got {type(text).__name__}")
    opened = text.find("<run>")
    body = _run_body(text, opened) if opened >= 0 else None
    if body is not None:
        block = parse_code_block(body)
        code = block.value if block.ok else body.strip()
        if not code or not code.strip():
            return Parsed(error="empty <run></run>: put the code to run between the tags")
        return _sized(CodeAction("run", code))
    if opened >= 0:
        return Parsed(error="unclosed <run> tag: write <run>code</run>")
    block = parse_code_block(text)
    if _SUBMIT.search(text):
        return _sized(CodeAction("submit", block.value if block.ok else None))
    if block.ok:
        return _sized(CodeAction("test", block.value))
    return Parsed(error=f"{block.error}; write the solution in a ```python block, <run>code</run> to run a snippet, or <submit/> to finish")


def _run_body(text: str, opened: int) -> str | None:
    """The text between the first ``<run>`` and the first ``</run>`` after it (``</run >`` too).

    Forward scans only: the first opening tag that has a closing one after it is always the
    first opening tag, so a lazy regex retried from every ``<run>`` (quadratic in repeated
    tags) is not needed.

    >>> _run_body("a <run>x</run  > <run>y</run>", 2)
    'x'
    >>> _run_body("<run>x</run <run>", 0) is None
    True
    """
    pos = opened + len("<run>")
    while (close := text.find("</run", pos)) >= 0:
        tail = _RUN_CLOSE_TAIL.match(text, close + len("</run"))
        if tail is not None:
            return text[opened + len("<run>") : close]
        pos = close + len("</run")
    return None


def _sized(action: CodeAction) -> Parsed[CodeAction]:
    if action.code is not None and len(action.code) > MAX_CODE_CHARS:
        return Parsed(error=f"code too long ({len(action.code)} > {MAX_CODE_CHARS} characters)")
    return Parsed(action)
