"""Update tokens/s on the CPU: full vs LoRA vs top layers, fp32 vs bf16 autocast, thread counts, side by side.

    python benchmarks/train_speed.py                        # SmolLM2-135M, 2 samples x 256 tokens, threads 1,2
    python benchmarks/train_speed.py --threads 1 --samples 4 --tokens 512 --compile

One row per configuration, all in one run (best of --repeats steps after a warm-up step). Each step is what the PPO
update does per micro-batch: `agentgym.train.updaters.token_ppo.forward` (backbone, LM head on the action
positions only) with gradients, a policy-gradient loss on the action tokens, backward, AdamW step.
The `score` column is the no-grad pass that recomputes old log-probs before the update. Samples look
like trajectory-layout episodes: a prompt, then 3 turns of 20 action tokens between observations.
CPU seconds (this process, all threads) are steadier than wall seconds on a shared machine.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import time
from dataclasses import dataclass


@dataclass
class Config:
    params: str      # "full" | "lora" | "top8"
    autocast: bool   # bf16 autocast around the forward pass
    threads: int
    compile: bool = False

    @property
    def name(self) -> str:
        extra = " +compile" if self.compile else ""
        return f"{self.params:<5} {'bf16-autocast' if self.autocast else 'fp32':<13} {self.threads} thr{extra}"


def make_samples(n: int, tokens: int, vocab: int, seed: int = 0) -> list:
    import numpy as np

    from agentgym.train.samples import Sample

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(100, vocab - 100, tokens).astype(np.int64)
        row = np.full(tokens, -1, dtype=np.int64)
        for turn in range(3):  # 3 action spans of 20 tokens, spread over the sequence
            start = tokens // 4 * (turn + 1) - 20
            row[start:start + 20] = turn
        out.append(Sample(ids, row, np.zeros(tokens)))
    return out


def prepare(base, config: Config):
    import torch

    model = copy.deepcopy(base)
    if config.params == "lora":
        import peft

        lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                               task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lora)
    elif config.params == "top8":
        layers = model.model.layers
        for p in model.parameters():
            p.requires_grad_(False)
        for layer in layers[len(layers) - 8:]:
            for p in layer.parameters():
                p.requires_grad_(True)
        for p in model.model.norm.parameters():
            p.requires_grad_(True)
    model.eval()  # as the trainer: no dropout
    if config.compile:
        model.forward = torch.compile(model.forward, dynamic=True)
    params = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(params, lr=1e-6)


def one_step(model, optimizer, samples, config: Config) -> None:
    import torch

    from agentgym.train.updaters.token_ppo import forward

    cast = torch.autocast("cpu", dtype=torch.bfloat16) if config.autocast else contextlib.nullcontext()
    optimizer.zero_grad(set_to_none=True)
    with cast:
        f = forward(model, None, samples, list(range(len(samples))), torch.device("cpu"), 1.0, 0)
        loss = -(f.logprobs.float() * f.mask).sum() / f.mask.sum()
    loss.backward()
    optimizer.step()


def score(model, samples, config: Config) -> None:
    import torch

    from agentgym.train.updaters.token_ppo import forward

    cast = torch.autocast("cpu", dtype=torch.bfloat16) if config.autocast else contextlib.nullcontext()
    with torch.no_grad(), cast:
        forward(model, None, samples, list(range(len(samples))), torch.device("cpu"), 1.0, 0)


def _clock(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--samples", type=int, default=2, help="sequences per step (one micro-batch)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per sequence")
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    parser.add_argument("--params", default="full,lora,top8", help="which weights train: full, lora, top8")
    parser.add_argument("--no-bf16", action="store_true", help="skip the bf16 autocast rows")
    parser.add_argument("--compile", action="store_true", help="add torch.compile rows (slow to compile on CPU)")
    parser.add_argument("--repeats", type=int, default=1, help="timed steps per configuration (best kept)")
    args = parser.parse_args(argv)

    import torch

    from agentgym.policies.models import load_model_and_tokenizer

    base, tokenizer = load_model_and_tokenizer(args.model, device="cpu", dtype=torch.float32)
    samples = make_samples(args.samples, args.tokens, len(tokenizer))
    configs = [Config(p, cast, int(t)) for t in args.threads.split(",") for p in args.params.split(",")
               for cast in ((False,) if args.no_bf16 else (False, True))]
    if args.compile:
        configs += [Config(p, False, int(args.threads.split(",")[0]), True) for p in args.params.split(",")]
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    print(f"model {args.model}, {args.samples} x {args.tokens} tokens per step ({args.samples * 60} action tokens), "
          f"torch {torch.__version__}; CPU bf16 support: avx512_bf16={'avx512_bf16' in flags} "
          f"amx_bf16={'amx_bf16' in flags}")
    results: dict[str, dict[str, float]] = {}
    for config in configs:  # one at a time: a copy of the model + AdamW state each (~2 GB for full)
        torch.set_num_threads(config.threads)
        model, optimizer = prepare(base, config)
        one_step(model, optimizer, samples, config)  # warm-up: first-step allocations and compiles are not speed
        best = results.setdefault(config.name, {"step": 1e9, "cpu": 1e9, "score": 1e9})
        for _ in range(args.repeats):
            step_wall, step_cpu = _clock(lambda: one_step(model, optimizer, samples, config))
            score_wall, _ = _clock(lambda: score(model, samples, config))
            best["step"], best["cpu"] = min(best["step"], step_wall), min(best["cpu"], step_cpu)
            best["score"] = min(best["score"], score_wall)
        model = optimizer = None  # free the copy before the next configuration builds its own
    tokens = args.samples * args.tokens
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n(load average {load} on {os.cpu_count()} CPUs; tokens/s counts every token of the sequences)")
    print(f"{'configuration':<32}{'step s':>8}{'tok/s':>8}{'cpu s':>8}{'tok/cpu-s':>11}{'score s':>9}{'score tok/s':>13}")
    ref = results[configs[0].name]
    for config in configs:
        r = results[config.name]
        print(f"{config.name:<32}{r['step']:>8.2f}{tokens / r['step']:>8.0f}{r['cpu']:>8.2f}{tokens / r['cpu']:>11.0f}"
              f"{r['score']:>9.2f}{tokens / r['score']:>13.0f}   x{ref['step'] / r['step']:.2f} vs first row")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
