"""The fold layout trains on exactly the tokens generated: one sample per segment, each response (summary
turns included) in exactly one sample, at its own positions; and a trainer iteration runs folded."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentgym.chat import ChatFormat
from agentgym.errors import ConfigError, TokenMismatchError
from agentgym.engine.layouts import FOLD_REQUEST, fold_segments, is_summary
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.policy import SamplingParams
from agentgym.engine.rollout import RolloutConfig, rollout
from agentgym.train.config import config_from_dict, load_config
from agentgym.train.samples import build_samples, verify_samples
from agentgym.trajectory import TurnTable

CHAT = ChatFormat.simple()


def act(context):
    if context.observation.endswith(FOLD_REQUEST):
        return "Summary: key first, then the door."
    return context.env.oracle_action()


@pytest.fixture(scope="module")
def folded():
    config = RolloutConfig(layout="fold", max_context_tokens=1000, max_turns=40, executor="serial",
                           sampling=SamplingParams(max_tokens=64))
    trajs = rollout("agentgym/Toy-KeyDoor-Long-v0", ScriptedPolicy(act, CHAT), CHAT, seeds=[3, 4], config=config,
                    env_kwargs={"length": 14})
    assert all(any(is_summary(t) for t in tr.turns) for tr in trajs)
    return trajs


def test_each_generated_token_is_trained_once_at_its_own_place(folded):
    samples = build_samples(folded, "fold")
    assert len(samples) == sum(len(fold_segments(t.turns)) for t in folded)
    table = TurnTable.from_trajectories(folded)
    turns = [turn for t in folded for turn in t.turns]
    assert len(turns) == len(table)
    for row, turn in enumerate(turns):
        places = [(s, np.flatnonzero(s.row == row)) for s in samples if (s.row == row).any()]
        assert len(places) == 1, f"turn {turn.index} is trained in {len(places)} samples"
        sample, where = places[0]
        assert sample.ids[where].tolist() == list(turn.response_ids)  # exactly the generated ids
        assert where[0] == len(turn.prompt_ids) and sample.ids[:where[0]].tolist() == list(turn.prompt_ids)
    trained = sum(int(s.mask.sum()) for s in samples)
    assert trained == sum(len(t.response_ids) for t in turns)  # nothing else: no observation, no fold message


def test_fold_samples_verify_against_the_chat_template(folded):
    checked, errors = verify_samples(CHAT, folded, "fold", history_turns=0)
    assert checked == sum(len(fold_segments(t.turns)) for t in folded) and errors == []


def test_a_rewritten_segment_is_refused(folded):
    from dataclasses import replace

    traj = folded[0]
    start, end = fold_segments(traj.turns)[1]
    bad = list(traj.turns)
    bad[end - 1] = replace(bad[end - 1], prompt_ids=(0,) + bad[end - 1].prompt_ids[1:])
    with pytest.raises(TokenMismatchError):
        build_samples([replace(traj, turns=tuple(bad))], "fold")


def test_env_defaults_fill_what_the_config_leaves_out():
    cfg = config_from_dict({"rollout": {"env": "agentgym/ScienceWorld-boil-v0"}})
    assert cfg.rollout.layout == "fold" and cfg.rollout.max_observation_tokens == 2048
    cfg = config_from_dict({"rollout": {"env": "agentgym/ScienceWorld-boil-v0", "layout": "step"}})
    assert cfg.rollout.layout == "step"  # what the user set wins
    with pytest.raises(ConfigError, match="sft demonstrations"):
        config_from_dict({"rollout": {"env": "agentgym/ScienceWorld-boil-v0"}, "sft": {"enabled": True}})
    with pytest.raises(ConfigError, match="cannot write a fold's summary"):
        config_from_dict({"rollout": {"env": "agentgym/ScienceWorld-boil-v0", "action_mode": "admissible"}})
    cfg = config_from_dict({"rollout": {"env": "agentgym/ScienceWorld-boil-v0", "action_mode": "admissible",
                                        "fold_summary": False}})
    assert cfg.rollout.layout == "fold"


def test_a_trainer_iteration_runs_folded(tmp_path: Path):
    pytest.importorskip("transformers")
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path / 'r'}", "rollout.groups=2", "rollout.group_size=4",
                                       "eval.every=0", "train.iterations=1", "rollout.layout=fold",
                                       "rollout.fold_at_tokens=40", "rollout.max_context_tokens=256",
                                       "rollout.env_kwargs={length: 4, key_bonus: 0.5, key_at_start: true}",
                                       "train.verify_samples=1000"])
    [m] = read_metrics(train(cfg))
    episodes = 2 * 4
    assert m["samples"] > episodes  # more than one segment per episode: the episodes folded
    assert m["verified_samples"] == m["samples"] and m.get("token_drift_rate", 0.0) == 0.0
    assert m["logprob_diff"] < 1e-3
