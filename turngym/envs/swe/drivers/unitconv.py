"""Hidden cases for ``unitconv``: conversions, quantities, parsing and formatting."""

from turngym.envs.swe.drivers._prelude import Raised, _try  # the grader gets the prelude's text here

_UNITS = ["mm", "cm", "m", "km", "in", "ft", "yd", "mi", "mg", "g", "kg", "t", "oz", "lb", "ms", "s", "min", "h", "d",
          "wk", "b", "kb", "mb", "gb", "kib", "mib", "gib", "c", "f", "k", "C", " F ", "Kelvin", "°C", "°f", "meters",
          "Feet", "lbs", "hr", "sec", "parsec", "", "KM"]
_TEMPS = ["c", "f", "k", "celsius", "Fahrenheit", "K"]


def generate(rng, n):
    cases = []
    for _ in range(n):
        value = rng.choice([0, 1, 2.5, -40, 100, 1500, -300, -500, 37, 0.001, 212, 1e6, -1, 273.15, 3])
        temp = rng.random() < 0.35
        src = rng.choice(_TEMPS if temp else _UNITS)
        dst = rng.choice(_TEMPS if temp and rng.random() < 0.8 else _UNITS)
        text = rng.choice(["3.5 km", "-40F", " 1e3 m ", "+2 °C", "abc", "3", "5 parsecs", "12kg", "2.5e-1 h",
                           "7 LBS", "-0.5 mi", "1E2 Kib", "10 k", "0 c", "3.14159 ft", f"{value} {src}"])
        digits = rng.choice([None, 0, 1, 2, 3])
        cases.append({"value": value, "src": src, "dst": dst, "text": text, "digits": digits,
                      "other": [rng.choice([0, 1, 2.5, -3, 1000]), rng.choice(_UNITS)]})
    return cases




def _q(q):
    return q if isinstance(q, Raised) else [q.value, q.unit]


def _fmt(pkg, q, digits):
    if isinstance(q, Raised):
        return q
    return _try(pkg.format_quantity, q) if digits is None else _try(pkg.format_quantity, q, digits)


def run(pkg, case):
    v, src, dst = case["value"], case["src"], case["dst"]
    out = [_try(pkg.convert, v, src, dst), _try(pkg.convert, v, dst, src), _try(pkg.dimension, src),
           _try(pkg.dimension, dst), _try(pkg.convert, -v, src, src)]
    q = _try(pkg.Quantity, v, src.strip().lower())
    other = _try(pkg.Quantity, *case["other"])
    if not isinstance(q, Raised):
        out += [_q(_try(q.to, dst)), _q(_try(lambda: q + other)), _q(_try(lambda: other + q)),
                _fmt(pkg, q, case["digits"]), _fmt(pkg, _try(q.to, dst), case["digits"])]
    p = _try(pkg.parse, case["text"])
    out += [_q(p), _fmt(pkg, p, case["digits"]), _fmt(pkg, _try(pkg.Quantity, -v / 1000, "m"), case["digits"])]
    return out
