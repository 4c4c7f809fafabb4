"""Plain data across a sandbox's process boundaries: one codec for every trusted program inside.

A value crosses as a JSON tree. ``None``, ``bool``, ``str``, a finite ``float`` and an ``int``
that fits in 64 bits are themselves; every other kind is a one-key object whose key is its tag:

====  =============================  =================================================================
tag   kind                           body, and why this representation
====  =============================  =================================================================
L     list                           the items
T     tuple                          the items
S     set                            the items
F     frozenset                      the items
D     dict                           ``[key, value]`` pairs (keys may be any plain value, not only str)
I     int past 64 bits               hexadecimal text (``"-1f"``): base 16 is exempt from Python's
                                     4300-digit int/str limit and converts in linear time both ways,
                                     so any int the frame size allows crosses (a JSON number of that
                                     size cannot be written, and other readers truncate past 64 bits)
X     float NaN, inf, -inf           ``"nan"``, ``"inf"``, ``"-inf"``: the text stays strict JSON
                                     (``NaN`` literals are a Python extension other readers refuse)
C     complex                        ``[real, imag]``, each encoded as a float (so a NaN part is X)
B     bytes                          base64 text (``binascii``, a small C extension, not ``base64``; a third
                                     larger instead of hex's double, and frames are size-limited)
====  =============================  =================================================================

Strings keep lone surrogates (the text is ASCII, surrogates escaped). :func:`decode_obj` rebuilds
*exactly* these types whatever the sender claims, so no object the untrusted side made (an
``__eq__`` that is always true, an ``int`` subclass, a patched ``__repr__``) reaches the code that
judges it. Both directions are depth-limited (and :func:`encode`/:func:`decode` size-limited), so
a hostile value cannot exhaust the reader. Nothing is unpickled and nothing is ``eval``-ed.

Other kinds can cross as references: :func:`encode_obj`'s ``ref`` hook turns any value that is not
plain data (a subclass of a plain type included) into a tagged object of the caller's own (SWE-v0's
split grader sends handles), and :func:`decode_obj`'s ``deref`` hook rebuilds tags the codec does
not know. Without hooks such values are refused.

``json`` is imported only when text is read; :func:`dumps` uses the C encoder directly: a
solution's process starts as a fresh interpreter, and ``json`` would drag ``re`` and friends into
that start. Stdlib only: this module also runs inlined in ``python -I -S -B -c`` programs
(:func:`turngym.sandbox.inline.inside_prelude`).
"""

__all__ = ["MAX_DEPTH", "encode_obj", "decode_obj", "encode", "decode", "dumps", "same_value"]

#: Containers nest at most this deep (a deeper value is not plain data).
MAX_DEPTH = 100
_INT_LIMIT = 1 << 63
_TAGS = {list: "L", tuple: "T", set: "S", frozenset: "F"}
_BUILDERS = {"L": list, "T": tuple, "S": set, "F": frozenset}
_FLOAT_WORDS = ("nan", "inf", "-inf")


def _not_plain(value):
    raise TypeError(f"a {type(value).__name__} is not plain data (None, bool, int, float, complex, str, bytes, "
                    "and lists, tuples, sets, frozensets, dicts of them)")


def _unknown_tag(tag, body):
    raise ValueError(f"unknown tag {str(tag)[:20]!r}")


