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
import signal
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
        self.wedged = False       # an operation never returned (a hung renderer): the thread is lost
        self.driver_pids: set[int] = set()
        self.thread = threading.Thread(target=self._run, name="agentgym-browser", daemon=True)
        self.thread.start()
        try:
            self._ready.result(timeout=launch_timeout_s)
        except Exception as exc:
            self._queue.put(None)
            raise BrowserError(f"could not start Chromium ({self.executable}): {exc}") from exc

    def _run(self) -> None:
        from playwright.sync_api import sync_playwright

        before = child_pids(os.getpid())
        try:
            self.playwright = sync_playwright().start()
            self.driver_pids = child_pids(os.getpid()) - before   # Playwright's node driver
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
        if self.wedged or not self.thread.is_alive():
            return False
        try:
            return self.call(lambda: self.browser.is_connected(), 10)
        except BrowserError:
            return False

    def call(self, fn: Callable[[], Any], timeout_s: float = 60.0) -> Any:
        """Run `fn` on the browser thread and return its result (or raise its exception)."""
        if not self.thread.is_alive():
            raise BrowserError("the browser thread has stopped")
        future: Future = Future()
        self._queue.put((fn, future))
        try:
            return future.result(timeout=timeout_s)
        except TimeoutError as exc:
            if not future.cancel():    # it is running and stuck: nothing else can use this thread now
                self.wedged = True
            raise BrowserError(f"browser operation timed out after {timeout_s:.0f}s") from exc

    def stop(self) -> None:
        if self.wedged:
            self.kill()
            return
        self._queue.put(None)
        self.thread.join(timeout=30)
        if self.thread.is_alive():
            self.kill()

    def kill(self) -> None:
        """End the driver and every browser process under it (when the browser thread is stuck)."""
        for pid in {p for d in self.driver_pids for p in descendant_pids(d)} | self.driver_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _parents() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    out[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


def child_pids(pid: int) -> set[int]:
    return {child for child, parent in _parents().items() if parent == pid}


def descendant_pids(pid: int) -> set[int]:
    parents = _parents()
    out, todo = set(), [pid]
    while todo:
        current = todo.pop()
        for child, parent in parents.items():
            if parent == current and child not in out:
                out.add(child)
                todo.append(child)
    return out


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
