"""The RL choice update with the frozen trunk recomputed vs taken from the rollout's own scoring passes
(policies/rollout_trunk.py), side by side on the same household episodes: where the update's time goes
(trunk / forward / backward / optimizer), its tokens/s and GFLOP/s, the loss difference between the two,
and what keeping the trunk costs the rollout.

    python benchmarks/rollout_trunk_speed.py --checkpoint runs/quickstart/train/sft/ckpt-36
    python benchmarks/rollout_trunk_speed.py --tasks 4 --group 2 --threads 1      # 8 episodes (the preset's)

Episodes: the quick-start preset's (train/configs/quickstart_cpu.yaml) env, layout and top-8-layer split,
played at temperature 1 by the admissible policy on train-split seeds; the same batch is then updated twice
from the same weights: once recomputing the trunk, once reusing the rollout's.
"""
from __future__ import annotations

import argparse
import copy
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="", help="an SFT checkpoint dir (default: the base model)")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    from agentgym.chat import ChatFormat
    from agentgym.policies.admissible import AdmissiblePolicy
    from agentgym.engine.rollout import rollout
    from agentgym.train.batch import Components
    from agentgym.train.config import load_config
    from agentgym.train.setup import freeze_below_top_layers, load_model, make_optimizer
    from agentgym.train.updaters.choice_ppo import choice_step

    torch.set_num_threads(args.threads)
    overrides = ["logging.progress=false"] + ([f"model.policy=checkpoint:{args.checkpoint}"] if args.checkpoint else [])
    cfg = load_config("quickstart_cpu", overrides)
    model, tok = load_model(cfg, __import__("pathlib").Path("/tmp"))
    model.eval()
    freeze_below_top_layers(model, cfg.model.train_layers)
    chat = ChatFormat.from_tokenizer(tok, cfg.rollout.tool_format)
    r = cfg.rollout
    rc = r.engine_config(temperature=r.temperature, stop=chat.stop_strings, seed=cfg.train.seed)
    seeds = list(range(r.seed_start, r.seed_start + args.tasks))
    timings, batch = {}, None
    for keep in (False, True):  # the rollout without and with keeping the trunk (same seeds, same episodes)
        policy = AdmissiblePolicy(model, tok, chat=chat)
        policy.keep_trunk = keep
        t = time.perf_counter()
        batch = rollout(r.env, policy, chat, seeds, args.group, rc, env_kwargs=dict(r.env_kwargs) or None,
                        reset_options={"split": "train"})
        timings[keep] = (time.perf_counter() - t, policy.scoring_stats())
    turns = sum(len(t.turns) for t in batch)
    print(f"{len(batch)} episodes, {turns} turns; rollout {timings[False][0]:.1f} s without keeping the trunk, "
          f"{timings[True][0]:.1f} s with (scoring {timings[False][1]['seconds']:.1f} vs {timings[True][1]['seconds']:.1f} s)")
    before = copy.deepcopy(model)  # the recompute run trains a copy of the same weights
    start = copy.deepcopy(model)
    results = {}
    for name, m, pol in (("trunk reused", model, policy), ("recomputed", before, None)):
        optimizer, scheduler = make_optimizer(cfg, m, None)
        c = Components(model=m, tokenizer=tok, policy=pol, chat=chat, critic=None, ref=None, optimizer=optimizer,
                       scheduler=scheduler, device=torch.device("cpu"), env_id=r.env, tools=[], pad_id=0)
        t = time.perf_counter()
        metrics = choice_step(c, cfg, batch, 0)
        results[name] = (time.perf_counter() - t, metrics)
    print(f"\n{'update':<14}{'seconds':>9}{'trunk':>7}{'forward':>9}{'backward':>10}{'optim':>7}{'tokens/s':>10}"
          f"{'GFLOP/s':>9}{'TFLOP':>7}{'reused':>8}{'grad norm':>12}")
    for name, (secs, m) in results.items():
        print(f"{name:<14}{secs:>9.1f}{m['time/update_trunk']:>7.1f}{m['time/update_forward']:>9.1f}"
              f"{m['time/update_backward']:>10.1f}{m['time/update_optimizer']:>7.1f}{m['tokens_per_s/update']:>10.0f}"
              f"{m['gflops_per_s/update']:>9.1f}{m['update/tflop']:>7.2f}{m['update/trunk_from_rollout_share']:>8.2f}"
              f"{m['grad_norm']:>12.6f}")
    (a, ma), (b, mb) = results["trunk reused"], results["recomputed"]
    # on-policy the loss value is the advantages' mean whatever the forward: compare gradients and weights
    # (AdamW's first step moves every element with a nonzero gradient by ~lr, however small that gradient:
    # near-zero elements whose rounding differs are where the two runs' weights part most)
    with torch.no_grad():
        moved = max(float((p - q).abs().max()) for p, q in zip(model.parameters(), start.parameters()))
        apart = max(float((p - q).abs().max()) for p, q in zip(model.parameters(), before.parameters()))
    print(f"speed-up {b / a:.2f}x; grad norm difference {abs(ma['grad_norm'] - mb['grad_norm']):.3g}; "
          f"weights after the two updates differ by at most {apart:.3g} (the update moved them by up to {moved:.3g}); "
          f"{mb['update/tokens_per_sequence']:.0f} row tokens an episode")


if __name__ == "__main__":
    main()
