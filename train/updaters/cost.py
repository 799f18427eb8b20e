"""Where an update's time goes, and its rate: the frozen trunk, the trainable block's forward and
backward, the optimizer; tokens per second and an estimate of GFLOP/s to hold against the machine's
matrix-product rate (benchmarks/train_speed.py --part choice measures both).

    cost = UpdateCost()
    with cost.timed("trunk"):
        ...
    cost.add_row(model.config, tokens=Q, read=R, start=22, grad_passes=1)
    metrics.update(cost.as_metrics())
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

# reference: the KL anchor's no-grad pass; expert: expert replay's demonstrations (train/expert_replay.py)
PHASES = ("trunk", "reference", "forward", "backward", "optimizer", "expert")


@dataclass
class UpdateCost:
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    tokens: int = 0          # row tokens through the trainable block, over every pass with gradients
    trunk_tokens: int = 0    # row tokens through the frozen trunk (once per sequence and update)
    row_tokens: int = 0      # the sequences' own lengths (conversation + candidate trees), once each
    tree_tokens: int = 0     # of which candidate-tree tokens
    flops: float = 0.0
    sequences: int = 0
    trunk_reused: int = 0    # sequences whose trunk output came from the rollout (policies/rollout_trunk.py)
    own_tokens: int = 0      # the sequences' own rows before packing (policies/packed_rows.py); 0: not packed
    reference_reused: int = 0  # updates whose KL reference was the policy itself (its pass skipped)
    phase_flops: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    def add_row(self, config: Any, tokens: int, read: int, start: int, grad_passes: int, plain_passes: int = 0,
                trunk_cached: bool = True, tree_tokens: int = 0, trunk_reused: bool = False) -> None:
        """Count one sequence: its trunk once (when cached; none when the rollout's was reused; else every
        pass runs it), `grad_passes` forward
        + backward passes of the top and `plain_passes` no-grad ones. Backward costs twice the forward
        (weights' and inputs' gradients) on the trainable layers and once (inputs' only) on the head."""
        from agentgym.policies.trunk import forward_flops

        layers = config.num_hidden_layers
        top = forward_flops(config, tokens, tokens, layers - start)
        head = forward_flops(config, tokens, tokens, 0, read)
        trunk = forward_flops(config, tokens, tokens, start)
        passes = grad_passes + plain_passes
        trunk_runs = 0 if trunk_reused else 1 if trunk_cached else passes
        self.flops += trunk * trunk_runs + top * (3 * grad_passes + plain_passes) + head * (2 * grad_passes + plain_passes)
        self.tokens += tokens * grad_passes
        if start:
            self.trunk_tokens += tokens * trunk_runs
        self.trunk_reused += int(trunk_reused)
        self.row_tokens += tokens
        self.tree_tokens += tree_tokens
        self.sequences += 1

    def add_pass(self, phase: str, config: Any, tokens: int, read: int, layers: int, pairs: int | None = None,
                 backward: bool = False) -> None:
        """Count one pass of `layers` decoder layers over a row of `tokens` (attention over `pairs` query-key
        pairs per layer, dense when None) and the LM head on `read` rows, under `phase`; with `backward` its
        backward too, under "backward" (twice the forward on the layers, once on the head)."""
        from agentgym.policies.trunk import forward_flops

        body = forward_flops(config, tokens, tokens, layers, pairs=pairs)
        head = forward_flops(config, tokens, tokens, 0, read)
        self.phase_flops[phase] += body + head
        self.flops += body + head
        if backward:
            self.phase_flops["backward"] += 2 * body + head
            self.flops += 2 * body + head
            self.tokens += tokens
        if phase == "trunk":
            self.trunk_tokens += tokens

    def as_metrics(self) -> dict[str, float]:
        total = sum(self.seconds.values())
        out = {f"time/update_{k}": v for k, v in self.seconds.items()}
        out.update({"update/tokens": float(self.tokens), "update/trunk_tokens": float(self.trunk_tokens),
                    "update/tflop": self.flops / 1e12,
                    "update/tokens_per_sequence": self.row_tokens / max(self.sequences, 1),
                    "update/candidate_token_share": self.tree_tokens / max(self.row_tokens, 1),
                    "update/trunk_from_rollout_share": self.trunk_reused / max(self.sequences, 1),
                    "update/packed_token_share": self.row_tokens / self.own_tokens if self.own_tokens else 1.0,
                    "update/reference_reused": float(self.reference_reused),
                    "tokens_per_s/update": self.tokens / max(total, 1e-9),
                    "gflops_per_s/update": self.flops / 1e9 / max(total, 1e-9)})
        out.update({f"gflop/update_{k}": v / 1e9 for k, v in self.phase_flops.items() if v})
        return out
