"""WebShop's pages as text: what each page shows and what can be clicked on it.

Layouts follow WebShop's ``text`` observation (buttons in brackets, as in the ReAct
prompts): the instruction on every page; search → results (10 per page, up to 50) → item page
(options, price, rating, sub-page buttons, Buy Now) → Description / Features / Reviews /
Attributes sub-pages. Every page ends with the list of actions valid on it, so an agent never
has to guess button names (GEM's WebShop port does the same).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from turngym.envs.shop.catalog import Product

__all__ = [
    "BACK",
    "NEXT",
    "PREV",
    "BUY",
    "SUBPAGES",
    "PRODUCTS_PER_PAGE",
    "page_count",
    "results_clickables",
    "item_clickables",
    "subpage_clickables",
    "render_search",
    "render_results",
    "render_item",
    "render_subpage",
]

BACK = "back to search"
NEXT = "next >"
PREV = "< prev"
BUY = "buy now"
SUBPAGES = ("description", "features", "reviews", "attributes")
#: Products per results page (WebShop's ``PRODUCT_WINDOW``).
PRODUCTS_PER_PAGE = 10


def page_count(n_results: int, page_size: int = PRODUCTS_PER_PAGE) -> int:
    return max(1, -(-n_results // page_size))


def _actions(clickables: Sequence[str], search: bool = False) -> str:
    acts = ["search[<your query>]"] if search else []
    acts += [f"click[{c}]" for c in clickables]
    return "Available actions: " + ", ".join(acts)


def results_clickables(results: Sequence[int], page: int, asins: Sequence[str], page_size: int = PRODUCTS_PER_PAGE) -> list[str]:
    """Buttons of a results page; ``asins`` are those of the products shown on it."""
    out = [BACK]
    if page > 1:
        out.append(PREV)
    if page < page_count(len(results), page_size):
        out.append(NEXT)
    out += [a.lower() for a in asins]
    return out


def item_clickables(product: Product) -> list[str]:
    out = [BACK, PREV]
    seen = set(out)
    for _, values in product.options:
        for v in values:
            if v not in seen:
                seen.add(v)
                out.append(v)
    return out + [s for s in SUBPAGES if s not in seen] + [BUY]


def subpage_clickables() -> list[str]:
    return [BACK, PREV]


def render_search(instruction: str) -> str:
    return f"WebShop\nInstruction: {instruction}\n[Search]\n\n{_actions((), search=True)}"


def render_results(instruction: str, results: Sequence[int], page: int, products: Sequence[Product], page_size: int = PRODUCTS_PER_PAGE) -> str:
    """``products`` are the ones on this page, in order."""
    lines = [f"Instruction: {instruction}", "[Back to Search]"]
    lines.append(f"Page {page} (Total results: {len(results)})")
    if page > 1:
        lines.append("[< Prev]")
    if page < page_count(len(results), page_size):
        lines.append("[Next >]")
    if not products:
        lines.append("No products match your search.")
    for p in products:
        lines += ["", f"[{p.asin}]", p.title, f"${p.price:.2f}"]
    clickables = results_clickables(results, page, [p.asin for p in products], page_size)
    return "\n".join(lines) + "\n\n" + _actions(clickables)


def render_item(instruction: str, product: Product, chosen: Mapping[str, str]) -> str:
    lines = [f"Instruction: {instruction}", "[Back to Search]", "[< Prev]"]
    for dim, values in product.options:
        lines.append(f"{dim}: " + " ".join(f"[{v}]" for v in values))
    if chosen:
        lines.append("Selected: " + ", ".join(f"{d}: {v}" for d, v in chosen.items()))
    rating = f"{product.rating:.1f}" if product.rating is not None else "N.A."
    lines += [product.title, f"Price: ${product.price:.2f}", f"Rating: {rating}"]
    lines.append(" ".join(f"[{s.capitalize()}]" for s in SUBPAGES))
    lines.append("[Buy Now]")
    return "\n".join(lines) + "\n\n" + _actions(item_clickables(product))


def render_subpage(instruction: str, product: Product, which: str) -> str:
    lines = [f"Instruction: {instruction}", "[Back to Search]", "[< Prev]", f"{which.capitalize()}:"]
    if which == "description":
        lines.append(product.description or "(no description)")
    elif which == "features":
        lines += [f"- {b}" for b in product.bullets] or ["(no features listed)"]
    elif which == "reviews":
        lines += [f"- {r:.0f}/5: {text}" for r, text in product.reviews] or ["(no reviews yet)"]
    else:
        lines += [f"- {a}" for a in product.attributes] or ["(no attributes listed)"]
    return "\n".join(lines) + "\n\n" + _actions(subpage_clickables())
