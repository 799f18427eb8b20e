"""What a batch gives the estimator to learn from, counted over trained rows (a branch's copied turns count
once, in their trunk): the figures issue 52 compares independent groups and branching by.

    signal/live_group_share     groups with some trained turn whose advantage is not 0
    signal/step_turn_share      trained turns in a GiGPO step group (same group, same anchor) of size > 1
    signal/step_groups_multi    step groups of size > 1
(the branching collector adds branch/points: its step groups made exact by restoring one state)
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from agentgym.trajectory import Trajectory, TurnTable


def estimator_signal(algorithm: Any, batch: Sequence[Trajectory]) -> dict[str, float]:
    """The figures above for `batch` under `algorithm`'s estimator (live_group_share only for a critic-free one)."""
    from agentgym.train.estimators import get_estimator
    from agentgym.train.estimators.advantages import trained

    if not batch:
        return {}
    table = TurnTable.from_trajectories(batch)
    keep = trained(table)                                                       # [n]
    key = table.group * (int(table.anchor.max()) + 1) + table.anchor            # [n] step group of each row
    _, inverse, counts = np.unique(key[keep], return_inverse=True, return_counts=True)  # over trained rows
    out = {"signal/step_turn_share": float(np.mean(counts[inverse] > 1)),
           "signal/step_groups_multi": float(np.sum(counts > 1))}
    if get_estimator(algorithm.estimator).turn_advantages is not None:
        from agentgym.train.estimators.targets import turn_advantages

        adv = turn_advantages(algorithm, table, batch)                         # [n]
        live = {int(g) for g in table.group[keep & (np.abs(adv) > 1e-9)]}
        out["signal/live_group_share"] = len(live) / len({int(g) for g in table.group[keep]})
    return out
