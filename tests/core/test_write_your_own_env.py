"""``Guess-v0``: find a hidden number from "higher" / "lower" hints."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from turngym import RewardSpec, Signal, Task, Transition, TurngymEnv
from turngym.core.parsing import parse_tag


@dataclass(frozen=True)
class GuessTask(Task):
    """``gold`` is the hidden number, in ``1..size``."""

    size: int = 100


@dataclass(frozen=True, slots=True)
class Interval:
    """Where the number can still be. Frozen, so a snapshot is a reference."""

    lo: int
    hi: int


class GuessEnv(TurngymEnv[GuessTask, Interval]):
    """Find a hidden number from "higher" / "lower" hints.

    ## Rewards
    Outcome: 1 if the number is found, else 0.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | narrowed | 0–1 | every turn | share of the numbers ruled out so far (a potential) |
    | consistent | 0–1 | valid guesses | the guess was still possible given the hints |

    ## Episode End
    Terminated when the number is found; truncated after ``max_turns`` (default 10).
    """

    reward_spec = RewardSpec(
        signals=(
            Signal("narrowed", 0, 1, "verifiable", "share of the numbers ruled out so far", potential=True),
            Signal("consistent", 0, 1, "verifiable", "the guess was still possible given the hints", weight=0.1),
        ),
        outcome="1 if the number is found, else 0",
    )
    task_type = GuessTask
    immutable_state = True
    default_max_turns = 10
    system_prompt = "Find my number. Write <guess>N</guess>; I answer 'higher' or 'lower'."
    stop_strings = ("</guess>",)

    def __init__(self, *, size: int = 100, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = size

    def _generate_task(self, rng: np.random.Generator) -> GuessTask:
        return self._regenerate_task(f"guess/{self.size}/{int(rng.integers(1, self.size + 1))}")

    def _regenerate_task(self, task_id: str) -> GuessTask:
        match = re.fullmatch(r"guess/(\d+)/(\d+)", task_id)
        if match is None or not 1 <= int(match[2]) <= int(match[1]):
            raise self._unknown_task(task_id)
        size = int(match[1])
        return GuessTask(id=task_id, prompt=f"Guess my number from 1 to {size}.", gold=int(match[2]), size=size)

    def _reset(self, task: GuessTask, options: Mapping[str, Any]) -> str:
        self.state = Interval(1, task.size)
        return task.prompt

    def _state_signals(self) -> dict[str, float]:
        return {"narrowed": 1 - (self.state.hi - self.state.lo + 1) / self.current_task.size}

    def _step(self, action: str) -> Transition:
        parsed = parse_tag(action, ("guess",), max_body=20)
        body = parsed.value.body.strip() if parsed.value else ""
        if not (body.isascii() and body.isdigit()):
            reason = parsed.error or f"{body!r} is not a whole number"
            return Transition(obs=f"Invalid: {reason}. Write <guess>N</guess>.", valid=False, invalid_reason=reason)
        n, s, gold = int(body), self.state, self.current_task.gold
        event = {"consistent": float(s.lo <= n <= s.hi)}
        if n == gold:
            self.state = Interval(n, n)
            return Transition(obs="Found it!", terminated=True, signals=event, outcome={"reward": 1.0, "success": True})
        self.state = Interval(max(s.lo, n + 1), s.hi) if n < gold else Interval(s.lo, min(s.hi, n - 1))
        return Transition(obs="higher" if n < gold else "lower", signals=event)

    def _state_key(self) -> str:
        return f"{self.current_task.id}:{self.state.lo}-{self.state.hi}"

    def _oracle_action(self) -> str:
        return f"<guess>{(self.state.lo + self.state.hi) // 2}</guess>"

    def sample_action(self, rng: np.random.Generator) -> str:
        return f"<guess>{int(rng.integers(1, self.size + 1))}</guess>"
# --- end of the example (docs/write_your_own_env.md shows everything above this line) ---

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

import turngym  # noqa: E402
from turngym.agents import OracleAgent, RandomAgent  # noqa: E402
from turngym.rollout import run_episodes  # noqa: E402

DOC = Path(__file__).parents[2] / "docs" / "write_your_own_env.md"
MARKER = "# --- end of the example"


def test_the_doc_shows_this_files_example_verbatim():
    example = Path(__file__).read_text(encoding="utf-8").split(MARKER)[0]
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert blocks and blocks[0] == example, f"the first python block of {DOC.name} must be the top of {Path(__file__).name}"


def test_guess_env_keeps_the_turngym_contract():
    turngym.check_env(GuessEnv())
    turngym.check_env(GuessEnv(size=1000, max_turns=12))


def test_guess_env_episode():
    env = GuessEnv()
    obs, info = env.reset(options={"task": "guess/100/70"})
    assert obs == "Guess my number from 1 to 100." and info["task_id"] == "guess/100/70"
    obs, reward, term, trunc, info = env.step("<guess>50</guess>")
    assert (obs, reward, term) == ("higher", 0.0, False)
    assert info["signals"] == {"narrowed": 0.5, "consistent": 1.0}
    _, reward, _, _, info = env.step("<guess>20</guess>")  # already ruled out
    assert info["signals"] == {"narrowed": 0.5, "consistent": 0.0}
    _, reward, _, _, info = env.step("<guess>seventy</guess>")  # invalid: the penalty, the potential unchanged
    assert info["action_valid"] is False and reward == -0.1 and info["signals"]["narrowed"] == 0.5
    obs, reward, term, _, info = env.step("<guess>70</guess>")
    assert (obs, reward, term) == ("Found it!", 1.0, True) and info["outcome"]["success"]
    with pytest.raises(turngym.TaskError, match="unknown task id"):
        env.reset(options={"task": "guess/100/101"})


def test_oracle_wins_and_random_mostly_loses():
    seeds = list(range(20))
    assert all(ep.success for ep in run_episodes(GuessEnv, OracleAgent(), seeds))
    random = run_episodes(lambda: GuessEnv(size=1000), RandomAgent(seed=0), seeds)
    assert sum(ep.success for ep in random) < 5
