"""Products and catalogs: a seeded generator (1k-100k products) and a list-backed catalog.

A :class:`Product` carries exactly the fields WebShop's pages and reward read (title, query,
category path, description, bullet points, attributes, options, price, reviews), plus
``nouns``, the structured stand-in for WebShop's spaCy noun parse.

:class:`GeneratedCatalog` keeps each product as a compact spec (type, brand, attribute ids,
option value ids, price) and renders text only when a page or the reward needs it, so 100k
products fit in a few hundred MB including the search index. Near-miss **distractors** are
generated next to each base product: the same brand and text with one attribute, one option
value, the price or the product type changed, so that the first plausible search hit is often
not the right one.

Catalogs are immutable and expensive to build, so :func:`get_catalog` caches them per
``(seed, n_products, distractor_density)``: every env in a process shares one catalog and one
index, and ``reset`` never rebuilds anything.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from turngym.core.errors import ConfigError
from turngym.envs.shop.search import SearchIndex
from turngym.envs.shop.vocab import (
    BRAND_SYLLABLES,
    CATEGORIES,
    FILLER_SENTENCES,
    OPTION_VALUES,
    PRODUCT_TYPES,
    ProductType,
)

__all__ = ["Product", "Catalog", "ProductListCatalog", "GeneratedCatalog", "get_catalog", "product_document"]

MIN_PRODUCTS = 100
MAX_PRODUCTS = 1_000_000


@dataclass(frozen=True, slots=True)
class Product:
    """One product, with the fields WebShop shows and scores.

    Attributes:
        asin: the id shown on results pages and clicked (``B0...``, 10 characters).
        title: the product name (WebShop's ``name`` / ``Title``).
        query: the search query the product belongs to (WebShop scraped products per query;
            generated products use their type name). Equal queries count as a type match.
        category: top-level category key (``beauty``, ``electronics``...).
        product_category: the ``›``-separated category path.
        description: the Description sub-page text.
        bullets: the Features sub-page bullet points (the first one is indexed for search).
        attributes: WebShop's ``Attributes``: the phrases goal attributes are matched against.
        options: ``((dimension, (value, ...)), ...)`` in display order.
        price: the price in dollars.
        rating: average review rating, or None.
        reviews: ``((rating, text), ...)``.
        nouns: the product type's head nouns (WebShop parses them with spaCy).
    """

    asin: str
    title: str
    query: str
    category: str
    product_category: str
    description: str
    bullets: tuple[str, ...]
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: float
    rating: float | None = None
    reviews: tuple[tuple[float, str], ...] = ()
    nouns: tuple[str, ...] = ()

    def option_dimension(self, value: str) -> str | None:
        """The dimension offering ``value`` (first one, as WebShop's radio buttons), or None."""
        for dim, values in self.options:
            if value in values:
                return dim
        return None


def product_document(p: Product) -> str:
    """The text WebShop indexes: title, description, first bullet and the option lists."""
    opts = " ".join(f"{dim}: {', '.join(values)}." for dim, values in p.options)
    first = p.bullets[0] if p.bullets else ""
    return f"{p.title}. {p.description} {first} {opts}"


class Catalog:
    """A searchable, indexable set of products. Subclasses provide ``product(i)``."""

    key: str
    index: SearchIndex

    def __len__(self) -> int:
        raise NotImplementedError

    def product(self, i: int) -> Product:
        """The product at catalog index ``i``."""
        raise NotImplementedError

    def index_of(self, asin: str) -> int | None:
        """The catalog index of ``asin`` (case-insensitive), or None."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Product]:
        return (self.product(i) for i in range(len(self)))

    def search(self, query: str, k: int = 50) -> list[int]:
        """Catalog indices of the top ``k`` products for ``query``."""
        return self.index.search(query, k)


class ProductListCatalog(Catalog):
    """A catalog over explicit products (e.g. loaded from WebShop's JSON files)."""

    def __init__(self, products: Sequence[Product], key: str) -> None:
        if not products:
            raise ConfigError("a catalog needs at least one product")
        self.key = key
        self.products = tuple(products)
        self._by_asin: dict[str, int] = {}
        for i, p in enumerate(self.products):
            self._by_asin.setdefault(p.asin.lower(), i)
        self.index = SearchIndex(product_document(p) for p in self.products)

    def __len__(self) -> int:
        return len(self.products)

    def product(self, i: int) -> Product:
        return self.products[i]

    def index_of(self, asin: str) -> int | None:
        return self._by_asin.get(asin.lower())


class _Spec(NamedTuple):
    """A generated product before rendering: ids into the vocabulary, nothing else."""

    type_id: int
    brand_id: int
    attrs: tuple[int, ...]  # ids into the category's attribute pool; title ones first
    options: tuple[tuple[int, ...], ...]  # per option dimension of the type: value ids
    price: float
    text_seed: int  # shared by a base product and its distractors: same sentences
    n_reviews: int


# ASINs: a bijection of the catalog index onto 8 base-36 digits (no lookup table needed).
_ASIN_MOD = 36**8
_ASIN_MUL = 1_743_541_808_807  # ≈ golden ratio × modulus, coprime to 36: neighbours get unrelated ids
_ASIN_INV = pow(_ASIN_MUL, -1, _ASIN_MOD)
_B36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _title_case(text: str) -> str:
    return " ".join(w if w[:1].isdigit() else w[:1].upper() + w[1:] for w in text.split())


class GeneratedCatalog(Catalog):
    """A seeded synthetic catalog in WebShop's five categories.

    Args:
        seed: the catalog seed; the same seed and size give the same catalog on any machine.
        n_products: how many products (including distractors), 100..1,000,000.
        distractor_density: in [0, 1]; each base product gets Binomial(3, density) near-miss
            distractors (0 = none, 1 = three per product).

    >>> cat = GeneratedCatalog(seed=0, n_products=200, distractor_density=0.5)
    >>> len(cat), cat.product(0).asin == cat.product(0).asin, cat.index_of(cat.product(7).asin)
    (200, True, 7)
    """

    def __init__(self, seed: int = 0, n_products: int = 10_000, distractor_density: float = 0.5) -> None:
        if not MIN_PRODUCTS <= n_products <= MAX_PRODUCTS:
            raise ConfigError(f"n_products must be in [{MIN_PRODUCTS}, {MAX_PRODUCTS}], got {n_products}")
        if not 0.0 <= distractor_density <= 1.0:
            raise ConfigError(f"distractor_density must be in [0, 1], got {distractor_density}")
        self.seed = int(seed)
        self.n_products = int(n_products)
        self.distractor_density = float(distractor_density)
        self.key = f"gen-{self.seed}-{self.n_products}-{self.distractor_density:g}"
        rng = random.Random(f"turngym-shop-catalog/{self.seed}")
        self._brands = {c: self._make_brands(rng, 40) for c in CATEGORIES}
        self._attr_pool = {c: cat.attributes for c, cat in CATEGORIES.items()}
        # Per product type: the ids (into its category's pool) of the attributes it may have.
        self._type_attrs = [
            tuple(CATEGORIES[t.category].attributes.index(a) for a in CATEGORIES[t.category].groups[t.group])
            for t in PRODUCT_TYPES
        ]
        self._siblings: list[list[int]] = []  # same attribute group first, else same category
        for i, t in enumerate(PRODUCT_TYPES):
            same = [j for j, u in enumerate(PRODUCT_TYPES) if j != i and (u.category, u.group) == (t.category, t.group)]
            self._siblings.append(same or [j for j, u in enumerate(PRODUCT_TYPES) if j != i and u.category == t.category])
        self._asin_offset = rng.randrange(_ASIN_MOD)
        self.specs: list[_Spec] = self._generate(rng)
        self.kinds: bytes = bytes(self._kinds)  # 0 = base product, 1-4 = distractor kind
        del self._kinds
        self.product = functools.lru_cache(maxsize=16_384)(self._render)  # type: ignore[method-assign]
        self.index = SearchIndex(self._document(i) for i in range(self.n_products))

    # -- generation ----------------------------------------------------------------------
    @staticmethod
    def _make_brands(rng: random.Random, n: int) -> tuple[str, ...]:
        names: list[str] = []
        seen: set[str] = set()
        while len(names) < n:
            name = "".join(rng.choice(BRAND_SYLLABLES) for _ in range(rng.randint(2, 3)))
            if name not in seen and len(name) >= 4:
                seen.add(name)
                names.append(name.capitalize())
        return tuple(names)

    def _base(self, rng: random.Random) -> _Spec:
        type_id = rng.randrange(len(PRODUCT_TYPES))
        t = PRODUCT_TYPES[type_id]
        attrs = tuple(rng.sample(self._type_attrs[type_id], rng.randint(2, 5)))
        lo, hi = t.price
        price = round(rng.uniform(lo, hi)) - 0.01 if rng.random() < 0.7 else round(rng.uniform(lo, hi), 2)
        return _Spec(
            type_id,
            rng.randrange(len(self._brands[t.category])),
            attrs,
            self._sample_options(rng, t),
            max(price, 0.99),
            rng.getrandbits(32),
            rng.randint(0, 3),
        )

    @staticmethod
    def _sample_options(rng: random.Random, t: ProductType) -> tuple[tuple[int, ...], ...]:
        out = []
        for dim in t.options:
            vocab = OPTION_VALUES[dim.split(":")[1]]
            k = rng.randint(2, min(6, len(vocab)))
            out.append(tuple(sorted(rng.sample(range(len(vocab)), k))))
        return tuple(out)

    def _distractor(self, rng: random.Random, base: _Spec) -> tuple[_Spec, int]:
        """A near miss of ``base``: one attribute, option value, the price or the type differs."""
        t = PRODUCT_TYPES[base.type_id]
        kind = rng.randint(1, 4)
        if kind == 1:  # swap one attribute for another the type could have
            unused = [a for a in self._type_attrs[base.type_id] if a not in base.attrs]
            attrs = list(base.attrs)
            attrs[rng.randrange(len(attrs))] = rng.choice(unused)
            return base._replace(attrs=tuple(attrs)), kind
        if kind == 2 and base.options:  # swap one option value for one the base lacks
            d = rng.randrange(len(base.options))
            vocab = OPTION_VALUES[t.options[d].split(":")[1]]
            unused = [v for v in range(len(vocab)) if v not in base.options[d]]
            if unused:
                values = list(base.options[d])
                values[rng.randrange(len(values))] = rng.choice(unused)
                opts = list(base.options)
                opts[d] = tuple(sorted(values))
                return base._replace(options=tuple(opts)), kind
        if kind == 4:  # a sibling product type with the same brand, attributes and text
            new_t = rng.choice(self._siblings[base.type_id])
            return base._replace(type_id=new_t, options=self._sample_options(rng, PRODUCT_TYPES[new_t])), kind
        # kind 3 (and the fallback): the same product, priced well above the base
        return base._replace(price=round(base.price * rng.uniform(1.3, 2.2), 2)), 3

    def _generate(self, rng: random.Random) -> list[_Spec]:
        specs: list[_Spec] = []
        kinds: list[int] = []
        n, density = self.n_products, self.distractor_density
        while len(specs) < n:
            base = self._base(rng)
            specs.append(base)
            kinds.append(0)
            n_distractors = sum(rng.random() < density for _ in range(3))
            for _ in range(n_distractors):
                if len(specs) >= n:
                    break
                spec, kind = self._distractor(rng, base)
                specs.append(spec)
                kinds.append(kind)
        self._kinds = kinds
        return specs

    # -- lookup --------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.n_products

    def asin(self, i: int) -> str:
        x = (_ASIN_MUL * i + self._asin_offset) % _ASIN_MOD
        digits = []
        for _ in range(8):
            x, r = divmod(x, 36)
            digits.append(_B36[r])
        return "B0" + "".join(reversed(digits))

    def index_of(self, asin: str) -> int | None:
        a = asin.strip().upper()
        if len(a) != 10 or not a.startswith("B0"):
            return None
        x = 0
        for ch in a[2:]:
            d = _B36.find(ch)
            if d < 0:
                return None
            x = x * 36 + d
        i = ((x - self._asin_offset) * _ASIN_INV) % _ASIN_MOD
        return i if i < self.n_products else None

    # -- rendering -----------------------------------------------------------------------
    def _text(self, spec: _Spec) -> tuple[str, list[str], str, tuple[tuple[str, tuple[str, ...]], ...], random.Random]:
        """Title, bullets, description and options of ``spec``, and its RNG (for the reviews)."""
        t = PRODUCT_TYPES[spec.type_id]
        pool = self._attr_pool[t.category]
        brand = self._brands[t.category][spec.brand_id]
        attrs = [pool[a] for a in spec.attrs]
        rng = random.Random(spec.text_seed)
        n_title = 1 if len(attrs) <= 2 else 2
        head = " ".join(_title_case(a) for a in attrs[:n_title])
        tail = rng.choice(("", " for Everyday Use", " - Premium Quality", " by " + brand, " (New Version)"))
        title = f"{brand} {head} {_title_case(t.name)}{tail}"
        bullets = [f"{a.upper()}: this {t.name} is {a}, as our customers asked for." for a in attrs[n_title:]]
        bullets.append(rng.choice((
            f"WHAT YOU GET: one {t.name} from {brand} and our friendly customer service.",
            f"QUALITY: every {t.name} is inspected before it ships.",
            f"GUARANTEE: if you do not love this {t.name}, we will make it right.",
        )))
        fillers = rng.sample(FILLER_SENTENCES, 2)
        listed = ", ".join(attrs[:-1]) + " and " + attrs[-1] if len(attrs) > 1 else attrs[0]
        description = f"The {brand} {t.name} is {listed}. {fillers[0]} {fillers[1]}"
        options = tuple(
            (dim.split(":")[0], tuple(OPTION_VALUES[dim.split(":")[1]][v] for v in values))
            for dim, values in zip(t.options, spec.options)
        )
        return title, bullets, description, options, rng

    def _document(self, i: int) -> str:
        """The indexed text of product ``i`` (as :func:`product_document`, without rendering it all)."""
        title, bullets, description, options, _ = self._text(self.specs[i])
        opts = " ".join(f"{dim}: {', '.join(values)}." for dim, values in options)
        return f"{title}. {description} {bullets[0]} {opts}"

    def _render(self, i: int) -> Product:
        spec = self.specs[i]
        t = PRODUCT_TYPES[spec.type_id]
        title, bullets, description, options, rng = self._text(spec)
        attrs = [self._attr_pool[t.category][a] for a in spec.attrs]
        brand = self._brands[t.category][spec.brand_id]
        reviews = tuple(
            (float(r), rng.choice((
                f"Great {t.name}, exactly as described.",
                f"Good value for the price. The {attrs[0]} part is true.",
                "It is fine, but shipping took a while.",
                f"My second {t.name} from {brand}; still happy.",
            )))
            for r in (rng.choice((3, 4, 4, 5, 5, 5)) for _ in range(spec.n_reviews))
        )
        rating = round(sum(r for r, _ in reviews) / len(reviews), 1) if reviews else None
        return Product(
            asin=self.asin(i),
            title=title,
            query=t.name,
            category=t.category,
            product_category=" › ".join(t.path),
            description=description,
            bullets=tuple(bullets),
            attributes=tuple(attrs),
            options=options,
            price=spec.price,
            rating=rating,
            reviews=reviews,
            nouns=t.nouns,
        )


@functools.lru_cache(maxsize=4)
def get_catalog(seed: int = 0, n_products: int = 10_000, distractor_density: float = 0.5) -> GeneratedCatalog:
    """The generated catalog for these parameters, built once per process and shared."""
    return GeneratedCatalog(seed, n_products, distractor_density)
