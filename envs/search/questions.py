"""Multi-hop questions over a generated world, with controllable hop count (1 to 4).

A question's hop count is the number of documents needed to answer it (its supporting documents).
- bridge: start from an entity, follow relations ("the birthplace of the author of X") and ask for the
  last entity's name or one of its attributes;
- comparison (2 or 4 hops): two such chains ending in the same entity type, asking which came first.
Splits: a start entity belongs to `test` when crc32(id) % 5 == 0, else to `train`, so the two splits
never share a starting entity. The same (world, split, seed, hops, kind) always gives the same question.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from functools import lru_cache

from agentgym.envs.search.world import World
from agentgym.errors import ConfigError

SPLITS = ("train", "test")
KINDS = ("bridge", "comparison")

_ROLE = {"novel": "author", "film": "director", "opera": "composer", "painting": "painter"}
_REL_NP = {"birthplace": "the birthplace of {x}", "employer": "the employer of {x}",
           "founder": "the founder of {x}", "headquarters": "the city where {x} has its headquarters",
           "country": "the country in which {x} lies", "capital": "the capital of {x}"}
_ATTR_Q = {"person": ("birth_year", "In what year was {x} born?"),
           "work": ("year", "In what year did {x} appear?"),
           "org": ("founded", "In what year was {x} founded?"),
           "city": ("founded", "In what year was {x} founded?"),
           "country": ("founded", "In what year was {x} established?")}
_COMPARE_Q = {"person": ("birth_year", "Who was born earlier, {a} or {b}?"),
              "work": ("year", "Which appeared earlier, {a} or {b}?"),
              "org": ("founded", "Which was founded earlier, {a} or {b}?"),
              "city": ("founded", "Which city was founded earlier, {a} or {b}?")}


@dataclass(frozen=True)
class Question:
    """A question, its golden answers, and the documents that support it (in the order to read them)."""

    id: str
    question: str
    answers: tuple[str, ...]
    hops: int
    kind: str
    support: tuple[str, ...]  # doc ids of the supporting documents; len == hops for generated questions


def split_of(entity_id: str) -> str:
    return "test" if zlib.crc32(entity_id.encode()) % 5 == 0 else "train"


@lru_cache(maxsize=32)
def _starts(world: World, split: str) -> tuple[str, ...]:
    return tuple(sorted(i for i in world.entities if split_of(i) == split))


def _np(world: World, prev_np: str, prev_id: str, relation: str) -> str:
    if relation == "creator":
        return f"the {_ROLE[str(world.entities[prev_id].attributes['kind'])]} of {prev_np}"
    return _REL_NP[relation].format(x=prev_np)


def _walk(world: World, start: str, relations: int, rng: random.Random) -> tuple[list[str], str] | None:
    """Follow `relations` random relations from `start` without revisiting: (entity ids, noun phrase)."""
    ids, phrase = [start], world.entities[start].name
    for _ in range(relations):
        options = [r for r, t in sorted(world.entities[ids[-1]].relations.items()) if t not in ids]
        if not options:
            return None
        relation = rng.choice(options)
        phrase = _np(world, phrase, ids[-1], relation)
        ids.append(world.entities[ids[-1]].relations[relation])
    return ids, phrase


def _bridge(world: World, starts: tuple[str, ...], hops: int, rng: random.Random) -> tuple[str, str, tuple]:
    while True:
        as_name = rng.random() < 0.5  # ask for the last entity's name (hops relations) or an attribute
        walked = _walk(world, rng.choice(starts), hops if as_name else hops - 1, rng)
        if walked is None:
            continue
        ids, phrase = walked
        last = world.entities[ids[-1]]
        if as_name:
            wh = "Who" if last.type == "person" else "What"
            return f"{wh} is {phrase}?", last.name, tuple(ids[:-1])
        attribute, template = _ATTR_Q[last.type]
        return template.format(x=phrase), str(last.attributes[attribute]), tuple(ids)


def _comparison(world: World, starts: tuple[str, ...], hops: int, rng: random.Random) -> tuple[str, str, tuple]:
    for _ in range(10_000):
        a, b = (_walk(world, rng.choice(starts), hops // 2 - 1, rng) for _ in range(2))
        if a is None or b is None:
            continue
        ea, eb = world.entities[a[0][-1]], world.entities[b[0][-1]]
        if ea.type != eb.type or ea.type not in _COMPARE_Q or ea.id == eb.id or set(a[0]) & set(b[0]):
            continue
        attribute, template = _COMPARE_Q[ea.type]
        if ea.attributes[attribute] == eb.attributes[attribute]:
            continue
        winner = ea if int(ea.attributes[attribute]) < int(eb.attributes[attribute]) else eb
        return template.format(a=a[1], b=b[1]), winner.name, tuple(a[0]) + tuple(b[0])
    raise ConfigError("could not build a comparison question; the world is too small")


def make_question(world: World, seed: int, hops: int | None = None, kind: str | None = None,
                  split: str = "train") -> Question:
    """The question of a seed. `hops=None` draws 1-4; `kind=None` draws bridge or comparison (2/4 hops)."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    if kind not in (None, *KINDS):
        raise ConfigError(f"unknown question kind {kind!r}; use one of {', '.join(KINDS)} or None")
    rng = random.Random(f"question-{world.seed}-{split}-{seed}-{hops}-{kind}")
    hops = hops if hops is not None else rng.randint(1, 4)
    if not isinstance(hops, int) or not 1 <= hops <= 4:
        raise ConfigError(f"hops must be 1, 2, 3 or 4, got {hops!r}")
    if kind == "comparison" and hops not in (2, 4):
        raise ConfigError(f"comparison questions have 2 or 4 hops, got {hops}")
    if kind is None:
        kind = "comparison" if hops in (2, 4) and rng.random() < 0.3 else "bridge"
    starts = _starts(world, split)
    build = _comparison if kind == "comparison" else _bridge
    text, answer, support = build(world, starts, hops, rng)
    return Question(f"w{world.seed}-{split}-{kind}-{hops}h-{seed}", text, (answer,), hops, kind, support)
