"""Long horizons: tokens per turn and peak context of the oracle's episodes in each sample layout, and the
oracle's outcome at each env's registered defaults.

    OMP_NUM_THREADS=1 python3 benchmarks/long_context.py --env agentgym/ScienceWorld-boil-v0 --seeds 1000000
    python3 benchmarks/long_context.py --families            # one env per family, at its registered defaults

Layouts compared per env (the oracle's actions are the same in all; only the prompts differ):
  trajectory/8192 : the engine's old default (whole conversation, 8,192-token context)
  trajectory/none : the whole conversation without a limit (how long the episode really is)
  step/k          : a history window of k turns (default 2)
  fold            : folded at the env's registered budget (summary turns: the oracle's next action as text)
  defaults        : whatever the env registers (agentgym.horizon), as `agentgym eval` runs it
Tokens: the byte-level ChatFormat.simple() by default (the oracle's own format; about 3-4x a BPE tokenizer's
count, the worst case), or `--tokenizer hf:MODEL` (e.g. the embedded SmolLM2's).
Prints one row per (env, layout): turns (summary turns included), summary turns, mean prompt tokens, tokens per
turn (what a turn adds to a conversation: action + template + next observation as shown), peak context (the
longest prompt + response), end reason, success.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from agentgym.chat import ChatFormat
from agentgym.eval.records import EvalConfig
from agentgym.engine.layouts import FOLD_REQUEST
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.registration import SuiteEntry, list_envs
from agentgym.engine.rollout import RolloutConfig, rollout
from agentgym.trajectory import Trajectory


def oracle_with_summaries(context: Any) -> str | None:
    """The env's oracle; asked for a fold's summary, it writes one naming the step it is on."""
    if context.observation.endswith(FOLD_REQUEST):
        return "Summary: I follow the plan; next I will do: " + str(context.env.oracle_action())
    return context.env.oracle_action()


def exploring_swe(turns: int) -> Any:
    """An SWE agent that reads before it fixes: `turns` turns of viewing the files to fix, running the failing
    tests and grepping (a long, observation-heavy episode, as real SWE agents have), then the oracle's fix."""
    def act(context: Any) -> str | None:
        env = context.env.unwrapped
        if context.observation.endswith(FOLD_REQUEST):
            return oracle_with_summaries(context)
        k = getattr(context.env, "_turns", turns)  # the TurnLimit wrapper's count of this episode's steps
        if k >= turns:
            return context.env.oracle_action()
        files = sorted(env._fix) or ["."]
        calls = [("view_file", {"path": files[k % len(files)]}), ("run_tests", {}),
                 ("bash", {"command": "grep -rn 'def ' --include=*.py . | head -60"})]
        return env.render_calls([calls[k % len(calls)]])
    return act


def layouts(env_id: str, history: int) -> dict[str, dict[str, Any]]:
    defaults = EvalConfig(policy="oracle", entries=(SuiteEntry(env_id),), out_dir="-").context_settings(env_id)
    fold = {**defaults, "layout": "fold"}
    if fold.get("max_context_tokens") is None and fold.get("fold_at_tokens") is None:
        fold["max_context_tokens"] = 8192
    return {"trajectory/8192": {"layout": "trajectory", "max_context_tokens": 8192},
            "trajectory/none": {"layout": "trajectory", "max_context_tokens": None},
            f"step/{history}": {"layout": "step", "history_turns": history, "max_context_tokens": None},
            "fold": fold, "defaults": defaults}


def turn_tokens(chat: ChatFormat, trajs: list[Trajectory]) -> list[int]:
    """What each turn adds to a conversation, whatever the layout: its action, the template and the next
    observation (as shown: after the observation budget)."""
    sizes = []
    for tr in trajs:
        observations = [t.observation for t in tr.turns[1:]] + [tr.final_observation]
        for turn, obs in zip(tr.turns, observations):
            sizes.append(len(turn.response_ids) + len(chat.turn_suffix(turn.response_ids, obs)))
    return sizes


