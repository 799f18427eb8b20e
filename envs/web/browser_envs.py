"""Browser-mode envs: a real Chromium page, accessibility-tree observations with element ids.

Actions: click(ID), type(ID, "text"), select(ID, "option"), scroll(down|up), back(). A bad action (no
action, unknown id, a click that times out) is an observation with `valid_action=False`; a page that fails
to load or a browser that crashes ends the episode as a failure. Never an exception out of `step`.

    BrowserEnv            the base: start URL, allowed origins, a `score()` hook
    WebEnv                agentgym/Web-v0: any local URL + a task text + a checker (callable, "module:fn",
                          or `success_js`, a JS expression that is truthy when the task is done)
    WebShopBrowserEnv     agentgym/WebShop-Browser-v0: the shop server, a session per episode
"""
from __future__ import annotations

import importlib
import math
import json
import re
from typing import Any, Callable, Sequence

from agentgym.core import TextEnv, make_info
from agentgym.errors import ConfigError
from agentgym.tools.browser.actions import USAGE, ActionError, parse_browser_action

INSTRUCTIONS = (
    "You operate a web browser. Each observation is the page's accessibility tree: one element per line, "
    "the number in [brackets] is its id. Act with exactly one of:\n"
    '  click(ID)   type(ID, "text")   select(ID, "option")   scroll(down)   scroll(up)   back()\n'
    "Text fields: type into the textbox, then click the button that submits it.")


class BrowserEnv(TextEnv):
    """Subclasses set `start_url` in `begin_episode` and return rewards from `score`."""

    root_selector: str | None = None
    exclude_selectors: tuple[str, ...] = ()

    def __init__(self, allowed_origins: Sequence[str] = (), timeout_s: float = 15.0, max_obs_chars: int = 12_000):
        self.allowed_origins = list(allowed_origins)
        self.timeout_s, self.max_obs_chars = timeout_s, max_obs_chars
        self.page = None
        self.task = ""
        self.done = False

    @property
    def instructions(self) -> str:
        return INSTRUCTIONS

    # ------------------------------------------------------------------ hooks
    def begin_episode(self, seed: int | None, options: dict[str, Any]) -> tuple[str, str]:
        """Set up the task; return (start url, task text)."""
        raise NotImplementedError

    def after_load(self) -> None:
        """Runs after the start page loads (MiniWoB starts its episode here)."""

    def after_action(self) -> None:
        """Runs after each action, before it is scored (MiniWoB advances its page's clock here)."""

    def score(self) -> tuple[dict[str, float], bool, bool]:
        """(reward components, terminated, success) after an action."""
        return {}, False, False

    def task_id(self) -> str | None:
        return None

    # ------------------------------------------------------------------ the contract
    def _ensure_page(self):
        from agentgym.tools.browser import open_page

        if self.page is not None and self.page.crashed:
            self.page.close()
            self.page = None
        if self.page is None:
            self.page = open_page(allowed_origins=self.allowed_origins, timeout_s=self.timeout_s)
        return self.page

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        from agentgym.tools.browser.runtime import BrowserError

        start_url, self.task = self.begin_episode(seed, dict(options or {}))
        self.done = False
        try:
            page = self._ensure_page()
            page.goto(start_url)
            self.after_load()
            obs = self._observe(first=True)
        except BrowserError as exc:  # the episode cannot start; say so, and a next reset tries again
            self.done = True
            obs = f"{self.task}\n\nThe page failed to load: {exc}"
        self._last_obs = obs
        info = make_info(task_id=self.task_id(), task=self.task, anchor=self._anchor())
        return obs, self.finish_info(obs, info)

    def _observe(self, first: bool = False) -> str:
        snap = self.page.snapshot(self.root_selector, self.max_obs_chars, self.exclude_selectors)
        self._snapshot = snap
        head = f"Task: {self.task}\n" if first else ""
        return head + snap.text

    def _anchor(self) -> str | None:
        snap = getattr(self, "_snapshot", None)
        return snap.tree if snap is not None else None

    def step(self, action: str):
        from agentgym.tools.browser.runtime import BrowserError

        action = action if isinstance(action, str) else str(action)
        if self.page is None or self.done:
            return self._reply("The episode is over; call reset().", valid=False)
        try:
            parsed = parse_browser_action(action)
            self.page.act(parsed)
            self.after_action()
        except ActionError as exc:
            return self._reply(f"Invalid action: {exc}. Actions: {USAGE}.", valid=False)
        except BrowserError as exc:
            if self.page.crashed:
                self.done = True
                return self._reply(f"The browser crashed ({exc}); the episode ends as a failure.", valid=False,
                                   terminated=True)
            return self._reply(f"The action failed: {exc}. Look at the page again and pick another element.",
                               valid=False, observe=True)
        components, terminated, success = self.score()
        self.done = terminated
        return self._reply("", components=components, terminated=terminated, success=success, observe=True)

    def _reply(self, message: str, valid: bool = True, components: dict[str, float] | None = None,
               terminated: bool = False, success: bool = False, observe: bool = False):
        from agentgym.tools.browser.runtime import BrowserError

        obs = message
        if observe and self.page is not None and not self.page.crashed:
            try:
                obs = (message + "\n\n" if message else "") + self._observe()
            except BrowserError as exc:
                self.done = terminated = True
                obs = f"{message}\nThe page cannot be read ({exc}); the episode ends as a failure."
        elif not obs:
            obs = "Done."
        self._last_obs = obs
        components = components or {}
        info = make_info(success=success, valid_action=valid, reward_components=components,
                         task_id=self.task_id(), anchor=self._anchor() if valid else None)
        reward = round(math.fsum(components.values()), 12)   # thirds and fifths of a full match sum to 1.0
        return obs, reward, terminated, False, self.finish_info(obs, info)

    def close(self) -> None:
        if self.page is not None:
            self.page.close()
            self.page = None


