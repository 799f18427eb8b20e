"""The household env: oracle, splits, determinism, rewards, anchors, bad input."""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.envs.household import catalog as cat
from agentgym.envs.household import engine
from agentgym.envs.household.env import HouseholdEnv
from agentgym.errors import ConfigError


def run_oracle(env: HouseholdEnv, seed: int, options=None) -> tuple[bool, int]:
    obs, info = env.reset(seed=seed, options=options)
    for turn in range(1, 60):
        action = env.oracle_action()
        assert action in info["admissible_actions"], (action, env.world.task.task_id)
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["valid_action"], obs
        if terminated:
            return info["success"], turn
    return False, 60


@pytest.mark.parametrize("split", cat.SPLITS)
@pytest.mark.parametrize("task_type", cat.TASK_TYPES)
def test_oracle_solves_every_task(task_type, split):
    env = HouseholdEnv(split=split, task_types=(task_type,))
    for seed in range(60):
        solved, turns = run_oracle(env, seed)
        assert solved, env.world.task.task_id
        assert env.world.task.task_type == task_type and env.world.task.split == split


def test_oracle_plan_is_a_demonstration_and_does_not_change_the_env():
    env = HouseholdEnv(difficulty="hard")
    for seed in range(30):
        env.reset(seed=seed)
        env.step("go to " + env.world.rname[-1])  # start the plan from a detour, not the initial state
        key = env.world.state_key()
        plan = env.oracle_plan()
        assert env.world.state_key() == key
        for i, action in enumerate(plan):
            _, reward, terminated, _, info = env.step(action)
            assert info["valid_action"] and terminated == (i == len(plan) - 1)
        assert info["success"] and reward == 1.0


def test_oracle_recovers_from_holding_the_wrong_object():
    env = HouseholdEnv(task_types="pick_heat_then_place", distractors=12)
    for seed in range(40):
        _, info = env.reset(seed=seed)
        w = env.world
        wrong = [o for o in range(len(w.otype)) if w.otype[o] not in (w.task.obj_type, cat.LAMP)][0]
        env.step(f"go to {w.rname[w.oloc[wrong]]}")
        env.step(f"open {w.rname[w.oloc[wrong]]}")
        _, _, _, _, info = env.step(f"take {w.oname[wrong]} from {w.rname[w.oloc[wrong]]}")
        assert info["valid_action"]
        assert run_oracle_from_here(env)


def run_oracle_from_here(env: HouseholdEnv) -> bool:
    for _ in range(60):
        _, _, terminated, _, info = env.step(env.oracle_action())
        if terminated:
            return info["success"]
    return False


def test_random_admissible_policy_solves_few():
    env, rng, wins = HouseholdEnv(), random.Random(0), 0
    for seed in range(200):
        _, info = env.reset(seed=seed)
        for _ in range(30):
            _, _, terminated, _, info = env.step(rng.choice(info["admissible_actions"]))
            if terminated:
                wins += info["success"]
                break
    assert wins / 200 < 0.15


def test_same_seed_same_world_other_seeds_differ():
    a, b = HouseholdEnv(), HouseholdEnv()
    obs_a, info_a = a.reset(seed=7)
    obs_b, info_b = b.reset(seed=7)
    assert (obs_a, info_a) == (obs_b, info_b)
    assert a.world.state_key() == b.world.state_key() and a.oracle_plan() == b.oracle_plan()
    tasks = {a.reset(seed=s)[1]["task_id"] for s in range(50)}
    assert len(tasks) == 50
    assert HouseholdEnv(split="test_seen").reset(seed=7)[1]["task_id"] != info_a["task_id"]


def test_unseeded_reset_continues_the_seeded_stream():
    a, b = HouseholdEnv(), HouseholdEnv()
    a.reset(seed=3)
    b.reset(seed=3)
    assert a.reset()[0] == b.reset()[0]


def test_task_id_option_rebuilds_the_task():
    env = HouseholdEnv(split="test_unseen")
    _, info = env.reset(seed=11)
    plan = env.oracle_plan()
    other = HouseholdEnv(task_types="pick_two_obj_and_place", rooms="kitchen")  # knobs a task id overrides
    _, again = other.reset(options={"task_id": info["task_id"]})
    assert again["task_id"] == info["task_id"] and other.oracle_plan() == plan
    for bad in ("nonsense", info["task_id"].replace("test_unseen", "train"),
                "household/train/pick_and_place/kitchen/book/sofa/1"):
        with pytest.raises(ConfigError):
            env.reset(options={"task_id": bad})


