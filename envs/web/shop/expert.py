"""A fair shopper for the shop's text mode: it reads the pages the agent reads, never the goal record.

The oracle (`WebShopEnv.oracle_action`) reads the goal's target product (its exact title and asin) and
searches that title; a model cloned from it learns to type titles it could not know. `ShopExpert` reads
the instruction on the page (product type, attributes, option values, price bound, in the shop's own
words), searches the attributes and the type, opens the best-matching result under the price bound,
checks the attributes the title does not show on the [Features] tab, goes back and tries the next result
when the product lacks one or an option value, else clicks the option values and [Buy Now]. Knowing the
shop's vocabulary (catalog.ATTRIBUTES, OPTION_VALUES, product types) is reading its language, not its state.

    expert = ShopExpert()
    expert.observe(page_text)          # after reset and every step
    command = expert.act(admissible_actions)   # None: no result fits (the demonstration fails, is skipped)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from agentgym.envs.web.shop.catalog import ATTRIBUTES, OPTION_VALUES, TYPE_LIST

_INSTRUCTION = re.compile(r"Instruction: \[SEP\] (.+?)(?: \[SEP\]|$)", re.M)
_RESULTS = re.compile(r"Page (\d+) \(Total results: \d+\)")
_RESULT = re.compile(r"\[(B0[0-9A-Z]{8})\] \[SEP\] (.+?) \[SEP\] \$([\d.]+)")
_FEATURE = re.compile(r"(?:^|\[SEP\] )([^[\]]+?): designed to be ")
_PRICE = re.compile(r"(\d+(?:\.\d+)?) dollars")
_TITLE = re.compile(r"\[SEP\] ([^[\]]+?) \[SEP\] Price: \$")
MAX_PAGES = 3


@dataclass(frozen=True)
class Want:
    """What an instruction asks for."""

    product_type: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]        # option values, e.g. ("xx-large", "navy blue")
    price_upper: float


def _has(text: str, phrase: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", text) is not None


def parse_instruction(text: str) -> Want | None:
    """The product type (the longest the text names), its category's attributes and the option values the
    text names (as "{kind} {value}" or "{value} color"), and the price bound; None without a type."""
    text = text.lower()
    types = sorted((t for t in TYPE_LIST if _has(text, t[1])), key=lambda t: -len(t[1]))
    price = _PRICE.search(text)
    if not types or not price:
        return None
    category, ptype = types[0]
    rest = text.replace(ptype, " ", 1)  # "wireless" the attribute, not the word of "wireless mouse"
    options = []
    for kind, values in OPTION_VALUES.items():
        for value in sorted(values, key=len, reverse=True):
            phrase = f"{value} color" if kind == "color" else f"{kind} {value}"
            if _has(rest, phrase):
                options.append(value)
                rest = rest.replace(phrase, " ")
                break
    attributes = []
    for attribute in sorted(ATTRIBUTES[category], key=len, reverse=True):
        if _has(rest, attribute):
            attributes.append(attribute)
            rest = rest.replace(attribute, " ")
    return Want(ptype, tuple(sorted(attributes)), tuple(options), float(price.group(1)))


@dataclass
class ShopExpert:
    """Scripted shopper over the page text and the admissible clicks (see the module docstring)."""

    want: Want | None = None
    page: str = ""
    current: str = ""                                    # asin of the product page we are on / came from
    rejected: set[str] = field(default_factory=set)
    features: dict[str, set[str]] = field(default_factory=dict)  # asin -> attributes its Features tab lists
    clicked: set[str] = field(default_factory=set)      # option values clicked on the current product
    searched: bool = False
    pages: int = 0

    def observe(self, observation: str) -> None:
        self.page = observation
        instruction = _INSTRUCTION.search(observation)
        if observation.startswith("WebShop [SEP] Instruction:"):  # a new episode's start page
            self.__init__()  # type: ignore[misc]
            self.page = observation
            self.want = parse_instruction(instruction.group(1)) if instruction else None
        if self.current and " designed to be " in observation and "[Buy Now]" not in observation:
            self.features[self.current] = {m.group(1).strip().lower() for m in _FEATURE.finditer(observation)}

    def act(self, admissible: list[str]) -> str | None:
        acts = set(admissible)
        want = self.want
        if want is None:
            return None
        if "search[<query>]" in acts and not self.searched:
            self.searched = True
            return f"search[{' '.join([*want.attributes, want.product_type])}]"
        if "click[Buy Now]" in acts:
            return self._on_product(acts, want)
        if " designed to be " in self.page:  # the Features tab: back to the product
            return "click[< Prev]"
        results = _RESULTS.search(self.page)
        if results:
            return self._on_results(acts, want)
        return None

    def _on_results(self, acts: set[str], want: Want) -> str | None:
        fits = []
        for n, (asin, title, price) in enumerate(_RESULT.findall(self.page)):
            title = title.lower()
            if asin in self.rejected or float(price) > want.price_upper or not _has(title, want.product_type):
                continue
            shown = sum(_has(title, a) for a in want.attributes)
            fits.append((-shown, n, asin))
        if fits:
            self.current, self.clicked = min(fits)[2], set()
            return f"click[{self.current}]"
        if "click[Next >]" in acts and self.pages < MAX_PAGES - 1:
            self.pages += 1
            return "click[Next >]"
        return None  # nothing on the pages read fits: no path

    def _on_product(self, acts: set[str], want: Want) -> str:
        title_match = _TITLE.search(self.page)  # the product's title, not the instruction above it
        title = title_match.group(1).lower() if title_match else ""
        missing_option = [v for v in want.options if f"click[{v}]" not in acts]
        unseen = [a for a in want.attributes if not _has(title, a)]
        listed = self.features.get(self.current)
        if missing_option or (unseen and listed is not None and not set(unseen) <= listed):
            self.rejected.add(self.current)
            return "click[< Prev]"
        if unseen and listed is None:
            return "click[Features]"
        for value in want.options:
            if value not in self.clicked:
                self.clicked.add(value)
                return f"click[{value}]"
        return "click[Buy Now]"
