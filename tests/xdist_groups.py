"""How pytest-xdist hands test files to its workers (the README's test command: `-n 2 --dist loadgroup`; the
hook in tests/conftest.py applies it).

Every test file is one unit of work, so a module's fixtures (an engine, a JVM, a browser) start once. The files
that start vLLM engines are one unit, run one after another on one worker: with a file to each worker, two
engines starting side by side on 2 cores took a worker down. That unit goes first and the files with slow tests
next, so the two workers finish at about the same time. The files that start Ray are one unit too: the cluster
test's `ray stop --force` ends every Ray on the machine, another worker's session included.
"""
from __future__ import annotations

VLLM_GROUP = "vllm"
SHARED = ("vllm", "ray")   # markers whose files share one machine-wide resource: one group each


def schedule_groups(modules: list[tuple[str, set[str]]]) -> list[tuple[str, str]]:
    """[(module, its tests' marker names)] in collection order -> [(module, group)] in the order to hand out:
    the vLLM modules first, then modules with a slow test, then the rest, each in collection order; the modules
    of each SHARED marker form one group named after it."""
    def rank(marks: set[str]) -> int:
        return 0 if "vllm" in marks else 1 if "slow" in marks else 2

    def group(module: str, marks: set[str]) -> str:
        return next((name for name in SHARED if name in marks), module)

    ordered = sorted(modules, key=lambda m: rank(m[1]))   # stable: collection order within a rank
    return [(module, group(module, marks)) for module, marks in ordered]
