"""Pure verdicts for the math env: is an answer correct, which gold values a result hits.

Answers are compared as numbers, never as strings: ``"17"``, ``"17.0"``, ``"$17"``,
``"1,700"`` vs ``"1700"``, ``"3/4"`` vs ``"0.75"`` all resolve exactly with rationals. Anything
that is not a plain number (LaTeX such as ``\\frac{3}{4}``, ``\\boxed{…}``) falls back to
HuggingFace's ``math-verify``, which is slower (milliseconds) but understands notation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

__all__ = ["to_number", "answers_match", "first_unhit"]

_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:/\d+)?$")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_STRIP = re.compile(r"^[\s$€£]+|[\s.%]+$")
_NUM_IN_TEXT = re.compile(r"[+-]?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


@lru_cache(maxsize=65536)
def to_number(text: str) -> Fraction | None:
    """Read ``text`` as an exact number, or None.

    A bare number (with ``$``, thousands separators, a trailing period) parses directly; text
    holding exactly one number ("17 apples") gives that number.

    >>> to_number("$1,234.50"), to_number("3/4"), to_number("17 apples"), to_number("2 or 3")
    (Fraction(2469, 2), Fraction(3, 4), Fraction(17, 1), None)
    """
    s = _STRIP.sub("", _THOUSANDS.sub("", text.strip()))
    if _NUMBER.match(s):
        try:
            return Fraction(s)
        except (ValueError, ZeroDivisionError):
            return None
    found = _NUM_IN_TEXT.findall(text)
    if len(found) == 1:
        return to_number(found[0]) if found[0] != text else None
    return None


def _math_verify(pred: str, gold: str) -> bool:
    from math_verify import parse, verify  # a few hundred ms to import; only when needed

    try:
        # timeouts use SIGALRM, which only works on the main thread: bound the input instead.
        return bool(verify(parse(gold, parsing_timeout=None), parse(pred[:500], parsing_timeout=None), timeout_seconds=None))
    except Exception:  # math-verify raises many sympy types on odd input; that is "not equal"
        return False


def answers_match(pred: str, gold: str) -> bool:
    """True if the predicted answer equals the gold answer as a number (or per math-verify).

    >>> answers_match("17.0", "17"), answers_match("$1,700", "1700"), answers_match("18", "17")
    (True, True, False)
    >>> answers_match(r"\\frac{3}{4}", "3/4")
    True
    """
    g = to_number(gold)
    p = to_number(pred)
    if g is not None and p is not None:
        return p == g
    if not pred.strip():
        return False
    return _math_verify(pred, gold)


def first_unhit(chain: Sequence[Fraction], hit: int, value: Fraction) -> int:
    """Index of the first gold chain value equal to ``value`` whose bit in ``hit`` is 0, or -1."""
    for i, c in enumerate(chain):
        if c == value and not (hit >> i) & 1:
            return i
    return -1
