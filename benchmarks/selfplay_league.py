"""Self-play with a league (issue 53): win rate against random and against the starting weights, before and after
training a self-play preset, on the same seeds in both seat orders (paired game by game).

    python benchmarks/selfplay_league.py [--preset selfplay_tictactoe_cpu] [--games 20] [--run-dir DIR]
                                         [key=value ...]     # overrides for the preset
    python benchmarks/selfplay_league.py --preset P --trained R/ckpt-2 --run-dir OUT    # a saved checkpoint, no training

Before: the preset's starting policy (admissible:hf:MODEL) against `random` and against itself. Training: the
preset (the learner in one seat, alternating, against the league: random, the start weights, snapshots). After:
the final checkpoint against `random` and against the start. Each line: W/D/L from the policy's side, the win
rate with its 95% Wilson interval; the paired line counts the (seed, seat order) games the trained policy did
better / worse than the start did against the same random opponent seed (W > D > L), with an exact sign test.
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import time
from pathlib import Path

SCORE = {"win": 2, "draw": 1, "loss": 0}


def sign_test(better: int, worse: int) -> float:
    """Two-sided exact sign test p-value of `better` vs `worse` (ties left out)."""
    n = better + worse
    if n == 0:
        return 1.0
    k = min(better, worse)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def versus(env: str, kwargs: dict, policy_spec: str, opponent_spec: str, seeds: range, config) -> dict:
    from agentgym.engine.multiagent import load_seat_policy
    from agentgym.eval.versus import play_versus

    policy = load_seat_policy(policy_spec, "policy")
    opponent = load_seat_policy(opponent_spec, "opponent") if opponent_spec != policy_spec else policy
    return play_versus(env, policy, opponent, seeds, config, kwargs, names=(policy_spec, opponent_spec))


def outcomes(record: dict) -> list[str]:
    """The policy's outcome of every game, in (seat order, seed) order."""
    n = len(record["matches"]) // 2
    return [m.outcome(0 if i < n else 1) for i, m in enumerate(record["matches"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="selfplay_tictactoe_cpu")
    parser.add_argument("--games", type=int, default=20, help="seeds per seat order (default 20)")
    parser.add_argument("--seed-start", type=int, default=1_000_000)
    parser.add_argument("--run-dir", default="runs/selfplay_league")
    parser.add_argument("--trained", metavar="CKPT", help="measure this checkpoint of a run (e.g. R/ckpt-2) "
                                                          "as the trained policy instead of training one")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    from agentgym.engine.rollout import RolloutConfig
    from agentgym.eval.versus import format_record
    from agentgym.policy import SamplingParams
    from agentgym.train.config import load_config
    from agentgym.train.trainer import train

    cfg = load_config(args.preset, [f"train.run_dir={args.run_dir}", "logging.progress=false", *args.overrides])
    if cfg.train.torch_threads:  # the evaluations too, not only the training (two processes on two cores)
        import torch

        torch.set_num_threads(cfg.train.torch_threads)
    r = cfg.rollout
    env, kwargs = r.env, dict(r.env_kwargs)
    start = f"admissible:{cfg.model.policy}"
    config = RolloutConfig(layout=r.layout, history_turns=r.history_turns, max_context_tokens=r.max_context_tokens,
                           max_observation_tokens=r.max_observation_tokens,
                           sampling=SamplingParams(temperature=cfg.selfplay.eval_temperature, max_tokens=r.max_new_tokens,
                                                   seed=0))
    seeds = range(args.seed_start, args.seed_start + args.games)
    rows: dict[str, dict] = {}
    t0, cpu0 = time.time(), resource.getrusage(resource.RUSAGE_SELF).ru_utime

    def measure(name: str, policy: str, opponent: str) -> None:
        started = time.time()
        rows[name] = versus(env, kwargs, policy, opponent, seeds, config)
        print(format_record(name, rows[name]["total"]) + f"  [{time.time() - started:.0f} s]", flush=True)

    measure("before: start vs random", start, "random:7")
    measure("before: start vs start", start, start)
    if args.trained:
        run_dir = Path(args.trained)
        print(f"trained: {run_dir} (not trained here)", flush=True)
    else:
        started = time.time()
        run_dir = train(cfg)
        print(f"trained {cfg.train.iterations} iterations in {time.time() - started:.0f} s: {run_dir}", flush=True)
    after = f"admissible:checkpoint:{run_dir}"
    measure("after: trained vs random", after, "random:7")
    measure("after: trained vs start", after, start)
    before_games, after_games = outcomes(rows["before: start vs random"]), outcomes(rows["after: trained vs random"])
    pairs = [(SCORE[a], SCORE[b]) for a, b in zip(after_games, before_games) if a in SCORE and b in SCORE]
    better, worse = sum(a > b for a, b in pairs), sum(a < b for a, b in pairs)
    print(f"paired vs random (same seed, seat order and random seed): trained better in {better}, worse in {worse}, "
          f"same in {len(pairs) - better - worse} of {len(pairs)} games; sign test p = {sign_test(better, worse):.3f}")
    cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
    print(f"wall {time.time() - t0:.0f} s, CPU {cpu:.0f} s")
    out = Path(args.run_dir) / "selfplay_league.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({name: {k: v for k, v in rec.items() if k != "matches"} for name, rec in rows.items()},
                              indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
