"""Shop tasks: a structured goal plus its instruction; a seeded generator and a WebShop loader.

A goal names a target product and asks for some of its attributes, some of its option values
and a price cap. The cap follows WebShop's rule: take the next four multiples of $10 above the
product's price, draw two of them, keep the larger (no cap when fewer than two exist). The
instruction is rendered from templates at three paraphrase levels:

* 0 — WebShop's synthetic style: "i am looking for X that is A and B with color: red, and
  size: large, and price lower than 40.00 dollars";
* 1 — varied natural phrasings of the same facts;
* 2 — as 1, with attributes replaced by synonyms where the vocabulary has them
  ("without gluten" for "gluten free"), so the literal search terms are no longer given.

Generated task ids encode everything needed to regenerate them
(``shop/{catalog key}/p{level}/{seed}``). :func:`load_webshop` reads WebShop's own files
(``items_shuffle*.json``, ``items_ins_v2*.json``, ``items_human_ins.json``) for users who have
them, following ``web_agent_site/engine/engine.py`` and ``goal.py``.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turngym.core.errors import TaskError
from turngym.core.task import Task
from turngym.envs.shop.catalog import Catalog, Product, ProductListCatalog
from turngym.envs.shop.vocab import CATEGORIES, STOPWORDS

__all__ = [
    "ShopTask",
    "PRICE_RANGE",
    "NO_PRICE_CAP",
    "price_cap",
    "generate_task",
    "task_from_generated_id",
    "load_webshop",
    "load_webshop_products",
]

#: WebShop's candidate price caps: $10, $20, ..., $990.
PRICE_RANGE: tuple[float, ...] = tuple(10.0 * i for i in range(1, 100))
#: The cap used when the rule yields none (WebShop uses 1,000,000 too).
NO_PRICE_CAP = 1_000_000.0


@dataclass(frozen=True)
class ShopTask(Task):
    """A shopping goal. ``gold`` is the target product's ASIN; ``prompt`` the instruction.

    Attributes:
        catalog: the key of the catalog the task was drawn from.
        asin: the target product (any product meeting the goal earns full reward, as in WebShop).
        query: the target's query (WebShop's scrape query; the type name for generated products).
        product_category: the target's ``›`` category path.
        name: the target's title.
        nouns: the target type's head nouns (for the type factor).
        attributes: the attribute phrases asked for.
        options: ``((dimension, value), ...)`` asked for; dimension is "" when unknown.
        price_upper: the price cap in dollars (``NO_PRICE_CAP`` = none).
    """

    catalog: str = ""
    asin: str = ""
    query: str = ""
    product_category: str = ""
    name: str = ""
    nouns: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    price_upper: float = NO_PRICE_CAP


def price_cap(price: float, rng: random.Random) -> float:
    """WebShop's rule: the larger of two draws from the next four multiples of $10 above ``price``.

    >>> price_cap(23.5, random.Random(0)) in (40.0, 50.0, 60.0)
    True
    >>> price_cap(985.0, random.Random(0)) == NO_PRICE_CAP
    True
    """
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_CAP
    return max(rng.sample(candidates, 2))


def _price_text(cap: float) -> str:
    return f", and price lower than {cap:.2f} dollars" if cap < NO_PRICE_CAP else ""


def _option_phrase(rng: random.Random, dim: str, value: str) -> str:
    if dim == "color":
        return rng.choice((f"in {value}", f"{value} color", f"in the color {value}"))
    if dim in value.split() or dim == "pack":  # "size 8", "espresso roast", "2 pack"
        return value
    return rng.choice((f"{dim} {value}", f"{value} {dim}", f"with {dim} {value}"))


def _a(noun: str) -> str:
    """The indefinite article for ``noun`` ("" for plurals such as "running shoes")."""
    if noun.endswith("s") and not noun.endswith("ss"):
        return noun
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _join(words: Sequence[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _instruction(rng: random.Random, type_name: str, category: str, attrs: Sequence[str],
                 options: Sequence[tuple[str, str]], cap: float, level: int) -> str:
    if level == 0:
        opt = (" with " + ", and ".join(f"{d}: {v}" for d, v in options)) if options else ""
        return f"i am looking for {type_name} that is {_join(attrs)}{opt}{_price_text(cap)}"
    if level >= 2:
        syn = CATEGORIES[category].synonyms
        attrs = [rng.choice(syn[a]) if a in syn and rng.random() < 0.8 else a for a in attrs]
    opts = _join([_option_phrase(rng, d, v) for d, v in options])
    with_opts = f" {opts}" if opts else ""
    budget = (
        rng.choice((
            f", and price lower than {cap:.2f} dollars",
            f", under {cap:.0f} dollars",
            f". my budget is {cap:.0f} dollars",
            f", priced below ${cap:.2f}",
        ))
        if cap < NO_PRICE_CAP
        else ""
    )
    template = rng.randrange(4)
    if template == 0:
        return f"i need {_a(type_name)} that is {_join(attrs)}{with_opts}{budget}"
    if template == 1:
        return f"find me {_a(_join(attrs) + ' ' + type_name)}{with_opts}{budget}"
    if template == 2:
        return f"i want to buy {_a(type_name)}{with_opts}; it should be {_join(attrs)}{budget}"
    return f"looking for {_a(type_name)}: {_join(attrs)}{with_opts}{budget}"


def _product_fields(p: Product, catalog: Catalog) -> dict[str, Any]:
    """The fields of a task that come from its target product."""
    return {"gold": p.asin, "catalog": catalog.key, "asin": p.asin, "query": p.query,
            "product_category": p.product_category, "name": p.title, "nouns": p.nouns}


def generate_task(catalog: Catalog, seed: int, paraphrase: int = 1) -> ShopTask:
    """Draw the goal for ``seed`` from ``catalog`` and render its instruction.

    >>> from turngym.envs.shop.catalog import get_catalog
    >>> t = generate_task(get_catalog(0, 1000, 0.2), seed=5, paraphrase=0)
    >>> t.id, t.gold == t.asin, 1 <= len(t.attributes) <= 3
    ('shop/gen-0-1000-0.2/p0/5', True, True)
    """
    if paraphrase not in (0, 1, 2):
        raise TaskError(f"paraphrase level must be 0, 1 or 2, got {paraphrase!r}")
    rng = random.Random(f"turngym-shop-goal/{catalog.key}/{seed}")
    p = catalog.product(rng.randrange(len(catalog)))
    attrs = rng.sample(p.attributes, rng.randint(1, min(3, len(p.attributes))))
    options = [(dim, rng.choice(values)) for dim, values in p.options if rng.random() < 0.75]
    cap = price_cap(p.price, rng)
    prompt = _instruction(rng, p.query, p.category, attrs, options, cap, paraphrase)
    return ShopTask(
        id=f"shop/{catalog.key}/p{paraphrase}/{seed}",
        prompt=prompt,
        meta={"paraphrase": paraphrase, "source": "generated"},
        **_product_fields(p, catalog),
        attributes=tuple(attrs),
        options=tuple(options),
        price_upper=cap,
    )


_GEN_ID = re.compile(r"^shop/(?P<catalog>[^/]+)/p(?P<level>[0-2])/(?P<seed>\d+)$")


def task_from_generated_id(catalog: Catalog, task_id: str) -> ShopTask:
    """Regenerate a task from its id; the id's catalog must be ``catalog``."""
    m = _GEN_ID.match(task_id)
    if m is None:
        raise TaskError(f"{task_id!r} is not a generated shop task id (expected shop/<catalog>/p<0-2>/<seed>)")
    if m["catalog"] != catalog.key:
        raise TaskError(
            f"task {task_id!r} belongs to catalog {m['catalog']!r} but this env uses {catalog.key!r}; "
            "make the env with the matching catalog_seed / n_products / distractor_density"
        )
    return generate_task(catalog, int(m["seed"]), int(m["level"]))


