"""The TextWorld adapter against real games made by TextWorld's generator (skipped without textworld)."""
from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("textworld")

from agentgym.envs.textworld.env import TextWorldEnv, clean_feedback  # noqa: E402
from agentgym.envs.textworld.games import GameSpec, game_path  # noqa: E402
from agentgym.errors import ConfigError  # noqa: E402
from agentgym.registration import make, suite  # noqa: E402

SMALL = {"world_size": 2, "nb_objects": 3, "quest_length": 2}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tw-cache"))


@pytest.fixture(scope="module")
def small_game(cache):
    return str(game_path(GameSpec(**SMALL), 5, cache))


def play_oracle(env, seed=None, options=None):
    obs, info = env.reset(seed=seed, options=options)
    rewards = []
    for _ in range(60):
        action = env.oracle_action()
        assert action in info["admissible_actions"], (action, info["admissible_actions"])
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["valid_action"], obs
        rewards.append(reward)
        if terminated or truncated:
            break
    return rewards, info


@pytest.mark.parametrize("seed", [0, 1])
def test_oracle_wins_generated_games_and_scores_arrive_as_rewards(cache, seed):
    env = make("agentgym/TextWorld-v0", cache_dir=cache, **SMALL)
    rewards, info = play_oracle(env, seed=seed)
    assert info["success"] and sum(rewards) == info["max_score"] >= 1
    assert info["reward_components"]["score"] == rewards[-1]
    assert env.unwrapped.oracle_action() is None and info["admissible_actions"] == []
    env.close()


def test_dense_challenge_pays_score_turn_by_turn(cache):
    env = TextWorldEnv(challenge="tw-simple", cache_dir=cache, win_reward=5.0)
    rewards, info = play_oracle(env, seed=0)
    paid = [r for r in rewards if r]
    assert info["success"] and info["score"] == info["max_score"] > 2
    assert len(paid) >= 3  # several turns earn points, not just the last one
    assert sum(rewards) == info["max_score"] + 5.0 and info["reward_components"]["outcome"] == 5.0
    env.close()


def test_same_seed_same_game_even_when_generated_again(cache, tmp_path):
    a = TextWorldEnv(cache_dir=cache, **SMALL)
    b = TextWorldEnv(cache_dir=str(tmp_path), **SMALL)  # compiled afresh in another folder
    obs_a, info_a = a.reset(seed=1)  # cached by the oracle test
    obs_b, info_b = b.reset(seed=1)
    assert obs_a == obs_b and info_a["admissible_actions"] == info_b["admissible_actions"]
    assert a.oracle_plan() == b.oracle_plan() and info_a["task_id"] == info_b["task_id"]
    assert [a.step(c)[0] for c in a.oracle_plan()] == [b.step(c)[0] for c in b.oracle_plan()]
    a.close(), b.close()


def test_existing_game_file_and_task_id(small_game):
    env = make("agentgym/TextWorld-Game-v0", game=small_game)
    rewards, info = play_oracle(env, seed=123)
    assert info["success"] and info["task_id"].startswith("textworld/")
    with pytest.raises(ConfigError):
        TextWorldEnv(game="/no/such/game.z8")
    with pytest.raises(ConfigError):
        TextWorldEnv(challenge="tw-nope")
    env.close()


def test_unplayable_game_files_get_a_one_line_fix(tmp_path):
    for name, says in (("old.ulx", "textworld<1.7"), ("notes.txt", ".z8")):
        path = tmp_path / name
        path.write_bytes(b"not a game")
        with pytest.raises(ConfigError, match=says.replace(".", r"\.")):
            TextWorldEnv(game=str(path)).reset(seed=0)


def test_bad_actions_never_reach_the_game_and_are_explained(small_game):
    env = TextWorldEnv(game=small_game)
    obs0, info0 = env.reset(seed=0)
    for action in ("", "xyzzy", "x" * 1_000_000, "\ud800\x00 look", "<action>" * 500, None, "go to mars"):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.startswith("Nothing happens.") and not info["valid_action"] and reward == 0.0
        assert not terminated and len(obs) < 600
        obs.encode("utf-8")
    first = env.oracle_action()
    obs, _, _, _, info = env.step(f"I'll do this.\n<action>{first.upper()}</action>")
    assert info["valid_action"]
    second = env.oracle_action()
    words = second.split()
    with_articles = " ".join([words[0], "the"] + words[1:])  # "take the key from box"
    assert env.step(with_articles)[4]["valid_action"], with_articles
    env.close()


def test_step_after_the_end_and_close_twice(small_game):
    env = TextWorldEnv(game=small_game)
    play_oracle(env, seed=0)
    obs, reward, terminated, _, info = env.step("look")
    assert terminated and reward == 0.0 and "reset" in obs
    env.close()
    env.close()


