"""agentgym: a gym for training and evaluating LLM agents with multi-turn reinforcement learning.

`import agentgym` stays light: it imports gymnasium and numpy, never torch, vllm, docker or playwright.
"""
import importlib

from agentgym.core import TextEnv, ToolEnv, make_info
from agentgym.errors import AgentGymError
from agentgym.horizon import ContextDefaults
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


MCP_TOOLS = "agentgym.tools.mcp:mcp_tools"


def mcp_tools(server, **kwargs):
    """The tools of an MCP server (stdio command or streamable-HTTP URL) as agentgym `Tool`s.

    Returns a list that owns the connection (`.close()` it). Needs `pip install 'agentgym[mcp]'`; see
    `agentgym.tools.mcp.mcp_tools` for the options.
    """
    # by name, like env entry points and policy loaders: the core imports no wing
    module, _, name = MCP_TOOLS.partition(":")
    return getattr(importlib.import_module(module), name)(server, **kwargs)


__all__ = ["AgentGymError", "ContextDefaults", "SuiteEntry", "Text", "TextEnv", "Tool", "ToolCall", "ToolEnv", "ToolResult",
           "Trajectory", "Turn", "TurnTable", "check_env", "list_envs", "list_suites", "make", "make_info", "mcp_tools",
           "register", "register_suite", "spec", "suite", "tool"]
