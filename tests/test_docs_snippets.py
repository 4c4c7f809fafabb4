"""Every ```python block of README.md and docs/*.md runs as written, or says which test runs it, or why not.

``CHECKS`` maps each block (file, first line) to how it is checked:

* :class:`Run` -- run as is in a fresh interpreter (a temporary working directory, a timeout), optionally after
  earlier blocks of the same page (``after``: a page that builds ``env`` in one block and uses it in the next) and
  with earlier blocks written as modules (``modules``: the page's own ``mypackage/guess.py``);
* :class:`Shrunk` -- run with smaller sizes: each ``(old, new)`` replacement must find ``old`` in the block exactly
  once, so a page that changes its sizes fails here rather than running something else;
* :class:`Pinned` -- an existing test runs the same code; the entry names it, and the test file must define it;
* :class:`Skipped` -- not run, with the reason.

A python block without an entry fails :func:`test_every_python_block_has_a_check`, and an entry whose block is gone
fails too, so the docs cannot drift from this table. Every ``turngym ...`` command of a ```bash block must parse with
the real CLI parser, and a few cheap ones run (:data:`RUN_COMMANDS`). ``docs/study/**`` (generated reports) is out.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from turngym.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Run:
    """Run the block as written, ``after`` the page's blocks with these first lines (concatenated in order)."""

    timeout_s: int = 300
    after: tuple[str, ...] = ()
    modules: tuple[tuple[str, str], ...] = ()  # (path in the working dir, first line of the page's block it holds)


@dataclass(frozen=True)
class Shrunk:
    """Run the block with each ``old`` (present exactly once) replaced by ``new``: the same code at toy sizes."""

    replace: tuple[tuple[str, str], ...]
    timeout_s: int = 300
    why: str = ""


@dataclass(frozen=True)
class Pinned:
    """An existing test runs this code: ``test`` is ``path::function``; ``shares`` is text both hold."""

    test: str
    shares: str


@dataclass(frozen=True)
class Skipped:
    reason: str


Check = Run | Shrunk | Pinned | Skipped

GUESS = '"""``Guess-v0``: find a hidden number from "higher" / "lower" hints."""'
CHECKS: dict[tuple[str, str], Check] = {
    # README.md
    ("README.md", "import turngym"): Run(),
    ("README.md", "for s in env.reward_spec:"): Run(after=("import turngym",)),
    ("README.md", "from turngym.agents import render_episode"): Run(),
    ("README.md", 'env = turngym.make("turngym/Shop-v0", remote="ws://127.0.0.1:8000")   # behaves like the local env'):
        Pinned("tests/server/test_server_choices.py::test_remote_household_choices_equal_the_local_envs", "remote="),
    ("README.md", 'client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")'):
        Pinned("tests/proxy/test_proxy.py::test_agent_loop_is_captured_token_for_token", "episode_headers("),
    ("README.md", 'model = smolagents.OpenAIServerModel(model_id="tiny", api_base="http://127.0.0.1:8000/v1", '
                  'api_key="unused",'):
        Pinned("tests/proxy/test_tool_frameworks.py::test_smolagents_tool_calling_agent_is_one_captured_episode_that_trains",
               "ToolCallingAgent("),
    # docs/agents_and_rollouts.md
    ("docs/agents_and_rollouts.md", "from turngym.agents.hf import HFPolicy"): Run(),
    ("docs/agents_and_rollouts.md", "from turngym.agents import render_episode"): Run(),
    ("docs/agents_and_rollouts.md", "from turngym.rollout.steppers import RemoteStepper"):
        Pinned("tests/rollout/test_steppers.py::test_every_stepper_plays_the_same_episodes", "RayStepper("),
    # docs/engines.md
    ("docs/engines.md", "import torch"): Shrunk(
        (("max_new_tokens=64", "max_new_tokens=8"), ('{"max_turns": 6}', '{"max_turns": 2}'),
         ("num_generations=8", "num_generations=2"), ("per_device_train_batch_size=8", "per_device_train_batch_size=4"),
         ("max_steps=2", "max_steps=1")),
        why="two steps of 8 six-turn episodes take minutes on 2 cores; one of 4 two-turn episodes runs the same code",
    ),
    ("docs/engines.md", "from typing import Any"): Run(timeout_s=120),
    # docs/sandbox.md
    ("docs/sandbox.md", "import pathlib"): Run(timeout_s=120),
    # docs/write_your_own_env.md
    ("docs/write_your_own_env.md", GUESS):
        Pinned("tests/core/test_write_your_own_env.py::test_the_doc_shows_this_files_example_verbatim", "class GuessEnv"),
    ("docs/write_your_own_env.md", "import turngym"): Run(after=(GUESS,)),
    ("docs/write_your_own_env.md", "turngym.register("):
        Run(after=(GUESS, "import turngym"), modules=(("mypackage/guess.py", GUESS),)),
    ("docs/write_your_own_env.md",
     '"""A team-notes env over the published @modelcontextprotocol/server-memory, in public API only."""'):
        Pinned("tests/envs/test_mcp_doc_example.py::test_the_doc_shows_this_files_example_verbatim", "class NotesEnv"),
}

