"""The signal tables and turn budgets in env docstrings say what the code declares.

A docstring table restates the env's ``RewardSpec`` for readers (``help(env)``, the docs); nothing
else keeps the two in step, so this test does: same signals, same order, same ranges, potentials
marked as such, and the documented default ``max_turns`` equal to the class's.
"""

import re

import pytest

import turngym
from turngym.core.registry import env_info, load_entry_point
from turngym.core.spec import RewardSpec


def _env_classes() -> list[type]:
    classes = {load_entry_point(env_info(i).entry_point) for i in turngym.list_envs()}
    return sorted(classes, key=lambda c: c.__name__)


def _section(doc: str, title: str) -> str:
    match = re.search(rf"^\s*## {title}\n(.*?)(?=^\s*## |\Z)", doc, re.S | re.M)
    assert match, f"docstring has no '## {title}' section"
    return match.group(1)


def _number(text: str) -> float:
    return float(text.strip().replace("−", "-"))


def table_rows(doc: str) -> list[tuple[str, float, float, str]]:
    """``(name, low, high, meaning)`` of each row of the signal table under ``## Rewards``."""
    rows = []
    for line in _section(doc, "Rewards").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.strip().startswith("|") or len(cells) != 4 or cells[0] in ("signal", "---"):
            continue
        low, high = re.fullmatch(r"(−?-?[\d.]+)–(−?-?[\d.]+)", cells[1]).groups()
        rows.append((cells[0], _number(low), _number(high), cells[3]))
    return rows


def table_problems(doc: str, spec: RewardSpec) -> list[str]:
    """Every way the docstring's table disagrees with ``spec`` (empty: in step)."""
    rows = table_rows(doc)
    problems = []
    if [r[0] for r in rows] != list(spec.names):
        problems.append(f"table lists {[r[0] for r in rows]}, the RewardSpec declares {list(spec.names)}")
    for name, low, high, meaning in rows:
        if name not in spec:
            continue
        sig = spec[name]
        if (low, high) != (sig.low, sig.high):
            problems.append(f"{name}: table says {low}–{high}, the RewardSpec [{sig.low}, {sig.high}]")
        if "(a potential)" in meaning and not sig.potential:
            problems.append(f"{name}: the table calls it a potential, the RewardSpec does not")
        if sig.potential and not re.search(r"potential|Φ", meaning):
            problems.append(f"{name}: a potential in the RewardSpec, not said so in the table")
    return problems


@pytest.mark.parametrize("cls", _env_classes(), ids=lambda c: c.__name__)
def test_signal_table_matches_reward_spec(cls):
    assert table_problems(cls.__doc__, cls.reward_spec) == []


@pytest.mark.parametrize("cls", _env_classes(), ids=lambda c: c.__name__)
def test_documented_default_max_turns_is_the_class_default(cls):
    match = re.search(r"\(default (\d+)", _section(cls.__doc__, "Episode End"))
    assert match, "the '## Episode End' section should state the default max_turns"
    assert int(match.group(1)) == cls.default_max_turns


def test_the_check_catches_a_stale_table():
    from turngym.envs.math.env import MathEnv

    doc = MathEnv.__doc__
    assert table_problems(doc, MathEnv.reward_spec) == []
    renamed = doc.replace("| repeat_call |", "| repeated_call |")
    assert any("table lists" in p for p in table_problems(renamed, MathEnv.reward_spec))
    widened = doc.replace("| tool_ok | 0–1 |", "| tool_ok | −1–1 |")
    assert any("tool_ok: table says -1.0–1.0" in p for p in table_problems(widened, MathEnv.reward_spec))
    unmarked = doc.replace("(a potential)", "")
    assert any("progress: a potential" in p for p in table_problems(unmarked, MathEnv.reward_spec))
