"""ScienceWorld's 30 tasks (simulator names, as `ScienceWorldEnv.get_task_names()` lists them), their topic
and the paper's task number. A test checks this list against the installed simulator, so registering the
env ids needs no JVM and no `scienceworld` import. Each id's turn limit comes from its measured gold-path
lengths (agentgym/gold_paths.json, `benchmarks/horizons.py --family ScienceWorld`) by `agentgym.horizon.limit_for`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SWTask:
    name: str          # the simulator's task name, e.g. "boil"
    number: str        # the paper's task id, e.g. "1-1"
    topic: str


TASKS: tuple[SWTask, ...] = (
    SWTask("boil", "1-1", "Matter"),
    SWTask("melt", "1-2", "Matter"),
    SWTask("freeze", "1-3", "Matter"),
    SWTask("change-the-state-of-matter-of", "1-4", "Matter"),
    SWTask("use-thermometer", "2-1", "Measurement"),
    SWTask("measure-melting-point-known-substance", "2-2", "Measurement"),
    SWTask("measure-melting-point-unknown-substance", "2-3", "Measurement"),
    SWTask("power-component", "3-1", "Electricity"),
    SWTask("power-component-renewable-vs-nonrenewable-energy", "3-2", "Electricity"),
    SWTask("test-conductivity", "3-3", "Electricity"),
    SWTask("test-conductivity-of-unknown-substances", "3-4", "Electricity"),
    SWTask("find-living-thing", "4-1", "Classification"),
    SWTask("find-non-living-thing", "4-2", "Classification"),
    SWTask("find-plant", "4-3", "Classification"),
    SWTask("find-animal", "4-4", "Classification"),
    SWTask("grow-plant", "5-1", "Biology"),
    SWTask("grow-fruit", "5-2", "Biology"),
    SWTask("chemistry-mix", "6-1", "Chemistry"),
    SWTask("chemistry-mix-paint-secondary-color", "6-2", "Chemistry"),
    SWTask("chemistry-mix-paint-tertiary-color", "6-3", "Chemistry"),
    SWTask("lifespan-longest-lived", "7-1", "Biology"),
    SWTask("lifespan-shortest-lived", "7-2", "Biology"),
    SWTask("lifespan-longest-lived-then-shortest-lived", "7-3", "Biology"),
    SWTask("identify-life-stages-1", "8-1", "Biology"),
    SWTask("identify-life-stages-2", "8-2", "Biology"),
    SWTask("inclined-plane-determine-angle", "9-1", "Forces"),
    SWTask("inclined-plane-friction-named-surfaces", "9-2", "Forces"),
    SWTask("inclined-plane-friction-unnamed-surfaces", "9-3", "Forces"),
    SWTask("mendelian-genetics-known-plant", "10-1", "Biology"),
    SWTask("mendelian-genetics-unknown-plant", "10-2", "Biology"),
)
TASK_NAMES = tuple(t.name for t in TASKS)
# Pollination in these tasks is random (not fixed by the variation): the gold path generated at load can
# harvest seeds by names a replay does not grow (the oracle skips those steps) and ends with the answer the
# simulator's own experiment reached, which its random crosses can get wrong. Slow pollination stretches the
# experiment to the simulator's own cap of 10 watering cycles a generation: the turn limit covers that worst
# case, not only the lengths measured. Task -> how its outcome is random (agentgym.horizon.declare_random_outcome).
RANDOM_OUTCOME: dict[str, str] = {
    task: "random pollination decides the experiment's crosses; the oracle replays the simulator's gold experiment "
          "(skipping harvests of seeds that did not grow) and gives its answer (see docs/results/oracles.md)"
    for task in ("mendelian-genetics-known-plant", "mendelian-genetics-unknown-plant")
}
# 6 turns to the greenhouse, 3 for the seed jar, 4 to plant two seeds, <= 10 cycles of 12 turns with 20 of closing
# doors and harvesting, 9 to plant four more, <= 10 cycles of 16 turns, 2 to answer: 324
EXPERIMENT_CAP = 330


def env_id(task: str) -> str:
    return f"agentgym/ScienceWorld-{task}-v0"
