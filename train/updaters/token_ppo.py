"""The PPO update: forward passes over padded micro-batches, per-token targets, gradient accumulation.

Positions are *shifted*: array position p holds what concerns token p+1 (its log-probability under
the logits at p, the value V(s_p) of the state that emits it), so the arrays of a sample of L tokens
have L-1 entries and `row[1:]` says which turn each entry's token belongs to.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from agentgym.train.updaters import losses as L
from agentgym.train.algorithm import AlgorithmSection
from agentgym.train.batch import Components, Sample, Scored, Targets, TrainConfig
from agentgym.train.samples import collate, micro_batches


@dataclass(frozen=True)
class Forward:
    logprobs: torch.Tensor           # [B, T-1]
    mask: torch.Tensor               # [B, T-1] float, action tokens
    values: torch.Tensor | None      # [B, T-1]
    entropy: torch.Tensor | None     # [N_action] entropies at action positions


def _split_head(model: Any) -> tuple[Any, Any]:
    """(backbone, lm head) of a causal LM (through a peft wrapper), or (None, None) if not separable or
    sharded by FSDP (its root forward is what gathers the embeddings and head, so it must run)."""
    from agentgym.train.distributed import is_sharded

    if is_sharded(model):
        return None, None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    get_decoder = getattr(base, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if decoder is None or head is None or decoder is base:
        return None, None
    return decoder, head


@contextmanager
def _checkpointing_active(model: Any):
    """Let gradient checkpointing run although the model is in eval mode.

    transformers checkpoints a layer only while `layer.training` is True, but the trainer keeps the
    model in eval mode (no dropout, so its log-probs match the sampler's), which silently turned
    checkpointing off. Only the flag of the checkpointing layers is flipped, and only for passes that
    build a graph; their dropout children stay in eval mode.
    """
    layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True] \
        if torch.is_grad_enabled() else []
    for layer in layers:
        layer.training = True
    try:
        yield
    finally:
        for layer in layers:
            layer.training = False


def _action_logits(model: Any, ids: torch.Tensor, att: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits at action-target positions [N, V], last hidden states [B, T, H]).

    The LM head runs on the N action positions only, not on every prompt/observation position: in the
    step layout that is a few dozen positions of a few hundred, which saves most of the head's compute
    and the [B, T, V] logits tensor. Models whose backbone cannot be split off go the plain way.
    """
    decoder, head = _split_head(model)
    with _checkpointing_active(model):
        if decoder is None:
            out = model(input_ids=ids, attention_mask=att, output_hidden_states=True, use_cache=False)
            return out.logits[:, :-1][mask], out.hidden_states[-1]
        hidden = decoder(input_ids=ids, attention_mask=att, use_cache=False).last_hidden_state
    return head(hidden[:, :-1][mask]), hidden


def forward(model: Any, critic: Any, samples: Sequence[Sample], index: Sequence[int], device: torch.device,
            temperature: float, pad_id: int, want_entropy: bool = False) -> Forward:
    """One forward pass over `samples[index]` (right-padded); log-probs are 0 off the action tokens."""
    batch = collate(samples, index, pad_id)
    ids = torch.as_tensor(batch.ids, device=device)                          # [B, T] right-padded token ids
    att = torch.as_tensor(batch.attention, device=device)                    # [B, T]
    bool_mask = torch.as_tensor(batch.row[:, 1:] >= 0, device=device)        # [B, T-1] token p+1 is an action
    logits, hidden = _action_logits(model, ids, att, bool_mask)              # [N, V] at N action positions; [B, T, H]
    picked = L.token_logprobs(logits, ids[:, 1:][bool_mask], temperature)    # [N]
    logprobs = torch.zeros(bool_mask.shape, dtype=picked.dtype, device=device)  # [B, T-1], 0 off the actions
    logprobs = logprobs.masked_scatter(bool_mask, picked)
    values = None
    if critic is not None:
        shared = getattr(critic, "module", critic).shared  # through a DDP wrapper too
        values = critic(ids, att, hidden if shared else None)[:, :-1]       # [B, T-1] V(s_p)
    entropy = None
    if want_entropy:
        entropy = L.entropy_from_logits(logits / temperature) if logits.numel() else logits.new_zeros(0)
    return Forward(logprobs, bool_mask.float(), values, entropy)


def answer_logprobs(model: Any, contexts: Sequence[Sequence[int]], probe: Sequence[int], probe_mask: np.ndarray,
                    device: Any, pad_id: int, temperature: float = 1.0, micro_batch_size: int = 8) -> np.ndarray:
    """IGPO's belief scores (train/estimators/igpo.py): the mean log-prob of the probe's masked tokens after each
    context, one no-grad `forward` per micro-batch (the PPO update's padding, head-on-targets-only and temperature)."""
    samples = []
    for ctx in contexts:
        ids = np.asarray([*ctx, *probe], dtype=np.int64)
        row = np.full(len(ids), -1, dtype=np.int64)
        row[len(ctx):][probe_mask] = 0
        samples.append(Sample(ids, row, np.zeros(len(ids))))
    out = np.zeros(len(samples))
    with torch.no_grad():
        for index in micro_batches(samples, range(len(samples)), micro_batch_size):
            f = forward(model, None, samples, index, device, temperature, pad_id)
            sums = (f.logprobs * f.mask).sum(-1) / f.mask.sum(-1).clamp(min=1.0)
            out[index] = sums.detach().float().cpu().numpy()
    return out


def _micro_batches(samples: Sequence[Sample], index: Sequence[int], tc: Any, critic: Any,
                   dist: Any = None) -> list[list[int]]:
    """Padded micro-batches of `micro_batch_size` samples, or with `train.token_budget` packed ones."""
    if tc.token_budget is None:
        return [list(m) for m in micro_batches(samples, index, tc.micro_batch_size)]
    from agentgym.train.updaters.token_rows import budget_micro_batches, prefix_order, refuse_unsupported

    refuse_unsupported(critic, dist)
    return budget_micro_batches(samples, prefix_order(samples, index), tc.token_budget)


def _forward(model: Any, critic: Any, samples: Sequence[Sample], index: Sequence[int], device: torch.device,
             temperature: float, pad_id: int, token_budget: int | None, want_entropy: bool = False,
             packed: Any = None) -> Forward:
    """`forward`, or with a token budget the packed row's (train/updaters/token_rows.py); `packed` (a
    PackedTokens) counts what the packed rows ran."""
    if token_budget is None:
        return forward(model, critic, samples, index, device, temperature, pad_id, want_entropy)
    from agentgym.train.updaters.token_rows import packed_forward

    with _checkpointing_active(model):
        logprobs, mask, entropy, tokens = packed_forward(model, samples, index, device, temperature, pad_id,
                                                         want_entropy)
    if packed is not None:
        packed.add([len(samples[i]) for i in index], tokens, token_budget)
    return Forward(logprobs, mask, None, entropy)


def _unpad(t: torch.Tensor, samples: Sequence[Sample], index: Sequence[int]) -> list[np.ndarray]:
    rows = t.detach().float().cpu().numpy()
    return [rows[k, :len(samples[i]) - 1].astype(np.float64) for k, i in enumerate(index)]


@torch.no_grad()
def score(c: Components, samples: Sequence[Sample], cfg: TrainConfig) -> Scored:
    """Old log-probs (recomputed by the trained model), reference log-probs and old values."""
    n, ref, temperature = len(samples), c.ref, cfg.rollout.temperature
    old: list[Any] = [None] * n
    refs: list[Any] | None = [None] * n if ref is not None else None
    vals: list[Any] | None = [None] * n if c.critic is not None else None
    budget = cfg.train.token_budget
    for index in _micro_batches(samples, range(n), cfg.train, c.critic):
        f = _forward(c.model, c.critic, samples, index, c.device, temperature, c.pad_id, budget)
        for i, a in zip(index, _unpad(f.logprobs, samples, index)):
            old[i] = a
        if vals is not None:
            for i, a in zip(index, _unpad(f.values, samples, index)):
                vals[i] = a
        if refs is not None:
            with ref() as ref_model:
                r = _forward(ref_model, None, samples, index, c.device, temperature, c.pad_id, budget)
            for i, a in zip(index, _unpad(r.logprobs, samples, index)):
                refs[i] = a
    return Scored(old, refs, vals)


def state_values(c: Components, prompts: Sequence[Sequence[int]], cfg: TrainConfig) -> np.ndarray:
    """The critic's value of the state each prompt ends in (read where a next action would start)."""
    if not prompts:
        return np.zeros(0)
    # one padding token after the prompt puts the prompt's last position inside the shifted arrays
    samples = [Sample(np.asarray([*p, c.pad_id], dtype=np.int64), np.full(len(p) + 1, -1, dtype=np.int64),
                      np.zeros(len(p) + 1)) for p in prompts]
    scored = score(Components(**{**vars(c), "ref": None}), samples, cfg)
    return np.array([v[len(p) - 1] for v, p in zip(scored.old_values, prompts)])


def _pad(arrays: Sequence[np.ndarray], index: Sequence[int], width: int, device: torch.device) -> torch.Tensor:
    out = np.zeros((len(index), width))
    for k, i in enumerate(index):
        out[k, :len(arrays[i])] = arrays[i]
    return torch.as_tensor(out, dtype=torch.float32, device=device)


@dataclass
class UpdateStats:
    policy_loss: float = 0.0
    value_loss: float = 0.0
    entropy: float = 0.0
    kl: float = 0.0
    approx_kl: float = 0.0
    clip_fraction: float = 0.0
    grad_norm: float = 0.0
    critic_grad_norm: float = 0.0
    steps: int = 0
    action_tokens: float = 0.0   # entropy and kl are summed weighted by the micro-batch's action tokens,
    actor_tokens: float = 0.0    # approx_kl and clip_fraction by those the policy loss takes (its loss mask)
    epo_entropy: float = 0.0
    epo_weight: float = 0.0
    epo_micro: int = 0
    packed: Any = None   # a PackedTokens (train/updaters/token_rows.py) with train.token_budget

    def as_metrics(self) -> dict[str, float]:
        # means over action tokens, not over micro-batches: the same figures whatever the micro-batch layout
        n, a = max(self.action_tokens, 1.0), max(self.actor_tokens, 1.0)
        return {**(self.packed.as_metrics() if self.packed is not None else {}), "policy_loss": self.policy_loss,
                "value_loss": self.value_loss, "entropy": self.entropy / n,
                "kl": self.kl / n, "approx_kl": self.approx_kl / a, "clip_fraction": self.clip_fraction / a,
                "grad_norm": self.grad_norm / max(self.steps, 1),
                "critic_grad_norm": self.critic_grad_norm / max(self.steps, 1), "optimizer_steps": float(self.steps),
                **({"epo_entropy": self.epo_entropy / self.epo_micro, "epo_weight": self.epo_weight / self.epo_micro}
                   if self.epo_micro else {})}


def _denom(samples: Sequence[Sample], index: Sequence[int], agg: str, targets: Targets) -> float:
    if agg == "token-mean":
        if targets.loss_mask is not None:
            return float(max(sum(float(targets.loss_mask[i].sum()) for i in index), 1.0))
        return float(max(sum(int(samples[i].mask[1:].sum()) for i in index), 1))
    if agg == "seq-mean-token-sum-norm":
        return float(len(index) * max(len(samples[i]) - 1 for i in index))
    return float(len(index))


def value_clip_range(cfg: AlgorithmSection, targets: Targets) -> float | None:
    """algorithm.value.clip, in units of the value targets' spread when value_clip_scale=returns_std."""
    if cfg.value.clip is None or cfg.value.clip_scale == "absolute" or not targets.returns:
        return cfg.value.clip
    masked = np.concatenate([r[m > 0] for r, m in zip(targets.returns, targets.value_mask)])
    return cfg.value.clip * max(float(masked.std()) if masked.size > 1 else 1.0, 1e-3)


def micro_loss(cfg: AlgorithmSection, f: Forward, index: Sequence[int], scored: Scored, targets: Targets,
               denoms: tuple[float, float], value_clip: float | None, stats: UpdateStats) -> torch.Tensor:
    """The loss of one micro-batch, scaled so micro-batch losses add up to the mini-batch loss."""
    denom, vden = denoms
    width = f.logprobs.shape[1]
    pad = lambda arrays: _pad(arrays, index, width, f.logprobs.device)  # noqa: E731
    adv, old = pad(targets.advantages), pad(scored.old_logprobs)            # [B, T-1] each, like f.logprobs
    seg = pad(targets.segments).long().clamp(min=0)                          # [B, T-1] turn id per position
    actor_mask = f.mask if targets.loss_mask is None else f.mask * pad(targets.loss_mask)  # [B, T-1]
    loss_cfg = cfg.loss
    out = L.ppo_policy_loss(f.logprobs, old, adv, actor_mask, clip_low=loss_cfg.clip_low,
                            clip_high=loss_cfg.clip_high, dual_clip=loss_cfg.dual_clip,
                            ratio_level=loss_cfg.ratio_level, segments=seg, agg=loss_cfg.agg, denom=denom,
                            weights=None if targets.is_weights is None else pad(targets.is_weights))
    loss = out.loss
    tokens, actor_tokens = f.mask.sum().item(), actor_mask.sum().item()
    stats.policy_loss += out.loss.item()
    stats.clip_fraction += out.clip_fraction * actor_tokens
    stats.approx_kl += out.approx_kl * actor_tokens
    stats.action_tokens += tokens
    stats.actor_tokens += actor_tokens
    if scored.ref_logprobs is not None:
        per_token = L.kl_penalty(f.logprobs, pad(scored.ref_logprobs), cfg.regularisers.kl_estimator)
        loss = loss + cfg.regularisers.kl_coef * L.aggregate(per_token, f.mask, cfg.loss.agg, denom)
        stats.kl += (per_token * f.mask).sum().item()
    if f.entropy is not None and f.entropy.numel():
        stats.entropy += f.entropy.sum().item()
        if cfg.regularisers.entropy_coef:
            ent = torch.zeros_like(f.logprobs).masked_scatter(f.mask.bool(), f.entropy)
            loss = loss - cfg.regularisers.entropy_coef * L.aggregate(ent, f.mask, cfg.loss.agg, denom)
    if cfg.regularisers.epo_coef and targets.traj_ids is not None and f.entropy is not None and f.entropy.numel():
        loss = loss + _epo_loss(cfg, f, pad(targets.traj_ids), targets.entropy_running, denom, len(index), stats)
    if f.values is not None and targets.returns is not None:
        vmask = pad(targets.value_mask)
        v = L.value_loss(f.values, pad(scored.old_values), pad(targets.returns), vmask, value_clip, "token-mean", vden)
        loss = loss + cfg.value.coef * v
        stats.value_loss += v.item()
    return loss


def _epo_loss(cfg: AlgorithmSection, f: Forward, traj: torch.Tensor, running: float | None, denom: float,
              n_samples: int, stats: UpdateStats) -> torch.Tensor:
    """EPO's terms on one micro-batch, weighted by its share of the mini-batch (its action tokens for
    token-mean, its samples for the seq-mean modes) so micro-batches add up as the policy loss does."""
    ent = torch.zeros_like(f.logprobs).masked_scatter(f.mask.bool(), f.entropy)
    reg = cfg.regularisers
    out = L.epo_regulariser(ent, f.mask, traj.long().clamp(min=0), reg.epo_coef, running, reg.epo_band,
                            reg.epo_smooth_coef)
    stats.epo_entropy += out.entropy
    stats.epo_weight += out.weight
    stats.epo_micro += 1
    share = {"token-mean": f.mask.sum().item(), "seq-mean-token-sum-norm": float(f.mask.numel())}.get(
        cfg.loss.agg, float(n_samples)) / denom
    return out.loss * share


def ppo_update(c: Components, samples: Sequence[Sample], scored: Scored, targets: Targets, cfg: TrainConfig,
               shuffle_seed: int, dist: Any = None) -> UpdateStats:
    """`ppo_epochs` passes; each splits the batch into `mini_batches` optimizer steps, each accumulating
    gradients over micro-batches of `micro_batch_size` samples. Policy and critic gradients are clipped
    separately (a critic's large early errors must not shrink the policy's step). With `dist` (a
    train.distributed context) each rank runs its share of every mini-batch through the DDP wrapper
    or the FSDP-sharded model."""
    from agentgym.train import distributed as D

    model = dist.model if dist is not None else c.model
    critic_model = dist.critic if dist is not None else c.critic
    stats, algo, tc, optim = UpdateStats(), cfg.algorithm, cfg.train, cfg.optim
    if tc.token_budget is not None:
        from agentgym.train.updaters.token_rows import PackedTokens

        stats.packed = PackedTokens()
    rng = np.random.default_rng(shuffle_seed)  # its own stream: resume reproduces the same order
    actor = D.trained_params(c.model)
    critic = D.trained_params(c.critic) if c.critic is not None else []
    critic_norm = optim.critic_max_grad_norm if optim.critic_max_grad_norm is not None else optim.max_grad_norm
    value_clip = value_clip_range(algo, targets)
    for _ in range(tc.ppo_epochs):
        order = rng.permutation(len(samples))
        for mini in np.array_split(order, min(tc.mini_batches, len(samples))):
            stats.policy_loss = stats.value_loss = 0.0  # report the last mini-batch's losses
            denom = _denom(samples, mini, algo.loss.agg, targets)
            vden = max(sum(float(targets.value_mask[i].sum()) for i in mini), 1.0) if targets.value_mask else 1.0
            c.optimizer.zero_grad(set_to_none=True)
            micros = D.local_micro_batches(dist, samples, mini.tolist(), tc.micro_batch_size) \
                if tc.token_budget is None else _micro_batches(samples, mini.tolist(), tc, critic_model, dist)
            for k, index in enumerate(micros):
                # an empty micro-batch (FSDP, a rank with fewer) reruns the first with zero loss: the
                # rank still joins every gather and reduce, adds nothing and reports nothing
                run, scale = (index, D.loss_scale(dist)) if index else (micros[0], 0.0)
                with D.grad_sync(dist, last=k == len(micros) - 1):
                    f = _forward(model, critic_model, samples, run, c.device, cfg.rollout.temperature, c.pad_id,
                                 tc.token_budget, True, stats.packed)
                    loss = micro_loss(algo, f, run, scored, targets, (denom, vden), value_clip,
                                      stats if index else UpdateStats())
                    (loss * scale).backward()
            stats.grad_norm += D.clip_grad_norm(actor, optim.max_grad_norm)
            if critic:
                stats.critic_grad_norm += D.clip_grad_norm(critic, critic_norm)
            c.optimizer.step()
            if c.scheduler is not None:
                c.scheduler.step()
            stats.steps += 1
    if dist is not None:  # each rank summed its own micro-batches
        keys = ("policy_loss", "value_loss", "entropy", "kl", "approx_kl", "clip_fraction", "action_tokens",
                "actor_tokens")
        for key, total in zip(keys, D.all_reduce_sum(dist, [getattr(stats, k) for k in keys])):
            setattr(stats, key, type(getattr(stats, key))(total))
    return stats