def encode_obj(value, ref=_not_plain, depth=0):
    """``value`` as a JSON-able tree; a value that is not plain data becomes ``ref(value)``
    (by default a TypeError). ValueError past :data:`MAX_DEPTH`."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the value is nested more than {MAX_DEPTH} levels deep")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return value if -_INT_LIMIT < value < _INT_LIMIT else {"I": format(value, "x")}
    if t is float:
        return value if value - value == 0.0 else {"X": repr(value)}  # inf - inf and nan - nan are nan
    tag = _TAGS.get(t)
    if tag is not None:
        return {tag: [encode_obj(x, ref, depth + 1) for x in value]}
    if t is dict:
        return {"D": [[encode_obj(k, ref, depth + 1), encode_obj(v, ref, depth + 1)] for k, v in value.items()]}
    if t is bytes:
        import binascii

        return {"B": binascii.b2a_base64(value, newline=False).decode("ascii")}
    if t is complex:
        return {"C": [encode_obj(value.real), encode_obj(value.imag)]}
    return ref(value)


def _items(body, deref, depth, tag):
    if type(body) is not list:
        raise ValueError("not an encoded plain value")
    return _BUILDERS[tag](decode_obj(x, deref, depth + 1) for x in body)


def _dict(body, deref, depth, _tag):
    if type(body) is not list:
        raise ValueError("not an encoded plain value")
    out = {}
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise ValueError("not an encoded dict item")
        out[decode_obj(pair[0], deref, depth + 1)] = decode_obj(pair[1], deref, depth + 1)
    return out


def _int(body, _deref, _depth, _tag):
    if type(body) is not str or not body.isascii():
        raise ValueError("not an encoded int")
    return int(body, 16)


def _float(body, _deref, _depth, _tag):
    if type(body) is not str or body not in _FLOAT_WORDS:
        raise ValueError("not an encoded float")
    return float(body)


def _complex(body, deref, depth, _tag):
    if type(body) is not list or len(body) != 2:
        raise ValueError("not an encoded complex")
    real, imag = decode_obj(body[0], deref, depth + 1), decode_obj(body[1], deref, depth + 1)
    if type(real) not in (int, float) or type(imag) not in (int, float):
        raise ValueError("not an encoded complex")
    return complex(real, imag)


def _bytes(body, _deref, _depth, _tag):
    import binascii

    if type(body) is not str or not body.isascii():
        raise ValueError("not encoded bytes")
    data = binascii.a2b_base64(body)
    if binascii.b2a_base64(data, newline=False).decode("ascii") != body:  # the one canonical text only
        raise ValueError("not encoded bytes")
    return data


_DECODERS = {"L": _items, "T": _items, "S": _items, "F": _items, "D": _dict, "I": _int, "X": _float,
             "C": _complex, "B": _bytes}


def decode_obj(obj, deref=_unknown_tag, depth=0):
    """Rebuild exactly the plain types from :func:`encode_obj`'s tree; a tag the codec does not
    know goes to ``deref(tag, body)`` (by default a ValueError). ValueError for anything else:
    wrong bodies, unhashable keys, nesting past :data:`MAX_DEPTH`."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the value is nested more than {MAX_DEPTH} levels deep")
    t = type(obj)
    if obj is None or t is bool or t is int or t is float or t is str:
        return obj
    if t is not dict or len(obj) != 1:
        raise ValueError("not an encoded plain value")
    ((tag, body),) = obj.items()
    decoder = _DECODERS.get(tag)
    if decoder is None:
        return deref(tag, body)
    try:
        return decoder(body, deref, depth, tag)
    except (TypeError, UnicodeError, OverflowError) as exc:  # unhashable keys, a complex part past float
        raise ValueError(f"not an encoded plain value ({exc})") from None


def encode(value, limit, ref=_not_plain):
    """``value`` as JSON text of at most ``limit`` characters (TypeError/ValueError otherwise)."""
    text = dumps(encode_obj(value, ref))
    if len(text) > limit:
        raise ValueError(f"the value is too large ({len(text)} characters as text, the limit is {limit})")
    return text


def decode(text, limit, deref=_unknown_tag):
    """The value :func:`encode` wrote; ValueError for anything else (never another exception)."""
    if type(text) is not str or len(text) > limit:
        raise ValueError("not an encoded value, or too large")
    import json

    try:
        return decode_obj(json.loads(text), deref)
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
    """Compact, ASCII JSON text of a tree of JSON types (what :func:`encode_obj` returns), with
    the C encoder when there is one (no ``json`` import: see the module docstring)."""
    try:
        import _json

        encoder = _json.make_encoder(None, None, _json.encode_basestring_ascii, None, ":", ",", False, False, True)
    except (ImportError, AttributeError, TypeError):
        import json

        return json.dumps(obj, separators=(",", ":"))
    return "".join(encoder(obj, 0))
