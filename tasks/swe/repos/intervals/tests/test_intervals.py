import pytest

from intervals import Interval, IntervalSet, merge


def test_length():
    assert Interval(2, 5).length == 3


def test_reversed_raises():
    with pytest.raises(ValueError):
        Interval(5, 2)


def test_empty():
    assert Interval(3, 3).is_empty() and not Interval(3, 4).is_empty()


def test_contains_half_open():
    iv = Interval(0, 10)
    assert iv.contains(0) and iv.contains(9.99)
    assert not iv.contains(10) and not iv.contains(-1)


def test_overlaps_strict():
    assert Interval(0, 5).overlaps(Interval(4, 8))
    assert not Interval(0, 5).overlaps(Interval(5, 8))
    assert Interval(0, 10).overlaps(Interval(2, 3))


def test_touches_adjacent():
    assert Interval(0, 5).touches(Interval(5, 8))
    assert not Interval(0, 5).touches(Interval(6, 8))


def test_intersection():
    assert Interval(0, 5).intersection(Interval(3, 9)) == Interval(3, 5)
    assert Interval(0, 5).intersection(Interval(5, 9)) is None
    assert Interval(0, 10).intersection(Interval(2, 3)) == Interval(2, 3)


def test_hull():
    assert Interval(0, 2).hull(Interval(5, 7)) == Interval(0, 7)


def test_shift():
    assert Interval(1, 3).shift(2) == Interval(3, 5)
    assert Interval(1, 3).shift(-1) == Interval(0, 2)


def test_split():
    assert Interval(0, 10).split(4) == (Interval(0, 4), Interval(4, 10))
    with pytest.raises(ValueError):
        Interval(0, 10).split(10)
    with pytest.raises(ValueError):
        Interval(0, 10).split(0)


def test_merge_overlapping_and_adjacent():
    assert merge([Interval(5, 7), Interval(0, 2), Interval(1, 3), Interval(3, 4)]) == [Interval(0, 4), Interval(5, 7)]


def test_merge_drops_empty():
    assert merge([Interval(1, 1), Interval(2, 3)]) == [Interval(2, 3)]


def test_merge_nested():
    assert merge([Interval(0, 10), Interval(2, 3)]) == [Interval(0, 10)]


def test_set_add_merges():
    s = IntervalSet([Interval(0, 2)])
    s.add(Interval(2, 5))
    s.add(Interval(8, 9))
    assert list(s) == [Interval(0, 5), Interval(8, 9)]
    assert len(s) == 2


def test_set_total_length():
    assert IntervalSet([Interval(0, 2), Interval(1, 4), Interval(10, 11)]).total_length == 5


def test_set_contains():
    s = IntervalSet([Interval(0, 2), Interval(5, 7)])
    assert s.contains(0) and s.contains(1.5) and s.contains(5)
    assert not s.contains(2) and not s.contains(4) and not s.contains(7) and not s.contains(-1)


def test_set_remove_middle():
    s = IntervalSet([Interval(0, 10)])
    s.remove(Interval(3, 4))
    assert list(s) == [Interval(0, 3), Interval(4, 10)]


def test_set_remove_edges():
    s = IntervalSet([Interval(0, 10), Interval(20, 30)])
    s.remove(Interval(5, 25))
    assert list(s) == [Interval(0, 5), Interval(25, 30)]


def test_set_remove_everything():
    s = IntervalSet([Interval(1, 2)])
    s.remove(Interval(0, 5))
    assert list(s) == []


def test_set_remove_disjoint_noop():
    s = IntervalSet([Interval(1, 2)])
    s.remove(Interval(2, 5))
    assert list(s) == [Interval(1, 2)]


def test_union():
    a = IntervalSet([Interval(0, 2)])
    b = IntervalSet([Interval(1, 3), Interval(5, 6)])
    assert list(a.union(b)) == [Interval(0, 3), Interval(5, 6)]


def test_intersection_sets():
    a = IntervalSet([Interval(0, 5), Interval(10, 15)])
    b = IntervalSet([Interval(3, 12), Interval(14, 20)])
    assert list(a.intersection(b)) == [Interval(3, 5), Interval(10, 12), Interval(14, 15)]


def test_gaps():
    s = IntervalSet([Interval(2, 4), Interval(6, 8)])
    assert s.gaps(Interval(0, 10)) == [Interval(0, 2), Interval(4, 6), Interval(8, 10)]


def test_gaps_fully_covered():
    assert IntervalSet([Interval(0, 10)]).gaps(Interval(2, 5)) == []


def test_gaps_window_inside_gap():
    assert IntervalSet([Interval(0, 1), Interval(9, 10)]).gaps(Interval(3, 5)) == [Interval(3, 5)]


def test_equality_and_repr():
    assert IntervalSet([Interval(0, 1), Interval(1, 2)]) == IntervalSet([Interval(0, 2)])
    assert "IntervalSet" in repr(IntervalSet())
