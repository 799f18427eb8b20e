"""register / make / spec / list_envs, suites, the turn limit, did-you-mean and entry-point discovery."""
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

import agentgym
from agentgym.errors import RegistrationError
from agentgym.registration import TurnLimit

KEYDOOR = "agentgym.envs.toy.keydoor:KeyDoorEnv"


def test_builtin_toys_are_listed_with_suites():
    ids = agentgym.list_envs()
    assert {"agentgym/Toy-KeyDoor-v0", "agentgym/Toy-KeyDoor-Long-v0", "agentgym/Toy-Calculator-v0"} <= set(ids)
    assert ids == sorted(ids) and agentgym.list_envs("agentgym/Toy-Calc") == ["agentgym/Toy-Calculator-v0"]
    assert "toy" in agentgym.list_suites()
    assert "agentgym/Toy-KeyDoor-v0" in [e.env_id for e in agentgym.suite("toy")]


def test_register_make_and_kwargs(scratch_ids):
    scratch_ids.append("test/Corridor-v0")
    agentgym.register("test/Corridor-v0", KEYDOOR, max_turns=3, kwargs={"length": 5})
    env = agentgym.make("test/Corridor-v0")
    assert isinstance(env, TurnLimit) and env.max_turns == 3 and env.unwrapped.length == 5
    env7 = agentgym.make("test/Corridor-v0", length=7, max_turns=9)
    assert env7.unwrapped.length == 7 and env7.spec.kwargs == {"length": 7} and env7.spec.max_episode_steps == 9
    assert agentgym.spec("test/Corridor-v0").kwargs == {"length": 5}  # the registered spec is untouched
    assert agentgym.spec("test/Corridor-v0").max_episode_steps == 3
    assert "test/Corridor-v0" in agentgym.list_envs()
    assert isinstance(gym.make("test/Corridor-v0").unwrapped, type(env.unwrapped))  # plain gymnasium too


def test_callable_entry_point_and_no_limit(scratch_ids):
    from agentgym.envs.toy.keydoor import KeyDoorEnv

    scratch_ids.append("test/Callable-v0")
    agentgym.register("test/Callable-v0", lambda **kw: KeyDoorEnv(**kw))
    env = agentgym.make("test/Callable-v0")
    assert isinstance(env, KeyDoorEnv)  # no max_turns: no wrapper
    assert isinstance(agentgym.make("test/Callable-v0", max_turns=2), TurnLimit)


def test_register_twice(scratch_ids):
    scratch_ids.append("test/Twice-v0")
    agentgym.register("test/Twice-v0", KEYDOOR)
    agentgym.register("test/Twice-v0", KEYDOOR)  # the same entry point again is harmless
    with pytest.raises(RegistrationError, match="already registered; pass override=True"):
        agentgym.register("test/Twice-v0", "agentgym.envs.toy.calculator:CalculatorEnv")
    agentgym.register("test/Twice-v0", "agentgym.envs.toy.calculator:CalculatorEnv", override=True)
    assert agentgym.make("test/Twice-v0").unwrapped.__class__.__name__ == "CalculatorEnv"


def test_misspelt_id_says_did_you_mean():
    with pytest.raises(RegistrationError) as err:
        agentgym.make("agentgym/Toy-KeyDor-v0")
    message = str(err.value)
    assert "Did you mean 'agentgym/Toy-KeyDoor-v0'" in message and "agentgym list" in message
    assert "\n" not in message
    with pytest.raises(RegistrationError, match="Did you mean 'agentgym/Toy-Calculator-v0'"):
        agentgym.spec("agentgym/toy-calculator-v0")


def test_turn_limit_sets_truncated_not_terminated():
    env = agentgym.make("agentgym/Toy-KeyDoor-v0", max_turns=3)
    env.reset(seed=0)
    flags = [env.step("jump")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    env.reset(seed=0)  # the count restarts
    assert env.step("jump")[3] is False
    assert env.instructions == env.unwrapped.instructions and env.oracle_action() == env.unwrapped.oracle_action()
    with pytest.raises(RegistrationError, match="max_turns must be >= 1"):
        TurnLimit(env.unwrapped, 0)


def test_turn_limit_does_not_truncate_a_terminated_episode():
    env = agentgym.make("agentgym/Toy-Calculator-v0", max_turns=1)
    env.reset(seed=0)
    _, _, terminated, truncated, _ = env.step(env.oracle_action())
    assert (terminated, truncated) == (True, False)


def test_suites(scratch_ids):
    scratch_ids.append("test/Suite-v0")
    agentgym.register("test/Suite-v0", KEYDOOR, suites=("test-suite",))
    agentgym.register_suite("test-suite", [agentgym.SuiteEntry("test/Suite-v0", {"length": 3}, "short")],
                            extend=True)
    entries = agentgym.suite("test-suite")
    assert [e.name for e in entries] == ["test/Suite-v0", "short"]
    with pytest.raises(RegistrationError, match="Did you mean 'test-suite'"):
        agentgym.suite("test-suit")


def _write_plugin(tmp_path, body, group_line):
    (tmp_path / "myplugin.py").write_text(textwrap.dedent(body))
    dist = tmp_path / "myplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[agentgym.envs]\n{group_line}\n")


def test_entry_point_discovery(tmp_path):
    """A third-party package exposes envs through the `agentgym.envs` entry-point group."""
    _write_plugin(tmp_path, """
        import agentgym

        def register_all():
            agentgym.register("myplugin/Corridor-v0", "agentgym.envs.toy.keydoor:KeyDoorEnv", max_turns=4)
        """, "corridor = myplugin:register_all\nbroken = myplugin:does_not_exist")
    code = ("import warnings, agentgym\nwith warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n    ids = agentgym.list_envs('myplugin/')\n"
            "print(ids)\nprint(any('broken' in str(x.message) for x in w))\n"
            "print(type(agentgym.make('myplugin/Corridor-v0').unwrapped).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["['myplugin/Corridor-v0']", "True", "KeyDoorEnv"]


def test_reward_range_declared_by_the_env_or_its_registration(scratch_ids):
    """The reward_sanity guardrail's range: the env's own (following its kwargs), else the registration's."""
    from agentgym.envs.toy.oneword import OneWordKeyDoor
    from agentgym.registration import reward_range

    class Undeclared(OneWordKeyDoor):
        reward_range = None

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.reward_range = None

    assert reward_range(agentgym.make("agentgym/Toy-KeyDoor-v0", key_bonus=2.0, step_penalty=0.1)) == (-0.1, 1.9)
    agentgym.register("test/Declared-v0", entry_point=Undeclared, reward_range=(0, 2))
    agentgym.register("test/Undeclared-v0", entry_point=Undeclared)
    scratch_ids += ["test/Declared-v0", "test/Undeclared-v0"]
    assert reward_range(agentgym.make("test/Declared-v0")) == (0.0, 2.0)
    assert reward_range(agentgym.make("test/Undeclared-v0")) is None
    for bad in ((1, 0), (0,), "ab", (0, float("nan"))):
        with pytest.raises(RegistrationError, match="reward_range"):
            agentgym.register("test/Bad-v0", entry_point=Undeclared, reward_range=bad)
