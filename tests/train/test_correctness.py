"""Issue #10: truncation bootstrapping, the invalid-penalty mode, overlong handling, TIS, failed episodes,
the step layout keeping the task, token verification of every sample, and the estimator table."""
from __future__ import annotations

import random

import numpy as np
import pytest

from agentgym.chat import ChatFormat
from agentgym.policies.scripted import OraclePolicy
from agentgym.engine.rollout import RolloutConfig, next_prompt_ids, rollout
from agentgym.train.estimators import advantages as A
from agentgym.train.algorithm import AlgorithmSection, GaeSection, ShapingSection, ValueSection
from agentgym.train.config import config_from_dict
from agentgym.train.samples import build_samples, verify_samples
from agentgym.train.estimators import estimators
from agentgym.train.estimators.targets import (build_targets, overlong_penalties, shape_rewards, truncated_is_weights,
                                    turn_advantages)
from agentgym.train.trainer import drop_failed
from agentgym.train.batch import Scored
from agentgym.trajectory import Trajectory, Turn, TurnTable

CHAT = ChatFormat.simple()
LONG = "agentgym/Toy-KeyDoor-Long-v0"


def episode(group, rewards, valid=None, terminated=True, end="terminated", finish=None, seed=0, index=0):
    turns = []
    for k, r in enumerate(rewards):
        turns.append(Turn(index=k, observation=f"s{k}", action="a", prompt_ids=(1, 2, 3), response_ids=(10 + k, 11),
                          logprobs=(-0.5, -0.25), reward=r, anchor=f"s{k}",
                          valid=True if valid is None else valid[k],
                          terminated=terminated and k == len(rewards) - 1,
                          finish_reason=(finish or {}).get(k, "stop")))
    return Trajectory("toy", seed, group, index, tuple(turns), success=sum(rewards) > 0, end_reason=end)


# ------------------------------------------------------------------ 7. GAE bootstraps truncated episodes

def test_turn_gae_bootstraps_the_value_after_a_cut_off_episode():
    t = TurnTable.from_columns([0] * 3, [0] * 3, [0, 1, 2], "abc", [0.0, 0.0, 0.0], terminated=[False] * 3)
    values = np.ones(3)
    terminal, _ = A.turn_gae(t, values, gamma=1.0, lam=1.0)
    assert terminal.tolist() == [-1.0, -1.0, -1.0]  # treats the cut-off as "nothing more to come"
    final = np.where(A.last_rows(t) & ~t.terminated, 1.0, 0.0)
    boot, ret = A.turn_gae(t, values, gamma=1.0, lam=1.0, final_values=final)
    assert boot.tolist() == [0.0, 0.0, 0.0] and ret.tolist() == [1.0, 1.0, 1.0]


def test_bi_level_gae_bootstraps_too():
    t = TurnTable.from_columns([0, 0], [0, 0], [0, 1], "ab", [0.0, 0.0])
    rows, values = np.array([0, 0, 1, 1]), np.full(4, 2.0)
    adv, _ = A.bi_level_gae(t, rows, values, gamma_turn=0.9, lam_turn=1.0, lam_token=1.0,
                            final_values=np.array([0.0, 2.0]))
    # the last token: δ = 0 + 0.9·2 − 2 = −0.2 instead of −2
    assert adv[-1] == pytest.approx(-0.2)


def test_last_rows_unsorted():
    t = TurnTable.from_columns([0] * 4, [1, 0, 1, 0], [1, 0, 0, 1], "abcd", [0.0] * 4)
    assert A.last_rows(t).tolist() == [True, False, False, True]


def test_next_prompt_is_the_prompt_the_next_turn_gets():
    """A step-layout episode cut at 3 turns: its bootstrap prompt equals turn 3's prompt in the full episode."""
    for layout in ("step", "trajectory"):
        config = RolloutConfig(layout=layout, history_turns=1)
        [full] = rollout(LONG, OraclePolicy(), CHAT, [4], config=config)
        [cut] = rollout(LONG, OraclePolicy(), CHAT, [4], config=RolloutConfig(layout=layout, history_turns=1,
                                                                              max_turns=3))
        assert cut.end_reason == "max_turns" and not cut.turns[-1].terminated
        assert tuple(next_prompt_ids(CHAT, cut, layout, 1)) == full.turns[3].prompt_ids


# ------------------------------------------------------------------ 6. invalid penalty on the advantage only

def test_advantage_mode_penalises_only_the_offending_turn():
    good = episode(0, [0.0] * 49 + [1.0], valid=[k % 5 != 0 for k in range(50)], index=0)
    bad = episode(0, [0.0] * 50, index=1)
    table = TurnTable.from_trajectories([good, bad])
    base = AlgorithmSection(estimator="grpo", norm="mean")
    rew = turn_advantages(AlgorithmSection(estimator="grpo", norm="mean", shaping=ShapingSection(invalid_penalty=0.1)), table, [good, bad])
    # reward mode: 10 invalid turns x 0.1 eat the success: R = 1 - 1 = 0 = the failure's return
    assert rew[:50].max() == pytest.approx(0.0)
    adv = turn_advantages(AlgorithmSection(estimator="grpo", norm="mean", shaping=ShapingSection(
        invalid_penalty=0.1, invalid_penalty_mode="advantage")), table, [good, bad])
    plain = turn_advantages(base, table, [good, bad])
    np.testing.assert_allclose(plain - adv, 0.1 * ~table.valid)
    assert (adv[:50] > adv[50:]).all()


