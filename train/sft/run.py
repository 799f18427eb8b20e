"""Supervised warm start (behaviour cloning) before RL: `agentgym sft CONFIG|PRESET [key=value ...]`.

    from agentgym.train.config import load_config
    from agentgym.train.sft.run import sft
    ckpt = sft(load_config("quickstart_cpu"))     # -> RUN_DIR/sft/ckpt-N (a checkpoint: policy / RL start)

Samples come from `train/sft/data.py` (expert demonstrations played through the rollout engine, an
eval's successful episodes, or chat transcripts) in the rollout's own layout and chat template. The
loss is the mean negative log-likelihood of the assistant's tokens only, computed with the trainer's
own forward pass (logits at action positions only); or, with `sft.objective=choice`, the cross-entropy of
the expert's action among the env's admissible actions as `admissible:` policies score them. The model
section picks LoRA or full weights; `sft.train_layers` trains just the top layers. The checkpoint has the
trainer's format, so `checkpoint:DIR` loads it as a policy and `model.policy=checkpoint:DIR` starts RL from it.
Writes metrics.jsonl (a line per optimizer step, then one with the held-out evaluation), sft_loss.png.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agentgym.errors import require
from agentgym.train.config import TrainConfig
from agentgym.train.setup import freeze_below_top_layers


def sft_run_dir(config: TrainConfig) -> Path:
    return Path(config.sft.run_dir or str(Path(config.train.run_dir) / "sft"))


def batches(n: int, size: int, epochs: int, seed: int) -> list[np.ndarray]:
    """Shuffled sample indices, `size` per optimizer step, every sample once per epoch."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(epochs):
        order = rng.permutation(n)
        out += [order[k:k + size] for k in range(0, n, size)]
    return out


def nll_step(model: Any, samples: Sequence[Any], index: Sequence[int], micro: int, device: Any, pad_id: int
             ) -> tuple[float, int]:
    """Backward of the token-mean NLL over the action tokens of samples[index]; (loss, action tokens)."""
    from agentgym.train.samples import micro_batches
    from agentgym.train.updaters.token_ppo import forward

    tokens = sum(int(samples[i].mask[1:].sum()) for i in index)
    total = 0.0
    for part in micro_batches(samples, list(index), micro):
        f = forward(model, None, samples, part, device, 1.0, pad_id)
        loss = -(f.logprobs * f.mask).sum() / max(tokens, 1)
        loss.backward()
        total += float(loss.item())
    return total, tokens


def choice_step(model: Any, seqs: Sequence[Any], index: Sequence[int], device: Any,
                trunks: Sequence[Any] | None = None, scale: float = 1.0) -> tuple[float, int, int]:
    """Backward of `scale` x the turn-mean cross-entropy of the expert's action among each turn's admissible
    actions (sft.objective=choice; where the expert wrote a template's slot, plus its written text's NLL); (the unscaled loss, turns, turns where the expert's action already scored
    best). With `trunks` (train.updaters.choice_ppo.sequence_trunk per sequence, computed once) only the
    trainable top layers run."""
    torch = require("torch", "hf")
    from agentgym.train.updaters.choice_ppo import sequence_choice_logprobs
    from agentgym.train.updaters.choice_rows import action_logprob, choice_part

    turns = sum(len(seqs[i].turns) for i in index)
    total, best = 0.0, 0
    for i in index:
        logps = sequence_choice_logprobs(model, seqs[i], device, trunk=trunks[i] if trunks is not None else None)
        picked = torch.stack([action_logprob(lp, t) for lp, t in zip(logps, seqs[i].turns)])
        loss = -picked.sum() / max(turns, 1)
        (scale * loss).backward()
        total += float(loss.item())
        best += sum(int(choice_part(lp, t).argmax()) == t.chosen for lp, t in zip(logps, seqs[i].turns))
    return total, turns, best


