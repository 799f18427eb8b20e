"""Records of rollouts: `Turn`, `Trajectory`, and the flat `TurnTable` the advantage functions read.

Token in, token out: `prompt_ids` is exactly what the model was given at a turn and `response_ids`
exactly what it generated, with `logprobs` the sampled tokens' log-probabilities. In the
`trajectory` layout the next turn's prompt extends this turn's prompt + response, so the last turn
holds the whole conversation.

`to_dict` is the one serialiser of these records (the resume log, results.json, rollouts); `outcome` is
the one definition of success / failure / error that training and eval metrics count.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

import numpy as np

from agentgym.policy import Choice


@dataclass(frozen=True)
class Turn:
    """One model turn and what the env made of it."""

    index: int
    observation: str                      # the observation this turn acted on (new text only)
    action: str                           # the model's raw text
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    reward: float
    reward_components: dict[str, float] = field(default_factory=dict)
    anchor: Hashable = None               # key of the state this turn acted from
    valid: bool = True
    terminated: bool = False
    truncated: bool = False
    finish_reason: str = "stop"           # stop | length | error
    tool_calls: int = 0
    tool_errors: int = 0
    generate_s: float = 0.0
    env_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)  # JSON-safe extras (admissible actions count, ...)
    history: tuple[str, ...] = ()         # history[k-1]: hash of the last k turns' context (HGPO's groups)
    choice: Choice | None = None          # the actions it chose among, when its policy chose (admissible mode)
    policy_version: int = 0               # the weights' version that generated it (train.mode=async: an episode
                                          # may span versions when new weights arrive between its turns)

    def to_dict(self) -> dict[str, Any]:
        """Ready for `json.dumps`; shallow (unlike `asdict`, no deep copy of the token tuples), so read it, don't
        mutate it. A non-scalar anchor is stored as its repr, which stays hashable when read back."""
        d = {name: getattr(self, name) for name in _TURN_FIELDS}
        anchor = self.anchor
        d["anchor"] = anchor if anchor is None or isinstance(anchor, (str, int, float, bool)) else repr(anchor)
        d["choice"] = None if self.choice is None else self.choice.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Turn:
        d = dict(d)
        for key in ("prompt_ids", "response_ids", "logprobs", "history"):
            d[key] = tuple(d.get(key, ()))
        if d.get("choice") is not None:
            d["choice"] = Choice.from_dict(d["choice"])
        return cls(**d)


_TURN_FIELDS = tuple(Turn.__dataclass_fields__)


def history_keys(turns: Sequence[Turn], depth: int) -> tuple[str, ...]:
    """Hashes of the context the next turn acts on: entry k-1 covers the last k turns (their anchor,
    observation and action), chained so entry k extends entry k-1; at most `depth` entries (fewer early on).
    Two turns whose entry k agree saw the same last k turns, which is what HGPO groups by."""
    keys: list[str] = []
    h = hashlib.blake2b(digest_size=8)
    for turn in reversed(turns[max(0, len(turns) - depth):]):
        h.update(repr((turn.anchor, turn.observation, turn.action)).encode())
        keys.append(h.copy().hexdigest())
    return tuple(keys)


END_REASONS = ("terminated", "truncated", "max_turns", "context_full", "failed")
OUTCOMES = ("success", "failure", "error")


@dataclass(frozen=True)
class Trajectory:
    """One episode: a task (env id + seed), its place in a group, its turns and how it ended."""

    env_id: str
    seed: int
    group_id: int
    sample_index: int
    turns: tuple[Turn, ...]
    success: bool
    end_reason: str                       # one of END_REASONS
    task_id: str = ""
    system_prompt: str = ""
    first_observation: str = ""
    final_observation: str = ""           # the env's answer to the last action (not acted on)
    error: str | None = None
    wall_s: float = 0.0
    task: str = ""                        # the task text step-layout prompts restate (info["task"] or first obs)
    ground_truth: str = ""                # the answer the env exposed at reset (info["ground_truth"]), for IGPO
    shared_prefix: int = 0                # a branch (agentgym.engine.branching): its first turns are its trunk's, copied
    trunk_group: int | None = None        # a branch: the group id of the play it branched from (None: a play)

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def outcome(self) -> str:
        """"error": a policy or env failure ended it, which says nothing about the agent (eval re-runs these);
        else "success" when the env reported the task solved, else "failure"."""
        if self.end_reason == "failed" or self.error is not None:
            return "error"
        return "success" if self.success else "failure"

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_response_tokens(self) -> int:
        return sum(len(t.response_ids) for t in self.turns)

    @property
    def invalid_actions(self) -> int:
        return sum(not t.valid for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        """Ready for `json.dumps`, shallow like `Turn.to_dict`; `from_dict` reads it back."""
        d = {name: getattr(self, name) for name in _TRAJ_FIELDS}
        d["turns"] = [t.to_dict() for t in self.turns]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        d["turns"] = tuple(Turn.from_dict(t) for t in d.get("turns", ()))
        return cls(**d)


_TRAJ_FIELDS = tuple(f for f in Trajectory.__dataclass_fields__ if f != "turns")


def split_groups(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """Trajectories as their groups (same `group_id`), groups in order of first appearance."""
    groups: dict[int, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.group_id, []).append(t)
    return list(groups.values())


def task_units(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """Trajectories as their tasks' units: a group's plays, then the branches grown from them (`trunk_group`), in
    order of first appearance. Without branches, `split_groups`. The async queue hands the trainer these whole."""
    units: dict[int, list[Trajectory]] = {}
    for t in trajectories:
        units.setdefault(t.group_id if t.trunk_group is None else t.trunk_group, []).append(t)
    return list(units.values())


def json_safe(value: Any) -> Any:
    """A copy of `value` that `json.dumps` takes: JSON types kept, anything else as its str."""
    return json.loads(json.dumps(value, default=str))


@dataclass(frozen=True)
class TurnTable:
    """Turns of many trajectories as flat columns, sorted by (traj, turn). Input to train/estimators/advantages.py.

    group:  task group id (one task, G rollouts)      traj:   trajectory id
    turn:   turn index within its trajectory          anchor: int code, equal codes = equal anchor keys
    reward: the turn's reward                         valid:  the action was valid
    terminated: the env ended the episode at this turn (a last turn that is not terminated was cut off:
                by the turn limit, a full context or `truncated`, and GAE bootstraps after it)
    shared: the turn is a branch's copy of its trunk's turn (`Trajectory.shared_prefix`): it is trained and
            counted once, in the trunk; a branch keeps it as context (its prompts are whole) and the
            estimators count the branch's return from its branch turn
    """

    group: np.ndarray
    traj: np.ndarray
    turn: np.ndarray
    anchor: np.ndarray
    reward: np.ndarray
    valid: np.ndarray
    terminated: np.ndarray | None = None
    shared: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.reward)

    @classmethod
    def from_columns(cls, group: Sequence[int], traj: Sequence[int], turn: Sequence[int],
                     anchor: Sequence[Hashable], reward: Sequence[float], valid: Sequence[bool] | None = None,
                     terminated: Sequence[bool] | None = None, shared: Sequence[bool] | None = None) -> TurnTable:
        """Build from plain lists; anchors may be any hashables and are coded to ints."""
        codes: dict[Hashable, int] = {}
        anchor_codes = np.fromiter((codes.setdefault(a, len(codes)) for a in anchor), dtype=np.int64,
                                   count=len(anchor))
        n = len(reward)
        return cls(np.asarray(group, dtype=np.int64), np.asarray(traj, dtype=np.int64),
                   np.asarray(turn, dtype=np.int64), anchor_codes, np.asarray(reward, dtype=np.float64),
                   np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool),
                   None if terminated is None else np.asarray(terminated, dtype=bool),
                   None if shared is None else np.asarray(shared, dtype=bool))

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Trajectory]) -> TurnTable:
        """One row per turn; trajectory ids are positions in the given list."""
        group, traj, turn, anchor, reward, valid, terminated, shared = [], [], [], [], [], [], [], []
        for i, t in enumerate(trajectories):
            for k in t.turns:
                group.append(t.group_id)
                traj.append(i)
                turn.append(k.index)
                anchor.append(k.anchor)
                reward.append(k.reward)
                valid.append(k.valid)
                terminated.append(k.terminated)
                shared.append(k.index < t.shared_prefix)
        return cls.from_columns(group, traj, turn, anchor, reward, valid, terminated,
                                shared if any(shared) else None)
