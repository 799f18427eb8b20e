"""Group-relative judging of finished rollouts: the G trajectories of a task go to the judge together.

    trajectories = judge_groups(trajectories, GroupJudge("openai:http://127.0.0.1:8000"), name="ruler")

Each trajectory's last turn gains `weight × score` in its reward and a `reward_components[name]` entry,
so advantages and reports see the judge as its own component. When the judge fails for a group, those
trajectories come back unchanged, with the reason in the last turn's `info[f"{name}_error"]`. The
generic machinery is core (`agentgym.rubric.add_group_scores`), so the trainer can apply
`rollout.group_rewards` without importing this package.
"""
from __future__ import annotations

from agentgym.rubric import add_group_scores, episode_from_trajectory

judge_groups = add_group_scores

__all__ = ["episode_from_trajectory", "judge_groups"]
