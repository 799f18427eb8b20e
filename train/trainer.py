"""The trainer: rollout → rewards → advantages → PPO epochs → push weights → evaluate → checkpoint.

    from agentgym.train.config import load_config
    from agentgym.train.trainer import train
    run_dir = train(load_config("toy_learning", ["train.iterations=20"]))

Orchestration only: the maths lives in advantages.py / losses.py, the token bookkeeping in samples.py
and targets.py, the gradient steps in update.py, the files in checkpoint.py and metrics.py.
"""
from __future__ import annotations

import copy
import random
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agentgym.errors import require
from agentgym.train.config import TrainConfig
from agentgym.trajectory import Trajectory, TurnTable


def train(config: TrainConfig) -> Path:
    """Train with `config` and return the run directory (metrics.jsonl, checkpoints)."""
    trainer = Trainer(config)
    try:
        trainer.run()
    finally:
        trainer.close()
    return trainer.run_dir


def seed_everything(seed: int) -> None:
    torch = require("torch", "hf")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def turn_cap(config: TrainConfig, iteration: int) -> int | None:
    """The turn limit of an iteration: the last schedule entry at or before it, else rollout.max_turns."""
    cap = config.rollout.max_turns
    for start, limit in config.algorithm.turn_cap_schedule:
        if iteration >= start:
            cap = int(limit)
    return cap


def keep_varied_groups(trajectories: Sequence[Trajectory]) -> tuple[list[list[Trajectory]], int]:
    """Groups (in order) whose returns are not all equal, and how many were dropped."""
    groups: dict[int, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.group_id, []).append(t)
    kept = [g for g in groups.values() if len({round(t.total_reward, 9) for t in g}) > 1]
    return kept, len(groups) - len(kept)