def test_household_preset_defaults():
    from agentgym.train.config import load_config

    cfg = load_config("household_gpu_vllm", [])
    a = cfg.algorithm
    assert a.shaping.invalid_penalty_mode == "advantage" and a.loss.tis_cap and a.shaping.overlong != "none"
    assert cfg.rollout.env_kwargs["success_reward"] == 10.0


# ------------------------------------------------------------------ 12. overlong

def test_overlong_penalty_ramps_over_the_buffer():
    np.testing.assert_allclose(overlong_penalties(np.array([10, 96, 112, 128]), 128, 32, 1.0), [0, 0, 0.5, 1.0])
    np.testing.assert_allclose(overlong_penalties(np.array([127, 128]), 128, 0, 2.0), [0, 2.0])


def test_overlong_mask_and_penalty():
    cut = episode(0, [0.0, 1.0], finish={0: "length"}, index=0)
    other = episode(0, [0.0, 0.0], index=1)
    trajs = [cut, other]
    samples = build_samples(trajs, "step")
    scored = Scored([np.zeros(len(s) - 1) for s in samples], None, None)
    table = TurnTable.from_trajectories(trajs)
    cfg = AlgorithmSection(estimator="grpo", shaping=ShapingSection(overlong="mask"))
    targets = build_targets(cfg, table, trajs, samples, scored)
    assert targets.loss_mask[0].sum() == 0 and all(m.sum() == 2 for m in targets.loss_mask[1:])
    shaped = shape_rewards(AlgorithmSection(shaping=ShapingSection(overlong="penalty", overlong_penalty=0.5)), table, trajs, max_tokens=2)
    assert shaped.reward.tolist() == [-0.5, 0.5, -0.5, -0.5]  # every 2-token response hit max_tokens=2


# ------------------------------------------------------------------ 11. TIS

def test_truncated_is_weights():
    trainer = np.log(np.array([0.5, 0.9, 0.2, 0.3]))
    sampler = np.log(np.array([0.5, 0.3, 0.4, np.nan]))
    w = truncated_is_weights(trainer, sampler, np.array([True, True, True, True]), cap=2.0)
    np.testing.assert_allclose(w, [1.0, 2.0, 0.5, 1.0])  # 0.9/0.3 = 3 capped at 2; unknown -> 1


# ------------------------------------------------------------------ 13. whitening, tables

def test_gae_advantage_whitening():
    trajs = [episode(0, [0.0, 1.0]), episode(1, [0.0, 0.0], seed=1)]
    samples = build_samples(trajs, "step")
    scored = Scored([np.zeros(len(s) - 1) for s in samples], None, [np.full(len(s) - 1, 0.3) for s in samples])
    table = TurnTable.from_trajectories(trajs)
    t = build_targets(AlgorithmSection(estimator="turn_gae", gae=GaeSection(whiten_advantages=True)), table, trajs, samples, scored)
    flat = np.concatenate([a[s.row[1:] >= 0] for a, s in zip(t.advantages, samples)])
    assert flat.mean() == pytest.approx(0.0, abs=1e-9) and flat.std() == pytest.approx(1.0, abs=1e-6)


def test_every_estimator_resolves_to_one_builder():
    names = set(estimators())
    assert {"gigpo", "grpo", "rloo", "reinforce_pp", "hgpo", "turn_gae", "bi_level_gae"} <= names
    for entry in estimators().values():
        # exactly one way to the advantages: per turn, per token from the GAE critic, or an updater's own learner
        assert [entry.turn_advantages is not None, entry.targets is not None, bool(entry.updater)].count(True) == 1
        assert entry.doc
        if entry.updater:  # its learner lives in that updater, which the update seam knows
            from agentgym.train.updaters import UPDATERS

            assert entry.updater in UPDATERS and not entry.needs_critic
            continue
        assert callable(entry.turn_advantages or entry.targets)
        assert entry.needs_critic == (entry.targets is not None)


def test_new_options_validate():
    from agentgym.errors import ConfigError

    with pytest.raises(ConfigError, match="tis_cap must be >= 1"):
        config_from_dict({"algorithm": {"loss": {"tis_cap": 0.5}}})
    with pytest.raises(ConfigError, match="did you mean|Did you mean"):
        config_from_dict({"algorithm": {"shaping": {"invalid_penalty_mode": "advantages"}}})


# ------------------------------------------------------------------ 5. failed episodes