def test_unseen_split_uses_only_combinations_never_in_train():
    train, unseen = HouseholdEnv(split="train"), HouseholdEnv(split="test_unseen")
    seen_combos, unseen_combos = set(), set()
    for seed in range(300):
        train.reset(seed=seed)
        unseen.reset(seed=seed)
        t, u = train.world.task, unseen.world.task
        seen_combos.add((t.room, t.task_type, t.obj_type, t.recep_type))
        unseen_combos.add((u.room, u.task_type, u.obj_type, u.recep_type))
        assert cat.is_unseen(u.room, u.task_type, u.obj_type, u.recep_type)
        assert not cat.is_unseen(t.room, t.task_type, t.obj_type, t.recep_type)
    assert not seen_combos & unseen_combos
    for task_type in cat.TASK_TYPES:  # every task type has held-out combinations
        assert any(cat.split_combinations(r, task_type, "test_unseen") for r in cat.ROOMS)


def test_generic_test_split_is_the_unseen_split():
    env = HouseholdEnv()
    via_alias = env.reset(seed=5, options={"split": "test"})[1]["task_id"]
    assert via_alias == env.reset(seed=5, options={"split": "test_unseen"})[1]["task_id"]
    assert HouseholdEnv(split="test").reset(seed=5)[1]["task_id"] == via_alias


def test_split_option_and_difficulty_knobs():
    env = HouseholdEnv()
    env.reset(seed=1, options={"split": "test_unseen"})
    assert env.world.task.split == "test_unseen"
    sizes = {}
    for level in ("easy", "hard"):
        counts = []
        for seed in range(40):
            env.reset(seed=seed, options={"difficulty": level})
            counts.append((len(env.world.rname), len(env.world.otype)))
        sizes[level] = [sum(c) / len(c) for c in zip(*counts)]
    assert sizes["easy"][0] < sizes["hard"][0] and sizes["easy"][1] < sizes["hard"][1]
    env.reset(seed=2, options={"task_type": "pick_cool_then_place", "distractors": 0})
    assert env.world.task.task_type == "pick_cool_then_place"
    assert set(env.world.otype) <= {env.world.task.obj_type, cat.LAMP}
    for bad in ({"split": "nope"}, {"difficulty": "insane"}, {"task_types": ("flying",)}):
        with pytest.raises(ConfigError):
            HouseholdEnv(**bad)


def test_rewards_outcome_scale_progress_and_invalid_penalty():
    env = HouseholdEnv(task_types="pick_clean_then_place", success_reward=10.0, progress_reward=0.5,
                       invalid_penalty=0.1)
    _, info = env.reset(seed=4)
    total, names = 0.0, set()
    _, reward, _, _, info = env.step("dance wildly")
    assert info["reward_components"] == {"invalid": -0.1} and reward == pytest.approx(-0.1)
    for action in env.oracle_plan():
        _, reward, terminated, _, info = env.step(action)
        assert reward == pytest.approx(sum(info["reward_components"].values()))
        total += reward
        names |= set(info["reward_components"])
    assert info["success"] and info["reward_components"]["outcome"] == 10.0
    assert names == {"progress", "outcome"}
    assert total == pytest.approx(10.0 + 3 * 0.5)  # found, picked, transformed


