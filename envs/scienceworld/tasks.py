"""ScienceWorld's 30 tasks (simulator names, as `ScienceWorldEnv.get_task_names()` lists them), their topic
and the paper's task number. A test checks this list against the installed simulator, so registering the
env ids needs no JVM and no `scienceworld` import."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SWTask:
    name: str          # the simulator's task name, e.g. "boil"
    number: str        # the paper's task id, e.g. "1-1"
    topic: str
    max_turns: int     # long enough for the longest gold path we saw, with room to spare (the state-of-matter
    #                    tasks' test variations take up to 174: heating tin on a stove, a reading a turn)


TASKS: tuple[SWTask, ...] = (
    SWTask("boil", "1-1", "Matter", 250),
    SWTask("melt", "1-2", "Matter", 250),
    SWTask("freeze", "1-3", "Matter", 250),
    SWTask("change-the-state-of-matter-of", "1-4", "Matter", 250),
    SWTask("use-thermometer", "2-1", "Measurement", 100),
    SWTask("measure-melting-point-known-substance", "2-2", "Measurement", 120),
    SWTask("measure-melting-point-unknown-substance", "2-3", "Measurement", 120),
    SWTask("power-component", "3-1", "Electricity", 100),
    SWTask("power-component-renewable-vs-nonrenewable-energy", "3-2", "Electricity", 100),
    SWTask("test-conductivity", "3-3", "Electricity", 100),
    SWTask("test-conductivity-of-unknown-substances", "3-4", "Electricity", 100),
    SWTask("find-living-thing", "4-1", "Classification", 100),
    SWTask("find-non-living-thing", "4-2", "Classification", 100),
    SWTask("find-plant", "4-3", "Classification", 100),
    SWTask("find-animal", "4-4", "Classification", 100),
    SWTask("grow-plant", "5-1", "Biology", 150),
    SWTask("grow-fruit", "5-2", "Biology", 150),
    SWTask("chemistry-mix", "6-1", "Chemistry", 100),
    SWTask("chemistry-mix-paint-secondary-color", "6-2", "Chemistry", 100),
    SWTask("chemistry-mix-paint-tertiary-color", "6-3", "Chemistry", 100),
    SWTask("lifespan-longest-lived", "7-1", "Biology", 100),
    SWTask("lifespan-shortest-lived", "7-2", "Biology", 100),
    SWTask("lifespan-longest-lived-then-shortest-lived", "7-3", "Biology", 100),
    SWTask("identify-life-stages-1", "8-1", "Biology", 100),
    SWTask("identify-life-stages-2", "8-2", "Biology", 100),
    SWTask("inclined-plane-determine-angle", "9-1", "Forces", 120),
    SWTask("inclined-plane-friction-named-surfaces", "9-2", "Forces", 250),
    SWTask("inclined-plane-friction-unnamed-surfaces", "9-3", "Forces", 250),
    SWTask("mendelian-genetics-known-plant", "10-1", "Biology", 200),
    SWTask("mendelian-genetics-unknown-plant", "10-2", "Biology", 200),
)
TASK_NAMES = tuple(t.name for t in TASKS)
# Pollination in these tasks is random (not fixed by the variation), so the gold path generated at load
# names seeds and plants that a replay need not produce ("Unknown action" mid-path): no oracle for them.
NO_REPLAYABLE_GOLD_PATH = frozenset({"mendelian-genetics-known-plant", "mendelian-genetics-unknown-plant"})


def env_id(task: str) -> str:
    return f"agentgym/ScienceWorld-{task}-v0"