def test_replan_after_a_detour(small_game):
    plain, replanning = TextWorldEnv(game=small_game), TextWorldEnv(game=small_game, replan=True)
    for env in (plain, replanning):
        _, info = env.reset(seed=0)
        detour = next(a for a in info["admissible_actions"] if a.startswith("examine"))
        env.step(detour)
    assert plain.oracle_action() is None  # off the walkthrough and no planner asked for
    for _ in range(30):
        _, _, terminated, _, info = replanning.step(replanning.oracle_action())
        if terminated:
            break
    assert info["success"]
    plain.close(), replanning.close()


def test_state_anchor_and_listed_actions(small_game):
    env = TextWorldEnv(game=small_game, anchor="state", list_actions=True)
    obs, info = env.reset(seed=0)
    assert obs.endswith("Admissible actions: " + ", ".join(info["admissible_actions"]))
    key = info["anchor"]
    examine = next(a for a in info["admissible_actions"] if a.startswith("examine"))
    _, _, _, _, after = env.step(examine)  # looking changes the text but not the state
    assert after["anchor"] == key and isinstance(hash(key), int)
    env.close()


def test_feedback_cleaning():
    raw = "\nYou win.\n\n\n\n> -= Kitchen =-6/8\n*** The End ***\nWould you like to RESTART, RESTORE"
    assert clean_feedback(raw) == "You win.\n\n*** The End ***"


def test_suite_lists_the_textworld_ids():
    ids = {e.env_id for e in suite("textworld")}
    assert {"agentgym/TextWorld-v0", "agentgym/TextWorld-Simple-v0", "agentgym/TextWorld-Cooking-v0"} <= ids


@pytest.mark.skipif(importlib.util.find_spec("agentgym.checker") is None, reason="agentgym.checker not built yet")
def test_agentgym_check_passes(cache):
    from agentgym.checker import check_env

    report = check_env("agentgym/TextWorld-v0", cache_dir=cache, game_pool=1, **SMALL)
    assert "oracle" in report.checks and "determinism" in report.checks


@pytest.mark.slow
def test_game_pool_cycles_training_games_and_keeps_held_out_games_apart(cache):
    """game_pool=2: train resets 0 and 2 play one game (reset seed 0's, the very file an unpooled env
    compiles for seed 0, so the cache is reused), held-out resets play their own game, and a held-out seed
    inside the pool is refused with the fix."""
    pooled = TextWorldEnv(cache_dir=cache, game_pool=2, **SMALL)
    plain = TextWorldEnv(cache_dir=cache, **SMALL)
    train = {pooled.reset(seed=s, options={"split": "train"})[1]["task_id"] for s in (0, 2)}
    assert train == {plain.reset(seed=0)[1]["task_id"]}
    assert pooled.reset(seed=1, options={"split": "train"})[1]["task_id"] == plain.reset(seed=1)[1]["task_id"]
    held_out = pooled.reset(seed=7, options={"split": "test"})[1]["task_id"]
    assert held_out == plain.reset(seed=7)[1]["task_id"] and held_out not in train
    with pytest.raises(ConfigError, match="eval.seed_start"):
        pooled.reset(seed=1, options={"split": "test"})
    pooled.close()
    plain.close()


@pytest.mark.slow
def test_envs_in_threads_load_games_at_once(cache):
    """rollout.executor=thread resets several envs at once; TextWorld's shared logic parser is not thread-safe
    (every episode of the first RL iteration failed with "IndexError: pop from empty list")."""
    from concurrent.futures import ThreadPoolExecutor

    envs = [TextWorldEnv(cache_dir=cache, **SMALL) for _ in range(6)]
    for seed in range(6):  # compiled first: the race is in loading them
        game_path(GameSpec(**SMALL), seed, cache)

    def play(i: int) -> bool:
        _, info = envs[i].reset(options={"game": str(game_path(GameSpec(**SMALL), i, cache))})
        return bool(info["admissible_actions"])

    with ThreadPoolExecutor(6) as pool:
        assert all(pool.map(play, range(6)))
    for env in envs:
        env.close()


def test_revisit_penalty_marks_loops_not_progress(small_game):
    env = TextWorldEnv(game=small_game, revisit_penalty=0.25)
    _, info = env.reset(seed=0)
    step = env.oracle_action()   # the walkthrough's first command: a new state, no penalty
    _, reward, _, _, after = env.step(step)
    assert "revisit" not in after["reward_components"]
    look = next(a for a in after["admissible_actions"] if a in ("look", "inventory"))
    _, reward, _, _, again = env.step(look)   # changes nothing: a known state
    assert again["reward_components"]["revisit"] == -0.25 and reward == pytest.approx(-0.25)
    env.close()
    plain = TextWorldEnv(game=small_game)   # off by default: no facts asked for, no component
    plain.reset(seed=0)
    _, reward, _, _, info = plain.step("look")
    assert "revisit" not in info["reward_components"] and reward == 0.0
    plain.close()
    with pytest.raises(ConfigError, match="revisit_penalty"):
        TextWorldEnv(game=small_game, revisit_penalty=-1)