def test_failed_episodes_are_dropped_and_small_groups_with_them():
    trajs = [episode(0, [1.0], index=0), episode(0, [0.0], end="failed", index=1), episode(0, [0.0], index=2),
             episode(1, [1.0], index=0, seed=1), episode(1, [0.0], end="failed", index=1, seed=1)]
    kept, stats = drop_failed(trajs, min_group=2)
    assert [(t.group_id, t.sample_index) for t in kept] == [(0, 0), (0, 2)]
    assert stats == {"failed_dropped": 2.0, "groups_dropped_after_failures": 1.0}
    assert len(drop_failed(trajs, min_group=1)[0]) == 3


# ------------------------------------------------------------------ 4 + 10. the task in every prompt; verify all

@pytest.mark.parametrize("k", [0, 1])
def test_step_layout_prompts_keep_the_task(k):
    config = RolloutConfig(layout="step", history_turns=k)
    [traj] = rollout(LONG, OraclePolicy(), CHAT, [4], config=config)
    assert traj.num_turns > 3 and traj.task == traj.first_observation
    for sample in build_samples([traj], "step"):
        assert traj.task in CHAT.decode(sample.ids.tolist())
    checked, errors = verify_samples(CHAT, [traj], "step", k)
    assert checked == traj.num_turns and not errors


def test_verification_covers_late_turns_of_every_sample():
    config = RolloutConfig(layout="step", history_turns=1)
    trajs = rollout(LONG, OraclePolicy(), CHAT, [4, 5], config=config)
    turns = list(trajs[1].turns)
    bad = turns[3]
    turns[3] = Turn(**{**bad.__dict__, "prompt_ids": bad.prompt_ids[:-2] + (7, 7)})
    broken = Trajectory(**{**trajs[1].__dict__, "turns": tuple(turns)})
    checked, errors = verify_samples(CHAT, [trajs[0], broken], "step", 1)
    assert checked == trajs[0].num_turns + broken.num_turns and len(errors) == 1 and "turn 3" in errors[0]
    some, _ = verify_samples(CHAT, [trajs[0], broken], "step", 1, limit=3, rng=random.Random(0))
    assert some == 3


# ------------------------------------------------------------------ 9. a missing anchor

class NoAnchorEnv:
    """Builds infos with make_info() and never calls finish_info: every anchor is None."""

    def __new__(cls, *args, **kwargs):
        from agentgym.core import TextEnv, make_info

        class _Env(TextEnv):
            def reset(self, *, seed=None, options=None):
                self.t = 0
                return "room 0", make_info()

            def step(self, action):
                self.t += 1
                return f"room {self.t}", 0.0, self.t >= 3, False, make_info()

        return _Env()


def test_a_missing_anchor_falls_back_to_the_observation():
    from agentgym.policies.scripted import ScriptedPolicy

    [traj] = rollout(lambda: NoAnchorEnv(), ScriptedPolicy(lambda ctx: "go"), CHAT, [0],
                     config=RolloutConfig(max_turns=5))
    assert [t.anchor for t in traj.turns] == ["room 0", "room 1", "room 2"]
    from agentgym.core import make_info

    assert make_info(observation="room 7")["anchor"] == "room 7"
    assert make_info(anchor=("k", 1), observation="room 7")["anchor"] == ("k", 1)


def test_check_env_flags_an_env_that_never_sets_an_anchor():
    from agentgym.checker import check_env
    from agentgym.errors import CheckError

    with pytest.raises(CheckError, match=r"\[anchor\].*never|\[anchor\].*no reset or step info sets"):
        check_env(lambda: NoAnchorEnv(), gymnasium_checks=False, oracle=False)


# ------------------------------------------------------------------ 11 + 13. the loss side

def test_is_weights_scale_each_tokens_loss():
    torch = pytest.importorskip("torch")
    from agentgym.train.updaters.losses import ppo_policy_loss

    lp, adv, mask = torch.zeros(1, 3), torch.tensor([[1.0, -2.0, 0.5]]), torch.ones(1, 3)
    plain = ppo_policy_loss(lp, lp, adv, mask).loss
    weighted = ppo_policy_loss(lp, lp, adv, mask, weights=torch.tensor([[2.0, 1.0, 0.0]])).loss
    assert plain.item() == pytest.approx((-1 + 2 - 0.5) / 3) and weighted.item() == pytest.approx((-2 + 2) / 3)


def test_value_clip_relative_to_the_value_scale():
    from agentgym.train.batch import Targets
    from agentgym.train.updaters.token_ppo import value_clip_range

    returns = [np.array([0.0, 10.0, 0.0, -10.0])]
    targets = Targets([np.zeros(4)], returns, [np.array([1.0, 1.0, 1.0, 1.0])], [np.zeros(4)])
    assert value_clip_range(AlgorithmSection(value=ValueSection(clip=0.2)), targets) == 0.2
    relative = value_clip_range(AlgorithmSection(value=ValueSection(clip=0.2, clip_scale="returns_std")), targets)
    assert relative == pytest.approx(0.2 * np.std([0.0, 10.0, 0.0, -10.0]))
