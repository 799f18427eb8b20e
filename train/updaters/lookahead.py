"""The choice update of a lookahead batch (agentgym/engine/lookahead.py): at each looked-ahead turn of a greedy play,
the actions tried there are trained toward those whose greedy play-outs returned more.

A decision's play-outs all act first from one restored state: an exact GiGPO step group, whose step advantage
(the discounted returns from that turn, normalised within the group) is each tried action's advantage. The update is the exact choice PPO of train/updaters/choice_ppo.py over one row per decision: its
conversation up to the turn, then the turn's candidate tree once for each tried action.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from agentgym.engine.lookahead import Decision
from agentgym.train.batch import Components, TrainConfig
from agentgym.train.estimators.advantages import group_normalize, scale_negatives
from agentgym.train.updaters.choice_ppo import ChoiceSequence, ChoiceTurn, choice_update
from agentgym.trajectory import Trajectory


def play_return(play: Trajectory, turn: int, gamma: float, invalid_penalty: float = 0.0) -> float:
    """Σ_j γ^j r_{turn+j}: what `play` earned from `turn` on, discounted (an inadmissible action's reward less
    `invalid_penalty`, as the estimators shape it)."""
    return float(sum((t.reward - invalid_penalty * (not t.valid)) * gamma ** j
                     for j, t in enumerate(play.turns[turn:])))


def decision_advantages(config: TrainConfig, decisions: Sequence[Decision]) -> list[np.ndarray]:
    """Per decision, each tried action's advantage (greedy pick first): GiGPO's step advantage on the exact step
    group the decision is, i.e. the play-outs' discounted returns from the turn normalised among themselves
    (algorithm.norm), negatives scaled by algorithm.negative_scale. Only the decision's own play-outs are compared:
    a later turn that meets the same observation again (a loop) is another state of the episode, not this one."""
    a = config.algorithm
    penalty = a.shaping.invalid_penalty if a.shaping.invalid_penalty_mode == "reward" else 0.0
    returns = [play_return(p, d.turn, a.gamma, penalty) for d in decisions for p in d.plays]
    key = np.repeat(np.arange(len(decisions)), [len(d.plays) for d in decisions])
    adv = scale_negatives(group_normalize(np.asarray(returns), key, a.norm), a.negative_scale)
    return np.split(adv, np.cumsum([len(d.plays) for d in decisions])[:-1]) if decisions else []


def lookahead_sequences(decisions: Sequence[Decision], advantages: Sequence[np.ndarray]
                        ) -> tuple[list[ChoiceSequence], np.ndarray]:
    """One choice row per decision (its conversation up to the turn, then one turn per tried action: the same
    candidates, each choosing its action) and the advantages indexed by the turns' rows."""
    seqs: list[ChoiceSequence] = []
    values: list[float] = []
    for i, (d, adv) in enumerate(zip(decisions, advantages)):
        turn = d.trunk.turns[d.turn]
        assert turn.choice is not None  # lookahead only branches at turns with a choice
        ids = tuple(turn.prompt_ids)
        seqs.append(ChoiceSequence(ids, tuple(ChoiceTurn(len(values) + m, len(ids), turn.choice.candidates, pick, i)
                                              for m, pick in enumerate(d.picks))))
        values += [float(a) for a in adv]
    return seqs, np.asarray(values, dtype=np.float64)


def lookahead_step(c: Components, config: TrainConfig, decisions: Sequence[Decision], iteration: int
                   ) -> dict[str, Any]:
    """One iteration's update from a lookahead batch, and what the lookahead found: the share of decisions where
    an alternative returned more than the greedy action, and the mean of that best margin."""
    if not decisions:
        return {"lookahead/decisions": 0.0}
    returns = [[play_return(p, d.turn, config.algorithm.gamma) for p in d.plays] for d in decisions]
    margins = [max(r[1:]) - r[0] for r in returns]
    seqs, adv = lookahead_sequences(decisions, decision_advantages(config, decisions))
    stats = choice_update(c, seqs, adv, config, shuffle_seed=config.train.seed * 1_000_003 + iteration)
    return {**stats.as_metrics(), "lookahead/decisions": float(len(decisions)),
            "lookahead/playouts": float(sum(len(d.plays) - 1 for d in decisions)),
            "lookahead/greedy_beaten_share": float(np.mean([m > 0 for m in margins])),
            "lookahead/best_margin": float(np.mean(margins)),
            "advantage_mean": float(np.mean(adv)), "advantage_std": float(np.std(adv)),
            "choice/live_turn_share": float(np.mean(adv != 0))}
