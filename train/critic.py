"""The critic for the GAE estimators: a value head on the policy's backbone, or a separate model.

    critic = build_critic("shared", policy_model)          # head on the policy's last hidden state
    critic = build_critic("separate", policy_model, path)  # its own backbone (a copy, or a local dir)
    values = critic(input_ids, attention_mask, policy_hidden)   # [B, T]

Position j's value V(s_j) is read from the hidden state at j, the state that predicts token j+1,
so the value of the state a turn acts from is at the position just before its first action token.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


class ValueHead(nn.Module):
    """A linear map from hidden states to one scalar per position, initialised to output 0."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.float()).squeeze(-1)


class Critic(nn.Module):
    """`shared`: reads the policy forward's last hidden state. `separate`: runs its own backbone."""

    def __init__(self, kind: str, hidden_size: int, backbone: nn.Module | None = None):
        super().__init__()
        if kind not in ("shared", "separate"):
            raise ValueError(f"critic kind must be 'shared' or 'separate', got {kind!r}")
        self.kind = kind
        self.backbone = backbone
        self.head = ValueHead(hidden_size)

    @property
    def shared(self) -> bool:
        return self.kind == "shared"

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                policy_hidden: torch.Tensor | None = None) -> torch.Tensor:
        if self.shared:
            if policy_hidden is None:
                raise ValueError("a shared critic needs the policy's last hidden state")
            return self.head(policy_hidden)
        # the decoder alone: the causal LM's head would build [B, T, vocab] logits only to drop them
        backbone: Any = self.backbone
        decoder = backbone.get_decoder() if hasattr(backbone, "get_decoder") else backbone
        out = decoder(input_ids=input_ids, attention_mask=attention_mask)
        return self.head(out.last_hidden_state)


def _hidden_size(model: Any) -> int:
    config = model.config
    for name in ("hidden_size", "n_embd", "d_model"):
        if getattr(config, name, None):
            return int(getattr(config, name))
    raise ValueError(f"cannot tell the hidden size of {type(model).__name__}")


def build_critic(kind: str, policy_model: nn.Module, path: str = "", device: str = "cpu") -> Critic:
    """A critic of the given kind; `separate` loads `path` (a local HF dir) or copies the policy."""
    if kind == "shared":
        return Critic("shared", _hidden_size(policy_model)).to(device)
    if path:
        from transformers import AutoModelForCausalLM

        backbone = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    else:
        backbone = copy.deepcopy(policy_model)
    return Critic("separate", _hidden_size(backbone), backbone).to(device)
