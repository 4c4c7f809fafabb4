"""``turngym/Math-v0``: multi-step word problems solved with a calculator tool."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.env import Transition, TurngymEnv
from turngym.core.errors import ConfigError
from turngym.core.hashing import state_hash
from turngym.core.parsing import parse_tag
from turngym.core.spec import RewardSpec, Signal
from turngym.envs.math import MAX_TURNS, oracle
from turngym.envs.math.calculator import calculate, format_number
from turngym.envs.math.tasks import MAX_STEPS, MathTask, generate_task, load_gsm8k, task_from_generated_id
from turngym.envs.math.verifier import check_answer, first_unhit

__all__ = ["MathEnv", "MathState"]

_TAGS = ("calc", "answer")
_NUM = re.compile(r"\d+")

SYSTEM_PROMPT = """\
Solve the math word problem with a calculator. Write exactly one action per message, nothing else:
<calc>EXPRESSION</calc> computes an expression (numbers, + - * / // % **, parentheses, sqrt abs round min max
floor ceil) and you receive <result>VALUE</result>.
<answer>NUMBER</answer> gives the final answer and ends the episode.
Example:
Problem: Ann has 4 bags of 6 apples. She eats 5 apples. How many apples are left?
You: <calc>4 * 6</calc>
Reply: <result>24</result>
You: <calc>24 - 5</calc>
Reply: <result>19</result>
You: <answer>19</answer>"""


@dataclass(frozen=True, slots=True)
class MathState:
    """The episode state: which gold values were hit (a bitmask) and the expressions tried.

    Frozen, so a snapshot is a reference, not a copy.
    """

    hit: int = 0
    calls: frozenset[str] = frozenset()


class MathEnv(TurngymEnv[MathTask, MathState]):
    """Multi-step arithmetic word problems with a calculator tool.

    ## Description
    The agent reads a word problem (generated, or GSM8K-format) and may call a safe calculator
    any number of times before answering. Every gold intermediate value of the solution is
    known, so the env can tell which calculator calls made progress.

    ## Task Distribution
    Generated problems with 1–6 steps (``min_steps``/``max_steps``), uniformly; or the tasks
    passed as ``tasks`` (a list of :class:`MathTask` or a GSM8K JSONL path).

    ## Action Space
    Text. ``<calc>EXPR</calc>`` evaluates an arithmetic expression (exact rationals; names,
    attributes and calls other than a few math functions are rejected).
    ``<answer>NUMBER</answer>`` ends the episode. Only the first action tag counts.
    Valid: ``<calc>12 * 7</calc>``, ``I think <answer>84</answer>``.
    Invalid (no tag, unclosed tag, empty tag): ``84``, ``<answer>84``.

    ## Observation
    The problem text on reset; ``<result>V</result>`` or ``<error>why</error>`` after a
    calculator call; a verdict after the answer; a correction after an invalid action.

    ## Rewards
    Outcome: 1 if the answer equals the gold answer as a number, else 0.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | tool_ok | 0–1 | calc turns | the expression evaluated |
    | new_intermediate | 0–1 | calc turns | the result equals a gold intermediate not hit before |
    | progress | 0–1 | every turn | fraction of the gold chain reached so far (a potential) |
    | repeat_call | 0–1 | calc turns | the same expression was already evaluated this episode |
    | answer_correct | 0–1 | answer turn | the final answer is correct |

    ## Starting State
    A task drawn by the env's RNG, or ``options={"task": MathTask | task_id}``.

    ## Episode End
    Terminated by ``<answer>``; truncated after ``max_turns`` (default 10).

    ## Arguments
    >>> import turngym
    >>> env = turngym.make("turngym/Math-v0", min_steps=2, max_steps=2)
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(env.oracle_action())
    >>> info["signals"]["new_intermediate"], terminated
    (1.0, False)

    ## Oracle
    Replays the gold expressions in order, then answers.

    ## Version History
    * v0: initial release.
    """

    reward_spec = RewardSpec(
        signals=(
            Signal("tool_ok", 0, 1, "verifiable", "the calculator call evaluated without error"),
            Signal("new_intermediate", 0, 1, "verifiable", "the result equals a gold intermediate value not reached before", weight=0.1),
            Signal("progress", 0, 1, "verifiable", "fraction of the gold chain of values reached so far", potential=True),
            Signal("repeat_call", 0, 1, "verifiable", "this exact expression was already evaluated in the episode", weight=-0.05),
            Signal("answer_correct", 0, 1, "verifiable", "the final answer equals the gold answer (numerically / math-verify)"),
        ),
        outcome="1 if the final answer equals the gold answer as a number, else 0",
    )
    default_max_turns = MAX_TURNS
    task_type = MathTask
    immutable_state = True
    system_prompt = SYSTEM_PROMPT
    stop_strings = ("</calc>", "</answer>")
    max_new_tokens = 40  # one tag with a short expression; a model that rambles is cut off early
    action_prefix = "<"  # every action starts with a tag (a policy may force this start)

    def __init__(
        self,
        *,
        tasks: Sequence[MathTask] | str | Path | None = None,
        min_steps: int = 1,
        max_steps: int = MAX_STEPS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not 1 <= min_steps <= max_steps <= MAX_STEPS:
            raise ConfigError(f"need 1 <= min_steps <= max_steps <= {MAX_STEPS}, got {min_steps}, {max_steps}")
        self.min_steps, self.max_steps = min_steps, max_steps
        self._set_task_pool(load_gsm8k(tasks) if isinstance(tasks, (str, Path)) else tasks)
        self.state = MathState()

    # -- tasks -------------------------------------------------------------------------
    def _generate_task(self, rng: np.random.Generator) -> MathTask:
        steps = int(rng.integers(self.min_steps, self.max_steps + 1))
        return generate_task(int(rng.integers(1 << 31)), steps)

    def _regenerate_task(self, task_id: str) -> MathTask:
        if task_id.startswith("math/gen/"):
            return task_from_generated_id(task_id)
        raise self._unknown_task(task_id)

    # -- episode ---------------------------------------------------------------------------
    def _reset(self, task: MathTask, options: Mapping[str, Any]) -> str:
        self.state = MathState()
        return task.prompt

    def _state_signals(self) -> dict[str, float]:
        return {"progress": self.state.hit.bit_count() / len(self.current_task.chain_values)}

    def _step(self, action: str) -> Transition:
        task = self.current_task
        parsed = parse_tag(action, _TAGS, max_body=1000)
        chain = task.chain_values
        n = len(chain)
        if not parsed.ok:
            return Transition(
                obs=f"Invalid action: {parsed.error}. Use <calc>EXPR</calc> or <answer>NUMBER</answer>.",
                valid=False,
                invalid_reason=parsed.error,
            )
        act = parsed.value
        assert act is not None
        if act.tag == "answer":
            verdict = check_answer(act.body, task.gold)
            correct = verdict.equal
            hit = self.state.hit | (1 << (n - 1)) if correct else self.state.hit
            self.state = MathState(hit, self.state.calls)
            reward = 1.0 if correct else 0.0
            outcome = {"reward": reward, "success": correct, "answer": act.body, "gold": task.gold}
            obs = "Correct." if correct else "Incorrect."
            if verdict.unchecked_reason is not None:  # refused or too slow to check: the agent's failure
                outcome["reason"] = f"answer not checked: {verdict.unchecked_reason}"
                obs = f"Incorrect (answer not checked: {verdict.unchecked_reason})."
            return Transition(
                obs=obs,
                terminated=True,
                signals={"answer_correct": reward},
                outcome=outcome,
            )
        value, error = calculate(act.body)
        repeat = 1.0 if act.body in self.state.calls else 0.0
        calls = self.state.calls if repeat else self.state.calls | {act.body}
        if error is not None:
            self.state = MathState(self.state.hit, calls)
            return Transition(obs=f"<error>{error}</error>", signals={"repeat_call": repeat})
        hit = self.state.hit
        new = 0.0
        i = first_unhit(chain, hit, value)
        if i >= 0:
            hit |= 1 << i
            new = 1.0
        self.state = MathState(hit, calls)
        return Transition(
            obs=f"<result>{format_number(value)}</result>",
            signals={"tool_ok": 1.0, "new_intermediate": new, "repeat_call": repeat},
        )

    def _state_key(self) -> str:
        return state_hash((self.task.id if self.task else "", self.state.hit))

    # -- policies --------------------------------------------------------------------------
    def _oracle_action(self) -> str:
        return oracle.oracle_action(self)

    def faithfulness(self, episode: Any) -> float | None:
        """1.0 if a successful episode computed every gold chain value with the calculator.

        The ``progress`` signal counts gold values reached; before the answer turn only
        calculator calls can raise it, so a correct answer with full progress before it is
        backed by tool evidence, and one without it was guessed (or computed in the head).
        None for unsuccessful episodes.
        """
        if not episode.outcome.get("success") or not episode.turns:
            return None
        before = [t.signals.get("progress", 0.0) for t in episode.turns[:-1]]
        return 1.0 if before and max(before) >= 1.0 - 1e-9 else 0.0

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random calculator call on the problem's numbers, or a random answer."""
        task = self.task
        numbers = _NUM.findall(task.prompt) if task else []
        if not numbers:
            numbers = [str(int(rng.integers(1, 100)))]
        pick = lambda: numbers[int(rng.integers(len(numbers)))]  # noqa: E731
        if rng.random() < 0.75:
            op = "+-*/"[int(rng.integers(4))]
            return f"<calc>{pick()} {op} {pick()}</calc>"
        return f"<answer>{pick()}</answer>"
