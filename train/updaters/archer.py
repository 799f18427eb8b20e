"""The ArCHer updater: an off-policy utterance-level critic learnt from a replay buffer, and a token actor
trained on the current iteration's turns with that critic's turn advantage (train/estimators/archer_td.py
writes the maths out).

    learner = ArcherLearner(cfg.algorithm.archer, cfg.algorithm.gamma, policy_model, device, pad_id, lr=1e-4,
                            max_grad_norm=1.0)
    rows, records = turn_records(batch, next_prompt, iteration)
    learner.buffer.extend(records)
    stats = learner.train_critic()             # critic_steps TD steps on buffer mini-batches, Polyak after each
    adv = learner.advantages(records)          # min Q − min V per turn, for the actor's targets

The critic is its own model: a copy of the policy's backbone (or `model.critic_model`) with two Q heads,
read at a turn's last action token, and two V heads, read at its state's last token (the position that
predicts the first action token). The target critic is a frozen copy moved by Polyak averaging.
"""
from __future__ import annotations

import copy
import random
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from agentgym.train.critic import _hidden_size
from agentgym.train.estimators import archer_td as td
from agentgym.train.replay import ReplayBuffer, TurnRecord, turn_records


class ArcherCritic(nn.Module):
    """A backbone and four scalar heads: Q1, Q2 (state + action) and V1, V2 (state)."""

    def __init__(self, backbone: nn.Module, hidden_size: int, seed: int = 0):
        super().__init__()
        self.backbone = backbone
        generator = torch.Generator().manual_seed(seed)
        self.heads = nn.Linear(hidden_size, 4)  # columns: q1, q2, v1, v2; different random starts decorrelate
        with torch.no_grad():                  # the double estimates (zero heads would stay identical)
            self.heads.weight.copy_(torch.randn(4, hidden_size, generator=generator) * 0.01)
            self.heads.bias.zero_()

    def forward(self, sequences: Sequence[Sequence[int]], q_at: Sequence[int], v_at: Sequence[int],
                pad_id: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Heads of each sequence: Q (q1, q2) at position q_at[i] and V (v1, v2) at v_at[i]; [B, 2] each."""
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
        att = torch.zeros((len(sequences), width), dtype=torch.long)
        for i, s in enumerate(sequences):
            ids[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
            att[i, :len(s)] = 1
        hidden = self.last_hidden(ids.to(device), att.to(device))
        rows = torch.arange(len(sequences), device=hidden.device)
        q = self.heads(hidden[rows, torch.as_tensor(list(q_at), device=hidden.device)])[:, :2]
        v = self.heads(hidden[rows, torch.as_tensor(list(v_at), device=hidden.device)])[:, 2:]
        return q, v

    def last_hidden(self, ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """The backbone's last hidden states [B, T, H] (after its final norm). The decoder stack alone where the
        model has one: the LM head's [B, T, vocab] logits (1.6 GB for 8 x 1k tokens of SmolLM2) are never used."""
        backbone: Any = self.backbone
        if hasattr(backbone, "get_decoder"):
            return backbone.get_decoder()(input_ids=ids, attention_mask=att).last_hidden_state.float()
        return backbone(input_ids=ids, attention_mask=att, output_hidden_states=True).hidden_states[-1].float()

    def heads_of(self, records: Sequence[TurnRecord], pad_id: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q(s, a), V(s)) of each record's state and action, from one forward over state + action."""
        seqs = [r.state + r.action for r in records]
        return self(seqs, [len(s) - 1 for s in seqs], [len(r.state) - 1 for r in records], pad_id, device)

    def values_of(self, states: Sequence[Sequence[int]], pad_id: int, device: Any) -> torch.Tensor:
        """V (v1, v2) at each state's last token; [B, 2]."""
        last = [len(s) - 1 for s in states]
        return self(states, last, last, pad_id, device)[1]


def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """θ' ← (1 − τ) θ' + τ θ for every parameter (archer_td.polyak, in place)."""
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters()):
            t.mul_(1.0 - tau).add_(o.detach().to(t.dtype), alpha=tau)


def build_backbone(policy_model: nn.Module, path: str = "") -> nn.Module:
    """The critic's own backbone: a local HF model dir, or a copy of the policy (its trained weights, LoRA
    adapters merged away: the critic trains every weight of its copy)."""
    if path:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    model: Any = copy.deepcopy(policy_model)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    return model.float().requires_grad_(True)


