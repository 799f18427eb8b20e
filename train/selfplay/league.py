"""The league: the opponent pool a self-play run draws from, its frozen snapshots and the rule that samples it.

Members are "random" (a random legal move), "start" (the weights training started from), "snapshot-K" (the
learner's trainable weights after K iterations, frozen) or a policy spec. A snapshot's weights live in
run_dir/league/<name>.pt; the league's state (members, the sampler's random state) is kept in the checkpoint,
so a resumed run draws from the same pool. A frozen member plays by swapping its weights into the trained
model for its own generate call and back after (`FrozenPolicy`): it never trains, it only answers requests.
"""
from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from agentgym.engine.multiagent import load_seat_policy

START = "start"


@dataclass(frozen=True)
class Member:
    name: str                # "random", "start", "snapshot-K", or a policy spec
    kind: str                # random | frozen | spec
    iteration: int = 0       # frozen: the iterations trained into its weights
    path: str = ""           # frozen: its weights file


class FrozenPolicy:
    """Generates with `policy` (the trainer's HF policy) after writing `weights` into its model; the trained
    weights are put back before it returns, so the learner's own turns never see them. The HF policy's prefix
    store notices the swap (weights version) and drops KV computed under other weights."""

    _lock = threading.Lock()
    uses_tokens = True

    def __init__(self, policy: Any, weights: dict[str, Any]):
        self.policy, self.weights = policy, weights

    def chat_format(self) -> Any:
        return self.policy.chat_format()

    @property
    def max_context(self) -> Any:
        return getattr(self.policy, "max_context", None)

    def generate(self, requests: Any) -> list[Any]:
        from agentgym.train import merge

        model = self.policy.model
        with self._lock:
            trained = merge.trainable_weights(model)
            merge.load_weights(model, self.weights)
            try:
                return self.policy.generate(requests)
            finally:
                merge.load_weights(model, trained)

    def close(self) -> None:
        pass


class League:
    """The opponent pool and its sampling rule (`sampling`: uniform | latest, see SelfPlaySection)."""

    def __init__(self, run_dir: Path, members: list[Member], sampling: str = "uniform", latest_share: float = 0.5,
                 max_snapshots: int = 8, seed: int = 0, rng_state: Any = None):
        self.dir = Path(run_dir) / "league"
        self.members, self.sampling, self.latest_share, self.max_snapshots = members, sampling, latest_share, max_snapshots
        self.rng = random.Random(seed)
        if rng_state is not None:
            self.rng.setstate(rng_state)
        self._weights: dict[str, dict[str, Any]] = {}
        self._specs: dict[str, Any] = {}
        for member in members:
            self._load_spec(member)

    def _load_spec(self, member: Member) -> None:
        """A spec member is loaded once, when it joins: one that fails is refused before any match, with the fix."""
        if member.kind == "spec" and member.name not in self._specs:
            self._specs[member.name] = load_seat_policy(member.name, f"selfplay.pool entry {member.name!r}")

    @classmethod
    def fresh(cls, run_dir: Path, pool: tuple[str, ...], start_weights: Callable[[], dict[str, Any]],
              **kw: Any) -> League:
        """A new run's league: its pool, with "start" frozen from the weights training starts from."""
        league = cls(run_dir, [], **kw)
        for name in pool:
            if name == "random":
                league.members.append(Member("random", "random"))
            elif name == START:
                league.members.append(league._freeze(START, 0, start_weights()))
            else:
                league.members.append(Member(name, "spec"))
                league._load_spec(league.members[-1])
        return league

    def _freeze(self, name: str, iteration: int, weights: dict[str, Any]) -> Member:
        import torch

        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{name}.pt"
        cpu = {k: v.detach().to("cpu").clone() for k, v in weights.items()}
        torch.save(cpu, path)
        self._weights[name] = cpu
        return Member(name, "frozen", iteration, str(path))

    def add_snapshot(self, iteration: int, weights: dict[str, Any]) -> Member:
        """The learner's weights after `iteration` iterations join the pool (the oldest snapshot leaves past
        max_snapshots)."""
        member = self._freeze(f"snapshot-{iteration}", iteration, weights)
        self.members = [m for m in self.members if m.name != member.name] + [member]
        snapshots = self.snapshots()
        for old in snapshots[:max(0, len(snapshots) - self.max_snapshots)]:
            self.members.remove(old)
            self._weights.pop(old.name, None)
        return member

    def snapshots(self) -> list[Member]:
        return [m for m in self.members if m.name.startswith("snapshot-")]

    def sample(self) -> Member:
        """One opponent by the stated rule: uniform over the pool, or (latest) the newest snapshot with
        probability latest_share and uniform over the others otherwise."""
        if not self.members:
            raise ValueError("the league's pool is empty")
        snapshots = self.snapshots()
        if self.sampling == "latest" and snapshots:
            others = [m for m in self.members if m is not snapshots[-1]]
            if not others or self.rng.random() < self.latest_share:
                return snapshots[-1]
            return self.rng.choice(others)
        return self.rng.choice(self.members)

    def weights(self, member: Member) -> dict[str, Any]:
        if member.name not in self._weights:
            import torch

            self._weights[member.name] = torch.load(member.path, map_location="cpu", weights_only=True)
        return self._weights[member.name]

    def policy(self, member: Member, learner: Any, seed: int = 0) -> Any:
        """The policy that plays `member`, given the trainer's policy (frozen members swap into its model)."""
        if member.kind == "random":
            return load_seat_policy(f"random:{seed}", member.name)
        if member.kind == "frozen":
            return FrozenPolicy(learner, self.weights(member))
        return self._specs[member.name]

    def state_dict(self) -> dict[str, Any]:
        return {"members": [asdict(m) for m in self.members], "rng": self.rng.getstate()}

    @classmethod
    def from_state(cls, run_dir: Path, state: dict[str, Any], **kw: Any) -> League:
        return cls(run_dir, [Member(**m) for m in state["members"]], rng_state=state["rng"], **kw)
