"""check_env passes a correct env and names the check each deliberately broken env fails."""
import math

import gymnasium as gym
import pytest

import agentgym
from agentgym import TextEnv, make_info
from agentgym.checker import CheckReport, check_all, check_env
from agentgym.errors import CheckError, MissingDependencyError, require

DIGITS = ("0", "1", "2", "3")


class Guess(TextEnv):
    """Guess a digit 0-3; after a wrong guess the observation says higher or lower; three misses end it."""

    def __init__(self):
        self.target, self.misses, self.closed = 0, 0, 0

    @property
    def instructions(self):
        return "Guess the digit (0-3). Reply with the digit only."

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target, self.misses = int(self.np_random.integers(0, 4)), 0
        obs = "Guess a digit from 0 to 3."
        return obs, make_info(anchor=("start",), admissible_actions=DIGITS, task_id=f"guess-{self.target}")

    def feedback(self, action):
        return f"{action.strip()[:20]!r} is not a digit from 0 to 3. Reply with one of 0, 1, 2, 3."

    def step(self, action):
        guess = action.strip()
        if guess not in DIGITS:
            return self.feedback(action), 0.0, False, False, self.info(False, {}, False)
        if int(guess) == self.target:
            return "Right!", 1.0, True, False, self.info(True, {"outcome": 1.0}, True)
        self.misses += 1
        hint = "higher" if self.target > int(guess) else "lower"
        return f"No, {hint}.", 0.0, self.misses >= 3, False, self.info(True, {}, False, hint)

    def info(self, valid, components, success, anchor=None):
        return make_info(success=success, valid_action=valid, reward_components=components,
                         anchor=anchor or ("misses", self.misses), admissible_actions=DIGITS,
                         task_id=f"guess-{self.target}")

    def oracle_action(self):
        return str(self.target)

    def render(self):
        return f"target={self.target} misses={self.misses}"

    def close(self):
        self.closed += 1


_step_counter = [0]


class LeakyStep(Guess):
    def step(self, action):  # a module-level counter: the same actions give different observations
        obs, *rest = super().step(action)
        _step_counter[0] += 1
        return (f"{obs} ({_step_counter[0]})", *rest)


class Unseeded(Guess):
    def reset(self, *, seed=None, options=None):
        import random

        obs, info = super().reset(seed=seed)
        self.target = random.Random().randint(0, 3)
        return f"{obs} (round {random.Random().random():.6f})", info


class ForgetsToReset(Guess):
    def reset(self, *, seed=None, options=None):
        misses = self.misses
        obs, info = super().reset(seed=seed)
        self.misses = misses  # state leaks from one episode into the next
        return obs, info


class UnhashableAnchor(Guess):
    def info(self, valid, components, success, anchor=None):
        info = super().info(valid, components, success, anchor)
        info["anchor"] = ["misses", self.misses]
        return info


class RewardWithoutComponents(Guess):
    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        info["reward_components"] = {}
        return obs, reward, term, trunc, info


class NanReward(Guess):
    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        return obs, math.nan if info["success"] else reward, term, trunc, info


class CrashesOnHugeInput(Guess):
    def step(self, action):
        if len(action) > 100_000:
            raise MemoryError("too much")
        return super().step(action)


class GarbageIsValid(Guess):
    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        info["valid_action"] = True
        return obs, reward, term, trunc, info


class EchoesSurrogates(Guess):
    def feedback(self, action):
        return f"I do not understand {action[:40]}."


class SilentOnGarbage(Guess):
    def feedback(self, action):
        return ""


class SuccessNotBool(Guess):
    def info(self, valid, components, success, anchor=None):
        info = super().info(valid, components, success, anchor)
        info["success"] = int(success)
        return info


class WrongOracle(Guess):
    def oracle_action(self):
        return str((self.target + 1) % 4)


class OracleSaysGarbage(Guess):
    def oracle_action(self):
        return "the answer"


class CloseOnce(Guess):
    def close(self):
        super().close()
        if self.closed > 1:
            raise RuntimeError("already closed")


class RenderNumber(Guess):
    def render(self):
        return 5


