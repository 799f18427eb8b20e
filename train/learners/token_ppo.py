"""Token PPO: clipped PPO over the generated tokens, with every option of the algorithm section (IGPO's
information-gain rewards, EPO's entropy regulariser, a GAE critic, async's decoupled PPO)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from agentgym.engine.rollout import next_prompt_ids
from agentgym.train.estimators.advantages import last_rows
from agentgym.train.estimators.targets import build_targets, shape_rewards, with_epo
from agentgym.train.guardrails import moved_tokens, start_distances
from agentgym.train.health import signal_figures
from agentgym.train.learners.base import Learner, LearnerContext, UpdateSections, batch_stats, fresh_tokens
from agentgym.train.updaters.losses import running_entropy
from agentgym.train.updaters.token_ppo import answer_logprobs, ppo_update, score, state_values
from agentgym.trajectory import Trajectory, TurnTable


class TokenPPO(Learner):
    name = "token_ppo"

    def __init__(self, ctx: LearnerContext, sections: UpdateSections):
        super().__init__(ctx, sections)
        self.epo_running: float | None = None  # EPO's running entropy H̄ (starts afresh on resume)

    def update(self, collected: Any, samples: list[Any], iteration: int, metrics: dict[str, Any]) -> bool:
        if not samples:
            return False
        cfg, a = self.cfg, self.cfg.algorithm
        batch = collected.batch
        self.ctx.sleep_engine()
        if a.igpo.coef:  # IGPO: information-gain turn rewards before any estimator reads them
            batch = self._with_info_gain(batch, metrics)
        table = shape_rewards(a, TurnTable.from_trajectories(batch), batch, cfg.rollout.max_new_tokens)  # [R turn rows]
        scored = score(self.c, samples, cfg)  # per sample: old (ref, value) log-probs, [L_i - 1] each
        final = self._final_values(batch, table) if self.c.critic is not None else None  # [R]
        targets = build_targets(a, table, batch, samples, scored, final)  # per sample: advantages [L_i - 1], ...
        if a.regularisers.epo_coef:
            targets = with_epo(targets, table, self.epo_running)
        stats = ppo_update(self.c, samples, scored, targets, cfg, shuffle_seed=cfg.train.seed * 1_000_003 + iteration,
                           dist=self.ctx.dist)
        if stats.epo_micro:  # EPO's H̄ follows the batches' trajectory entropy
            self.epo_running = running_entropy(self.epo_running, stats.epo_entropy / stats.epo_micro,
                                               a.regularisers.epo_momentum)
        metrics.update(stats.as_metrics())
        metrics.update(batch_stats(samples, scored, targets, a.loss.tis_cap,
                                   fresh_tokens(batch, samples, collected.fresh_version)))
        metrics.update(start_distances(samples, scored.old_logprobs, scored.ref_logprobs,  # stale_weights' start
                                       moved_tokens(batch, samples, collected.fresh_version is not None)))
        masks = [s.mask[1:] for s in samples]  # per sample [L_i - 1] bool: action positions (no_signal's figures)
        metrics.update(signal_figures(batch, [s.row[1:][m] for s, m in zip(samples, masks)],
                                      [adv[m] for adv, m in zip(targets.advantages, masks)]))
        return True

    def _with_info_gain(self, batch: list[Trajectory], metrics: dict[str, Any]) -> list[Trajectory]:
        from agentgym.train.estimators.igpo import info_gains, with_info_gain

        c, a, temperature, micro = self.c, self.cfg.algorithm, self.cfg.rollout.temperature, self.cfg.train.micro_batch_size
        gains = info_gains(c.chat, batch, lambda contexts, probe, mask: answer_logprobs(
            c.model, contexts, probe, mask, c.device, c.pad_id, temperature, micro), a.igpo.mode)
        scored = [g[:-1] for g, t in zip(gains, batch) if t.ground_truth and len(g) > 1]  # per episode [turns - 1]
        flat = np.concatenate(scored) if scored else np.zeros(0)                          # [scored turns]
        metrics.update({"igpo/info_gain_mean": float(flat.mean()) if flat.size else 0.0,
                        "igpo/scored_turns": float(flat.size)})
        return with_info_gain(batch, gains, a.igpo.coef)

    def _final_values(self, batch: Sequence[Trajectory], table: TurnTable) -> np.ndarray:
        """Per table row: the critic's value of the state after a trajectory's last turn where the episode
        was cut off (GAE bootstraps there), 0 elsewhere."""
        r, c, final = self.cfg.rollout, self.c, np.zeros(len(table))  # final: [R turn rows]
        assert table.terminated is not None  # the trainer's tables record it
        cut = np.flatnonzero(last_rows(table) & ~table.terminated)  # [K] rows ending a cut-off episode
        prompts = [next_prompt_ids(c.chat, batch[table.traj[i]], r.layout, r.history_turns, c.tools) for i in cut]
        final[cut] = state_values(c, prompts, self.cfg)  # [K] V(s_next) at each prompt's last position
        return final
