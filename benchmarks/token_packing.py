"""Token PPO's update, padded micro-batches vs packed ones (train.token_budget), side by side on one batch.
Packed twice: in the mini-batch's shuffled order (as before `token_rows.prefix_order`) and sorted by token ids
(the update's order now: a group's plays share their prompt in one row).

The batch: `--groups` tasks x `--plays` free-text episodes (a group's plays share the task prompt, then run
`--min-len`..`--max-len` tokens, about a third of them generated), random tokens on a random tiny Llama (the
update's arithmetic does not depend on the weights). Prints, per layout: seconds of the update (scoring + the
PPO epochs), tokens run per update, padding share, micro-batches. Exactness is tests/train/test_token_rows.py's.

    OMP_NUM_THREADS=1 python3 benchmarks/token_packing.py --layers 4 --hidden 256
"""
from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import numpy as np


def batch(groups: int, plays: int, prompt: int, lo: int, hi: int, vocab: int, seed: int) -> list:
    from agentgym.train.batch import Sample

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(groups):
        task = rng.integers(3, vocab, prompt).tolist()
        for _ in range(plays):
            n = int(rng.integers(lo, hi + 1))
            ids = np.asarray(task + rng.integers(3, vocab, n - prompt).tolist(), dtype=np.int64)
            row = np.full(n, -1, dtype=np.int64)
            for turn, start in enumerate(range(prompt, n, 90)):   # a turn: 60 observation tokens, 30 generated
                row[start + 60:start + 90] = turn
            out.append(Sample(ids, row, np.zeros(n)))
    return out


def run(model, samples, overrides: list[str]) -> tuple[float, dict]:
    import torch

    from agentgym.train.batch import Targets
    from agentgym.train.config import load_config
    from agentgym.train.setup import Components, make_optimizer
    from agentgym.train.updaters import token_ppo

    cfg = load_config(None, ["train.mini_batches=1", "train.ppo_epochs=1", *overrides])
    model = copy.deepcopy(model)
    optimizer, scheduler = make_optimizer(cfg, model, None)
    c = Components(model=model, tokenizer=None, policy=None, chat=None, critic=None, ref=None, optimizer=optimizer,
                   scheduler=scheduler, device=torch.device("cpu"), env_id="", tools=[], pad_id=0)
    rng = np.random.default_rng(0)
    targets = Targets([np.where(s.mask[1:], rng.normal(size=len(s) - 1), 0.0) for s in samples], None, None,
                      [np.maximum(s.row[1:], 0) for s in samples])
    start = time.perf_counter()
    scored = token_ppo.score(c, samples, cfg)
    stats = token_ppo.ppo_update(c, samples, scored, targets, cfg, shuffle_seed=1)
    return time.perf_counter() - start, stats.as_metrics()


def padded_tokens(samples, micro: int, seed: int = 1) -> tuple[int, int]:
    """(tokens the padded update's micro-batches run, micro-batches), in ppo_update's shuffled order."""
    order = np.random.default_rng(seed).permutation(len(samples))
    chunks = [order[k:k + micro] for k in range(0, len(order), micro)]
    return sum(len(ch) * max(len(samples[i]) for i in ch) for ch in chunks), len(chunks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--plays", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--min-len", type=int, default=300)
    ap.add_argument("--max-len", type=int, default=1000)
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--token-budget", type=int, default=2048)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from agentgym.train import tiny

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = tiny.build_tiny(Path(tmp) / "tiny", layers=args.layers, hidden=args.hidden)
        model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    samples = batch(args.groups, args.plays, args.prompt, args.min_len, args.max_len, model.config.vocab_size, 0)
    own = sum(len(s) for s in samples)
    print(f"{len(samples)} samples, {own} tokens ({min(map(len, samples))}-{max(map(len, samples))} each); "
          f"tiny Llama {args.layers} layers x {args.hidden}")
    seconds, _ = run(model, samples, [f"train.micro_batch_size={args.micro_batch_size}"])
    tokens, micros = padded_tokens(samples, args.micro_batch_size)
    print(f"padded   micro_batch_size={args.micro_batch_size:<5} {seconds:7.2f} s/update  "
          f"{tokens:7d} tokens/pass  padding share {1 - own / tokens:.3f}  {micros} micro-batches")
    from agentgym.train.updaters import token_rows

    prefix_order = token_rows.prefix_order
    for order in ("shuffled", "prefix"):
        token_rows.prefix_order = prefix_order if order == "prefix" else (lambda samples, index: list(index))
        seconds, m = run(model, samples, [f"train.token_budget={args.token_budget}"])
        print(f"packed   token_budget={args.token_budget:<7} {order + ' order':<15} {seconds:7.2f} s/update  "
              f"{m['update/tokens_per_micro_batch'] * m['update/micro_batches']:7.0f} tokens/pass  "
              f"padding share {m['update/padding_share']:.3f}  {m['update/micro_batches']:.0f} micro-batches "
              f"({m['update/own_row_sequences']:.0f} in a row of their own)")
    token_rows.prefix_order = prefix_order


if __name__ == "__main__":
    main()
