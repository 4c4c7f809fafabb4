"""Convert quantities between units of length, mass, time, data and temperature.

Linear units are stored as a factor to the dimension's base unit; temperature is affine and
handled separately. ``parse("3.5 km")`` reads a quantity from text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["UnitError", "Quantity", "convert", "parse", "dimension", "format_quantity"]

_LINEAR: dict[str, dict[str, float]] = {
    "length": {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048, "yd": 0.9144, "mi": 1609.344},
    "mass": {"mg": 0.001, "g": 1.0, "kg": 1000.0, "t": 1_000_000.0, "oz": 28.349523125, "lb": 453.59237},
    "time": {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "wk": 604800.0},
    "data": {"b": 1.0, "kb": 1000.0, "mb": 1e6, "gb": 1e9, "kib": 1024.0, "mib": 1024.0**2, "gib": 1024.0**3},
}
_TEMPERATURE = ("c", "f", "k")
_ALIASES = {
    "meter": "m", "meters": "m", "metre": "m", "kilometer": "km", "kilometers": "km", "inch": "in",
    "inches": "in", "foot": "ft", "feet": "ft", "mile": "mi", "miles": "mi", "gram": "g", "grams": "g",
    "kilogram": "kg", "kilograms": "kg", "pound": "lb", "pounds": "lb", "lbs": "lb", "second": "s",
    "seconds": "s", "sec": "s", "minute": "min", "minutes": "min", "hour": "h", "hours": "h", "hr": "h",
    "day": "d", "days": "d", "week": "wk", "weeks": "wk", "celsius": "c", "fahrenheit": "f", "kelvin": "k",
    "°c": "c", "°f": "f",
}
ABSOLUTE_ZERO_C = -273.15


class UnitError(ValueError):
    """Unknown unit, incompatible dimensions, or an unparsable quantity."""


def canonical(unit: str) -> str:
    u = unit.strip().lower()
    return _ALIASES.get(u, u)


def dimension(unit: str) -> str:
    u = canonical(unit)
    if u in _TEMPERATURE:
        return "temperature"
    for dim, table in _LINEAR.items():
        if u in table:
            return dim
    raise UnitError(f"unknown unit {unit!r}")


def _to_celsius(value: float, unit: str) -> float:
    if unit == "c":
        return value
    if unit == "f":
        return (value - 32) * 5 / 9
    return value + ABSOLUTE_ZERO_C


def _from_celsius(value: float, unit: str) -> float:
    if unit == "c":
        return value
    if unit == "f":
        return value * 9 / 5 + 32
    return value - ABSOLUTE_ZERO_C


def convert(value: float, src: str, dst: str) -> float:
    """Convert ``value`` from unit ``src`` to unit ``dst``."""
    s, d = canonical(src), canonical(dst)
    ds, dd = dimension(s), dimension(d)
    if ds != dd:
        raise UnitError(f"cannot convert {ds} ({src}) to {dd} ({dst})")
    if ds == "temperature":
        celsius = _to_celsius(value, s)
        if celsius < ABSOLUTE_ZERO_C:
            raise UnitError("temperature below absolute zero")
        return _from_celsius(celsius, d)
    table = _LINEAR[ds]
    return value * table[s] / table[d]


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str

    def to(self, unit: str) -> Quantity:
        return Quantity(convert(self.value, self.unit, unit), canonical(unit))

    def __add__(self, other: Quantity) -> Quantity:
        if dimension(self.unit) == "temperature":
            raise UnitError("adding temperatures is ambiguous")
        return Quantity(self.value + other.to(self.unit).value, self.unit)


_QTY = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*([a-zA-Z°]+)\s*$", re.IGNORECASE)


def parse(text: str) -> Quantity:
    """Parse ``"3.5 km"`` / ``"-40F"`` into a :class:`Quantity` with a canonical unit."""
    m = _QTY.match(text)
    if m is None:
        raise UnitError(f"cannot parse quantity {text!r}")
    unit = canonical(m.group(2))
    dimension(unit)  # validates
    return Quantity(float(m.group(1)), unit)


def format_quantity(q: Quantity, digits: int = 2) -> str:
    """``Quantity(1500.0, "m")`` → ``"1500 m"``; trailing zeros trimmed."""
    text = f"{q.value:.{digits}f}".rstrip("0").rstrip(".")
    if text in ("-0", ""):
        text = "0"
    return f"{text} {q.unit}"
