"""What an admissible-mode evaluation costs and how far it is from the machine's rate: s/episode, s/turn,
tokens each turn runs, an estimate of its GFLOP/s, and the fp32 matrix-product rate at one turn's rows vs at
every episode's turn together - played twice side by side: one scoring pass a turn (`batch_turns` off, as
before), then every episode's turn in one pass (AdmissiblePolicy.candidate_scores_many, the default).

    python benchmarks/eval_scoring_speed.py --checkpoint runs/quickstart/train/sft/ckpt-36 --episodes 4

Episodes are the quick start's held-out household tasks (train/configs/quickstart_cpu.yaml: env kwargs,
layout, turn limit; split test_unseen, greedy), played by `admissible:` scoring as `agentgym eval` does.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from choice_speed import matmul_rate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="", help="a checkpoint dir (default: the base model)")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    from agentgym.policies.admissible import AdmissiblePolicy
    from agentgym.policies.registry import load_policy
    from agentgym.policies.trunk import forward_flops
    from agentgym.engine.rollout import rollout
    from agentgym.train.config import load_config

    torch.set_num_threads(args.threads)
    cfg = load_config("quickstart_cpu", ["logging.progress=false"])
    r = cfg.rollout
    spec = f"checkpoint:{args.checkpoint}" if args.checkpoint else cfg.model.policy
    loaded = load_policy(f"admissible:{spec}")
    chat = loaded.chat_format()
    rc = r.engine_config(temperature=0.0, stop=chat.stop_strings, seed=0)
    config = loaded.model.config
    seconds, plays = {}, {}
    for together in (False, True):   # one pass a turn (before), then every episode's turn in one pass
        policy = AdmissiblePolicy(loaded.model, loaded.tokenizer, chat=chat)   # cold: no stored KV, no memo
        policy.batch_turns = together
        t = time.perf_counter()
        trajs = rollout(r.env, policy, chat, list(range(cfg.eval.seed_start, cfg.eval.seed_start + args.episodes)), 1,
                        rc, env_kwargs=dict(r.env_kwargs) or None, reset_options={"split": "test_unseen"})
        wall = time.perf_counter() - t
        s = policy.scoring_stats()
        turns = max(s["turns"], 1)
        run = (s["prompt_tokens_run"] + s["candidate_tokens"]) / turns       # tokens a turn runs
        keys = (s["prompt_tokens_reused"] + s["prompt_tokens_run"] + s["candidate_tokens"]) / turns
        flops = forward_flops(config, int(run), int(keys), config.num_hidden_layers, int(s["candidate_tokens"] / turns) + 1)
        rate = flops * turns / 1e9 / max(s["seconds"], 1e-9)
        success = sum(bool(t.success) for t in trajs)
        seconds[together], plays[together] = s["seconds"], [[t.response_ids for t in tr.turns] for tr in trajs]
        print(f"{'every episode a pass' if together else 'one pass a turn'}: {len(trajs)} held-out episodes "
              f"({success} solved), {int(s['turns'])} turns, {args.threads} thread(s)")
        print(f"  wall {wall:.1f} s: {wall / len(trajs):.1f} s/episode; scoring {s['seconds']:.1f} s, "
              f"{s['seconds'] / turns:.3f} s/turn ({100 * s['seconds'] / wall:.0f}% of the wall time)")
        print(f"  a turn runs {run:.0f} tokens ({s['prompt_tokens_run'] / turns:.0f} new prompt, "
              f"{s['candidate_tokens'] / turns:.0f} candidate-tree) against ~{keys:.0f} keys; "
              f"~{flops / 1e9:.1f} GFLOP a turn, ~{rate:.0f} GFLOP/s")
    print(f"every episode's turn in one pass: {seconds[False] / max(seconds[True], 1e-9):.2f}x less scoring time; "
          f"the same plays: {'yes' if plays[False] == plays[True] else 'no'}")
    one, batched = matmul_rate(int(run), args.threads), matmul_rate(int(run) * len(trajs), args.threads)
    print(f"fp32 [rows, 576] x [576, 1536]: {one:.0f} GFLOP/s at one turn's {int(run)} rows, {batched:.0f} at "
          f"{len(trajs)} episodes' {int(run) * len(trajs)} rows")

if __name__ == "__main__":
    main()
