"""Web envs: a generated WebShop-style shop served for real, in text mode and in a real browser; any local
site in the browser; MiniWoB++ tasks from the `miniwob` package in the same browser mode.

    agentgym/WebShop-v0          text mode (search[...] / click[...]), in-process or over HTTP (url=...)
    agentgym/WebShop-Browser-v0  Chromium via Playwright, accessibility-tree observations with element ids
    agentgym/Web-v0              the browser mode on any local URL with a task text and a checker
    agentgym/MiniWoB-<task>-v0   every MiniWoB++ task the `miniwob` package ships (suite `miniwob`)
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from agentgym.horizon import ContextDefaults, turn_limit
from agentgym.registration import SuiteEntry, register, register_suite

SHOP_TEXT = "agentgym.envs.web.shop_env:WebShopEnv"
SHOP_BROWSER = "agentgym.envs.web.browser_envs:WebShopBrowserEnv"
WEB = "agentgym.envs.web.browser_envs:WebEnv"
MINIWOB = "agentgym.envs.web.miniwob:MiniWoBEnv"
SHOP_TURNS = 15          # WebShop's usual budget, above the text shop's gold-path limit (agentgym/gold_paths.json)
MINIWOB_TURNS = 12
# pages are ~1,000 tokens a turn (bytes): 15-30 turns outgrow 16k, so the browser envs fold
SHOP_CONTEXT = ContextDefaults(layout="trajectory", max_context_tokens=16384, max_observation_tokens=4096)
BROWSER_CONTEXT = ContextDefaults(layout="fold", max_context_tokens=16384, max_observation_tokens=4096)


def miniwob_html_dir() -> Path | None:
    """The `miniwob` package's html/ folder, found without importing it (its __init__ pulls gymnasium envs)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        return None
    html = Path(list(spec.submodule_search_locations)[0]) / "html"
    return html if (html / "miniwob").is_dir() else None


def miniwob_tasks() -> list[str]:
    html = miniwob_html_dir()
    return sorted(p.stem for p in (html / "miniwob").glob("*.html")) if html else []


def register_envs() -> None:
    register("agentgym/WebShop-v0", SHOP_TEXT, max_turns=turn_limit("agentgym/WebShop-v0", SHOP_TURNS, "WebShop's budget"),
             context=SHOP_CONTEXT)
    register("agentgym/WebShop-Browser-v0", SHOP_BROWSER, context=BROWSER_CONTEXT, max_turns=turn_limit(
        "agentgym/WebShop-Browser-v0", SHOP_TURNS * 2, "WebShop's budget, two browser actions a text one"))
    register("agentgym/Web-v0", WEB, max_turns=20, context=BROWSER_CONTEXT)
    register_suite("web", [SuiteEntry("agentgym/WebShop-v0", {"split": "test"}, label="webshop-text"),
                           SuiteEntry("agentgym/WebShop-Browser-v0", {"split": "test"}, label="webshop-browser")],
                   extend=True)
    for task in miniwob_tasks():
        register(f"agentgym/MiniWoB-{task}-v0", MINIWOB, max_turns=MINIWOB_TURNS, kwargs={"task": task},
                 suites=("miniwob",), context=BROWSER_CONTEXT)
