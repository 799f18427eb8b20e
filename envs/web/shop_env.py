"""WebShopEnv (`agentgym/WebShop-v0`): WebShop's text mode over the shop's real pages.

Observations are the page as WebShop's text: chunks joined by " [SEP] ", clickables in brackets. Actions
are `search[query]` (where the page has a search bar) and `click[label]`; `info["admissible_actions"]`
lists them. The last such command in the model's text counts, so a model may think first.
By default the env calls the shop in-process (`ShopSite.dispatch`, the code the ASGI app runs, no
sockets); with `url=` it talks HTTP to `agentgym serve shop` (or any server of this app).
Reward on "Buy Now": WebShop's (type match x fraction of attributes, options and price bound met),
with `attributes`, `options`, `price` in `reward_components`; success means reward 1. `reward="success"` pays
1 for an exact buy and 0 for any other (WebShop's success rate as the reward; the score stays among
`info["reward_components"]` as `shop_score`).
"""
from __future__ import annotations

import dataclasses
import pickle
import re
import secrets
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from agentgym.core import TextEnv, make_info
from agentgym.envs.web.shop.expert import ShopExpert
from agentgym.envs.web.shop.goals import canonical_split
from agentgym.envs.web.shop.site import Page, parse_options, shared_site
from agentgym.envs.web.shop.textview import TextView, text_view
from agentgym.errors import AgentGymError, ConfigError

ACTION = re.compile(r"(search|click)\s*\[(.*?)\]", re.I | re.S)
INSTRUCTIONS = (
    "You are shopping in WebShop for the product the instruction describes. Each observation is a web page: "
    "text chunks separated by [SEP], with clickable buttons in square brackets. Act with exactly one of:\n"
    "  search[your query]   on a page with a search bar\n"
    "  click[label]         to click a button shown as [label], e.g. click[Next >] or click[B0ABC12345]\n"
    "Find a product that matches the instruction's type, attributes and price, open it, click the option "
    "values it asks for (size, color, ...), then click[Buy Now]. Your score is how well the purchase matches.")


class ShopUnavailable(AgentGymError):
    """The shop server did not answer (down, or too slow)."""


class ShopTransport:
    """In-process calls into a `ShopSite`, or HTTP to a shop server: both return a `Page`."""

    def __init__(self, url: str | None, catalog_seed: int, num_products: int, timeout_s: float):
        self.url = url.rstrip("/") if url else None
        if self.url:
            import httpx

            self.http = httpx.Client(base_url=self.url, timeout=timeout_s, follow_redirects=True)
            self.site = None
        else:
            self.http = None
            self.site = shared_site(catalog_seed, num_products)

    def _http(self, method: str, path: str, **kwargs: Any):
        import httpx

        try:
            return self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ShopUnavailable(f"{self.url}: {type(exc).__name__}: {str(exc)[:200]}") from exc

    def new_session(self, split: str, index: int) -> dict[str, Any]:
        if self.site is not None:
            return {**self.site.new_session(split, index).state()}
        response = self._http("POST", "/api/sessions", json={"split": split, "index": index})
        if response.status_code != 200:
            raise ShopUnavailable(f"{self.url} answered {response.status_code} to a new session: {response.text[:200]}")
        return response.json()

    def state(self, sid: str) -> dict[str, Any]:
        if self.site is not None:
            session = self.site.session(sid)
            return session.state() if session else {}
        response = self._http("GET", f"/api/sessions/{sid}")
        return response.json() if response.status_code == 200 else {}

    def end(self, sid: str) -> None:
        if self.site is not None:
            self.site.end_session(sid)
        else:
            try:
                self._http("DELETE", f"/api/sessions/{sid}")
            except ShopUnavailable:  # the server is gone; nothing is left to free then
                pass

    def request(self, method: str, url: str, fields: dict[str, str]) -> Page:
        parts = urlsplit(url)
        params = dict(parse_qsl(parts.query, keep_blank_values=True)) if method == "GET" else {}
        params.update(fields)
        if self.site is not None:
            return self.site.dispatch(method, parts.path, params)
        if method == "GET":
            response = self._http("GET", parts.path, params=params)
        else:
            response = self._http("POST", parts.path, content=urlencode(params),
                                  headers={"content-type": "application/x-www-form-urlencoded"})
        path = response.url.raw_path.decode()
        return Page(response.status_code, response.text, path)

    def close(self) -> None:
        if self.http is not None:
            self.http.close()


REWARDS = ("score", "success")  # WebShop's graded score, or 1 for an exact buy only


