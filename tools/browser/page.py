"""BrowserPage: a browser context and page of the process's Chromium, for one env.

Requests outside `allowed_origins` are aborted (and counted in `blocked`), service workers are off, and
every operation has a time limit. Element ids are those of the last snapshot (1, 2, 3... in page order,
mapped to Chrome's backendDOMNodeIds); an action marks its element with a one-off attribute and acts through a Playwright locator, which waits for
the element to be actionable and for any navigation the action starts.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import urlsplit

from agentgym.tools.browser.actions import ActionError, BrowserAction
from agentgym.tools.browser.axtree import format_ax_tree
from agentgym.tools.browser.runtime import BrowserError, acquire_runtime, release_runtime

ALWAYS_ALLOWED = ("data:", "about:", "blob:")


@dataclass(frozen=True)
class Snapshot:
    url: str
    title: str
    tree: str
    ids: dict[int, int]     # id shown -> Chrome's backendDOMNodeId

    @property
    def text(self) -> str:
        return f"URL: {self.url}\nTitle: {self.title}\n{self.tree}"


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme not in ("file",) else url


class BrowserPage:
    def __init__(self, allowed_origins: Sequence[str] = (), timeout_s: float = 15.0, viewport=(1024, 768)):
        self.allowed = tuple(allowed_origins)
        self.timeout_s = timeout_s
        self.blocked: list[str] = []
        self.crashed = False
        self.snapshot_ids: dict[int, int] = {}
        self.virtual_time = False   # the page's clock is Playwright's fake one, moved by the env (MiniWoB)
        self.runtime = acquire_runtime()
        self.closed = False
        try:
            self._call(lambda: self._open(viewport))
        except BaseException:
            release_runtime(self.runtime)
            self.closed = True
            raise

    # runs on the browser thread
    def _open(self, viewport) -> None:
        self.context = self.runtime.browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                                        service_workers="block", accept_downloads=False)
        self.context.set_default_timeout(self.timeout_s * 1000)
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("crash", lambda _: setattr(self, "crashed", True))
        self.page.on("dialog", lambda d: d.dismiss())   # alert()/confirm() must not hang the env
        self.cdp = self.context.new_cdp_session(self.page)

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith(ALWAYS_ALLOWED) or any(url.startswith(a) for a in self.allowed):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort("blockedbyclient")

    def _call(self, fn, extra_s: float = 15.0) -> Any:
        if self.closed:
            raise BrowserError("this browser page is closed")
        if self.crashed:   # a crashed page answers no CDP call: never send one
            raise BrowserError("the page crashed")
        try:
            return self.runtime.call(fn, self.timeout_s + extra_s)
        except BrowserError:
            raise
        except ActionError:
            raise
        except Exception as exc:  # Playwright's errors: timeouts, closed targets, crashes
            if self.crashed or "crash" in str(exc).lower() or "closed" in str(exc).lower():
                self.crashed = True
            raise BrowserError(str(exc).splitlines()[0][:300]) from exc

    # ------------------------------------------------------------------ public
    def goto(self, url: str) -> None:
        self._call(lambda: self.page.goto(url, wait_until="load"))

    def evaluate(self, expression: str, arg: Any = None) -> Any:
        return self._call(lambda: self.page.evaluate(expression, arg))

    @property
    def url(self) -> str:
        return self._call(lambda: self.page.url)

    def clock(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        """Playwright's fake clock of this page (install, pause_at, run_for, set_system_time): with it
        installed and paused, a page's timers and Date move only when told, so a time-driven page shows
        the same thing after the same actions whatever the machine's load."""
        return self._call(lambda: getattr(self.page.clock, operation)(*args, **kwargs))

    def _backend_id(self, selector: str) -> int | None:
        handle = self.cdp.send("Runtime.evaluate", {"expression": f"document.querySelector({json.dumps(selector)})"})
        object_id = handle.get("result", {}).get("objectId")
        if not object_id:
            return None
        return self.cdp.send("DOM.describeNode", {"objectId": object_id})["node"]["backendNodeId"]

    def snapshot(self, root_selector: str | None = None, max_chars: int = 12_000,
                 exclude_selectors: Sequence[str] = ()) -> Snapshot:
        def take() -> Snapshot:
            root = self._backend_id(root_selector) if root_selector else None
            excluded = frozenset(i for i in map(self._backend_id, exclude_selectors) if i is not None)
            nodes = self.cdp.send("Accessibility.getFullAXTree")["nodes"]
            tree, ids = format_ax_tree(nodes, root, max_chars, excluded)
            return Snapshot(self.page.url, self.page.title(), tree, ids)
        snap = self._call(take)
        self.snapshot_ids = snap.ids
        return snap

    def act(self, action: BrowserAction) -> None:
        """Do one action; ActionError for an unknown id, BrowserError when the browser fails."""
        if action.verb in ("click", "type", "select") and action.element not in self.snapshot_ids:
            raise ActionError(f"there is no element [{action.element}] on the page; use an id shown in brackets")
        self._call(lambda: self._act(action))

    def _act(self, action: BrowserAction) -> None:
        page = self.page
        if action.verb == "back":
            page.go_back(wait_until="load")
            return
        if action.verb == "scroll":
            page.mouse.wheel(0, (1 if action.text == "down" else -1) * 600)
            if not self.virtual_time:   # a paused fake clock runs no frame until the env advances it
                page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
            return
        locator = self._mark(self.snapshot_ids[action.element])
        if action.verb == "click":
            locator.click()
        elif action.verb == "type":
            tag = locator.evaluate("e => e.tagName.toLowerCase() + ':' + (e.isContentEditable || false)")
            if not (tag.startswith(("input", "textarea")) or tag.endswith("true")):
                raise ActionError(f"element [{action.element}] is not a text field; type into a textbox")
            locator.fill(action.text)
        elif action.verb == "select":
            if locator.evaluate("e => e.tagName.toLowerCase()") != "select":
                raise ActionError(f"element [{action.element}] is not a drop-down (combobox); click it instead")
            labels = locator.evaluate("e => Array.from(e.options).map(o => [o.label, o.value])")
            match = [v for label, v in labels if action.text.strip().lower() in (label.lower(), v.lower())]
            if not match:
                raise ActionError(f"[{action.element}] has no option {action.text[:60]!r}; options: "
                                  + ", ".join(label for label, _ in labels[:20]))
            locator.select_option(value=match[0])
        try:   # let the page settle: a click may have started a navigation
            page.wait_for_load_state("load", timeout=self.timeout_s * 1000)
        except Exception:
            pass

    def _mark(self, backend_id: int):
        token = secrets.token_hex(6)
        try:
            resolved = self.cdp.send("DOM.resolveNode", {"backendNodeId": int(backend_id)})
        except Exception:
            raise ActionError(f"element [{backend_id}] is gone from the page; look at the new page") from None
        self.cdp.send("Runtime.callFunctionOn", {
            "objectId": resolved["object"]["objectId"],
            "functionDeclaration": "function(t) { (this.nodeType === 1 ? this : this.parentElement)"
                                   ".setAttribute('data-agentgym-target', t); }",
            "arguments": [{"value": token}]})
        return self.page.locator(f"[data-agentgym-target='{token}']").first

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.runtime.wedged:
            try:
                self.runtime.call(lambda: self.context.close(), 30)
            except Exception:   # a crashed browser has nothing left to close
                pass
        release_runtime(self.runtime)