def row(name: str, layout: str, trajs: list[Trajectory], seconds: float, chat: ChatFormat) -> str:
    turns = [t for tr in trajs for t in tr.turns]
    summaries = sum(t.info.get("fold") == "summary" for t in turns)
    prompts = [len(t.prompt_ids) for t in turns]
    peak = max((len(t.prompt_ids) + len(t.response_ids) for t in turns), default=0)
    growth = turn_tokens(chat, trajs)
    ends = ",".join(sorted({tr.end_reason for tr in trajs}))
    ok = sum(tr.success for tr in trajs)
    return (f"| {name} | {layout} | {len(turns) / len(trajs):.1f} | {summaries} | "
            f"{statistics.mean(prompts) if prompts else 0:.0f} | {statistics.mean(growth) if growth else 0:.0f} | "
            f"{peak} | {ends} | {ok}/{len(trajs)} | {seconds:.1f} |")


def run_env(env_id: str, seeds: list[int], chat: ChatFormat, history: int, only: set[str], split: str,
            explore: int = 0) -> None:
    for name, settings in layouts(env_id, history).items():
        if only and name not in only:
            continue
        config = RolloutConfig(**settings, executor="serial")
        t0 = time.perf_counter()
        try:
            act = exploring_swe(explore) if explore and "SWE" in env_id else oracle_with_summaries
            trajs = rollout(env_id, ScriptedPolicy(act, chat), chat, seeds, config=config,
                            reset_options={"split": split})
        except Exception as exc:  # a missing dependency (Java, a sandbox, a browser): say so and go on
            print(f"| {env_id} | {name} | skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:80]} |")
            return
        label = f"{env_id} (+{explore} reading turns)" if explore and "SWE" in env_id else env_id
        print(row(label, name, trajs, time.perf_counter() - t0, chat), flush=True)
        failed = [tr.error for tr in trajs if tr.error]
        if failed:
            print(f"|   | failed: {str(failed[0]).splitlines()[0][:100]} |")


def family_ids() -> list[str]:
    """One env per family (the first id of each), as tests/test_long_horizon.py samples them."""
    seen: dict[str, str] = {}
    for env_id in list_envs():
        fam = env_id.rpartition("/")[2].split("-")[0]
        seen.setdefault(fam, env_id)
    return list(seen.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", nargs="*", default=[], help="env ids (default: ScienceWorld boil and SWE-Mini)")
    p.add_argument("--families", action="store_true", help="one env per family, at its defaults only")
    p.add_argument("--seeds", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--split", default="test")
    p.add_argument("--history-turns", type=int, default=2)
    p.add_argument("--layouts", nargs="*", default=[], help="only these rows (names as in the table)")
    p.add_argument("--tokenizer", default="", help="hf:MODEL to count a real tokenizer's tokens")
    p.add_argument("--explore", type=int, default=0, help="SWE envs: this many reading turns before the fix")
    args = p.parse_args(argv)
    chat = ChatFormat.simple()
    if args.tokenizer:
        from agentgym.policies.models import load_tokenizer

        chat = ChatFormat.from_tokenizer(load_tokenizer(args.tokenizer.removeprefix("hf:")))
    ids = family_ids() if args.families else args.env or ["agentgym/ScienceWorld-boil-v0", "agentgym/SWE-Mini-v0"]
    only = {"defaults"} if args.families and not args.layouts else set(args.layouts)
    print(f"tokens: {getattr(chat, 'name', 'chat')}; seeds {args.seeds}; split {args.split}")
    print("| env | layout | turns/episode | summary turns | mean prompt | tokens/turn | peak context | end | success "
          "| seconds |\n|---|---|---|---|---|---|---|---|---|---|")
    for env_id in ids:
        run_env(env_id, list(args.seeds), chat, args.history_turns, only, args.split, args.explore)
    return 0


if __name__ == "__main__":
    sys.exit(main())
