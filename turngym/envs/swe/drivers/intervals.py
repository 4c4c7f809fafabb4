"""Hidden cases for ``intervals``: random intervals, sets of them, and every operation."""

from turngym.envs.swe.drivers._prelude import Raised, _try  # the grader gets the prelude's text here


def _num(rng):
    return rng.choice([rng.randint(-3, 12), rng.randint(0, 20) / 2])


def generate(rng, n):
    cases = []
    for _ in range(n):
        ivs = []
        for _ in range(rng.randint(0, 6)):
            a = _num(rng)
            b = a + rng.choice([0, 0.5, 1, 2, 3, 5, -1]) if rng.random() < 0.95 else a
            ivs.append([a, b])
        others = []
        for _ in range(rng.randint(0, 4)):
            a = _num(rng)
            others.append([a, a + rng.choice([0, 1, 2, 4, 0.5])])
        cut, lo = _num(rng), _num(rng) - 2
        cases.append({"ivs": ivs, "others": others, "cut": [cut, cut + rng.choice([0, 1, 2, 3, 6])],
                      "within": [lo, lo + rng.choice([0.5, 1, 3, 6, 12])], "xs": [_num(rng) for _ in range(4)],
                      "delta": rng.choice([-2, -0.5, 0, 1, 3])})
    return cases




def _iv(iv):
    if iv is None or isinstance(iv, Raised):
        return iv
    return [iv.start, iv.end]


def _ivs(many):
    return many if isinstance(many, Raised) else [_iv(iv) for iv in many]


def _set(s):
    if isinstance(s, Raised):
        return s
    return [_iv(iv) for iv in s] + [len(s), s.total_length]


def run(pkg, case):
    Interval, IntervalSet = pkg.Interval, pkg.IntervalSet
    made = [_try(Interval, a, b) for a, b in case["ivs"]]
    ivs = [iv for iv in made if not isinstance(iv, Raised)]
    out = [[_iv(iv) for iv in made]]
    xs = case["xs"]
    for i, iv in enumerate(ivs):
        nxt = ivs[(i + 1) % len(ivs)]
        out.append([iv.length, _try(iv.is_empty), [_try(iv.contains, x) for x in xs + [iv.start, iv.end]],
                    _try(iv.overlaps, nxt), _try(iv.touches, nxt), _iv(_try(iv.intersection, nxt)),
                    _iv(_try(iv.hull, nxt)), _iv(_try(iv.shift, case["delta"])),
                    _ivs(_try(iv.split, (iv.start + iv.end) / 2)),
                    _ivs(_try(iv.split, iv.start)), _ivs(_try(iv.split, xs[0]))])
    out.append(_ivs(_try(pkg.merge, ivs)))
    s = _try(IntervalSet, ivs)
    if isinstance(s, Raised):
        return out + [s]
    others = [Interval(a, b) for a, b in case["others"]]
    o = _try(IntervalSet, others)
    out.append([_set(s), _set(o), _set(_try(IntervalSet))])
    out.append([_try(s.contains, x) for x in xs + [x + 0.5 for x in xs] + [iv.end for iv in ivs] + [iv.start for iv in ivs]])
    out.append([_set(_try(s.union, o)), _set(_try(s.intersection, o)), _set(_try(o.intersection, s)),
                _ivs(_try(s.gaps, Interval(*case["within"]))),
                _ivs(_try(o.gaps, Interval(*case["within"])))])
    out.append([_try(lambda: s == o), _try(lambda: s == IntervalSet(list(ivs))), _try(lambda: s == 3),
                _try(lambda: s == IntervalSet(list(reversed(ivs)))), _try(lambda: o == IntervalSet(others[:1]))])
    cut = Interval(*case["cut"])
    _try(s.remove, cut)
    out.append(_set(s))
    for iv in others:
        _try(s.add, iv)
    out.append(_set(s))
    _try(o.remove, Interval(case["within"][0], case["within"][0] + 1))
    out.append(_set(o))
    return out
