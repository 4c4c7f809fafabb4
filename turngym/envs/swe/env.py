"""``turngym/SWE-v0``: fix an injected bug in a small real Python repository with tools."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from turngym.core.env import Transition, TurngymEnv
from turngym.core.errors import ConfigError
from turngym.core.parsing import parse_tool_calls
from turngym.core.spec import RewardSpec, Signal
from turngym.envs.swe import MAX_TURNS, oracle, swebench, testing
from turngym.envs.swe import swebench as swebench_mod  # the constructor's `swebench` argument shadows the name
from turngym.envs.swe.grading import GRADERS
from turngym.envs.swe.repos import Tree, load_repo
from turngym.envs.swe.tasks import SWETask, buggy_tree, check_task, load_tasks
from turngym.envs.swe.tools import TOOL_FUNCS, TOOLS, truncate, validate_args
from turngym.envs.swe.verifier import Progress, edit_touches_function, measure
from turngym.sandbox.limits import Limits

__all__ = ["SWEEnv", "SWEState"]

MAX_CALLS_PER_TURN = 5

SYSTEM_PROMPT = """\
You are fixing a bug in a Python repository. Call tools with JSON: {"name": TOOL, "arguments": {...}}
(one call per message, or a JSON list of up to 5 calls). Tools:
""" + "\n".join(
    f"- {t['function']['name']}({', '.join(t['function']['parameters']['properties'])}): {t['function']['description']}"
    for t in TOOLS
) + """
Write only the JSON of the call(s), nothing else. When the tests pass, call submit. Do not edit the tests.
Example:
You: {"name": "search", "arguments": {"pattern": "def parse"}}
Reply: <tool_response> ... src/config.py:12: def parse(text): ... </tool_response>
You: {"name": "view_file", "arguments": {"path": "src/config.py"}}"""


@dataclass(frozen=True, slots=True)
class SWEState:
    """Immutable episode state; a snapshot is a reference.

    ``tree`` is the repository; ``progress`` its hidden evaluation; ``viewed`` the files the
    agent has looked at and ``tested`` whether it ran tests since its last edit (the oracle
    reads both; neither is part of ``state_key``, which is the tree alone).
    """

    tree: Tree
    progress: Progress
    viewed: frozenset[str] = frozenset()
    tested: bool = False


class SWEEnv(TurngymEnv[SWETask, SWEState | None]):
    """Repair a real repository whose suite an injected bug broke.

    ## Description
    The agent gets an issue-style report written from the failing tests, explores the repo,
    edits files and runs tests with JSON tool calls, and submits. After every edit the env runs
    the hidden evaluation (FAIL_TO_PASS and PASS_TO_PASS, SWE-bench semantics) on the new tree,
    so every turn reports how far the repository is from fixed.

    ## Task Distribution
    The shipped validated tasks (``tasks/swe/tasks.jsonl``: AST mutations of five small
    libraries written for turngym), or ``tasks=`` (a list of :class:`SWETask` or a JSONL path).
    ``repos=`` restricts the repositories. ``swebench=`` (a SWE-bench JSONL) with
    ``backend="local"`` (``repo_dirs=``) or ``"docker"`` (``image=``, ``python=``) loads real
    instances (:mod:`turngym.envs.swe.swebench`). ``limits=`` (a :class:`~turngym.sandbox.Limits`,
    as Code and MCP envs take) bounds every test run: memory, processes, ``cpu_cores``, disk
    (``wall_s``/``cpu_s`` come from each run's timeout); default: the shared sandbox's limits.

    ## Action Space
    JSON tool calls (``{"name": ..., "arguments": {...}}``, a list of up to 5, or
    ``<tool_call>`` blocks): ``list_dir``, ``view_file``, ``search``, ``replace``,
    ``create_file``, ``run_tests``, ``submit`` (schemas in :data:`turngym.envs.swe.tools.TOOLS`).
    Invalid: no JSON call, unknown tool, arguments that do not fit the schema.

    ## Observation
    The problem statement on reset; each tool's output (truncated at 6,000 characters with a
    note) after a call.

    ## Rewards
    Outcome: 1 if, at submit, every FAIL_TO_PASS test passes, no PASS_TO_PASS test fails and,
    for the shipped tasks, the code agrees with the gold package on hidden cases the tree never
    shows (random inputs over the public API, :mod:`turngym.envs.swe.hidden`; a fix that only
    answers the visible tests' asserted inputs is not resolved).
    The hidden evaluation grades the agent's code with the task's own test files and
    ``conftest.py`` files (edits to them do not count) and a pytest configuration the tree
    cannot change (:mod:`turngym.envs.swe.testing`); a run the code under test tampered with,
    cut short or timed out counts as failing, with ``outcome["reason"]`` saying why. Every
    shipped task and, by default (``grader="split"``), every SWE-bench instance is graded by the
    split grader: the tests and the verdict in a process that never runs the agent's code.
    ``grader="inprocess"`` (SWE-bench suites the split grader cannot serve) runs pytest beside
    that code, whose verdicts a targeted heap/``ctypes`` attack can forge.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | tool_ok | 0–1 | every valid turn | every call this turn ran without error |
    | f2p_passing | 0–1 | every turn | fraction of FAIL_TO_PASS tests passing now (a potential) |
    | p2p_failing | 0–1 | every turn | fraction of PASS_TO_PASS tests failing now (regressions) |
    | touched_buggy_function | 0–1 | edit turns | an edit overlapped the buggy function (localization) |
    | imports_ok | 0–1 | every turn | the test suite still collects (the package imports) |
    | resolved | 0–1 | submit | the task is resolved |

    ## Starting State
    The buggy repository; ``options={"task": SWETask | task_id}`` picks one.

    ## Episode End
    Terminated by ``submit``; truncated after ``max_turns`` (default 30).

    ## Arguments
    >>> import turngym
    >>> env = turngym.make("turngym/SWE-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step('{"name": "list_dir", "arguments": {}}')
    >>> info["signals"]["tool_ok"], info["signals"]["f2p_passing"] < 1
    (1.0, True)

    ## Oracle
    Views the buggy function, applies the gold patch with one ``replace``, runs the
    FAIL_TO_PASS tests and submits (4 turns).

    ## Version History
    * v0: initial release.
    """

    reward_spec = RewardSpec(
        signals=(
            Signal("tool_ok", 0, 1, "verifiable", "every tool call this turn ran without error"),
            Signal("f2p_passing", 0, 1, "verifiable", "fraction of FAIL_TO_PASS tests passing on the current tree", potential=True, weight=0.5),
            Signal("p2p_failing", 0, 1, "verifiable", "fraction of PASS_TO_PASS tests failing on the current tree", weight=-0.5),
            Signal("touched_buggy_function", 0, 1, "verifiable", "this turn's edit overlapped the buggy function (gold-patch localization)", weight=0.05),
            Signal("imports_ok", 0, 1, "verifiable", "the repository's test suite still collects"),
            Signal("resolved", 0, 1, "verifiable", "at submit: all FAIL_TO_PASS pass, no PASS_TO_PASS fails, hidden cases agree"),
        ),
        outcome="1 if at submit all FAIL_TO_PASS tests pass, no PASS_TO_PASS test fails (SWE-bench) and the hidden "
                "cases agree with the gold code (shipped tasks), else 0",
    )
    default_max_turns = MAX_TURNS
    corpus_episodes: ClassVar[int | None] = 12  # the tiny model's tokenizer corpus: each step runs sandboxed tests
    task_type = SWETask
    immutable_state = True
    system_prompt = SYSTEM_PROMPT
    stop_strings = ("</tool_call>",)  # one <tool_call> block per message when the model uses that form
    max_new_tokens = 256  # up to a few JSON calls, a replace with a short code edit
    tools = TOOLS

    def __init__(
        self,
        *,
        tasks: Sequence[SWETask] | str | Path | None = None,
        repos: Sequence[str] | None = None,
        swebench: str | Path | None = None,
        backend: str = "local",
        repo_dirs: Mapping[str, str | Path] | None = None,
        image: str = swebench.DEFAULT_IMAGE,
        python: str | None = None,
        grader: str = "split",
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._trees: dict[str, tuple[Tree, Tree]] = {}
        #: what each test run may use (memory, processes, cpu_cores, ...); None: the shared default sandbox
        self.limits = limits
        #: the scope suffix of this env's runs: verdicts under other limits are cached apart
        self._limits_scope = "" if limits is None else f"|{limits!r}"
        #: with ``limits=``, the tests of shipped and local tasks run in a sandbox executor of this env's own
        self._own_executor: testing.SandboxExecutor | None = None if limits is None else testing.SandboxExecutor(limits=limits)
        #: task id -> (image, executor): where the tests of a ``backend='docker'`` instance run
        self._executors: dict[str, tuple[str, testing.Executor]] = {}
        if grader not in GRADERS:
            raise ConfigError(f"grader must be one of {GRADERS} (the runner that grades SWE-bench instances), got {grader!r}")
        if swebench is not None:
            if python is None:
                python = swebench_mod.SWEBENCH_PYTHON if image == swebench_mod.DEFAULT_IMAGE else "python3"
            loaded = self._load_swebench(swebench, backend, repo_dirs or {}, image, python, grader)
        elif isinstance(tasks, Sequence) and not isinstance(tasks, str):
            loaded = list(tasks)
        else:
            loaded = load_tasks(tasks)
        if repos is not None:
            loaded = [t for t in loaded if t.repo in set(repos)]
        self._set_task_pool(loaded, empty="no SWE tasks selected (check tasks= and repos=)")
        for t in self.tasks or ():
            check_task(t, shipped=t.id not in self._trees)
        self.state = None

    @staticmethod
    def _check_backend(backend: str) -> None:
        if backend not in ("local", "docker"):
            raise ConfigError(f"backend must be 'local' or 'docker', got {backend!r}")

    def _load_swebench(self, path: str | Path, backend: str, repo_dirs: Mapping[str, str | Path],
                       image: str, python: str, grader: str) -> list[SWETask]:
        """SWE-bench instances as tasks: trees from local clones, or from each instance's image
        (``image`` is the name template, ``python`` the image's interpreter that has pytest).

        With the split grader each instance is checked by running it (gold resolves, start does
        not) where its tests run; ``grader="inprocess"`` skips that and warns: its verdicts are
        claims of the agent's code."""
        self._check_backend(backend)
        if grader == "inprocess":
            warnings.warn('SWEEnv(grader="inprocess"): SWE-bench verdicts come from pytest beside the agent\'s code, '
                          "which a targeted heap/ctypes attack can forge; use the default split grader for reported "
                          "numbers", stacklevel=3)
        instances = swebench.load_swebench(path)
        images = [swebench.check_docker(inst, image) for inst in instances] if backend == "docker" else []
        tasks = []
        for i, inst in enumerate(instances):
            if backend == "docker":
                start, gold = swebench.materialize_from_image(inst, images[i])
            elif inst.repo not in repo_dirs:
                raise ConfigError(f"backend='local' needs a clone of {inst.repo}: pass repo_dirs={{'{inst.repo}': PATH}}")
            else:
                start, gold = swebench.materialize(inst, repo_dirs[inst.repo])
            task = swebench.to_task(inst, start, gold, grader=grader)
            self._trees[task.id] = (start, gold)
            if backend == "docker":
                executors = {img: ex for img, ex in self._executors.values()}  # one sandbox per image
                executor = executors.get(images[i]) or swebench.docker_executor(images[i], python=python, limits=self.limits)
                self._executors[task.id] = (images[i], executor)
            if grader == "split":
                # its own cache: a split verdict on a suite the split grader cannot serve must never
                # answer an in-process question about the same tree (grader="inprocess" next)
                with self._tests_run_for(task), testing.separate_cache("split-check"):
                    swebench.check_split_grading(task, start, gold)
            tasks.append(task)
        return tasks

    @contextmanager
    def _tests_run_where_the_task_says(self) -> Iterator[None]:
        """A docker-backed instance's test runs go to its image; other tasks use the default."""
        with self._tests_run_for(self.task):
            yield

    @contextmanager
    def _tests_run_for(self, task: SWETask | None) -> Iterator[None]:
        scoped = self._executors.get(task.id) if task is not None else None
        if scoped:
            route = testing.use_executor(scoped[1], scope=f"docker:{scoped[0]}{self._limits_scope}")
        elif self._own_executor is not None:
            route = testing.use_executor(self._own_executor, scope=f"sandbox{self._limits_scope}")
        else:
            route = nullcontext()
        with route:
            yield

    def close(self) -> None:
        """Stop the containers of docker-backed instances (the default sandbox is shared, not ours)."""
        owned = [ex for _, ex in self._executors.values()] + ([self._own_executor] if self._own_executor else [])
        for executor in {id(ex): ex for ex in owned}.values():
            close = getattr(executor, "close", None)
            if close is not None:
                close()
        super().close()

    def start_tree(self, task: SWETask) -> Tree:
        """The repository as the episode starts (the bug in place, tests as they should be)."""
        return self._trees[task.id][0] if task.id in self._trees else buggy_tree(task)

    def gold_tree(self, task: SWETask) -> Tree:
        """The repository with the gold patch applied."""
        return self._trees[task.id][1] if task.id in self._trees else load_repo(task.repo)

    # -- episode ---------------------------------------------------------------------------
    def _reset(self, task: SWETask, options: Mapping[str, Any]) -> str:
        # By construction (validated at generation; SWE-bench's definition) the starting tree
        # fails every FAIL_TO_PASS test and passes every PASS_TO_PASS one: no run needed.
        self.state = SWEState(self.start_tree(task), Progress(0.0, 0.0, True))
        return task.prompt

    def _state_signals(self) -> dict[str, float]:
        assert self.state is not None
        progress = self.state.progress
        return {
            "f2p_passing": progress.f2p_passing,
            "p2p_failing": progress.p2p_failing,
            "imports_ok": 1.0 if progress.imports_ok else 0.0,
        }

    def _step(self, action: str) -> Transition:
        with self._tests_run_where_the_task_says():
            return self._step_tools(action)

    def _step_tools(self, action: str) -> Transition:
        task = self.current_task
        state = self.state
        assert state is not None
        parsed = parse_tool_calls(action, max_calls=MAX_CALLS_PER_TURN)
        problem = parsed.error
        calls = parsed.value or ()
        if problem is None:
            problem = next((p for c in calls if (p := validate_args(c.name, c.arguments))), None)
        if problem is not None:
            return Transition(
                obs=f"Invalid tool call: {problem}",
                valid=False,
                invalid_reason=problem,
            )
        outputs: list[str] = []
        all_ok, touched, submitted = True, False, False
        tree, viewed, tested = state.tree, state.viewed, state.tested
        for call in calls:
            result = TOOL_FUNCS[call.name](tree, call.arguments)
            all_ok &= result.ok
            if call.name == "view_file" and result.ok:
                viewed = viewed | {call.arguments["path"].strip().lstrip("/")}
            if call.name == "run_tests" and result.ok:
                tested = True
            if result.tree is not None:
                assert result.edited is not None
                touched |= edit_touches_function(task, tree, result.edited)
                tree = result.tree
                tested = False
            prefix = f"[{call.name}] " if len(calls) > 1 else ""
            outputs.append(prefix + result.output)
            if result.submitted:
                submitted = True
                break
        progress = state.progress if tree is state.tree else measure(task, tree, self.start_tree(task))
        self.state = replace(state, tree=tree, progress=progress, viewed=viewed, tested=tested)
        signals = {"tool_ok": 1.0 if all_ok else 0.0, "touched_buggy_function": 1.0 if touched else 0.0}
        if submitted:
            resolved = progress.resolved
            signals["resolved"] = 1.0 if resolved else 0.0
            return Transition(
                obs=truncate("\n".join(outputs)) + ("\nResolved." if resolved else "\nNot resolved." + _why(progress)),
                terminated=True,
                signals=signals,
                outcome={
                    "reward": 1.0 if resolved else 0.0,
                    "success": resolved,
                    "f2p_passing": progress.f2p_passing,
                    "p2p_failing": progress.p2p_failing,
                    "reason": progress.reason,
                    "hidden_failing": progress.hidden_failing,
                },
            )
        return Transition(obs=truncate("\n".join(outputs)), signals=signals)

    def _state_key(self) -> str:
        return self.state.tree.digest[:16] if self.state is not None else "none"

    # -- policies --------------------------------------------------------------------------
    def _oracle_action(self) -> str:
        return oracle.oracle_action(self)

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random tool call; edits change one random line of a random source file."""
        assert self.state is not None
        tree = self.state.tree
        files = list(tree)
        sources = [f for f in files if f.endswith(".py") and not f.startswith("tests/")] or files
        u = rng.random()
        if u < 0.15:
            return json.dumps({"name": "list_dir", "arguments": {}})
        if u < 0.35:
            f = files[int(rng.integers(len(files)))]
            start = int(rng.integers(1, 40))
            return json.dumps({"name": "view_file", "arguments": {"path": f, "start": start, "end": start + 20}})
        if u < 0.45:
            words = ["def ", "return", "if ", "self", "raise", "for "]
            return json.dumps({"name": "search", "arguments": {"pattern": words[int(rng.integers(len(words)))]}})
        if u < 0.8:
            return random_line_edit(tree, sources[int(rng.integers(len(sources)))], rng)
        if u < 0.95:
            return json.dumps({"name": "run_tests", "arguments": {}})
        return json.dumps({"name": "submit", "arguments": {}})


def _why(progress: Progress) -> str:
    """Why a submission is not resolved, as far as the agent may know (never which hidden case)."""
    if progress.reason:
        return f" ({progress.reason})"
    if progress.hidden_failing and progress.f2p_passing == 1.0 and progress.p2p_failing == 0.0:
        return " (the tests pass, but the code disagrees with the reference on hidden cases)"
    return ""


_EDITS = (("<", "<="), ("<=", "<"), ("+ 1", "- 1"), ("==", "!="), ("True", "False"), ("return ", "return not "))


def random_line_edit(tree: Tree, path: str, rng: np.random.Generator) -> str:
    """A ``replace`` that changes one random line of ``path`` (unique-line context only)."""
    lines = tree[path].splitlines(keepends=True)
    text = tree[path]
    for _ in range(20):
        i = int(rng.integers(len(lines)))
        line = lines[i]
        if not line.strip() or text.count(line) != 1:
            continue
        for a, b in [_EDITS[int(k)] for k in rng.permutation(len(_EDITS))]:
            if a in line:
                return json.dumps({"name": "replace", "arguments": {"path": path, "old": line, "new": line.replace(a, b, 1)}})
        return json.dumps({"name": "replace", "arguments": {"path": path, "old": line, "new": "\n"}})
    return json.dumps({"name": "run_tests", "arguments": {}})
