"""Multi-agent episodes on real TextArena games (seats mode): seat order, each seat's own view, rewards and
tokens, per-seat advantages, and the refusals before any episode runs."""
from __future__ import annotations

import numpy as np
import pytest

from agentgym.engine.multiagent import check_seats, load_seat_policy, play_matches, seat_count, zero_sum
from agentgym.engine.rollout import RolloutConfig
from agentgym.errors import ConfigError
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.policy import load_policy
from agentgym.trajectory import TurnTable

pytest.importorskip("textarena")
TTT = "agentgym/TextArena-TicTacToe-v0"
SEATS = {"opponent": "seats"}


def first_legal(ctx):
    return ctx.info["admissible_actions"][0]


def last_legal(ctx):
    return ctx.info["admissible_actions"][-1]


def test_seats_alternate_and_each_seat_sees_its_own_game():
    # seat 0 always takes the lowest free cell, seat 1 the highest: 0, 8, 1, 7, 2 -> seat 0 wins the top row
    (match,) = play_matches(TTT, [ScriptedPolicy(first_legal), ScriptedPolicy(last_legal)], None, [0],
                            env_kwargs=SEATS, players=("low", "high"))
    assert match.order == (0, 1, 0, 1, 0)
    first, second = match.seats
    assert [t.action for t in first.turns] == ["[0]", "[1]", "[2]"]
    assert [t.action for t in second.turns] == ["[8]", "[7]"]
    assert "You are Player 0" in first.turns[0].observation and "Player 1" not in first.turns[0].observation
    assert "You are Player 1" in second.turns[0].observation
    assert "placed their symbol (O) in cell 0" in second.turns[0].observation  # seat 1 sees seat 0's move
    # the outcome lands on each seat's last turn, with its own sign
    assert [t.reward for t in first.turns] == [0.0, 0.0, 1.0] and [t.reward for t in second.turns] == [0.0, -1.0]
    assert first.success and not second.success and match.outcome(0) == "win" and match.outcome(1) == "loss"
    assert (first.group_id, second.group_id) == (0, 1) and match.players == ("low", "high")
    assert all(t.end_reason == "terminated" for t in match.seats)


def test_token_in_token_out_per_seat():
    (match,) = play_matches(TTT, [ScriptedPolicy(first_legal), ScriptedPolicy(last_legal)], None, [0],
                            config=RolloutConfig(layout="trajectory"), env_kwargs=SEATS)
    for traj in match.seats:  # each seat's next prompt extends its own previous prompt + what it generated
        for before, after in zip(traj.turns, traj.turns[1:]):
            assert after.prompt_ids[:len(before.prompt_ids) + len(before.response_ids)] == \
                before.prompt_ids + before.response_ids
    assert match.seats[0].turns[0].prompt_ids != match.seats[1].turns[0].prompt_ids


def test_zero_sum_rewards():
    assert zero_sum({0: 1.0, 1: -1.0}, 2) == {0: 1.0, 1: -1.0}
    assert zero_sum({0: 1.0, 1: 1.0}, 2) == {0: 0.0, 1: 0.0}          # general-sum: both paid 1
    assert zero_sum({0: 0.5}, 2) == {0: 0.25, 1: -0.25}
    (match,) = play_matches(TTT, [ScriptedPolicy(first_legal), ScriptedPolicy(last_legal)], None, [0],
                            env_kwargs=SEATS, rewards="zero_sum")
    assert match.returns == (1.0, -1.0)


def test_per_seat_advantages_equal_hand_computed():
    """GRPO on a batch holding both seats: each seat role is its own group, so seat 0's returns are compared
    with seat 0's only (a batch-wide baseline would mix the winner's and loser's seats)."""
    from agentgym.train.algorithm import AlgorithmSection
    from agentgym.train.estimators.targets import turn_advantages

    policies = [load_policy("random:1"), load_policy("random:2")]
    matches = play_matches(TTT, policies, None, [5], group_size=4, env_kwargs=SEATS, start_group_id=5)
    batch = [m.seats[s] for m in matches for s in (0, 1)]
    cfg = AlgorithmSection(estimator="grpo")
    adv = turn_advantages(cfg, TurnTable.from_trajectories(batch), batch)
    rows = iter(adv)
    got = [[next(rows) for _ in t.turns] for t in batch]
    assert len({m.returns for m in matches}) > 1, "the four games must differ for the test to say anything"
    for seat in (0, 1):
        returns = np.array([m.seats[seat].total_reward for m in matches])
        expected = np.zeros(4) if returns.std() == 0 else (returns - returns.mean()) / (returns.std(ddof=1) + cfg.eps)
        for k, m in enumerate(matches):
            assert got[2 * k + seat] == pytest.approx([expected[k]] * m.seats[seat].num_turns)
    assert {t.group_id for t in batch[0::2]} == {10} and {t.group_id for t in batch[1::2]} == {11}


def test_a_seat_left_unfilled_is_refused():
    with pytest.raises(ConfigError, match="seat 1 is empty"):
        check_seats([load_policy("random")], 2)
    with pytest.raises(ConfigError, match="seat 0 is empty"):
        play_matches(TTT, [None, load_policy("random")], None, [0], env_kwargs=SEATS)


def test_an_env_that_does_not_say_whose_turn_is_refused():
    with pytest.raises(ConfigError, match=r"does not say whose turn it is.*opponent: seats"):
        seat_count(TTT)  # the random-opponent mode is a one-agent env
    with pytest.raises(ConfigError, match="whose turn"):
        play_matches("agentgym/Toy-KeyDoor-v0", [load_policy("random")] * 2, None, [0])
    assert seat_count(TTT, SEATS) == 2


def test_a_policy_spec_that_fails_to_load_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"seat 1: the policy spec 'checkpoint:.*' failed to load"):
        load_seat_policy(f"checkpoint:{tmp_path}/nothing", 1)
    with pytest.raises(ConfigError, match="seat 0: the policy spec 'nosuchkind:x' failed to load"):
        load_seat_policy("nosuchkind:x", 0)


def test_a_failing_policy_fails_the_match_for_every_seat():
    def broken(ctx):
        raise RuntimeError("boom")

    (match,) = play_matches(TTT, [ScriptedPolicy(first_legal), ScriptedPolicy(broken)], None, [0], env_kwargs=SEATS)
    assert match.failed and match.outcome(0) == "error"
    assert all(t.end_reason == "failed" for t in match.seats)
