"""A real browser for web envs: Playwright driving Debian's Chromium, one browser per process, a context
per env, accessibility-tree snapshots whose element ids are the actions' targets.

    from agentgym.tools.browser import open_page, parse_browser_action
    page = open_page(allowed_origins=["http://127.0.0.1:8000"])   # requests elsewhere are blocked
    page.goto("http://127.0.0.1:8000/")
    print(page.snapshot().text)          # [12] link "Next >" ...
    page.act(parse_browser_action('click(12)'))
    page.close()

Playwright loads only when a page is opened.
"""
from agentgym.tools.browser.actions import ActionError, BrowserAction, parse_browser_action
from agentgym.tools.browser.axtree import format_ax_tree

__all__ = ["ActionError", "BrowserAction", "format_ax_tree", "open_page", "parse_browser_action"]


def open_page(*args, **kwargs):
    from agentgym.tools.browser.page import BrowserPage

    return BrowserPage(*args, **kwargs)
