"""TextEnv and ToolEnv: the info keys, defaults, and every way a tool call can go wrong."""
import threading

import gymnasium as gym
import pytest

from agentgym import Text, TextEnv, ToolEnv, make_info, tool
from agentgym.core import INFO_KEYS
from agentgym.tools import Tool, ToolResult


def test_make_info_standard_keys():
    info = make_info(success=1, valid_action=0, reward_components={"a": 1.0}, admissible_actions=("x", "y"),
                     task_id="t1", extra_key=5)
    assert info == {"success": True, "valid_action": False, "anchor": None, "reward_components": {"a": 1.0},
                    "admissible_actions": ["x", "y"], "task_id": "t1", "extra_key": 5}
    assert set(INFO_KEYS) >= {"success", "valid_action", "anchor", "reward_components", "admissible_actions",
                              "task_id", "tool_results"}
    assert "admissible_actions" not in make_info()


def test_finish_info_defaults_anchor_to_observation():
    info = TextEnv.finish_info("room 1", {})
    assert info == {"anchor": "room 1", "reward_components": {}, "success": False, "valid_action": True}
    assert TextEnv.finish_info("obs", {"anchor": ("k", 1)})["anchor"] == ("k", 1)


def test_textenv_is_a_gymnasium_env_with_text_spaces():
    assert issubclass(TextEnv, gym.Env)
    assert isinstance(TextEnv.observation_space, Text) and isinstance(TextEnv.action_space, Text)
    env = TextEnv()
    assert env.instructions == "" and env.tools == [] and env.oracle_action() is None
    env.close()
    env.close()


class Notes(ToolEnv):
    """A minimal ToolEnv: write notes, then answer with the number of notes written."""

    tool_timeout_s = 0.3

    def __init__(self):
        super().__init__()
        self.notes: list[str] = []
        self.release = threading.Event()

        @tool
        def write(text: str, times: int = 1) -> str:
            """Write a note.

            Args:
                text: The note.
                times: How often.
            """
            if text == "crash":
                raise ValueError("cannot write 'crash'")
            self.notes.extend([text] * times)
            return f"{len(self.notes)} notes"

        @tool
        def wait() -> str:
            """Wait for a long time."""
            self.release.wait(5)
            return "done"

        @tool
        def submit(count: int) -> str:
            """Submit the answer.

            Args:
                count: How many notes there are.
            """
            return "submitted"

        self._list = [write, wait, submit]

    def tool_list(self):
        return self._list

    def reset_task(self, seed, options):
        self.notes = []
        return "Write notes.", make_info(task_id="notes")

    def score(self, action, results, answer):
        if answer is None:
            return {}, False, False
        ok = answer == str(len(self.notes))
        return {"outcome": 1.0 if ok else 0.0}, True, ok


@pytest.fixture
def notes():
    env = Notes()
    env.reset(seed=0)
    yield env
    env.release.set()
    env.close()


def call(name, **arguments):
    import json

    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def test_toolenv_runs_several_calls_and_reports_results(notes):
    obs, reward, terminated, truncated, info = notes.step(call("write", text="a") + call("write", text="b", times=2))
    assert obs == "<tool_response>\n1 notes\n</tool_response>\n<tool_response>\n3 notes\n</tool_response>"
    assert (reward, terminated, truncated, info["valid_action"]) == (0.0, False, False, True)
    assert [r.ok for r in info["tool_results"]] == [True, True]
    assert info["anchor"] == obs and all(isinstance(r, ToolResult) for r in info["tool_results"])


@pytest.mark.parametrize("action, fragment", [
    ("I think the answer is 3", "No tool call found"),
    ('<tool_call>{"name": "write", "arguments": {"text": </tool_call>', "malformed JSON"),
    (call("wrte", text="x"), "Did you mean 'write'"),
    (call("write", text=3), "'text' must be of type string"),
    (call("write"), "missing required argument(s): text"),
    (call("write", text="crash"), "ValueError: cannot write 'crash'"),
    (call("wait"), "timed out after 0.3 s"),
])
def test_toolenv_bad_calls_are_observations(notes, action, fragment):
    obs, reward, terminated, _, info = notes.step(action)
    assert fragment in obs
    assert info["valid_action"] is False and reward == 0.0 and not terminated


def test_toolenv_one_bad_call_makes_the_turn_invalid(notes):
    obs, _, _, _, info = notes.step(call("write", text="a") + call("nope"))
    assert info["valid_action"] is False and "1 notes" in obs and "unknown tool" in obs


def test_toolenv_too_many_calls(notes):
    obs, _, _, _, info = notes.step(call("write", text="a") * 10)
    assert "at most 8 tool calls per turn; 2 were ignored" in obs
    assert notes.notes == ["a"] * 8 and info["valid_action"] is False


@pytest.mark.parametrize("final", ["<answer>2</answer>", call("submit", count=2)])
def test_toolenv_final_answer_ends_the_episode(notes, final):
    notes.step(call("write", text="a", times=2))
    obs, reward, terminated, _, info = notes.step(final)
    assert terminated and info["success"] and reward == 1.0 and info["reward_components"] == {"outcome": 1.0}
    assert info["valid_action"] is True


def test_toolenv_wrong_answer_ends_unsuccessfully(notes):
    _, reward, terminated, _, info = notes.step("<answer>7</answer>")
    assert terminated and not info["success"] and reward == 0.0


def test_toolenv_tools_property_and_reset_info(notes):
    assert [t.name for t in notes.tools] == ["write", "wait", "submit"]
    assert all(isinstance(t, Tool) for t in notes.tools)
    obs, info = notes.reset(seed=1)
    assert info["task_id"] == "notes" and info["anchor"] == obs and notes.render() == obs
