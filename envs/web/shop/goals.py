"""Instructions generated from target products, with held-out splits, and WebShop's reward.

A goal names a product type, 1-3 of the target's attributes, one value per option kind and a price bound
above the target's price. Splits are disjoint by target product (a hash of the asin), so `test` goals
ask for products no `train` goal ever targeted.

Reward (WebShop, Yao et al. 2022):  r = r_type * (|attrs matched| + |options matched| + [price <= bound])
                                            / (|goal attrs| + |goal options| + 1)
with r_type = 1 for the right product type, 0.5 for the right category only, 0.1 otherwise. The three
parts are returned as components that sum to r (they share the denominator and the r_type factor).
"""
from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass

from agentgym.envs.web.shop.catalog import Catalog, Product

SPLITS = {"train": range(0, 8), "valid": range(8, 9), "test": range(9, 10)}   # buckets of 10
SPLIT_ALIASES = {"eval": "test", "validation": "valid", "dev": "valid", "test_unseen": "test"}
TEMPLATES = (
    "i want a {type} that is {attrs}{opts}, and price lower than {price} dollars",
    "i'm looking for a {attrs} {type}{opts}, and price lower than {price} dollars",
    "find me a {type}, {attrs}{opts}, under {price} dollars",
    "i need {attrs} {type}{opts} that costs less than {price} dollars",
)


@dataclass(frozen=True)
class Goal:
    goal_id: str
    split: str
    asin: str                     # the product the goal was written from (one of possibly many that fit)
    category: str
    product_type: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]   # (kind, value)
    price_upper: float
    instruction: str
    title: str                    # the target's title (for the oracle's search)


@dataclass(frozen=True)
class Purchase:
    asin: str
    options: tuple[tuple[str, str], ...]


def split_of(asin: str) -> str:
    bucket = zlib.crc32(asin.encode()) % 10
    return next(name for name, buckets in SPLITS.items() if bucket in buckets)


def canonical_split(split: str | None) -> str:
    split = SPLIT_ALIASES.get(split or "train", split or "train")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    return split


class GoalSampler:
    """Goal k of a split is a pure function of (catalogue seed, split, k)."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self.pools: dict[str, list[int]] = {name: [] for name in SPLITS}
        for i, p in enumerate(catalog.products):
            self.pools[split_of(p.asin)].append(i)

    def goal(self, split: str, k: int) -> Goal:
        split = canonical_split(split)
        pool = self.pools[split]
        rng = random.Random(f"goal:{self.catalog.seed}:{split}:{k}")
        return make_goal(self.catalog.products[pool[rng.randrange(len(pool))]], rng, f"{split}-{k}", split)


def make_goal(product: Product, rng: random.Random, goal_id: str, split: str) -> Goal:
    attrs = tuple(sorted(rng.sample(product.attributes, rng.randint(1, min(3, len(product.attributes))))))
    options = tuple((kind, rng.choice(values)) for kind, values in product.options)
    price_upper = float(math.ceil(product.price * rng.uniform(1.1, 1.6) / 10) * 10)
    opts = "".join(f", {kind} {value}" if kind != "color" else f", {value} color" for kind, value in options)
    text = rng.choice(TEMPLATES).format(type=product.product_type, attrs=" and ".join(attrs), opts=opts,
                                        price=f"{price_upper:.2f}")
    return Goal(goal_id, split, product.asin, product.category, product.product_type, attrs, options,
                price_upper, text, product.title)


def type_reward(goal: Goal, product: Product) -> float:
    if product.product_type == goal.product_type:
        return 1.0
    return 0.5 if product.category == goal.category else 0.1


def shop_reward(goal: Goal, product: Product, chosen: dict[str, str]) -> tuple[float, dict[str, float]]:
    """(reward, components summing to it) of buying `product` with options `chosen` for `goal`."""
    r_type = type_reward(goal, product)
    n_attr = sum(a in product.attributes for a in goal.attributes)
    n_opt = sum(chosen.get(kind) == value for kind, value in goal.options)
    n_price = int(product.price <= goal.price_upper)
    denom = len(goal.attributes) + len(goal.options) + 1
    components = {"attributes": r_type * n_attr / denom, "options": r_type * n_opt / denom,
                  "price": r_type * n_price / denom}
    reward = r_type * (n_attr + n_opt + n_price) / denom   # exactly 1.0 for a full match
    return reward, components
