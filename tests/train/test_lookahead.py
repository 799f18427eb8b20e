"""One-step lookahead on the greedy policy (agentgym/engine/lookahead.py, train/updaters/lookahead.py): where it looks,
what it tries, that every play-out is the greedy policy's after the tried action, and how the tried actions'
returns become the update's advantages."""
from __future__ import annotations

import random

import numpy as np
import pytest

from agentgym.errors import ConfigError
from agentgym.engine.lookahead import Decision, branch_turns, ranked_alternatives
from agentgym.policy import Choice
from agentgym.trajectory import Trajectory, Turn

CANDS = ((1,), (2,), (3,), (4,))


def turn(i: int, reward: float = 0.0, revisit: bool = False, cands=CANDS, pick: int = 0, anchor: str = "s",
         scores=None) -> Turn:
    components = {"revisit": -0.05} if revisit else {}
    return Turn(index=i, observation=f"o{i}", action=f"a{i}", prompt_ids=tuple(range(10 + i)), response_ids=cands[pick],
                logprobs=(0.0,), reward=reward, reward_components=components, anchor=anchor,
                choice=Choice(cands, pick, scores=scores))


def traj(turns, success: bool = False, end: str = "max_turns") -> Trajectory:
    return Trajectory(env_id="e", seed=0, group_id=0, sample_index=0, turns=tuple(turns), success=success,
                      end_reason=end)


def test_branch_turns_take_loop_turns_first_then_random_ones_and_skip_successes():
    turns = [turn(0), turn(1, revisit=True), turn(2, cands=((1,),)), turn(3, revisit=True), turn(4), turn(5)]
    failed = traj(turns)
    assert branch_turns(failed, 1, random.Random(0)) == [1]
    assert branch_turns(failed, 2, random.Random(0)) == [1, 3]
    three = branch_turns(failed, 3, random.Random(0))
    assert {1, 3} <= set(three) and len(three) == 3 and 2 not in three  # one action: no choice
    assert branch_turns(failed, 10, random.Random(0)) == [0, 1, 3, 4, 5]
    won = traj(turns, success=True, end="terminated")
    assert branch_turns(won, 2, random.Random(0)) == []  # successes only with success_points
    picked = branch_turns(won, 2, random.Random(0), success_points=2)
    assert len(picked) == 2 and 2 not in picked and picked == sorted(picked)
    assert branch_turns(won, 2, random.Random(0), success_points=9) == [0, 1, 3, 4, 5]
    assert branch_turns(traj(turns, end="failed"), 2, random.Random(0)) == []
    no_loops = traj([turn(i) for i in range(8)])
    assert branch_turns(no_loops, 2, random.Random(1)) == branch_turns(no_loops, 2, random.Random(1))
    assert len(set(branch_turns(no_loops, 2, random.Random(1)))) == 2


def test_alternatives_are_the_next_ranked_candidates():
    choice = Choice(CANDS, 2, scores=(-3.0, -1.0, -0.5, -1.0))
    assert ranked_alternatives(choice, 2) == [1, 3]  # tie: the earlier candidate first; the pick never
    assert ranked_alternatives(choice, 9) == [1, 3, 0]
    with pytest.raises(ConfigError, match="scores"):
        ranked_alternatives(Choice(CANDS, 0), 1)


def test_advantages_compare_a_decisions_own_play_outs_only():
    from agentgym.train.config import load_config
    from agentgym.train.updaters.lookahead import decision_advantages, lookahead_sequences, play_return

    cfg = load_config("toy_learning", ["rollout.action_mode=admissible", "rollout.lookahead=2",
                                       "rollout.group_size=1", "algorithm.gamma=0.5", "algorithm.norm=mean_std"])
    prefix = [turn(0), turn(1)]
    # the greedy play-out loops back to the branch state ("s") later: those rows are other states of the episode
    greedy = traj(prefix + [turn(2, anchor="s", revisit=True, reward=-0.05), turn(3, anchor="s"), turn(4, reward=1.0)])
    better = traj(prefix + [turn(2, pick=1, reward=1.0)], success=True)
    worse = traj(prefix + [turn(2, pick=3), turn(3)])
    d = Decision(greedy, 2, (0, 1, 3), (greedy, better, worse))
    assert play_return(greedy, 2, 0.5) == pytest.approx(-0.05 + 0.25)
    assert play_return(better, 2, 0.5) == 1.0 and play_return(worse, 2, 0.5) == 0.0
    (adv,) = decision_advantages(cfg, [d])
    r = np.array([0.2, 1.0, 0.0])
    assert adv == pytest.approx((r - r.mean()) / (r.std(ddof=1) + 1e-6))
    mean_only = load_config("toy_learning", ["rollout.action_mode=admissible", "rollout.lookahead=2",
                                             "rollout.group_size=1", "algorithm.gamma=0.5", "algorithm.norm=mean"])
    assert decision_advantages(mean_only, [d])[0] == pytest.approx(r - r.mean())
    seqs, values = lookahead_sequences([d, d], [adv, adv])
    assert len(seqs) == 2 and values.tolist() == pytest.approx([*adv, *adv])
    for s in seqs:
        assert s.ids == greedy.turns[2].prompt_ids
        assert [t.chosen for t in s.turns] == [0, 1, 3] and all(t.candidates == CANDS for t in s.turns)
        assert all(t.prompt_len == len(s.ids) for t in s.turns)
    assert [t.row for s in seqs for t in s.turns] == list(range(6))


