"""rollout.lookahead's update: the choice update of the looked-ahead turns, each tried action trained toward
the play-outs that returned more (train/updaters/lookahead.py)."""
from __future__ import annotations

from typing import Any

from agentgym.train.learners.choice import ChoicePPO


class LookaheadChoice(ChoicePPO):
    name = "lookahead"

    def update(self, collected: Any, samples: list[Any], iteration: int, metrics: dict[str, Any]) -> bool:
        from agentgym.train.updaters.lookahead import lookahead_step

        metrics.update(lookahead_step(self.c, self.cfg, collected.decisions or [], iteration))
        return False