_ELEMENT = re.compile(r'^\s*\[(\d+)\] (\S+)(?: ("(?:\\.|[^"\\])*"))?(?: value=("(?:\\.|[^"\\])*"))?', re.M)


def snapshot_elements(tree: str) -> list[tuple[int, str, str, str]]:
    """(id, role, name, value) of each element line of a snapshot, in page order."""
    return [(int(m.group(1)), m.group(2), json.loads(m.group(3)) if m.group(3) else "",
             json.loads(m.group(4)) if m.group(4) else "") for m in _ELEMENT.finditer(tree)]


def load_callable(spec: str | Callable) -> Callable:
    if callable(spec):
        return spec
    module, _, name = str(spec).partition(":")
    if not module or not name:
        raise ConfigError(f"checker {spec!r} must be a callable or 'package.module:function'")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load checker {spec!r}: {exc}") from exc


class WebEnv(BrowserEnv):
    """Any site on loopback (or anywhere allowed): `url`, `task`, and `checker(page) -> reward` or
    `success_js`. The checker gets the `BrowserPage` (url, evaluate(js), snapshot()) after every action
    and returns a float, a bool, or (reward, done). Requests leave only to `url`'s origin and `allow`.
    With no url it opens a demo support form served from the package (envs/web/demo/)."""

    def __init__(self, url: str | None = None, task: str = "", checker: str | Callable | None = None,
                 success_js: str | None = None, allow: Sequence[str] = (), timeout_s: float = 15.0):
        from agentgym.tools.browser.page import origin_of

        if url is None:
            from agentgym.envs.web import demo_site

            url, task, success_js = demo_site.demo_url(), task or demo_site.TASK, success_js or demo_site.SUCCESS_JS
        if not url:
            raise ConfigError("agentgym/Web-v0 needs url=..., e.g. agentgym.make('agentgym/Web-v0', "
                              "url='http://127.0.0.1:8000/', task='...', success_js='...')")
        if checker is None and success_js is None:
            raise ConfigError("agentgym/Web-v0 needs checker=callable|'module:function' or success_js='<JS expr>'")
        super().__init__([origin_of(url), *allow], timeout_s)
        self.url, self.task_text = url, task or "Complete the task on this page."
        self.checker = load_callable(checker) if checker is not None else None
        self.success_js = success_js

    def begin_episode(self, seed, options):
        return self.url, options.get("task", self.task_text)

    def score(self):
        if self.checker is not None:
            result = self.checker(self.page)
            reward, done = (result if isinstance(result, tuple) else (result, bool(result)))
        else:
            reward = float(bool(self.page.evaluate(f"() => {{ return ({self.success_js}); }}")))
            done = reward > 0
        reward = float(reward)
        return {"task": reward}, bool(done), bool(done) and reward > 0

    def task_id(self):
        return self.url


