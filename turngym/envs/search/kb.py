"""A seeded synthetic knowledge base: fictional entities rendered as encyclopedia passages.

Why synthetic: the questions must be answerable only by searching. A model may have read
Wikipedia, so a real-entity question can be answered from memory; it cannot know where the
fictional *Orsa Vellamir* was born. Everything here is drawn from one ``random.Random(seed)``,
so ``build_kb(seed, n)`` is the same knowledge base on every machine.

The world has five entity types with typed attributes and functional relations:

=========  ==========================================  =============================================
type       attributes                                  relations (→ type)
=========  ==========================================  =============================================
person     occupation, birth_year                      born_in → city, alma_mater → university org,
                                                       employer → company org
org        kind (company/university/publisher/label/   headquarters → city, founder → person
           studio), founded
city       founded, river                              country → country
country    form, currency, independence                capital → city
work       kind (novel/film/album), year               creator → person, publisher → org
=========  ==========================================  =============================================

Each entity is rendered into 2–3 passages that share its title (as a Wikipedia article is split
into 100-word passages), and **every fact lives in exactly one passage**, recorded in
:attr:`KnowledgeBase.fact_passage`. That is what makes gold supporting passages well defined.

Names come in deliberate clusters of look-alikes (*Orsa Vellamir*, *Orsa Vellamin*, *Idrun
Vellamir*, *Vellamir Press*, *Vellamir Records*), so a query must name the right entity
precisely, and lexical retrieval surfaces plausible wrong passages.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from turngym.core.errors import ConfigError
from turngym.envs.search.retrieval import Passage

__all__ = ["Entity", "KnowledgeBase", "build_kb", "RELATIONS", "ATTRIBUTES", "YEAR_ATTRIBUTE"]


@dataclass(frozen=True)
class Entity:
    """One fictional entity.

    Attributes:
        id: ``e000042``-style identifier, stable for a (seed, size).
        type: ``person``, ``org``, ``city``, ``country`` or ``work``.
        kind: the subtype (org: company/university/publisher/label/studio; work:
            novel/film/album; otherwise equal to ``type``).
        name: the canonical name (unique in the knowledge base).
        aliases: other surface forms a correct answer may use.
        attrs: attribute values (years are ints, the rest strings).
        rels: relation name → id of the related entity.
    """

    id: str
    type: str
    kind: str
    name: str
    aliases: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    rels: Mapping[str, str] = field(default_factory=dict)


#: relation → (subject type, object type). Every relation is functional (one object).
RELATIONS: dict[str, tuple[str, str]] = {
    "born_in": ("person", "city"),
    "alma_mater": ("person", "org"),
    "employer": ("person", "org"),
    "headquarters": ("org", "city"),
    "founder": ("org", "person"),
    "country": ("city", "country"),
    "capital": ("country", "city"),
    "creator": ("work", "person"),
    "publisher": ("work", "org"),
}

#: attributes that can be asked about, per entity type (the answer is the attribute value).
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "person": ("birth_year",),
    "org": ("founded",),
    "city": ("founded", "river"),
    "country": ("currency",),
    "work": ("year",),
}

#: the year attribute comparison questions compare, per type.
YEAR_ATTRIBUTE: dict[str, str] = {"person": "birth_year", "org": "founded", "city": "founded", "work": "year"}


@dataclass(frozen=True)
class KnowledgeBase:
    """Entities, their passages, and where each fact is written.

    Attributes:
        seed: the generator seed.
        entities: every entity, in id order.
        passages: the corpus (Search-R1 format: ``contents`` = ``"Title"\\ntext``).
        fact_passage: ``(entity id, fact name) → passage id`` for every attribute and
            relation: the single passage that states it.
    """

    seed: int
    entities: tuple[Entity, ...]
    passages: tuple[Passage, ...]
    fact_passage: Mapping[tuple[str, str], str]
    by_id: Mapping[str, Entity] = field(init=False, repr=False, compare=False)
    by_type: Mapping[str, tuple[Entity, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_id", {e.id: e for e in self.entities})
        groups: dict[str, list[Entity]] = {}
        for e in self.entities:
            groups.setdefault(e.type, []).append(e)
        object.__setattr__(self, "by_type", {t: tuple(v) for t, v in groups.items()})

    @property
    def size(self) -> int:
        return len(self.entities)

    def related(self, entity: Entity, relation: str) -> Entity | None:
        """The object of ``relation`` for ``entity``, or None if it has none."""
        target = entity.rels.get(relation)
        return self.by_id[target] if target is not None else None


# ----------------------------------------------------------------------------------- names
_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "r", "s", "st", "t",
           "th", "v", "z", "sh", "w", "j", "tr", "kal", "mor", "el")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ae", "ia", "ei")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "nd", "th", "st")
_MUTATE = {"a": "e", "e": "i", "i": "o", "o": "u", "u": "a", "y": "i"}


def _word(rng: random.Random, syllables: int) -> str:
    parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)]
    return "".join(parts).capitalize()


def _mutate(rng: random.Random, word: str) -> str:
    """A look-alike: one vowel changed or the ending swapped (``Vellamir`` → ``Vellamor``)."""
    if rng.random() < 0.5 and len(word) > 4:
        endings = ("in", "ar", "en", "or", "is", "an")
        return word[:-2] + rng.choice([e for e in endings if e != word[-2:]])
    idx = [i for i, ch in enumerate(word.lower()) if ch in _MUTATE and i > 0]
    if not idx:
        return word + "e"
    i = rng.choice(idx)
    return word[:i] + _MUTATE[word[i].lower()] + word[i + 1 :]


_ADJECTIVES = ("Amber", "Bitter", "Broken", "Burning", "Crimson", "Distant", "Empty", "Endless", "Fallen",
               "Forgotten", "Frozen", "Gilded", "Glass", "Golden", "Hidden", "Hollow", "Iron", "Last", "Lonely",
               "Lost", "Midnight", "Northern", "Pale", "Quiet", "Restless", "Scarlet", "Secret", "Silent", "Silver",
               "Sleeping", "Small", "Southern", "Stone", "Strange", "Sunken", "Velvet", "Wandering", "White",
               "Wild", "Winter", "Wooden", "Yellow")
_NOUNS = ("Orchard", "Harbor", "Lantern", "Mirror", "River", "Garden", "Tower", "Bridge", "Compass", "Forest",
          "Island", "Letter", "Meadow", "Engine", "Feather", "Window", "Voyage", "Crown", "Shadow", "Season",
          "Archive", "Ballad", "Cathedral", "Coast", "Door", "Echo", "Field", "Fountain", "Gate", "Horizon",
          "Kingdom", "Labyrinth", "Map", "Mountain", "Ocean", "Palace", "Road", "Sparrow", "Storm", "Tide",
          "Valley", "Violin", "Wheel", "Wolf")
_OCCUPATIONS = {
    "novelist": "novel", "poet": "novel", "essayist": "novel",
    "film director": "film", "screenwriter": "film",
    "composer": "album", "singer": "album", "guitarist": "album",
    "painter": None, "chemist": None, "architect": None, "cartographer": None, "engineer": None,
    "botanist": None, "diplomat": None, "astronomer": None, "historian": None, "physician": None,
}
_INDUSTRY = ("shipping", "textile", "mining", "railway", "software", "brewing", "insurance", "glassmaking",
             "printing", "shipbuilding", "chemicals", "clockmaking")
_ORG_SUFFIX = {
    "company": ("Industries", "Holdings", "Works", "Group", "Company", "Trading"),
    "publisher": ("Press", "Books", "House", "Editions"),
    "label": ("Records", "Sound", "Music"),
    "studio": ("Pictures", "Studios", "Films"),
    "university": ("College", "Institute", "Academy"),
}
_ORG_WORD = {"company": "company", "publisher": "publishing house", "label": "record label",
             "studio": "film studio", "university": "university"}
_WORK_BY = {"novel": "publisher", "film": "studio", "album": "label"}
_CITY_SUFFIX = ("", "", "ford", "wick", "mouth", "haven", "ton", "burg", "field")
_CITY_PREFIX = ("Port ", "New ", "East ", "Upper ", "Lower ", "Fort ")
_COUNTRY_SUFFIX = ("ia", "land", "ora", "mark", "ene", "avia")
_FORMS = ("Republic", "Kingdom", "Federation", "Commonwealth", "Grand Duchy")
_UNITS = ("crown", "mark", "florin", "thaler", "shilling", "lira", "dinar", "real", "ducat")
_TRAITS = ("an unusually precise style", "a long public feud with critics", "a reclusive working life",
           "work that was rediscovered decades later", "a series of celebrated public lectures",
           "an early interest in maps and tides", "a famously difficult temperament")
_PRONOUNS = (("she", "her"), ("he", "his"), ("they", "their"))


class _Names:
    """Unique names with look-alike clusters (the distractors)."""

    def __init__(self, rng: random.Random, similar: float) -> None:
        self.rng = rng
        self.similar = similar
        self.used: set[str] = set()

    def take(self, make: Callable[[], str]) -> str:
        """A name from ``make`` not used before (retrying; the name space is ~1e6 per kind)."""
        for _ in range(200):
            name = make()
            if name not in self.used:
                self.used.add(name)
                return name
        raise ConfigError("knowledge base too large: could not draw a fresh name in 200 tries")  # pragma: no cover

    def root(self, roots: list[str], syllables: tuple[int, int] = (2, 3)) -> str:
        """A new root word, or (with probability ``similar``) a look-alike of an existing one."""
        rng = self.rng
        if roots and rng.random() < self.similar:
            base = rng.choice(roots)
            return base if rng.random() < 0.5 else _mutate(rng, base)
        return _word(rng, rng.randint(*syllables))


def _strip_affixes(name: str, suffixes: tuple[str, ...], prefixes: tuple[str, ...] = ()) -> str:
    """The root of a place name, so look-alikes are built from roots, not from full names."""
    for p in prefixes:
        if name.startswith(p):
            return name[len(p) :]
    for suf in sorted(suffixes, key=len, reverse=True):
        if suf and name.endswith(suf) and len(name) > len(suf) + 2:
            return name[: -len(suf)]
    return name


def _generate_world(rng: random.Random, n: int, similar: float) -> list[Entity]:
    """Draw ``n`` entities with their attributes and relations (no text yet)."""
    names = _Names(rng, similar)
    n_country = max(3, n // 40)
    n_city = max(6, n * 15 // 100)
    n_org = max(10, n * 20 // 100)
    n_work = max(6, n * 22 // 100)
    n_person = max(10, n - n_country - n_city - n_org - n_work)
    ids = iter(f"e{i:06d}" for i in range(10**6))

    surnames: list[str] = []
    firsts: list[str] = []
    roots: list[str] = []  # place and org name roots

    countries: list[dict[str, Any]] = []
    for _ in range(n_country):
        name = names.take(lambda: names.root(roots, (2, 2)) + rng.choice(_COUNTRY_SUFFIX))
        roots.append(_strip_affixes(name, _COUNTRY_SUFFIX))
        form = rng.choice(_FORMS)
        unit = rng.choice(_UNITS)
        currency = names.take(lambda: f"{_word(rng, 2)} {unit}")  # noqa: B023
        countries.append(dict(id=next(ids), type="country", kind="country", name=name,
                              aliases=(f"{form} of {name}",),
                              attrs={"form": form, "currency": currency, "independence": rng.randint(1600, 1990)},
                              rels={}))
    cities: list[dict[str, Any]] = []
    for i in range(n_city):
        def city_name() -> str:
            root = names.root(roots, (1, 2))
            if rng.random() < 0.2:
                return rng.choice(_CITY_PREFIX) + root
            return root + rng.choice(_CITY_SUFFIX)

        name = names.take(city_name)
        roots.append(_strip_affixes(name, _CITY_SUFFIX, _CITY_PREFIX))
        river_root = names.take(lambda: _word(rng, rng.randint(1, 2)))
        cities.append(dict(id=next(ids), type="city", kind="city", name=name, aliases=(),
                           attrs={"founded": rng.randint(800, 1850), "river": f"{river_root} River",
                                  "population": rng.randint(8, 900) * 1000},
                           # the first cities cover every country, so each has a capital of its own
                           rels={"country": (countries[i] if i < n_country else rng.choice(countries))["id"]}))
    in_country: dict[str, list[dict[str, Any]]] = {}
    for x in cities:
        in_country.setdefault(x["rels"]["country"], []).append(x)
    for c in countries:
        c["rels"]["capital"] = rng.choice(in_country[c["id"]])["id"]

    persons: list[dict[str, Any]] = []
    for _ in range(n_person):
        def person_name() -> str:
            first = names.root(firsts, (2, 2))
            last = names.root(surnames, (2, 3))
            return f"{first} {last}"

        name = names.take(person_name)
        first, last = name.split(" ", 1)
        firsts.append(first)
        surnames.append(last)
        initial = rng.choice("ABCDEFGHJKLMNPRSTVW")
        pron = rng.choice(_PRONOUNS)
        persons.append(dict(id=next(ids), type="person", kind="person", name=name,
                            aliases=(f"{first} {initial}. {last}",),
                            attrs={"occupation": rng.choice(list(_OCCUPATIONS)), "birth_year": rng.randint(1820, 1985),
                                   "pronoun": pron[0], "possessive": pron[1],
                                   "trait": rng.choice(_TRAITS)},
                            rels={"born_in": rng.choice(cities)["id"]}))

    orgs: list[dict[str, Any]] = []
    kinds = ("company",) * 4 + ("university",) * 2 + ("publisher", "label", "studio") * 2
    for _ in range(n_org):
        kind = rng.choice(kinds)
        founder = rng.choice(persons)
        hq = rng.choice(cities)

        def org_name(kind: str = kind, founder: dict[str, Any] = founder, hq: dict[str, Any] = hq) -> str:
            u = rng.random()
            if kind == "university" and u < 0.35:
                return f"University of {hq['name']}"
            if u < 0.3:
                root = founder["name"].split(" ", 1)[1]  # named after its founder: a person look-alike
            else:
                root = names.root(roots, (2, 3))
            return f"{root} {rng.choice(_ORG_SUFFIX[kind])}"

        name = names.take(org_name)
        aliases: tuple[str, ...] = ()
        if name.startswith("University of "):
            aliases = (f"{name[len('University of '):]} University",)
        founded = min(2010, founder["attrs"]["birth_year"] + rng.randint(22, 55))
        orgs.append(dict(id=next(ids), type="org", kind=kind, name=name, aliases=aliases,
                         attrs={"founded": founded, "industry": rng.choice(_INDUSTRY),
                                "staff": rng.randint(2, 400) * 10},
                         rels={"headquarters": hq["id"], "founder": founder["id"]}))
    universities = [o for o in orgs if o["kind"] == "university"] or orgs
    companies = [o for o in orgs if o["kind"] == "company"] or orgs
    for p in persons:
        if rng.random() < 0.8:
            p["rels"]["alma_mater"] = rng.choice(universities)["id"]
        if rng.random() < 0.75:
            p["rels"]["employer"] = rng.choice(companies)["id"]

    by_medium: dict[str, list[dict[str, Any]]] = {"novel": [], "film": [], "album": []}
    for p in persons:
        medium = _OCCUPATIONS[p["attrs"]["occupation"]]
        if medium is not None:
            by_medium[medium].append(p)
    houses_by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in orgs:
        houses_by_kind.setdefault(o["kind"], []).append(o)
    works: list[dict[str, Any]] = []
    titles: list[str] = []
    for _ in range(n_work):
        kind = rng.choice(("novel", "film", "album"))
        creator = rng.choice(by_medium[kind] or persons)
        houses = houses_by_kind.get(_WORK_BY[kind]) or orgs

        def title() -> str:
            u = rng.random()
            if titles and u < similar * 0.5:
                words = rng.choice(titles).split()
                words[-1] = rng.choice(_NOUNS)  # look-alike title
                return " ".join(words)
            if u < 0.45:
                return f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
            if u < 0.7:
                return f"{rng.choice(_NOUNS)} of {rng.choice(_NOUNS)}s"
            if u < 0.9:
                return f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}s"
            return f"The {rng.choice(_NOUNS)} of {_word(rng, 2)}"

        name = names.take(title)
        titles.append(name)
        year = min(2024, creator["attrs"]["birth_year"] + rng.randint(20, 60))
        works.append(dict(id=next(ids), type="work", kind=kind, name=name, aliases=(),
                          attrs={"year": year},
                          rels={"creator": creator["id"], "publisher": rng.choice(houses)["id"]}))

    everything = countries + cities + persons + orgs + works
    return [Entity(**e) for e in everything]


# ----------------------------------------------------------------------------------- passages
def _render(rng: random.Random, e: Entity, kb: dict[str, Entity]) -> list[tuple[str, tuple[str, ...]]]:
    """The entity's passages: (text, facts stated in it). Each fact appears exactly once."""
    a, r = e.attrs, e.rels
    name = e.name

    def nm(rel: str) -> str:
        return kb[r[rel]].name

    if e.type == "person":
        pron, poss = a["pronoun"], a["possessive"]
        verb = "are" if pron == "they" else "is"
        Pron = pron.capitalize()
        occ = a["occupation"]
        art = "an" if occ[0] in "aeiou" else "a"
        overview = rng.choice((
            f"{name} (born {a['birth_year']}), also known as {e.aliases[0]}, is {art} {occ}. "
            f"{Pron} {verb} remembered for {a['trait']}.",
            f"{name} is {art} {occ} born in the year {a['birth_year']}. Sometimes credited as "
            f"{e.aliases[0]}, {pron} {verb} known for {a['trait']}.",
        ))
        facts_1 = ["born_in"]
        early = rng.choice((f"{name} was born and raised in {nm('born_in')}.",
                            f"Born and raised in {nm('born_in')}, {name} left home young."))
        if "alma_mater" in r:
            early += f" {Pron} studied at {nm('alma_mater')} before starting {poss} career."
            facts_1.append("alma_mater")
        else:
            early += f" {Pron} had no formal schooling and taught {'themselves' if pron == 'they' else ('herself' if pron == 'she' else 'himself')}."
        out = [(overview, ("birth_year", "occupation")), (early, tuple(facts_1))]
        if "employer" in r:
            years = rng.randint(2, 30)
            out.append((rng.choice((
                f"{name} worked for {nm('employer')} for {years} years, where {poss} colleagues valued {poss} patience.",
                f"For {years} years {name} worked at {nm('employer')}, and later described that period as formative.",
            )), ("employer",)))
        return out
    if e.type == "org":
        what = _ORG_WORD[e.kind] if e.kind != "company" else f"{a['industry']} company"
        p0 = f"{name} is a {what} based in {nm('headquarters')}."
        if e.aliases:
            p0 += f" It is also called {e.aliases[0]}."
        p0 += f" It employs about {a['staff']} people."
        p1 = rng.choice((
            f"{name} was founded in {a['founded']} by {nm('founder')}.",
            f"{nm('founder')} founded {name} in {a['founded']}, and the organisation grew steadily afterwards.",
        ))
        return [(p0, ("headquarters",)), (p1, ("founded", "founder"))]
    if e.type == "city":
        p0 = f"{name} is a city in {nm('country')}, on the banks of the {a['river']}."
        p1 = f"{name} was founded in {a['founded']}. Its population is about {a['population']:,}."
        return [(p0, ("country", "river")), (p1, ("founded",))]
    if e.type == "country":
        p0 = f"{name}, officially the {e.aliases[0]}, is a country whose capital is {nm('capital')}."
        p1 = f"The currency of {name} is the {a['currency']}. {name} became independent in {a['independence']}."
        return [(p0, ("capital",)), (p1, ("currency", "independence"))]
    if e.type == "work":
        by = {"novel": "a novel by", "film": "a film directed by", "album": "an album recorded by"}[e.kind]
        p0 = f"{name} is {by} {nm('creator')}. It first appeared in {a['year']}."
        house = nm("publisher")
        p1 = {
            "novel": f"{name} was published by {house}. Reviewers praised its structure.",
            "film": f"{name} was produced by {house}. It was shot over a single summer.",
            "album": f"{name} was released by {house}. Its songs were recorded in one week.",
        }[e.kind]
        return [(p0, ("year", "creator")), (p1, ("publisher",))]
    raise ConfigError(f"unknown entity type {e.type!r}")  # pragma: no cover


