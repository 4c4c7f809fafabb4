"""Pure verdicts for the math env: is an answer correct, which gold values a result hits.

Answers are compared as numbers, never as strings: ``"17"``, ``"17.0"``, ``"$17"``,
``"1,700"`` vs ``"1700"``, ``"3/4"`` vs ``"0.75"`` all resolve exactly with rationals. Anything
that is not a plain number (LaTeX such as ``\\frac{3}{4}``, ``\\boxed{…}``) falls back to
HuggingFace's ``math-verify``, which is slower (milliseconds) but understands notation; it runs
behind :mod:`turngym.envs.math.latex_check`, which bounds it in time whatever the answer holds.
The numeric path is bounded too: an exponent such as ``1e999999999`` is not read as an exact
number (building it would take minutes), and no pattern here backtracks over the answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

from turngym.envs.math.latex_check import Verdict, check_latex

__all__ = ["to_number", "answers_match", "check_answer", "first_unhit", "MAX_DECIMAL_EXPONENT"]

#: Largest decimal exponent read exactly (``1e400``); beyond it the text is not a plain number.
MAX_DECIMAL_EXPONENT = 400

_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:/\d+)?$")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_LEAD, _TRAIL = "$€£", ".%"
_NUM_IN_TEXT = re.compile(r"[+-]?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def _strip_decoration(s: str) -> str:
    """``s`` without leading whitespace/currency signs and trailing whitespace/periods/percent.

    An index scan: the equivalent regex ``[\\s.%]+$`` retries from every position of an inner
    whitespace run, quadratic in the run's length.
    """
    i, j = 0, len(s)
    while i < j and (s[i].isspace() or s[i] in _LEAD):
        i += 1
    while j > i and (s[j - 1].isspace() or s[j - 1] in _TRAIL):
        j -= 1
    return s[i:j]


@lru_cache(maxsize=65536)
def to_number(text: str) -> Fraction | None:
    """Read ``text`` as an exact number, or None.

    A bare number (with ``$``, thousands separators, a trailing period) parses directly; text
    holding exactly one number ("17 apples") gives that number.

    >>> to_number("$1,234.50"), to_number("3/4"), to_number("17 apples"), to_number("2 or 3")
    (Fraction(2469, 2), Fraction(3, 4), Fraction(17, 1), None)
    """
    s = _strip_decoration(_THOUSANDS.sub("", text.strip()))
    if _NUMBER.match(s):
        exponent = s.lower().partition("e")[2].split("/")[0].lstrip("+-")
        if exponent and (len(exponent) > 6 or int(exponent) > MAX_DECIMAL_EXPONENT):
            return None
        try:
            return Fraction(s)
        except (ValueError, ZeroDivisionError):
            return None
    found = _NUM_IN_TEXT.findall(text)
    if len(found) == 1:
        return to_number(found[0]) if found[0] != text else None
    return None


def answers_match(pred: str, gold: str) -> bool:
    """True if the predicted answer equals the gold answer as a number (or per math-verify).

    >>> answers_match("17.0", "17"), answers_match("$1,700", "1700"), answers_match("18", "17")
    (True, True, False)
    >>> answers_match(r"\\frac{3}{4}", "3/4")
    True
    """
    return check_answer(pred, gold).equal


def check_answer(pred: str, gold: str) -> Verdict:
    """:func:`answers_match` with the reason an answer was not checked (refused or timed out).

    >>> check_answer("10**10**10", "17")
    Verdict(equal=False, unchecked_reason='power tower')
    """
    g = to_number(gold)
    p = to_number(pred)
    if g is not None and p is not None:
        return Verdict(p == g)
    if not pred.strip():
        return Verdict(False)
    return check_latex(pred, gold)


def first_unhit(chain: Sequence[Fraction], hit: int, value: Fraction) -> int:
    """Index of the first gold chain value equal to ``value`` whose bit in ``hit`` is 0, or -1."""
    for i, c in enumerate(chain):
        if c == value and not (hit >> i) & 1:
            return i
    return -1
