"""Tool-use tasks: a user's turns, the gold calls per turn, and the world they start from.

A :class:`ToolsTask` is plain data. Its ``gold`` is the gold call sequence (one tuple of calls
per user turn); the gold *state* after every turn is not stored but replayed from
``initial`` by the env (and cached), so the task file stays small and cannot drift from the
backend's behaviour.

Sources:

* ``store`` — our generated online store (:func:`generate_store_task`), regenerable from the
  id ``tools/store/SEED``.
* ``bfcl`` — BFCL v4 multi-turn (:func:`turngym.envs.tools.bfcl.load_bfcl_tasks`), ids
  ``bfcl/multi_turn_base_0`` and so on.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from turngym.core.errors import TaskError
from turngym.core.task import Task

__all__ = ["ToolsTask", "generate_store_task", "store_task_from_id", "STORE_ID_PREFIX", "ORDER_STATUSES"]

STORE_ID_PREFIX = "tools/store/"
_STORE_ID = re.compile(r"^tools/store/(\d+)$")

Call = Mapping[str, Any]  # {"name": str, "arguments": {...}}


@dataclass(frozen=True)
class ToolsTask(Task):
    """A multi-turn tool-use task.

    Attributes:
        source: ``"store"`` or ``"bfcl"``.
        category: the subset (BFCL: ``base``, ``long_context``, ``miss_func``, ``miss_param``;
            store: ``generated``).
        turns: the user's message at each turn (``turns[0]`` is the prompt).
        answers: per turn, strings the agent's closing message must contain (the facts the
            user asked for); BFCL tasks use the response check instead (``check_results``).
        initial: the starting world: BFCL's ``initial_config``, or the store's database.
        classes: BFCL's involved backend classes (empty for the store).
        missed: BFCL miss_func: turn index (as str) → functions revealed at that turn.
        excluded: functions never offered to the agent.
        check_results: BFCL's response rule: the gold calls' results of a turn must appear
            among the results of the agent's calls so far.
    """

    source: str = "store"
    category: str = "generated"
    turns: tuple[str, ...] = ()
    answers: tuple[tuple[str, ...], ...] = ()
    initial: Mapping[str, Any] = field(default_factory=dict)
    classes: tuple[str, ...] = ()
    missed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    excluded: tuple[str, ...] = ()
    check_results: bool = False

    @property
    def gold_calls(self) -> tuple[tuple[Call, ...], ...]:
        """The gold calls of each turn (``self.gold``)."""
        return self.gold

    @property
    def n_turns(self) -> int:
        return len(self.turns)


# ----------------------------------------------------------------------------- store tasks
_FIRST = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam"]
_LAST = ["Nguyen", "Okafor", "Schmidt", "Rossi", "Kim", "Silva", "Haddad", "Novak", "Larsen", "Tanaka"]
_STREETS = ["Oak St", "Maple Ave", "Harbor Rd", "Elm Way", "Cedar Ln", "Birch Blvd", "Lake Dr", "Hill Ct"]
_CITIES = ["Springfield", "Riverton", "Lakeside", "Fairview", "Greenville", "Bayside"]
_COLORS = ["red", "blue", "green", "black", "white", "yellow", "grey", "orange"]
_KINDS = [
    "mug",
    "backpack",
    "desk lamp",
    "water bottle",
    "notebook",
    "headphones",
    "umbrella",
    "t-shirt",
    "keyboard",
    "kettle",
]
_STATUSES = ["pending", "pending", "shipped", "delivered", "delivered", "cancelled"]
#: Every status an order can have (the kind of a status answer: a reply naming them all answers nothing).
ORDER_STATUSES = frozenset({*_STATUSES, "refunded", "return_requested"})


def _address(rng: random.Random) -> str:
    return f"{rng.randint(1, 999)} {rng.choice(_STREETS)}, {rng.choice(_CITIES)}"


def _money(x: float) -> float:
    return round(x + 1e-9, 2)


def _build_db(rng: random.Random) -> dict[str, Any]:
    """A small store: 4 customers, 10 products, 3-4 orders each, with mixed statuses."""
    products: dict[str, Any] = {}
    names = set()
    while len(products) < 10:
        name = f"{rng.choice(_COLORS)} {rng.choice(_KINDS)}"
        if name in names:
            continue
        names.add(name)
        sku = f"P{100 + len(products)}"
        products[sku] = {"name": name, "price": _money(rng.randint(500, 9000) / 100), "stock": rng.randint(0, 12)}
    customers: dict[str, Any] = {}
    orders: dict[str, Any] = {}
    order_no = 1000
    people = rng.sample([(f, ln) for f in _FIRST for ln in _LAST], 4)
    for i, (first, last) in enumerate(people):
        cid = f"C{i + 1:02d}"
        customers[cid] = {
            "name": f"{first} {last}",
            "email": f"{first.lower()}.{last.lower()}@example.com",
            "address": _address(rng),
        }
        statuses = rng.sample(_STATUSES, 4)
        for status in statuses:
            skus = rng.sample(sorted(products), rng.randint(1, 3))
            items = [{"sku": s, "qty": rng.randint(1, 3), "price": products[s]["price"]} for s in skus]
            orders[f"O{order_no}"] = {
                "customer_id": cid,
                "items": items,
                "status": status,
                "total": _money(sum(it["qty"] * it["price"] for it in items)),
                "address": customers[cid]["address"],
                "refunded": 0.0,
            }
            order_no += 1
    return {
        "customers": customers,
        "products": products,
        "orders": orders,
        "returns": {},
        "next_order": order_no,
        "next_return": 1,
    }


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _requests(rng: random.Random, db: dict[str, Any], cid: str) -> list[tuple[str, list[dict[str, Any]], list[str]]]:
    """Every request this customer could make: (user text, gold calls, required answers).

    Gold calls are the policy-compliant way to satisfy the request; where policy forbids what
    the user asks (a refund for an order that has not arrived), the gold is to look the order
    up and tell the user its status instead.
    """
    mine = {oid: o for oid, o in db["orders"].items() if o["customer_id"] == cid}
    out: list[tuple[str, list[dict[str, Any]], list[str]]] = []
    products = db["products"]
    for oid, o in sorted(mine.items()):
        status = o["status"]
        out.append((f"What is the status of my order {oid}?", [_call("get_order", order_id=oid)], [status]))
        out.append(
            (f"How much did I pay in total for order {oid}?", [_call("get_order", order_id=oid)], [f"{o['total']:.2f}"])
        )
        if status == "pending":
            reason = rng.choice(["no longer needed", "ordered by mistake"])
            out.append(
                (
                    f"Please cancel order {oid}, it was {reason}.",
                    [_call("cancel_order", order_id=oid, reason=reason)],
                    [],
                )
            )
            addr = _address(rng)
            out.append(
                (
                    f"Please ship order {oid} to {addr} instead.",
                    [_call("update_order_address", order_id=oid, address=addr)],
                    [],
                )
            )
        if status == "delivered":
            out.append(
                (
                    f"Order {oid} arrived damaged. I want a refund for it.",
                    [_call("refund_order", order_id=oid, reason="damaged")],
                    [f"{o['total']:.2f}"],
                )
            )
            item = rng.choice(o["items"])
            pname = products[item["sku"]]["name"]
            out.append(
                (
                    f"I'd like to return the {pname} from order {oid}.",
                    [_call("return_items", order_id=oid, skus=[item["sku"]])],
                    [],
                )
            )
        if status in ("pending", "shipped"):
            # Policy trap: refunds only for delivered orders. The gold is to check and explain.
            out.append((f"Refund order {oid} right now, please.", [_call("get_order", order_id=oid)], [status]))
    in_stock = [s for s, p in sorted(products.items()) if p["stock"] >= 2]
    if in_stock:
        sku = rng.choice(in_stock)
        qty = rng.randint(1, 2)
        total = _money(qty * products[sku]["price"])
        out.append(
            (
                f"I want to buy {qty} x {products[sku]['name']}. What will it cost?",
                [
                    _call("search_products", query=products[sku]["name"]),
                    _call("place_order", items=[{"sku": sku, "qty": qty}]),
                ],
                [f"{total:.2f}"],
            )
        )
    addr = _address(rng)
    out.append((f"Please change my default address to {addr}.", [_call("update_customer_address", address=addr)], []))
    return out


def generate_store_task(seed: int, n_requests: int | None = None) -> ToolsTask:
    """A store task from a seed: a fresh database, a customer and 1-3 requests (one per turn).

    The first turn identifies the customer (``identify_customer`` is the first gold call);
    requests never touch the same order twice, so the gold calls of each turn are the unique
    policy-compliant solution up to read-only lookups.

    >>> t = generate_store_task(7)
    >>> t.id, t.n_turns == len(t.gold), t.gold[0][0]["name"]
    ('tools/store/7', True, 'identify_customer')
    """
    rng = random.Random(seed)
    db = _build_db(rng)
    cid = rng.choice(sorted(db["customers"]))
    customer = db["customers"][cid]
    k = n_requests if n_requests is not None else rng.randint(1, 3)
    pool = _requests(rng, db, cid)
    rng.shuffle(pool)
    chosen: list[tuple[str, list[dict[str, Any]], list[str]]] = []
    used_orders: set[str] = set()
    kinds: set[str] = set()
    for text, calls, answers in pool:
        target = next((c["arguments"].get("order_id") for c in calls if "order_id" in c["arguments"]), None)
        kind = calls[-1]["name"]
        if target in used_orders or (target is None and kind in kinds):
            continue
        if target is not None:
            used_orders.add(target)
        kinds.add(kind)
        chosen.append((text, calls, answers))
        if len(chosen) == k:
            break
    turns, gold, answers_per_turn = [], [], []
    for i, (text, calls, answers) in enumerate(chosen):
        if i == 0:
            text = f"Hi, I'm {customer['name']} ({customer['email']}). {text}"
            calls = [_call("identify_customer", email=customer["email"]), *calls]
        turns.append(text)
        gold.append(tuple(calls))
        answers_per_turn.append(tuple(answers))
    return ToolsTask(
        id=f"{STORE_ID_PREFIX}{seed}",
        prompt=turns[0],
        gold=tuple(gold),
        meta={"source": "store", "customer_id": cid, "seed": seed},
        source="store",
        category="generated",
        turns=tuple(turns),
        answers=tuple(answers_per_turn),
        initial=db,
    )


def store_task_from_id(task_id: str) -> ToolsTask:
    """Regenerate ``tools/store/SEED``."""
    m = _STORE_ID.match(task_id)
    if m is None:
        raise TaskError(f"{task_id!r} is not a store task id (expected 'tools/store/SEED')")
    return generate_store_task(int(m.group(1)))