def test_revisit_penalty_marks_loops_only():
    env = HouseholdEnv(task_types="pick_and_place", revisit_penalty=0.05)
    assert env.reward_range[0] == -0.05
    _, info = env.reset(seed=3)
    for action in env.oracle_plan():  # the oracle never comes back to a state
        _, reward, terminated, _, info = env.step(action)
        assert "revisit" not in info["reward_components"], action
    assert terminated and reward == 1.0
    _, info = env.reset(seed=3)
    first_go = next(a for a in info["admissible_actions"] if a.startswith("go to "))
    env.step(first_go)
    saved = env.snapshot()
    _, reward, _, _, info = env.step("look")  # changed nothing: the state after the go again
    assert info["reward_components"] == {"revisit": -0.05} and reward == pytest.approx(-0.05)
    other = next(a for a in info["admissible_actions"] if a.startswith("go to ") and a != first_go)
    assert "revisit" not in env.step(other)[4]["reward_components"]
    assert env.step(first_go)[4]["reward_components"] == {"revisit": -0.05}  # back where nothing changed
    fresh = HouseholdEnv(task_types="pick_and_place", revisit_penalty=0.05)
    fresh.restore(saved)  # a restored env remembers the states of its episode so far
    assert fresh.step("look")[4]["reward_components"] == {"revisit": -0.05}
    env.reset(seed=3)  # a new episode starts with no history
    assert "revisit" not in env.step(first_go)[4]["reward_components"]
    plain = HouseholdEnv(task_types="pick_and_place")
    plain.reset(seed=3)
    plain.step(first_go)
    assert plain.step("look")[4]["reward_components"] == {}  # off by default
    with pytest.raises(ConfigError, match="revisit_penalty"):
        HouseholdEnv(revisit_penalty=-0.1)


def test_outcome_only_by_default():
    env = HouseholdEnv()
    env.reset(seed=5)
    rewards = [env.step(a)[1] for a in env.oracle_plan()]
    assert rewards[:-1] == [0.0] * (len(rewards) - 1) and rewards[-1] == 1.0


def test_anchor_is_observation_by_default_and_state_key_on_request():
    env = HouseholdEnv()
    obs, info = env.reset(seed=6)
    assert info["anchor"] == obs
    env = HouseholdEnv(anchor="state", task_types="pick_and_place")
    _, first = env.reset(seed=6)
    closed = [r for r in range(len(env.world.rname)) if env.world.openable[r]][0]
    name = env.world.rname[closed]
    keys = [env.step(a)[4]["anchor"] for a in (f"go to {name}", f"open {name}", f"close {name}")]
    assert keys[0] == keys[2] != keys[1]  # same state, same key, whatever the observation said
    assert first["anchor"] != keys[0]
    hash(keys[0])


def test_list_actions_puts_the_admissible_list_in_the_observation():
    env = HouseholdEnv(list_actions=True)
    obs, info = env.reset(seed=8)
    assert obs.endswith("Admissible actions: " + ", ".join(info["admissible_actions"]))


def test_alfworld_style_observations():
    env = HouseholdEnv(task_types="pick_and_place")
    obs, _ = env.reset(seed=9)
    assert obs.startswith("You are in the middle of a ") and "\n\nYour task is to: put " in obs
    w = env.world
    closed = [r for r in range(len(w.rname)) if w.openable[r]][0]
    name = w.rname[closed]
    assert env.step(f"go to {name}")[0] == f"You arrive at {name}. The {name} is closed."
    assert env.step(f"open {name}")[0].startswith(f"You open the {name}. The {name} is open. In it, you see ")
    assert env.step("inventory")[0] == "You are not carrying anything."


@pytest.mark.parametrize("action, says", [
    ("go to cabinet 99", 'There is no "cabinet 99" here'),
    ("take apple from countertop 1", "named with a number"),
    ("fly to the moon", "I do not understand"),
    ("", "empty"),
    ("put {obj} in {recep}", "not carrying"),
    ("take {obj} from {recep}", "go to {recep} first"),
    ("heat {obj} with {recep}", "not carrying"),
])
def test_invalid_commands_say_what_was_wrong(action, says):
    env = HouseholdEnv(rooms="kitchen")
    env.reset(seed=1)
    w = env.world
    names = {"obj": w.oname[0], "recep": w.rname[w.oloc[0]]}
    action, says = action.format(**names), says.format(**names)
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs.startswith("Nothing happens.") and says in obs
    assert not info["valid_action"] and reward == 0.0 and not terminated


def test_wrong_appliance_closed_receptacle_and_full_hands_are_explained():
    env = HouseholdEnv(task_types="pick_heat_then_place", distractors=30)
    env.reset(seed=2)
    w = env.world
    obj = [o for o in range(len(w.otype)) if w.otype[o] == w.task.obj_type][0]
    where = w.rname[w.oloc[obj]]
    env.step(f"go to {where}")
    if w.openable[w.oloc[obj]]:
        assert "open it first" in env.step(f"take {w.oname[obj]} from {where}")[0]
        env.step(f"open {where}")
    assert env.step(f"go to {where}")[0].endswith(f"You are already at the {where}.")
    assert env.step(f"take {w.oname[obj]} from {where}")[4]["valid_action"]
    fridge = w.rname[w.rtype.index("fridge")]
    env.step(f"go to {fridge}")
    assert "only heat things with a microwave" in env.step(f"heat {w.oname[obj]} with {fridge}")[0]
    full = [r for r in range(len(w.rname)) if w.contents[r] and not w.openable[r] and w.contents[r][0] != w.lamp]
    env.step(f"go to {w.rname[full[0]]}")
    taking = f"take {w.oname[w.contents[full[0]][0]]} from {w.rname[full[0]]}"
    assert "one object at a time" in env.step(taking)[0]


