"""Document collections for retrieval, named so that a task can point at one (`task.metadata
["corpus"]`) and the `retrieve` tool can index it without knowing the suite.

`world-<seed>`: a seeded fictional world of people, companies, cities and countries, one short
document per entity. Fictional on purpose: no model can answer from memory, so a multi-hop
question needs the retrievals.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from easy_core.core.errors import ConfigError

_SYLLABLES = tuple(
    [
        "ka",
        "ri",
        "to",
        "mu",
        "sa",
        "le",
        "vo",
        "na",
        "pe",
        "di",
        "lo",
        "ra",
        "un",
        "bel",
        "cor",
        "fen",
        "gal",
        "hal",
        "ist",
        "jor",
        "kel",
        "mar",
        "nor",
        "ost",
        "pra",
        "quin",
        "rus",
        "sel",
        "tam",
        "ul",
        "ver",
        "wen",
        "yar",
        "zel",
    ]
)
_PROFESSIONS = ("chemist", "architect", "engineer", "painter", "economist", "physician", "pilot")
_INDUSTRIES = ("shipping", "software", "textile", "mining", "publishing", "glassware", "rail")
_RIVERS = ("Amel", "Tors", "Velk", "Ondra", "Sile", "Marro")


@dataclass(frozen=True)
class Person:
    name: str
    profession: str
    born_in: str  # a city
    born_year: int


@dataclass(frozen=True)
class Company:
    name: str
    industry: str
    founder: str  # a person
    headquarters: str  # a city
    founded_year: int


@dataclass(frozen=True)
class City:
    name: str
    country: str
    river: str


@dataclass(frozen=True)
class World:
    people: tuple[Person, ...]
    companies: tuple[Company, ...]
    cities: tuple[City, ...]

    def person(self, name: str) -> Person:
        return next(p for p in self.people if p.name == name)

    def city(self, name: str) -> City:
        return next(c for c in self.cities if c.name == name)

    def documents(self) -> tuple[str, ...]:
        docs = [
            f"{p.name} is a {p.profession} born in {p.born_in} in {p.born_year}."
            for p in self.people
        ]
        docs += [
            f"{c.name} is a {c.industry} company founded by {c.founder} in {c.founded_year}. "
            f"Its headquarters are in {c.headquarters}."
            for c in self.companies
        ]
        docs += [f"{c.name} is a city in {c.country}, on the river {c.river}." for c in self.cities]
        return tuple(docs)


def _names(rng: random.Random, count: int, parts: int, taken: set[str]) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()
        if name not in taken:
            taken.add(name)
            names.append(name)
    return names


@lru_cache(maxsize=8)
def fictional_world(seed: int, n_people: int = 120, n_companies: int = 80) -> World:
    rng = random.Random(f"world|{seed}")
    taken: set[str] = set()
    countries = _names(rng, 8, 3, taken)
    cities = tuple(
        City(name, rng.choice(countries), rng.choice(_RIVERS)) for name in _names(rng, 40, 2, taken)
    )
    first, last = _names(rng, n_people, 2, taken), _names(rng, n_people, 3, taken)
    people = tuple(
        Person(
            f"{a} {b}", rng.choice(_PROFESSIONS), rng.choice(cities).name, rng.randint(1900, 1990)
        )
        for a, b in zip(first, last, strict=True)
    )
    founders = rng.sample(people, n_companies)
    companies = tuple(
        Company(
            f"{name} {rng.choice(('Works', 'Group', 'Holdings', 'Labs', 'Trading'))}",
            rng.choice(_INDUSTRIES),
            founder.name,
            rng.choice(cities).name,
            rng.randint(1950, 2020),
        )
        for name, founder in zip(_names(rng, n_companies, 2, taken), founders, strict=True)
    )
    return World(people, companies, cities)


def get_corpus(name: str) -> tuple[str, ...]:
    """The documents of the corpus `name`."""
    kind, _, arg = name.partition("-")
    if kind == "world" and arg.isdigit():
        return fictional_world(int(arg)).documents()
    raise ConfigError(f"unknown corpus {name!r}; corpora are named world-<seed>")
