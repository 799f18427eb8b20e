"""The fair ScienceWorld expert (classification tasks 4-1..4-4) explores for the thing; never the gold path."""
from __future__ import annotations

import pytest

from agentgym.envs.scienceworld.expert import TASKS, ClassifyExpert, _moves, animal_of
from expert_episodes import play

TASK = ("Task Description:\nYour task is to find a(n) animal. First, focus on the thing. Then, move it to the red "
        "box in the kitchen.\n\n")


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_fair_expert_solves_train_variations_without_the_gold_path(task, monkeypatch):
    """Stated rate: 100% of train variations of the four tasks with simplifications=easy (measured 16/16 on
    seeds 0-3 of each). The gold path is made to raise: the expert never asks for it."""
    pytest.importorskip("scienceworld")
    import agentgym
    from agentgym.envs.scienceworld.env import ScienceWorldEnv

    def hidden(self):
        raise AssertionError("the fair expert read the gold path")
    monkeypatch.setattr(ScienceWorldEnv, "oracle_plan", hidden)
    env = agentgym.make(f"agentgym/ScienceWorld-{task}-v0", simplifications="easy")
    try:
        results = [play(env, seed, {"split": "train"}, max_turns=40) for seed in range(2)]
    finally:
        env.close()
    assert all(ok for ok, _ in results), results


@pytest.mark.slow
@pytest.mark.parametrize("task", ["find-living-thing", "find-non-living-thing"])
def test_the_classify_filter_lists_what_the_expert_needs_and_a_fraction_of_the_rest(task):
    """`action_filter=classify` (the scienceworld_cpu preset's list): every listed action is one the simulator
    lists unfiltered, the expert still solves from the shorter list, and the list is < 1/4 of the full one
    (measured ~49 of ~460 a turn on find-living-thing, ~91 of ~900 on find-non-living-thing)."""
    pytest.importorskip("scienceworld")
    import agentgym

    full_env = agentgym.make(f"agentgym/ScienceWorld-{task}-v0", simplifications="easy")
    env = agentgym.make(f"agentgym/ScienceWorld-{task}-v0", simplifications="easy", action_filter="classify")
    kept = full = 0
    try:
        for seed in range(2):
            (_, info), (_, full_info) = env.reset(seed=seed), full_env.reset(seed=seed)
            for _ in range(40):
                listed, every = info["admissible_actions"], full_info["admissible_actions"]
                assert set(listed) <= set(every) and listed
                kept, full = kept + len(listed), full + len(every)
                action = env.unwrapped.expert_action()
                assert action in listed
                (_, _, done, _, info), (_, _, _, _, full_info) = env.step(action), full_env.step(action)
                if done:
                    break
            assert info["success"], (task, seed)
    finally:
        env.close()
        full_env.close()
    assert kept < full / 4, (kept, full)


def test_a_bad_action_filter_is_refused_with_the_fix():
    from agentgym.envs.scienceworld.env import ScienceWorldEnv
    from agentgym.errors import ConfigError

    with pytest.raises(ConfigError, match="not a regular expression.*classify"):
        ScienceWorldEnv("find-animal", action_filter="move (")
    assert ScienceWorldEnv("find-animal", action_filter="classify").action_filter.search("pick up frog")
    assert not ScienceWorldEnv("find-animal", action_filter="classify").action_filter.search("pour frog in sink")


def test_expert_looks_in_rooms_the_task_does_not_name():
    """Where the animal is, the task does not say: the expert teleports to rooms it has not seen, looks, and
    takes the first animal a listing shows to the named box."""
    e = ClassifyExpert()
    e.observe(TASK + "This room is called the hallway. In it, you see: \n\tthe agent\n\ta picture\nYou also see:\n"
              "\tA door to the kitchen (that is open)")
    rooms = ["teleport to hallway", "teleport to kitchen", "teleport to outside"]
    assert e.act(["look around", *rooms]) == "teleport to kitchen"
    e.observe("You teleport to the kitchen.")
    assert e.act(["look around", *rooms]) == "look around"
    e.observe("This room is called the kitchen. In it, you see: \n\tthe agent\n\ta red box (containing nothing)\n")
    assert e.act(["look around", *rooms]) == "teleport to outside"
    e.observe("You teleport to the outside.")
    e.act(["look around"])
    e.observe("This outside location is called the outside. Here you see: \n\tthe agent\n\tan axe\n\ta dove egg\n")
    assert e.act(["focus on axe", "focus on dove", "pick up dove", *rooms]) == "focus on dove"
    e.observe("You focus on the dove egg.")
    assert e.act(["focus on dove", "pick up dove", *rooms]) == "pick up dove"
    e.observe("You move the dove to the inventory.")
    assert e.act(["look around", *rooms]) == "teleport to kitchen"
    e.observe("You teleport to the kitchen.")
    assert e.act(["move dove to red box", "move red box to dove", "move axe to red box"]) == "move dove to red box"


def test_no_path_and_other_tasks():
    e = ClassifyExpert()
    e.observe(TASK + "This room is called the hallway. In it, you see: \n\tthe agent\n")
    assert e.act(["teleport to hallway"]) is None  # every room seen, no animal: no path, never a guess
    other = ClassifyExpert()
    other.observe("Task Description:\nYour task is to boil water.\n")
    assert other.act(["look around"]) is None  # not one of its four tasks
    assert animal_of("blue jay egg") == "blue jay" and animal_of("axe") is None


def test_a_plant_is_taken_by_the_name_it_was_focused_on_not_by_its_pot():
    """The warm start cloned from pot pick-ups took the wrong pot (docs/results/learning-families.md): the
    expert now picks up and moves the thing it focused on, so focus, pick-up and move name the same object;
    its flower pot only where the simulator does not list the plant alone."""
    plant_task = TASK.replace("an animal", "a living thing").replace("a(n) animal", "a(n) living thing")
    greenhouse = ("This room is called the greenhouse. In it, you see: \n\tthe agent\n"
                  "\ta flower pot 2 (containing a substance called water)\n"
                  "\ta flower pot 6 (containing a cherry tree in the adult stage, soil)\n")
    for plant_listed, take in [(True, "adult cherry tree"), (False, "flower pot 6")]:
        e = ClassifyExpert()
        e.observe(plant_task + greenhouse)
        focus = ["focus on flower pot 2", "focus on adult cherry tree", "focus on flower pot 6"]
        assert e.act(focus) == "focus on adult cherry tree"
        e.observe("You focus on the cherry tree.")
        pick = ["pick up flower pot 2", "pick up flower pot 6"] + (["pick up adult cherry tree"] if plant_listed else [])
        assert e.act(pick) == f"pick up {take}"
        e.observe(f"You move the {take} to the inventory.")
        assert e.act(["teleport to greenhouse", "teleport to kitchen"]) == "teleport to kitchen"
        e.observe("You teleport to the kitchen.")
        moves = ["move flower pot to red box", "move adult cherry tree to red box", "move red box to sink"]
        assert e.act(moves) == ("move adult cherry tree to red box" if plant_listed else "move flower pot to red box")
    # held, the simulator names a plant with its stage and a pot without its number; the fruit is another thing
    assert _moves("move adult apple tree to red box", "apple tree", "red")
    assert not _moves("move apple to red box", "apple tree", "red")
    assert _moves("move flower pot to red box", "flower pot 6", "red")
    assert not _moves("move flower to red box", "flower pot 6", "red")
