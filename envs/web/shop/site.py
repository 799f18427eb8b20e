"""The shop's pages and state, independent of transport: `ShopSite.dispatch(method, path, params)`.

The ASGI app (app.py) and the in-process text env call the same `dispatch`, so a page is the same HTML
whether it went over a socket or not. State lives in the URL (query, page, chosen options) as in WebShop;
the server keeps only a session per episode: its goal, and the purchase once made. Sessions are
independent, so concurrent episodes never share state, and the oldest are dropped past `max_sessions`.
"""
from __future__ import annotations

import functools
import math
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote_plus, urlencode

from agentgym.envs.web.shop.catalog import Catalog, details, shared_catalog
from agentgym.envs.web.shop.goals import Goal, GoalSampler, Purchase, shop_reward

TEMPLATES = Path(__file__).with_name("templates")
TABS = ("description", "features", "reviews")
MAX_QUERY = 500


@dataclass
class Session:
    sid: str
    goal: Goal
    purchase: Purchase | None = None
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.purchase is not None

    def state(self) -> dict:
        return {"sid": self.sid, "goal_id": self.goal.goal_id, "instruction": self.goal.instruction,
                "done": self.done, "reward": self.reward, "components": dict(self.components),
                "purchased": self.purchase.asin if self.purchase else None,
                "options": dict(self.purchase.options) if self.purchase else {},
                # for the env's oracle and reports; the agent sees pages, never this API
                "target": {"asin": self.goal.asin, "title": self.goal.title,
                           "options": dict(self.goal.options)}}


@dataclass(frozen=True)
class Page:
    status: int
    html: str
    path: str          # the page's own path and query, i.e. where the browser would be


def parse_options(text: str) -> dict[str, str]:
    """`size:large|color:red` -> {"size": "large", "color": "red"}; junk parts are ignored."""
    out = {}
    for part in (text or "").split("|"):
        kind, sep, value = part.partition(":")
        if sep and kind and value:
            out[kind] = value
    return out


@functools.lru_cache(maxsize=65_536)
def _quote(text: str) -> str:
    return quote_plus(text)


def format_options(options: dict[str, str]) -> str:
    return "|".join(f"{k}:{v}" for k, v in options.items())


