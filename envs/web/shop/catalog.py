"""A generated shop catalogue: categories, product types, attributes, options, prices, texts, from a seed.

Product `i` of a catalogue depends only on (seed, i), so a 1k catalogue is the first 1k products of the
100k one and any product can be rebuilt alone. The long texts (description, features, reviews) are not
stored: `details(product)` derives them on demand, which keeps 100k products in ~100 MB less memory.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from functools import cached_property

# category -> product type -> option kinds; attributes are per category
PRODUCT_TYPES: dict[str, dict[str, tuple[str, ...]]] = {
    "fashion": {"t-shirt": ("size", "color"), "jeans": ("size", "color"), "hoodie": ("size", "color"),
                "sneakers": ("size", "color"), "dress": ("size", "color"), "socks": ("size", "pack"),
                "rain jacket": ("size", "color"), "baseball cap": ("color",)},
    "beauty": {"shampoo": ("scent", "size"), "moisturizer": ("size",), "lipstick": ("color",),
               "sunscreen": ("size", "pack"), "body wash": ("scent", "pack"), "face mask": ("scent", "pack")},
    "grocery": {"coffee beans": ("flavor", "weight"), "green tea": ("flavor", "pack"),
                "protein bar": ("flavor", "pack"), "olive oil": ("size",), "trail mix": ("flavor", "weight"),
                "dark chocolate": ("flavor", "pack")},
    "electronics": {"headphones": ("color",), "phone case": ("color", "model"), "usb cable": ("length", "color"),
                    "bluetooth speaker": ("color",), "power bank": ("color", "capacity"),
                    "wireless mouse": ("color",)},
    "home": {"pillow": ("size", "color"), "bath towel": ("color", "pack"), "desk lamp": ("color",),
             "curtains": ("color", "length"), "area rug": ("size", "color"), "storage bin": ("color", "pack")},
}
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "fashion": ("machine washable", "slim fit", "quick dry", "cotton", "long sleeve", "water resistant",
                "breathable", "relaxed fit", "stretch", "organic cotton"),
    "beauty": ("paraben free", "cruelty free", "fragrance free", "vegan", "long lasting", "sensitive skin",
               "natural ingredients", "travel size", "oil free", "dermatologist tested"),
    "grocery": ("gluten free", "non gmo", "low sugar", "organic", "keto friendly", "caffeine free",
                "high protein", "kosher", "fair trade", "dairy free"),
    "electronics": ("fast charging", "noise cancelling", "water resistant", "long battery life", "usb c",
                    "shockproof", "wireless", "lightweight", "high definition", "easy to use"),
    "home": ("easy clean", "machine washable", "eco friendly", "non slip", "hypoallergenic", "blackout",
             "space saving", "stain resistant", "energy saving", "soft"),
}
OPTION_VALUES: dict[str, tuple[str, ...]] = {
    "size": ("x-small", "small", "medium", "large", "x-large", "xx-large"),
    "color": ("black", "white", "navy blue", "red", "grey", "green", "beige", "pink", "yellow", "purple"),
    "pack": ("1 count", "2 count", "3 count", "6 count", "12 count"),
    "scent": ("lavender", "citrus", "coconut", "unscented", "mint", "vanilla"),
    "flavor": ("original", "vanilla", "hazelnut", "caramel", "peanut butter", "mixed berry", "mocha"),
    "weight": ("8 ounce", "12 ounce", "1 pound", "2 pound", "5 pound"),
    "model": ("iphone 14", "iphone 15", "galaxy s23", "pixel 8"),
    "length": ("3 feet", "6 feet", "10 feet", "84 inch", "96 inch"),
    "capacity": ("5000mah", "10000mah", "20000mah"),
}
PRICE_RANGE: dict[str, tuple[float, float]] = {"fashion": (8, 90), "beauty": (4, 45), "grocery": (3, 40),
                                                "electronics": (6, 150), "home": (7, 120)}
BRANDS = ("Amberly", "Norvik", "Caldera", "Pemberton", "Lumio", "Quillon", "Tavora", "Brisk & Co", "Vendell",
          "Oakhaven", "Zephra", "Marlowe", "Kestrel", "Solvane", "Halcyon", "Ridgefield", "Ostara", "Fenwick")
STYLE_WORDS = ("classic", "premium", "everyday", "essential", "deluxe", "ultra", "signature", "modern", "basic",
               "pro", "original", "lite")
REVIEW_OPENERS = ("Works as described.", "Good value for the price.", "Not what I expected.", "Love it!",
                  "Decent, but shipping was slow.", "Would buy again.", "Quality could be better.")
TYPE_LIST: tuple[tuple[str, str], ...] = tuple((c, t) for c, types in PRODUCT_TYPES.items() for t in types)


@dataclass(frozen=True)
class Product:
    asin: str
    category: str
    product_type: str
    title: str
    brand: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]   # (kind, values) in display order
    price: float
    rating: float

    @property
    def option_dict(self) -> dict[str, tuple[str, ...]]:
        return dict(self.options)

    def index_text(self) -> str:
        """What search matches: title, type, category, attributes and option values (as WebShop indexes)."""
        values = " ".join(v for _, vs in self.options for v in vs)
        return f"{self.product_type} {self.category} {' '.join(self.attributes)} {values}"


@dataclass(frozen=True)
class ProductDetails:
    description: str
    features: tuple[str, ...]
    reviews: tuple[tuple[float, str], ...]   # (stars, text)


def asin_for(seed: int, index: int) -> str:
    """A stable 10-character id, WebShop-style (B0 + 8 base-36 chars)."""
    n = (index * 2654435761 + seed * 97 + 12345) % (36 ** 8)
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = ""
    for _ in range(8):
        n, r = divmod(n, 36)
        out = digits[r] + out
    return "B0" + out


def _rng(seed: int, index: int, salt: int = 0) -> random.Random:
    return random.Random((seed * 1_000_003 + index) * 7 + salt)


def make_product(seed: int, index: int) -> Product:
    rng = _rng(seed, index)
    category, ptype = TYPE_LIST[rng.randrange(len(TYPE_LIST))]
    attributes = tuple(sorted(rng.sample(ATTRIBUTES[category], rng.randint(2, 4))))
    options = []
    for kind in PRODUCT_TYPES[category][ptype]:
        pool = OPTION_VALUES[kind]
        picked = set(rng.sample(range(len(pool)), rng.randint(2, min(5, len(pool)))))
        options.append((kind, tuple(pool[i] for i in sorted(picked))))
    low, high = PRICE_RANGE[category]
    price = round(low * (high / low) ** rng.random(), 2)
    brand = rng.choice(BRANDS)
    shown = rng.sample(attributes, min(2, len(attributes)))
    title = f"{brand} {rng.choice(STYLE_WORDS).title()} {ptype.title()}, {', '.join(a.title() for a in shown)}"
    return Product(asin_for(seed, index), category, ptype, title, brand, attributes, tuple(options), price,
                   round(rng.uniform(2.5, 5.0), 1))


def details(product: Product, seed: int = 0) -> ProductDetails:
    """Description, features and reviews, derived from the product (never stored)."""
    rng = random.Random(f"{seed}:{product.asin}")
    attrs = ", ".join(product.attributes)
    description = (f"The {product.title} by {product.brand} is a {product.product_type} for {product.category} "
                   f"shoppers who want something {attrs}. "
                   + " ".join(f"Available in {len(vs)} {kind} choices." for kind, vs in product.options))
    features = tuple(f"{a.capitalize()}: designed to be {a} from day one." for a in product.attributes)
    reviews = tuple((float(rng.randint(1, 5)), f"{rng.choice(REVIEW_OPENERS)} The {rng.choice(product.attributes)} "
                     f"part is {rng.choice(('great', 'fine', 'so-so', 'excellent'))}.") for _ in range(rng.randint(1, 3)))
    return ProductDetails(description, features, reviews)


class Catalog:
    """`size` products generated from `seed`, with an asin index; cheap to share between envs."""

    def __init__(self, seed: int = 0, size: int = 10_000):
        if size < 10:
            raise ValueError(f"a catalogue needs at least 10 products, got size={size}")
        self.seed, self.size = seed, size
        self.products = [make_product(seed, i) for i in range(size)]
        self.by_asin = {p.asin: p for p in self.products}
        if len(self.by_asin) != size:  # asin_for is a bijection on [0, 36**8); this guards a future edit
            raise ValueError("duplicate asins in the catalogue")

    def __len__(self) -> int:
        return self.size

    @cached_property
    def by_type(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, p in enumerate(self.products):
            out.setdefault(p.product_type, []).append(i)
        return out


_CATALOGS: dict[tuple[int, int], Catalog] = {}
_LOCK = threading.Lock()


def shared_catalog(seed: int = 0, size: int = 10_000) -> Catalog:
    """The process-wide catalogue for (seed, size), built on first use."""
    with _LOCK:
        if (seed, size) not in _CATALOGS:
            _CATALOGS[(seed, size)] = Catalog(seed, size)
        return _CATALOGS[(seed, size)]
