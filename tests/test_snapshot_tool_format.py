"""The tool-call format chosen at reset travels with the env: in a snapshot restored into a fresh env, in a
branch rollout's replay of its trunks, and in check_env's snapshot check (issue 51, defects 2 and 3)."""
import itertools
import pickle

import pytest

from agentgym.engine.branching import BranchConfig, branch_rollout
from agentgym.chat import ChatFormat
from agentgym.checker import check_env
from agentgym.envs.toy.calculator import CalculatorEnv
from agentgym.errors import CheckError
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.engine.rollout import RolloutConfig
from agentgym.snapshot import restore, snapshot
from agentgym.toolcall_formats import FORMATS, ToolCall

CALCULATOR = "agentgym/Toy-Calculator-v0"
MISTRAL = FORMATS["mistral"]  # a format neither of the Calculator's own (hermes, openai) reads


def _mistral_call(expression: str) -> str:
    return MISTRAL.render_calls([ToolCall("calculate", {"expression": expression})])


def test_a_restored_env_reads_the_tool_format_chosen_at_reset():
    env = CalculatorEnv()
    env.reset(seed=0, options={"tool_format": "mistral"})
    assert env.step(_mistral_call("2 + 3"))[0] == "<tool_response>\n5\n</tool_response>"
    fresh = CalculatorEnv()
    fresh.reset(seed=1)  # no options: hermes first
    restore(fresh, snapshot(env))
    obs, _, _, _, info = fresh.step(_mistral_call("4 * 5"))
    assert obs == "<tool_response>\n20\n</tool_response>" and info["tool_format"] == MISTRAL.name


def test_branch_rollouts_replay_and_continue_in_the_policys_tool_format():
    count = itertools.count()
    policy = ScriptedPolicy(lambda ctx: _mistral_call(f"{next(count)} + 1"), ChatFormat.simple("mistral"))
    trajs = branch_rollout(CALCULATOR, policy, None, [0, 1], BranchConfig(turns=(2,), G=2),
                           RolloutConfig(max_turns=4))
    assert len(trajs) == 2 + 2 * 2
    for traj in trajs:  # every turn after the question is a tool response: trunks, replays and branches parsed
        assert traj.error is None and len(traj.turns) == 4
        assert all(t.observation.startswith("<tool_response>") for t in traj.turns[1:]), \
            [t.observation[:60] for t in traj.turns]


class _FormatForgettingCalculator(CalculatorEnv):
    """Snapshots its task but not the tool format reset chose (the defect check_env must catch)."""

    def snapshot(self) -> bytes:
        return pickle.dumps({name: getattr(self, name) for name in (*self.snapshot_fields, "_last_obs")})

    def restore(self, data: bytes) -> None:
        for name, value in pickle.loads(data).items():
            setattr(self, name, value)


def test_check_env_catches_a_snapshot_that_forgets_the_tool_format():
    assert "snapshot" in check_env(lambda: CalculatorEnv(), seeds=(0,)).checks
    with pytest.raises(CheckError, match=r"\[snapshot\].*restored into a fresh instance"):
        check_env(lambda: _FormatForgettingCalculator(), seeds=(0,))