def _assemble(seed: int, entities: list[Entity], rng: random.Random) -> KnowledgeBase:
    table = {e.id: e for e in entities}
    passages: list[Passage] = []
    fact_passage: dict[tuple[str, str], str] = {}
    for e in entities:
        for j, (text, facts) in enumerate(_render(rng, e, table)):
            pid = f"{e.id}.{j}"
            passages.append(Passage(pid, f'"{e.name}"\n{text}'))
            for f in facts:
                fact_passage[(e.id, f)] = pid
    return KnowledgeBase(seed, tuple(entities), tuple(passages), fact_passage)


@lru_cache(maxsize=8)
def build_kb(seed: int = 0, n_entities: int = 1200, similar: float = 0.35) -> KnowledgeBase:
    """Generate the knowledge base for ``(seed, n_entities)`` (cached: built once per process).

    Args:
        seed: generator seed.
        n_entities: number of entities; the corpus has about 2.4 passages per entity.
        similar: probability that a new name is a look-alike of an existing one.

    >>> kb = build_kb(0, 200)
    >>> kb.size, len(kb.passages) > 400
    (200, True)
    >>> build_kb(0, 200) is kb   # cached: envs share one knowledge base
    True
    """
    if not isinstance(n_entities, int) or n_entities < 40:
        raise ConfigError(f"n_entities must be an int >= 40, got {n_entities!r}")
    if not 0.0 <= similar < 1.0:
        raise ConfigError(f"similar must be in [0, 1), got {similar!r}")
    rng = random.Random(f"turngym-search-kb/{seed}/{n_entities}")
    entities = _generate_world(rng, n_entities, similar)
    return _assemble(seed, entities, rng)
