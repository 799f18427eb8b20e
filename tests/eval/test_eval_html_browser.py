"""The HTML report in headless Chromium: table there, a trajectory expands on click, no console errors, and
the tables fit a 1400 px window (screenshots go to $AGENTGYM_SCREENSHOTS when set, to look at them)."""
import os
import shutil
from pathlib import Path

import pytest

import agentgym
from agentgym.eval.runner import EvalConfig, run_eval
from agentgym.eval.suites import resolve_envs
from agentgym.eval.writer import write_all, write_comparison

from test_eval_reports import make_run  # noqa: E402  (same folder; pytest puts it on sys.path)

CHROMIUM = os.environ.get("AGENTGYM_CHROMIUM", "/usr/bin/chromium")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not (os.path.exists(CHROMIUM) or shutil.which("chromium")),
                                 reason="needs Chromium (apt-get install chromium)")]


def launch(pw):
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"])


def test_report_opens_offline_table_trajectory_viewer_and_filters(tmp_path, episodes):
    sync_api = pytest.importorskip("playwright.sync_api")
    page_path = write_all(make_run(tmp_path, episodes))["html"]
    with sync_api.sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page()
            problems, requests = [], []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(f"file://{page_path}")

            rows = page.locator("#metrics tbody tr")
            assert rows.count() == 3  # two envs + the suite total
            assert "agentgym/Toy-KeyDoor-v0" in rows.nth(0).inner_text()
            assert page.locator("#metrics th").first.inner_text() == "env"

            first = page.locator("details.traj").first
            assert first.get_attribute("open") is None
            assert not first.locator(".turn").first.is_visible()
            first.locator("summary").click()
            assert first.get_attribute("open") is not None
            turn = first.locator(".turn").nth(1)  # after the system prompt block
            text = turn.inner_text().lower()  # labels are uppercased by CSS
            assert turn.is_visible() and "observation" in text and "action" in text
            assert "You are in room" in turn.inner_text()

            # a hostile model's text is shown as text, never run
            page.select_option("#f-env", "calc")
            page.click("#f-open")
            assert page.evaluate("window.__pwned") is None
            assert "<script>window.__pwned = 1</script>" in page.locator("details.traj[data-env=calc]").first.inner_text()
            assert page.locator("details.traj[data-env=calc]").first.locator(".label", has_text="tool results").first.is_visible()
            page.select_option("#f-out", "success")
            assert page.locator("#f-count").inner_text() == "0 shown"
            page.select_option("#f-env", "*")
            assert page.locator("#f-count").inner_text() == "4 shown"

            assert problems == []
            assert all(u.startswith("file://") for u in requests), requests
        finally:
            browser.close()


WIDTH = 1400  # a laptop browser window


def horizontal_overflow(page) -> list[str]:
    """Elements wider than what shows them: the page itself, and any table's scroll box."""
    return page.evaluate("""() => {
      const bad = [];
      const root = document.documentElement;
      if (root.scrollWidth > root.clientWidth) bad.push(`page ${root.scrollWidth} > ${root.clientWidth}`);
      document.querySelectorAll('.scroll').forEach((box, i) => {
        if (box.scrollWidth > box.clientWidth) bad.push(`table ${i} ${box.scrollWidth} > ${box.clientWidth}`);
      });
      return bad;
    }""")


def test_tables_fit_a_1400px_window_without_scrolling_sideways(tmp_path):
    """The widest tables we make: the household suite's long ids, the toy envs' tool calls, 4 samples
    (pass@k @1/@2/@4), in the eval report and the comparison page, with the detail columns shown too."""
    sync_api = pytest.importorskip("playwright.sync_api")
    _, toy = resolve_envs(suite_name="toy")
    entries = list(toy)
    if "household" in agentgym.list_suites():
        entries += resolve_envs(suite_name="household")[1]
    runs = []
    for name in ("before", "after"):
        config = EvalConfig(policy="oracle", entries=tuple(entries), out_dir=str(tmp_path / name), suite="custom",
                            episodes=1, samples=4, temperature=1.0, workers=4)
        runs.append(run_eval(config, progress=False))
    compare = write_comparison([r.config.out_dir for r in runs], tmp_path / "cmp", ["base", "trained"])["html"]
    shots = Path(os.environ.get("AGENTGYM_SCREENSHOTS", tmp_path))
    with sync_api.sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.goto(f"file://{runs[0].paths['html']}")
            tokens = page.locator("#metrics th", has_text="mean tokens")
            assert page.locator("#metrics th", has_text="pass@k").is_visible() and not tokens.is_visible()
            assert horizontal_overflow(page) == []
            page.screenshot(path=str(shots / "report-1400.png"))
            page.check("#all-columns")  # the detail columns, on request
            assert tokens.is_visible() and horizontal_overflow(page) == []
            page.screenshot(path=str(shots / "report-1400-all-columns.png"))
            page.goto(f"file://{compare}")
            for toggle in page.locator(".cols input").all():
                toggle.check()
            assert horizontal_overflow(page) == []
            page.screenshot(path=str(shots / "compare-1400.png"), full_page=True)
            page.set_viewport_size({"width": 700, "height": 900})  # too narrow: the table box scrolls, not the page
            assert [p for p in horizontal_overflow(page) if p.startswith("page")] == []
        finally:
            browser.close()
