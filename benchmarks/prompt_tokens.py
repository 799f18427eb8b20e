"""Prompt tokens per turn of household episodes, by prompt format (the main cost of a CPU rollout).

    python benchmarks/prompt_tokens.py [--episodes 16] [--max-turns 24]

The fair expert plays the same held-out Household-PickPlace tasks through the rollout engine with the
SmolLM2 chat template in each format; the table gives, per turn, the prompt length the model reads (mean
and last turn), the tokens the turn adds (response + next observation) and the total tokens of an episode
as a training sample (trajectory layout) or samples (step layout).
"""
from __future__ import annotations

import argparse

import numpy as np

FORMATS = [  # name, env kwargs, layout, history_turns
    ("trajectory, no action list", {}, "trajectory", 0),
    ("trajectory, compact list", {"list_actions": "compact"}, "trajectory", 0),
    ("trajectory, full action list", {"list_actions": True}, "trajectory", 0),
    ("step, history 2, no list", {}, "step", 2),
    ("step, history 2, full list", {"list_actions": True}, "step", 2),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=24)
    args = parser.parse_args()
    from agentgym.chat import ChatFormat
    from agentgym.policies.base import SamplingParams
    from agentgym.policies.models import load_tokenizer
    from agentgym.engine.rollout import RolloutConfig, rollout
    from agentgym.train.sft.data import ExpertPolicy

    chat = ChatFormat.from_tokenizer(load_tokenizer("smollm2-135m-instruct"))
    seeds = list(range(1_000_000, 1_000_000 + args.episodes))
    print(f"{'format':32} {'prompt/turn':>11} {'last prompt':>11} {'new/turn':>9} {'sample tokens/ep':>16} "
          f"{'solved':>6}")
    for name, kwargs, layout, history in FORMATS:
        config = RolloutConfig(max_turns=args.max_turns, layout=layout, history_turns=history,
                               max_context_tokens=8192, max_observation_tokens=512,
                               sampling=SamplingParams(temperature=0.0, max_tokens=64), executor="serial")
        trajs = rollout("agentgym/Household-PickPlace-v0", ExpertPolicy(chat, "fair"), chat, seeds, 1, config,
                        env_kwargs=kwargs, reset_options={"split": "test_unseen"})
        prompts = [len(k.prompt_ids) for t in trajs for k in t.turns]
        last = [len(t.turns[-1].prompt_ids) for t in trajs]
        new = [(len(t.turns[-1].prompt_ids) - len(t.turns[0].prompt_ids)) / max(len(t.turns) - 1, 1) for t in trajs]
        per_ep = [len(t.turns[-1].prompt_ids) + len(t.turns[-1].response_ids) if layout == "trajectory"
                  else sum(len(k.prompt_ids) + len(k.response_ids) for k in t.turns) for t in trajs]
        print(f"{name:32} {np.mean(prompts):11.0f} {np.mean(last):11.0f} {np.mean(new):9.1f} {np.mean(per_ep):16.0f} "
              f"{np.mean([t.success for t in trajs]):6.2f}")


if __name__ == "__main__":
    main()
