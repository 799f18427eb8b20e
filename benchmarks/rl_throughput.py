"""Episodes trained per minute of the quick start's RL stage: today's update and the shortcut one, side by side in
one run, on the same episodes from the same weights.

    python benchmarks/rl_throughput.py --checkpoint runs/quickstart_cpu/sft/ckpt-36     # the preset's 8 episodes
    python benchmarks/rl_throughput.py --quick                # a tiny random model, 2 x 2 short episodes (the test)

One rollout of the quickstart_cpu preset (household, admissible actions, 4 tasks x 2 plays, the rollout keeping
the frozen trunk's output), timed; then each setting's choice update (train/updaters/choice_ppo.py) of that batch:

  today     one row per episode, the KL reference's top layers run every update (choice_rows.PLAIN); every
            turn scored in a pass of its own, no memo
  shortcut  a group's episodes packed by shared prefix (policies/packed_rows.py), the reference's pass skipped
            while it holds the policy's weights (train/updaters/choice_rows.py); in the rollout, a turn scored
            before answered from the memo and every episode's turn scored in one pass (policies/admissible.py)

Each setting updates twice: at the warm start's weights (the RL stage's first iteration: the reference IS the
policy) and again after that step (every later iteration: it is not). The RL stage of `--iterations` iterations
is counted as one first update and (iterations - 1) later ones, each with its rollout:
episodes per minute = iterations x episodes x 60 / (iterations x rollout + first + (iterations - 1) x later).
Per phase: seconds, GFLOP counted as run (attention pairs in pieces; the rollout's scoring estimated from its
turns, see rollout_flops) and GFLOP/s; update tokens and GFLOP per episode; padding share (rows are never
padded: one row per forward). Exactness: the two settings' losses and the largest weight difference after the
same step. The two settings alternate (today first) so a drifting machine load hits both. The ceiling: each
setting's episodes per minute if all its counted FLOPs ran at the best fp32 matrix-product rate the machine
shows in the same run and nothing else cost time - what running the same FLOPs faster could give at most.
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

QUICK = ["model.train_layers=2", "rollout.groups=2", "rollout.group_size=2", "rollout.max_turns=3",
         "rollout.env_workers=1"]


def rollout_flops(batch: list[Any], config: Any, reuse: bool) -> float:
    """Estimated forward FLOPs of the admissible policy's scoring: per turn, the prompt tokens the episode's
    previous turn did not hold plus the candidate tree run through every layer against all keys before them
    (the dense masked product), and the head on the tree's read rows; with `reuse`, a turn whose prompt and
    candidates an earlier episode's turn had costs nothing (the policy's memo)."""
    import numpy as np

    from agentgym.policies.candidate_block import prefix_tree
    from agentgym.policies.kv_cache import common_prefix
    from agentgym.policies.trunk import forward_flops

    total, layers = 0.0, config.num_hidden_layers
    seen: set[tuple] = set()
    prompts: list[Any] = []                    # what the prefix store holds: every prompt scored so far
    for traj in batch:
        for turn in traj.turns:
            if turn.choice is None:
                continue
            key = (tuple(turn.prompt_ids), turn.choice.candidates)
            if reuse and key in seen:
                continue
            seen.add(key)
            ids = np.asarray(turn.prompt_ids, dtype=np.int64)
            n = len(ids)
            held = max((common_prefix(ids, p) for p in prompts), default=0)
            prompts.append(ids)
            nodes = len(prefix_tree(turn.choice.candidates)[0])
            q = max(n - held, 1) + nodes
            total += forward_flops(config, q, n + nodes, layers, read=nodes + 1)
    return total


def set_weights(model: Any, weights: list[Any]) -> None:
    import torch

    with torch.no_grad():
        for p, w in zip((p for p in model.parameters() if p.requires_grad), weights):
            p.copy_(w)  # in place: the trunk's stamp (layers below the trainable block) is untouched


def trained(model: Any) -> list[Any]:
    return [p.detach().clone() for p in model.parameters() if p.requires_grad]


def update(cfg: Any, model: Any, parts: dict[str, Any], batch: list[Any], shortcuts: Any, iteration: int
           ) -> dict[str, float]:
    from agentgym.train.batch import Components
    from agentgym.train.setup import make_optimizer
    from agentgym.train.updaters.choice_ppo import choice_step
    from agentgym.train.updaters.choice_rows import PLAIN

    optimizer, scheduler = make_optimizer(cfg, model, None)
    c = Components(model=model, optimizer=optimizer, scheduler=scheduler, critic=None, tools=[], pad_id=0, **parts)
    start = time.perf_counter()
    metrics = choice_step(c, cfg, batch, iteration, shortcuts=shortcuts)
    metrics["seconds"] = time.perf_counter() - start
    metrics["rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"  update ({'first' if iteration == 0 else 'later'}, {'today' if shortcuts == PLAIN else 'shortcut'}): "
          f"{metrics['seconds']:.1f} s, {metrics['update/tflop'] * 1e3:.0f} GFLOP, {metrics['update/tokens']:.0f} "
          f"tokens, loss {metrics['policy_loss']:.6f}, grad norm {metrics['grad_norm']:.6f}", flush=True)
    return metrics


def stage_mean(first: dict[str, float], later: dict[str, float], iterations: int, key: str) -> float:
    """`key` averaged over the RL stage: one first update and (iterations - 1) later ones."""
    return (first.get(key, 0.0) + (iterations - 1) * later.get(key, 0.0)) / iterations


def ceiling_rate(first: dict[str, float], later: dict[str, float], iterations: int, rollout_gflop: float,
                 episodes: int, optimizer_gflop: float, gflops: float) -> float:
    """Episodes per minute of the RL stage if every FLOP counted for it (rollout scoring, trunk, trainable block,
    reference, optimizer) ran at `gflops` and nothing else took time (env steps, Python, memory traffic): an
    upper bound on what running the same FLOPs faster could give."""
    def mix(key: str) -> float:
        return stage_mean(first, later, iterations, key)

    update = sum(mix(f"gflop/update_{k}") for k in ("trunk", "forward", "backward", "reference"))
    return episodes * 60 / ((rollout_gflop + update + optimizer_gflop) / gflops)


def phase_rows(name: str, first: dict[str, float], later: dict[str, float], iterations: int, rollout_s: float,
               scoring_s: float, rollout_gflop: float, episodes: int, optimizer_gflop: float) -> list[str]:
    """The table's lines for one setting: per phase seconds / GFLOP / GFLOP/s over the RL stage's mix."""
    def mix(key: str) -> float:
        return stage_mean(first, later, iterations, key)

    update_s = mix("seconds")
    phases = [("rollout scoring", scoring_s, rollout_gflop),
              ("trunk", mix("time/update_trunk"), mix("gflop/update_trunk")),
              ("trainable block", mix("time/update_forward") + mix("time/update_backward"),
               mix("gflop/update_forward") + mix("gflop/update_backward")),
              ("reference", mix("time/update_reference"), mix("gflop/update_reference")),
              ("optimizer", mix("time/update_optimizer"), optimizer_gflop)]
    lines = [f"{name}: {iterations * episodes * 60 / (iterations * rollout_s + iterations * update_s):.2f} episodes/min"
             f" (rollout {rollout_s:.1f} s + update {update_s:.1f} s an iteration; first update {first['seconds']:.1f}"
             f" s, later {later['seconds']:.1f} s)"]
    lines += [f"  {phase:<16}{secs:>8.1f} s{gflop:>9.1f} GFLOP{gflop / max(secs, 1e-9):>8.1f} GFLOP/s"
              for phase, secs, gflop in phases]
    tokens = mix("update/tokens") / episodes
    lines.append(f"  update per episode: {tokens:.0f} tokens through the trainable block, "
                 f"{mix('update/tflop') * 1e3 / episodes:.1f} GFLOP; row tokens {mix('update/packed_token_share'):.3f}"
                 f" of the episodes' own rows; padding share 0.000; reference pass skipped "
                 f"{first.get('update/reference_reused', 0):.0f} + {later.get('update/reference_reused', 0):.0f}")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="", help="an SFT checkpoint dir (default: the base model)")
    parser.add_argument("--quick", action="store_true", help="a tiny random model and 4 short episodes (tests)")
    parser.add_argument("--iterations", type=int, default=0, help="RL iterations counted (default: the preset's)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("overrides", nargs="*", help="config overrides (key=value) on quickstart_cpu")
    args = parser.parse_args(argv)
    import torch

    from agentgym.chat import ChatFormat
    from agentgym.engine.rollout import rollout
    from agentgym.policies.admissible import AdmissiblePolicy
    from agentgym.train.config import load_config
    from agentgym.train.setup import freeze_below_top_layers, load_model, make_reference
    from agentgym.train.updaters.choice_rows import PLAIN, Shortcuts

    torch.set_num_threads(args.threads)
    checkpoint = args.checkpoint
    tmp = tempfile.TemporaryDirectory()
    if args.quick and not checkpoint:
        from agentgym.train import tiny

        checkpoint = str(tiny.build_tiny(Path(tmp.name) / "tiny", layers=4, hidden=64))
    overrides = ["logging.progress=false", *(QUICK if args.quick else []), *args.overrides]
    if checkpoint:
        overrides.append(f"model.policy=checkpoint:{checkpoint}")
    cfg = load_config("quickstart_cpu", overrides)
    iterations = args.iterations or cfg.train.iterations
    model, tok = load_model(cfg, Path(tmp.name))
    model.eval()
    freeze_below_top_layers(model, cfg.model.train_layers)
    chat = ChatFormat.from_tokenizer(tok, cfg.rollout.tool_format)
    r = cfg.rollout
    rc = r.engine_config(temperature=r.temperature, stop=chat.stop_strings, seed=cfg.train.seed)
    text = model.config.get_text_config()
    ref = make_reference(cfg, model)
    played: dict[str, dict[str, Any]] = {}
    for name, reuse in (("today", False), ("shortcut", True)):  # each setting's own rollout, from a cold policy
        policy = AdmissiblePolicy(model, tok, chat=chat)
        policy.keep_trunk = True  # as the choice learner sets it (train/learners/choice.py)
        policy.reuse_scores = reuse
        policy.batch_turns = reuse  # today: one scoring pass a turn; shortcut: every episode's turn in one pass
        t = time.perf_counter()
        batch = rollout(r.env, policy, chat, list(range(r.seed_start, r.seed_start + r.groups)), r.group_size, rc,
                        env_kwargs=dict(r.env_kwargs) or None, reset_options={"split": "train"})
        seconds = time.perf_counter() - t
        scoring = policy.scoring_stats()
        played[name] = dict(batch=batch, seconds=seconds, scoring=scoring, policy=policy,
                            gflop=rollout_flops(batch, text, reuse) / 1e9)
        print(f"{name} rollout: {seconds:.1f} s, scoring {scoring['seconds']:.1f} s ({scoring['turns']:.0f} turns, "
              f"{scoring['turns_reused']:.0f} answered from the memo; {scoring['prompt_tokens_run']:.0f} prompt tokens "
              f"run, {scoring['prompt_tokens_reused']:.0f} reused, {scoring['candidate_tokens']:.0f} candidate tokens;"
              f" ~{played[name]['gflop']:.0f} GFLOP)", flush=True)
    same_play = [[t.response_ids for t in b.turns] for b in played["today"]["batch"]] == \
        [[t.response_ids for t in b.turns] for b in played["shortcut"]["batch"]]
    batch = played["today"]["batch"]
    episodes, turns = len(batch), sum(len(b.turns) for b in batch)
    settings = {"today": PLAIN, "shortcut": Shortcuts()}

    def parts(name: str) -> dict[str, Any]:
        return dict(tokenizer=tok, policy=played[name]["policy"], chat=chat, ref=ref, device=torch.device("cpu"),
                    env_id=r.env)

    start = trained(model)
    firsts: dict[str, dict[str, float]] = {}
    after: dict[str, list[Any]] = {}
    for name, shortcuts in settings.items():  # the first update: the reference holds the policy's weights
        set_weights(model, start)
        firsts[name] = update(cfg, model, parts(name), played[name]["batch"], shortcuts, 0)
        after[name] = trained(model)
    laters: dict[str, dict[str, float]] = {}
    for name, shortcuts in settings.items():  # a later update: from the same stepped weights (today's)
        set_weights(model, after["today"])
        laters[name] = update(cfg, model, parts(name), played[name]["batch"], shortcuts, 1)
    set_weights(model, start)
    optimizer_gflop = 12 * sum(w.numel() for w in start) / 1e9  # AdamW with weight decay: ~12 FLOPs an element
    print(f"{episodes} episodes, {turns} turns, {iterations} iterations counted, {torch.get_num_threads()} thread(s); "
          f"the two rollouts played the same actions: {'yes' if same_play else 'no'}")
    out: dict[str, Any] = {"episodes": episodes, "first": firsts, "later": laters, "same_play": same_play,
                           "rollout_s": {n: p["seconds"] for n, p in played.items()}}
    for name in settings:
        p = played[name]
        sc = p["scoring"]
        for line in phase_rows(name, firsts[name], laters[name], iterations, p["seconds"], sc["seconds"], p["gflop"],
                               episodes, optimizer_gflop):
            print(line)
    moved = max(float((a - b).abs().max()) for a, b in zip(after["today"], after["shortcut"]))
    step = max(float((a - b).abs().max()) for a, b in zip(after["today"], start))
    rate = {n: iterations * episodes * 60 / (iterations * played[n]["seconds"] + firsts[n]["seconds"]
                                             + (iterations - 1) * laters[n]["seconds"]) for n in settings}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from choice_speed import matmul_rate

    best = max(matmul_rate(rows, args.threads) for rows in (512, 2048))   # this machine's fp32 products, now
    ceiling = {n: ceiling_rate(firsts[n], laters[n], iterations, played[n]["gflop"], episodes, optimizer_gflop, best)
               for n in settings}
    out.update(rates=rate, ceilings=ceiling, matmul_gflops=best, weight_diff=moved, step=step)
    print(f"shortcut / today: {rate['shortcut'] / rate['today']:.2f}x episodes per minute, update "
          f"{(firsts['today']['seconds'] + (iterations - 1) * laters['today']['seconds']) / (firsts['shortcut']['seconds'] + (iterations - 1) * laters['shortcut']['seconds']):.2f}x")
    print(f"ceiling: with every counted FLOP at this machine's best fp32 matrix-product rate ({best:.0f} GFLOP/s, "
          f"measured now) and no other cost, today's FLOPs would train {ceiling['today']:.2f} episodes/min, the "
          f"shortcut's {ceiling['shortcut']:.2f}: at most {ceiling['shortcut'] / rate['today']:.2f}x today's measured "
          f"rate (the shortcut runs at {rate['shortcut'] / ceiling['shortcut']:.2f} of its ceiling)")
    print(f"exactness: policy loss {firsts['today']['policy_loss']:.6f} vs {firsts['shortcut']['policy_loss']:.6f} "
          f"(first), kl {laters['today']['kl']:.6g} vs {laters['shortcut']['kl']:.6g} (later); after the first step "
          f"the weights differ by at most {moved:.2e} (the step moved them by up to {step:.2e}); grad norm "
          f"{firsts['today']['grad_norm']:.6f} vs {firsts['shortcut']['grad_norm']:.6f}; peak RSS "
          f"{max(m['rss_gb'] for m in (*firsts.values(), *laters.values())):.2f} GB")
    sys.stdout.flush()
    tmp.cleanup()
    return out


if __name__ == "__main__":
    main()
