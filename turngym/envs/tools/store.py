"""An online store backend (τ-bench style): a JSON database and tools that enforce policy.

The database holds customers, products (price, stock), orders (items, status, total,
shipping address, refunded amount) and returns. Tools read and write it; the store's rules
live *in the tools*, so a request the policy forbids is refused, and the refusal is a
``forbidden`` event the env reports as a process signal:

* the customer must be identified (``identify_customer``) before anything account-related,
  and may only see or change their own orders and profile;
* only ``pending`` orders can be cancelled or re-addressed;
* only ``delivered`` orders can be refunded or have items returned, once.

Non-policy failures (unknown order, out of stock, a SKU not in the order) are plain errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from turngym.core.parsing import function_tool
from turngym.envs.tools.backend import Backend, CallResult, format_result

__all__ = ["StoreBackend", "STORE_TOOLS", "PolicyViolation", "StoreError"]


class PolicyViolation(Exception):
    """The store's policy forbids this action (reported to the agent, flagged as forbidden)."""


class StoreError(Exception):
    """The action cannot be carried out (unknown id, bad quantity...)."""


_ORDER_ID = {"type": "string", "description": "The order id, such as 'O1003'."}
_ADDRESS = {"type": "string", "description": "A full street address."}

#: The store's tools in OpenAI function format, in a stable order.
STORE_TOOLS: tuple[dict[str, Any], ...] = (
    function_tool(
        "identify_customer",
        "Identify the customer you are talking to by their email. Required before any account action.",
        {"email": {"type": "string", "description": "The customer's email address."}},
        ["email"],
    ),
    function_tool(
        "get_customer",
        "Get the identified customer's profile and order ids.",
        {"customer_id": {"type": "string", "description": "The customer id, such as 'C01'."}},
        ["customer_id"],
    ),
    function_tool(
        "get_order", "Get an order's items, status, total and shipping address.", {"order_id": _ORDER_ID}, ["order_id"]
    ),
    function_tool(
        "search_products",
        "Search the catalogue by (part of) a product name; returns sku, name, price and stock.",
        {"query": {"type": "string", "description": "Words of the product name."}},
        ["query"],
    ),
    function_tool(
        "place_order",
        "Place a new order for the identified customer, shipped to their default address.",
        {
            "items": {
                "type": "array",
                "description": "What to buy.",
                "items": {
                    "type": "object",
                    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                    "required": ["sku", "qty"],
                    "additionalProperties": False,
                },
            }
        },
        ["items"],
    ),
    function_tool(
        "cancel_order",
        "Cancel a pending order (policy: only pending orders can be cancelled).",
        {"order_id": _ORDER_ID, "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]}},
        ["order_id", "reason"],
    ),
    function_tool(
        "update_order_address",
        "Change the shipping address of a pending order (policy: pending orders only).",
        {"order_id": _ORDER_ID, "address": _ADDRESS},
        ["order_id", "address"],
    ),
    function_tool(
        "refund_order",
        "Refund a delivered order in full (policy: delivered orders only, once).",
        {"order_id": _ORDER_ID, "reason": {"type": "string", "enum": ["damaged", "wrong item", "not as described"]}},
        ["order_id", "reason"],
    ),
    function_tool(
        "return_items",
        "Start a return of some items of a delivered order (policy: delivered orders only).",
        {
            "order_id": _ORDER_ID,
            "skus": {"type": "array", "items": {"type": "string"}, "description": "SKUs to return."},
        },
        ["order_id", "skus"],
    ),
    function_tool(
        "update_customer_address",
        "Change the identified customer's default address.",
        {"address": _ADDRESS},
        ["address"],
    ),
)


def _money(x: float) -> float:
    return round(x + 1e-9, 2)


class StoreBackend(Backend):
    """The store: ``db`` (compared against the gold DB) and the session (private)."""

    def __init__(self, db: Mapping[str, Any]) -> None:
        self.db: dict[str, Any] = _copy_json(dict(db))
        self._session: str | None = None
        self._handlers: dict[str, Callable[..., Any]] = {
            "identify_customer": self._identify_customer,
            "get_customer": self._get_customer,
            "get_order": self._get_order,
            "search_products": self._search_products,
            "place_order": self._place_order,
            "cancel_order": self._cancel_order,
            "update_order_address": self._update_order_address,
            "refund_order": self._refund_order,
            "return_items": self._return_items,
            "update_customer_address": self._update_customer_address,
        }

    def __deepcopy__(self, memo: dict[int, Any]) -> StoreBackend:
        # The DB is JSON-shaped: a recursive plain-container copy is ~5x faster than deepcopy.
        new = StoreBackend.__new__(StoreBackend)
        new.db = _copy_json(self.db)
        new._session = self._session
        new._handlers = {name: getattr(new, f"_{name}") for name in self._handlers}
        return new

    # -- Backend -----------------------------------------------------------------------------
    def call(self, name: str, arguments: Mapping[str, Any]) -> CallResult:
        handler = self._handlers[name]
        try:
            return CallResult(format_result(handler(**_copy_json(dict(arguments)))))
        except PolicyViolation as exc:
            return CallResult(f"Error: policy violation: {exc}", error=True, forbidden=True)
        except StoreError as exc:
            return CallResult(f"Error: {exc}", error=True)

    def state_roots(self) -> Mapping[str, Any]:
        return {"db": self.db, "_session": self._session}

    def same_state(self, other: Backend) -> bool:
        return isinstance(other, StoreBackend) and self.db == other.db

    # -- helpers -----------------------------------------------------------------------------
    def _me(self) -> str:
        if self._session is None:
            raise PolicyViolation("identify the customer with identify_customer before account actions")
        return self._session

    def _order(self, order_id: str) -> dict[str, Any]:
        oid = order_id.strip().lstrip("#")
        order = self.db["orders"].get(oid)
        if order is None:
            raise StoreError(f"no order {order_id!r}")
        if order["customer_id"] != self._me():
            raise PolicyViolation(f"order {oid} belongs to another customer")
        return order

    # -- tools -------------------------------------------------------------------------------
    def _identify_customer(self, email: str) -> dict[str, Any]:
        wanted = email.strip().lower()
        for cid, c in self.db["customers"].items():
            if c["email"] == wanted:
                self._session = cid
                return {"customer_id": cid, "name": c["name"]}
        raise StoreError(f"no customer with email {email!r}")

    def _get_customer(self, customer_id: str) -> dict[str, Any]:
        if customer_id != self._me():
            raise PolicyViolation("you may only look up the identified customer")
        c = self.db["customers"][customer_id]
        orders = sorted(oid for oid, o in self.db["orders"].items() if o["customer_id"] == customer_id)
        return {"customer_id": customer_id, **c, "orders": orders}

    def _get_order(self, order_id: str) -> dict[str, Any]:
        order = self._order(order_id)
        items = [{**it, "name": self.db["products"][it["sku"]]["name"]} for it in order["items"]]
        return {"order_id": order_id.strip().lstrip("#"), **order, "items": items}

    def _search_products(self, query: str) -> list[dict[str, Any]]:
        words = query.lower().split()
        return [
            {"sku": sku, **p}
            for sku, p in sorted(self.db["products"].items())
            if words and all(w in p["name"] for w in words)
        ]

    def _place_order(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        cid = self._me()
        if not items:
            raise StoreError("an order needs at least one item")
        products = self.db["products"]
        for it in items:
            p = products.get(it["sku"])
            if p is None:
                raise StoreError(f"no product {it['sku']!r}")
            if it["qty"] < 1:
                raise StoreError("quantities must be at least 1")
            if p["stock"] < it["qty"]:
                raise StoreError(f"only {p['stock']} of {it['sku']} in stock")
        lines = []
        for it in items:
            products[it["sku"]]["stock"] -= it["qty"]
            lines.append({"sku": it["sku"], "qty": it["qty"], "price": products[it["sku"]]["price"]})
        oid = f"O{self.db['next_order']}"
        self.db["next_order"] += 1
        total = _money(sum(x["qty"] * x["price"] for x in lines))
        self.db["orders"][oid] = {
            "customer_id": cid,
            "items": lines,
            "status": "pending",
            "total": total,
            "address": self.db["customers"][cid]["address"],
            "refunded": 0.0,
        }
        return {"order_id": oid, "total": total, "status": "pending"}

    def _cancel_order(self, order_id: str, reason: str) -> dict[str, Any]:
        order = self._order(order_id)
        if order["status"] != "pending":
            raise PolicyViolation(f"only pending orders can be cancelled; this order is {order['status']}")
        order["status"] = "cancelled"
        for it in order["items"]:
            self.db["products"][it["sku"]]["stock"] += it["qty"]
        return {"status": "cancelled"}

    def _update_order_address(self, order_id: str, address: str) -> dict[str, Any]:
        order = self._order(order_id)
        if order["status"] != "pending":
            raise PolicyViolation(f"only pending orders can be re-addressed; this order is {order['status']}")
        order["address"] = address
        return {"address": address}

    def _refund_order(self, order_id: str, reason: str) -> dict[str, Any]:
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise PolicyViolation(f"only delivered orders can be refunded; this order is {order['status']}")
        order["status"] = "refunded"
        order["refunded"] = order["total"]
        return {"refunded": order["total"], "status": "refunded"}

    def _return_items(self, order_id: str, skus: list[str]) -> dict[str, Any]:
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise PolicyViolation(f"only delivered orders can have items returned; this order is {order['status']}")
        in_order = {it["sku"]: it for it in order["items"]}
        if not skus:
            raise StoreError("name at least one sku to return")
        missing = [s for s in skus if s not in in_order]
        if missing:
            raise StoreError(f"sku(s) {missing} are not in order {order_id}")
        rid = f"R{self.db['next_return']}"
        self.db["next_return"] += 1
        refund = _money(sum(in_order[s]["qty"] * in_order[s]["price"] for s in sorted(set(skus))))
        self.db["returns"][rid] = {
            "order_id": order_id.strip().lstrip("#"),
            "skus": sorted(set(skus)),
            "refund": refund,
            "status": "requested",
        }
        order["status"] = "return_requested"
        return {"return_id": rid, "refund": refund}

    def _update_customer_address(self, address: str) -> dict[str, Any]:
        cid = self._me()
        self.db["customers"][cid]["address"] = address
        return {"address": address}


def _copy_json(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _copy_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_copy_json(v) for v in x]
    return x