# ------------------------------------------------------------------------ WebShop files
_CONTENT_WORD = re.compile(r"[a-z][a-z]+")


def _title_nouns(title: str) -> tuple[str, ...]:
    """Content words of a title: the stand-in for spaCy nouns when no structure is known."""
    return tuple(dict.fromkeys(w for w in _CONTENT_WORD.findall(title.lower()) if w not in STOPWORDS and len(w) > 2))


def _read_json(path: str | Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise TaskError(f"WebShop file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise TaskError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def _parse_price(pricing: Any, rng: random.Random) -> float:
    """WebShop's pricing: "$x" or "$x - $y" (a uniform draw between them), missing → $100."""
    if not pricing:
        return 100.0
    values = []
    for part in str(pricing).split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        try:
            values.append(float(digits))
        except ValueError:
            continue
    if not values:
        return 100.0
    if len(values) == 1:
        return values[0]
    return round(rng.uniform(values[0], values[1]), 2)


def load_webshop_products(
    products_path: str | Path,
    attributes_path: str | Path | None = None,
    reviews_path: str | Path | None = None,
    *,
    seed: int = 0,
) -> tuple[list[Product], dict[str, Mapping[str, Any]]]:
    """Read ``items_shuffle*.json`` (and ``items_ins_v2*.json``, the reviews file) into products.

    Returns the products and the per-ASIN attribute records (``attributes``, ``instruction``,
    ``instruction_attributes``). Products without a valid ASIN, or repeating one, are skipped
    as WebShop does; products without attributes get WebShop's ``["DUMMY_ATTR"]``.
    """
    raw = _read_json(products_path)
    if not isinstance(raw, list):
        raise TaskError(f"{products_path}: expected a JSON list of products, got {type(raw).__name__}")
    attrs: dict[str, Mapping[str, Any]] = _read_json(attributes_path) if attributes_path else {}
    if not isinstance(attrs, dict):
        raise TaskError(f"{attributes_path}: expected a JSON object keyed by ASIN")
    reviews_by_asin: dict[str, tuple[tuple[float, str], ...]] = {}
    rating_by_asin: dict[str, Any] = {}
    if reviews_path:
        for rec in _read_json(reviews_path):
            asin = str(rec.get("asin", ""))
            reviews_by_asin[asin] = tuple(
                (float(r.get("score", r.get("stars", 0)) or 0), str(r.get("review", r.get("body", "")) or ""))
                for r in rec.get("reviews") or []
                if isinstance(r, dict)
            )
            rating_by_asin[asin] = rec.get("average_rating")
    rng = random.Random(f"turngym-shop-webshop-prices/{seed}")
    products: list[Product] = []
    seen: set[str] = set()
    for n, item in enumerate(raw):
        if not isinstance(item, dict):
            raise TaskError(f"{products_path}: item {n} is not an object")
        asin = str(item.get("asin", ""))
        if not asin or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        bullets = item.get("small_description") or []
        if not isinstance(bullets, list):
            bullets = [bullets]
        options: list[tuple[str, tuple[str, ...]]] = []
        for dim, contents in (item.get("customization_options") or {}).items():
            if not contents:
                continue
            values = tuple(str(c["value"]).strip().replace("/", " | ").lower() for c in contents)
            options.append((dim.lower(), values))
        rec = attrs.get(asin, {})
        attributes = tuple(rec.get("attributes") or ("DUMMY_ATTR",))
        title = str(item.get("name") or "")
        reviews = reviews_by_asin.get(asin, ())
        rating = rating_by_asin.get(asin, item.get("average_rating"))
        try:
            rating_value = float(str(rating).split()[0]) if rating not in (None, "", "N.A.") else None
        except ValueError:
            rating_value = None
        products.append(
            Product(
                asin=asin,
                title=title,
                query=str(item.get("query") or "").lower().strip(),
                category=str(item.get("category") or ""),
                product_category=str(item.get("product_category") or ""),
                description=str(item.get("full_description") or ""),
                bullets=tuple(str(b) for b in bullets),
                attributes=attributes,
                options=tuple(options),
                price=_parse_price(item.get("pricing"), rng),
                rating=rating_value,
                reviews=reviews,
                nouns=_title_nouns(title),
            )
        )
    if not products:
        raise TaskError(f"{products_path}: no products with a valid ASIN")
    return products, attrs


def _task(catalog: Catalog, p: Product, i: int, kind: str, instruction: str, attributes: Sequence[str],
          options: Sequence[tuple[str, str]], cap: float) -> ShopTask:
    return ShopTask(
        id=f"shop/{catalog.key}/{kind}/{i}",
        prompt=instruction.strip().rstrip(".") + _price_text(cap),
        meta={"source": f"webshop-{kind}"},
        **_product_fields(p, catalog),
        attributes=tuple(attributes),
        options=tuple(options),
        price_upper=cap,
    )


def load_webshop(
    products_path: str | Path,
    attributes_path: str | Path | None = None,
    human_goals_path: str | Path | None = None,
    reviews_path: str | Path | None = None,
    *,
    seed: int = 233,
    key: str | None = None,
) -> tuple[ProductListCatalog, list[ShopTask]]:
    """Load WebShop's products and goals: ``(catalog, tasks)`` for ``ShopEnv(catalog=, tasks=)``.

    With ``human_goals_path`` (``items_human_ins.json``: ASIN → list of ``{instruction,
    instruction_attributes, instruction_options}``) the tasks are the human goals; otherwise
    they are WebShop's synthetic goals: one per option combination of every product whose
    ``items_ins_v2`` record has an instruction, the options appended as " with color: red, and
    size: large".
    Goals without attributes are skipped, as WebShop does. Price caps are drawn with ``seed``.
    """
    products, attrs = load_webshop_products(products_path, attributes_path, reviews_path, seed=seed)
    catalog = ProductListCatalog(products, key or f"webshop-{Path(products_path).stem}")
    rng = random.Random(f"turngym-shop-webshop-goals/{seed}")
    tasks: list[ShopTask] = []
    if human_goals_path is not None:
        human = _read_json(human_goals_path)
        if not isinstance(human, dict):
            raise TaskError(f"{human_goals_path}: expected a JSON object keyed by ASIN")
        for p in products:
            for goal in human.get(p.asin) or []:
                goal_attrs = goal.get("instruction_attributes") or []
                if not goal_attrs or not goal.get("instruction"):
                    continue
                opts = [("", str(v)) for v in goal.get("instruction_options") or []]
                cap = price_cap(p.price, rng)
                tasks.append(_task(catalog, p, len(tasks), "human", goal["instruction"], goal_attrs, opts, cap))
        return catalog, tasks
    for p in products:
        rec = attrs.get(p.asin) or {}
        text, goal_attrs = rec.get("instruction"), rec.get("instruction_attributes") or []
        if not text or not goal_attrs:
            continue
        cap = price_cap(p.price, rng)  # one cap per product, shared by its option combinations
        by_dim = dict(p.options)
        dims = sorted(by_dim)
        for combo in itertools.product(*(by_dim[d] for d in dims)):
            opts = list(zip(dims, combo))
            opt_text = (" with " + ", and ".join(f"{d}: {v}" for d, v in opts)) if opts else ""
            tasks.append(_task(catalog, p, len(tasks), "synthetic", text.strip().rstrip(".") + opt_text,
                               goal_attrs, opts, cap))
    return catalog, tasks
