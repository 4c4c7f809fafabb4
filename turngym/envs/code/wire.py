"""Plain data across the grader's process boundaries (stdlib only; also runs in the sandbox).

The solution under test runs in its own process, and the only thing that may come back from
it is *plain data*: None, bool, int, float, complex, str, bytes, and lists, tuples, sets,
frozensets and dicts of them. Values travel as JSON with one-key objects tagging containers
(``{"L": [...]}`` a list, ``{"T": ...}`` a tuple, ...), and :func:`decode_obj` rebuilds only
those exact types, whatever the sender claims, so no object the solution made (an ``__eq__``
that is always true, an ``int`` subclass, a patched ``__repr__``) ever reaches the code that
judges it. Both directions are size- and depth-limited so a hostile value cannot exhaust the
reader. Nothing is unpickled and nothing is ``eval``-ed.

``json`` and ``base64`` are imported only when needed, and :func:`dumps` uses the C encoder
directly: the solution's process starts as a fresh interpreter for every step, and ``json``
would drag ``re`` and friends into that start.

:func:`same_value` is the comparison used wherever a result is judged: equal types,
recursively (``True`` is not ``1``, ``1`` is not ``1.0``).
"""

__all__ = [
    "MAX_DEPTH",
    "MAX_FRAME",
    "PAYLOAD_FILE",
    "WORKDIR_ENV",
    "encode_obj",
    "decode_obj",
    "encode",
    "decode",
    "same_value",
    "dumps",
]

#: Containers nest at most this deep (a deeper value is not plain data).
MAX_DEPTH = 100
#: The largest message between the grader and the solution's process, in bytes.
MAX_FRAME = 1 << 20
#: The file (in the sandbox's workdir) that carries the grader's input; the grader deletes it
#: before any solution code runs, so the hidden tests never pass through a process the
#: solution can read.
PAYLOAD_FILE = ".turngym-grader.json"
#: Environment variable that tells a zygote started afresh (in "/") where the working dir is.
WORKDIR_ENV = "TURNGYM_GRADER_WORKDIR"

_TAGS = {list: "L", tuple: "T", set: "S", frozenset: "F"}


def encode_obj(value, depth=0):
    """``value`` as a JSON-able tree, or TypeError/ValueError if it is not plain data."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the value is nested more than {MAX_DEPTH} levels deep")
    t = type(value)
    if value is None or t is bool or t is int or t is float or t is str:
        return value
    tag = _TAGS.get(t)
    if tag is not None:
        return {tag: [encode_obj(x, depth + 1) for x in value]}
    if t is dict:
        return {"D": [[encode_obj(k, depth + 1), encode_obj(v, depth + 1)] for k, v in value.items()]}
    if t is bytes:
        import base64

        return {"B": base64.b64encode(value).decode("ascii")}
    if t is complex:
        return {"C": [value.real, value.imag]}
    raise TypeError(f"a {t.__name__} is not plain data (None, bool, int, float, complex, str, bytes, "
                    "and lists, tuples, sets, frozensets, dicts of them)")


def decode_obj(obj, depth=0):
    """Rebuild a plain value from :func:`encode_obj`'s tree; ValueError if it is anything else."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the value is nested more than {MAX_DEPTH} levels deep")
    t = type(obj)
    if obj is None or t is bool or t is int or t is float or t is str:
        return obj
    if t is not dict or len(obj) != 1:
        raise ValueError("not an encoded plain value")
    ((tag, body),) = obj.items()
    import base64
    import binascii

    try:
        if tag == "B" and type(body) is str:
            return base64.b64decode(body.encode("ascii"), validate=True)
        if type(body) is not list:
            raise ValueError("not an encoded plain value")
        if tag == "C" and len(body) == 2 and all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
        if tag == "D":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("not an encoded dict item")
                out[decode_obj(pair[0], depth + 1)] = decode_obj(pair[1], depth + 1)
            return out
        items = [decode_obj(x, depth + 1) for x in body]
        if tag == "L":
            return items
        if tag == "T":
            return tuple(items)
        if tag == "S":
            return set(items)
        if tag == "F":
            return frozenset(items)
    except (TypeError, UnicodeError, binascii.Error) as exc:  # unhashable keys, bad base64
        raise ValueError(f"not an encoded plain value ({exc})") from None
    raise ValueError(f"unknown tag {tag!r}")


def encode(value, limit=MAX_FRAME):
    """``value`` as JSON text of at most ``limit`` characters (TypeError/ValueError otherwise)."""
    text = dumps(encode_obj(value))
    if len(text) > limit:
        raise ValueError(f"the value is too large ({len(text)} characters as text, the limit is {limit})")
    return text


def decode(text, limit=MAX_FRAME):
    """The plain value :func:`encode` wrote; ValueError for anything else (never crashes)."""
    if type(text) is not str or len(text) > limit:
        raise ValueError("not an encoded value, or too large")
    import json

    try:
        return decode_obj(json.loads(text))
    except (RecursionError, MemoryError, OverflowError) as exc:
        raise ValueError(f"the value could not be read back ({type(exc).__name__})") from None


def same_value(a, b):
    """Equality that also requires equal types, recursively (bool is not int, 1 is not 1.0),
    dict keys and set members included (they compare equal across those types).

    >>> same_value({1: "a"}, {True: "a"}), same_value({(1,)}, {(1.0,)}), same_value({(1, 2.0)}, {(1, 2.0)})
    (False, False, True)
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(b)) or (a != a and b != b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return same_value(set(a), set(b)) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (set, frozenset)):
        # Equal sets of equal types list their members in the same order by repr.
        return a == b and all(same_value(x, y) for x, y in zip(sorted(a, key=repr), sorted(b, key=repr)))
    return bool(a == b)


def dumps(obj):
    """Compact JSON text of a tree of JSON types (what :func:`encode_obj` returns)."""
    try:
        import _json

        encoder = _json.make_encoder(None, None, _json.encode_basestring_ascii, None, ":", ",", False, False, True)
    except (ImportError, AttributeError, TypeError):
        import json

        return json.dumps(obj, separators=(",", ":"))
    return "".join(encoder(obj, 0))
