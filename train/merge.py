"""Keep part of training's weight change: final = start + kept x (trained - start) (`train.change_kept`).

Interpolating a fine-tuned model back toward its initialisation (WiSE-FT; WARP's "LITI" for RL from a
supervised start) trades some of the change's gain for less of its damage: on the household quick start the
RL endpoint newly fails several tasks the warm start solved, and half the change keeps most gains and few
of those losses (README "RL from the warm start, over seeds").
"""
from __future__ import annotations

from typing import Any, Mapping


def interpolate(start: Mapping[str, Any], trained: Mapping[str, Any], kept: float) -> dict[str, Any]:
    """start + kept x (trained - start) for each named tensor; `start` and `trained` name the same tensors."""
    if set(start) != set(trained):
        raise ValueError(f"interpolate needs the same tensors on both sides; only on one: "
                         f"{sorted(set(start) ^ set(trained))[:3]}")
    return {name: start[name] + kept * (trained[name] - start[name]) for name in trained}


def trainable_weights(model: Any) -> dict[str, Any]:
    """A detached copy of every trainable parameter, by name (what a merge moves; frozen ones never change)."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def load_weights(model: Any, weights: Mapping[str, Any]) -> None:
    """Write `weights` (by parameter name) into `model`'s parameters in place."""
    import torch

    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
