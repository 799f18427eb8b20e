"""MiniWoB++ tasks (`agentgym/MiniWoB-<task>-v0`) from the `miniwob` package's own HTML, in the browser mode.

The page is loaded from the installed package (file://, no Selenium, no server). Each episode seeds the
page's RNG (`Math.seedrandom`), starts the task with its own `core.startEpisodeReal()`, and reads the
utterance and reward from the page's JavaScript (`core.getUtterance()`, `WOB_DONE_GLOBAL`,
`WOB_RAW_REWARD_GLOBAL`). The task's 10-second timer is lifted: an LLM's turn takes longer than that.
Observations are the page's accessibility tree without MiniWoB's reward display, the utterance first. The reward is the
page's raw reward (1 solved, <= 0 failed); success is a positive reward.

Time is virtual (Playwright's fake clock, paused): every episode's page starts at the same instant, its
timers run only as the env advances them (until the task is ready, then `STEP_MS` after the start and after
each action), so a time-driven task (stock-market's ticking price) shows the same thing under the same seed
and actions, whatever the machine's load.
"""
from __future__ import annotations

import datetime
from typing import Any

from agentgym.envs.web.browser_envs import BrowserEnv
from agentgym.errors import ConfigError, MissingDependencyError

NO_TIMER_MS = 2_000_000_000   # under setTimeout's 2**31-1 ms limit, ~23 days
EPOCH = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)   # every episode's page starts here
STEP_MS = 1_000               # virtual time after the start and after each action


class MiniWoBEnv(BrowserEnv):
    # the whole body (dialogs and menus attach there), minus MiniWoB's own chrome and the utterance
    exclude_selectors = ("#reward-display", "#sync-task-cover", "#click-canvas", "#query")

    def __init__(self, task: str = "click-button", timeout_s: float = 15.0, data_mode: str = "train"):
        from agentgym.envs.web import miniwob_html_dir, miniwob_tasks

        html = miniwob_html_dir()
        if html is None:
            raise MissingDependencyError("MiniWoB++ tasks need the miniwob package: pip install 'agentgym[web]'")
        if task not in miniwob_tasks():
            raise ConfigError(f"no MiniWoB++ task {task!r}; `agentgym list MiniWoB` shows them all")
        super().__init__([f"file://{html}/"], timeout_s)
        self.task_name, self.data_mode = task, data_mode
        self.url = (html / "miniwob" / f"{task}.html").as_uri()
        self.loaded = False
        self.seed_used = 0

    def begin_episode(self, seed: int | None, options: dict[str, Any]) -> tuple[str, str]:
        self.seed_used = seed if seed is not None else int(self.np_random.integers(1_000_000_000))
        return self.url, ""

    def _ensure_page(self):
        page = super()._ensure_page()
        if not page.virtual_time:  # once per page: the clock persists across loads
            page.clock("install", time=EPOCH)
            # the installed clock flows until paused: pause well ahead of it (EPOCH itself may be past by
            # now, "Cannot fast-forward to the past"); set_system_time below moves it back to EPOCH
            page.clock("pause_at", EPOCH + datetime.timedelta(days=1))
            page.virtual_time = True
        page.clock("set_system_time", EPOCH)  # this episode's page loads at the same instant as every other
        return page

    def after_load(self) -> None:
        # the page is reloaded each episode: a task may keep state between episodes otherwise
        self.page.evaluate("([seed, mode, ms]) => { core.EPISODE_MAX_TIME = ms; Math.seedrandom(seed); "
                           "core.setDataMode(mode); core.startEpisodeReal(); }",
                           [str(self.seed_used), self.data_mode, NO_TIMER_MS])
        page = self._open_page()
        for _ in range(100):    # some tasks build their problem asynchronously, on timers
            if page.evaluate("() => WOB_TASK_READY"):
                break
            page.clock("run_for", 20)
        page.clock("run_for", STEP_MS)
        self.task = str(page.evaluate("() => core.getUtterance()"))

    def after_action(self) -> None:
        self._open_page().clock("run_for", STEP_MS)

    def _open_page(self) -> Any:
        if self.page is None:
            raise RuntimeError("call reset() before step()")
        return self.page

    def score(self) -> tuple[dict[str, float], bool, bool]:
        done, raw = self.page.evaluate("() => [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL]")
        if not done:
            return {}, False, False
        return {"task": float(raw)}, True, float(raw) > 0

    def task_id(self) -> str:
        return f"{self.task_name}-{self.seed_used}"