def test_other_phrasings_and_tags_are_understood():
    env = HouseholdEnv(task_types="pick_and_place")
    env.reset(seed=3)
    plan = env.oracle_plan()
    for action in plan:
        if action.startswith("put "):
            obj, recep = action[4:].split(" in/on ")
            action = f"Put the {obj} on {recep.upper()}."
        elif action.startswith("go to "):
            action = f"I will move now.\n<action>{action}</action>"
        obs, reward, terminated, _, info = env.step(action)
        assert info["valid_action"], (action, obs)
    assert terminated and info["success"]


def test_examine_shows_object_state_and_lamp():
    env = HouseholdEnv(task_types="pick_cool_then_place")
    env.reset(seed=12)
    for action in env.oracle_plan():
        if action.startswith("put "):
            held = env.world.oname[env.world.holding]
            assert env.step(f"examine {held}")[0] == f"The {held} is cool."
        env.step(action)


def test_admissible_list_agrees_with_the_checker():
    env, rng = HouseholdEnv(), random.Random(1)
    for seed in range(40):
        _, info = env.reset(seed=seed)
        w = env.world
        for _ in range(15):
            for _ in range(40):
                op = _random_op(w, rng)
                assert (engine.check(w, op) == "") == (engine.command(w, op) in info["admissible_actions"]), op
            _, _, terminated, _, info = env.step(rng.choice(info["admissible_actions"]))
            if terminated:
                break


def _random_op(w, rng):
    verb = rng.choice(["go", "open", "close", "examine_r", "take", "put", "heat", "cool", "clean", "use"])
    r = rng.randrange(len(w.rname))
    o = rng.randrange(len(w.otype))
    if verb in ("go", "open", "close", "examine_r"):
        return (verb, r, -1)
    return (verb, o, r if verb != "use" or rng.random() < 0.5 else w.oloc[o])


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_any_string_is_a_safe_action(action):
    env = HouseholdEnv()
    _, before = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs, str) and obs.encode("utf-8")
    if engine.normalize(action) in before["admissible_actions"]:
        assert info["valid_action"]
    if not info["valid_action"]:
        assert obs.startswith("Nothing happens.") and reward == 0.0


def test_huge_and_odd_actions():
    env = HouseholdEnv()
    env.reset(seed=0)
    for action in ("x" * 1_000_000, "\ud800 go", "<action>" * 1000, "\x00\x1b[2J", None, 42):
        obs, _, _, _, info = env.step(action)
        assert not info["valid_action"] and len(obs) < 500
        obs.encode("utf-8")
    with pytest.raises(RuntimeError):
        HouseholdEnv().step("look")


def test_step_after_success_is_harmless():
    env = HouseholdEnv()
    env.reset(seed=0)
    for action in env.oracle_plan():
        env.step(action)
    obs, reward, terminated, _, info = env.step("look")
    assert terminated and reward == 0.0 and "reset" in obs and env.oracle_action() is None


def test_demonstrations_replay_to_success():
    from agentgym.envs.household.env import demonstrations

    episodes = demonstrations([0, 1, 2], split="test_unseen", task_types="look_at_obj_in_light")
    env = HouseholdEnv(split="test_unseen", task_types="look_at_obj_in_light")
    for seed, pairs in zip([0, 1, 2], episodes):
        obs, _ = env.reset(seed=seed)
        for expected_obs, action in pairs:
            assert obs == expected_obs
            obs, _, terminated, _, info = env.step(action)
        assert terminated and info["success"]


