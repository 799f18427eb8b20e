"""TextArena's seats mode: whose turn it is, each seat's own messages, listed legal moves, per-seat outcomes."""
from __future__ import annotations

import random

import pytest

from agentgym.envs.textarena.env import TextArenaEnv
from agentgym.errors import ConfigError

pytest.importorskip("textarena")


@pytest.mark.parametrize("game", ["TicTacToe-v0", "ConnectFour-v0"])
def test_listed_moves_are_exactly_the_moves_the_game_takes(game):
    env = TextArenaEnv(game, opponent="seats")
    obs, info = env.reset(seed=4)
    assert env.num_seats == 2 and info["seat"] == 0 and "Player 0" in obs
    rng, seats = random.Random(0), []
    while True:
        listed = info["admissible_actions"]
        snapshot = env.snapshot()
        for move in listed:  # every listed move is accepted as written
            env.restore(snapshot)
            assert env.step(move)[4]["valid_action"], move
        env.restore(snapshot)
        seats.append(info["seat"])
        obs, reward, done, _, info = env.step(rng.choice(listed))
        if done:
            break
        assert info["seat"] == 1 - seats[-1] and f"You are Player {seats[-1]}" not in obs  # not the other's view
    assert info["seat"] is None and set(info["seat_rewards"]) == {0, 1}
    assert sorted(info["seat_rewards"].values()) in ([-1.0, 1.0], [0.0, 0.0])
    assert info["seat_success"] == {s: r >= 1 for s, r in info["seat_rewards"].items()}


def test_a_rejected_move_keeps_the_turn_with_the_same_seat():
    env = TextArenaEnv("TicTacToe-v0", opponent="seats")
    env.reset(seed=0)
    env.step("[4]")
    obs, reward, done, _, info = env.step("[4]")  # seat 1 plays a taken cell
    assert not info["valid_action"] and info["seat"] == 1 and not done and info["seat_rewards"] == {}
    assert "[4]" not in info["admissible_actions"]


def test_seats_needs_a_two_player_game():
    with pytest.raises(ConfigError, match="has one player"):
        TextArenaEnv("Sudoku-v0-easy", opponent="seats")
    with pytest.raises(ConfigError, match="opponent must be one of random, seats"):
        TextArenaEnv("TicTacToe-v0", opponent="mirror")
    assert TextArenaEnv.action_listing({"game": "TicTacToe-v0", "opponent": "seats"}) == "all"
    assert TextArenaEnv.action_listing({"game": "Nim-v0", "opponent": "seats"}) == "none"
    assert TextArenaEnv.action_listing({"game": "Nim-v0"}) is None
