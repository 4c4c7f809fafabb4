"""The project's own function-synthesis tasks: 36 templates x 3 variants = 108 tasks.

Each template is a small, precisely specified function; its variants change the spec itself
(the coin set, the bracket pairs, the connectivity), so a model cannot pass a variant by
recalling another. Levels: 1 = a loop or a formula, 2 = a classic algorithm or careful edge
cases, 3 = dynamic programming, search or parsing.

Hidden tests are generated from a seeded RNG per (template, variant) and their expected
values computed by the reference solution (trusted code, run on the host at generation time).
A test is ``[name, call, expected]``: only the call enters the sandbox; the value it returns
comes back as a literal and is compared on the host, strictly (same types, recursively). So
the expected values never reach the agent's code, which therefore cannot forge a pass, and an
object whose ``__eq__`` always returns True does not pass. The generated set is shipped as ``builtin_tasks.jsonl``;
:func:`build_catalog` regenerates it exactly (a test checks they agree).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from string import Template
from typing import Any

__all__ = ["TEMPLATES", "TaskTemplate", "build_catalog", "N_HIDDEN", "N_EXAMPLES"]

N_EXAMPLES = 2
N_HIDDEN = 10

Gen = Callable[[random.Random, dict[str, Any]], tuple[Any, ...]]


@dataclass(frozen=True)
class TaskTemplate:
    slug: str
    level: int
    signature: str  # "def name(args) -> ret:" ($params substituted)
    doc: str  # the specification ($params substituted)
    code: str  # the reference solution, a full module ($params substituted)
    gen: Gen  # one random argument tuple
    variants: tuple[dict[str, Any], ...]
    edge: tuple[tuple[Any, ...], ...] = ()  # argument tuples always among the hidden tests

    @property
    def entry_point(self) -> str:
        return self.signature.split("(")[0].removeprefix("def ").strip()


def _ints(rng: random.Random, n: int, lo: int, hi: int) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _word(rng: random.Random, alphabet: str, lo: int, hi: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def _text(rng: random.Random, words: int) -> str:
    vocab = ["apple", "Tree", "sun", "a", "river", "mountain", "go", "Stone", "sky", "the", "elephant", "of", "road", "cat"]
    return " ".join(rng.choice(vocab) for _ in range(rng.randint(0, words)))


def _grid(rng: random.Random, p_wall: float) -> list[str]:
    h, w = rng.randint(1, 6), rng.randint(1, 6)
    rows = ["".join("#" if rng.random() < p_wall else "." for _ in range(w)) for _ in range(h)]
    return rows


T = TaskTemplate
TEMPLATES: tuple[TaskTemplate, ...] = (
    # ------------------------------------------------------------------ level 1
    T("sum_multiples", 1, "def sum_multiples(n: int) -> int:",
      "Return the sum of all positive integers below n that are multiples of $a or $b (0 if there are none).",
      "def sum_multiples(n):\n    return sum(i for i in range(1, n) if i % $a == 0 or i % $b == 0)\n",
      lambda r, p: (r.randint(0, 400),), ({"a": 3, "b": 5}, {"a": 2, "b": 7}, {"a": 4, "b": 6}), ((0,), (1,))),
    T("count_chars", 1, "def count_chars(s: str) -> int:",
      "Count the characters of s that belong to the set '$chars', ignoring case.",
      "def count_chars(s):\n    return sum(1 for c in s.lower() if c in '$chars')\n",
      lambda r, p: (_word(r, "abcdeiouxyzAEXYZ0123 !", 0, 25),), ({"chars": "aeiou"}, {"chars": "xyz"}, {"chars": "0123456789"}), (("",),)),
    T("clamp_list", 1, "def clamp_list(xs: list[int]) -> list[int]:",
      "Return a new list where every value of xs is clamped into the closed range [$lo, $hi].",
      "def clamp_list(xs):\n    return [min(max(x, $lo), $hi) for x in xs]\n",
      lambda r, p: (_ints(r, r.randint(0, 8), p["lo"] - 20, p["hi"] + 20),), ({"lo": 0, "hi": 10}, {"lo": -5, "hi": 5}, {"lo": 100, "hi": 200}), (([],),)),
    T("fizz_words", 1, "def fizz_words(n: int) -> list[str]:",
      "For each i in 1..n return '$wa' if i is a multiple of $a only, '$wb' if of $b only, '$wa$wb' if of both, else str(i).",
      "def fizz_words(n):\n    out = []\n    for i in range(1, n + 1):\n        w = ('$wa' if i % $a == 0 else '') + ('$wb' if i % $b == 0 else '')\n        out.append(w or str(i))\n    return out\n",
      lambda r, p: (r.randint(0, 30),), ({"a": 3, "b": 5, "wa": "Fizz", "wb": "Buzz"}, {"a": 2, "b": 3, "wa": "Foo", "wb": "Bar"}, {"a": 4, "b": 7, "wa": "Ping", "wb": "Pong"}), ((0,),)),
    T("polygonal", 1, "def polygonal(n: int) -> int:",
      "Return the n-th $k-gonal number (n >= 1): the number of dots in a regular $k-gon pattern with n dots per side; the sequence starts 1, $k, ...",
      "def polygonal(n):\n    return (($k - 2) * n * n - ($k - 4) * n) // 2\n",
      lambda r, p: (r.randint(1, 200),), ({"k": 3}, {"k": 5}, {"k": 6}), ((1,), (2,))),
    T("is_palindrome", 1, "def is_palindrome(s: str) -> bool:",
      "Return True if s reads the same forwards and backwards when only its $what are kept, compared case-insensitively.",
      "def is_palindrome(s):\n    kept = [c.lower() for c in s if c.$method()]\n    return kept == kept[::-1]\n",
      lambda r, p: (r.choice(["Aba", "race car", "No lemon, no melon", "12a21", "1b2", "abc", "x1y1x", "", "A man, a plan", "7 3 7"]) + r.choice(["", "!", "a", "9"]),),
      ({"what": "letters", "method": "isalpha"}, {"what": "letters and digits", "method": "isalnum"}, {"what": "digits", "method": "isdigit"}), (("",),)),
    T("digit_sum", 1, "def digit_sum(n: int) -> int:",
      "Return the sum of the digits of the non-negative integer n written in base $b.",
      "def digit_sum(n):\n    total = 0\n    while n:\n        n, d = divmod(n, $b)\n        total += d\n    return total\n",
      lambda r, p: (r.randint(0, 10**6),), ({"b": 2}, {"b": 7}, {"b": 16}), ((0,), (1,))),
    T("rotate", 1, "def rotate(xs: list[int], k: int) -> list[int]:",
      "Return xs rotated $dir by k positions (k >= 0 may exceed len(xs)); an empty list stays empty. Do not modify xs.",
      "def rotate(xs, k):\n    if not xs:\n        return []\n    k = ($sign * k) % len(xs)\n    return xs[-k:] + xs[:-k] if k else list(xs)\n",
      lambda r, p: (_ints(r, r.randint(0, 7), 0, 9), r.randint(0, 12)),
      ({"dir": "to the right", "sign": 1}, {"dir": "to the left", "sign": -1}, {"dir": "to the right twice (that is, by 2*k)", "sign": 2}), (([], 3),)),
    T("caesar", 1, "def caesar(s: str) -> str:",
      "Shift every ASCII letter of s forward by $k places in the alphabet, wrapping around and keeping its case; other characters are unchanged.",
      "def caesar(s):\n    out = []\n    for c in s:\n        if 'a' <= c <= 'z':\n            c = chr((ord(c) - 97 + $k) % 26 + 97)\n        elif 'A' <= c <= 'Z':\n            c = chr((ord(c) - 65 + $k) % 26 + 65)\n        out.append(c)\n    return ''.join(out)\n",
      lambda r, p: (_word(r, "abcxyzABCXYZ .,!é", 0, 20),), ({"k": 3}, {"k": 13}, {"k": 25}), (("",),)),
    T("count_long_words", 1, "def count_long_words(s: str) -> int:",
      "Count the words of s (split on whitespace) that have more than $k characters.",
      "def count_long_words(s):\n    return sum(1 for w in s.split() if len(w) > $k)\n",
      lambda r, p: (_text(r, 10),), ({"k": 3}, {"k": 5}, {"k": 7}), (("",),)),
    T("running", 1, "def running(xs: list[int]) -> list[int]:",
      "Return the running $op of xs: element i is the $op of xs[0..i].",
      "def running(xs):\n    out = []\n    for x in xs:\n        out.append(x if not out else $expr)\n    return out\n",
      lambda r, p: (_ints(r, r.randint(0, 8), -20, 20),),
      ({"op": "maximum", "expr": "max(out[-1], x)"}, {"op": "minimum", "expr": "min(out[-1], x)"}, {"op": "sum", "expr": "out[-1] + x"}), (([],),)),
    T("kth_largest", 1, "def kth_largest(xs: list[int]) -> int | None:",
      "Return the $k-th largest distinct value in xs, or None if xs has fewer than $k distinct values.",
      "def kth_largest(xs):\n    d = sorted(set(xs), reverse=True)\n    return d[$k - 1] if len(d) >= $k else None\n",
      lambda r, p: (_ints(r, r.randint(0, 8), 0, 9),), ({"k": 2}, {"k": 3}, {"k": 4}), (([],), ([5, 5, 5],))),
    # ------------------------------------------------------------------ level 2
    T("rle", 2, "def rle(s: str) -> str:",
      "Run-length encode s: each maximal run of one character becomes $fmt. Return the concatenation.",
      "def rle(s):\n    out, i = [], 0\n    while i < len(s):\n        j = i\n        while j < len(s) and s[j] == s[i]:\n            j += 1\n        n, c = j - i, s[i]\n        out.append($expr)\n        i = j\n    return ''.join(out)\n",
      lambda r, p: ("".join(r.choice("aab") * r.randint(1, 4) for _ in range(r.randint(0, 5))),),
      ({"fmt": "the character followed by the run length (e.g. 'aaab' -> 'a3b1')", "expr": "c + str(n)"},
       {"fmt": "the run length followed by the character (e.g. 'aaab' -> '3a1b')", "expr": "str(n) + c"},
       {"fmt": "the character, followed by the run length only if it is greater than 1 (e.g. 'aaab' -> 'a3b')", "expr": "c + (str(n) if n > 1 else '')"}), (("",),)),
    T("group_anagrams", 2, "def group_anagrams(words: list[str]) -> list[list[str]]:",
      "Group the words that are anagrams of each other$case. Keep each group's words in input order, order the groups by the position of their first word, and keep only groups with $min or more words.",
      "def group_anagrams(words):\n    groups = {}\n    for w in words:\n        groups.setdefault(''.join(sorted($key)), []).append(w)\n    return [g for g in groups.values() if len(g) >= $min]\n",
      lambda r, p: ([r.choice(["listen", "silent", "enlist", "Tinsel", "google", "gogole", "cat", "act", "Tac", "dog", "god", "x"]) for _ in range(r.randint(0, 7))],),
      ({"case": " (case-sensitive)", "min": 1, "key": "w"}, {"case": ", ignoring case", "min": 1, "key": "w.lower()"}, {"case": " (case-sensitive)", "min": 2, "key": "w"}), (([],),)),
    T("pair_indices", 2, "def pair_indices(xs: list[int], target: int) -> tuple[int, int] | None:",
      "Return the pair of indices (i, j), i < j, with $rel == target, choosing the smallest j and then the smallest i; None if no pair exists.",
      "def pair_indices(xs, target):\n    for j in range(len(xs)):\n        for i in range(j):\n            if $expr == target:\n                return (i, j)\n    return None\n",
      lambda r, p: (_ints(r, r.randint(0, 8), -5, 9), r.randint(-6, 12)),
      ({"rel": "xs[i] + xs[j]", "expr": "xs[i] + xs[j]"}, {"rel": "xs[j] - xs[i]", "expr": "xs[j] - xs[i]"}, {"rel": "xs[i] * xs[j]", "expr": "xs[i] * xs[j]"}), (([], 0),)),
    T("balanced", 2, "def balanced(s: str) -> bool:",
      "Return True if the brackets in s are balanced and properly nested, where the bracket pairs are $shown; every other character is ignored.",
      "def balanced(s):\n    pairs = dict(zip('$closers', '$openers'))\n    stack = []\n    for c in s:\n        if c in '$openers':\n            stack.append(c)\n        elif c in pairs:\n            if not stack or stack.pop() != pairs[c]:\n                return False\n    return not stack\n",
      lambda r, p: (_word(r, p["openers"] + p["closers"] + "x", 0, 10),),
      ({"shown": "() only", "openers": "(", "closers": ")"}, {"shown": "() and []", "openers": "([", "closers": ")]"}, {"shown": "(), [], {} and <>", "openers": "([{<", "closers": ")]}>"}), (("",),)),
    T("merge_intervals", 2, "def merge_intervals(intervals: list[list[int]]) -> $ret:",
      "Intervals are [start, end] with start <= end, in any order. $what",
      "def merge_intervals(intervals):\n    merged = []\n    for a, b in sorted(intervals):\n        if merged and a $cmp merged[-1][1]:\n            merged[-1][1] = max(merged[-1][1], b)\n        else:\n            merged.append([a, b])\n    return $result\n",
      lambda r, p: ([sorted(_ints(r, 2, 0, 20)) for _ in range(r.randint(0, 6))],),
      ({"ret": "list[list[int]]", "what": "Merge every overlapping pair (intervals that only touch, like [1, 3] and [3, 5], also merge) and return the merged intervals sorted by start.", "cmp": "<=", "result": "merged"},
       {"ret": "list[list[int]]", "what": "Merge intervals that overlap in more than one point ([1, 3] and [3, 5] stay separate) and return the merged intervals sorted by start.", "cmp": "<", "result": "merged"},
       {"ret": "int", "what": "Return the total length covered by their union (the length of [a, b] is b - a).", "cmp": "<=", "result": "sum(b - a for a, b in merged)"}), (([],),)),
    T("top_k", 2, "def top_k(xs: list[int], k: int) -> list[int]:",
      "Return the k most frequent values of xs, most frequent first, breaking ties by $tie. Return fewer if xs has fewer than k distinct values.",
      "def top_k(xs, k):\n    from collections import Counter\n    c = Counter(xs)\n    first = {}\n    for i, x in enumerate(xs):\n        first.setdefault(x, i)\n    return sorted(c, key=lambda v: (-c[v], $key))[:k]\n",
      lambda r, p: (_ints(r, r.randint(0, 10), 0, 5), r.randint(1, 3)),
      ({"tie": "the smaller value first", "key": "v"}, {"tie": "the larger value first", "key": "-v"}, {"tie": "first occurrence in xs", "key": "first[v]"}), (([], 2),)),
    T("longest_run_subseq", 2, "def longest_subsequence(xs: list[int]) -> int:",
      "Return the length of the longest $kind subsequence of xs (not necessarily contiguous).",
      "def longest_subsequence(xs):\n    best = [1] * len(xs)\n    for j in range(len(xs)):\n        for i in range(j):\n            if xs[i] $op xs[j]:\n                best[j] = max(best[j], best[i] + 1)\n    return max(best, default=0)\n",
      lambda r, p: (_ints(r, r.randint(0, 10), 0, 9),),
      ({"kind": "strictly increasing", "op": "<"}, {"kind": "non-decreasing", "op": "<="}, {"kind": "strictly decreasing", "op": ">"}), (([],),)),
    T("matrix_walk", 2, "def matrix_walk(m: list[list[int]]) -> list[int]:",
      "m is a rectangular matrix (possibly empty). $what",
      "$code",
      lambda r, p: ([_ints(r, w, 0, 9) for w in [r.randint(1, 4)] for _ in range(r.randint(0, 4))],),
      ({"what": "Return its elements in clockwise spiral order starting at the top-left corner going right.",
        "code": "def matrix_walk(m):\n    out = []\n    m = [list(r) for r in m]\n    while m and m[0]:\n        out += m.pop(0)\n        m = [list(r) for r in zip(*m)][::-1]\n    return out\n"},
       {"what": "Return its elements in counter-clockwise spiral order starting at the top-left corner going down.",
        "code": "def matrix_walk(m):\n    t = [list(r) for r in zip(*m)]\n    out = []\n    while t and t[0]:\n        out += t.pop(0)\n        t = [list(r) for r in zip(*t)][::-1]\n    return out\n"},
       {"what": "Return its elements column by column (top to bottom within a column, columns left to right).",
        "code": "def matrix_walk(m):\n    return [x for col in zip(*m) for x in col]\n"}), (([],),)),
    T("roman", 2, "def roman(x: $arg) -> $ret:",
      "$what Roman numerals use I V X L C D M with subtractive pairs IV IX XL XC CD CM; values are 1..3999.",
      "VALS = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'), (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n\ndef to_roman(n):\n    out = ''\n    for v, s in VALS:\n        while n >= v:\n            out += s\n            n -= v\n    return out\n\ndef from_roman(s):\n    total, i = 0, 0\n    for v, sym in VALS:\n        while s.startswith(sym, i):\n            total += v\n            i += len(sym)\n    return total\n\n$code",
      lambda r, p: (r.randint(1, 3999),) if p["arg"] == "int" else (["I", "IV", "IX", "XLII", "MCMXCIV", "CDXLIV", "MMMCMXCIX", "LVIII", "XC", "DCCC"][r.randint(0, 9)],),
      ({"arg": "int", "ret": "str", "what": "Return the Roman numeral of the integer x.", "code": "def roman(x):\n    return to_roman(x)\n"},
       {"arg": "str", "ret": "int", "what": "Return the integer value of the Roman numeral x.", "code": "def roman(x):\n    return from_roman(x)\n"},
       {"arg": "int", "ret": "int", "what": "Return how many characters the Roman numeral of the integer x has.", "code": "def roman(x):\n    return len(to_roman(x))\n"})),
    T("to_base", 2, "def to_base(n: int) -> str:",
      "Write the integer n in base $b using the digits 0-9 then lowercase a-z, with a leading '-' for negative n; zero is '0'.",
      "def to_base(n):\n    digits = '0123456789abcdefghijklmnopqrstuvwxyz'\n    if n == 0:\n        return '0'\n    sign, n, out = ('-' if n < 0 else ''), abs(n), ''\n    while n:\n        n, d = divmod(n, $b)\n        out = digits[d] + out\n    return sign + out\n",
      lambda r, p: (r.randint(-5000, 10**6),), ({"b": 2}, {"b": 5}, {"b": 36}), ((0,), (-1,))),
    T("flatten", 2, "def flatten(xs: list) -> list:",
      "xs is a list whose items are ints or (nested) lists. $what",
      "def flatten(xs, depth=$depth):\n    out = []\n    for x in xs:\n        if isinstance(x, list) and depth > 0:\n            out.extend(flatten(x, depth - 1))\n        else:\n            out.append(x)\n    return out\n",
      lambda r, p: (_nested(r, 4),),
      ({"depth": 1, "what": "Remove one level of nesting: items that are lists are replaced by their items."},
       {"depth": 2, "what": "Remove up to two levels of nesting."},
       {"depth": 10**9, "what": "Flatten it completely into a list of ints, in order."}), (([],),)),
    T("collatz", 2, "def collatz(n: int) -> int:",
      "Collatz step: n -> n // 2 if n is even, else 3 * n + 1. For n >= 1, $what",
      "def chain(n):\n    seq = [n]\n    while n != 1:\n        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        seq.append(n)\n    return seq\n\ndef collatz(n):\n    $expr\n",
      lambda r, p: (r.randint(1, 3000),),
      ({"what": "return the number of steps to reach 1.", "expr": "return len(chain(n)) - 1"},
       {"what": "return the largest value reached on the way to 1 (including n).", "expr": "return max(chain(n))"},
       {"what": "return the m in 1..n whose chain to 1 takes the most steps (the smallest such m on ties).", "expr": "return max(range(1, n + 1), key=lambda m: (len(chain(m)), -m))"}), ((1,),)),
    T("word_freq", 2, "def word_freq(text: str) -> list[tuple[str, int]]:",
      "Words are maximal runs of ASCII letters, compared lowercase. Return the $k most common words as (word, count) pairs, by count descending then word ascending.",
      "import re\nfrom collections import Counter\n\ndef word_freq(text):\n    c = Counter(w.lower() for w in re.findall('[A-Za-z]+', text))\n    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:$k]\n",
      lambda r, p: (_text(r, 14).replace(" a ", ", A! "),), ({"k": 1}, {"k": 3}, {"k": 5}), (("",),)),
    # ------------------------------------------------------------------ level 3
    T("edit_distance", 3, "def edit_distance(a: str, b: str) -> int:",
      "Return the minimum total cost of turning a into b, where inserting a character costs $ins, deleting one costs $dele and replacing one by another costs $sub.",
      "def edit_distance(a, b):\n    prev = [j * $ins for j in range(len(b) + 1)]\n    for i in range(1, len(a) + 1):\n        cur = [i * $dele]\n        for j in range(1, len(b) + 1):\n            cur.append(min(prev[j] + $dele, cur[j - 1] + $ins, prev[j - 1] + (0 if a[i - 1] == b[j - 1] else $sub)))\n        prev = cur\n    return prev[-1]\n",
      lambda r, p: (_word(r, "abc", 0, 7), _word(r, "abc", 0, 7)), ({"ins": 1, "dele": 1, "sub": 1}, {"ins": 1, "dele": 1, "sub": 3}, {"ins": 2, "dele": 1, "sub": 1}), (("", ""), ("abc", ""))),
    T("coin_change", 3, "def coin_change(amount: int) -> int:",
      "With unlimited coins of values $coins, return the fewest coins summing exactly to amount (>= 0), or -1 if impossible.",
      "def coin_change(amount):\n    INF = float('inf')\n    best = [0] + [INF] * amount\n    for a in range(1, amount + 1):\n        for c in $coins:\n            if c <= a and best[a - c] + 1 < best[a]:\n                best[a] = best[a - c] + 1\n    return -1 if best[amount] == INF else int(best[amount])\n",
      lambda r, p: (r.randint(0, 120),), ({"coins": (1, 5, 10, 25)}, {"coins": (2, 5, 7)}, {"coins": (3, 7, 11)}), ((0,), (1,))),
    T("common_sequence", 3, "def common_sequence(a: str, b: str) -> int:",
      "Return the length of the $what of a and b.",
      "$code",
      lambda r, p: (_word(r, "abcd", 0, 8), _word(r, "abcd", 0, 8)),
      ({"what": "longest common subsequence (characters in order, not necessarily contiguous)",
        "code": "def common_sequence(a, b):\n    prev = [0] * (len(b) + 1)\n    for x in a:\n        cur = [0]\n        for j, y in enumerate(b):\n            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))\n        prev = cur\n    return prev[-1]\n"},
       {"what": "longest common substring (contiguous)",
        "code": "def common_sequence(a, b):\n    best = 0\n    for i in range(len(a)):\n        for j in range(len(b)):\n            k = 0\n            while i + k < len(a) and j + k < len(b) and a[i + k] == b[j + k]:\n                k += 1\n            best = max(best, k)\n    return best\n"},
       {"what": "shortest common supersequence (a shortest string having both a and b as subsequences)",
        "code": "def common_sequence(a, b):\n    prev = [0] * (len(b) + 1)\n    for x in a:\n        cur = [0]\n        for j, y in enumerate(b):\n            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))\n        prev = cur\n    return len(a) + len(b) - prev[-1]\n"}), (("", ""), ("abc", ""))),
    T("grid_path", 3, "def grid_path(grid: list[str]) -> int:",
      "grid is a list of equal-length rows of '.' (free) and '#' (wall). Moving $moves between free cells, return the fewest moves from the top-left to the bottom-right cell, or -1 if either is a wall or it is unreachable.",
      "from collections import deque\n\ndef grid_path(grid):\n    h, w = len(grid), len(grid[0])\n    if grid[0][0] == '#' or grid[h - 1][w - 1] == '#':\n        return -1\n    dist = {(0, 0): 0}\n    q = deque([(0, 0)])\n    while q:\n        r, c = q.popleft()\n        if (r, c) == (h - 1, w - 1):\n            return dist[(r, c)]\n        for dr, dc in $steps:\n            nr, nc = r + dr, c + dc\n            if 0 <= nr < h and 0 <= nc < w and grid[nr][nc] == '.' and (nr, nc) not in dist:\n                dist[(nr, nc)] = dist[(r, c)] + 1\n                q.append((nr, nc))\n    return -1\n",
      lambda r, p: (_grid(r, 0.25),),
      ({"moves": "up, down, left or right", "steps": ((0, 1), (1, 0), (0, -1), (-1, 0))},
       {"moves": "to any of the 8 neighbouring cells (diagonals included)", "steps": ((0, 1), (1, 0), (0, -1), (-1, 0), (1, 1), (1, -1), (-1, 1), (-1, -1))},
       {"moves": "like a chess knight (two cells in one direction and one cell sideways; jumping over walls is allowed)", "steps": ((1, 2), (2, 1), (-1, 2), (-2, 1), (1, -2), (2, -1), (-1, -2), (-2, -1))}), ((["."],), (["#"],))),
    T("evaluate", 3, "def evaluate(expr: str) -> int:",
      "expr is an arithmetic expression of non-negative integers, + - * and parentheses, possibly with spaces. $rule Return its integer value; do not use eval.",
      "import re\n\ndef evaluate(expr):\n    toks = re.findall(r'\\d+|[-+*()]', expr)\n    pos = 0\n    def peek():\n        return toks[pos] if pos < len(toks) else None\n    def take():\n        nonlocal pos\n        pos += 1\n        return toks[pos - 1]\n    def atom():\n        if peek() == '(':\n            take()\n            v = $top()\n            take()\n            return v\n        return int(take())\n$parser",
      lambda r, p: (_expr(r, 3),),
      ({"rule": "* binds tighter than + and -, which are left-associative.", "top": "expr_",
        "parser": "    def term():\n        v = atom()\n        while peek() == '*':\n            take()\n            v *= atom()\n        return v\n    def expr_():\n        v = term()\n        while peek() in ('+', '-'):\n            op = take()\n            v = v + term() if op == '+' else v - term()\n        return v\n    return expr_()\n"},
       {"rule": "All three operators have the same precedence and are applied strictly left to right (so 2+3*4 is 20).", "top": "expr_",
        "parser": "    def expr_():\n        v = atom()\n        while peek() in ('+', '-', '*'):\n            op = take()\n            w = atom()\n            v = v + w if op == '+' else v - w if op == '-' else v * w\n        return v\n    return expr_()\n"},
       {"rule": "+ and - bind tighter than *, all left-associative (so 2*3+4 is 14).", "top": "expr_",
        "parser": "    def term():\n        v = atom()\n        while peek() in ('+', '-'):\n            op = take()\n            v = v + atom() if op == '+' else v - atom()\n        return v\n    def expr_():\n        v = term()\n        while peek() == '*':\n            take()\n            v *= term()\n        return v\n    return expr_()\n"}), (("7",),)),
    T("topo_order", 3, "def topo_order(n: int, edges: list[tuple[int, int]]) -> $ret:",
      "Nodes are 0..n-1; an edge (u, v) means u must come before v. $what",
      "import heapq\n\ndef topo_order(n, edges):\n    indeg = [0] * n\n    out = [[] for _ in range(n)]\n    for u, v in edges:\n        out[u].append(v)\n        indeg[v] += 1\n$code",
      lambda r, p: _dag(r),
      ({"ret": "list[int] | None", "what": "Return the lexicographically smallest order that respects every edge, or None if there is none (a cycle).",
        "code": "    heap = [i for i in range(n) if indeg[i] == 0]\n    heapq.heapify(heap)\n    order = []\n    while heap:\n        u = heapq.heappop(heap)\n        order.append(u)\n        for v in out[u]:\n            indeg[v] -= 1\n            if indeg[v] == 0:\n                heapq.heappush(heap, v)\n    return order if len(order) == n else None\n"},
       {"ret": "list[int] | None", "what": "Return the lexicographically largest order that respects every edge, or None if there is none (a cycle).",
        "code": "    heap = [-i for i in range(n) if indeg[i] == 0]\n    heapq.heapify(heap)\n    order = []\n    while heap:\n        u = -heapq.heappop(heap)\n        order.append(u)\n        for v in out[u]:\n            indeg[v] -= 1\n            if indeg[v] == 0:\n                heapq.heappush(heap, -v)\n    return order if len(order) == n else None\n"},
       {"ret": "int", "what": "Return how many orders of all n nodes respect every edge (0 if there is a cycle).",
        "code": "    pred = [0] * n\n    for u, v in edges:\n        pred[v] |= 1 << u\n    ways = [0] * (1 << n)\n    ways[0] = 1\n    for mask in range(1 << n):\n        if ways[mask]:\n            for v in range(n):\n                if not mask >> v & 1 and pred[v] & mask == pred[v]:\n                    ways[mask | 1 << v] += ways[mask]\n    return ways[(1 << n) - 1]\n"})),
    T("islands", 3, "def islands(grid: list[str]) -> int:",
      "grid is a list of equal-length rows of '1' (land) and '0' (water). Cells are connected $conn. Return $what.",
      "def islands(grid):\n    h, w = len(grid), len(grid[0]) if grid else 0\n    seen, sizes = set(), []\n    for r in range(h):\n        for c in range(w):\n            if grid[r][c] == '1' and (r, c) not in seen:\n                stack, size = [(r, c)], 0\n                seen.add((r, c))\n                while stack:\n                    y, x = stack.pop()\n                    size += 1\n                    for dy, dx in $steps:\n                        ny, nx = y + dy, x + dx\n                        if 0 <= ny < h and 0 <= nx < w and grid[ny][nx] == '1' and (ny, nx) not in seen:\n                            seen.add((ny, nx))\n                            stack.append((ny, nx))\n                sizes.append(size)\n    return $result\n",
      lambda r, p: ([s.replace(".", "1").replace("#", "0") for s in _grid(r, 0.5)],),
      ({"conn": "horizontally and vertically", "steps": ((0, 1), (1, 0), (0, -1), (-1, 0)), "what": "the number of islands", "result": "len(sizes)"},
       {"conn": "horizontally, vertically and diagonally", "steps": ((0, 1), (1, 0), (0, -1), (-1, 0), (1, 1), (1, -1), (-1, 1), (-1, -1)), "what": "the number of islands", "result": "len(sizes)"},
       {"conn": "horizontally and vertically", "steps": ((0, 1), (1, 0), (0, -1), (-1, 0)), "what": "the number of cells of the largest island (0 if there is no land)", "result": "max(sizes, default=0)"}), (([],), (["0"],))),
    T("knapsack", 3, "def knapsack(items: list[tuple[int, int]], capacity: int) -> int:",
      "items are (weight, value) pairs with positive weights. $what",
      "def knapsack(items, capacity):\n$code",
      lambda r, p: ([(r.randint(1, 9), r.randint(1, 20)) for _ in range(r.randint(0, 6))], r.randint(0, 25)),
      ({"what": "Using each item at most once, return the largest total value with total weight <= capacity.",
        "code": "    best = [0] * (capacity + 1)\n    for w, v in items:\n        for c in range(capacity, w - 1, -1):\n            best[c] = max(best[c], best[c - w] + v)\n    return best[capacity]\n"},
       {"what": "Using each item any number of times, return the largest total value with total weight <= capacity.",
        "code": "    best = [0] * (capacity + 1)\n    for c in range(1, capacity + 1):\n        for w, v in items:\n            if w <= c:\n                best[c] = max(best[c], best[c - w] + v)\n    return best[capacity]\n"},
       {"what": "Using each item at most once, return the largest total value with total weight exactly capacity, or -1 if no subset weighs exactly capacity.",
        "code": "    NEG = -1\n    best = [0] + [NEG] * capacity\n    for w, v in items:\n        for c in range(capacity, w - 1, -1):\n            if best[c - w] != NEG:\n                best[c] = max(best[c], best[c - w] + v)\n    return best[capacity]\n"}), (([], 0), ([], 5))),
    T("queens", 3, "def queens(n: int) -> $ret:",
      "Place n queens on an n x n board so that no two share a row, column or diagonal. $what",
      "def solutions(n):\n    def go(row, cols):\n        if row == n:\n            yield list(cols)\n            return\n        for c in range(n):\n            if all(c != pc and abs(c - pc) != row - pr for pr, pc in enumerate(cols)):\n                cols.append(c)\n                yield from go(row + 1, cols)\n                cols.pop()\n    yield from go(0, [])\n\ndef queens(n):\n$code",
      lambda r, p: (r.randint(1, 8),),
      ({"ret": "int", "what": "Return the number of ways (n >= 1).", "code": "    return sum(1 for _ in solutions(n))\n"},
       {"ret": "list[int] | None", "what": "Return the lexicographically smallest solution as the list of queen columns for rows 0..n-1, or None if there is none.", "code": "    return next(solutions(n), None)\n"},
       {"ret": "int", "what": "Return the number of solutions that have a queen in the top-left corner (row 0, column 0).", "code": "    return sum(1 for s in solutions(n) if s[0] == 0)\n"}), ((1,), (2,), (3,))),
    T("palindromes", 3, "def palindromes(s: str) -> $ret:",
      "$what",
      "def palindromes(s):\n$code",
      lambda r, p: (_word(r, "abac", 0, 12),),
      ({"ret": "str", "what": "Return the longest palindromic substring of s (the leftmost one on ties; '' for an empty s).",
        "code": "    best = ''\n    for i in range(len(s)):\n        for j in range(i + 1, len(s) + 1):\n            t = s[i:j]\n            if len(t) > len(best) and t == t[::-1]:\n                best = t\n    return best\n"},
       {"ret": "int", "what": "Return the length of the longest palindromic subsequence of s (not necessarily contiguous).",
        "code": "    n = len(s)\n    if n == 0:\n        return 0\n    dp = [[0] * n for _ in range(n)]\n    for i in range(n - 1, -1, -1):\n        dp[i][i] = 1\n        for j in range(i + 1, n):\n            dp[i][j] = dp[i + 1][j - 1] + 2 if s[i] == s[j] else max(dp[i + 1][j], dp[i][j - 1])\n    return dp[0][n - 1]\n"},
       {"ret": "int", "what": "Return the number of non-empty palindromic substrings of s, counting each position separately (so 'aaa' has 6).",
        "code": "    return sum(1 for i in range(len(s)) for j in range(i + 1, len(s) + 1) if s[i:j] == s[i:j][::-1])\n"}), (("",),)),
    T("schedule", 3, "def schedule(intervals: list[tuple[int, int]]) -> int:",
      "Each interval (start, end) with start < end occupies the half-open time range [start, end). $what",
      "def schedule(intervals):\n$code",
      lambda r, p: ([(a, a + r.randint(1, 6)) for a in _ints(r, r.randint(0, 7), 0, 15)],),
      ({"what": "Return the largest number of pairwise non-overlapping intervals.",
        "code": "    count, end = 0, float('-inf')\n    for a, b in sorted(intervals, key=lambda x: x[1]):\n        if a >= end:\n            count, end = count + 1, b\n    return count\n"},
       {"what": "Return the fewest rooms needed to hold all intervals (meetings) without overlap in any room.",
        "code": "    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])\n    cur = best = 0\n    for _, d in events:\n        cur += d\n        best = max(best, cur)\n    return best\n"},
       {"what": "The weight of an interval is end - start. Return the largest total weight of pairwise non-overlapping intervals.",
        "code": "    import bisect\n    iv = sorted(intervals, key=lambda x: x[1])\n    ends = [b for _, b in iv]\n    best = [0] * (len(iv) + 1)\n    for i, (a, b) in enumerate(iv):\n        j = bisect.bisect_right(ends, a, 0, i)\n        best[i + 1] = max(best[i], best[j] + b - a)\n    return best[-1]\n"}), (([],),)),
)


def _expr(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.3:
        return str(rng.randint(0, 12))
    if rng.random() < 0.25:
        return f"({_expr(rng, depth - 1)})"
    op = rng.choice(["+", "-", "*"])
    sp = " " if rng.random() < 0.5 else ""
    return f"{_expr(rng, depth - 1)}{sp}{op}{sp}{_expr(rng, depth - 1)}"


def _nested(rng: random.Random, depth: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(rng.randint(0, 3)):
        out.append(_nested(rng, depth - 1) if depth > 0 and rng.random() < 0.45 else rng.randint(0, 9))
    return out


def _dag(rng: random.Random) -> Any:
    n = rng.randint(1, 6)
    order = list(range(n))
    rng.shuffle(order)
    edges = {(order[i], order[j]) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.3}
    if n > 2 and rng.random() < 0.2:  # add a back edge: a cycle
        i, j = sorted(rng.sample(range(n), 2))
        edges.add((order[j], order[i]))
    return n, sorted(edges)


def _sub(text: str, params: dict[str, Any]) -> str:
    return Template(text).substitute({k: v for k, v in params.items()})


def _call(entry: str, args: tuple[Any, ...]) -> str:
    return f"{entry}({', '.join(repr(a) for a in args)})"


def build_catalog() -> list[dict[str, Any]]:
    """Every template x variant as a task dict (the rows of ``builtin_tasks.jsonl``).

    Deterministic: the RNG of each (template, variant) is seeded from its id.
    """
    import copy

    rows = []
    for tpl in TEMPLATES:
        for vi, params in enumerate(tpl.variants):
            task_id = f"code/{tpl.slug}/{vi}"
            rng = random.Random(task_id)
            source = _sub(tpl.code, params)
            ns: dict[str, Any] = {}
            exec(compile(source, task_id, "exec"), ns)  # trusted: the project's reference
            fn = ns[tpl.entry_point]
            calls: list[tuple[Any, ...]] = []
            seen: set[str] = set()
            candidates = list(tpl.edge)
            tries = 0
            while len(calls) < N_EXAMPLES + N_HIDDEN and tries < 500:
                tries += 1
                args = candidates.pop(0) if candidates and len(calls) >= N_EXAMPLES else tpl.gen(rng, params)
                key = repr(args)
                if key in seen:
                    continue
                seen.add(key)
                calls.append(args)
            results = [fn(*copy.deepcopy(a)) for a in calls]
            examples = "\n".join(f"    >>> {_call(tpl.entry_point, a)}\n    {r!r}" for a, r in zip(calls[:N_EXAMPLES], results))
            doc = _sub(tpl.doc, params)
            prompt = f'{_sub(tpl.signature, params)}\n    """{doc}\n\n{examples}\n    """\n'
            tests = [
                [f"test_{i}", _call("candidate", a), repr(r)]
                for i, (a, r) in enumerate(zip(calls[N_EXAMPLES:], results[N_EXAMPLES:]))
            ]
            rows.append({
                "id": task_id,
                "prompt": prompt,
                "entry_point": tpl.entry_point,
                "solution": source,
                "tests": tests,
                "level": tpl.level,
            })
    return rows