class NoInstructions(Guess):
    instructions = None


class GymnasiumTextSpace(Guess):
    observation_space = gym.spaces.Text(100)


class ResetReturnsObsOnly(Guess):
    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed, options=options)[0]


class StepReturnsFour(Guess):
    def step(self, action):
        return super().step(action)[:4]


class NeedsMissingModule(Guess):
    def __init__(self):
        require("agentgym_no_such_module_xyz", "xyz")
        super().__init__()


def test_a_correct_env_passes_every_check():
    report = check_env(Guess)
    assert isinstance(report, CheckReport) and report.env_id == "Guess"
    assert report.checks == ("api", "gymnasium", "observation", "info", "anchor", "reward", "determinism",
                             "any string", "oracle", "context budget", "render", "close")


def test_a_registered_env_also_gets_the_turn_limit_check(scratch_ids):
    scratch_ids.append("test/Guess-v0")
    agentgym.register("test/Guess-v0", Guess, max_turns=5)
    report = check_env("test/Guess-v0", seeds=(0, 1, 2))
    assert report.env_id == "test/Guess-v0" and "turn limit" in report.checks


def test_an_instance_is_checked_and_closed():
    env = Guess()
    assert "close" in check_env(env).checks
    assert env.closed >= 2


@pytest.mark.parametrize("env_cls, check, fragment", [
    (LeakyStep, "gymnasium", "step determinism"),
    (ForgetsToReset, "determinism", "anchor differs after step"),
    (UnhashableAnchor, "anchor", "must be hashable"),
    (RewardWithoutComponents, "reward", "!= sum of reward_components"),
    (NanReward, "reward", "finite number"),
    (CrashesOnHugeInput, "any string", "the one megabyte action raised MemoryError"),
    (GarbageIsValid, "any string", "was reported valid"),
    (EchoesSurrogates, "observation", "lone surrogates"),
    (SilentOnGarbage, "any string", "empty observation"),
    (SuccessNotBool, "info", "info['success'] must be a bool"),
    (WrongOracle, "oracle", "did not solve the task"),
    (OracleSaysGarbage, "oracle", "the oracle's action was not valid"),
    (CloseOnce, "close", "already closed"),
    (RenderNumber, "render", "must return text or None"),
    (NoInstructions, "api", "`instructions` must be a str"),
    (GymnasiumTextSpace, "api", "must admit any UTF-8 text"),
])
def test_each_broken_env_fails_the_named_check(env_cls, check, fragment):
    with pytest.raises(CheckError) as err:
        check_env(env_cls)
    assert str(err.value).startswith(f"[{check}]"), str(err.value)
    assert fragment in str(err.value)


def test_a_declared_random_outcome_makes_an_oracle_miss_not_a_failure(scratch_ids, monkeypatch):
    # ScienceWorld's genetics tasks: pollination may not grow what the gold path harvests, so even the oracle
    # misses some episodes; the checker holds them to what `agentgym check --oracle` does
    from agentgym import horizon

    for env_id, env_cls in (("test/WrongOracle-v0", WrongOracle), ("test/OracleSaysGarbage-v0", OracleSaysGarbage),
                            ("test/Guess-v0", Guess)):
        scratch_ids.append(env_id)
        agentgym.register(env_id, env_cls, max_turns=5)
    for env_id in ("test/WrongOracle-v0", "test/OracleSaysGarbage-v0"):
        with pytest.raises(CheckError, match=r"^\[oracle\]"):
            check_env(env_id)
    for env_id in ("test/WrongOracle-v0", "test/OracleSaysGarbage-v0", "test/Guess-v0"):
        monkeypatch.setitem(horizon._RANDOM_OUTCOME, env_id, "the dice decide")
    assert "oracle" not in check_env("test/WrongOracle-v0").checks
    assert "oracle" not in check_env("test/OracleSaysGarbage-v0").checks
    assert "oracle" in check_env("test/Guess-v0").checks  # a declared id whose oracle solves still shows it


