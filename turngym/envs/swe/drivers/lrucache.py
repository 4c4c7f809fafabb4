"""Hidden cases for ``lrucache``: random operation sequences (with a fake clock) and memoize."""

from turngym.envs.swe.drivers._prelude import Raised, _try  # the grader gets the prelude's text here

_KEYS = ["a", "b", "c", "d", 1, 2, None, (1, 2)]


def generate(rng, n):
    cases = []
    ops = ["put", "put", "put", "get", "get", "getd", "peek", "peekd", "del", "in", "len", "keys", "tick", "tick",
           "resize", "clear", "stats"]
    for _ in range(n):
        seq = []
        for _ in range(rng.randint(4, 16)):
            op = rng.choice(ops)
            key = rng.choice(range(len(_KEYS)))
            arg = rng.choice([0, 1, 2, 3, 5, 9.5, 10, 0.5]) if op == "tick" else rng.choice([0, 1, 1, 2, 3, 5]) if op == "resize" \
                else rng.randint(0, 99)
            seq.append([op, key, arg])
        memo = [[rng.randint(0, 4), rng.randint(0, 2)] for _ in range(rng.randint(2, 10))]
        cases.append({"capacity": rng.choice([-1, 0, 1, 1, 2, 2, 3, 4]), "ttl": rng.choice([None, None, 0, -1, 1, 2.5, 10]),
                      "ops": seq, "memo": memo, "maxsize": rng.choice([None, 1, 2, 3])})
    cases.append({"capacity": 2, "ttl": None, "ops": [], "memo": [[i, 0] for i in range(130)] + [[0, 0], [1, 0]],
                  "maxsize": None})
    return cases


class Clock:
    """The cases' clock: the package reads it through a call."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Calls:
    """The function the cases memoize: counts its calls."""

    def __init__(self):
        self.count = 0

    def __call__(self, x, y=0):
        self.count += 1
        return None if x == 3 else [x, y, self.count]




def _stats(c):
    s = c.stats
    return [s.hits, s.misses, s.evictions, s.hit_rate]


def _ops(pkg, case):
    clock = Clock()
    kwargs = {"clock": clock} if case["ttl"] is None else {"ttl": case["ttl"], "clock": clock}
    c = _try(pkg.LRUCache, case["capacity"], **kwargs)
    if isinstance(c, Raised):
        return [c]
    out = [c.capacity, c.ttl]
    for op, k, arg in case["ops"]:
        key = _KEYS[k]
        key = tuple(key) if type(key) is list else key
        if op == "put":
            out.append(_try(c.put, key, arg))
        elif op == "get":
            out.append(_try(c.get, key))
        elif op == "getd":
            out.append(_try(c.get, key, "dflt"))
        elif op == "peek":
            out.append(_try(c.peek, key))
        elif op == "peekd":
            out.append(_try(c.peek, key, "dflt"))
        elif op == "del":
            out.append(_try(c.delete, key))
        elif op == "in":
            out.append(_try(c.__contains__, key))
        elif op == "len":
            out.append(_try(len, c))
        elif op == "keys":
            out.append([list(x) if type(x) is tuple else x for x in _try(c.keys)])
        elif op == "tick":
            clock.now += arg
        elif op == "resize":
            out.append(_try(c.resize, int(arg)))
        elif op == "clear":
            out.append(_try(c.clear))
        else:
            out.append(_stats(c))
    if c.ttl is not None:  # an entry at its expiry, one before it
        _try(c.put, "z", 1)
        clock.now += c.ttl / 2
        _try(c.put, "y", 2)
        out += [_try(c.get, "z"), _try(c.peek, "y"), _try(lambda: "z" in c)]
        clock.now += c.ttl / 2
        out += [_try(c.get, "z", "gone"), _try(c.peek, "z"), _try(c.get, "y"), _try(lambda: "y" in c), _try(len, c)]
    out.append(_stats(c))
    out.append(_try(c.keys))
    return out


def _memo(pkg, case):
    calls = Calls()
    deco = pkg.memoize() if case["maxsize"] is None else pkg.memoize(maxsize=case["maxsize"])
    fn = deco(calls)
    out = []
    for x, y in case["memo"]:
        out.append(_try(fn, x) if y == 0 else _try(fn, x, y=y))
    out.append(calls.count)
    out.append(_stats(fn.cache))
    out.append(fn.cache.capacity)
    return out


def run(pkg, case):
    return [_ops(pkg, case), _memo(pkg, case)]