class WebShopBrowserEnv(BrowserEnv):
    """The shop in Chromium: a session per episode on a local server (started in-process when `url` is
    None) or on `url`; the reward is the shop's, read from the session once "Buy Now" is clicked."""

    def __init__(self, url: str | None = None, catalog_seed: int = 0, num_products: int = 10_000,
                 split: str = "train", timeout_s: float = 15.0):
        from agentgym.envs.web.shop_env import ShopTransport

        if url is None:
            from agentgym.envs.web.shop.app import shared_server
            from agentgym.envs.web.shop.site import shared_site

            url = shared_server(shared_site(catalog_seed, num_products)).url
        self.shop = ShopTransport(url, catalog_seed, num_products, timeout_s)
        super().__init__([self.shop.url], timeout_s)
        from agentgym.envs.web.shop.goals import canonical_split

        try:
            self.default_split = canonical_split(split)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        self.sid: str | None = None
        self.state: dict[str, Any] = {}

    def begin_episode(self, seed, options):
        from agentgym.envs.web.shop.goals import canonical_split

        split = canonical_split(options.get("split", self.default_split))
        index = seed if seed is not None else int(self.np_random.integers(1_000_000_000))
        if self.sid:
            self.shop.end(self.sid)
        self.state = self.shop.new_session(split, index)
        self.sid = self.state["sid"]
        return f"{self.shop.url}/s/{self.sid}/", self.state["instruction"]

    def _observe(self, first: bool = False) -> str:
        # the session id is transport detail: hide it so one seed gives one observation
        return super()._observe(first).replace(f"/s/{self.sid}/", "/s/session/")

    def oracle_action(self) -> str | None:
        """The text-mode oracle's next step, said with this page's element ids."""
        from agentgym.envs.web.shop_env import oracle_step
        from agentgym.envs.web.shop.textview import Clickable, TextView

        snap = getattr(self, "_snapshot", None)
        if self.done or snap is None:
            return None
        target = self.state["target"]
        elements = snapshot_elements(snap.tree)
        for eid, role, name, value in elements:
            if role == "textbox":
                if value != target["title"]:
                    return f"type({eid}, {json.dumps(target['title'])})"
                button = next((e for e in elements if e[1] == "button" and e[2] == "Search"), None)
                return f"click({button[0]})" if button else None
        ids = {name.lower(): eid for eid, role, name, _ in reversed(elements) if role in ("link", "button")}
        view = TextView("", {k: Clickable(k, "GET", "") for k in ids}, None)
        step = oracle_step(view, snap.url, target["asin"],
                           target["options"], target["title"])
        label = step[len("click["):-1].lower() if step.startswith("click[") else None
        return f"click({ids[label]})" if label in ids else None

    def score(self):
        from agentgym.envs.web.shop_env import ShopUnavailable

        try:
            state = self.shop.state(self.sid)
        except ShopUnavailable:    # the server is gone: the episode fails
            return {}, True, False
        if not state.get("done"):
            return {}, False, False
        reward = float(state["reward"])
        return dict(state["components"]), True, reward >= 1.0 - 1e-9

    def task_id(self):
        return self.state.get("goal_id")

    def close(self):
        if self.sid:
            self.shop.end(self.sid)
            self.sid = None
        super().close()
        self.shop.close()
