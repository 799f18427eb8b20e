"""Model-FLOP utilisation of the token-PPO update: the project's step (train/updaters/token_ppo.py's padded
`forward`, or with a token budget the packed row of train/updaters/token_rows.py, then backward and AdamW)
against a plain transformers training step (`model(ids, labels=ids).loss`, backward, AdamW) on the same
samples, side by side in one run. Random weights at a real model's shape (nothing is downloaded), bf16
autocast on CUDA over fp32 master weights.

    python benchmarks/update_mfu.py                  # on a GPU: the issue's cases (SmolLM2-135M, Qwen2.5-1.5B)
    python benchmarks/update_mfu.py --quick          # a tiny shape on this CPU, fp32 (the test)
    python benchmarks/update_mfu.py --case qwen2.5-1.5b:packed:4x4096 --steps 5 --peak-tflops 989

A case is SHAPE:LAYOUT:ROWSxTOKENS. `padded`: ROWS samples of TOKENS tokens, one micro-batch, every token a
target (the plain step's work, so the two steps run the same FLOPs but the project's head runs on the targets
only). `packed`: multi-turn episodes (groups of plays sharing a task prompt, then observation / action turns,
a third of them actions) filling ROWS x TOKENS tokens, one packed row (`train.token_budget` = ROWS x TOKENS):
each sample attends to itself only and a shared prompt runs once; the plain step pads them to the longest.

Counted model FLOPs (policies/trunk.forward_flops, x3 for forward + backward): the projections and MLP on every
token the step runs (padding excluded), attention on the causal pairs it needs, the LM head on the rows whose
log-probs the loss reads. MFU = those FLOPs / step time / peak; the peak is the device's dense bf16 rate
(a table of known GPUs, or --peak-tflops), on a CPU the fp32 matrix-product rate measured in the same run.
The Qwen2.5-1.5B shape needs ~24 GB for fp32 weights, gradients and AdamW's moments: a GPU's case, not this CPU's.
"""
from __future__ import annotations

import argparse
import resource
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

