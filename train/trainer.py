"""The trainer: collect → guards before the update → learner step → push weights → guards after → log/checkpoint.

    from agentgym.train.config import load_config
    from agentgym.train.trainer import train
    run_dir = train(load_config("toy_learning", ["train.iterations=20"]))

Orchestration only. How a batch is played is a collector's (train/collectors/: sync, broadcast, async,
lookahead), what an update does is a learner's (train/learners/: token PPO, choice, ArCHer, lookahead), both
chosen once from the config; the maths lives in estimators/ and updaters/, the token bookkeeping in samples.py,
the files in checkpoint.py and metrics.py, the run-health checks in guardrails.py.
"""
from __future__ import annotations

import copy
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from agentgym.errors import ConfigError
from agentgym.policy import TrainablePolicy
from agentgym.rubric import group_rewards_from_config
from agentgym.train import checkpoint as ck
from agentgym.train import distributed as D
from agentgym.train import eval_records, merge
from agentgym.train.checkpoint import seed_everything
from agentgym.train.collectors import build_collector, collector_name
from agentgym.train.collectors.base import (Collected, CollectorContext, PlaySections,  # noqa: F401  (re-exported)
                                            drop_failed, keep_varied_groups, turn_cap)
from agentgym.train.config import TrainConfig
from agentgym.train.guardrails import AFTER_UPDATE, BEFORE_UPDATE
from agentgym.train.estimators.signal import estimator_signal
from agentgym.train.health import rollout_health, trends
from agentgym.train.learners import build_learner
from agentgym.train.learners.base import LearnerContext, batch_stats  # noqa: F401  (re-exported)
from agentgym.train.metrics import MetricsWriter, infra_figures, rollout_metrics, write_rollouts
from agentgym.train.run_state import RunParts, restore_run, save_run
from agentgym.train.samples import build_samples, verify_samples
from agentgym.train.setup import build_components, make_optimizer, make_policy
from agentgym.trajectory import Trajectory


def train(config: TrainConfig) -> Path:
    """Train with `config` and return the run directory (metrics.jsonl, checkpoints)."""
    if config.train.soup_runs > 1:  # K runs side by side, averaged (train/soup.py)
        from agentgym.train.soup import train_soup

        return train_soup(config)
    trainer = Trainer(config)
    try:
        trainer.run()
    finally:
        trainer.close()
    return trainer.run_dir


