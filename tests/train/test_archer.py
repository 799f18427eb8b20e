"""ArCHer: the TD maths on hand-computed examples, the replay buffer, the critic's learner, the config's
refusals, kill-and-resume, and the tiny model learning the toy env with it."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from agentgym.errors import ConfigError
from agentgym.train.config import load_config
from agentgym.train.estimators import archer_td as td
from agentgym.train.replay import ReplayBuffer, TurnRecord, turn_records
from agentgym.trajectory import Trajectory, Turn, TurnTable

SMALL = ["rollout.groups=2", "rollout.group_size=4", "train.iterations=2", "eval.every=0",
         "algorithm.archer.critic_steps=2", "algorithm.archer.critic_batch=8"]


# ------------------------------------------------------------------ maths
def test_q_targets_bootstrap_except_at_a_terminal_turn():
    y = td.q_targets(np.array([1.0, 0.0, 0.5]), np.array([2.0, 3.0, 4.0]), np.array([True, False, False]), 0.9)
    assert y.tolist() == pytest.approx([1.0, 2.7, 4.1])


def test_double_min_advantage_and_polyak():
    assert td.double_min(np.array([1.0, 5.0]), np.array([2.0, 3.0])).tolist() == [1.0, 3.0]
    # A = min(Q1, Q2) - min(V1, V2) = min(1, 2) - min(0.5, 0.25) = 0.75
    assert td.turn_advantages(np.array([1.0]), np.array([2.0]), np.array([0.5]), np.array([0.25])).tolist() == [0.75]
    assert td.polyak(np.array([0.0, 10.0]), np.array([1.0, 0.0]), 0.1).tolist() == pytest.approx([0.1, 9.0])
    assert td.polyak(np.array([3.0]), np.array([7.0]), 1.0).tolist() == [7.0]  # tau 1 copies
    with pytest.raises(ValueError):
        td.polyak(np.array([0.0]), np.array([1.0]), 1.5)


# ------------------------------------------------------------------ buffer
def _record(i: int) -> TurnRecord:
    return TurnRecord((i,), (i, i), float(i), (i + 1,), False, (-0.5,) * 2, iteration=i)


def test_the_buffer_drops_the_oldest_first_and_round_trips():
    buffer = ReplayBuffer(3)
    assert buffer.sample(4, random.Random(0)) == []
    buffer.extend(_record(i) for i in range(5))
    assert [r.iteration for r in buffer] == [2, 3, 4]
    buffer.extend([_record(9)])
    assert [r.iteration for r in buffer] == [3, 4, 9]
    again = ReplayBuffer.from_state(buffer.state_dict())
    assert list(again) == list(buffer) and again.capacity == 3
    drawn = buffer.sample(50, random.Random(1))
    assert len(drawn) == 50 and {r.iteration for r in drawn} == {3, 4, 9}
    with pytest.raises(ValueError):
        ReplayBuffer(0)


def _turn(index: int, prompt: tuple, response: tuple, reward: float, **kw) -> Turn:
    return Turn(index, "obs", "act", prompt, response, tuple(-0.1 * (j + 1) for j in range(len(response))), reward,
                **kw)


def _trajectory(turns: list[Turn]) -> Trajectory:
    return Trajectory(env_id="x", seed=0, group_id=0, sample_index=0, turns=tuple(turns), success=False,
                      end_reason="terminated", final_observation="end")


def test_turn_records_chain_states_and_keep_the_generation_logprobs():
    ended = _trajectory([_turn(0, (1,), (2, 3), 0.0), _turn(1, (1, 2, 3, 4), (5,), 1.0, terminated=True)])
    cut = _trajectory([_turn(0, (7,), (8,), 0.5, truncated=True)])
    rows, records = turn_records([ended, cut], lambda t: (99, 98), iteration=4)
    assert rows == [0, 1, 2]
    assert len(TurnTable.from_trajectories([ended, cut])) == 3
    first, last, truncated = records
    assert first.next_state == (1, 2, 3, 4) and not first.terminal  # the next turn's prompt
    assert last.terminal and last.next_state == ()                 # the episode ended: no bootstrap
    assert truncated.next_state == (99, 98) and not truncated.terminal  # a cut-off bootstraps
    # the off-policy sample keeps the log-probs its sampler recorded, not a recomputation
    assert first.behaviour_logprobs == ended.turns[0].logprobs and first.iteration == 4


# ------------------------------------------------------------------ learner
@pytest.fixture
def learner(tmp_path: Path):
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCausalLM

    from agentgym.train.algorithm import ArcherSection
    from agentgym.train.tiny import build_tiny
    from agentgym.train.updaters.archer import ArcherLearner

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "tiny"))
    return ArcherLearner(ArcherSection(tau=0.5, critic_batch=4), 0.9, model, torch.device("cpu"), pad_id=0,
                         lr=3e-3, max_grad_norm=1.0, seed=0)


def test_a_soft_update_moves_the_target_by_tau(learner):
    import torch

    before = [p.detach().clone() for p in learner.target.parameters()]
    records = [TurnRecord((4, 5), (6,), 1.0, (), True, (-0.1,), 0)] * 4
    learner.critic_step(records)
    for old, target, online in zip(before, learner.target.parameters(), learner.critic.parameters()):
        want = td.polyak(old.numpy(), online.detach().numpy(), 0.5)
        assert torch.allclose(target, torch.as_tensor(want, dtype=target.dtype), atol=1e-6)


def test_the_critic_reads_the_decoder_as_the_full_model_would(learner):
    """The heads read the decoder's last hidden state, which equals the causal LM's last hidden state (the LM
    head's logits are skipped, not changed)."""
    import torch

    ids, att = torch.tensor([[4, 5, 6, 7]]), torch.ones(1, 4, dtype=torch.long)
    with torch.no_grad():
        full = learner.critic.backbone(input_ids=ids, attention_mask=att, output_hidden_states=True).hidden_states[-1]
        assert torch.allclose(learner.critic.last_hidden(ids, att), full.float(), atol=1e-6)


def test_td_targets_come_from_the_target_critic(learner):
    import torch

    records = [TurnRecord((4, 5), (6,), 1.0, (), True, (-0.1,), 0),     # terminal: y_Q = r
               TurnRecord((4, 5), (7,), 0.5, (4, 8), False, (-0.1,), 0)]  # y_Q = r + 0.9 min V'(s')
    y_q, y_v = learner.td_targets(records)
    with torch.no_grad():
        v_next = learner.target.values_of([(4, 8)], 0, "cpu")[0]
        q_target, _ = learner.target.heads_of(records, 0, "cpu")
    assert y_q[0].item() == pytest.approx(1.0)
    assert y_q[1].item() == pytest.approx(0.5 + 0.9 * float(v_next.min()), abs=1e-6)
    assert y_v.tolist() == pytest.approx(q_target.min(dim=1).values.tolist(), abs=1e-6)


def test_the_critic_learns_terminal_rewards_and_the_advantage_ranks_actions(learner):
    good = TurnRecord((4, 5), (6,), 1.0, (), True, (-0.1,), 0)
    bad = TurnRecord((4, 5), (7,), 0.0, (), True, (-0.1,), 0)
    learner.buffer.extend([good, bad])
    for _ in range(150):
        learner.critic_step([good, bad])
    q, _ = learner.critic.heads_of([good, bad], 0, "cpu")
    assert q.min(dim=1).values.tolist() == pytest.approx([1.0, 0.0], abs=0.1)
    adv = learner.advantages([good, bad])
    assert adv[0] > adv[1] + 0.5  # same state, so the baseline cancels: A(good) - A(bad) = Q(good) - Q(bad)


# ------------------------------------------------------------------ config
@pytest.mark.parametrize("override, option", [
    ("model.critic=separate", "model.critic"),
    ("train.ppo_epochs=2", "train.ppo_epochs"),
    ("train.mini_batches=4", "train.mini_batches"),
    ("train.distributed=ddp", "train.distributed"),
    ("rollout.action_mode=admissible", "algorithm.estimator"),
])
def test_archer_refuses_what_it_cannot_do(override, option):
    with pytest.raises(ConfigError, match=option.replace(".", r"\.")):
        load_config("toy_archer", [override])


def test_the_ppo_actor_takes_several_epochs():
    cfg = load_config("toy_archer", ["algorithm.archer.actor_loss=ppo", "train.ppo_epochs=2", "train.mini_batches=2"])
    assert cfg.algorithm.estimator == "archer"


# ------------------------------------------------------------------ training
def test_a_resumed_run_keeps_the_replay_buffer_and_the_critics(tmp_path: Path):
    import torch

    from agentgym.train.trainer import Trainer, train

    train(load_config("toy_archer", [f"train.run_dir={tmp_path}", *SMALL, "checkpoint.every=1"]))
    first = Trainer(load_config("toy_archer", [f"train.run_dir={tmp_path}", *SMALL[:-3], "train.iterations=3",
                                                "checkpoint.resume=auto", *SMALL[-2:]]))
    try:
        assert first.iteration == 2
        records = list(first.learner.archer.buffer)
        assert records and {r.iteration for r in records} == {0, 1}
        saved = torch.load(tmp_path / "ckpt-2" / "trainer.pt", weights_only=False)["archer"]
        assert [tuple(r["state"]) for r in saved["buffer"]["records"]] == [r.state for r in records]
        for name, value in first.learner.archer.target.state_dict().items():
            assert torch.equal(value, saved["target"][name])
    finally:
        first.close()


@pytest.mark.slow
def test_the_tiny_model_learns_the_toy_env_with_archer(tmp_path: Path):
    """The threshold of the GiGPO/GRPO learning test: from <= 0.3 to >= 0.9 held-out greedy success."""
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    run = train(load_config("toy_archer", [f"train.run_dir={tmp_path}", "eval.every=12"]))
    metrics = read_metrics(run)
    assert metrics[0]["success"] <= 0.3, metrics[0]
    assert metrics[-1]["eval/success"] >= 0.9, [m["success"] for m in metrics]
    assert max(m["success"] for m in metrics[-4:]) >= 0.9, [m["success"] for m in metrics]
    assert metrics[-1]["archer/buffer_size"] == 4096  # the buffer filled and kept its bound
