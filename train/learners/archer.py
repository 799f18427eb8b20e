"""ArCHer: an off-policy Q/V critic over turns, learnt from a replay buffer (its state: critic, target copy,
optimizer, buffer, rng), and the token actor trained with its turn advantages (train/updaters/archer.py)."""
from __future__ import annotations

from typing import Any

from agentgym.engine.rollout import next_prompt_ids
from agentgym.train.estimators.targets import shape_rewards
from agentgym.train.learners.base import Learner, LearnerContext, UpdateSections, batch_stats
from agentgym.trajectory import TurnTable


class ArcherActorCritic(Learner):
    name = "archer"

    def __init__(self, ctx: LearnerContext, sections: UpdateSections, critic_model: str = ""):
        """`critic_model`: model.critic_model, a local HF dir the critic's backbone loads ("": a copy of the
        policy's)."""
        from agentgym.train.updaters.archer import ArcherLearner

        super().__init__(ctx, sections)
        cfg, o, c = self.cfg, self.cfg.optim, self.c
        self.archer = ArcherLearner(cfg.algorithm.archer, cfg.algorithm.gamma, c.model, c.device, c.pad_id,
                                    lr=o.critic_lr, max_grad_norm=o.critic_max_grad_norm or o.max_grad_norm,
                                    critic_model=critic_model, seed=cfg.train.seed)

    @classmethod
    def from_config(cls, config: Any, ctx: LearnerContext) -> ArcherActorCritic:
        return cls(ctx, UpdateSections.of(config), config.model.critic_model)

    def update(self, collected: Any, samples: list[Any], iteration: int, metrics: dict[str, Any]) -> bool:
        if not samples:
            return False
        from agentgym.train.updaters.archer import archer_step

        cfg, r, c, batch = self.cfg, self.cfg.rollout, self.c, collected.batch
        self.ctx.sleep_engine()
        table = shape_rewards(cfg.algorithm, TurnTable.from_trajectories(batch), batch, r.max_new_tokens)
        updated, more = archer_step(self.archer, c, cfg, batch, samples, table, iteration,
                                    lambda t: next_prompt_ids(c.chat, t, r.layout, r.history_turns, c.tools))
        metrics.update(more)
        if updated is None:  # critic warm-up: the policy is unchanged, nothing to push
            return False
        stats, scored, targets = updated
        metrics.update(stats.as_metrics())
        metrics.update(batch_stats(samples, scored, targets, cfg.algorithm.loss.tis_cap))
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"archer": self.archer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("archer") is not None:
            self.archer.load_state_dict(state["archer"])