class ShopSite:
    def __init__(self, catalog_seed: int = 0, num_products: int = 10_000, results: int = 50, per_page: int = 10,
                 max_sessions: int = 10_000, cache_dir: str | None = None):
        import jinja2

        from agentgym.tools.retrieval.bm25 import bm25_index
        from agentgym.tools.retrieval.corpus import Corpus, Document

        self.catalog: Catalog = shared_catalog(catalog_seed, num_products)
        self.goals = GoalSampler(self.catalog)
        corpus = Corpus((Document(p.asin, p.title, p.index_text()) for p in self.catalog.products),
                        name=f"shop-{catalog_seed}-{num_products}")
        self.retriever = bm25_index(corpus, cache_dir=cache_dir)
        self.results, self.per_page, self.max_sessions = results, per_page, max_sessions
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()
        # auto_reload=False: no stat() of the template file on every page
        self.jinja = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                                        auto_reload=False, trim_blocks=True, lstrip_blocks=True)
        self.jinja.globals["qs"] = lambda **kw: urlencode({k: v for k, v in kw.items() if v not in (None, "")})
        self._search_cache: OrderedDict[str, list[str]] = OrderedDict()

    # ------------------------------------------------------------------ sessions
    def new_session(self, split: str = "train", index: int = 0, goal: Goal | None = None) -> Session:
        session = Session(secrets.token_hex(8), goal or self.goals.goal(split, index))
        with self._lock:
            self.sessions[session.sid] = session
            while len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)
        return session

    def adopt(self, session: Session) -> None:
        """Add a session made elsewhere (a restored snapshot's copy) under its own sid."""
        with self._lock:
            self.sessions[session.sid] = session
            while len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)

    def session(self, sid: str) -> Session | None:
        with self._lock:
            return self.sessions.get(sid)

    def end_session(self, sid: str) -> None:
        with self._lock:
            self.sessions.pop(sid, None)

    # ------------------------------------------------------------------ pages
    def search(self, query: str) -> list[str]:
        """The asins of the top results (cached: agents repeat queries a lot)."""
        with self._lock:
            if query in self._search_cache:
                self._search_cache.move_to_end(query)
                return self._search_cache[query]
        asins = [h.doc_id for h in self.retriever.search(query, k=self.results)]
        with self._lock:
            self._search_cache[query] = asins
            if len(self._search_cache) > 4096:
                self._search_cache.popitem(last=False)
        return asins

    def render(self, template: str, **context) -> str:
        return self.jinja.get_template(template).render(**context)

    def error(self, status: int, message: str, path: str, sid: str | None = None) -> Page:
        return Page(status, self.render("error.html", status=status, message=message, sid=sid), path)

    def dispatch(self, method: str, path: str, params: dict[str, str]) -> Page:
        """Route one request. `path` has no query string; `params` are the query or form fields."""
        full = path + ("?" + urlencode(params) if params and method == "GET" else "")
        parts = [p for p in path.split("/") if p]
        if len(parts) < 2 or parts[0] != "s":
            return self.error(404, f"no page at {path[:200]!r}; episodes start at /s/<session>/", full)
        session = self.session(parts[1])
        if session is None:
            return self.error(404, "unknown or expired session; start a new episode", full)
        sid, rest = session.sid, parts[2:]
        if session.done:   # every page of a finished episode is its receipt
            return self.done_page(session, f"/s/{sid}/done")
        q = str(params.get("q", ""))[:MAX_QUERY]
        try:
            page = max(1, int(params.get("page", 1)))
        except (TypeError, ValueError):
            page = 1
        common = {"sid": sid, "goal": session.goal, "q": q, "page": page}
        if not rest and method == "GET":
            return Page(200, self.render("index.html", **common), full)
        if rest == ["search"] and method == "GET":
            asins = self.search(q)
            pages = max(1, math.ceil(len(asins) / self.per_page))
            page = min(page, pages)
            shown = [self.catalog.by_asin[a] for a in asins[(page - 1) * self.per_page: page * self.per_page]]
            return Page(200, self.render("results.html", **{**common, "page": page}, total=len(asins),
                                         pages=pages, products=shown, page_qs=urlencode({"q": q, "page": page})),
                        full)
        product = self.catalog.by_asin.get(rest[1]) if len(rest) >= 2 else None
        if rest[:1] in (["item"], ["buy"]) and product is None:
            return self.error(404, f"no product {rest[1][:40]!r}" if len(rest) > 1 else "no product", full, sid)
        allowed = product.option_dict if product else {}
        chosen = {k: v for k, v in parse_options(str(params.get("o", ""))).items() if v in allowed.get(k, ())}
        options = format_options(chosen)
        if rest[0] == "item" and len(rest) == 2 and method == "GET":
            base = f"/s/{sid}/item/{product.asin}?" + urlencode({"q": q, "page": page}) + "&o="
            option_links = [(kind, [(v, base + _quote(format_options({**chosen, kind: v})),
                                     "true" if chosen.get(kind) == v else "false") for v in values])
                            for kind, values in product.options]   # built here: urlencode per link is slow
            return Page(200, self.render("item.html", **common, p=product, options=options, tabs=TABS,
                                         option_links=option_links), full)
        if rest[0] == "item" and len(rest) == 3 and rest[2] in TABS and method == "GET":
            return Page(200, self.render("tab.html", **common, p=product, tab=rest[2], options=options,
                                         d=details(product, self.catalog.seed)), full)
        if rest[0] == "buy" and len(rest) == 2 and method == "POST":
            return self.buy(session, product, chosen, f"/s/{sid}/done")
        return self.error(404 if method == "GET" else 405, f"no page at {path[:200]!r}", full, sid)

    def buy(self, session: Session, product, chosen: dict[str, str], path: str) -> Page:
        with self._lock:
            if not session.done:   # the first purchase counts; a second click cannot change the score
                session.reward, session.components = shop_reward(session.goal, product, chosen)
                session.purchase = Purchase(product.asin, tuple(chosen.items()))
        return self.done_page(session, path)

    def done_page(self, session: Session, path: str) -> Page:
        product = self.catalog.by_asin[session.purchase.asin]
        chosen_text = ", ".join(f"{k} {v}" for k, v in session.purchase.options)
        return Page(200, self.render("done.html", p=product, chosen_text=chosen_text, reward=session.reward), path)


_SITES: dict[tuple[int, int], ShopSite] = {}
_SITES_LOCK = threading.Lock()


def shared_site(catalog_seed: int = 0, num_products: int = 10_000) -> ShopSite:
    """The process-wide site of a catalogue: envs of one process share its catalogue, index and server."""
    with _SITES_LOCK:
        key = (catalog_seed, num_products)
        if key not in _SITES:
            _SITES[key] = ShopSite(catalog_seed, num_products)
        return _SITES[key]
