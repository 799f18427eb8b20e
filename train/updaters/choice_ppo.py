"""Exact PPO for acting among admissible actions (`rollout.action_mode: admissible`).

The rollout policy (`policies/admissible.py`) samples action a from π'(a) = exp(s(a)) / Σ_b exp(s(b)),
s(b) = the model's total log-likelihood of candidate b's tokens after the turn's prompt. So the update
must use that distribution: the ratio of a turn is π'_new(a) / π'_old(a), whose gradient reaches every
candidate through the normaliser, not only the chosen tokens. This module computes log π'(a) for every
turn of a trajectory with one forward pass over the whole conversation followed by every turn's candidates
side by side, a tree attention mask letting each see the conversation up to its own turn's prompt,
and runs the clipped PPO objective per turn with the turn advantages of the configured estimator.
A candidate the policy wrote itself (a filled template, `ChoiceTurn.written`) adds its text's log-likelihood to
its log π'(a): the action was written, then chosen (choice_rows.turn_logprobs).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from agentgym.train.batch import Components, TrainConfig
from agentgym.train.estimators.targets import turn_advantages
from agentgym.train.health import signal_figures
from agentgym.train.updaters.choice_rows import (Shortcuts, action_logprob, choice_part, pack_groups, packed_block,
                                                  packed_choice_logprobs, packed_trunk, packed_written,
                                                  reference_is_policy, turn_logprobs)
from agentgym.train.updaters.cost import UpdateCost
from agentgym.trajectory import Trajectory, TurnTable


@dataclass(frozen=True)
class ChoiceTurn:
    """One admissible-action choice: where it sits in its sequence and what it chose among."""

    row: int                              # turn-table row (advantage index)
    prompt_len: int                       # the candidates start at this position of the sequence
    candidates: tuple[tuple[int, ...], ...]
    chosen: int
    episode: int = 0                      # which trajectory of the batch it belongs to (loss aggregation)
    written: int | None = None            # the candidate the policy wrote itself (Choice.written)


@dataclass(frozen=True)
class ChoiceSequence:
    ids: tuple[int, ...]                  # the conversation up to (at least) the last turn's prompt
    turns: tuple[ChoiceTurn, ...]


def choice_sequences(trajectories: Sequence[Trajectory], layout: str, use_labels: bool = False
                     ) -> list[ChoiceSequence]:
    """Each turn that chose among given actions (its `Turn.choice`), with the candidates and the index the
    loss takes: the candidate the turn sent, or with `use_labels` the choice's label (an expert's, which a
    noisy demonstration may not have played). Turns without a choice (free generation) are skipped, and so are
    a branch's copies of its trunk's turns (`Trajectory.shared_prefix`: trained once, in the trunk)."""
    out, row = [], 0
    for episode, traj in enumerate(trajectories):
        turns = [(turn, ChoiceTurn(row + turn.index, len(turn.prompt_ids), turn.choice.candidates,
                                   turn.choice.target if use_labels else turn.choice.pick, episode,
                                   turn.choice.written))
                 for turn in traj.turns if turn.choice is not None and turn.index >= traj.shared_prefix]
        row += len(traj.turns)
        if turns and layout == "trajectory":  # one pass over the last prompt covers every turn's prompt
            out.append(ChoiceSequence(tuple(traj.turns[-1].prompt_ids), tuple(c for _, c in turns)))
        else:
            out += [ChoiceSequence(tuple(turn.prompt_ids), (c,)) for turn, c in turns]
    return out


def _row(seq: ChoiceSequence, device: Any, dtype: Any, tree: bool = False) -> tuple[Any, Any, Any]:
    """(block, position ids, mask) of a sequence's one-row layout: the dense 4-D tree mask, or with `tree`
    its pieces (policies/tree_attention.py; the dense one when the row cannot be cut)."""
    from agentgym.policies.candidate_block import turns_block
    from agentgym.policies.tree_attention import tree_mask

    block = turns_block(0, seq.ids, [(t.prompt_len, t.candidates) for t in seq.turns])
    mask = tree_mask(block, dtype, device) if tree else None
    return block, torch.tensor([block.positions], device=device), mask or block.mask(dtype, device)


def sequence_trunk(model: Any, seq: ChoiceSequence, device: Any, tree: bool = True) -> Any:
    """The frozen trunk's output for `seq`'s row (policies/trunk.py), computed once and reused by every
    pass over the sequence (SFT epochs, PPO epochs, the old-log-prob pass); None when nothing is frozen.
    `tree`: attention in the tree's pieces (policies/tree_attention.py) rather than the dense masked product."""
    from agentgym.policies.trunk import trunk_hidden

    block, positions, mask = _row(seq, device, next(model.parameters()).dtype, tree)
    return trunk_hidden(model, block.ids, positions, mask)


