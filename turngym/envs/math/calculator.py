"""A safe calculator: arithmetic over exact rationals, no ``eval`` of model text.

The expression is parsed with :mod:`ast` and walked over a whitelist of node types (numbers,
``+ - * / // % **``, unary signs, parentheses and a few functions). Names, attributes,
subscripts, lambdas, comprehensions — anything else — are rejected before anything runs.
Sizes are bounded (expression length, node count, exponent and result magnitude) so that
``9**9**9`` is an error message, not a hung worker.
"""

from __future__ import annotations

import ast
import decimal
import math
import operator
from fractions import Fraction
from functools import lru_cache

from turngym.core.parsing import parse_python

__all__ = ["CalcError", "evaluate", "format_number", "calculate"]

MAX_EXPR_CHARS = 300
MAX_NODES = 200
MAX_RESULT_BITS = 4096  # about 1e1233: plenty for word problems, bounded for the worker

Number = Fraction | float


class CalcError(ValueError):
    """The expression is not allowed or cannot be evaluated; the message is for the agent."""


def _check(x: Number) -> Number:
    if isinstance(x, float):
        if not math.isfinite(x):
            raise CalcError("result is not a finite number")
    elif max(x.numerator.bit_length(), x.denominator.bit_length()) > MAX_RESULT_BITS:
        raise CalcError("result too large")
    return x


def _pow(a: Number, b: Number) -> Number:
    if isinstance(b, Fraction) and b.denominator == 1:
        e = b.numerator
        if abs(e) > 10_000:
            raise CalcError("exponent too large")
        if isinstance(a, Fraction):
            bits = max(a.numerator.bit_length(), a.denominator.bit_length())
            if bits * abs(e) > MAX_RESULT_BITS:
                raise CalcError("result too large")
            if a == 0 and e < 0:
                raise CalcError("division by zero")
        return a**e
    if a < 0:
        raise CalcError("fractional power of a negative number")
    return float(a) ** float(b)


def _div(a: Number, b: Number) -> Number:
    if b == 0:
        raise CalcError("division by zero")
    return a / b


def _floordiv(a: Number, b: Number) -> Number:
    if b == 0:
        raise CalcError("division by zero")
    return Fraction(math.floor(a / b))


def _mod(a: Number, b: Number) -> Number:
    if b == 0:
        raise CalcError("modulo by zero")
    return a % b


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _div,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.Pow: _pow,
}


def _sqrt(x: Number) -> Number:
    if x < 0:
        raise CalcError("square root of a negative number")
    if isinstance(x, Fraction):
        n, d = math.isqrt(x.numerator), math.isqrt(x.denominator)
        if n * n == x.numerator and d * d == x.denominator:
            return Fraction(n, d)
    return math.sqrt(x)


def _round(x: Number, nd: Number = Fraction(0)) -> Number:
    digits = int(nd)
    if abs(digits) > 20:
        raise CalcError("round: too many digits")
    return Fraction(round(Fraction(x), digits))


_FUNCS = {
    "abs": (abs, 1, 1),
    "sqrt": (_sqrt, 1, 1),
    "floor": (lambda x: Fraction(math.floor(x)), 1, 1),
    "ceil": (lambda x: Fraction(math.ceil(x)), 1, 1),
    "round": (_round, 1, 2),
    "min": (min, 1, 16),
    "max": (max, 1, 16),
}


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise CalcError(f"only numbers are allowed, got {type(v).__name__}")
        if isinstance(v, float):
            # Decimal literals are exact: 0.1 is 1/10, not 0.1000000000000000055...
            return Fraction(repr(v)) if math.isfinite(v) else _check(v)
        return Fraction(v)
    if isinstance(node, ast.BinOp):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise CalcError(f"operator {type(node.op).__name__} is not allowed")
        return _check(op(_eval(node.left), _eval(node.right)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        spec = _FUNCS.get(node.func.id)
        if spec is None:
            raise CalcError(f"unknown function {node.func.id!r}; allowed: {', '.join(sorted(_FUNCS))}")
        fn, lo, hi = spec
        if not lo <= len(node.args) <= hi:
            raise CalcError(f"{node.func.id}() takes {lo}..{hi} arguments")
        return _check(fn(*(_eval(a) for a in node.args)))
    if isinstance(node, ast.Call):
        raise CalcError(f"only plain calls to {', '.join(sorted(_FUNCS))} are allowed")
    if isinstance(node, ast.Name):
        raise CalcError(f"unknown name {node.id!r}: only numbers and + - * / // % ** ( ) are allowed")
    raise CalcError(f"{type(node).__name__} is not allowed in a calculation")


_TRANSLATE = str.maketrans({"×": "*", "÷": "/", "^": "**", "−": "-", "–": "-"})


@lru_cache(maxsize=65536)
def calculate(expr: str) -> tuple[Number | None, str | None]:
    """Evaluate ``expr``; returns ``(value, None)`` or ``(None, error message)``. Cached: pure."""
    try:
        return evaluate(expr), None
    except CalcError as exc:
        return None, str(exc)


def evaluate(expr: str) -> Number:
    """Evaluate an arithmetic expression exactly where possible.

    >>> evaluate("3 * (4 + 5) / 2")
    Fraction(27, 2)
    >>> evaluate("2^10")
    Fraction(1024, 1)
    >>> evaluate("__import__('os')")
    Traceback (most recent call last):
    ...
    turngym.envs.math.calculator.CalcError: unknown function '__import__'; allowed: abs, ceil, floor, max, min, round, sqrt
    """
    if len(expr) > MAX_EXPR_CHARS:
        raise CalcError(f"expression too long ({len(expr)} > {MAX_EXPR_CHARS} characters)")
    text = expr.translate(_TRANSLATE).strip()
    if text.endswith("="):
        text = text[:-1]
    parsed = parse_python(text, mode="eval")  # never raises: NULs, surrogates, chains too deep for the parser
    if not parsed.ok or not isinstance(parsed.value, ast.Expression):
        raise CalcError(f"cannot parse {expr!r} as arithmetic")
    tree = parsed.value
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalcError("expression too complex")
    try:
        return _eval(tree.body)
    except CalcError:
        raise
    except (OverflowError, ZeroDivisionError, ValueError) as exc:
        # Mixed exact/float arithmetic near the size bound (a 4096-bit rational has no float)
        raise CalcError(f"cannot evaluate: {exc}") from None


def format_number(x: Number) -> str:
    """Integers print as integers, other rationals as up to 10 significant digits.

    >>> format_number(Fraction(12, 1)), format_number(Fraction(1, 3)), format_number(2.5)
    ('12', '0.3333333333', '2.5')
    >>> format_number(Fraction(10**400, 3)), format_number(Fraction(1, 10**400))
    ('3.333333333E+399', '1E-400')
    """
    if isinstance(x, Fraction) and x.denominator == 1:
        return str(x.numerator)
    try:
        f = float(x)
    except OverflowError:  # a rational beyond float range: 10 significant digits, exactly
        f = 0.0
    if f == 0.0 and x != 0:
        with decimal.localcontext() as ctx:
            ctx.prec = 10
            return str(decimal.Decimal(x.numerator) / decimal.Decimal(x.denominator))
    if f.is_integer() and abs(f) < 1e16:
        return str(int(f))
    return f"{f:.10g}"