class Trainer:
    def __init__(self, config: TrainConfig):
        self.cfg = config
        self.group_rewards = group_rewards_from_config(config.rollout.group_rewards)  # a bad one fails first
        self.run_dir = Path(config.train.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        ck.refuse_an_earlier_run(self.run_dir, config.checkpoint.resume)
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
        self.critic, self.ref, self.optimizer, self.scheduler = c.critic, c.ref, c.optimizer, c.scheduler
        self.device, self.env_id, self.tools, self.pad_id = c.device, c.env_id, c.tools, c.pad_id
        self.iteration = 0
        self.is_main = self.dist is None or self.dist.is_main
        self.learner = build_learner(config, LearnerContext(c, self.dist, self._sleep_rollout_engine))
        self.collector: Any = None  # built once the checkpoint's state is known (_resume)
        self.health: list[dict[str, float]] = []  # per iteration: the figures the collapse trends read
        self.guard_details: dict[str, str] = {}  # an example a guard's message quotes (the first token mismatch)
        self.reward_range = config.train.guardrails.reward_range or self.c.reward_range
        self._previous_eval: list[dict[str, Any]] = []  # the last periodic eval's per-task records
        # train.change_kept < 1: the weights training starts from (the config's policy, also on a resume) and,
        # once the last iteration merged them, the trained weights themselves (kept in the checkpoint)
        self._start_weights = merge.trainable_weights(self.model) if config.train.change_kept < 1 else None
        self._trained_weights: dict[str, Any] | None = None
        state = self._resume()  # every rank restores the same state in place (DDP holds the same module)
        self.collector = build_collector(collector_name(config, self.dist is not None), self._collector_context(),
                                         state)
        lg = config.logging
        self.writer = None
        if self.is_main:
            ck.write_json(self.run_dir / "config.json", config.to_dict())
            self.writer = MetricsWriter(self.run_dir, config.train.iterations, self.iteration, lg.tensorboard,
                                        lg.wandb, lg.wandb_project, config.to_dict(), lg.progress)

    def _collector_context(self) -> CollectorContext:
        rollout_copy = None
        if not self._separate_policy():  # async: the HF policy generates with its own copy while the trainer updates
            rollout_copy = lambda: make_policy(self.cfg, copy.deepcopy(self.model), self.tokenizer)  # noqa: E731
        return CollectorContext(PlaySections.of(self.cfg), self.env_id, self.chat, lambda: self.policy, self.reward_range,
                                self.group_rewards, self.iteration, self.dist, self.is_main, rollout_copy)

    @property
    def async_side(self) -> Any:
        """train.mode=async: the rollout workers (train/async_rl.py), else None."""
        return getattr(self.collector, "side", None)

    @property
    def epo_running(self) -> float | None:
        return getattr(self.learner, "epo_running", None)

    # ------------------------------------------------------------------ one iteration
    def step(self) -> dict[str, Any]:
        it, cfg = self.iteration, self.cfg
        t0 = time.perf_counter()
        collected = self.collector.collect(it)
        t1 = time.perf_counter()
        metrics = self._batch_figures(collected)
        self._check_health(metrics, BEFORE_UPDATE)  # before anything trains on a bad batch
        samples = build_samples(collected.batch, cfg.rollout.layout)
        if self.learner.update(collected, samples, it, metrics):
            push_start = time.perf_counter()
            self._push_weights()
            metrics["time/push_weights"] = time.perf_counter() - push_start
        t2 = time.perf_counter()
        metrics.update(_timing(collected.first, t1 - t0, t2 - t1, sum(len(s) for s in samples)))
        metrics.update(_gpu_memory(self.device))
        metrics.update(host_memory())
        self.health.append({k: metrics[k] for k in ("entropy", "response_tokens_per_turn", "success") if k in metrics})
        metrics.update(trends(self.health, cfg.train.guardrails.collapse_window))
        self._check_health(metrics, AFTER_UPDATE)
        self.iteration += 1
        self.collector.advance(self.iteration)
        return metrics

    def _batch_figures(self, collected: Collected) -> dict[str, Any]:
        """What the collected batch says before any update: its rollout figures, drops and health."""
        it, first = self.iteration, collected.first
        if self.is_main:
            write_rollouts(self.run_dir, it, first)
        metrics: dict[str, Any] = {**rollout_metrics(first), **collected.stats, "max_turns": turn_cap(self.cfg, it) or 0,
                                   "episodes_trained": float(len(collected.batch)), **rollout_health(first),
                                   **infra_figures(first, collected.stats),
                                   **estimator_signal(self.cfg.algorithm, collected.batch)}  # training signal
        errors = [t.error for t in first if t.outcome == "error"]
        if errors:  # the infra_failures guard quotes the first cause
            self.guard_details["infra_failures"] = "the first error: " + (str(errors[0]).strip().splitlines() or [""])[0][:300]
        if callable(getattr(self.policy, "scoring_stats", None)):  # admissible actions: what scoring cost
            metrics.update({f"rollout_scoring/{k}": v for k, v in self.policy.scoring_stats().items()})
        if self.cfg.train.verify_tokens:
            metrics.update(self.verify_tokens(collected.batch))
        return metrics

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

    # ------------------------------------------------------------------ weights, evals
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
        every rank joins the gather into rank 0's unsharded copy, which is the rollout model or the source.
        An async collector takes them itself (its rollout side swaps them in between turns)."""
        model = self.model
        if self.collector is not None and self.collector.take_weights(model, self.iteration + 1):
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
        e, ctx = self.cfg.eval, self._collector_context()
        seeds = list(range(e.seed_start, e.seed_start + e.seeds))
        config = ctx.rollout_config(turn_cap(self.cfg, self.iteration), e.temperature, self.cfg.train.seed)
        return ctx.play(seeds, 1, config, e.split, self.collector.eval_policy() if self.collector else None)

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
        extra = self.collector.state_dict()  # next_seed, async_pending
        if self._trained_weights is not None:  # the model holds the merge; a resume trains on from these
            extra["trained_weights"] = self._trained_weights
        return save_run(self._parts(), self.run_dir, self.iteration, self.cfg.checkpoint.keep, extra)

    def _resume(self) -> dict[str, Any]:
        """Restore the latest checkpoint's state in place; returns that state ({} on a fresh run), whose
        collector part (next seed, an async run's queued groups) builds the collector."""
        ckpt = ck.find_checkpoint(self.cfg.checkpoint.resume, self.run_dir)
        if ckpt is None:
            if self.cfg.checkpoint.resume and D.launched_rank() == 0:  # nothing saved yet: every row is redone
                self._truncate_logs(0)
            return {}
        state = restore_run(self._parts(), ckpt)
        self.iteration = int(state["iteration"])
        if D.launched_rank() == 0:  # one writer of the run's files
            # `latest` names the weights the run now holds: a kill before it moved, or a damaged newer checkpoint,
            # left it naming others, which evaluation and checkpoint:DIR would load
            if ckpt.parent.resolve() == self.run_dir.resolve():
                ck.write_atomically(self.run_dir / ck.LATEST, ckpt.name)
            self._truncate_logs(self.iteration)
            self._previous_eval = eval_records.last_eval(self.run_dir)
        self._push_weights()  # a rollout engine with its own copy still holds the initial weights
        return state

    def _parts(self) -> RunParts:
        return RunParts(self.model, self.tokenizer, self.optimizer, self.scheduler, self.critic, self.learner, self.dist)

    def _truncate_logs(self, iteration: int) -> None:
        for name in ("metrics.jsonl", "rollouts.jsonl", eval_records.EVAL_EPISODES):
            _truncate_metrics(self.run_dir / name, iteration)

    def close(self) -> None:
        if getattr(self, "collector", None) is not None:
            self.collector.close()
        if self.writer is not None:
            self.writer.close()
        D.shutdown(getattr(self, "dist", None))
        if self._separate_policy():
            self.policy.close()


def _truncate_metrics(path: Path, iteration: int) -> None:
    """Drop records of iterations at or after `iteration` (they are about to be redone) and a line a kill cut
    mid-append (it does not parse); the file is replaced atomically, so a kill here loses nothing kept."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:  # the cut last line of a killed run
            continue
        if isinstance(record, dict) and record.get("iteration", -1) < iteration:
            kept.append(line)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


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