def test_gymnasiums_reset_check_catches_an_unseeded_registered_env(scratch_ids):
    scratch_ids.append("test/Unseeded-v0")
    agentgym.register("test/Unseeded-v0", Unseeded)
    with pytest.raises(CheckError, match=r"^\[gymnasium\] reset seed determinism: .*non-deterministic"):
        check_env("test/Unseeded-v0")


@pytest.mark.parametrize("env_cls, fragment", [(Unseeded, "observation differs after reset"),
                                               (LeakyStep, "observation differs after step 0")])
def test_without_gymnasium_checks_our_determinism_check_catches_them_too(env_cls, fragment):
    with pytest.raises(CheckError, match=r"^\[determinism\]") as err:
        check_env(env_cls, gymnasium_checks=False)
    assert fragment in str(err.value)


def test_a_determinism_failure_shows_where_two_long_observations_part():
    from agentgym.step_checks import difference

    head = "Repository: intervals (at /workspace)\n\nIssue:\n" * 4
    a, b = head + "Files: a.py, b.py", head + "Files: a.py"
    said = difference(a, b)
    assert said.startswith(f"{len(a)} vs {len(b)} chars, first different at char {len(b)}:") and ", b.py" in said
    assert difference("ab", "ac") == "'ab' vs 'ac'"  # short values whole


@pytest.mark.parametrize("env_cls", [ResetReturnsObsOnly, StepReturnsFour])
def test_wrong_return_shapes_are_api_failures(env_cls):
    with pytest.raises(CheckError, match=r"^\[api\] .*(reset|step).* must return"):
        check_env(env_cls, gymnasium_checks=False)
    with pytest.raises(CheckError, match=r"^\[gymnasium\]"):
        check_env(env_cls)


def test_garbage_may_be_valid_for_free_text_envs():
    assert "any string" in check_env(GarbageIsValid, garbage_is_invalid=False).checks


def test_bad_arguments():
    with pytest.raises(CheckError, match="at least one seed"):
        check_env(Guess, seeds=())
    with pytest.raises(CheckError, match=r"^\[api\] check_env takes"):
        check_env(42)
    with pytest.raises(agentgym.errors.RegistrationError, match="Did you mean"):
        check_env("agentgym/Toy-KeyDor-v0")


def test_check_all_reports_ok_failed_and_skipped(scratch_ids):
    for name, cls in (("test/Good-v0", Guess), ("test/Broken-v0", GarbageIsValid),
                      ("test/Missing-v0", NeedsMissingModule)):
        scratch_ids.append(name)
        agentgym.register(name, cls, max_turns=4)
    with pytest.raises(MissingDependencyError, match="pip install 'agentgym\\[xyz\\]'"):
        check_env("test/Missing-v0")
    outcomes = {o.env_id: o for o in check_all(["test/Good-v0", "test/Broken-v0", "test/Missing-v0"])}
    assert outcomes["test/Good-v0"].status == "ok"
    assert outcomes["test/Broken-v0"].status == "failed" and "[any string]" in outcomes["test/Broken-v0"].message
    assert outcomes["test/Missing-v0"].status == "skipped" and "xyz" in outcomes["test/Missing-v0"].message


def test_a_missing_module_behind_an_entry_point_is_a_skip_but_a_missing_agentgym_module_is_a_failure(scratch_ids):
    from agentgym.checker import as_missing_dependency

    scratch_ids += ["test/NoModule-v0", "test/NoCoreModule-v0"]
    agentgym.register("test/NoModule-v0", "no_such_plugin_xyz.env:Env")
    agentgym.register("test/NoCoreModule-v0", "agentgym.envs.no_such_family:Env")
    outcomes = check_all(["test/NoModule-v0", "test/NoCoreModule-v0"])
    assert [o.status for o in outcomes] == ["skipped", "failed"]
    assert "no_such_plugin_xyz" in outcomes[0].message
    assert as_missing_dependency(ValueError("x")) is None
    assert as_missing_dependency(ModuleNotFoundError("x", name="agentgym.envs.zz")) is None
    assert isinstance(as_missing_dependency(ModuleNotFoundError("x", name="torch")), MissingDependencyError)
