"""Math tasks: generated multi-step word problems with their gold chain, and a GSM8K loader.

A generated task is a small story: a start quantity followed by ``steps`` operations (add,
remove, multiply, share out, a percentage), with an optional distractor sentence, ending in a
question. The task keeps its **gold chain** — the value after every operation — and the
expression that computes each value from the previous one, so the env can reward a tool call
that lands on a gold intermediate and the oracle can replay the solution.

Generated ids encode the seed (``math/gen/{steps}/{seed}``), so a task id alone regenerates
the task bit for bit.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from pathlib import Path

from turngym.core.errors import TaskError
from turngym.core.task import Task, read_jsonl

__all__ = ["MathTask", "generate_task", "generate_tasks", "load_gsm8k", "MAX_STEPS"]

MAX_STEPS = 6


@dataclass(frozen=True)
class MathTask(Task):
    """A word problem with its gold chain of intermediate values.

    Attributes:
        chain: canonical number strings, the value after each solution step; the last one is
            the answer (``gold``).
        exprs: for each chain value, an arithmetic expression computing it from the numbers
            of the problem and the previous values (empty when the source gives none).
    """

    chain: tuple[str, ...] = ()
    exprs: tuple[str, ...] = ()

    @cached_property
    def chain_values(self) -> tuple[Fraction, ...]:
        """The chain as exact rationals (computed once per task)."""
        return tuple(Fraction(v) for v in self.chain)


_NAMES = (
    ("Ava", "she"), ("Ben", "he"), ("Chloe", "she"), ("Dmitri", "he"), ("Esme", "she"),
    ("Farid", "he"), ("Grace", "she"), ("Hugo", "he"), ("Ines", "she"), ("Jonah", "he"),
    ("Keiko", "she"), ("Luis", "he"), ("Maya", "she"), ("Nikhil", "he"), ("Olga", "she"),
    ("Pablo", "he"), ("Quinn", "they"), ("Rosa", "she"), ("Sami", "they"), ("Tomas", "he"),
)
_ITEMS = (
    ("marbles", "bags"), ("stickers", "sheets"), ("apples", "crates"), ("pencils", "packs"),
    ("cookies", "trays"), ("seashells", "buckets"), ("books", "boxes"), ("stamps", "albums"),
    ("beads", "jars"), ("tickets", "rolls"), ("bolts", "cases"), ("eggs", "cartons"),
    ("cards", "decks"), ("plants", "flats"), ("bottles", "crates"), ("coins", "pouches"),
)
_HAS = {"she": "has", "he": "has", "they": "have"}


def _start(rng: random.Random, name: str, items: str, unit: str, as_step: bool) -> tuple[str, str | None, int]:
    if as_step:
        a, b = rng.randint(2, 12), rng.randint(3, 25)
        return f"{name} has {a} {unit} with {b} {items} in each.", f"{a} * {b}", a * b
    a = rng.randint(5, 120)
    return f"{name} has {a} {items}.", None, a


def _operation(rng: random.Random, v: int, name: str, pro: str, items: str) -> tuple[str, str, int]:
    """One story sentence, the expression from the previous value, and the new value."""
    has = _HAS[pro]
    choices = ["add", "sub", "mul", "div", "pct"]
    weights = [3, 3 if v > 2 else 0, 2 if v < 5000 else 0, 2, 1]
    kind = rng.choices(choices, weights)[0]
    if kind == "div":
        divisors = [k for k in range(2, 7) if v % k == 0 and v // k >= 1]
        if not divisors:
            kind = "add"
    if kind == "pct":
        pcts = [p for p in (10, 20, 25, 50, 75) if (v * p) % 100 == 0 and v * p // 100 < v]
        if not pcts:
            kind = "add"
    if kind == "add":
        k = rng.randint(2, 60)
        text = rng.choice(
            (f"Then {pro} buys {k} more {items}.", f"A friend gives {name} {k} more {items}.",
             f"Later {pro} finds {k} additional {items}.")
        )
        return text, f"{v} + {k}", v + k
    if kind == "sub":
        k = rng.randint(1, v - 1)
        text = rng.choice(
            (f"{name} gives away {k} {items}.", f"Then {pro} loses {k} of the {items}.",
             f"{name} uses up {k} {items}.")
        )
        return text, f"{v} - {k}", v - k
    if kind == "mul":
        k = rng.randint(2, 5)
        word = {2: "twice", 3: "three times", 4: "four times", 5: "five times"}[k]
        text = f"After a big delivery, {name} {has} {word} as many {items} as before."
        return text, f"{v} * {k}", v * k
    if kind == "div":
        k = rng.choice(divisors)
        text = f"{name} splits the {items} equally among {k} friends, including {'themself' if pro == 'they' else ('herself' if pro == 'she' else 'himself')}, and keeps one share."
        return text, f"{v} / {k}", v // k
    p = rng.choice(pcts)
    text = f"{name} sells {p}% of the {items}."
    return text, f"{v} - {v} * {p} / 100", v - v * p // 100


def generate_task(seed: int, steps: int) -> MathTask:
    """Generate the word problem for ``(seed, steps)``; ``steps`` is the difficulty, 1..6.

    >>> t = generate_task(seed=3, steps=2)
    >>> t.id, len(t.chain), t.gold == t.chain[-1]
    ('math/gen/2/3', 2, True)
    """
    if not 1 <= steps <= MAX_STEPS:
        raise TaskError(f"steps must be in 1..{MAX_STEPS}, got {steps}")
    rng = random.Random(f"turngym-math/{steps}/{seed}")
    name, pro = rng.choice(_NAMES)
    items, unit = rng.choice(_ITEMS)
    as_step = rng.random() < 0.4
    sentence, expr, v = _start(rng, name, items, unit, as_step)
    sentences, exprs, chain = [sentence], [], []
    if expr is not None:
        exprs.append(expr)
        chain.append(v)
    while len(chain) < steps:
        text, expr, v = _operation(rng, v, name, pro, items)
        sentences.append(text)
        exprs.append(expr)
        chain.append(v)
    if rng.random() < 0.5:  # a distractor: a number that must not be used
        other, _ = rng.choice([n for n in _NAMES if n[0] != name])
        sentences.insert(rng.randint(1, len(sentences)), f"{other} has {rng.randint(3, 90)} {items} at home.")
    question = rng.choice(
        (f"How many {items} does {name} have now?", f"How many {items} does {name} end up with?",
         f"At the end, how many {items} does {name} have?")
    )
    prompt = " ".join(sentences) + " " + question
    chain_s = tuple(str(c) for c in chain)
    return MathTask(
        id=f"math/gen/{steps}/{seed}",
        prompt=prompt,
        gold=chain_s[-1],
        meta={"steps": steps, "source": "generated"},
        chain=chain_s,
        exprs=tuple(exprs),
    )


def generate_tasks(n: int, *, seed: int = 0, min_steps: int = 1, max_steps: int = MAX_STEPS) -> list[MathTask]:
    """``n`` generated tasks with difficulties cycling through ``min_steps..max_steps``."""
    span = max_steps - min_steps + 1
    return [generate_task(seed * 1_000_003 + i, min_steps + i % span) for i in range(n)]


_GEN_ID = re.compile(r"^math/gen/(\d+)/(-?\d+)$")


def task_from_generated_id(task_id: str) -> MathTask:
    m = _GEN_ID.match(task_id)
    if m is None:
        raise TaskError(f"{task_id!r} is not a generated math task id (expected 'math/gen/STEPS/SEED')")
    return generate_task(int(m.group(2)), int(m.group(1)))


_CALC_ANNOT = re.compile(r"<<([^=<>]+)=([^<>]+)>>")
_FINAL = re.compile(r"####\s*(.+?)\s*$")


def _clean_number(s: str) -> str:
    return s.replace(",", "").replace("$", "").strip()


def load_gsm8k(path: str | Path, *, limit: int | None = None) -> list[MathTask]:
    """Load GSM8K-format JSONL (``question``, ``answer`` ending in ``#### n``).

    GSM8K's calculator annotations ``<<48/2=24>>`` become the gold chain and expressions; a
    problem without them gets a one-element chain (the answer). Ids are ``gsm8k/{line}``
    unless the row has an ``id``.
    """
    tasks: list[MathTask] = []
    for i, row in enumerate(read_jsonl(path)):
        if limit is not None and len(tasks) >= limit:
            break
        try:
            question, answer = row["question"], row["answer"]
        except KeyError as exc:
            raise TaskError(f"{path}: row {i} lacks {exc.args[0]!r}; GSM8K rows need 'question' and 'answer'") from None
        m = _FINAL.search(answer.strip())
        if m is None:
            raise TaskError(f"{path}: row {i}: answer has no '#### <number>' line")
        final = _clean_number(m.group(1))
        try:
            Fraction(final)
        except (ValueError, ZeroDivisionError):
            raise TaskError(f"{path}: row {i}: final answer {final!r} is not a number") from None
        exprs, chain = [], []
        for expr, value in _CALC_ANNOT.findall(answer):
            try:
                chain.append(str(Fraction(_clean_number(value))))
                exprs.append(expr.strip())
            except (ValueError, ZeroDivisionError):
                continue
        if not chain or Fraction(chain[-1]) != Fraction(final):
            chain.append(str(Fraction(final)))
            exprs.append(final)
        tasks.append(
            MathTask(
                id=str(row.get("id", f"gsm8k/{i}")),
                prompt=question.strip(),
                gold=str(Fraction(final)),
                meta={"steps": len(chain), "source": str(path)},
                chain=tuple(chain),
                exprs=tuple(exprs),
            )
        )
    if not tasks:
        raise TaskError(f"{path}: no tasks found")
    return tasks

