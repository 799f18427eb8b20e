"""Group-relative judging of finished rollouts: the G trajectories of a task go to the judge together.

    trajectories = judge_groups(trajectories, GroupJudge("openai:http://127.0.0.1:8000"), weight=1.0)

Each trajectory's last turn gains `weight × score` in its reward and a `reward_components[name]` entry,
so advantages and reports see the judge as its own component. When the judge fails for a group, those
trajectories are returned unchanged, with the reason in the last turn's `info["judge_error"]`.
"""
from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Sequence

from agentgym.rubric import Episode, Step
from agentgym.trajectory import Trajectory
from agentgym.tools.judges.client import JudgeError
from agentgym.tools.judges.judge import GroupJudge


def episode_from_trajectory(traj: Trajectory) -> Episode:
    """The rubric's view of a recorded trajectory: turn k's result is turn k+1's observation (or the final one)."""
    turns = traj.turns
    results = [t.observation for t in turns[1:]] + [traj.final_observation]
    steps = tuple(Step(t.action, obs, t.reward, {"valid_action": t.valid}) for t, obs in zip(turns, results))
    return Episode(traj.first_observation, traj.system_prompt, steps, {"task_id": traj.task_id}, traj.success,
                   bool(turns and turns[-1].truncated))


def _with_judgement(traj: Trajectory, name: str, value: float | None, error: str | None) -> Trajectory:
    if not traj.turns:
        return traj
    last = traj.turns[-1]
    if error is not None:
        return replace(traj, turns=traj.turns[:-1] + (replace(last, info={**last.info, "judge_error": error}),))
    components = {**last.reward_components, name: value}
    last = replace(last, reward=last.reward + value, reward_components=components,
                   info={**last.info, f"{name}_score": value})
    return replace(traj, turns=traj.turns[:-1] + (last,))


def judge_groups(trajectories: Sequence[Trajectory], judge: GroupJudge, name: str = "judge", weight: float = 1.0,
                 max_workers: int = 4) -> list[Trajectory]:
    """Trajectories (same order) with the group judge's weighted score added to each last turn."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, traj in enumerate(trajectories):
        groups[traj.group_id].append(i)

    def run(members: list[int]) -> tuple[list[int], list[float] | None, str | None]:
        try:
            return members, judge.score_group([episode_from_trajectory(trajectories[i]) for i in members]), None
        except JudgeError as exc:
            return members, None, str(exc)

    out = list(trajectories)
    with ThreadPoolExecutor(max(1, min(max_workers, len(groups)))) as pool:
        for members, scores, error in pool.map(run, groups.values()):
            for j, i in enumerate(members):
                value = None if scores is None else weight * scores[j]
                out[i] = _with_judgement(trajectories[i], name, value, error)
    return out
