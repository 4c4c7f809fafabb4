import pytest

from intervals import Interval, IntervalSet, merge

I = Interval


def test_length():
    assert I(2, 5).length == 3


def test_reversed_raises():
    with pytest.raises(ValueError):
        I(5, 2)


def test_empty():
    assert I(3, 3).is_empty() and not I(3, 4).is_empty()


def test_contains_half_open():
    iv = I(0, 10)
    assert iv.contains(0) and iv.contains(9.99)
    assert not iv.contains(10) and not iv.contains(-1)


def test_overlaps_strict():
    assert I(0, 5).overlaps(I(4, 8))
    assert not I(0, 5).overlaps(I(5, 8))
    assert I(0, 10).overlaps(I(2, 3))


def test_touches_adjacent():
    assert I(0, 5).touches(I(5, 8))
    assert not I(0, 5).touches(I(6, 8))


def test_intersection():
    assert I(0, 5).intersection(I(3, 9)) == I(3, 5)
    assert I(0, 5).intersection(I(5, 9)) is None
    assert I(0, 10).intersection(I(2, 3)) == I(2, 3)


def test_hull():
    assert I(0, 2).hull(I(5, 7)) == I(0, 7)


def test_shift():
    assert I(1, 3).shift(2) == I(3, 5)
    assert I(1, 3).shift(-1) == I(0, 2)


def test_split():
    assert I(0, 10).split(4) == (I(0, 4), I(4, 10))
    with pytest.raises(ValueError):
        I(0, 10).split(10)
    with pytest.raises(ValueError):
        I(0, 10).split(0)


def test_merge_overlapping_and_adjacent():
    assert merge([I(5, 7), I(0, 2), I(1, 3), I(3, 4)]) == [I(0, 4), I(5, 7)]


def test_merge_drops_empty():
    assert merge([I(1, 1), I(2, 3)]) == [I(2, 3)]


def test_merge_nested():
    assert merge([I(0, 10), I(2, 3)]) == [I(0, 10)]


def test_set_add_merges():
    s = IntervalSet([I(0, 2)])
    s.add(I(2, 5))
    s.add(I(8, 9))
    assert list(s) == [I(0, 5), I(8, 9)]
    assert len(s) == 2


def test_set_total_length():
    assert IntervalSet([I(0, 2), I(1, 4), I(10, 11)]).total_length == 5


def test_set_contains():
    s = IntervalSet([I(0, 2), I(5, 7)])
    assert s.contains(0) and s.contains(1.5) and s.contains(5)
    assert not s.contains(2) and not s.contains(4) and not s.contains(7) and not s.contains(-1)


def test_set_remove_middle():
    s = IntervalSet([I(0, 10)])
    s.remove(I(3, 4))
    assert list(s) == [I(0, 3), I(4, 10)]


def test_set_remove_edges():
    s = IntervalSet([I(0, 10), I(20, 30)])
    s.remove(I(5, 25))
    assert list(s) == [I(0, 5), I(25, 30)]


def test_set_remove_everything():
    s = IntervalSet([I(1, 2)])
    s.remove(I(0, 5))
    assert list(s) == []


def test_set_remove_disjoint_noop():
    s = IntervalSet([I(1, 2)])
    s.remove(I(2, 5))
    assert list(s) == [I(1, 2)]


def test_union():
    a = IntervalSet([I(0, 2)])
    b = IntervalSet([I(1, 3), I(5, 6)])
    assert list(a.union(b)) == [I(0, 3), I(5, 6)]


def test_intersection_sets():
    a = IntervalSet([I(0, 5), I(10, 15)])
    b = IntervalSet([I(3, 12), I(14, 20)])
    assert list(a.intersection(b)) == [I(3, 5), I(10, 12), I(14, 15)]


def test_gaps():
    s = IntervalSet([I(2, 4), I(6, 8)])
    assert s.gaps(I(0, 10)) == [I(0, 2), I(4, 6), I(8, 10)]


def test_gaps_fully_covered():
    assert IntervalSet([I(0, 10)]).gaps(I(2, 5)) == []


def test_gaps_window_inside_gap():
    assert IntervalSet([I(0, 1), I(9, 10)]).gaps(I(3, 5)) == [I(3, 5)]


def test_equality_and_repr():
    assert IntervalSet([I(0, 1), I(1, 2)]) == IntervalSet([I(0, 2)])
    assert "IntervalSet" in repr(IntervalSet())