def sequence_choice_logprobs(model: Any, seq: ChoiceSequence, device: Any, temperature: float = 1.0,
                             trunk: Any = None, tree: bool = True, top: Any = None) -> list[torch.Tensor]:
    """log π'(candidate) for each turn of `seq` (a tensor of shape [N_k] per turn), differentiable:
    π'(b) = softmax(s(b) / temperature), s(b) the candidate's summed log-likelihood, as the rollout samples.

    ONE forward pass: the conversation, then every turn's candidates in the same row under a tree mask
    (policies/candidate_block.py) that lets a candidate see the conversation up to its turn's prompt and
    its own earlier tokens only. Nothing is repeated per candidate or per turn. With `trunk` (from
    `sequence_trunk`) only the trainable top layers run, their attention in the tree's pieces unless `tree`
    is False (policies/tree_attention.py); a trunk computed with other weights is refused. `top`: the
    model whose top layers and head score (a KL reference sharing `model`'s trunk); `model` by default."""
    from agentgym.policies.candidate_block import candidate_totals, decoder_and_head, target_logprobs
    from agentgym.policies.trunk import top_hidden

    scorer = model if top is None else top
    decoder, head = decoder_and_head(scorer)
    block, positions, mask = _row(seq, device, next(p for p in model.parameters()).dtype, tree and trunk is not None)
    if trunk is not None:
        hidden = top_hidden(model, trunk, block.ids, positions, mask, top)
    else:
        hidden = decoder(input_ids=torch.tensor([block.ids], device=device), position_ids=positions,
                         attention_mask=mask).last_hidden_state
    read = hidden[0, torch.tensor(block.read, device=device)]
    logprobs = torch.log_softmax(head(read).float(), -1)
    totals = candidate_totals(target_logprobs(logprobs, block), block)
    # the rollout samples softmax(s / T) over the candidates' summed log-likelihoods s (admissible.renormalised):
    # T divides the sums, not each token's logits (which would be another distribution whenever T != 1)
    return turn_logprobs(totals, block.turn_sizes, temperature, [t.written for t in seq.turns])


@dataclass
class ChoiceStats:
    policy_loss: float = 0.0
    kl: float = 0.0                       # Σ over turns of KL(π'_new || π'_ref) (the configured estimate)
    clip_fraction: float = 0.0
    entropy: float = 0.0
    grad_norm: float = 0.0
    turns: int = 0
    steps: int = 0
    # how far the rollout's sampling is from greedy evaluation, on the first epoch (the rollout's weights)
    first_turns: int = 0
    greedy_picks: int = 0                 # turns whose sampled pick was the argmax candidate
    picked_prob: float = 0.0              # Σ π'(pick)
    expert_ce: float = 0.0                # expert replay: Σ over steps of the demonstrations' turn-mean cross-entropy
    expert_turns: int = 0
    expert_best: int = 0                  # demonstration turns whose best-scored action was the expert's
    cost: UpdateCost = field(default_factory=UpdateCost)

    def as_metrics(self) -> dict[str, float]:
        t = max(self.turns, 1)
        first = max(self.first_turns, 1)
        expert = {"expert/cross_entropy": self.expert_ce / max(self.steps, 1),
                  "expert/agreement": self.expert_best / self.expert_turns} if self.expert_turns else {}
        return {"policy_loss": self.policy_loss / t, "kl": self.kl / t, "clip_fraction": self.clip_fraction / t,
                "entropy": self.entropy / t, "grad_norm": self.grad_norm / max(self.steps, 1),
                "choice/greedy_pick_share": self.greedy_picks / first, "choice/picked_prob": self.picked_prob / first,
                "optimizer_steps": float(self.steps), "choice_turns": float(self.turns), **expert,
                **self.cost.as_metrics()}


