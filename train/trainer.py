"""The trainer: rollout → rewards → advantages → PPO epochs → push weights → evaluate → checkpoint.

    from agentgym.train.config import load_config
    from agentgym.train.trainer import train
    run_dir = train(load_config("toy_learning", ["train.iterations=20"]))

Orchestration only: the maths lives in estimators/ (advantages.py, targets.py) and updaters/losses.py,
the token bookkeeping in samples.py, the gradient steps in updaters/, the files in checkpoint.py and metrics.py.
"""
from __future__ import annotations

import copy
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from agentgym.errors import ConfigError
from agentgym.rubric import apply_group_rewards, group_rewards_from_config
from agentgym.rollout import RolloutConfig, next_prompt_ids, rollout
from agentgym.train import checkpoint as ck
from agentgym.train.checkpoint import seed_everything
from agentgym.train import distributed as D
from agentgym.train.estimators.advantages import last_rows
from agentgym.policy import TrainablePolicy
from agentgym.train.updaters.choice_ppo import choice_step
from agentgym.train.updaters.lookahead import lookahead_step
from agentgym.train.guardrails import BEFORE_UPDATE, GUARDS, drop_mixed_groups
from agentgym.train.health import reward_sanity, rollout_health, signal_figures, trends
from agentgym.train.updaters import updater_for
from agentgym.train.algorithm import AlgorithmSection
from agentgym.train.config import TrainConfig
from agentgym.train import eval_records
from agentgym.train import merge
from agentgym.train.metrics import MetricsWriter, rollout_metrics, write_rollouts
from agentgym.train.samples import Sample, build_samples, verify_samples
from agentgym.train.setup import build_components, make_optimizer, make_policy
from agentgym.train.updaters.losses import running_entropy
from agentgym.train.estimators.targets import build_targets, shape_rewards, turn_advantages, with_epo
from agentgym.train.batch import Scored, Targets
from agentgym.train.updaters.token_ppo import ppo_update, score, state_values
from agentgym.trajectory import Trajectory, TurnTable, split_groups


def train(config: TrainConfig) -> Path:
    """Train with `config` and return the run directory (metrics.jsonl, checkpoints)."""
    trainer = Trainer(config)
    try:
        trainer.run()
    finally:
        trainer.close()
    return trainer.run_dir


def turn_cap(config: TrainConfig, iteration: int) -> int | None:
    """The turn limit of an iteration: the last schedule entry at or before it, else rollout.max_turns."""
    cap = config.rollout.max_turns
    for start, limit in config.algorithm.turn_cap_schedule:
        if iteration >= start:
            cap = int(limit)
    return cap


def keep_varied_groups(trajectories: Sequence[Trajectory], algorithm: AlgorithmSection | None = None
                       ) -> tuple[list[list[Trajectory]], int]:
    """Groups (in order) with something to learn from, and how many were dropped: returns not all equal, or
    with `algorithm.dynamic_sampling_keep=advantages`, some turn with a non-zero advantage under its estimator."""
    groups = split_groups(trajectories)
    if algorithm is not None and algorithm.dynamic_sampling_keep == "advantages":
        kept = [g for g in groups
                if np.any(np.abs(turn_advantages(algorithm, TurnTable.from_trajectories(g), g)) > 1e-9)]
    else:
        kept = [g for g in groups if len({round(t.total_reward, 9) for t in g}) > 1]
    return kept, len(groups) - len(kept)


def drop_failed(trajectories: Sequence[Trajectory], min_group: int) -> tuple[list[Trajectory], dict[str, float]]:
    """Trajectories minus failed episodes (env exception, timeout, policy error: not the agent's doing, so
    no signal to learn from) and minus groups left with fewer than `min_group` members."""
    ok = [t for t in trajectories if t.outcome != "error"]
    sizes: dict[int, int] = {}
    for t in ok:
        sizes[t.group_id] = sizes.get(t.group_id, 0) + 1
    kept = [t for t in ok if sizes[t.group_id] >= min_group]
    return kept, {"failed_dropped": float(len(trajectories) - len(ok)),
                  "groups_dropped_after_failures": float(sum(n < min_group for n in sizes.values()))}