class WebShopEnv(TextEnv):
    action_listing = "partial"  # the page's list holds the search[<query>] template (agentgym/action_listing.py)

    def __init__(self, url: str | None = None, catalog_seed: int = 0, num_products: int = 10_000,
                 split: str = "train", timeout_s: float = 30.0, reward: str = "score"):
        if reward not in REWARDS:
            raise ConfigError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        self.reward_mode = reward
        try:
            self.default_split = canonical_split(split)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if num_products < 10:
            raise ConfigError(f"num_products must be at least 10, got {num_products}")
        self.transport = ShopTransport(url, catalog_seed, num_products, timeout_s)
        self.sid: str | None = None
        self.view: TextView | None = None
        self.path = ""
        self.goal: dict[str, Any] = {}
        self.done = False
        self._expert = ShopExpert()  # fed every page the agent is shown (expert_action)

    @property
    def instructions(self) -> str:
        return INSTRUCTIONS

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        split, index = self._task(seed, options)
        if self.sid:
            self.transport.end(self.sid)
        state = self.transport.new_session(split, index)
        self.sid, self.goal, self.done = state["sid"], state, False
        obs = self._load(self.transport.request("GET", f"/s/{self.sid}/", {}))
        info = make_info(task_id=state["goal_id"], anchor=self._anchor(),
                         admissible_actions=self.view.admissible_actions(), task=state["instruction"])
        return obs, self.finish_info(obs, info)

    def _task(self, seed: int | None, options: dict[str, Any]) -> tuple[str, int]:
        task_id = options.get("task_id")
        if task_id:
            split, _, k = str(task_id).rpartition("-")
            if not k.isdigit():
                raise ConfigError(f"task_id {task_id!r} is not of the form SPLIT-INDEX, e.g. 'test-3'")
            return canonical_split(split), int(k)
        try:
            split = canonical_split(options.get("split", self.default_split))
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        return split, seed if seed is not None else int(self.np_random.integers(1_000_000_000))

    def _load(self, page: Page) -> str:
        self.view, self.path = text_view(page.html), page.path
        self._last_obs = self.view.text
        self._expert.observe(self.view.text)
        return self.view.text

    def _anchor(self) -> str:
        """The page's path without the session id: equal for two rollouts in the same state (GiGPO)."""
        return self.path.replace(f"/s/{self.sid}", "", 1)

    def step(self, action: str):
        action = action if isinstance(action, str) else str(action)
        if self.view is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            return self._invalid("The episode is over: you already bought a product. Call reset().")
        matches = list(ACTION.finditer(action[-20_000:]))
        if not matches:
            return self._invalid("No action found. Write search[query] or click[label], e.g. "
                                 + (self.view.admissible_actions()[:2] or ["click[Back to Search]"])[-1] + ".")
        verb, arg = matches[-1].group(1).lower(), " ".join(matches[-1].group(2).split())
        try:
            page = self._request(verb, arg)
        except ShopUnavailable as exc:   # the server went away: this episode fails, the caller goes on
            self.done = True
            obs = f"The shop did not answer ({exc}); the episode ends."
            self._last_obs = obs
            return self._result(obs, valid=False, terminated=True)
        if isinstance(page, str):
            return self._invalid(page)
        if page.status >= 400:
            obs = self._load(page)
            return self._result(obs, valid=False)
        obs = self._load(page)
        reward, components, success = 0.0, {}, False
        if "/done" in self.path or "/buy/" in self.path:
            try:
                state = self.transport.state(self.sid)
            except ShopUnavailable:
                state = {}
            if state.get("done"):
                self.done = True
                reward, components = float(state["reward"]), dict(state["components"])
                success = reward >= 1.0 - 1e-9
        if self.done and self.reward_mode == "success":  # a near buy earns nothing: only the exact one counts
            components["shop_score"], reward = reward, float(success)
        return self._result(obs, reward=reward, components=components, success=success, terminated=self.done)

    def _request(self, verb: str, arg: str) -> Page | str:
        """The page an action leads to, or why the action is not admissible here."""
        if verb == "search":
            if not self.view.search_url:
                return "This page has no search bar; click[Back to Search] first."
            if not arg or arg == "<query>":
                return "search[] needs a query, e.g. search[red cotton t-shirt]."
            return self.transport.request("GET", self.view.search_url, {"q": arg[:500]})
        target = self.view.clickables.get(arg.lower())
        if target is None:
            labels = ", ".join(c.label for c in list(self.view.clickables.values())[:12])
            return f"There is no [{arg[:80]}] on this page. Clickable: {labels or 'none'}."
        return self.transport.request(target.method, target.url, dict(target.fields))

    def _invalid(self, message: str):
        obs = f"Invalid action. {message}"
        self._last_obs = obs
        return self._result(obs, valid=False, anchor=self._anchor())

    def _result(self, obs: str, reward: float = 0.0, components: dict[str, float] | None = None,
                success: bool = False, terminated: bool = False, valid: bool = True, anchor: str | None = None):
        info = make_info(success=success, valid_action=valid, anchor=anchor or self._anchor(),
                         reward_components=components or {}, admissible_actions=[] if self.done else
                         self.view.admissible_actions(), task_id=self.goal.get("goal_id"))
        return obs, reward, terminated, False, self.finish_info(obs, info)

    # ------------------------------------------------------------------ helpers
    def oracle_action(self) -> str | None:
        """Search the target's title, page to it, choose the goal's options, buy."""
        if self.done or self.view is None:
            return None
        target = self.goal["target"]
        return oracle_step(self.view, self.path, target["asin"], target["options"], target["title"])

    def expert_action(self) -> str | None:
        """The fair shopper's command (shop/expert.py): from the pages shown and the admissible clicks only,
        never the goal's target product. None: no result it read fits (no path)."""
        if self.done or self.view is None:
            return None
        return self._expert.act(self.view.admissible_actions())

    def render(self) -> str | None:
        return self._last_obs if hasattr(self, "_last_obs") else None

    # ------------------------------------------------------------------ snapshots (text mode, in-process shop)
    def supports_snapshot(self) -> bool:
        """In-process only: over HTTP the session lives in the shop server, which cannot copy one."""
        return self.transport.site is not None

    def snapshot(self) -> bytes:
        if self.transport.site is None:
            raise NotImplementedError("WebShopEnv snapshots need the in-process shop (url=None)")
        session = self.transport.site.session(self.sid) if self.sid else None
        state = (self.sid, self.view, self.path, self.goal, self.done, getattr(self, "_last_obs", None), session,
                 self._np_random, self._expert)
        return pickle.dumps(("WebShopEnv", state), protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, data: bytes) -> None:
        """A copy of the snapshot's shop session under a new sid (so G restored envs branch independently)."""
        site = self.transport.site
        if site is None:
            raise NotImplementedError("WebShopEnv snapshots need the in-process shop (url=None)")
        owner, (old_sid, view, path, goal, done, last_obs, session, rng, expert) = pickle.loads(data)
        if owner != "WebShopEnv":
            raise ValueError(f"this snapshot was taken from a {owner}, not a WebShopEnv")
        if self.sid:
            site.end_session(self.sid)
        new_sid = secrets.token_hex(8)
        if session is not None:
            site.adopt(dataclasses.replace(session, sid=new_sid))
        rebase = (lambda text: text.replace(f"/s/{old_sid}", f"/s/{new_sid}")) if old_sid else (lambda text: text)
        self.sid, self.path, self.done, self._np_random = (new_sid if old_sid else None), rebase(path), done, rng
        self._expert = expert
        self.goal = {**goal, "sid": new_sid} if goal else {}
        self.view = None if view is None else dataclasses.replace(
            view, search_url=view.search_url and rebase(view.search_url),
            clickables={k: dataclasses.replace(c, url=rebase(c.url)) for k, c in view.clickables.items()})
        if last_obs is not None:
            self._last_obs = last_obs

    def close(self) -> None:
        if self.sid:
            self.transport.end(self.sid)
            self.sid = None
        self.transport.close()


def oracle_step(view: TextView, path: str, asin: str, options: dict[str, str], title: str) -> str:
    """The oracle's next WebShop action on the page `view` at `path`."""
    parts = urlsplit(path)
    segments = [p for p in parts.path.split("/") if p]
    if view.search_url:
        return f"search[{title}]"
    if "item" in segments:
        if segments[segments.index("item") + 1] != asin:
            return "click[< Prev]"
        if len(segments) > segments.index("item") + 2:     # a tab page
            return "click[< Prev]"
        chosen = parse_options(dict(parse_qsl(parts.query)).get("o", ""))
        for kind, value in options.items():
            if chosen.get(kind) != value:
                return f"click[{value}]"
        return "click[Buy Now]"
    if asin.lower() in view.clickables:
        return f"click[{asin}]"
    if "next >" in view.clickables:
        return "click[Next >]"
    return "click[Back to Search]"

