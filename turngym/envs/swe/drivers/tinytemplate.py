"""Hidden cases for ``tinytemplate``: random templates (tags, filters, loops) and contexts."""

from turngym.envs.swe.drivers._prelude import Raised, _try  # the grader gets the prelude's text here

_NAMES = ["name", "xs", "user.name", "user.tags", "xs.0", "xs.1", "xs.-1", "xs.5", "xs.-9", "n", "empty", "nope",
          "user", "html", "zero", "none", "user.missing", "nums", "nums.2", "loop.index", "loop.index0",
          "loop.first", "loop.last", "item", "item.k", "'lit'", '"q q"', "3", "-2", "0", "s"]
_FILTERS = ["upper", "lower", "title", "strip", "length", "first", "last", "join", "safe", "shout"]


_LOOP = ["loop.index", "loop.index0", "loop.first", "loop.last", "item", "item.k", "item|upper"]
_OBJ = ["obj.email", "obj.name", "obj.missing", "obj.0", "obj.email|upper"]


def _expr(rng, loop=False):
    e = rng.choice(_LOOP if loop and rng.random() < 0.6 else _OBJ if rng.random() < 0.06 else _NAMES)
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        e += rng.choice(["|", " | ", "|"]) + rng.choice(_FILTERS[:-2] + ["shout"] if rng.random() < 0.1 else _FILTERS[:-2])
    if rng.random() < 0.15:
        e += "|safe"
    return e


def _cond(rng, loop=False):
    kind = rng.random()
    if kind < 0.4:
        c = _expr(rng, loop)
    else:
        c = f"{_expr(rng, loop)} {rng.choice(['==', '!='])} {rng.choice(_LOOP[:4] if loop else _NAMES)}"
    return ("not " + c) if rng.random() < 0.3 else c


def _template(rng, depth=0, loop=False):
    parts = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.3:
            parts.append(rng.choice(["hi ", "<b>", " & ", "x", "\n", "[", "]", " "]))
        elif kind < 0.6:
            parts.append("{{ " + _expr(rng, loop) + " }}" if rng.random() < 0.9 else "{{" + _expr(rng, loop) + "}}")
        elif kind < 0.75 and depth < 2:
            body = _template(rng, depth + 1, loop)
            orelse = "{% else %}" + _template(rng, depth + 1, loop) if rng.random() < 0.5 else ""
            parts.append("{% if " + _cond(rng, loop) + " %}" + body + orelse + "{% endif %}")
        elif kind < 0.92 and depth < 2:
            body = _template(rng, depth + 1, True)
            orelse = "{% else %}" + _template(rng, depth + 1, loop) if rng.random() < 0.4 else ""
            seq = rng.choice(["xs", "nums", "empty", "user.tags", "items", "nope", "name", "none"])
            parts.append("{% for item in " + seq + " %}" + body + orelse + "{% endfor %}")
        elif depth > 0 or rng.random() < 0.6:
            parts.append("{{ " + _expr(rng, loop) + " }}")
        else:
            parts.append(rng.choice(["{% %}", "{% bogus %}", "{% for x %}", "{% for x on xs %}", "{% else %}",
                                     "{% endif %}", "{% endfor %}", "{% if x %}", "{% for a in xs %}{% endif %}",
                                     "{% if a %}{% endfor %}", "{% for x in xs y %}", "{% for x in %}", "{% for a b c %}", "{{ }}", "{{ x|nope }}", "{{ 'a' }}"]))
    return "".join(parts)


class Obj:
    """An object in the context: the template reads its attributes (never renders it whole)."""

    def __init__(self, email):
        self.email = email
        self.name = "obj"


def generate(rng, n):
    cases = []
    for _ in range(n):
        ctx = {
            "name": rng.choice(["Ann", "  bo b ", "<x>", "", "hello big  world"]),
            "xs": rng.choice([["a", "b", "c"], [], ["<i>"], ["only"], [1, 2]]),
            "user": rng.choice([{"name": "Bo", "tags": ["t1", "t2"]}, {"name": "", "tags": []}, {}]),
            "n": rng.choice([0, 1, 3, -2]), "empty": [], "html": "<b>&\"'", "zero": 0, "none": None,
            "nums": [1, 2, 3, 4], "s": rng.choice(["a b", "ab", "x  y"]),
            "items": rng.choice([[{"k": "v1"}, {"k": "v2"}], [], [{"k": 3}]]),
        }
        cases.append({"src": _template(rng), "ctx": ctx, "autoescape": rng.random() < 0.8})
    # malformed block structure, each alone (a random template rarely reaches these paths)
    for i, bad in enumerate(["{% else %}", "a{% else %}b", "{% if name %}x", "{% for item in xs %}{{ item }}",
                             "{% endif %}", "{% endfor %}", "{% if n %}{% endfor %}", "{% for item in xs %}{% endif %}",
                             "{% %}", "{% bogus %}", "{% for x in xs y %}", "{{ }}", "{{ x|nope }}"]):
        cases.append({"src": bad, "ctx": cases[i]["ctx"], "autoescape": True})
    return cases




def run(pkg, case):
    src, ctx = case["src"], {**case["ctx"], "obj": Obj(case["ctx"]["name"])}
    t = _try(pkg.Template, src, autoescape=case["autoescape"])
    out = [_try(pkg.render, src, **ctx)]
    if not isinstance(t, Raised):
        out += [_try(t.render, **ctx), _try(t.render), _try(t.render, **{**ctx, "xs": ctx["nums"], "n": 1})]
    else:
        out.append(t)
    return out