class Trainer:
    def __init__(self, config: TrainConfig):
        self.cfg = config
        self.group_rewards = group_rewards_from_config(config.rollout.group_rewards)  # a bad one fails first
        self.run_dir = Path(config.train.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        refuse_an_earlier_run(self.run_dir, config.checkpoint.resume)
        seed_everything(config.train.seed)
        if config.train.torch_threads:
            torch.set_num_threads(config.train.torch_threads)
        D.pin_cuda_device(config.model.device)
        mode = config.train.distributed if config.train.distributed != "none" or D.launched_world() == 1 else "ddp"
        # fsdp shards the model in place and rebuilds the optimizer (and rank 0's rollout policy)
        self.dist, self.c = D.setup(mode, build_components(config, self.run_dir), config, make_policy=make_policy,
                                    make_optimizer=make_optimizer)
        c = self.c
        self.model, self.tokenizer, self.policy, self.chat = c.model, c.tokenizer, c.policy, c.chat
        if not isinstance(self.policy, TrainablePolicy):
            raise ConfigError(f"{type(self.policy).__name__} cannot be trained: a rollout policy must implement "
                              "agentgym.policy.TrainablePolicy (model, takes_adapters, update_weights, "
                              "update_adapter, sleep, close); subclass agentgym.policies.base.BasePolicy")
        if updater_for(config).name == "choice_ppo" and hasattr(self.policy, "keep_trunk"):
            # the rollout keeps the frozen trunk's output for the update (policies/rollout_trunk.py)
            self.policy.keep_trunk = getattr(self.policy, "model", None) is self.model
        self.critic, self.ref, self.optimizer, self.scheduler = c.critic, c.ref, c.optimizer, c.scheduler
        self.device, self.env_id, self.tools, self.pad_id = c.device, c.env_id, c.tools, c.pad_id
        self.iteration = 0
        self.next_seed = config.rollout.seed_start
        self.is_main = self.dist is None or self.dist.is_main
        self.epo_running: float | None = None  # EPO's running entropy H̄ (starts afresh on resume)
        self.archer = self._archer_learner()
        self.expert = self._expert_replay()
        self.health: list[dict[str, float]] = []  # per iteration: the figures the collapse trends read
        self.guard_details: dict[str, str] = {}  # an example a guard's message quotes (the first token mismatch)
        self.reward_range = config.train.guardrails.reward_range or self.c.reward_range
        self.async_side: Any = None  # train.mode=async: the rollout workers (train/async_rl.py)
        self._previous_eval: list[dict[str, Any]] = []  # the last periodic eval's per-task records
        # train.change_kept < 1: the weights training starts from (the config's policy, also on a resume) and,
        # once the last iteration merged them, the trained weights themselves (kept in the checkpoint)
        self._start_weights = merge.trainable_weights(self.model) if config.train.change_kept < 1 else None
        self._trained_weights: dict[str, Any] | None = None
        pending = self._resume()  # every rank restores the same state in place (DDP holds the same module)
        if config.train.mode == "async":
            self.async_side = self._async_rollouts(pending)
        lg = config.logging
        self.writer = None
        if self.is_main:
            ck.write_json(self.run_dir / "config.json", config.to_dict())
            self.writer = MetricsWriter(self.run_dir, config.train.iterations, self.iteration, lg.tensorboard,
                                        lg.wandb, lg.wandb_project, config.to_dict(), lg.progress)

    def _archer_learner(self) -> Any:
        """ArCHer's critic, target copy and replay buffer when the config trains with it, else None."""
        if updater_for(self.cfg).name != "archer":
            return None
        from agentgym.train.updaters.archer import ArcherLearner

        cfg, o = self.cfg, self.cfg.optim
        return ArcherLearner(cfg.algorithm.archer, cfg.algorithm.gamma, self.model, self.device, self.pad_id,
                             lr=o.critic_lr, max_grad_norm=o.critic_max_grad_norm or o.max_grad_norm,
                             critic_model=cfg.model.critic_model, seed=cfg.train.seed)

    def _expert_replay(self) -> Any:
        """The warm start's demonstrations, replayed in each choice update (algorithm.regularisers.expert_coef)."""
        if not self.cfg.algorithm.regularisers.expert_coef:
            return None
        from agentgym.train.expert_replay import ExpertReplay

        return ExpertReplay.from_config(self.cfg, self.chat)

    # ------------------------------------------------------------------ rollouts
    def _rollout_config(self, max_turns: int | None, temperature: float, seed: int | None) -> RolloutConfig:
        return self.cfg.rollout.engine_config(temperature=temperature, stop=getattr(self.chat, "stop_strings", ()),
                                              seed=seed, max_turns=max_turns,
                                              history_key_depth=max(self.cfg.rollout.history_key_depth,
                                                                    self.cfg.algorithm.hgpo.levels))

    def _rollout(self, seeds: list[int], group_size: int, config: RolloutConfig, split: str,
                 policy: Any = None) -> list[Trajectory]:
        return rollout(self.env_id, self.policy if policy is None else policy, self.chat, seeds, group_size, config,
                       env_kwargs=dict(self.cfg.rollout.env_kwargs) or None, start_group_id=seeds[0],
                       reset_options={"split": split})

    def collect(self, iteration: int) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """(training batch, the first round's rollouts for metrics, stats of what was dropped)."""
        r, a = self.cfg.rollout, self.cfg.algorithm
        config = self._rollout_config(turn_cap(self.cfg, iteration), r.temperature, self.cfg.train.seed)
        kept: list[list[Trajectory]] = []
        first: list[Trajectory] = []
        stats = {"failed_dropped": 0.0, "groups_dropped_after_failures": 0.0, "groups_not_one_task": 0.0}
        dropped, rounds = 0, 0
        while True:
            need = r.groups - len(kept)
            seeds = list(range(self.next_seed, self.next_seed + need))
            self.next_seed += need
            trajs = self._rollout(seeds, r.group_size, config, "train")
            if not first:  # the env's own rewards, before group rewards
                stats.update(reward_sanity(trajs, self.reward_range))
            if self.group_rewards:
                trajs = apply_group_rewards(trajs, self.group_rewards)
            first = first or trajs
            trajs, failed = drop_failed(trajs, min(2, r.group_size))
            trajs, mixed = drop_mixed_groups(trajs)  # a group must be G plays of one task
            stats = {k: stats[k] + failed.get(k, 0.0) for k in stats}
            stats["groups_not_one_task"] += mixed
            if not a.dynamic_sampling:
                return trajs, first, stats
            varied, n_dropped = keep_varied_groups(trajs, a)
            kept += varied
            dropped += n_dropped
            rounds += 1
            if len(kept) >= r.groups or rounds > a.max_refill_rounds:
                break
        batch = [t for g in kept[:r.groups] for t in g] or drop_failed(first, 1)[0]
        return batch, first, {**stats, "groups_kept": float(min(len(kept), r.groups)), "groups_dropped": float(dropped),
                              "refill_rounds": float(rounds - 1)}

    def collect_lookahead(self) -> tuple[list[Trajectory], list[Trajectory], dict[str, float], list[Any]]:
        """(the greedy plays and every play-out, the greedy plays, their reward sanity, the looked-ahead turns):
        rollout.groups tasks played once greedily, then rollout.lookahead alternatives at each failed play's
        chosen turns (agentgym/lookahead.py)."""
        from agentgym.lookahead import lookahead_rollout

        r = self.cfg.rollout
        seeds = list(range(self.next_seed, self.next_seed + r.groups))
        self.next_seed += r.groups
        greedy = self._rollout_config(turn_cap(self.cfg, self.iteration), 0.0, self.cfg.train.seed)
        got = lookahead_rollout(self.env_id, self.policy, self.chat, seeds, alternatives=r.lookahead,
                                points=r.lookahead_points, success_points=r.lookahead_success_points, config=greedy,
                                rng=random.Random(self.cfg.train.seed * 1_000_003 + self.iteration),
                                env_kwargs=dict(r.env_kwargs) or None, start_group_id=seeds[0],
                                reset_options={"split": "train"})
        return got.trunks + got.branches, got.trunks, reward_sanity(got.trunks, self.reward_range), got.decisions

    def _async_rollouts(self, pending: list[list[Trajectory]]) -> Any:
        """The rollout workers of train.mode=async: a vLLM engine takes the published weights itself; the HF
        policy generates with its own copy of the model, so the trainer can update while it plays."""
        from agentgym.train.async_rl import AsyncRollouts, VersionedPolicy, WeightBox

        t = self.cfg.train
        inner = self.policy if self._separate_policy() else make_policy(self.cfg, copy.deepcopy(self.model),
                                                                         self.tokenizer)
        return AsyncRollouts(VersionedPolicy(inner, WeightBox(self.iteration)), self._play_async,
                             groups=self.cfg.rollout.groups, chunk=t.groups_per_rollout, workers=t.rollout_workers,
                             max_staleness=t.max_staleness, next_seed=self.next_seed, iteration=self.iteration,
                             pending=pending, start_order=t.batch_order == "start")

    def _play_async(self, seeds: list[int], policy: Any, version: int) -> list[Trajectory]:
        """One rollout worker's chunk: the groups of `seeds`, played as the sync trainer plays a batch."""
        config = self._rollout_config(turn_cap(self.cfg, version), self.cfg.rollout.temperature, self.cfg.train.seed)
        return self._rollout(seeds, self.cfg.rollout.group_size, config, "train", policy)

    def collect_async(self) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """(training batch, the batch before drops, stats): rollout.groups finished groups off the queue."""
        groups, stats = self.async_side.take(self.iteration, self.cfg.train.staleness == "drop")
        first = [t for g in groups for t in g]
        stats.update(reward_sanity(first, self.reward_range))
        if self.group_rewards:
            first = apply_group_rewards(first, self.group_rewards)
        trajs, failed = drop_failed(first, min(2, self.cfg.rollout.group_size))
        trajs, mixed = drop_mixed_groups(trajs)
        return trajs, first, {**stats, **failed, "groups_not_one_task": float(mixed)}

    def verify_tokens(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """Rollout token ids must equal the tokenisation of the rendered conversation: every sample (or
        train.verify_samples drawn at random, late turns included) is checked, and the share that does not
        match is the token_drift guardrail's figure (by default any mismatch stops the run)."""
        r, n = self.cfg.rollout, self.cfg.train.verify_samples
        rng = random.Random(self.cfg.train.seed * 7_919 + self.iteration)
        checked, errors = verify_samples(self.chat, trajectories, r.layout, r.history_turns, self.tools, n, rng)
        self.guard_details.pop("token_drift", None)
        if errors:  # the token_drift guardrail decides what a mismatch does
            first = " ".join(errors[0].split())[:400]
            self.guard_details["token_drift"] = f"{len(errors)} of {checked} mismatched; the first: {first}"
        return {"verified_samples": float(checked), "token_mismatches": float(len(errors)),
                "token_drift_rate": len(errors) / checked if checked else 0.0}

    # ------------------------------------------------------------------ one iteration
    def step(self) -> dict[str, Any]:
        it, cfg = self.iteration, self.cfg
        t0 = time.perf_counter()
        decisions = None
        if cfg.rollout.lookahead:
            batch, first, drop_stats, decisions = self.collect_lookahead()
        elif self.async_side is not None:
            batch, first, drop_stats = self.collect_async()
        elif self.dist is None:
            batch, first, drop_stats = self.collect(it)
        else:  # rank 0 rolls out for all ranks
            collected = (*self.collect(it), self.next_seed) if self.is_main else None
            batch, first, drop_stats, self.next_seed = D.broadcast(self.dist, collected)
        t1 = time.perf_counter()
        if self.is_main:
            write_rollouts(self.run_dir, it, first)
        metrics: dict[str, Any] = {**rollout_metrics(first), **drop_stats, "max_turns": turn_cap(cfg, it) or 0,
                                   "episodes_trained": float(len(batch)),
                                   **rollout_health(first)}
        if callable(getattr(self.policy, "scoring_stats", None)):  # admissible actions: what scoring cost
            metrics.update({f"rollout_scoring/{k}": v for k, v in self.policy.scoring_stats().items()})
        if cfg.train.verify_tokens:
            metrics.update(self.verify_tokens(batch))
        self._check_health(metrics, BEFORE_UPDATE)  # before anything trains on a bad batch
        samples = build_samples(batch, cfg.rollout.layout)
        if decisions is not None:  # rollout.lookahead: the looked-ahead turns' choices
            metrics.update(lookahead_step(self.c, cfg, decisions, it))
        elif samples and updater_for(cfg).name == "choice_ppo":  # admissible-action mode: exact ratio
            metrics.update(choice_step(self.c, cfg, batch, it, self.expert))
        elif samples and self.archer is not None:  # off-policy critic from the replay buffer + token actor
            self._archer_step(batch, samples, metrics)
        elif samples:
            self._sleep_rollout_engine()
            if cfg.algorithm.igpo.coef:  # IGPO: information-gain turn rewards before any estimator reads them
                batch = self._with_info_gain(batch, metrics)
            table = shape_rewards(cfg.algorithm, TurnTable.from_trajectories(batch), batch, cfg.rollout.max_new_tokens)
            scored = score(self.c, samples, cfg)
            final = self._final_values(batch, table) if self.critic is not None else None
            targets = build_targets(cfg.algorithm, table, batch, samples, scored, final)
            if cfg.algorithm.regularisers.epo_coef:
                targets = with_epo(targets, table, self.epo_running)
            stats = ppo_update(self.c, samples, scored, targets, cfg, shuffle_seed=cfg.train.seed * 1_000_003 + it,
                               dist=self.dist)
            if stats.epo_micro:  # EPO's H̄ follows the batches' trajectory entropy
                self.epo_running = running_entropy(self.epo_running, stats.epo_entropy / stats.epo_micro,
                                                   cfg.algorithm.regularisers.epo_momentum)
            push_start = time.perf_counter()
            self._push_weights()
            metrics["time/push_weights"] = time.perf_counter() - push_start
            metrics.update(stats.as_metrics())
            metrics.update(batch_stats(samples, scored, targets, cfg.algorithm.loss.tis_cap,
                                       self._fresh_tokens(batch, samples)))
            masks = [s.mask[1:] for s in samples]  # the no_signal guard's finer figures
            metrics.update(signal_figures(batch, [s.row[1:][m] for s, m in zip(samples, masks)],
                                          [a[m] for a, m in zip(targets.advantages, masks)]))
        t2 = time.perf_counter()
        metrics.update(_timing(first, t1 - t0, t2 - t1, sum(len(s) for s in samples)))
        metrics.update(_gpu_memory(self.device))
        metrics.update(host_memory())
        self.health.append({k: metrics[k] for k in ("entropy", "response_tokens_per_turn", "success") if k in metrics})
        metrics.update(trends(self.health, cfg.train.guardrails.collapse_window))
        self._check_health(metrics, [name for name in GUARDS if name not in BEFORE_UPDATE])
        self.iteration += 1
        if self.async_side is not None:  # the staleness gate lets the workers one batch further
            self.async_side.advance(self.iteration)
        return metrics

    def _archer_step(self, batch: list[Trajectory], samples: list[Sample], metrics: dict[str, Any]) -> None:
        from agentgym.train.updaters.archer import archer_step

        cfg, r = self.cfg, self.cfg.rollout
        self._sleep_rollout_engine()
        table = shape_rewards(cfg.algorithm, TurnTable.from_trajectories(batch), batch, r.max_new_tokens)
        updated, more = archer_step(self.archer, self.c, cfg, batch, samples, table, self.iteration,
                                    lambda t: next_prompt_ids(self.chat, t, r.layout, r.history_turns, self.tools))
        metrics.update(more)
        if updated is None:  # critic warm-up: the policy is unchanged, nothing to push
            return
        stats, scored, targets = updated
        push_start = time.perf_counter()
        self._push_weights()
        metrics["time/push_weights"] = time.perf_counter() - push_start
        metrics.update(stats.as_metrics())
        metrics.update(batch_stats(samples, scored, targets, cfg.algorithm.loss.tis_cap))

    def _fresh_tokens(self, batch: Sequence[Trajectory], samples: Sequence[Sample]) -> list[np.ndarray] | None:
        """Async: per sample, the action positions generated by the current weights. Only these must match the
        trainer's log-probs (the stale_weights guard); older turns differ by design and are weighted instead."""
        if self.async_side is None:
            return None
        versions = np.array([t.policy_version for tr in batch for t in tr.turns], dtype=np.int64)
        return [versions[np.maximum(s.row[1:], 0)] == self.iteration for s in samples]

    def _check_health(self, metrics: dict[str, Any], names: Sequence[str]) -> None:
        """The run-health guardrails `names` (train/guardrails.py): warn, or stop with the cause and the fix."""
        from agentgym.train.guardrails import GuardrailError, check

        for alarm, action in check(metrics, self.cfg.train.guardrails, names):
            metrics[f"guard/{alarm.guard}"] = 1.0
            detail = self.guard_details.pop(alarm.guard, "")
            message = f"iteration {self.iteration}: {alarm.message}" + (f" ({detail})" if detail else "")
            if action == "stop":
                if self.writer is not None:  # the figures that fired it stay on record
                    self.writer.write(self.iteration, metrics)
                raise GuardrailError(f"{message} (train.guardrails.{alarm.guard}=warn to go on)")
            print(f"agentgym train: warning: {message}", file=sys.stderr)

    def _with_info_gain(self, batch: list[Trajectory], metrics: dict[str, Any]) -> list[Trajectory]:
        from agentgym.train.estimators.igpo import info_gains, with_info_gain

        a = self.cfg.algorithm
        gains = info_gains(self.model, self.chat, batch, self.device, self.c.pad_id, a.igpo.mode,
                           self.cfg.rollout.temperature, self.cfg.train.micro_batch_size)
        scored = [g[:-1] for g, t in zip(gains, batch) if t.ground_truth and len(g) > 1]
        flat = np.concatenate(scored) if scored else np.zeros(0)
        metrics.update({"igpo/info_gain_mean": float(flat.mean()) if flat.size else 0.0,
                        "igpo/scored_turns": float(flat.size)})
        return with_info_gain(batch, gains, a.igpo.coef)

    def _final_values(self, batch: Sequence[Trajectory], table: TurnTable) -> np.ndarray:
        """Per table row: the critic's value of the state after a trajectory's last turn where the episode
        was cut off (GAE bootstraps there), 0 elsewhere."""
        r, final = self.cfg.rollout, np.zeros(len(table))
        cut = np.flatnonzero(last_rows(table) & ~table.terminated)
        prompts = [next_prompt_ids(self.chat, batch[table.traj[i]], r.layout, r.history_turns, self.tools) for i in cut]
        final[cut] = state_values(self.c, prompts, self.cfg)
        return final

    def _separate_policy(self) -> bool:
        return self.policy.model is not self.model

    def _sleep_rollout_engine(self) -> None:
        """Free the rollout engine's KV cache (vLLM sleep mode) while the trainer needs the GPU."""
        level = self.cfg.rollout.sleep_level
        if level and self._separate_policy():
            self.policy.sleep(level=level)

    def _push_weights(self) -> None:
        """Send new weights to the rollout policy unless it generates with the trained module itself.
        A LoRA model sends just its adapter where the policy takes one (vLLM's LoRARequest). Under fsdp
        every rank joins the gather into rank 0's unsharded copy, which is the rollout model or the source."""
        model = self.model
        if self.async_side is not None:  # the rollout side swaps them in between turns
            from agentgym.train.async_rl import weight_snapshot

            if self.cfg.train.push_weights:
                self.async_side.policy.box.publish(weight_snapshot(model), self.iteration + 1)
            return
        if D.is_fsdp(self.dist):
            model = D.sync_full_copy(self.dist, self.model)
            if model is None or self.policy.model is model:
                return
        elif not self._separate_policy():
            return
        if not self.cfg.train.push_weights:  # fault injection: the stale_weights guardrail must catch this
            return
        if hasattr(model, "peft_config") and self.policy.takes_adapters:
            target = self.run_dir / "rollout-adapter" / f"iteration-{self.iteration}"
            model.save_pretrained(target)
            self.policy.update_adapter(str(target))
            for old in target.parent.iterdir():  # the engine has loaded the previous one already
                if old != target:
                    shutil.rmtree(old, ignore_errors=True)
            return
        if hasattr(model, "peft_config"):
            model = copy.deepcopy(model).merge_and_unload()
        self.policy.update_weights(model.state_dict())

    def evaluate(self) -> dict[str, float]:
        """Success on held-out seeds (group size 1, eval.temperature; 0 = greedy)."""
        return rollout_metrics(self.eval_episodes(), prefix="eval/")

    def eval_episodes(self) -> list[Trajectory]:
        """The held-out episodes evaluate() scores: the same seeds at every eval."""
        e = self.cfg.eval
        seeds = list(range(e.seed_start, e.seed_start + e.seeds))
        config = self._rollout_config(turn_cap(self.cfg, self.iteration), e.temperature, self.cfg.train.seed)
        policy = self.async_side.policy if self.async_side is not None else None  # one generate at a time
        return self._rollout(seeds, 1, config, e.split, policy)

    def _periodic_eval(self, row: int) -> dict[str, float]:
        """evaluate()'s figures, plus the tasks newly solved / failed since the run's previous eval; every
        episode's outcome goes to run_dir/eval_episodes.jsonl (train/eval_records.py)."""
        episodes = self.eval_episodes()
        records = eval_records.episode_records(row, episodes)
        metrics = rollout_metrics(episodes, prefix="eval/")
        if self._previous_eval:
            metrics.update(eval_records.paired_change(self._previous_eval, records))
        eval_records.append_records(self.run_dir, records)
        self._previous_eval = records
        return metrics

    # ------------------------------------------------------------------ loop, checkpoints
    def run(self) -> None:
        cfg = self.cfg
        while self.iteration < cfg.train.iterations:
            metrics = self.step()
            done = self.iteration
            if done == cfg.train.iterations and self._start_weights is not None:
                metrics.update(self._keep_part_of_the_change())
            due = (cfg.checkpoint.every and done % cfg.checkpoint.every == 0) or done == cfg.train.iterations
            if self.is_main:  # rank 0 evaluates and logs
                if cfg.eval.every and (done % cfg.eval.every == 0 or done == cfg.train.iterations):
                    metrics.update(self._periodic_eval(done - 1))
                self.writer.write(done - 1, metrics)
            if due:
                self.save()

    def _keep_part_of_the_change(self) -> dict[str, float]:
        """After the last iteration: the weights become start + train.change_kept x (trained - start)."""
        assert self._start_weights is not None
        kept = self.cfg.train.change_kept
        self._trained_weights = merge.trainable_weights(self.model)
        merge.load_weights(self.model, merge.interpolate(self._start_weights, self._trained_weights, kept))
        self._push_weights()
        change = sum(float((t - self._start_weights[n]).float().pow(2).sum())
                     for n, t in self._trained_weights.items()) ** 0.5
        return {"merge/change_kept": kept, "merge/weight_change_norm": change}

    def save(self) -> Path:
        sharded = D.is_fsdp(self.dist)  # its optimizer and critic state live in dcp/ only
        state = {"optimizer": None if sharded else self.optimizer.state_dict(), "next_seed": self.next_seed,
                 "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
                 "critic": self.critic.state_dict() if self.critic is not None and not sharded else None,
                 "archer": self.archer.state_dict() if self.archer is not None else None}
        if self._trained_weights is not None:  # the model holds the merge; a resume trains on from these
            state["trained_weights"] = self._trained_weights
        if self.async_side is not None:  # finished groups not yet trained are kept; the seeds move past all claimed
            pending, state["next_seed"] = self.async_side.pending()
            state["async_pending"] = [[t.to_dict() for t in g] for g in pending]
        if self.dist is None:
            return ck.save_checkpoint(self.run_dir, self.iteration, self.model, self.tokenizer, state,
                                      self.cfg.checkpoint.keep)
        # every rank writes its shard of model + optimizer; rank 0 adds the HF weights and moves `latest`
        shards = self.run_dir / f".tmp-dcp-{self.iteration}"
        D.save_sharded(self.dist, self.optimizer, shards)
        D.barrier(self.dist)
        ckpt = self.run_dir / f"ckpt-{self.iteration}"
        if self.is_main:  # under fsdp the unsharded copy holds the weights (synced after every update)
            hf = self.dist.full_model if sharded else self.model
            ckpt = ck.save_checkpoint(self.run_dir, self.iteration, hf, self.tokenizer, state,
                                      self.cfg.checkpoint.keep, extra_dirs={"dcp": shards})
        D.barrier(self.dist)
        return ckpt

    def _resume(self) -> list[list[Trajectory]]:
        """Restore the latest checkpoint's state in place; returns the finished, untrained groups an async run
        had queued."""
        ckpt = ck.find_checkpoint(self.cfg.checkpoint.resume, self.run_dir)
        if ckpt is None:
            if self.cfg.checkpoint.resume and D.launched_rank() == 0:  # nothing saved yet: every row is redone
                self._truncate_logs(0)
            return []
        state = ck.load_state(ckpt)
        sharded = self.dist is not None and (ckpt / "dcp").is_dir()
        if state["optimizer"] is None and not sharded:
            raise ConfigError(f"{ckpt} holds sharded state (train.distributed=fsdp): resume it under torchrun "
                              "with train.distributed=fsdp")
        if D.is_fsdp(self.dist) and not sharded:
            raise ConfigError(f"{ckpt} has no sharded state (dcp/): resume it in one process or with "
                              "train.distributed=ddp")
        if not D.is_fsdp(self.dist):  # sharded modules take their weights from dcp/ below
            ck.load_weights_into(self.model, ckpt)
            if state.get("trained_weights") is not None:  # a merged final checkpoint: train on from the unmerged
                merge.load_weights(self.model, state["trained_weights"])
            if self.critic is not None and state.get("critic") is not None:
                self.critic.load_state_dict(state["critic"])
            if self.archer is not None and state.get("archer") is not None:
                self.archer.load_state_dict(state["archer"])
        if sharded:
            D.load_sharded(self.dist, self.optimizer, ckpt / "dcp")
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        ck.set_rng_state(state["rng"])
        self.iteration, self.next_seed = int(state["iteration"]), int(state["next_seed"])
        if D.launched_rank() == 0:  # one writer of the run's files
            self._truncate_logs(self.iteration)
            self._previous_eval = eval_records.last_eval(self.run_dir)
        self._push_weights()  # a rollout engine with its own copy still holds the initial weights
        return [[Trajectory.from_dict(t) for t in g] for g in state.get("async_pending") or ()]

    def _truncate_logs(self, iteration: int) -> None:
        for name in ("metrics.jsonl", "rollouts.jsonl", eval_records.EVAL_EPISODES):
            _truncate_metrics(self.run_dir / name, iteration)

    def close(self) -> None:
        if getattr(self, "async_side", None) is not None:
            self.async_side.stop()
        if self.writer is not None:
            self.writer.close()
        D.shutdown(getattr(self, "dist", None))
        if self._separate_policy():
            self.policy.close()


def refuse_an_earlier_run(run_dir: Path, resume: str) -> None:
    """A run from iteration 0 appends to run_dir's logs, so one started where another logged would mix the
    two runs' curves and evals: refused, unless checkpoint.resume asks to continue what is there."""
    metrics = run_dir / "metrics.jsonl"
    if resume or not metrics.exists() or not metrics.read_text().strip():
        return
    raise ConfigError(f"train.run_dir={run_dir} already holds a run (metrics.jsonl): continue it with "
                      "checkpoint.resume=auto, or pass another train.run_dir (or delete that one)")


def _truncate_metrics(path: Path, iteration: int) -> None:
    """Drop records of iterations at or after `iteration` (they are about to be redone)."""
    if path.exists():
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        path.write_text("".join(ln + "\n" for ln in lines if json.loads(ln).get("iteration", -1) < iteration))


def _gpu_memory(device: Any) -> dict[str, float]:
    """Peak GPU memory so far (GiB) when training on CUDA."""
    if getattr(device, "type", "") != "cuda":
        return {}
    return {"gpu/peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30}


def host_memory() -> dict[str, float]:
    """Resident memory (GiB) of this process and of its children (a vLLM engine's core and worker run
    there), now, and this process's own peak; what a run needs of the machine's RAM."""
    import resource

    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    try:
        import psutil
    except ImportError:
        return {"memory/peak_rss_self_gib": peak_self}
    me = psutil.Process()
    children = 0
    for child in me.children(recursive=True):
        try:
            children += child.memory_info().rss
        except psutil.Error:  # gone since it was listed
            pass
    return {"memory/rss_gib": (me.memory_info().rss + children) / 2**30, "memory/rss_children_gib": children / 2**30,
            "memory/peak_rss_self_gib": peak_self}


def batch_stats(samples: Sequence[Sample], scored: Scored, targets: Targets, tis_cap: float | None = None,
                fresh: Sequence[np.ndarray] | None = None) -> dict[str, float]:
    """Advantage spread; how far the sampler's log-probs are from the trainer's (both at the sampling
    temperature; only over the `fresh` positions when given: async turns of the current weights), the
    truncated importance weights and overlong masking."""
    masks = [s.mask[1:] for s in samples]
    same = masks if fresh is None else [m & f for m, f in zip(masks, fresh)]
    adv = np.concatenate([a[m] for a, m in zip(targets.advantages, masks)]) if samples else np.zeros(0)
    diff = np.concatenate([np.abs(o[m] - s.rollout_logprobs[1:][m]) for o, s, m
                           in zip(scored.old_logprobs, samples, same)]) if samples else np.zeros(0)
    diff = diff[np.isfinite(diff)]  # a sampler may not report some log-probs (NaN)
    out = {"advantage_mean": float(adv.mean()) if adv.size else 0.0,
           "advantage_std": float(adv.std()) if adv.size else 0.0,
           "zero_advantage_share": float(np.mean(adv == 0)) if adv.size else 0.0,
           "logprob_diff": float(diff.mean()) if diff.size else 0.0,
           "logprob_diff_max": float(diff.max()) if diff.size else 0.0, "samples": float(len(samples))}
    if fresh is not None:
        n = sum(int(m.sum()) for m in masks)
        out["async/fresh_token_share"] = sum(int(m.sum()) for m in same) / n if n else 0.0
    if targets.is_weights is not None and adv.size:
        w = np.concatenate([w[m] for w, m in zip(targets.is_weights, masks)])
        out.update({"tis/weight_mean": float(w.mean()), "tis/weight_min": float(w.min()),
                    "tis/capped_fraction": float(np.mean(w >= (tis_cap or np.inf) * (1 - 1e-9)))})
    if targets.loss_mask is not None:
        out["overlong/masked_tokens"] = float(sum(float((m & (lm == 0)).sum())
                                                  for m, lm in zip(masks, targets.loss_mask)))
    return out


def _timing(trajs: Sequence[Trajectory], rollout_s: float, train_s: float, train_tokens: int) -> dict[str, float]:
    """Wall time split: the rollout's share is divided between generation and env steps in the
    proportion the turns recorded (turn timings overlap across concurrent episodes)."""
    gen = sum(t.generate_s for tr in trajs for t in tr.turns)
    env = sum(t.env_s for tr in trajs for t in tr.turns)
    share = gen / (gen + env) if gen + env > 0 else 1.0
    tokens = sum(len(t.response_ids) for tr in trajs for t in tr.turns)
    return {"time/rollout": rollout_s, "time/generate": rollout_s * share, "time/env": rollout_s * (1 - share),
            "time/train": train_s, "tokens_per_s/generate": tokens / max(rollout_s, 1e-9),
            "tokens_per_s/train": train_tokens / max(train_s, 1e-9)}
