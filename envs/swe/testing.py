"""Running a repository's pytest suite in a sandbox and reading which test ids passed."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from agentgym.tools.sandbox import ExecResult, Sandbox

# Third-party plugins of the interpreter stay off: they slow every run and are not the repository's own (those
# from the repository's test requirements are named with -p). A `src/` layout's packages are importable.
SRC_LAYOUT = ('if [ -d src ] && [ ! -e src/__init__.py ]; then '
              'export PYTHONPATH="/workspace/src${PYTHONPATH:+:$PYTHONPATH}"; fi; ')
PYTEST = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -p no:cacheprovider -rA --tb=short -q --color=no"
PYTEST_OUTPUT = 8_000_000  # characters of pytest output kept (the model sees `summarize`'s bounded view)
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S.*?)(?: - .*)?$")
_DURATION = re.compile(r" in \d+(?:\.\d+)?s(?: \(\d+:\d+:\d+\))?")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


@dataclass(frozen=True)
class TestRun:
    """The outcome of one pytest run: status per test id, the cleaned output, how it ended."""

    statuses: dict[str, str]
    output: str
    exec_result: ExecResult

    def passed(self, test_id: str) -> bool:
        return self.statuses.get(test_id) in ("PASSED", "XFAIL")

    def not_broken(self, test_id: str) -> bool:
        """Passed, or skipped by the sandbox it ran in (a tool one back end lacks: humanize's i18n tests skip
        without xgettext in the Docker image); a PASS_TO_PASS test counts as kept when this holds. pytest folds
        skips into one line per location, so a skipped id is absent from a summary that has no collection error."""
        status = self.statuses.get(test_id)
        if status is None:
            return bool(self.statuses) and not self.collection_error and not self.exec_result.timed_out
        return status in ("PASSED", "XFAIL", "SKIPPED")

    @property
    def collection_error(self) -> bool:
        return "ERROR collecting" in self.output or "errors during collection" in self.output


def parse_statuses(output: str) -> dict[str, str]:
    """Test id -> PASSED/FAILED/ERROR/... from pytest's `-rA` short summary."""
    statuses: dict[str, str] = {}
    in_summary = False
    for line in output.splitlines():
        if "short test summary info" in line:
            in_summary = True
            continue
        if not in_summary:
            continue
        match = _OUTCOME.match(line)
        if match and "::" in match.group(2):
            statuses[match.group(2).strip()] = match.group(1)
    return statuses


def clean_output(output: str) -> str:
    """Pytest output without what changes run to run (durations, object addresses)."""
    return _ADDRESS.sub(" at 0x...", _DURATION.sub("", output))


def run_pytest(sandbox: Sandbox, targets: list[str] | tuple[str, ...] = (), timeout_s: float = 120.0,
               extra: str = "", plugins: tuple[str, ...] = ()) -> TestRun:
    """Run pytest on test ids / paths (all tests when empty) inside the sandbox; `plugins`: modules to load."""
    loads = " ".join(f"-p {shlex.quote(p)}" for p in plugins)
    if "pytest_cov.plugin" in plugins:  # installed only so the config's --cov options parse: measure nothing
        loads += " --no-cov"
    command = f"{SRC_LAYOUT}{PYTEST} {loads} {extra} {' '.join(shlex.quote(t) for t in targets)}".strip()
    # a big suite's -rA summary (one line per test; subtests add progress lines) is read whole: ids parse from it
    result = sandbox.exec(command, timeout_s=timeout_s, max_output=PYTEST_OUTPUT)
    output = clean_output(result.output)
    return TestRun(parse_statuses(output), output, result)


def summarize(run: TestRun, limit: int = 6000) -> str:
    """What the model sees of a test run: the failures' short tracebacks and the summary, bounded."""
    text = "\n".join(line for line in run.output.splitlines() if not line.startswith("PASSED "))
    if run.exec_result.timed_out:
        text += "\n[the test run timed out and was killed]"
    if len(text) > limit:
        text = text[: limit // 3] + f"\n[... {len(text) - limit} characters cut ...]\n" + text[-2 * limit // 3:]
    return text.strip() or "[no output]"