@pytest.fixture()
def tiny(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.train import tiny

    tiny.register_tiny_envs()
    path = tiny.build_tiny(tmp_path / "tiny")
    return AutoModelForCausalLM.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


@pytest.mark.parametrize("layout", ["trajectory", "step"])
def test_play_outs_try_the_alternative_then_follow_the_greedy_policy(tiny, layout):
    from agentgym.engine.lookahead import lookahead_rollout
    from agentgym.policies.admissible import AdmissiblePolicy
    from agentgym.policies.base import SamplingParams
    from agentgym.engine.rollout import RolloutConfig
    from agentgym.train.tiny import ONE_WORD_ENV

    policy = AdmissiblePolicy(*tiny)
    config = RolloutConfig(max_turns=6, layout=layout, executor="thread",
                           sampling=SamplingParams(temperature=0.0, max_tokens=3))
    got = lookahead_rollout(ONE_WORD_ENV, policy, None, [0, 1, 2, 3], alternatives=2, points=2, config=config,
                            rng=random.Random(0))
    assert len(got.trunks) == 4 and got.decisions, "the random tiny model fails some of these tasks"
    for d in got.decisions:
        k, choice = d.turn, d.trunk.turns[d.turn].choice
        assert not d.trunk.success and d.plays[0] is d.trunk
        assert len(d.plays) == len(d.picks) == 1 + min(2, len(choice.candidates) - 1)  # fewer when fewer to try
        assert d.picks[0] == choice.pick and d.picks[1:] == tuple(ranked_alternatives(choice, 2))
        for pick, play in zip(d.picks[1:], d.plays[1:]):
            assert play.turns[:k] == d.trunk.turns[:k] and play.shared_prefix == k
            assert play.turns[k].observation == d.trunk.turns[k].observation
            assert play.turns[k].response_ids == choice.candidates[pick]  # the alternative was played
            assert play.turns[k].action != d.trunk.turns[k].action
            if layout == "trajectory":
                assert play.turns[k].prompt_ids == d.trunk.turns[k].prompt_ids
            for later in play.turns[k + 1:]:  # then greedily: every pick is the best-scored candidate
                scores = later.choice.scores
                assert later.choice.pick == max(range(len(scores)), key=lambda i: (scores[i], -i))
    for t in got.trunks:
        assert all(k.choice.pick == int(np.argmax(k.choice.scores)) for k in t.turns)


def test_trainer_trains_on_looked_ahead_turns(tmp_path):
    import json

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch

    from agentgym.train.config import load_config
    from agentgym.train.trainer import Trainer

    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path}", "rollout.action_mode=admissible",
                                       "rollout.max_new_tokens=3", "train.iterations=1", "rollout.groups=4",
                                       "rollout.group_size=1", "rollout.lookahead=2", "rollout.lookahead_points=2",
                                       "rollout.lookahead_success_points=1", "eval.every=0", "logging.progress=false",
                                       "model.train_layers=1"])
    trainer = Trainer(cfg)
    try:
        collected = trainer.collector.collect(trainer.iteration)
        batch, trunks, decisions = collected.batch, collected.first, collected.decisions
        assert len(trunks) == 4 and len(batch) == 4 + sum(len(d.plays) - 1 for d in decisions)
        # every play is greedy, at rollout.temperature 1.0 too (that is the update's distribution, not the play's)
        assert all(k.choice.pick == int(np.argmax(k.choice.scores)) for t in batch for k in t.turns)
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        trainer.run()
        changed = any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    finally:
        trainer.close()
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["lookahead/decisions"] >= 1 and row["lookahead/playouts"] >= row["lookahead/decisions"]
    assert row["choice_turns"] == row["lookahead/decisions"] + row["lookahead/playouts"]  # greedy + alternatives
    assert row["update/trunk_from_rollout_share"] == 1.0  # the trunk's own scoring kept each row's trunk
    assert changed == (row["advantage_std"] > 0)


@pytest.mark.parametrize("override, message", [
    ("rollout.group_size=4", "group_size=1"),
    ("rollout.action_mode=generate", "action_mode=admissible"),
    ("algorithm.estimator=grpo", "estimator=gigpo"),
    ("algorithm.gigpo.step_weight=2", "step_weight=1"),
    ("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling"),
    ("rollout.lookahead_points=0", "lookahead_points >= 1"),
    ("rollout.lookahead_success_points=-1", "lookahead_success_points must be >= 0"),
])
def test_what_lookahead_cannot_run_with_is_refused(override, message):
    from agentgym.train.config import load_config

    base = ["rollout.action_mode=admissible", "rollout.lookahead=2", "rollout.group_size=1"]
    with pytest.raises(ConfigError, match=message):
        load_config("toy_learning", [*base, override])
