"""One Chromium per process, driven from one thread.

Playwright's sync API binds its objects to the thread that started it, while envs are stepped from any
thread (vector envs, env pools). So a daemon thread owns Playwright and the browser, and every browser
operation is a function run on that thread (`BrowserRuntime.call`). Pages are reference-counted: the
browser closes with the last page, so nothing outlives `close()`; if the parent is killed, Playwright's
driver sees its pipe close and kills the browser it launched.
"""
from __future__ import annotations

import os
import queue
import shutil
import threading
from concurrent.futures import Future
from typing import Any, Callable

from agentgym.errors import AgentGymError, require

CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-dev-shm-usage")


class BrowserError(AgentGymError):
    """The browser failed: it is missing, crashed, or an operation on it timed out."""


def chromium_path() -> str:
    path = os.environ.get("AGENTGYM_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        raise BrowserError(f"Chromium not found at {path}; install it (apt-get install chromium) or set "
                           "AGENTGYM_CHROMIUM to its path")
    return path


class BrowserRuntime:
    def __init__(self, executable: str | None = None, launch_timeout_s: float = 60.0):
        require("playwright.sync_api", "web")
        self.executable = executable or chromium_path()
        self._queue: queue.Queue = queue.Queue()
        self._ready: Future = Future()
        self.users = 0
        self.thread = threading.Thread(target=self._run, name="agentgym-browser", daemon=True)
        self.thread.start()
        try:
            self._ready.result(timeout=launch_timeout_s)
        except Exception as exc:
            self._queue.put(None)
            raise BrowserError(f"could not start Chromium ({self.executable}): {exc}") from exc

    def _run(self) -> None:
        from playwright.sync_api import sync_playwright

        try:
            self.playwright = sync_playwright().start()
            self.browser = self.playwright.chromium.launch(executable_path=self.executable, headless=True,
                                                           args=list(CHROMIUM_ARGS))
        except BaseException as exc:  # noqa: BLE001  reported to the starting thread
            self._ready.set_exception(exc)
            try:
                self.playwright.stop()
            except Exception:
                pass
            return
        self._ready.set_result(True)
        while True:
            item = self._queue.get()
            if item is None:
                break
            fn, future = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # noqa: BLE001  handed to the caller
                    future.set_exception(exc)
        for closer in (self.browser.close, self.playwright.stop):
            try:
                closer()
            except Exception:
                pass

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and self.call(lambda: self.browser.is_connected(), 10)

    def call(self, fn: Callable[[], Any], timeout_s: float = 60.0) -> Any:
        """Run `fn` on the browser thread and return its result (or raise its exception)."""
        if not self.thread.is_alive():
            raise BrowserError("the browser thread has stopped")
        future: Future = Future()
        self._queue.put((fn, future))
        try:
            return future.result(timeout=timeout_s)
        except TimeoutError as exc:
            raise BrowserError(f"browser operation timed out after {timeout_s:.0f}s") from exc

    def stop(self) -> None:
        self._queue.put(None)
        self.thread.join(timeout=30)


_RUNTIME: BrowserRuntime | None = None
_LOCK = threading.Lock()


def acquire_runtime() -> BrowserRuntime:
    """The process's browser (started on first use, restarted if it died), with one more user."""
    global _RUNTIME
    with _LOCK:
        if _RUNTIME is not None and not _RUNTIME.alive:
            _RUNTIME.stop()
            _RUNTIME = None
        if _RUNTIME is None:
            _RUNTIME = BrowserRuntime()
        _RUNTIME.users += 1
        return _RUNTIME


def release_runtime(runtime: BrowserRuntime) -> None:
    """One user fewer; the last one closes the browser and its driver."""
    global _RUNTIME
    with _LOCK:
        runtime.users -= 1
        if runtime.users <= 0:
            runtime.stop()
            if _RUNTIME is runtime:
                _RUNTIME = None
