"""The toolkit's plain-data codec (:mod:`turngym.sandbox.inside.codec`), every kind of value."""

from __future__ import annotations

import json
import math
import sys

import pytest

from turngym.sandbox.inside import codec

LIMIT = 1 << 24

ROUND_TRIPS = [
    None, True, False, 0, -7, (1 << 63) - 1, -(1 << 63) + 1, 1 << 63, -(1 << 63), 1 << 64, -(3 ** 200),
    2.5, -0.0, 1e308, 5e-324, float("inf"), float("-inf"),
    "", "é\ud800", "\x00\U0001f600", b"", b"\x00\xff" * 3, bytes(range(256)),
    1 + 2j, complex(float("inf"), -0.0), complex(0.0, float("-inf")),
    [], (), set(), frozenset(), {}, [1, (2, {3})], {(1, 2): frozenset({"a"}), b"k": [None]},
    {1.5: 1, "1.5": 2, None: 3, True: 4},
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=lambda v: repr(v)[:30])
def test_every_plain_kind_round_trips_exactly(value):
    text = codec.encode(value, LIMIT)
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))  # strict JSON
    assert text.isascii()
    back = codec.decode(text, LIMIT)
    assert repr(back) == repr(value) and codec.same_value(back, value)
    assert math.copysign(1, back) == math.copysign(1, value) if type(value) is float else True


def test_ints_beyond_64_bits_and_beyond_the_str_digit_limit_cross_as_hex():
    assert codec.encode_obj(1 << 64) == {"I": "10000000000000000"}
    assert codec.encode_obj(-(1 << 64)) == {"I": "-10000000000000000"}
    assert codec.encode_obj((1 << 63) - 1) == (1 << 63) - 1  # 64-bit ints are JSON numbers
    huge = -(7 ** 20_000)  # ~16900 decimal digits: str(huge) raises under the default limit
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if limit:
        with pytest.raises(ValueError):
            str(huge)
    assert codec.decode(codec.encode(huge, LIMIT), LIMIT) == huge


def test_nan_and_infinities_are_tagged_and_nan_parts_of_complex_too():
    assert codec.encode_obj(float("nan")) == {"X": "nan"}
    assert codec.encode_obj(float("-inf")) == {"X": "-inf"}
    back = codec.decode(codec.encode(float("nan"), LIMIT), LIMIT)
    assert type(back) is float and back != back
    z = codec.decode(codec.encode(complex(float("nan"), 1.0), LIMIT), LIMIT)
    assert type(z) is complex and z.real != z.real and z.imag == 1.0
    assert codec.same_value([float("nan")], [float("nan")])


def test_nesting_at_the_depth_limit_crosses_and_past_it_is_refused():
    def nested(n):
        v = []
        for _ in range(n):
            v = [v]
        return v

    at = nested(codec.MAX_DEPTH)
    assert codec.decode(codec.encode(at, LIMIT), LIMIT) == at
    with pytest.raises(ValueError, match="levels deep"):
        codec.encode(nested(codec.MAX_DEPTH + 1), LIMIT)
    past = '{"L":[' * (codec.MAX_DEPTH + 2) + "]}" * (codec.MAX_DEPTH + 2)
    with pytest.raises(ValueError):
        codec.decode(past, LIMIT)
    with pytest.raises(ValueError):  # deeper than the JSON reader's recursion
        codec.decode("[" * 100_000 + "]" * 100_000, 1 << 20)


class _Int(int):
    pass


class _Str(str):
    pass


@pytest.mark.parametrize("bad", [object(), _Int(3), _Str("x"), [lambda: 0], {"k": {1, _Int(2)}}, bytearray(b"x"),
                                 range(3)],
                         ids=["object", "int-subclass", "str-subclass", "list-of-lambda", "set-in-dict", "bytearray", "range"])
def test_anything_but_plain_data_is_refused_or_becomes_a_reference(bad):
    with pytest.raises(TypeError, match="not plain data"):
        codec.encode(bad, LIMIT)
    refs = []
    tree = codec.encode_obj(bad, lambda v: refs.append(v) or {"R": len(refs)})
    assert refs and all(type(r) not in (int, str, list, dict, set) for r in refs)
    got = codec.decode_obj(tree, lambda tag, body: ("handle", refs[body - 1]) if tag == "R" else None)
    assert "handle" in repr(got)


HOSTILE = [
    '{"Q": []}',  # unknown tag
    '{"X": []}', '{"X": "1.5"}', '{"I": 5}', '{"I": "zz"}', '{"I": "\u0661"}',  # wrong bodies
    '{"L": 1}', '{"T": "ab"}', '{"D": [[1]]}', '{"D": [1, 2]}', '{"D": {"a": 1}}',
    '{"B": "*"}', '{"B": "AA"}', '{"B": 1}', '{"B": "\u00e9"}',
    '{"C": [1]}', '{"C": ["a", 1]}', '{"C": [{"L": []}, 1]}', '{"C": [{"I": "' + "f" * 400 + '"}, 0]}',
    '{"S": [{"L": []}]}', '{"D": [[{"L": []}, 1]]}', '{"F": [{"D": []}]}',  # unhashable members and keys
    '{"L": [], "T": []}', '{}', '[]', '[1]',
    "9" * 5000, "nonsense", "",
]


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: t[:24])
def test_hostile_text_is_a_value_error_and_nothing_else(text):
    with pytest.raises(ValueError):
        codec.decode(text, LIMIT)


def test_unknown_tags_go_to_deref_and_known_ones_never_do():
    seen = []
    assert codec.decode_obj({"Z": 1}, lambda tag, body: seen.append((tag, body)) or "ref") == "ref"
    assert codec.decode_obj({"L": [{"Z": 2}]}, lambda tag, body: body) == [2]
    assert codec.decode_obj({"I": "ff"}, lambda tag, body: pytest.fail("deref called")) == 255
    assert seen == [("Z", 1)]


def test_size_limits_hold_both_ways():
    with pytest.raises(ValueError, match="too large"):
        codec.encode("x" * 100, 50)
    with pytest.raises(ValueError):
        codec.decode('"' + "x" * 100 + '"', 50)
    with pytest.raises(ValueError):
        codec.decode(b'"x"', 50)  # not text


def test_same_value_requires_equal_types_all_the_way_down():
    assert not codec.same_value(1, True) and not codec.same_value(1, 1.0)
    assert not codec.same_value({1: "a"}, {True: "a"}) and not codec.same_value({(1,)}, {(1.0,)})
    assert codec.same_value(0.1 + 0.2, 0.3) and codec.same_value({(1, 2.0)}, {(1, 2.0)})
    assert not codec.same_value([1, 2], [1, 2, 3])


def test_dumps_is_compact_ascii_json_with_or_without_the_c_encoder(monkeypatch):
    tree = {"a": [1, 2.5, "é\ud800", None, True]}
    fast = codec.dumps(tree)
    assert fast == '{"a":[1,2.5,"\\u00e9\\ud800",null,true]}'
    monkeypatch.setitem(sys.modules, "_json", None)  # no C encoder: the json module's
    assert codec.dumps(tree) == fast