def choice_update(c: Components, seqs: Sequence[ChoiceSequence], advantages: np.ndarray, config: TrainConfig,
                  shuffle_seed: int, expert: Any = None, shortcuts: Shortcuts | None = None) -> ChoiceStats:
    """PPO epochs over the choice turns: clipped ratio π'_new(a)/π'_old(a), turn-mean loss per mini-batch
    (the same typed seams as `update.ppo_update`). The frozen trunk's output comes from the rollout's own
    scoring passes when the policy kept it (policies/rollout_trunk.py), else it runs once per sequence (no
    grad); every pass runs only the trainable top (policies/trunk.py); `stats.cost` says where time went.
    With `algorithm.regularisers.kl_coef` > 0 each turn's loss adds kl_coef x KL(π'_new || π'_ref) toward the
    reference policy (the weights training started from), scored once per update (`reference_logprobs`).
    `expert` (train/expert_replay.py's ExpertReplay): every step also takes the expert's choices on a few
    demonstrations, weighted by algorithm.regularisers.expert_coef. `shortcuts` (train/updaters/choice_rows.py):
    a mini-batch's episodes packed by shared prefix, the reference's pass skipped while it is the policy; both
    exact, on by default (choice_rows.PLAIN: one row per episode, the reference always run)."""
    model, optimizer, scheduler, device = c.model, c.optimizer, c.scheduler, c.device
    cfg, train_cfg, max_grad_norm = config.algorithm, config.train, config.optim.max_grad_norm
    temperature = config.rollout.temperature
    if shortcuts is None:  # train.token_budget caps a packed row (its backward's memory grows with it)
        shortcuts = Shortcuts(row_tokens=train_cfg.token_budget) if train_cfg.token_budget else Shortcuts()
    stats = ChoiceStats()
    cost = stats.cost
    with cost.timed("trunk"):
        kept = [_rollout_trunk(c.policy, model, s) for s in seqs]  # the rollout's own trunk outputs, when kept
        trunks = [k if k is not None else sequence_trunk(model, s, device) for k, s in zip(kept, seqs)]
    count = _Counter(model, cost, trunks[0] is not None if trunks else False)
    for i, k in enumerate(kept):
        count.sequence(seqs, i, reused=k is not None)
    kl_coef, kl_estimator = cfg.regularisers.kl_coef, cfg.regularisers.kl_estimator
    everything = _partition(seqs, range(len(seqs)), shortcuts)
    with cost.timed("reference"):
        reuse = kl_coef > 0 and shortcuts.reuse_reference and reference_is_policy(c)
        reference: list[Any] | None = reference_logprobs(c, seqs, trunks, temperature, everything) \
            if kl_coef > 0 and not reuse else None
    cost.reference_reused += int(reuse)
    if reference is not None:
        for members in everything:
            count.rows("reference", seqs, members)
    with cost.timed("expert"):
        demos = expert.draw(shuffle_seed, model, device) if expert is not None else None
    # one epoch of one mini-batch: every forward runs on the rollout's weights, so the old log-probs are
    # the new ones detached (ratio 1, gradient intact) and a whole no-grad pass over the batch is saved
    on_policy = train_cfg.ppo_epochs == 1 and min(train_cfg.mini_batches, len(seqs)) == 1
    old: list[Any] = [None] * len(seqs)
    start_logps: list[Any] = [None] * len(seqs)
    if not on_policy:
        with torch.no_grad(), cost.timed("forward"):
            for members in everything:
                for i, logps in zip(members, _logprobs(model, seqs, members, trunks, device, temperature)):
                    old[i] = [action_logprob(lp, t).item() for lp, t in zip(logps, seqs[i].turns)]
                    start_logps[i] = logps  # the weights before any step: with `reuse`, the reference's
                count.rows("forward", seqs, members)
        if reuse:
            reference = start_logps
    params = [p for p in model.parameters() if p.requires_grad]
    rng = np.random.default_rng(shuffle_seed)
    weights = turn_weights(seqs, cfg.loss.agg)
    for epoch in range(train_cfg.ppo_epochs):
        order = rng.permutation(len(seqs))
        for mini in np.array_split(order, min(train_cfg.mini_batches, len(seqs))):
            n_turns = max(sum(len(seqs[i].turns) for i in mini), 1)
            total_weight = sum(float(weights[i].sum()) for i in mini) or 1.0
            optimizer.zero_grad(set_to_none=True)
            for members in _partition(seqs, mini, shortcuts):
                with cost.timed("forward"):
                    row_loss: Any = 0.0
                    for i, logps in zip(members, _logprobs(model, seqs, members, trunks, device, temperature)):
                        seq = seqs[i]
                        new = torch.stack([action_logprob(lp, t) for lp, t in zip(logps, seq.turns)])
                        choices = [choice_part(lp, t) for lp, t in zip(logps, seq.turns)]
                        adv = torch.tensor([float(advantages[t.row]) for t in seq.turns], device=new.device)
                        before = new.detach() if old[i] is None else torch.tensor(old[i], device=new.device)
                        ratio = torch.exp(new - before)
                        clipped = ratio.clamp(1 - cfg.loss.clip_low, 1 + cfg.loss.clip_high)
                        weight = torch.tensor(weights[i] / total_weight, device=new.device, dtype=new.dtype)
                        loss = -(torch.minimum(ratio * adv, clipped * adv) * weight).sum()
                        ent = torch.stack([-(lp.exp() * lp).sum() for lp in choices])
                        if kl_coef > 0:  # the reference's, or (`reuse`, one step) the policy's own detached
                            ref = reference[i] if reference is not None else [lp.detach() for lp in logps]
                            kl = choice_kl(logps, ref, seq.turns, kl_estimator)
                            loss = loss + kl_coef * (kl * weight).sum()
                            stats.kl += float(kl.detach().sum())
                        if cfg.regularisers.entropy_coef:
                            loss = loss - cfg.regularisers.entropy_coef * (ent * weight).sum()
                        row_loss = row_loss + loss
                        stats.policy_loss += float(loss.item()) * n_turns
                        stats.clip_fraction += float(((ratio - clipped).abs() > 1e-8).float().sum())
                        stats.entropy += float(ent.detach().sum())
                        stats.turns += len(seq.turns)
                        if epoch == 0:
                            stats.first_turns += len(seq.turns)
                            stats.greedy_picks += sum(int(lp.argmax()) == t.chosen for lp, t in zip(choices, seq.turns))
                            stats.picked_prob += sum(float(lp[t.chosen].detach().exp())
                                                     for lp, t in zip(choices, seq.turns))
                with cost.timed("backward"):
                    row_loss.backward()
                count.rows("forward", seqs, members, backward=True, first=epoch == 0)
            if demos is not None:
                with cost.timed("expert"):
                    ce, turns, best = demos.backward(model, device)
                stats.expert_ce += ce
                stats.expert_turns += turns
                stats.expert_best += best
            with cost.timed("optimizer"):
                stats.grad_norm += float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
            stats.steps += 1
    return stats