class SFTRun:
    """One supervised run: build samples, train, checkpoint, evaluate."""

    def __init__(self, config: TrainConfig):
        from agentgym.chat import ChatFormat
        from agentgym.train.setup import env_tools, load_model
        from agentgym.train.checkpoint import seed_everything

        self.cfg, self.run_dir = config, sft_run_dir(config)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch = require("torch", "hf")
        seed_everything(config.train.seed)
        if config.train.torch_threads:
            torch.set_num_threads(config.train.torch_threads)
        self.env_id, self.tools = env_tools(config)
        self.model, self.tokenizer = load_model(_sft_model_config(config), self.run_dir)
        self.chat = ChatFormat.from_tokenizer(self.tokenizer, config.rollout.tool_format)
        self.device = torch.device(config.model.device)
        self.pad_id = int(self.tokenizer.pad_token_id)
        if config.sft.train_layers:
            freeze_below_top_layers(self.model, config.sft.train_layers)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.trainable = sum(p.numel() for p in params)
        self.trunks: list[Any] | None = None  # choice objective: the frozen trunk's output per demo (once)
        self.optimizer = torch.optim.AdamW(params, lr=config.sft.lr, weight_decay=config.optim.weight_decay,
                                           betas=config.optim.betas, eps=config.optim.eps)
        warm = config.sft.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: min(1.0, (s + 1) / warm)) \
            if warm else None

    def run(self) -> Path:
        from agentgym.train.checkpoint import write_json
        from agentgym.train.sft.data import build_sft_samples

        cfg, s = self.cfg, self.cfg.sft
        write_json(self.run_dir / "config.json", cfg.to_dict())
        t0 = time.perf_counter()
        if s.objective == "choice":
            from agentgym.train.sft.data import expert_choice_sequences

            samples, stats = expert_choice_sequences(cfg, self.chat)
            head = {"samples": len(samples), "tokens": int(sum(len(x.ids) for x in samples))}
        else:
            samples, stats = build_sft_samples(cfg, self.chat, self.tools)
            prompt_share = 1 - sum(int(x.mask.sum()) for x in samples) / max(sum(len(x) for x in samples), 1)
            head = {"samples": len(samples), "tokens": int(sum(len(x) for x in samples)),
                    "action_tokens": int(sum(x.mask.sum() for x in samples)), "prompt_token_share": prompt_share}
        self._log({"phase": "data", **head, "trainable_params": self.trainable,
                   "time/data": time.perf_counter() - t0, **stats})
        plan = batches(len(samples), s.batch_size, s.epochs, cfg.train.seed)
        self.trunks = self._trunks(samples) if s.objective == "choice" else None
        losses = self._train(samples, plan)
        ckpt = self._save(len(plan))
        if s.evaluate and cfg.eval.seeds:
            self._log({"phase": "eval", "iteration": len(plan), **self.evaluate()})
        plot_loss(losses, self.run_dir / "sft_loss.png")
        return ckpt

    def _save(self, steps: int, into: Path | None = None, keep: int | None = None) -> Path:
        """ckpt-<steps> in `into` (the run dir: the warm start `latest` names), older ones beyond `keep`
        (checkpoint.keep; 0: none) dropped."""
        from agentgym.train.checkpoint import save_checkpoint

        return save_checkpoint(into or self.run_dir, steps, self.model, self.tokenizer,
                               {"kind": "sft", "optimizer": self.optimizer.state_dict(), "scheduler": None,
                                "critic": None, "next_seed": self.cfg.rollout.seed_start},
                               self.cfg.checkpoint.keep if keep is None else keep)

    def _trunks(self, seqs: Sequence[Any]) -> list[Any]:
        """The frozen trunk's output for every demo, once: the epochs run only the trainable top layers
        (the bottom layers' outputs cannot change while they are frozen; policies/trunk.py)."""
        from agentgym.train.updaters.choice_ppo import sequence_trunk

        t = time.perf_counter()
        trunks = [sequence_trunk(self.model, seq, self.device) for seq in seqs]
        cached = [x for x in trunks if x is not None]
        self._log({"phase": "trunk", "time/trunk": time.perf_counter() - t, "trunk_sequences": len(cached),
                   "trunk_mib": sum(x.hidden.numel() * x.hidden.element_size() for x in cached) / 2**20,
                   "trunk_layers": cached[0].start if cached else 0})
        return trunks

    def _train(self, samples: Sequence[Any], plan: list[np.ndarray]) -> list[float]:
        torch = require("torch", "hf")
        micro = self.cfg.train.micro_batch_size
        bar = _progress(len(plan), self.cfg.logging.progress)
        losses = []
        self.model.eval()  # no dropout, like the RL trainer (gradients flow all the same)
        for step, index in enumerate(plan):
            t = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            if self.cfg.sft.objective == "choice":
                loss, turns, best = choice_step(self.model, samples, index, self.device, self.trunks)
                counts = {"choice_turns": turns, "choice_accuracy": best / max(turns, 1)}
                seq_tokens = sum(len(samples[i].ids) for i in index)
            else:
                loss, tokens = nll_step(self.model, samples, index, micro, self.device, self.pad_id)
                counts = {"action_tokens": tokens}
                seq_tokens = sum(len(samples[i]) for i in index)
            params = [p for p in self.model.parameters() if p.requires_grad]
            norm = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.optim.max_grad_norm))
            self.optimizer.step()
            if self.scheduler is not None:
                self.scheduler.step()
            seconds = time.perf_counter() - t
            losses.append(loss)
            self._log({"phase": "train", "iteration": step, "loss": loss, **counts,
                       "grad_norm": norm, "tokens_per_s/train": seq_tokens / max(seconds, 1e-9),
                       "time/train": seconds}, quiet=bar is not None)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}")
            every = self.cfg.sft.save_every
            if every and (step + 1) % every == 0 and step + 1 < len(plan):  # the last one is saved by run()
                # apart from the run dir, so an interrupted run's `latest` never names a half-trained warm start
                self._save(step + 1, self.run_dir / "steps", keep=0)
        if bar is not None:
            bar.close()
        return losses

    def evaluate(self) -> dict[str, float]:
        """Greedy success on the eval section's held-out seeds, as the RL trainer evaluates."""
        from agentgym.policies.hf import HFPolicy
        from agentgym.engine.rollout import rollout
        from agentgym.train.metrics import rollout_metrics

        cfg, r, e = self.cfg, self.cfg.rollout, self.cfg.eval
        rc = r.engine_config(temperature=e.temperature, stop=self.chat.stop_strings, seed=cfg.train.seed)
        seeds = list(range(e.seed_start, e.seed_start + e.seeds))
        t = time.perf_counter()
        from agentgym.train.setup import prefix_cache_kwargs

        cache = prefix_cache_kwargs(cfg)
        if r.action_mode == "admissible":  # evaluate as the RL stage will act
            from agentgym.policies.admissible import AdmissiblePolicy

            policy: Any = AdmissiblePolicy(self.model, self.tokenizer, chat=self.chat, **cache)
        else:
            policy = HFPolicy(self.model, self.tokenizer, **cache)
        trajs = rollout(self.env_id, policy, self.chat, seeds, 1, rc,
                        env_kwargs=dict(r.env_kwargs) or None, reset_options={"split": e.split})
        return {**rollout_metrics(trajs, prefix="eval/"), "time/eval": time.perf_counter() - t}

    def _log(self, record: dict[str, Any], quiet: bool = False) -> None:
        import json

        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with (self.run_dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(clean) + "\n")
        if not quiet and self.cfg.logging.progress:
            keys = ("phase", "iteration", "loss", "choice_accuracy", "samples", "prompt_token_share", "demo_success",
                    "eval/success")
            print("sft " + " ".join(f"{k}={_fmt(record[k])}" for k in keys if k in record), file=sys.stderr)


