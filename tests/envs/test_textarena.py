"""The TextArena adapter on the real `textarena` package: every registered game resets, steps and is
fuzzed; outcomes, invalid moves, the two-player opponent and seeding behave. Skipped without textarena."""
from __future__ import annotations

import random
import re
import threading

import pytest

pytest.importorskip("textarena")

from agentgym.checker import check_any_string, check_step_result  # noqa: E402
from agentgym.envs.textarena.catalog import GAMES, SINGLE_PLAYER, TWO_PLAYER, env_id  # noqa: E402
from agentgym.envs.textarena.env import TextArenaEnv, move_text, random_bracketed_move  # noqa: E402
from agentgym.errors import ConfigError  # noqa: E402
from agentgym.registration import list_envs, make, suite  # noqa: E402


def test_every_catalog_game_is_registered_and_known_to_textarena():
    from textarena.envs.registration import ENV_REGISTRY

    assert set(GAMES) <= set(ENV_REGISTRY)
    ids = {env_id(g) for g in GAMES}
    assert ids <= set(list_envs("agentgym/TextArena-"))
    assert {e.env_id for e in suite("games")} == {env_id(g) for g in SINGLE_PLAYER}
    assert {e.env_id for e in suite("games-2p")} == {env_id(g) for g in TWO_PLAYER}
    assert len(SINGLE_PLAYER) >= 40 and len(TWO_PLAYER) >= 60
    assert env_id("Sudoku-v0-easy") == "agentgym/TextArena-Sudoku-easy-v0"


@pytest.mark.parametrize("game", sorted(GAMES))
def test_every_registered_game_resets_steps_and_survives_garbage(game):
    # a generous error allowance keeps one game going through all the garbage (no reset per forfeit)
    env = make(env_id(game), error_allowance=1000)
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and obs.strip() and info["task_id"] == f"textarena/{game}/0"
    rng, seen = random.Random(0), [obs]
    for turn in range(3):
        result = check_step_result(env, env.step(random_bracketed_move(seen, rng)), f"{game} turn {turn}")
        seen.append(result[0])
        if result[2]:
            break
    check_any_string(env, seed=0)
    again, _ = env.reset(seed=0)
    assert again == obs  # the seed fixes the game
    env.close()
    env.close()


def solve_hanoi(n, source="A", spare="B", target="C"):
    if n == 0:
        return []
    return solve_hanoi(n - 1, source, target, spare) + [f"[{source} {target}]"] + solve_hanoi(n - 1, spare, source,
                                                                                            target)


def test_a_solved_puzzle_pays_outcome_one_on_the_last_turn_only():
    env = make("agentgym/TextArena-TowerOfHanoi-v0")
    env.reset(seed=3)
    rewards = []
    for move in solve_hanoi(3):
        obs, reward, terminated, truncated, info = env.step(move)
        assert info["valid_action"], obs
        rewards.append(reward)
    assert terminated and info["success"] and info["reward_components"] == {"outcome": 1.0}
    assert rewards == [0.0] * 6 + [1.0]
    assert not env.step("[A C]")[4]["valid_action"]  # the game is over
    env.close()


def test_guess_the_number_by_bisection_wins():
    env = TextArenaEnv("GuessTheNumber-v0")
    obs, _ = env.reset(seed=11)
    low, high = 1, 20
    for _ in range(10):
        guess = (low + high) // 2
        obs, reward, terminated, truncated, info = env.step(f"I guess <action>[{guess}]</action>")
        assert info["valid_action"], obs
        if terminated:
            break
        if re.search(r"higher", obs, re.I):
            low = guess + 1
        else:
            high = guess - 1
    assert terminated and info["success"] and reward == 1.0
    env.close()


def test_invalid_moves_get_the_games_reason_and_a_second_one_forfeits():
    env = TextArenaEnv("TowerOfHanoi-v0")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("[C A]")  # C is empty
    assert not info["valid_action"] and "invalid move" in obs.lower() and not terminated and reward == 0
    obs, reward, terminated, _, info = env.step("[Q Z]")
    # the game ends it and pays its own forfeit reward (TowerOfHanoi: its progress, here 0)
    assert not info["valid_action"] and terminated and not info["success"]
    assert info["reward_components"] == {"outcome": reward} and reward <= 0
    obs, reward, terminated, _, info = env.step("")
    assert not info["valid_action"] and "over" in obs
    env.close()


def test_replies_become_moves():
    assert move_text("up") == "[up]" and move_text("A C") == "[A C]"
    assert move_text("3") == "3"  # no letter: not taken for a bracketed move (the rules ask for [3])
    assert move_text("Let me think. <action>[A C]</action>") == "[A C]"
    assert move_text("I move [A C] now") == "I move [A C] now"
    assert move_text("") == "" and move_text("[]") == "" and move_text("\ud800") == ""
    assert not move_text("¿Qué? zalgo a").startswith("[")  # prose is not bracketed whole
    with pytest.raises(ConfigError, match="Did you mean 'Sudoku-v0'"):
        TextArenaEnv("Sudoku-v1")
    with pytest.raises(ConfigError, match="agent_player"):
        TextArenaEnv("TowerOfHanoi-v0", agent_player=1)


def test_two_player_game_against_the_random_opponent():
    env = make("agentgym/TextArena-TicTacToe-v0")
    obs, _ = env.reset(seed=1)
    assert "Player 0" in obs and "[Player 1 (opponent)]" not in obs  # the agent moves first
    rng, seen = random.Random(1), [obs]
    for _ in range(9):
        obs, reward, terminated, truncated, info = env.step(random_bracketed_move(seen, rng))
        seen.append(obs)
        if terminated:
            break
        assert "[Player 1 (opponent)]" in obs  # the opponent's move is in the agent's observation
    assert terminated and reward in (-1.0, 0.0, 1.0) and info["success"] == (reward == 1.0)
    second = make("agentgym/TextArena-TicTacToe-v0", agent_player=1)
    obs, _ = second.reset(seed=1)
    assert "[Player 0 (opponent)]" in obs  # the opponent opened
    env.close()
    second.close()


def play(env, seed, moves=6):
    obs, _ = env.reset(seed=seed)
    rng, seen = random.Random(seed), [obs]
    for _ in range(moves):
        obs, *_ = env.step(random_bracketed_move(seen, rng))
        seen.append(obs)
    return seen


def test_seeded_games_repeat_even_with_envs_stepping_in_threads():
    expected = {seed: play(TextArenaEnv("Minesweeper-v0-small", error_allowance=100), seed) for seed in range(4)}
    results: dict[int, list[str]] = {}

    def worker(seed):
        for _ in range(3):
            results[seed] = play(TextArenaEnv("Minesweeper-v0-small", error_allowance=100), seed)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == expected
    assert expected[0] != expected[1]


def test_random_play_rarely_solves_the_puzzles():
    wins = 0
    for game in ("TowerOfHanoi-v0", "Sudoku-v0", "Minesweeper-v0", "FrozenLake-v0", "Mastermind-v0"):
        env = TextArenaEnv(game)
        for seed in range(4):
            seen = play(env, seed, moves=0)
            rng = random.Random(seed)
            for _ in range(30):
                obs, reward, terminated, truncated, info = env.step(random_bracketed_move(seen, rng))
                seen.append(obs)
                if terminated:
                    break
            wins += info["success"]
        env.close()
    assert wins <= 2