def reference_logprobs(c: Components, seqs: Sequence[ChoiceSequence], trunks: Sequence[Any], temperature: float,
                       rows: Sequence[Sequence[int]] | None = None) -> list[list[torch.Tensor]]:
    """log π'_ref over each turn's candidates (no grad): the KL term's anchor, scored once per update. The
    reference's top layers run on the trained model's cached trunk, which is the reference's own as long as
    the layers below the trainable block hold the same weights in both (checked: else StaleTrunkError).
    `rows`: the sequences as packed rows (choice_rows.pack_groups); one row each by default."""
    from agentgym.policies.trunk import StaleTrunkError, shares_trunk

    if c.ref is None:
        raise ValueError("algorithm.regularisers.kl_coef > 0 needs a reference model: build the components with "
                         "train.setup.build_components (make_reference)")
    out: list[Any] = [None] * len(seqs)
    with torch.no_grad(), c.ref() as ref:
        if any(t is not None for t in trunks) and not shares_trunk(ref, c.model):
            raise StaleTrunkError("the KL reference's frozen layers differ from the trained model's, so the cached "
                                  "trunk is not the reference's: keep the layers below model.train_layers frozen")
        for members in rows if rows is not None else [[i] for i in range(len(seqs))]:
            for i, logps in zip(members, _logprobs(c.model, seqs, members, trunks, c.device, temperature, ref)):
                out[i] = logps
    return out


