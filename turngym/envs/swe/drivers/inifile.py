"""Hidden cases for ``inifile``: random INI texts parsed and read back through every getter."""

from turngym.envs.swe.drivers._prelude import Raised  # the grader gets the prelude's text here

_SECTIONS = ["a", "Server", "x y", "paths", "b2", " pad ", "", "[nested]", "a"]
_KEYS = ["x", "Key", "port", "mask", "flag", "list", "url", "x y", "DEBUG", "n"]
_VALUES = ["1", "0x1f", "-3", "010", "0o17", "0b11", "abc", "yes", "No", "ON", "off", "true", "0", "maybe", "",
           "a, b,,c", "a;b; c", " spaced ", "http://x:80/a=b", "v ; comment", "v # comment", "v;x", "v#x",
           "a:b", "=eq", "1 2", "TRUE", "False", "  ", "x = y"]
_BOOLS = ["1", "yes", "true", "on", "0", "no", "false", "off", "Yes", "OFF", "2", "y", ""]


def _line(rng):
    kind = rng.random()
    if kind < 0.08:
        return rng.choice(["; c", "# c", "  # indented", "", "   ", "\t; tab"])
    if kind < 0.2:
        name = rng.choice(_SECTIONS)
        return rng.choice([f"[{name}]", f"[{name}]", f"  [{name}]  ", f"[{name}", "[ ]", "[]"])
    if kind < 0.28:
        return rng.choice(["  continued", "\tmore text", "  x = 1", "just words", "=value", ":value", " : x"])
    key, value = rng.choice(_KEYS), rng.choice(_VALUES)
    sep = rng.choice([" = ", "=", ": ", ":", " : ", " =  "])
    return f"{key}{sep}{value}"


def generate(rng, n):
    cases = []
    for _ in range(n):
        lines = [_line(rng) for _ in range(rng.randint(1, 9))]
        if rng.random() < 0.7:
            lines.insert(0, f"[{rng.choice(['a', 'b', 'Server'])}]")
        if rng.random() < 0.3:
            lines.insert(0, f"{rng.choice(_KEYS)} = {rng.choice(_VALUES)}")
        text = "\n".join(lines) + rng.choice(["\n", "", "\n\n"])
        probe = [rng.choice(_KEYS), rng.choice(["a", "b", "Server", "DEFAULT", "nope"])]
        extra = [rng.choice(_SECTIONS), rng.choice(_KEYS), rng.choice(_BOOLS), rng.choice(_VALUES)]
        cases.append({"text": text, "probe": probe, "extra": extra})
    return cases


def _try(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the package's exception is part of what it does
        return Raised(["!", type(exc).__name__, str(exc)[:200], getattr(exc, "lineno", None)])


def _read(cfg, sections):
    out = []
    for sec in sections:
        items = _try(cfg.items, sec)
        keys = sorted(items) if type(items) is dict else []
        out.append([sec, items, _try(cfg.has_section, sec)])
        for key in keys:
            out.append([_try(cfg.get, sec, key.upper()), _try(cfg.get_int, sec, key), _try(cfg.get_bool, sec, key),
                        _try(cfg.get_list, sec, key), _try(cfg.get_list, sec, key, ";")])
    return out


def run(pkg, case):
    cfg = _try(pkg.parse, case["text"])
    if isinstance(cfg, Raised):
        return cfg
    sections = _try(cfg.sections)
    names = (list(sections) if type(sections) is list else []) + ["DEFAULT"]
    key, sec = case["probe"]
    out = [sections, _read(cfg, names)]
    out.append([_try(cfg.get, sec, key), _try(cfg.get, sec, key, fallback="fb"), _try(cfg.get_int, sec, "zz", 7),
                _try(cfg.get_int, sec, "zz"), _try(cfg.get_bool, sec, "zz", True), _try(cfg.get_bool, sec, "zz"),
                _try(cfg.get_list, sec, "zz")])
    text = _try(pkg.dumps, cfg)
    out.append(text)
    if type(text) is str:
        again = _try(pkg.parse, text)
        out.append(_read(again, names) if not isinstance(again, Raised) else again)
    name, k, boolean, value = case["extra"]
    fresh = _try(pkg.Config)
    if not isinstance(fresh, Raised):
        out.append([_try(fresh.add_section, name), _try(fresh.set, name, " " + k + " ", boolean),
                    _try(fresh.set, "nope", k, value), _try(fresh.get_bool, name, k), _try(fresh.get, name, k.lower()),
                    _try(fresh.sections), _try(pkg.dumps, fresh)])
    return out
