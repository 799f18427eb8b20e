"""The admissible-choice update's cost on real household episodes, side by side: the full forward (every
layer, every pass) vs the cached frozen trunk (policies/trunk.py: the bottom layers once, the top per
pass) with the dense masked attention vs with tree attention (policies/tree_attention.py: only the pairs
the tree mask allows), GFLOP/s of each against the machine's fp32 matrix-product rate (the FLOPs counted
are the dense attention's for every path, so a path that skips pairs shows a higher "rate"), and tokens
per episode.

    python benchmarks/choice_speed.py                       # 4 fair-expert demos, top 8 of 30 layers, 1 thread
    python benchmarks/choice_speed.py --episodes 8 --threads 2 --passes 3 --train-layers 8

Episodes are the quick-start preset's (train/configs/quickstart_cpu.yaml) fair-expert demonstrations of
Household-PickPlace as `sft.objective=choice` sees them: the conversation then every turn's candidate
tree in one row. `--passes` is how many forward+backward passes a sequence gets (SFT epochs, or PPO
epochs x the old-log-prob pass): the trunk is paid once either way with the cache, `passes` times without.
Also prints the largest loss and gradient difference of each path against the full forward (its tolerance).
"""
from __future__ import annotations

import argparse
import time


def matmul_rate(rows: int, threads: int, repeats: int = 5) -> float:
    """fp32 GFLOP/s of [rows, 576] @ [576, 1536] (SmolLM2-135M's MLP up-projection shape)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(rows, 576), torch.randn(576, 1536)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, (time.perf_counter() - t) / 10)
    return 2 * rows * 576 * 1536 / best / 1e9


def demo_sequences(episodes: int, train_layers: int) -> tuple[list, object, object]:
    import torch

    from agentgym.chat import ChatFormat
    from agentgym.train.config import load_config
    from agentgym.train.setup import load_model
    from agentgym.train.sft.data import expert_choice_sequences

    cfg = load_config("quickstart_cpu", [f"sft.episodes={episodes}", f"model.train_layers={train_layers}",
                                         "logging.progress=false"])
    model, tok = load_model(cfg, __import__("pathlib").Path("/tmp"))
    seqs, stats = expert_choice_sequences(cfg, ChatFormat.from_tokenizer(tok))
    print(f"{len(seqs)} demo sequences: {stats}")
    return seqs, model, torch.device("cpu")


def one_pass(model, seq, device, trunk, tree: bool = False) -> tuple[float, dict]:
    from agentgym.train.updaters.choice_ppo import sequence_choice_logprobs
    from agentgym.train.updaters.choice_rows import action_logprob

    model.zero_grad(set_to_none=True)
    logps = sequence_choice_logprobs(model, seq, device, trunk=trunk, tree=tree)
    loss = -sum(action_logprob(lp, t) for lp, t in zip(logps, seq.turns)) / len(seq.turns)
    loss.backward()
    return float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--train-layers", type=int, default=8)
    args = parser.parse_args()
    import torch

    from agentgym.policies.candidate_block import turns_block
    from agentgym.train.updaters.choice_ppo import sequence_trunk
    from agentgym.train.updaters.cost import UpdateCost

    seqs, model, device = demo_sequences(args.episodes, args.train_layers)
    torch.set_num_threads(args.threads)
    config = model.config
    blocks = [turns_block(0, s.ids, [(t.prompt_len, t.candidates) for t in s.turns]) for s in seqs]
    conv = sum(len(s.ids) for s in seqs) / len(seqs)
    row = sum(len(b.ids) for b in blocks) / len(seqs)
    turns = sum(len(s.turns) for s in seqs) / len(seqs)
    cands = sum(len(t.candidates) for s in seqs for t in s.turns) / max(sum(len(s.turns) for s in seqs), 1)
    print(f"tokens per episode: conversation {conv:.0f}, candidate trees {row - conv:.0f}, row {row:.0f}; "
          f"{turns:.1f} turns, {cands:.1f} candidates per turn")
    paths = {"full forward": UpdateCost(), "cached trunk": UpdateCost(), "trunk+tree attn": UpdateCost()}
    worst = dict.fromkeys(paths, (0.0, 0.0))
    for seq, block in zip(seqs, blocks):
        trunks = {}
        for name, tree in (("cached trunk", False), ("trunk+tree attn", True)):
            with paths[name].timed("trunk"):
                trunks[name] = sequence_trunk(model, seq, device, tree=tree)
        start = trunks["cached trunk"].start if trunks["cached trunk"] is not None else 0
        for _ in range(args.passes):
            with paths["full forward"].timed("forward"):
                loss_f, grads_f = one_pass(model, seq, device, None)
            for name, tree in (("cached trunk", False), ("trunk+tree attn", True)):
                with paths[name].timed("forward"):
                    loss_c, grads_c = one_pass(model, seq, device, trunks[name], tree)
                grad = max(float((grads_f[n] - grads_c[n]).abs().max()) for n in grads_f)
                worst[name] = (max(worst[name][0], abs(loss_f - loss_c)), max(worst[name][1], grad))
        paths["full forward"].add_row(config, len(block.ids), len(block.read), start, args.passes, trunk_cached=False)
        for name in ("cached trunk", "trunk+tree attn"):
            paths[name].add_row(config, len(block.ids), len(block.read), start, args.passes)
    rate = matmul_rate(int(row), args.threads)
    print(f"\n{len(seqs)} episodes x {args.passes} forward+backward passes, top {args.train_layers} of "
          f"{config.num_hidden_layers} layers, {args.threads} thread(s)")
    print(f"{'path':<17}{'seconds':>9}{'trunk s':>9}{'s/episode-pass':>16}{'TFLOP':>8}{'GFLOP/s':>9}"
          f"{'max |dloss|':>13}{'max |dgrad|':>13}  (fp32 matmul {rate:.0f} GFLOP/s)")
    base = sum(paths["full forward"].seconds.values())
    for name, cost in paths.items():
        secs = sum(cost.seconds.values())
        print(f"{name:<17}{secs:>9.1f}{cost.seconds['trunk']:>9.1f}{secs / (len(seqs) * args.passes):>16.2f}"
              f"{cost.flops / 1e12:>8.2f}{cost.flops / 1e9 / secs:>9.1f}{worst[name][0]:>13.3g}{worst[name][1]:>13.3g}"
              f"  {base / secs:.2f}x")


if __name__ == "__main__":
    main()