SHAPES: dict[str, dict[str, Any]] = {
    # dims of the public configs (HuggingFaceTB/SmolLM2-135M-Instruct, Qwen/Qwen2.5-1.5B-Instruct)
    "smollm2-135m": dict(kind="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152, rope_theta=100000.0),
    "qwen2.5-1.5b": dict(kind="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, rope_theta=1000000.0),
    "tiny": dict(kind="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, rope_theta=10000.0),
}
GPU_CASES = ["smollm2-135m:padded:1x1024", "smollm2-135m:padded:8x4096", "smollm2-135m:packed:8x4096",
             "qwen2.5-1.5b:padded:4x4096", "qwen2.5-1.5b:packed:4x4096"]
QUICK_CASES = ["tiny:padded:2x96", "tiny:packed:2x96"]
# dense bf16 tensor-core peak, TFLOP/s (vendor sheets; SXM parts)
PEAK_BF16 = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "A10G": 70.0, "L4": 121.0}


@dataclass(frozen=True)
class Case:
    shape: str
    layout: str
    rows: int
    tokens: int

    @classmethod
    def parse(cls, text: str) -> "Case":
        try:
            shape, layout, size = text.split(":")
            rows, tokens = (int(x) for x in size.lower().split("x"))
        except ValueError:
            raise SystemExit(f"update_mfu: --case {text!r} is not SHAPE:LAYOUT:ROWSxTOKENS "
                             "(e.g. qwen2.5-1.5b:packed:4x4096)") from None
        if shape not in SHAPES or layout not in ("padded", "packed") or rows < 1 or tokens < 8:
            raise SystemExit(f"update_mfu: --case {text!r}: SHAPE is one of {', '.join(SHAPES)}, LAYOUT padded or "
                             "packed, ROWS >= 1, TOKENS >= 8")
        return cls(shape, layout, rows, tokens)


def build_model(shape: str, device: Any, seed: int = 0) -> Any:
    """A causal LM with random weights at `shape`'s dimensions, fp32, tied embeddings."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    dims = dict(SHAPES[shape])
    kind = dims.pop("kind")
    torch.manual_seed(seed)
    common = dict(tie_word_embeddings=True, max_position_embeddings=32768, attn_implementation="sdpa", **dims)
    if kind == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**common)).to(device)
    return LlamaForCausalLM(LlamaConfig(**common)).to(device)


def samples_for(case: Case, vocab: int, seed: int = 0) -> list[Any]:
    """The case's samples (train/batch.Sample): `padded` full-length rows of targets; `packed` multi-turn
    episodes of TOKENS / 2 to TOKENS tokens, 4 plays a task sharing a prompt of TOKENS / 8, then turns of
    64 observation tokens and 32 action tokens."""
    from agentgym.train.batch import Sample

    rng = np.random.default_rng(seed)
    if case.layout == "padded":
        out = []
        for _ in range(case.rows):
            ids = rng.integers(3, vocab, case.tokens).astype(np.int64)
            out.append(Sample(ids, np.zeros(case.tokens, dtype=np.int64), np.zeros(case.tokens)))
        return out
    budget, prompt = case.rows * case.tokens, max(case.tokens // 8, 4)
    shortest = max(case.tokens // 2, min(case.tokens, prompt + 65))   # at least one action token
    out, used = [], 0
    while True:
        task = rng.integers(3, vocab, prompt).tolist()
        for play in range(4):
            n = int(rng.integers(shortest, case.tokens + 1))
            cost = n if play == 0 else n - prompt      # the packed row feeds a group's prompt once
            if used + cost > budget:
                return out                             # never empty: one sample of <= TOKENS always fits
            ids = np.asarray(task + rng.integers(3, vocab, n - prompt).tolist(), dtype=np.int64)
            row = np.full(n, -1, dtype=np.int64)
            for turn, start in enumerate(range(prompt, n, 96)):    # 64 observation tokens, then 32 action tokens
                row[start + 64:start + 96] = turn
            out.append(Sample(ids, row, np.zeros(n)))
            used += cost


def step_flops(config: Any, samples: list[Any], project: bool, packed: bool) -> tuple[float, int]:
    """(forward + backward model FLOPs, tokens run) of one step over `samples`: each sample causal over its own
    tokens, a group's shared prompt once in the project's packed row; the head on every position (plain) or on
    the target positions only (project)."""
    from agentgym.policies.packed_rows import attention_pairs, pack_rows
    from agentgym.policies.trunk import forward_flops

    layers = config.num_hidden_layers
    if project and packed:
        block = pack_rows([(s.ids, []) for s in samples])
        reads = sum(int((s.row[1:] >= 0).sum()) for s in samples)
        return 3 * forward_flops(config, len(block.ids), 0, layers, reads, attention_pairs(block)), len(block.ids)
    total, tokens = 0.0, 0
    for s in samples:
        n = len(s)
        reads = int((s.row[1:] >= 0).sum()) if project else n
        total += 3 * forward_flops(config, n, 0, layers, reads, n * (n + 1) // 2)
        tokens += n
    return total, tokens


def project_step(model: Any, samples: list[Any], packed: bool, device: Any) -> Any:
    """The project's update arithmetic: log-probs of the targets (token_ppo.forward, or the packed row), a
    policy-gradient surrogate with fixed advantages, backward. Returns the loss."""
    import torch

    from agentgym.train.updaters import token_ppo
    from agentgym.train.updaters.token_rows import packed_forward

    index = list(range(len(samples)))
    if packed:
        logprobs, mask, _, _ = packed_forward(model, samples, index, device, 1.0, 0)
    else:
        f = token_ppo.forward(model, None, samples, index, device, 1.0, 0)
        logprobs, mask = f.logprobs, f.mask
    advantages = torch.linspace(-1.0, 1.0, mask.shape[-1], device=device).expand_as(mask)
    loss = -(logprobs.float() * advantages * mask).sum() / mask.sum().clamp(min=1.0)
    loss.backward()
    return loss


def plain_step(model: Any, samples: list[Any], device: Any) -> Any:
    """A plain transformers training step's forward and backward: the samples right-padded, every real token
    a label."""
    import torch

    from agentgym.train.samples import collate

    batch = collate(samples, range(len(samples)))
    ids, att = torch.as_tensor(batch.ids, device=device), torch.as_tensor(batch.attention, device=device)
    loss = model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(att == 0, -100), use_cache=False).loss
    loss.backward()
    return loss


def train_step(model: Any, optimizer: Any, samples: list[Any], kind: str, packed: bool, device: Any,
               autocast: bool) -> float:
    """One step of `kind` (project / plain) and AdamW; returns the loss."""
    import torch

    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        loss = project_step(model, samples, packed, device) if kind == "project" else plain_step(model, samples, device)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def timed_steps(case: Case, kind: str, device: Any, steps: int, autocast: bool) -> dict[str, float]:
    """Seconds per step (after one warm-up step) and the last loss of `kind` (project / plain) on `case`."""
    import torch

    model = build_model(case.shape, device)
    model.train()
    samples = samples_for(case, model.config.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device.type == "cuda")
    cuda = device.type == "cuda"

    packed = case.layout == "packed"
    train_step(model, optimizer, samples, kind, packed, device, autocast)   # warm-up: kernels, AdamW's state
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        loss = train_step(model, optimizer, samples, kind, packed, device, autocast)
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    flops, tokens = step_flops(model.config, samples, kind == "project", packed)
    memory = torch.cuda.max_memory_allocated() / 2**30 if cuda else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20   # the process's peak RSS on a CPU
    return dict(seconds=seconds, flops=flops, tokens=tokens, loss=loss, samples=len(samples), memory_gb=memory)


def peak_flops(device: Any, given: float, threads: int) -> tuple[float, str]:
    """(FLOP/s the MFU is measured against, where that figure comes from)."""
    import torch

    if given:
        return given * 1e12, f"--peak-tflops {given}"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, tflops in PEAK_BF16.items():
            if key in name:
                return tflops * 1e12, f"{name}: dense bf16 {tflops} TFLOP/s"
        raise SystemExit(f"update_mfu: no known bf16 peak for {name!r}: pass --peak-tflops (the vendor's dense bf16 "
                         "figure)")
    from choice_speed import matmul_rate

    rate = matmul_rate(2048, threads)
    return rate * 1e9, f"this CPU's fp32 [2048, 576] @ [576, 1536] rate, {rate:.0f} GFLOP/s, measured now"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="SHAPE:LAYOUT:ROWSxTOKENS (repeatable)")
    parser.add_argument("--quick", action="store_true", help="the tiny shape on the CPU, fp32 (the test)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps a case and kind (after one warm-up)")
    parser.add_argument("--device", default="", help="cuda or cpu (default: cuda when there is one)")
    parser.add_argument("--peak-tflops", type=float, default=0.0, help="the device's dense bf16 peak, TFLOP/s")
    parser.add_argument("--threads", type=int, default=2, help="CPU math threads")
    args = parser.parse_args(argv)
    import sys
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.steps < 1:
        raise SystemExit("update_mfu: --steps must be >= 1")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() and not args.quick else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("update_mfu: --device cuda but torch sees no GPU; use --device cpu (or --quick)")
    cases = [Case.parse(c) for c in args.case or (QUICK_CASES if args.quick or device.type == "cpu" else GPU_CASES)]
    peak, source = peak_flops(device, args.peak_tflops, args.threads)
    autocast = device.type == "cuda"
    print(f"device {device} ({source}); {'bf16 autocast' if autocast else 'fp32'}, {args.steps} timed steps")
    print(f"| case | step | samples | tokens run | s/step | TFLOP/step | TFLOP/s | MFU | "
          f"{'peak GB allocated' if device.type == 'cuda' else 'peak RSS GB (process)'} | loss |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for case in cases:
        for kind in ("plain", "project"):
            r = timed_steps(case, kind, device, args.steps, autocast)
            if device.type == "cuda":
                torch.cuda.empty_cache()   # the last case's model and optimizer state are gone
            rate = r["flops"] / r["seconds"]
            r.update(case=f"{case.shape}:{case.layout}:{case.rows}x{case.tokens}", kind=kind, mfu=rate / peak)
            results.append(r)
            print(f"| {r['case']} | {kind} | {r['samples']} | {r['tokens']} | {r['seconds']:.3f} | "
                  f"{r['flops'] / 1e12:.3g} | {rate / 1e12:.3g} | {100 * r['mfu']:.1f}% | {r['memory_gb']:.1f} | "
                  f"{r['loss']:.4f} |", flush=True)
        plain, project = results[-2], results[-1]
        print(f"  {plain['case']}: the project's step takes {project['seconds'] / plain['seconds']:.2f}x the plain "
              f"step's time")
    return results


if __name__ == "__main__":
    main()
