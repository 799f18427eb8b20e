"""The choice update of admissible mode: clipped PPO over the renormalised distribution of the env's admissible
actions, one exact ratio per turn (train/updaters/choice_ppo.py), with the warm start's demonstrations replayed
(algorithm.regularisers.expert_coef)."""
from __future__ import annotations

from typing import Any

from agentgym.train.learners.base import Learner, LearnerContext


class ChoicePPO(Learner):
    name = "choice_ppo"

    def __init__(self, ctx: LearnerContext):
        super().__init__(ctx)
        policy = self.c.policy
        if hasattr(policy, "keep_trunk"):  # the rollout keeps the frozen trunk's output for the update
            policy.keep_trunk = getattr(policy, "model", None) is self.c.model  # (policies/rollout_trunk.py)
        self.expert = None
        if self.cfg.algorithm.regularisers.expert_coef:
            from agentgym.train.expert_replay import ExpertReplay

            self.expert = ExpertReplay.from_config(self.cfg, self.c.chat)

    def update(self, collected: Any, samples: list[Any], iteration: int, metrics: dict[str, Any]) -> bool:
        if not samples:
            return False
        from agentgym.train.updaters.choice_ppo import choice_step

        metrics.update(choice_step(self.c, self.cfg, collected.batch, iteration, self.expert))
        return False  # admissible mode scores with the trained module itself: nothing to push
