"""A bounded replay buffer of turns, kept across iterations (ArCHer's off-policy critic reads it).

    buffer = ReplayBuffer(capacity=4096)
    rows, records = turn_records(trajectories, next_prompt, iteration=3)
    buffer.extend(records)
    batch = buffer.sample(64, rng)
    torch.save(buffer.state_dict(), path)    # checkpoints keep it; ReplayBuffer.from_state(...) restores

Each record is one turn as it was played: the state (its prompt ids), the action (its response ids), the
reward, the next state (the next turn's prompt, or the prompt the next turn would have had after a cut-off),
whether the turn ended the episode, the behaviour policy's log-probs of the action tokens (recorded at
generation, never recomputed) and the iteration that produced it. When full, the oldest records go first.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

from agentgym.trajectory import Trajectory


@dataclass(frozen=True)
class TurnRecord:
    state: tuple[int, ...]
    action: tuple[int, ...]
    reward: float
    next_state: tuple[int, ...]
    terminal: bool                        # the episode ended here: no bootstrap
    behaviour_logprobs: tuple[float, ...]  # the sampler's log-probs of `action`, one per token
    iteration: int


def turn_records(trajectories: Sequence[Trajectory], next_prompt: Callable[[Trajectory], Sequence[int]],
                 iteration: int) -> tuple[list[int], list[TurnRecord]]:
    """The turns of `trajectories` with a response, in play order, and each one's row in
    `TurnTable.from_trajectories(trajectories)`. `next_prompt(traj)` gives the state after a trajectory's last
    turn (asked only when that turn did not terminate the episode)."""
    rows: list[int] = []
    records: list[TurnRecord] = []
    offset = 0
    for traj in trajectories:
        played = [j for j, t in enumerate(traj.turns) if t.response_ids]
        turns = [traj.turns[j] for j in played]
        rows += [offset + j for j in played]
        offset += len(traj.turns)
        for k, turn in enumerate(turns):
            if k + 1 < len(turns):
                nxt: tuple[int, ...] = tuple(turns[k + 1].prompt_ids)
            else:
                nxt = () if turn.terminated else tuple(next_prompt(traj))
            records.append(TurnRecord(tuple(turn.prompt_ids), tuple(turn.response_ids), float(turn.reward), nxt,
                                      bool(turn.terminated and k + 1 == len(turns)), tuple(turn.logprobs),
                                      iteration))
    return rows, records


class ReplayBuffer:
    """First in, first out once `capacity` records are held."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._records: deque[TurnRecord] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self):
        return iter(self._records)

    def extend(self, records: Iterable[TurnRecord]) -> None:
        self._records.extend(records)  # a deque with maxlen drops from the left: the oldest

    def sample(self, n: int, rng: random.Random) -> list[TurnRecord]:
        """`n` records drawn uniformly with replacement (empty buffer: empty list)."""
        if not self._records:
            return []
        return [self._records[rng.randrange(len(self._records))] for _ in range(n)]

    def state_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "records": [asdict(r) for r in self._records]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ReplayBuffer:
        buffer = cls(int(state["capacity"]))
        buffer.extend(TurnRecord(tuple(r["state"]), tuple(r["action"]), float(r["reward"]), tuple(r["next_state"]),
                                 bool(r["terminal"]), tuple(r["behaviour_logprobs"]), int(r["iteration"]))
                      for r in state["records"])
        return buffer
