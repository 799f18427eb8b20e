"""A procedural knowledge world: fictional people, cities, countries, organisations and works.

Every name is built from random syllables, so no model has seen these facts: it must search. A world is
a pure function of `(seed, size)`; `render_corpus` turns it into one document per entity, and
`envs.search.questions` asks multi-hop questions whose answers follow from those documents.

Relations (entity -> entity):  work.creator -> person, person.birthplace -> city,
person.employer -> org, org.founder -> person, org.headquarters -> city, city.country -> country,
country.capital -> city.  Attributes: birth_year, founded, year, occupation.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache

from agentgym.errors import ConfigError
from agentgym.tools.retrieval.corpus import Corpus, Document

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "qu", "r", "s",
           "sk", "st", "t", "th", "v", "vr", "w", "z", "zh", "y")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "ia", "y")
_CODAS = ("", "", "n", "r", "l", "s", "th", "m", "nd", "rk", "x", "v")
_CITY_SUFFIX = ("holm", "grad", "mouth", "ford", "vale", "stead", "burg", "port", "wick", "haven", "dor", "ria")
_COUNTRY_SUFFIX = ("ia", "land", "istan", "ora", "mark", "enia", "avia")
_ORG_KIND = ("University", "Company", "Institute", "Orchestra", "Bank", "Observatory", "Guild", "Press")
_WORK_KIND = {"novel": "author", "film": "director", "opera": "composer", "painting": "painter"}
_OCCUPATIONS = ("physicist", "poet", "architect", "cartographer", "violinist", "chemist", "sculptor",
                "historian", "engineer", "botanist", "economist", "playwright", "astronomer", "linguist")
_TRAITS = ("its covered markets", "a long stone bridge", "an annual lantern festival", "its salt mines",
           "a famous clock tower", "terraced vineyards", "a university library", "its shipyards",
           "glassworks", "a marble amphitheatre", "tea houses", "a botanical garden")
_WORK_NOUNS = ("Affair", "Years", "Garden", "Letters", "Crossing", "Winter", "Tide", "Hours")
_THEMES = ("memory", "exile", "a flooded valley", "two rival families", "a lighthouse keeper", "the sea",
           "a failed harvest", "an inheritance", "a winter journey", "a lost letter", "the mountains")

# name -> (size of each entity type): persons, works, orgs, cities, countries
SIZES: dict[str, tuple[int, int, int, int, int]] = {
    "tiny": (40, 40, 12, 12, 4),
    "small": (240, 240, 60, 60, 12),
    "medium": (2400, 2400, 600, 500, 60),
}


@dataclass(frozen=True)
class Entity:
    """One thing in the world. `relations` map a relation name to another entity's id."""

    id: str
    type: str  # person | work | org | city | country
    name: str
    attributes: dict[str, object] = field(default_factory=dict)
    relations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)  # identity hash: worlds are cached and used as cache keys
class World:
    seed: int
    entities: dict[str, Entity]

    def by_type(self, type_: str) -> list[Entity]:
        return [e for e in self.entities.values() if e.type == type_]

    def follow(self, entity_id: str, relation: str) -> Entity:
        return self.entities[self.entities[entity_id].relations[relation]]