def _partition(seqs: Sequence[ChoiceSequence], order: Any, shortcuts: Shortcuts) -> list[list[int]]:
    """`order`'s sequences as the rows one pass runs: packed by shared prefix, or one each."""
    if not shortcuts.pack:
        return [[int(i)] for i in order]
    return pack_groups(seqs, [int(i) for i in order], shortcuts.row_tokens)


def _logprobs(model: Any, seqs: Sequence[ChoiceSequence], members: Sequence[int], trunks: Sequence[Any], device: Any,
              temperature: float, ref: Any = None) -> list[list[torch.Tensor]]:
    """Per member sequence, its turns' log π' from one pass over their row (packed when several): the
    trained model's, or `ref`'s (the reference's top on `model`'s trunk, or its own full forward without one)."""
    own = [trunks[i] for i in members]
    if len(members) > 1:
        block = packed_block(seqs, members)
        written = packed_written(seqs, members, block)
        trunk = packed_trunk(block, own)
        if trunk is not None or all(t is None for t in own):
            if trunk is None and ref is not None:
                return packed_choice_logprobs(ref, block, device, temperature, written=written)
            return packed_choice_logprobs(model, block, device, temperature, trunk, ref, written)
    if ref is not None:
        return [sequence_choice_logprobs(model, seqs[i], device, temperature, t, top=ref) if t is not None
                else sequence_choice_logprobs(ref, seqs[i], device, temperature) for i, t in zip(members, own)]
    return [sequence_choice_logprobs(model, seqs[i], device, temperature, t) for i, t in zip(members, own)]


def choice_kl(logps: Sequence[torch.Tensor], ref: Sequence[torch.Tensor], turns: Sequence[ChoiceTurn],
              estimator: str) -> torch.Tensor:
    """Per turn, KL(π'_new || π'_ref) over the turn's candidates: `exact` sums π'_new(b) log(π'_new(b) / π'_ref(b))
    over every candidate b (the whole distribution is at hand; a written candidate's writing is not in it: its
    other texts were never scored); `k1` / `k3` estimate it from the sent action alone (its writing included),
    as token PPO does from sampled tokens (updaters/losses.py)."""
    from agentgym.train.updaters.losses import kl_penalty

    if estimator == "exact":
        return torch.stack([(choice_part(lp, t).exp() * (choice_part(lp, t) - choice_part(r, t))).sum()
                            for lp, r, t in zip(logps, ref, turns)])
    picked = torch.stack([action_logprob(lp, t) for lp, t in zip(logps, turns)])
    return kl_penalty(picked, torch.stack([action_logprob(r, t) for r, t in zip(ref, turns)]).to(picked), estimator)


def _rollout_trunk(policy: Any, model: Any, seq: ChoiceSequence) -> Any:
    """The trunk output the rollout policy kept for `seq`'s row (policies/rollout_trunk.py), or None."""
    keep = getattr(policy, "rollout_trunk", None)
    if keep is None or not getattr(policy, "keep_trunk", False):
        return None
    return keep(model, seq.ids, [(t.prompt_len, t.candidates) for t in seq.turns])