class Trainer:
    def __init__(self, config: TrainConfig):
        from agentgym.train.setup import build_components

        self.cfg = config
        self.run_dir = Path(config.train.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        seed_everything(config.train.seed)
        if config.train.torch_threads:
            require("torch", "hf").set_num_threads(config.train.torch_threads)
        c = build_components(config, self.run_dir)
        self.model, self.tokenizer, self.policy, self.chat = c.model, c.tokenizer, c.policy, c.chat
        self.critic, self.ref, self.optimizer, self.scheduler = c.critic, c.ref, c.optimizer, c.scheduler
        self.device, self.env_id, self.tools, self.pad_id = c.device, c.env_id, c.tools, c.pad_id
        self.iteration = 0
        self.next_seed = config.rollout.seed_start
        self._resume()
        from agentgym.train.checkpoint import write_json
        from agentgym.train.metrics import MetricsWriter

        write_json(self.run_dir / "config.json", config.to_dict())
        lg = config.logging
        self.writer = MetricsWriter(self.run_dir, config.train.iterations, self.iteration, lg.tensorboard, lg.wandb,
                                    lg.wandb_project, config.to_dict(), lg.progress)

    # ------------------------------------------------------------------ rollouts
    def _rollout_config(self, max_turns: int | None, temperature: float, seed: int | None) -> Any:
        from agentgym.policies.base import SamplingParams
        from agentgym.rollout import RolloutConfig

        r = self.cfg.rollout
        sampling = SamplingParams(temperature=temperature, top_p=r.top_p if temperature > 0 else 1.0,
                                  max_tokens=r.max_new_tokens, stop=tuple(getattr(self.chat, "stop_strings", ())),
                                  seed=seed)
        return RolloutConfig(max_turns=max_turns, layout=r.layout, history_turns=r.history_turns,
                             max_context_tokens=r.max_context_tokens, max_observation_tokens=r.max_observation_tokens,
                             sampling=sampling, executor=r.executor, env_workers=r.env_workers)

    def _rollout(self, seeds: list[int], group_size: int, config: Any, split: str) -> list[Trajectory]:
        from agentgym.rollout import rollout

        return rollout(self.env_id, self.policy, self.chat, seeds, group_size, config,
                       env_kwargs=dict(self.cfg.rollout.env_kwargs) or None, start_group_id=seeds[0],
                       reset_options={"split": split})

    def collect(self, iteration: int) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """(training batch, the first round's rollouts for metrics, dynamic-sampling stats)."""
        r, a = self.cfg.rollout, self.cfg.algorithm
        config = self._rollout_config(turn_cap(self.cfg, iteration), r.temperature, self.cfg.train.seed)
        kept: list[list[Trajectory]] = []
        first: list[Trajectory] = []
        dropped, rounds = 0, 0
        while True:
            need = r.groups - len(kept)
            seeds = list(range(self.next_seed, self.next_seed + need))
            self.next_seed += need
            trajs = self._rollout(seeds, r.group_size, config, "train")
            first = first or trajs
            if not a.dynamic_sampling:
                return trajs, first, {}
            varied, n_dropped = keep_varied_groups(trajs)
            kept += varied
            dropped += n_dropped
            rounds += 1
            if len(kept) >= r.groups or rounds > a.max_refill_rounds:
                break
        batch = [t for g in kept[:r.groups] for t in g] or first
        return batch, first, {"groups_kept": float(min(len(kept), r.groups)), "groups_dropped": float(dropped),
                              "refill_rounds": float(rounds - 1)}

    def verify_tokens(self, trajectories: Sequence[Trajectory]) -> None:
        """Rollout token ids must equal the tokenisation of the rendered conversation (fails loudly)."""
        for t in trajectories:
            if not t.turns or not t.turns[0].response_ids:
                continue
            if self.cfg.rollout.layout == "trajectory":
                self.chat.verify_trajectory(t, self.tools)
            else:
                messages = self.chat.initial_messages(t.system_prompt, t.turns[0].observation, self.tools)
                self.chat.verify(t.turns[0].prompt_ids, messages, self.tools)
            return

    # ------------------------------------------------------------------ one iteration
    def step(self) -> dict[str, Any]:
        from agentgym.train.metrics import rollout_metrics, write_rollouts
        from agentgym.train.samples import build_samples
        from agentgym.train.targets import build_targets
        from agentgym.train.update import ppo_update, score

        it, cfg = self.iteration, self.cfg
        t0 = time.perf_counter()
        batch, first, ds_stats = self.collect(it)
        t1 = time.perf_counter()
        write_rollouts(self.run_dir, it, first)
        if cfg.train.verify_tokens:
            self.verify_tokens(batch)
        samples = build_samples(batch, cfg.rollout.layout)
        metrics: dict[str, Any] = {**rollout_metrics(first), **ds_stats, "max_turns": turn_cap(cfg, it) or 0}
        if samples and getattr(self.policy, "record_choices", False):  # admissible-action mode: exact ratio
            from agentgym.train.choice import choice_step

            metrics.update(choice_step(self, batch))
        elif samples:
            table = TurnTable.from_trajectories(batch)
            temp = cfg.rollout.temperature
            scored = score(self.model, self.critic, self.ref, samples, cfg.train.micro_batch_size, self.device, temp,
                           self.pad_id)
            targets = build_targets(cfg.algorithm, table, batch, samples, scored)
            stats = ppo_update(self.model, self.critic, self.optimizer, self.scheduler, samples, scored, targets,
                               cfg.algorithm, cfg.train, cfg.optim.max_grad_norm, temp, self.pad_id, self.device,
                               shuffle_seed=cfg.train.seed * 1_000_003 + it)
            self._push_weights()
            metrics.update(stats.as_metrics())
            metrics.update(_batch_stats(samples, scored, targets))
        t2 = time.perf_counter()
        metrics.update(_timing(first, t1 - t0, t2 - t1, sum(len(s) for s in samples)))
        metrics.update(_gpu_memory(self.device))
        self.iteration += 1
        return metrics

    def _push_weights(self) -> None:
        """Send new weights to the rollout policy unless it generates with the trained module itself."""
        if getattr(self.policy, "model", None) is self.model:
            return
        model = self.model
        if hasattr(model, "peft_config"):
            model = copy.deepcopy(model).merge_and_unload()
        self.policy.update_weights(model.state_dict())

    def evaluate(self) -> dict[str, float]:
        """Success on held-out seeds (group size 1, eval.temperature; 0 = greedy)."""
        from agentgym.train.metrics import rollout_metrics

        e = self.cfg.eval
        seeds = list(range(e.seed_start, e.seed_start + e.seeds))
        config = self._rollout_config(turn_cap(self.cfg, self.iteration), e.temperature, self.cfg.train.seed)
        return rollout_metrics(self._rollout(seeds, 1, config, e.split), prefix="eval/")

    # ------------------------------------------------------------------ loop, checkpoints
    def run(self) -> None:
        cfg = self.cfg
        while self.iteration < cfg.train.iterations:
            metrics = self.step()
            done = self.iteration
            if cfg.eval.every and (done % cfg.eval.every == 0 or done == cfg.train.iterations):
                metrics.update(self.evaluate())
            self.writer.write(done - 1, metrics)
            if (cfg.checkpoint.every and done % cfg.checkpoint.every == 0) or done == cfg.train.iterations:
                self.save()

    def save(self) -> Path:
        from agentgym.train.checkpoint import save_checkpoint

        state = {"optimizer": self.optimizer.state_dict(), "next_seed": self.next_seed,
                 "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
                 "critic": self.critic.state_dict() if self.critic is not None else None}
        return save_checkpoint(self.run_dir, self.iteration, self.model, self.tokenizer, state, self.cfg.checkpoint.keep)

    def _resume(self) -> None:
        from agentgym.train import checkpoint as ck

        ckpt = ck.find_checkpoint(self.cfg.checkpoint.resume, self.run_dir)
        if ckpt is None:
            return
        state = ck.load_state(ckpt)
        ck.load_weights_into(self.model, ckpt)
        if self.critic is not None and state.get("critic") is not None:
            self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        ck.set_rng_state(state["rng"])
        self.iteration, self.next_seed = int(state["iteration"]), int(state["next_seed"])
        _truncate_metrics(self.run_dir / "metrics.jsonl", self.iteration)
        _truncate_metrics(self.run_dir / "rollouts.jsonl", self.iteration)

    def close(self) -> None:
        self.writer.close()
        close = getattr(self.policy, "close", None)
        if callable(close) and getattr(self.policy, "model", None) is not self.model:
            close()


def _truncate_metrics(path: Path, iteration: int) -> None:
    """Drop records of iterations at or after `iteration` (they are about to be redone)."""
    import json

    if path.exists():
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        path.write_text("".join(ln + "\n" for ln in lines if json.loads(ln).get("iteration", -1) < iteration))


def _gpu_memory(device: Any) -> dict[str, float]:
    """Peak GPU memory so far (GiB) when training on CUDA."""
    if getattr(device, "type", "") != "cuda":
        return {}
    import torch

    return {"gpu/peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30}


def _batch_stats(samples: Sequence[Any], scored: Any, targets: Any) -> dict[str, float]:
    """Advantage spread and how far the sampler's logprobs are from the trainer's (token consistency)."""
    masks = [s.mask[1:] for s in samples]
    adv = np.concatenate([a[m] for a, m in zip(targets.advantages, masks)]) if samples else np.zeros(0)
    diff = np.concatenate([np.abs(o[m] - s.rollout_logprobs[1:][m]) for o, s, m
                           in zip(scored.old_logprobs, samples, masks)]) if samples else np.zeros(0)
    return {"advantage_mean": float(adv.mean()) if adv.size else 0.0,
            "advantage_std": float(adv.std()) if adv.size else 0.0,
            "logprob_diff": float(diff.mean()) if diff.size else 0.0, "samples": float(len(samples))}


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