class _Names:
    """Unique pronounceable names from syllables."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(syllables)]
        return ("".join(parts) + self.rng.choice(_CODAS)).capitalize()

    def unique(self, make) -> str:
        for _ in range(1000):
            name = make()
            if name.lower() not in self.used:
                self.used.add(name.lower())
                return name
        raise RuntimeError("name space exhausted; use fewer entities")


def size_counts(size: str | int) -> tuple[int, int, int, int, int]:
    """Entity counts for a named size or an approximate total number of documents."""
    if isinstance(size, int):
        if size < 20:
            raise ConfigError(f"world size must be >= 20 documents, got {size}")
        persons = works = int(size * 0.4)
        orgs, cities = int(size * 0.1), int(size * 0.08)
        return persons, works, orgs, cities, max(4, size - persons - works - orgs - cities)
    if size not in SIZES:
        raise ConfigError(f"unknown world size {size!r}; use one of {', '.join(SIZES)} or a number of documents")
    return SIZES[size]


@lru_cache(maxsize=8)
def generate_world(seed: int = 0, size: str | int = "small") -> World:
    """The world of a seed: the same `(seed, size)` always gives the same entities and facts."""
    n_person, n_work, n_org, n_city, n_country = size_counts(size)
    rng = random.Random(f"world-{seed}-{size}")
    names = _Names(rng)
    ents: dict[str, Entity] = {}
    countries = [f"country-{i:05d}" for i in range(n_country)]
    cities = [f"city-{i:05d}" for i in range(n_city)]
    orgs = [f"org-{i:05d}" for i in range(n_org)]
    persons = [f"person-{i:06d}" for i in range(n_person)]
    for i, cid in enumerate(countries):
        name = names.unique(lambda: names.word(2) + rng.choice(_COUNTRY_SUFFIX))
        # every country gets a capital among the first cities, which then lie in it
        ents[cid] = Entity(cid, "country", name, {"founded": rng.randint(900, 1900)},
                           {"capital": cities[i % n_city]})
    for i, cid in enumerate(cities):
        country = countries[i] if i < n_country else rng.choice(countries)
        name = names.unique(lambda: names.word(rng.randint(1, 2)) + rng.choice(_CITY_SUFFIX))
        ents[cid] = Entity(cid, "city", name, {"founded": rng.randint(400, 1800), "trait": rng.choice(_TRAITS)},
                           {"country": country})
    for oid in orgs:
        kind = rng.choice(_ORG_KIND)
        name = names.unique(lambda: _org_name(names, kind, rng))
        ents[oid] = Entity(oid, "org", name, {"founded": rng.randint(1600, 2010), "kind": kind},
                           {"headquarters": rng.choice(cities), "founder": rng.choice(persons)})
    for pid in persons:
        name = names.unique(lambda: f"{names.word(rng.randint(1, 2))} {names.word(rng.randint(2, 3))}")
        ents[pid] = Entity(pid, "person", name,
                           {"birth_year": rng.randint(1700, 1990), "occupation": rng.choice(_OCCUPATIONS)},
                           {"birthplace": rng.choice(cities), "employer": rng.choice(orgs)})
    for i in range(n_work):
        wid, kind = f"work-{i:06d}", rng.choice(list(_WORK_KIND))
        name = names.unique(lambda: f"The {names.word(rng.randint(2, 3))} {rng.choice(_WORK_NOUNS)}")
        ents[wid] = Entity(wid, "work", name, {"year": rng.randint(1750, 2020), "kind": kind,
                                               "theme": rng.choice(_THEMES)}, {"creator": rng.choice(persons)})
    return World(seed, ents)


def _org_name(names: _Names, kind: str, rng: random.Random) -> str:
    word = names.word(rng.randint(2, 3))
    return f"{kind} of {word}" if kind in ("University", "Institute", "Guild") else f"{word} {kind}"


def render(world: World, entity: Entity) -> str:
    """The text of the entity's document: its facts as sentences, naming related entities."""
    a, name = entity.attributes, entity.name
    rel = {r: world.entities[t].name for r, t in entity.relations.items()}
    if entity.type == "person":
        return (f"{name} was {_a(str(a['occupation']))} born in {a['birth_year']} in the city of {rel['birthplace']}. "
                f"{name} worked for the {rel['employer']}. Colleagues remembered {name} for a patient, "
                f"careful manner and a lifelong interest in {_pick(_THEMES, name)}.")
    if entity.type == "work":
        role = _WORK_KIND[str(a["kind"])]
        return (f"{name} is {_a(str(a['kind']))} from {a['year']} by the {role} {rel['creator']}. "
                f"It is about {a['theme']}. Critics praised its structure, and it remains widely discussed.")
    if entity.type == "org":
        return (f"The {name} is {_a(str(a['kind']).lower())} founded in {a['founded']} by {rel['founder']}. "
                f"Its headquarters are in {rel['headquarters']}. It is known for its archives and public lectures.")
    if entity.type == "city":
        return (f"{name} is a city in {rel['country']}, founded in {a['founded']}. It is known for {a['trait']}. "
                f"Travellers reach it by road and river.")
    return (f"{name} is a country established in {a['founded']}. Its capital is {rel['capital']}. "
            f"{name} has a long tradition of trade with its neighbours.")


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _pick(options: tuple[str, ...], key: str) -> str:
    return options[sum(map(ord, key)) % len(options)]


def render_corpus(world: World) -> list[tuple[str, str, str]]:
    """(id, title, text) of every entity's document, in a stable order."""
    return [(e.id, e.name, render(world, e)) for e in world.entities.values()]


def generated_corpus(arg: str = "") -> Corpus:
    """The corpus `generated:SEED[:SIZE]` names (SIZE a name like small, or a number of documents)."""
    seed, _, size = arg.partition(":")
    if not seed.lstrip("-").isdigit() and seed:
        raise ConfigError(f"bad corpus spec generated:{arg}; use generated:SEED[:SIZE], e.g. generated:0:small")
    world_size: str | int = int(size) if size.isdigit() else size or "small"
    world = generate_world(int(seed or 0), world_size)
    return Corpus((Document(*row) for row in render_corpus(world)), name=f"generated:{int(seed or 0)}:{world_size}")
