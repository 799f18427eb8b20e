"""The HTML report in headless Chromium: table there, a trajectory expands on click, no console errors."""
import os
import shutil

import pytest

from agentgym.eval.writer import write_all

from test_eval_reports import make_run  # noqa: E402  (same folder; pytest puts it on sys.path)

CHROMIUM = os.environ.get("AGENTGYM_CHROMIUM", "/usr/bin/chromium")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not (os.path.exists(CHROMIUM) or shutil.which("chromium")),
                                 reason="needs Chromium (apt-get install chromium)")]


def test_report_opens_offline_table_trajectory_viewer_and_filters(tmp_path, episodes):
    sync_api = pytest.importorskip("playwright.sync_api")
    page_path = write_all(make_run(tmp_path, episodes))["html"]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run"])
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