class ArcherLearner:
    """The replay buffer, the critic, its target copy and its optimizer (all saved with checkpoints)."""

    def __init__(self, section: Any, gamma: float, policy_model: nn.Module, device: Any, pad_id: int,
                 lr: float, max_grad_norm: float, critic_model: str = "", seed: int = 0):
        self.cfg, self.gamma, self.device, self.pad_id = section, gamma, device, pad_id
        self.max_grad_norm = max_grad_norm
        backbone = build_backbone(policy_model, critic_model)
        self.critic = ArcherCritic(backbone, _hidden_size(backbone), seed).to(device)
        self.target = copy.deepcopy(self.critic).requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.critic.parameters(), lr=lr, weight_decay=0.0)
        self.buffer = ReplayBuffer(section.buffer_size)
        self.rng = random.Random(seed)

    # ------------------------------------------------------------------ critic
    def td_targets(self, records: Sequence[TurnRecord]) -> tuple[torch.Tensor, torch.Tensor]:
        """(y_Q, y_V) of a mini-batch from the target critic, [B] each."""
        with torch.no_grad():
            q_target, _ = self.target.heads_of(records, self.pad_id, self.device)
            y_v = td.double_min(q_target[:, 0].cpu().numpy(), q_target[:, 1].cpu().numpy())
            live = [i for i, r in enumerate(records) if not r.terminal]
            next_v = np.zeros(len(records))
            if live:
                v_next = self.target.values_of([records[i].next_state for i in live], self.pad_id, self.device)
                next_v[live] = td.double_min(v_next[:, 0].cpu().numpy(), v_next[:, 1].cpu().numpy())
        y_q = td.q_targets(np.array([r.reward for r in records]), next_v, np.array([r.terminal for r in records]),
                           self.gamma)
        return torch.tensor(y_q, dtype=torch.float32), torch.tensor(y_v, dtype=torch.float32)

    def critic_step(self, records: Sequence[TurnRecord]) -> float:
        """One TD step on `records`, then the Polyak update of the target; returns the loss."""
        y_q, y_v = (t.to(self.device) for t in self.td_targets(records))
        q, v = self.critic.heads_of(records, self.pad_id, self.device)
        loss = ((q - y_q[:, None]) ** 2).mean(0).sum() + ((v - y_v[:, None]) ** 2).mean(0).sum()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.critic.parameters(), self.max_grad_norm)
        self.optimizer.step()
        soft_update(self.target, self.critic, self.cfg.tau)
        return float(loss.detach())

    def train_critic(self) -> dict[str, float]:
        """`critic_steps` TD steps, each on `critic_batch` records drawn from the buffer."""
        losses = [self.critic_step(self.buffer.sample(self.cfg.critic_batch, self.rng))
                  for _ in range(self.cfg.critic_steps) if len(self.buffer)]
        return {"archer/critic_loss": float(np.mean(losses)) if losses else 0.0,
                "archer/critic_steps": float(len(losses)), "archer/buffer_size": float(len(self.buffer))}

    # ------------------------------------------------------------------ actor
    def advantages(self, records: Sequence[TurnRecord]) -> np.ndarray:
        """A = min Q − min V of each record under the online critic (no gradient), in chunks."""
        out: list[np.ndarray] = []
        size = max(1, self.cfg.critic_batch)
        with torch.no_grad():
            for start in range(0, len(records), size):
                q_t, v_t = self.critic.heads_of(records[start:start + size], self.pad_id, self.device)
                q, v = q_t.cpu().numpy(), v_t.cpu().numpy()
                out.append(td.turn_advantages(q[:, 0], q[:, 1], v[:, 0], v[:, 1]))
        return np.concatenate(out) if out else np.zeros(0)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {"critic": self.critic.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "buffer": self.buffer.state_dict(),
                "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer = ReplayBuffer.from_state(state["buffer"])
        self.rng.setstate(state["rng"])


def archer_step(learner: ArcherLearner, c: Any, cfg: Any, batch: Sequence[Any], samples: Sequence[Any],
                table: Any, iteration: int, next_prompt: Any) -> tuple[Any, dict[str, float]]:
    """One ArCHer iteration on a rolled-out batch: its turns (rewards as shaped in `table`) join the buffer,
    the critic takes its TD steps, and after the warm-up the actor is updated on this batch's turns with the
    critic's advantages. Returns (UpdateStats, or None during the warm-up; metrics)."""
    from dataclasses import replace

    from agentgym.train.estimators.targets import build_targets
    from agentgym.train.updaters.token_ppo import ppo_update, score

    rows, records = turn_records(batch, next_prompt, iteration)
    records = [replace(r, reward=float(table.reward[row])) for row, r in zip(rows, records)]
    learner.buffer.extend(records)
    metrics = learner.train_critic()
    if iteration < cfg.algorithm.archer.warmup_iterations or not records:
        return None, metrics
    per_turn = learner.advantages(records)
    advantages = np.zeros(len(table))
    advantages[rows] = per_turn
    scored = score(c, samples, cfg)
    targets = build_targets(cfg.algorithm, table, batch, samples, scored, turn_adv=advantages)
    stats = ppo_update(c, samples, scored, targets, cfg, shuffle_seed=cfg.train.seed * 1_000_003 + iteration)
    metrics.update({"archer/advantage_mean": float(per_turn.mean()), "archer/advantage_std": float(per_turn.std())})
    return (stats, scored, targets), metrics
