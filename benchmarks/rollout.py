"""Rollout engine benchmark: orchestration overhead per turn, and batched vs one-by-one generation.

    python benchmarks/rollout.py                 # both sections
    python benchmarks/rollout.py --no-generation # engine overhead only (no model load)

Section 1 runs the engine with a zero-cost scripted policy on a trivial env (a step costs ~1 us), so
what is measured is the engine itself: building prompts (token accounting, chat delimiters), one
batched generate call per turn, dispatching env steps to the executor and recording turns. Target:
under 1 ms per turn per env at 256 concurrent envs.

Section 2 is `bench_generation()` from benchmarks/generation.py (the HF policy's batched vs one-by-one
tokens/s; target: batched >= 4x), run in the same process so the figures sit side by side.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

from agentgym.chat import ChatFormat
from agentgym.core import TextEnv, make_info
from agentgym.policies.base import SamplingParams
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.engine.rollout import RolloutConfig, rollout


class TrivialEnv(TextEnv):
    """Constant observation, never ends by itself: its cost is negligible next to the engine's."""

    def reset(self, *, seed=None, options=None):
        return "You see a wall.", make_info(task_id="trivial")

    def step(self, action):
        return "You see a wall.", 0.0, False, False, make_info()


def _constant(ctx):
    return "look"


def bench_engine(sizes: list[int], turns: int, modes: list[tuple[str, str, bool]], repeats: int,
                 chat: ChatFormat | None = None) -> None:
    chat = chat or ChatFormat.simple()
    policy = ScriptedPolicy(_constant, chat)
    rollout(TrivialEnv, policy, chat, [0, 1], config=RolloutConfig(max_turns=2))  # warm-up: imports, registry
    print(f"== engine overhead: zero-cost scripted policy, trivial env, {turns} turns per episode, "
          f"{chat.name} chat format ==")
    header = f"{'envs':>6} " + " ".join(f"{label:>26}" for label, _, _ in modes)
    print(header)
    print(f"{'':>6} " + " ".join(f"{'turns/s  ms/turn/env':>26}" for _ in modes))
    for n in sizes:
        cells = []
        for _, executor, async_mode in modes:
            config = RolloutConfig(max_turns=turns, executor=executor, async_mode=async_mode,
                                   sampling=SamplingParams(max_tokens=16), max_context_tokens=None)
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                trajs = rollout(TrivialEnv, policy, chat, list(range(n)), config=config)
                best = min(best, time.perf_counter() - t0)
            total = sum(t.num_turns for t in trajs)
            assert total == n * turns, (total, n * turns)
            cells.append(f"{total / best:>12.0f} {1000 * best / total:>13.4f}")
        print(f"{n:>6} " + " ".join(f"{c:>26}" for c in cells))
    print("ms/turn/env = wall time / (envs x turns): the whole engine cost of one env-turn, env reset included")


def bench_generation_section(**kwargs) -> None:
    print("\n== batched vs one-by-one generation tokens/s with the HF policy (benchmarks/generation.py) ==")
    path = Path(__file__).with_name("generation.py")
    if not path.is_file():
        print("skipped: benchmarks/generation.py is not present (the policies part provides bench_generation())")
        return
    spec = importlib.util.spec_from_file_location("agentgym_bench_generation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "bench_generation"):
        print("skipped: benchmarks/generation.py has no bench_generation()")
        return
    result = module.bench_generation(**kwargs)  # prints its own table
    if isinstance(result, dict) and "speedup" in result:
        print(f"(rollout benchmark) batched / one-by-one generation speedup: {result['speedup']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,64,256", help="comma-separated numbers of concurrent envs")
    parser.add_argument("--turns", type=int, default=20, help="turns per episode")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs per cell")
    parser.add_argument("--hf-chat", action="store_true",
                        help="also run the engine table with SmolLM2's tokenizer and chat template")
    parser.add_argument("--gen-threads", type=int, default=None,
                        help="torch threads for the generation section (1 is fastest on a busy machine)")
    parser.add_argument("--no-generation", action="store_true", help="skip the HF generation section")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    modes = [("serial", "serial", False), ("thread", "thread", False), ("thread+async", "thread", True)]
    bench_engine(sizes, args.turns, modes, args.repeats)
    if args.hf_chat:
        from agentgym.policies.models import load_tokenizer

        print()
        bench_engine(sizes, args.turns, modes, args.repeats,
                     ChatFormat.from_tokenizer(load_tokenizer("smollm2-135m-instruct")))
    if not args.no_generation:
        bench_generation_section(**({"threads": args.gen_threads} if args.gen_threads else {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
