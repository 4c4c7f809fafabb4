import pytest

from lrucache import LRUCache, memoize


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_put_get():
    c = LRUCache(2)
    c.put("a", 1)
    assert c.get("a") == 1


def test_missing_default():
    assert LRUCache(1).get("x", "d") == "d"


def test_evicts_least_recent():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("c", 3)
    assert "a" not in c and c.get("b") == 2 and c.get("c") == 3


def test_get_refreshes_recency():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    c.put("c", 3)
    assert "a" in c and "b" not in c


def test_put_existing_refreshes_and_updates():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)
    c.put("c", 3)
    assert c.get("a") == 10 and "b" not in c


def test_peek_does_not_refresh():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.peek("a") == 1
    c.put("c", 3)
    assert "a" not in c


def test_keys_order():
    c = LRUCache(3)
    for k in "abc":
        c.put(k, k)
    c.get("a")
    assert c.keys() == ["b", "c", "a"]


def test_len_and_capacity_one():
    c = LRUCache(1)
    c.put("a", 1)
    c.put("b", 2)
    assert len(c) == 1 and c.keys() == ["b"]


def test_stats():
    c = LRUCache(1)
    c.put("a", 1)
    c.get("a")
    c.get("z")
    c.put("b", 2)
    assert (c.stats.hits, c.stats.misses, c.stats.evictions) == (1, 1, 1)
    assert c.stats.hit_rate == 0.5


def test_hit_rate_empty():
    assert LRUCache(1).stats.hit_rate == 0.0


def test_delete():
    c = LRUCache(2)
    c.put("a", 1)
    assert c.delete("a") is True
    assert c.delete("a") is False
    assert "a" not in c


def test_delete_none_value():
    c = LRUCache(2)
    c.put("a", None)
    assert c.delete("a") is True


def test_stores_none_values():
    c = LRUCache(2)
    c.put("a", None)
    assert "a" in c and c.get("a", "d") is None


def test_invalid_capacity():
    with pytest.raises(ValueError):
        LRUCache(0)


def test_invalid_ttl():
    with pytest.raises(ValueError):
        LRUCache(1, ttl=0)


def test_ttl_expiry():
    clock = FakeClock()
    c = LRUCache(3, ttl=10, clock=clock)
    c.put("a", 1)
    clock.now = 9.9
    assert c.get("a") == 1
    clock.now = 10.0
    assert c.get("a") is None and len(c) == 0


def test_ttl_refreshed_by_put():
    clock = FakeClock()
    c = LRUCache(3, ttl=10, clock=clock)
    c.put("a", 1)
    clock.now = 8
    c.put("a", 2)
    clock.now = 15
    assert c.get("a") == 2


def test_resize_evicts_oldest():
    c = LRUCache(3)
    for k in "abc":
        c.put(k, k)
    c.resize(1)
    assert c.keys() == ["c"] and c.stats.evictions == 2
    with pytest.raises(ValueError):
        c.resize(0)


def test_clear():
    c = LRUCache(2)
    c.put("a", 1)
    c.clear()
    assert len(c) == 0


def test_memoize_caches():
    calls = []

    @memoize(maxsize=2)
    def square(x):
        calls.append(x)
        return x * x

    assert square(3) == 9 and square(3) == 9
    assert calls == [3]
    assert square.cache.stats.hits == 1


def test_memoize_kwargs_and_eviction():
    calls = []

    @memoize(maxsize=1)
    def f(a, b=0):
        calls.append((a, b))
        return a + b

    f(1, b=2)
    f(1, b=2)
    f(2)
    f(1, b=2)
    assert calls == [(1, 2), (2, 0), (1, 2)]


def test_memoize_caches_none_results():
    calls = []

    @memoize()
    def g(x):
        calls.append(x)

    g(1)
    g(1)
    assert calls == [1]