def turn_weights(seqs: Sequence[ChoiceSequence], agg: str) -> list[np.ndarray]:
    """Each turn's weight in the loss (normalised per mini-batch): 1 under `token-mean` (a mean over turns);
    1 / (its trajectory's turns) under `seq-mean-token-mean` (a mean over trajectories of their turn-means),
    so a 24-turn failure weighs as much as a 10-turn success rather than 2.4x as much."""
    if agg == "token-mean":
        return [np.ones(len(s.turns)) for s in seqs]
    if agg != "seq-mean-token-mean":
        raise ValueError(f"the choice loss aggregates turns by token-mean or seq-mean-token-mean, not {agg!r}")
    counts: dict[int, int] = {}
    for s in seqs:
        for t in s.turns:
            counts[t.episode] = counts.get(t.episode, 0) + 1
    return [np.array([1.0 / counts[t.episode] for t in s.turns]) for s in seqs]


class _Counter:
    """Tokens and FLOPs of the update's passes (updaters/cost.py), each counted as the pass runs: the row's
    attention as computed (in pieces with a cached trunk, dense without), the trunk once per sequence unless
    the rollout's was reused."""

    def __init__(self, model: Any, cost: UpdateCost, cached: bool):
        from agentgym.policies.trunk import trainable_start

        self.config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.cost, self.cached = cost, cached
        self.frozen = trainable_start(model)   # without a cached trunk every pass runs those layers too
        self.start = self.frozen if cached else 0

    def sequence(self, seqs: Sequence[ChoiceSequence], i: int, reused: bool) -> None:
        from agentgym.policies.packed_rows import attention_pairs

        block = packed_block(seqs, [i])
        self.cost.sequences += 1
        self.cost.trunk_reused += int(reused)
        if self.cached and not reused:
            self.cost.add_pass("trunk", self.config, len(block.ids), 0, self.start, attention_pairs(block))

    def rows(self, phase: str, seqs: Sequence[ChoiceSequence], members: Sequence[int], backward: bool = False,
             first: bool = False) -> None:
        from agentgym.policies.packed_rows import attention_pairs

        block = packed_block(seqs, members)
        layers = self.config.num_hidden_layers - self.start
        dense = len(members) == 1 and not self.cached  # a lone row without a trunk runs the dense mask
        self.cost.add_pass(phase, self.config, len(block.ids), len(block.read), layers,
                           attention_pairs(block, dense), backward)
        if not self.cached and self.frozen:
            self.cost.trunk_tokens += len(block.ids)
        if first:
            self.cost.row_tokens += len(block.ids)
            self.cost.own_tokens += block.own_tokens
            self.cost.tree_tokens += len(block.ids) - block.conversation


def choice_step(c: Components, config: TrainConfig, batch: Sequence[Trajectory], iteration: int,
                expert: Any = None, shortcuts: Shortcuts | None = None) -> dict[str, float]:
    """One iteration's choice update of the turns in `batch` that chose among admissible actions (and with
    `expert`, an ExpertReplay, the expert's choices on a few demonstrations)."""
    seqs = choice_sequences(batch, config.rollout.layout)
    if not seqs:
        return {"choice_turns": 0.0}
    advantages = turn_advantages(config.algorithm, TurnTable.from_trajectories(batch), batch)
    stats = choice_update(c, seqs, advantages, config, shuffle_seed=config.train.seed * 1_000_003 + iteration,
                          expert=expert, shortcuts=shortcuts)
    rows = [[t.row for t in s.turns] for s in seqs]
    adv = advantages[[r for seq_rows in rows for r in seq_rows]]
    # zero_variance_group_share: groups whose episodes all scored alike (only GiGPO's step groups can teach there)
    return {**stats.as_metrics(), "advantage_mean": float(np.mean(adv)), "advantage_std": float(np.std(adv)),
            **advantage_balance(adv), **signal_figures(batch, rows, [advantages[r] for r in rows])}


def advantage_balance(adv: np.ndarray) -> dict[str, float]:
    """Which way the turn-mean loss pushes: the share of turns with a non-zero advantage, and the positive
    advantages' share of Σ|A| (below 0.5, pushing chosen actions down outweighs pulling them up)."""
    total = float(np.abs(adv).sum())
    return {"choice/live_turn_share": float(np.mean(adv != 0)) if adv.size else 0.0,
            "choice/positive_weight_share": float(adv[adv > 0].sum()) / total if total else 0.0}
