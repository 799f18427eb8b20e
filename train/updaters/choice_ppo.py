"""Exact PPO for acting among admissible actions (`rollout.action_mode: admissible`).

The rollout policy (`policies/admissible.py`) samples action a from π'(a) = exp(s(a)) / Σ_b exp(s(b)),
s(b) = the model's total log-likelihood of candidate b's tokens after the turn's prompt. So the update
must use that distribution: the ratio of a turn is π'_new(a) / π'_old(a), whose gradient reaches every
candidate through the normaliser, not only the chosen tokens. This module computes log π'(a) for every
turn of a trajectory with one forward pass over the whole conversation followed by every turn's candidates
side by side, a tree attention mask letting each see the conversation up to its own turn's prompt,
and runs the clipped PPO objective per turn with the turn advantages of the configured estimator.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from agentgym.train.config import TrainConfig
from agentgym.train.setup import Components
from agentgym.train.estimators.targets import turn_advantages
from agentgym.trajectory import Trajectory, TurnTable


@dataclass(frozen=True)
class ChoiceTurn:
    """One admissible-action choice: where it sits in its sequence and what it chose among."""

    row: int                              # turn-table row (advantage index)
    prompt_len: int                       # the candidates start at this position of the sequence
    candidates: tuple[tuple[int, ...], ...]
    chosen: int


@dataclass(frozen=True)
class ChoiceSequence:
    ids: tuple[int, ...]                  # the conversation up to (at least) the last turn's prompt
    turns: tuple[ChoiceTurn, ...]


def choice_sequences(trajectories: Sequence[Trajectory], choices: dict[tuple[int, ...], Any], layout: str,
                     label_from_record: bool = False) -> list[ChoiceSequence]:
    """Pair each turn with the candidates the policy chose among (looked up by its prompt ids);
    turns without a record (free generation, no admissible list) are skipped. The chosen index is the
    candidate the turn sent, or with `label_from_record` the record's own (an expert's label, which a
    noisy demonstration may not have played)."""
    out, row = [], 0
    for traj in trajectories:
        turns = []
        for turn in traj.turns:
            record = choices.get(tuple(turn.prompt_ids))
            if record is not None:
                cands, pick = record
                # the G samples of a task share their first prompts, so one record can serve several turns:
                # the candidate this turn actually sent is its own pick
                response = list(turn.response_ids)
                if not label_from_record:
                    pick = next((i for i, c in enumerate(cands) if list(c) == response), pick)
                turns.append((turn, ChoiceTurn(row + turn.index, len(turn.prompt_ids), tuple(map(tuple, cands)),
                                               pick)))
        row += len(traj.turns)
        if turns and layout == "trajectory":  # one pass over the last prompt covers every turn's prompt
            out.append(ChoiceSequence(tuple(traj.turns[-1].prompt_ids), tuple(c for _, c in turns)))
        else:
            out += [ChoiceSequence(tuple(turn.prompt_ids), (c,)) for turn, c in turns]
    return out


def sequence_choice_logprobs(model: Any, seq: ChoiceSequence, device: Any,
                             temperature: float = 1.0) -> list[torch.Tensor]:
    """log π'(candidate) for each turn of `seq` (a tensor of shape [N_k] per turn), differentiable.

    ONE forward pass: the conversation, then every turn's candidates in the same row under a tree mask
    (policies/candidate_block.py) that lets a candidate see the conversation up to its turn's prompt and
    its own earlier tokens only. Nothing is repeated per candidate or per turn."""
    from agentgym.policies.candidate_block import candidate_totals, decoder_and_head, target_logprobs, turns_block

    decoder, head = decoder_and_head(model)
    block = turns_block(0, seq.ids, [(t.prompt_len, t.candidates) for t in seq.turns])
    dtype = next(p for p in model.parameters()).dtype
    hidden = decoder(input_ids=torch.tensor([block.ids], device=device),
                     position_ids=torch.tensor([block.positions], device=device),
                     attention_mask=block.mask(dtype, device)).last_hidden_state
    read = hidden[0, torch.tensor(block.read, device=device)]
    logprobs = torch.log_softmax(head(read).float() / temperature, -1)
    totals = candidate_totals(target_logprobs(logprobs, block), block)
    return [torch.log_softmax(scores, -1) for scores in totals.split(list(block.turn_sizes))]


@dataclass
class ChoiceStats:
    policy_loss: float = 0.0
    clip_fraction: float = 0.0
    entropy: float = 0.0
    grad_norm: float = 0.0
    turns: int = 0
    steps: int = 0

    def as_metrics(self) -> dict[str, float]:
        t = max(self.turns, 1)
        return {"policy_loss": self.policy_loss / t, "clip_fraction": self.clip_fraction / t,
                "entropy": self.entropy / t, "grad_norm": self.grad_norm / max(self.steps, 1),
                "optimizer_steps": float(self.steps), "choice_turns": float(self.turns)}


def choice_update(c: Components, seqs: Sequence[ChoiceSequence], advantages: np.ndarray, config: TrainConfig,
                  shuffle_seed: int) -> ChoiceStats:
    """PPO epochs over the choice turns: clipped ratio π'_new(a)/π'_old(a), turn-mean loss per mini-batch
    (the same typed seams as `update.ppo_update`)."""
    model, optimizer, scheduler, device = c.model, c.optimizer, c.scheduler, c.device
    cfg, train_cfg, max_grad_norm = config.algorithm, config.train, config.optim.max_grad_norm
    temperature = config.rollout.temperature
    stats = ChoiceStats()
    # one epoch of one mini-batch: every forward runs on the rollout's weights, so the old log-probs are
    # the new ones detached (ratio 1, gradient intact) and a whole no-grad pass over the batch is saved
    on_policy = train_cfg.ppo_epochs == 1 and min(train_cfg.mini_batches, len(seqs)) == 1
    old: list[Any] = [None] * len(seqs)
    if not on_policy:
        with torch.no_grad():
            old = [[lp[t.chosen].item() for lp, t in zip(sequence_choice_logprobs(model, s, device, temperature),
                                                          s.turns)] for s in seqs]
    params = [p for p in model.parameters() if p.requires_grad]
    rng = np.random.default_rng(shuffle_seed)
    for _ in range(train_cfg.ppo_epochs):
        order = rng.permutation(len(seqs))
        for mini in np.array_split(order, min(train_cfg.mini_batches, len(seqs))):
            n_turns = max(sum(len(seqs[i].turns) for i in mini), 1)
            optimizer.zero_grad(set_to_none=True)
            for i in mini:
                seq = seqs[i]
                logps = sequence_choice_logprobs(model, seq, device, temperature)
                new = torch.stack([lp[t.chosen] for lp, t in zip(logps, seq.turns)])
                adv = torch.tensor([float(advantages[t.row]) for t in seq.turns], device=new.device)
                before = new.detach() if old[i] is None else torch.tensor(old[i], device=new.device)
                ratio = torch.exp(new - before)
                clipped = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
                loss = -torch.minimum(ratio * adv, clipped * adv).sum() / n_turns
                ent = torch.stack([-(lp.exp() * lp).sum() for lp in logps])
                if cfg.entropy_coef:
                    loss = loss - cfg.entropy_coef * ent.sum() / n_turns
                loss.backward()
                stats.policy_loss += float(loss.item()) * n_turns
                stats.clip_fraction += float(((ratio - clipped).abs() > 1e-8).float().sum())
                stats.entropy += float(ent.detach().sum())
                stats.turns += len(seq.turns)
            stats.grad_norm += float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            stats.steps += 1
    return stats


def choice_step(trainer: Any, batch: Sequence[Trajectory]) -> dict[str, float]:
    """The trainer's update when its policy records admissible-action choices (called from Trainer.step)."""
    cfg = trainer.cfg
    choices = trainer.policy.pop_choices()
    seqs = choice_sequences(batch, choices, cfg.rollout.layout)
    if not seqs:
        return {"choice_turns": 0.0}
    advantages = turn_advantages(cfg.algorithm, TurnTable.from_trajectories(batch), batch)
    stats = choice_update(trainer.c, seqs, advantages, cfg, shuffle_seed=cfg.train.seed * 1_000_003 + trainer.iteration)
    rows = [t.row for s in seqs for t in s.turns]
    return {**stats.as_metrics(), "advantage_mean": float(np.mean(advantages[rows])),
            "advantage_std": float(np.std(advantages[rows]))}
