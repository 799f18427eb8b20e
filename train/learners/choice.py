"""The choice update of admissible mode: clipped PPO over the renormalised distribution of the env's admissible
actions, one exact ratio per turn (train/updaters/choice_ppo.py), with the warm start's demonstrations replayed
(algorithm.regularisers.expert_coef)."""
from __future__ import annotations

from typing import Any

from agentgym.train.learners.base import Learner, LearnerContext, UpdateSections


class ChoicePPO(Learner):
    name = "choice_ppo"

    def __init__(self, ctx: LearnerContext, sections: UpdateSections, expert: Any = None):
        """`expert`: the ExpertReplay each update also steps on (algorithm.regularisers.expert_coef), or None."""
        super().__init__(ctx, sections)
        policy = self.c.policy
        if hasattr(policy, "keep_trunk"):  # the rollout keeps the frozen trunk's output for the update
            policy.keep_trunk = getattr(policy, "model", None) is self.c.model  # (policies/rollout_trunk.py)
        self.expert = expert

    @classmethod
    def from_config(cls, config: Any, ctx: LearnerContext) -> ChoicePPO:
        """With expert_coef, the sft section's demonstrations are played here, once, for the replay."""
        expert = None
        if config.algorithm.regularisers.expert_coef:
            from agentgym.train.expert_replay import ExpertReplay

            expert = ExpertReplay.from_config(config, ctx.c.chat)
        return cls(ctx, UpdateSections.of(config), expert)

    def update(self, collected: Any, samples: list[Any], iteration: int, metrics: dict[str, Any]) -> bool:
        if not samples:
            return False
        from agentgym.train.updaters.choice_ppo import choice_step

        metrics.update(choice_step(self.c, self.cfg, collected.batch, iteration, self.expert))
        return False  # admissible mode scores with the trained module itself: nothing to push