def _sft_model_config(config: TrainConfig) -> TrainConfig:
    """sft.train_layers > 0 means full weights of the top layers for this stage, whatever model.lora says
    (RL after it may still train LoRA adapters on the SFT model)."""
    if not (config.sft.train_layers and config.model.lora.enabled):
        return config
    lora = dataclasses.replace(config.model.lora, enabled=False)
    return dataclasses.replace(config, model=dataclasses.replace(config.model, lora=lora))


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _progress(total: int, enabled: bool) -> Any:
    if not (enabled and sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="sft", unit="step", dynamic_ncols=True)


def plot_loss(losses: Sequence[float], path: Path) -> Path | None:
    """The loss curve as a PNG (skipped without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(range(len(losses)), losses)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title("SFT loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def sft(config: TrainConfig) -> Path:
    """Run SFT as `config.sft` says; returns the checkpoint dir."""
    return SFTRun(config).run()


def with_sft_start(config: TrainConfig) -> TrainConfig:
    """The `sft` stage of `agentgym train`: run SFT (unless its checkpoint exists), then return the config
    with model.policy pointing at the SFT checkpoint (and the sft stage switched off)."""
    from agentgym.train.checkpoint import find_checkpoint

    if config.model.policy.startswith("tiny:"):  # its toy env is registered by the model spec, which goes away
        from agentgym.train import tiny

        tiny.register_tiny_envs()
    run_dir = sft_run_dir(config)
    ckpt = find_checkpoint(str(run_dir), run_dir) if (run_dir / "latest").exists() else None
    if ckpt is None:
        ckpt = sft(config)
    else:
        print(f"sft: reusing {ckpt} (delete {run_dir} to redo the warm start)", file=sys.stderr)
    model = dataclasses.replace(config.model, policy=f"checkpoint:{ckpt}", init_from_config={})
    return dataclasses.replace(config, model=model, sft=dataclasses.replace(config.sft, enabled=False))