def _task_with_another_object_in_view(env):
    """Reset `env` to the first task whose room shows an object of another type than the task's on an open
    receptacle: (world, that object, its receptacle)."""
    for seed in range(50):
        env.reset(seed=seed)
        w = env.world
        other = [(o, r) for r in range(len(w.rname)) if w.visible(r) for o in w.contents[r]
                 if w.otype[o] != w.task.obj_type]
        if other:
            return (w, *other[0])
    raise AssertionError("no task with another object in view in 50 seeds")


def _household_loops():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "household_loops.py"
    spec = importlib.util.spec_from_file_location("household_loops", path)
    loops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loops)
    return loops


def test_wrong_take_penalty_charges_takes_of_other_objects_only():
    env = HouseholdEnv(task_types="pick_and_place", wrong_take_penalty=0.1)
    w, o, r = _task_with_another_object_in_view(env)
    _, reward, *_ = env.step(f"go to {w.rname[r]}")
    assert reward == 0.0
    _, reward, _, _, info = env.step(f"take {w.oname[o]} from {w.rname[r]}")
    assert info["reward_components"] == {"wrong_take": -0.1} and reward == -0.1
    _, reward, _, _, info = env.step(f"put {w.oname[o]} in/on {w.rname[r]}")
    assert "wrong_take" not in info["reward_components"]
    # the fair expert, on every task type, never pays it (nor does the oracle)
    for task_type in ("pick_and_place", "pick_heat_then_place", "pick_two_obj_and_place", "look_at_obj_in_light"):
        env = HouseholdEnv(task_types=task_type, wrong_take_penalty=1.0)
        for seed in range(20):
            env.reset(seed=seed)
            for _ in range(100):
                if (action := env.expert_action()) is None:
                    break
                _, _, terminated, _, info = env.step(action)
                assert "wrong_take" not in info["reward_components"], (task_type, seed, action)
            assert terminated, (task_type, seed)
    # a take that is wrong and brings back a state pays both
    assert HouseholdEnv(revisit_penalty=0.05, wrong_take_penalty=0.1).reward_range[0] == pytest.approx(-0.15)
    with pytest.raises(ConfigError, match="wrong_take_penalty"):
        HouseholdEnv(wrong_take_penalty=-0.1)


def test_loops_benchmark_counts_revisits_of_recorded_episodes(tmp_path):
    from agentgym.eval.records import EvalRecord
    from agentgym.trajectory import Trajectory, Turn

    loops = _household_loops()
    env = HouseholdEnv(task_types="pick_and_place")
    _, info = env.reset(seed=3)
    plan = env.oracle_plan()
    looped = [plan[0], "look", "look", "inventory", "look"]  # 4 commands that change nothing
    def record(actions, success):
        turns = tuple(Turn(index=i, observation="", action=a, prompt_ids=(), response_ids=(), logprobs=(),
                           reward=0.0)
                      for i, a in enumerate(actions))
        traj = Trajectory("household", 3, 0, 0, turns, success, "terminated", task_id=info["task_id"])
        return json.dumps(EvalRecord("household", traj).to_dict()) + "\n"

    (tmp_path / "trajectories.jsonl").write_text(record(plan, True) + record(looped, False))
    assert loops.replay_revisits(info["task_id"], looped) == 4
    found = int(loops.replay(info["task_id"], looped)["found"])
    assert loops.run_row(tmp_path, min_revisits=4).endswith(
        f"success 1/2, revisits {4 / (len(plan) + 5):.0%} of {len(plan) + 5} turns, 1 of 1 failures revisit >= 4 "
        f"times; 0 episodes take a wrong object; failures: {1 - found} never see the object, {found} see it and "
        "never take it, 0 take it and do not deliver it")


def test_loops_benchmark_counts_wrong_takes_and_where_failures_stop():
    loops = _household_loops()
    w, o, r = _task_with_another_object_in_view(HouseholdEnv(task_types="pick_and_place"))
    wrong = [f"go to {w.rname[r]}", f"take {w.oname[o]} from {w.rname[r]}", f"put {w.oname[o]} in/on {w.rname[r]}"]
    stats = loops.replay(w.task.task_id, wrong)
    assert stats["wrong_takes"] == 1 and stats["picked"] == 0 and stats["revisits"] == 1
    plan = HouseholdEnv(task_types="pick_and_place")
    plan.reset(options={"task_id": w.task.task_id})
    solved = loops.replay(w.task.task_id, plan.oracle_plan())
    assert solved == {"revisits": 0, "wrong_takes": 0, "found": 1, "picked": 1}
