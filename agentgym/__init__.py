"""agentgym: a gym for training and evaluating LLM agents with multi-turn reinforcement learning.

`import agentgym` stays light: it imports gymnasium and numpy, never torch, vllm, docker or playwright.
"""
from agentgym.core import TextEnv, ToolEnv, make_info
from agentgym.errors import AgentGymError
from agentgym.registration import (SuiteEntry, list_envs, list_suites, make, register, register_suite, spec,
                                   suite)
from agentgym.spaces import Text
from agentgym.toolcalls import Tool, ToolCall, ToolResult, tool
from agentgym.trajectory import Trajectory, Turn, TurnTable

__version__ = "0.1.0"


def check_env(env, **kwargs):
    """Check an env (or env id) against the text-env contract; raises `CheckError` naming the failed check."""
    from agentgym.checker import check_env as _check

    return _check(env, **kwargs)


__all__ = ["AgentGymError", "SuiteEntry", "Text", "TextEnv", "Tool", "ToolCall", "ToolEnv", "ToolResult",
           "Trajectory", "Turn", "TurnTable", "check_env", "list_envs", "list_suites", "make", "make_info",
           "register", "register_suite", "spec", "suite", "tool"]