# `turngym` commands run as written by test_cheap_commands_run (the others only parse: they train for minutes or
# need a server, a GPU or a model package).
RUN_COMMANDS = (
    "turngym envs",
    "turngym eval turngym/Math-v0 --agent oracle --episodes 200",
)


@dataclass(frozen=True)
class Block:
    page: str
    lang: str
    code: str
    first: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "first", next(line for line in self.code.splitlines() if line.strip()).strip())


def _blocks(lang: str) -> list[Block]:
    return [Block(page, m.group(1), m.group(2)) for page in PAGES
            for m in FENCE.finditer((ROOT / page).read_text()) if m.group(1) == lang]


def _find(page: str, first: str) -> Block:
    found = [b for b in _blocks("python") if b.page == page and b.first == first]
    assert len(found) == 1, f"{page}: {len(found)} python blocks start with {first!r} (the table needs exactly one)"
    return found[0]


def test_every_python_block_has_a_check():
    keys = [(b.page, b.first) for b in _blocks("python")]
    missing = [k for k in keys if k not in CHECKS]
    assert not missing, f"python blocks with no entry in CHECKS (add one: run, shrink, pin or skip): {missing}"
    dupes = {k for k in keys if keys.count(k) > 1}
    assert not dupes, f"two blocks of a page start with the same line; give one another first line: {dupes}"
    stale = [k for k in CHECKS if k not in keys]
    assert not stale, f"CHECKS entries whose block is gone from the docs: {stale}"


def _program(page: str, first: str, check: Run | Shrunk) -> str:
    code = _find(page, first).code
    if isinstance(check, Shrunk):
        for old, new in check.replace:
            assert code.count(old) == 1, f"{page} {first!r}: {old!r} appears {code.count(old)} times, not once"
            code = code.replace(old, new)
        return code
    return "\n".join([*(_find(page, f).code for f in check.after), code])


RUNNABLE = [(page, first) for (page, first), c in CHECKS.items() if isinstance(c, Run | Shrunk)]


@pytest.mark.parametrize(("page", "first"), RUNNABLE, ids=[f"{p}:{f[:40]}" for p, f in RUNNABLE])
def test_python_block_runs(page: str, first: str, tmp_path: Path):
    check = CHECKS[(page, first)]
    assert isinstance(check, Run | Shrunk)
    for path, module_first in getattr(check, "modules", ()):
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.parent / "__init__.py").touch()
        target.write_text(_find(page, module_first).code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    proc = subprocess.run([sys.executable, "-c", _program(page, first, check)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=check.timeout_s)
    assert proc.returncode == 0, f"{page} block {first!r} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"


PINNED = [(k, c) for k, c in CHECKS.items() if isinstance(c, Pinned)]


@pytest.mark.parametrize(("key", "check"), PINNED, ids=[f"{k[0]}:{k[1][:40]}" for k, _ in PINNED])
def test_pinned_blocks_name_a_test_that_exists_and_runs_the_same_code(key: tuple[str, str], check: Pinned):
    path, _, name = check.test.partition("::")
    source = (ROOT / path).read_text()
    assert re.search(rf"^def {re.escape(name)}\(", source, re.MULTILINE), f"{check.test} is not defined"
    assert check.shares in _find(*key).code, f"the block {key} no longer holds {check.shares!r}"
    assert check.shares in source, f"{path} no longer holds {check.shares!r}"


def test_skips_say_why():
    assert all(c.reason.strip() for c in CHECKS.values() if isinstance(c, Skipped))


# ----------------------------------------------------------------------------------------------- bash blocks
def _commands() -> list[tuple[str, str]]:
    """Every ``turngym`` command line of the pages' bash blocks: (page, command), continuations joined."""
    out = []
    for block in _blocks("bash"):
        for line in block.code.replace("\\\n", " ").splitlines():
            if line.strip() in UNPARSED:
                continue
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            tokens = list(lexer)  # comments dropped; `&&`, `;`, `|` are tokens of their own
            words: list[str] = []
            for token in [*tokens, ";"]:
                if token not in SEPARATORS:
                    words.append(token)
                    continue
                while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                    words = words[1:]  # VAR=value prefixes
                if words and words[0] == "turngym":
                    out.append((block.page, shlex.join(words)))
                words = []
    return out


SEPARATORS = {"&&", "||", ";", "|", "&"}
# bash lines with shell constructs this reader cannot take apart (substitutions, here-docs), and why; none today
UNPARSED: dict[str, str] = {}
COMMANDS = _commands()


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{p}:{c}" for p, c in COMMANDS])
def test_bash_turngym_command_parses(page: str, command: str):
    try:
        build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as e:  # argparse's way of refusing
        pytest.fail(f"{page}: `{command}` does not parse (exit {e.code})")


def test_the_commands_run_here_are_in_the_docs():
    assert set(RUN_COMMANDS) <= {c for _, c in COMMANDS}


@pytest.mark.parametrize("command", RUN_COMMANDS)
def test_cheap_commands_run(command: str, tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "turngym.cli", *shlex.split(command)[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"`{command}` failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"`{command}` printed nothing"
